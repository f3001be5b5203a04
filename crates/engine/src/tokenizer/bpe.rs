//! Byte-level BPE: the GPT-2 byte alphabet and the merge loop.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// The char GPT-2 spells byte `b` with: printable Latin-1 bytes stand for themselves, the other
/// 68 bytes (controls, space, DEL, NBSP, soft hyphen…) take U+0100.. in byte order, so every
/// token is printable text without spaces.
pub fn byte_to_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    // 0x100 + rank < 0x100 + 68, always a valid char.
    char::from_u32(0x100 + rank).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The inverse of [`byte_to_char`] over its 256 chars (all below U+0144).
pub fn char_to_byte_table() -> [Option<u8>; 0x144] {
    let mut table = [None; 0x144];
    for b in 0..=255u8 {
        table[byte_to_char(b) as usize] = Some(b);
    }
    table
}

/// Rank and result of each merge, keyed by the ids of its two halves.
#[derive(Debug, Default)]
pub struct Merges {
    pairs: HashMap<(u32, u32), Merge>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Merge {
    rank: u32,
    merged: u32,
}

impl Merges {
    pub fn with_capacity(n: usize) -> Self {
        Self {
            pairs: HashMap::with_capacity(n),
        }
    }

    /// Records a merge; a pair listed twice keeps its last rank, as in Hugging Face's BPE (whose
    /// merge map is a dict built in list order).
    pub fn insert(&mut self, left: u32, right: u32, rank: u32, merged: u32) {
        self.pairs.insert((left, right), Merge { rank, merged });
    }

    fn get(&self, left: u32, right: u32) -> Option<Merge> {
        self.pairs.get(&(left, right)).copied()
    }

    /// Applies merges to `ids` in place: always the lowest-ranked adjacent pair, leftmost first
    /// among equal ranks (what Hugging Face's BPE does).
    pub fn apply(&self, ids: &mut Vec<u32>) {
        match ids.len() {
            0 | 1 => {}
            // Short pieces (most words) are cheaper to rescan than to run through a heap.
            2..=16 => self.apply_by_scan(ids),
            _ => self.apply_by_heap(ids),
        }
    }

    fn apply_by_scan(&self, ids: &mut Vec<u32>) {
        loop {
            let best = ids
                .windows(2)
                .enumerate()
                .filter_map(|(at, pair)| self.get(pair[0], pair[1]).map(|m| (m.rank, at, m)))
                .min_by_key(|&(rank, at, _)| (rank, at));
            let Some((_, at, merge)) = best else { return };
            ids[at] = merge.merged;
            ids.remove(at + 1);
        }
    }

    fn apply_by_heap(&self, ids: &mut Vec<u32>) {
        const NONE: usize = usize::MAX;
        struct Symbol {
            id: u32,
            prev: usize,
            next: usize,
            alive: bool,
        }
        let n = ids.len();
        let mut symbols: Vec<Symbol> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| Symbol {
                id,
                prev: if i == 0 { NONE } else { i - 1 },
                next: if i + 1 == n { NONE } else { i + 1 },
                alive: true,
            })
            .collect();
        // Entries go stale when a neighbour merges; a popped entry is checked against the
        // current pair at its position, and a merge's rank identifies its pair uniquely.
        let mut heap = BinaryHeap::new();
        for at in 0..n - 1 {
            if let Some(m) = self.get(symbols[at].id, symbols[at + 1].id) {
                heap.push(Reverse((m.rank, at)));
            }
        }
        while let Some(Reverse((rank, at))) = heap.pop() {
            let left = &symbols[at];
            if !left.alive || left.next == NONE {
                continue;
            }
            let right_at = left.next;
            let Some(merge) = self.get(left.id, symbols[right_at].id) else {
                continue;
            };
            if merge.rank != rank {
                continue;
            }
            let after = symbols[right_at].next;
            symbols[right_at].alive = false;
            symbols[at].id = merge.merged;
            symbols[at].next = after;
            if after != NONE {
                symbols[after].prev = at;
                if let Some(m) = self.get(merge.merged, symbols[after].id) {
                    heap.push(Reverse((m.rank, at)));
                }
            }
            let before = symbols[at].prev;
            if before != NONE {
                if let Some(m) = self.get(symbols[before].id, merge.merged) {
                    heap.push(Reverse((m.rank, before)));
                }
            }
        }
        ids.clear();
        ids.extend(symbols.iter().filter(|s| s.alive).map(|s| s.id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_alphabet_is_gpt2s() {
        assert_eq!(byte_to_char(b'a'), 'a');
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(0), '\u{100}');
        assert_eq!(byte_to_char(0xAD), 'Ń');
        let table = char_to_byte_table();
        for b in 0..=255u8 {
            assert_eq!(table[byte_to_char(b) as usize], Some(b));
        }
        assert_eq!(table.iter().flatten().count(), 256);
    }

    /// Both merge strategies agree on random inputs over a small merge table.
    #[test]
    fn scan_and_heap_agree() {
        // Ids 0..4 are symbols; merges build 4=(0,1), 5=(4,2), 6=(1,1), 7=(6,0), 8=(3,3).
        let mut merges = Merges::default();
        for (rank, &(l, r, m)) in [(0, 1, 4), (4, 2, 5), (1, 1, 6), (6, 0, 7), (3, 3, 8)]
            .iter()
            .enumerate()
        {
            merges.insert(l, r, rank as u32, m);
        }
        let mut seed = 0x1234_5678u32;
        for len in 0..60 {
            let input: Vec<u32> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    seed % 4
                })
                .collect();
            let mut by_scan = input.clone();
            merges.apply_by_scan(&mut by_scan);
            let mut by_heap = input.clone();
            if len > 1 {
                merges.apply_by_heap(&mut by_heap);
            }
            assert_eq!(by_scan, by_heap, "input {input:?}");
        }
    }

    #[test]
    fn equal_ranks_merge_leftmost_first() {
        let mut merges = Merges::default();
        merges.insert(0, 0, 0, 1);
        let mut ids = vec![0, 0, 0];
        merges.apply(&mut ids);
        assert_eq!(ids, [1, 0]);
        let mut long = vec![0; 33];
        merges.apply(&mut long);
        assert_eq!(long, [1; 16].iter().copied().chain([0]).collect::<Vec<_>>());
    }
}
