//! A trie over byte strings with the distance from each node to the nearest end: how the
//! matcher walks object keys and literal values, and knows the cheapest way to finish one.

/// A byte trie over a set of strings; node 0 is the root.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ByteTrie {
    children: Vec<Vec<(u8, u32)>>,
    /// The string index ending at each node, if any.
    end: Vec<Option<u32>>,
    /// Fewest bytes from each node to the end of some string.
    to_end: Vec<u32>,
}

impl ByteTrie {
    pub fn new<'a>(strings: impl IntoIterator<Item = &'a [u8]>) -> ByteTrie {
        let mut t = ByteTrie {
            children: vec![Vec::new()],
            end: vec![None],
            to_end: Vec::new(),
        };
        for (i, s) in strings.into_iter().enumerate() {
            let mut node = 0usize;
            for &b in s {
                node = match t.children[node].iter().find(|c| c.0 == b) {
                    Some(&(_, next)) => next as usize,
                    None => {
                        t.children.push(Vec::new());
                        t.end.push(None);
                        let next = t.children.len() - 1;
                        t.children[node].push((b, next as u32));
                        next
                    }
                };
            }
            t.end[node].get_or_insert(i as u32);
        }
        // Children are created after their parents: one backward pass finds the distances.
        t.to_end = vec![u32::MAX; t.children.len()];
        for n in (0..t.children.len()).rev() {
            let below = t.children[n]
                .iter()
                .map(|&(_, c)| t.to_end[c as usize].saturating_add(1))
                .min()
                .unwrap_or(u32::MAX);
            t.to_end[n] = if t.end[n].is_some() { 0 } else { below };
        }
        t
    }

    pub fn child(&self, node: u32, b: u8) -> Option<u32> {
        self.children[node as usize]
            .iter()
            .find(|c| c.0 == b)
            .map(|c| c.1)
    }

    /// The children of `node`.
    pub fn children(&self, node: u32) -> impl Iterator<Item = u32> + '_ {
        self.children[node as usize].iter().map(|c| c.1)
    }

    pub fn end(&self, node: u32) -> Option<u32> {
        self.end[node as usize]
    }

    pub fn to_end(&self, node: u32) -> u32 {
        self.to_end[node as usize]
    }
}
