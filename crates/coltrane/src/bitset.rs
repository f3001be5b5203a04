//! A set of token ids as a bitset over the vocabulary: masks are combined a word at a time.

/// Bit `id` set = token `id` is in the set.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TokenSet {
    words: Vec<u64>,
    len: usize,
}

impl TokenSet {
    pub fn empty(len: usize) -> TokenSet {
        TokenSet {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    pub fn full(len: usize) -> TokenSet {
        let mut s = TokenSet {
            words: vec![u64::MAX; len.div_ceil(64)],
            len,
        };
        s.trim();
        s
    }

    /// Clears the bits past `len` in the last word (they are never members).
    fn trim(&mut self) {
        if !self.len.is_multiple_of(64) {
            if let Some(last) = self.words.last_mut() {
                *last &= (1u64 << (self.len % 64)) - 1;
            }
        }
    }

    /// The vocabulary size this set ranges over.
    pub fn universe(&self) -> usize {
        self.len
    }

    pub fn words(&self) -> &[u64] {
        &self.words
    }

    pub fn insert(&mut self, id: u32) {
        let i = id as usize;
        if i < self.len {
            self.words[i / 64] |= 1 << (i % 64);
        }
    }

    pub fn remove(&mut self, id: u32) {
        let i = id as usize;
        if i < self.len {
            self.words[i / 64] &= !(1 << (i % 64));
        }
    }

    pub fn contains(&self, id: u32) -> bool {
        let i = id as usize;
        i < self.len && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    pub fn copy_from(&mut self, other: &TokenSet) {
        self.len = other.len;
        self.words.clear();
        self.words.extend_from_slice(&other.words);
    }

    pub fn union_with(&mut self, other: &TokenSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    pub fn intersect_with(&mut self, other: &TokenSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= b;
        }
    }

    pub fn subtract(&mut self, other: &TokenSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= !b;
        }
    }

    /// Member ids in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let bit = w.trailing_zeros();
                w &= w - 1;
                Some((i * 64) as u32 + bit)
            })
        })
    }

    /// Ids in `0..len` that are not members, in increasing order.
    pub fn iter_missing(&self) -> impl Iterator<Item = u32> + '_ {
        let len = self.len;
        self.words.iter().enumerate().flat_map(move |(i, &w)| {
            let mut w = !w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let bit = w.trailing_zeros();
                w &= w - 1;
                Some((i * 64) as u32 + bit)
            })
            .filter(move |&id| (id as usize) < len)
        })
    }

    /// Writes −inf into `logits` at every id not in the set; returns how many it wrote.
    pub fn mask_logits(&self, logits: &mut [f32]) -> usize {
        let mut changed = 0;
        for (i, &w) in self.words.iter().enumerate() {
            if w == u64::MAX {
                continue;
            }
            let base = i * 64;
            let mut missing = !w;
            while missing != 0 {
                let id = base + missing.trailing_zeros() as usize;
                missing &= missing - 1;
                if let Some(l) = logits.get_mut(id) {
                    if *l != f32::NEG_INFINITY {
                        changed += 1;
                    }
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations() {
        let mut a = TokenSet::empty(130);
        for id in [0, 63, 64, 129, 130, 500] {
            a.insert(id);
        }
        assert_eq!(a.iter().collect::<Vec<_>>(), [0, 63, 64, 129]);
        assert_eq!(a.count(), 4);
        let full = TokenSet::full(130);
        assert_eq!(full.count(), 130);
        assert_eq!(a.iter_missing().count(), 126);
        let mut b = full.clone();
        b.subtract(&a);
        assert_eq!(b.count(), 126);
        b.intersect_with(&a);
        assert!(b.is_empty());
        b.union_with(&a);
        assert_eq!(b, a);
        assert!(a.contains(63) && !a.contains(62) && !a.contains(1000));
        let mut logits = vec![0.0f32; 130];
        logits[5] = f32::NEG_INFINITY;
        assert_eq!(a.mask_logits(&mut logits), 125);
        assert_eq!(logits.iter().filter(|l| l.is_finite()).count(), 4);
    }
}
