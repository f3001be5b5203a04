//! The layer cache: one entry per layer (one range read of its span), bounded by a layer count
//! and optionally by bytes, with pinning and shared fetches.
//!
//! Layers are used in a cycle (0, 1, …, n−1, 0, …, once per forward pass), the one access
//! pattern where least-recently-used eviction is at its worst: with room for c < n layers it
//! evicts each layer just before it is needed again, and every pass reads all n. So the victim
//! is the layer whose next use is furthest away in the cycle (Belady's rule, exact here): a pass
//! then reads about n − c layers (at most n − c + 1) instead of n.

use crate::pool::PooledBytes;
use crate::source::SourceError;
use futures::future::{FutureExt, LocalBoxFuture, Shared};
use lru::LruCache;
use std::rc::Rc;

pub type LayerBytes = Rc<PooledBytes>;
pub type LayerFetch = Shared<LocalBoxFuture<'static, Result<LayerBytes, SourceError>>>;

enum Slot {
    Ready(LayerBytes),
    /// In flight: everyone who asks for the layer awaits this one fetch.
    Fetching(LayerFetch),
}

/// Counters a user can read through `stats()`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub resident_layers: usize,
    pub resident_layer_bytes: u64,
    pub peak_layer_bytes: u64,
}

pub struct LayerCache {
    slots: LruCache<usize, Slot>,
    /// Bytes of every layer span, known from the metadata before any fetch.
    span_bytes: Vec<u64>,
    pins: Vec<u32>,
    capacity: usize,
    max_bytes: Option<u64>,
    bytes: u64,
    /// The layer last asked for by a forward pass: distances to next use count from it.
    cursor: usize,
    stats: CacheStats,
}

/// How a request for a layer was served.
pub enum Lookup {
    Ready(LayerBytes),
    Fetching(LayerFetch),
    /// Not cached: the caller must start a fetch and hand it to [`LayerCache::start_fetch`].
    Missing,
}

impl LayerCache {
    pub fn new(span_bytes: Vec<u64>, capacity: usize, max_bytes: Option<u64>) -> Self {
        let n = span_bytes.len();
        LayerCache {
            slots: LruCache::unbounded(),
            pins: vec![0; n],
            span_bytes,
            capacity: capacity.max(1),
            max_bytes,
            bytes: 0,
            cursor: 0,
            stats: CacheStats::default(),
        }
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            resident_layers: self.slots.len(),
            resident_layer_bytes: self.bytes,
            ..self.stats.clone()
        }
    }

    pub fn contains(&self, layer: usize) -> bool {
        self.slots.contains(&layer)
    }

    /// Looks `layer` up, making it most recently used. `count` says whether this is a demand
    /// (counted as a hit or miss) rather than a prefetch.
    pub fn lookup(&mut self, layer: usize, count: bool) -> Lookup {
        let found = match self.slots.get(&layer) {
            Some(Slot::Ready(b)) => Lookup::Ready(b.clone()),
            Some(Slot::Fetching(f)) => Lookup::Fetching(f.clone()),
            None => Lookup::Missing,
        };
        if count {
            self.cursor = layer;
            match found {
                Lookup::Missing => self.stats.misses += 1,
                // A prefetch in flight still saved a read: it counts as a hit.
                _ => self.stats.hits += 1,
            }
        }
        found
    }

    /// Registers a fetch that was just started; the layer stays pinned until `finish_fetch`.
    pub fn start_fetch(
        &mut self,
        layer: usize,
        fetch: LocalBoxFuture<'static, Result<LayerBytes, SourceError>>,
    ) -> LayerFetch {
        let shared = fetch.shared();
        self.pins[layer] += 1;
        self.slots.put(layer, Slot::Fetching(shared.clone()));
        self.bytes += self.span_bytes[layer];
        self.stats.peak_layer_bytes = self.stats.peak_layer_bytes.max(self.bytes);
        self.evict();
        shared
    }

    /// Records the outcome of a fetch: the bytes become resident, or a failed fetch is forgotten
    /// so that the next request tries again. Several awaiters of one shared fetch may each call
    /// this; only the first, which finds the slot still fetching, changes anything.
    pub fn finish_fetch(&mut self, layer: usize, result: &Result<LayerBytes, SourceError>) {
        if !matches!(self.slots.peek(&layer), Some(Slot::Fetching(_))) {
            return;
        }
        match result {
            Ok(bytes) => {
                if let Some(slot) = self.slots.peek_mut(&layer) {
                    *slot = Slot::Ready(bytes.clone());
                }
            }
            Err(_) => {
                self.slots.pop(&layer);
                self.bytes -= self.span_bytes[layer];
            }
        }
        // No eviction here: the layer just fetched is about to be used, and evicting it because
        // a computing layer is pinned would waste the read. The next unpin or fetch restores the
        // bounds.
        self.pins[layer] = self.pins[layer].saturating_sub(1);
    }

    /// Layers of `span` bytes that can still come in before the cache is at its bounds plus
    /// the one layer over them it may hold for a moment (what the memory plan counts).
    pub fn room(&self, span: u64) -> usize {
        let by_count = (self.capacity.saturating_add(1)).saturating_sub(self.slots.len());
        match self.max_bytes {
            None => by_count,
            Some(max) => {
                let left = max.saturating_add(span).saturating_sub(self.bytes);
                by_count.min(usize::try_from(left / span.max(1)).unwrap_or(usize::MAX))
            }
        }
    }

    /// A pinned layer is never evicted: it is being computed or fetched.
    pub fn pin(&mut self, layer: usize) {
        self.pins[layer] += 1;
    }

    pub fn unpin(&mut self, layer: usize) {
        self.pins[layer] = self.pins[layer].saturating_sub(1);
        self.evict();
    }

    fn over_budget(&self) -> bool {
        self.slots.len() > self.capacity || self.max_bytes.is_some_and(|m| self.bytes > m)
    }

    /// Passes until `layer` is used again, seen from the layer being computed: the next layer
    /// is 1 away, the one just computed a whole cycle.
    fn next_use(&self, layer: usize) -> usize {
        let n = self.span_bytes.len();
        (layer + n - self.cursor - 1) % n + 1
    }

    /// Evicts unpinned layers, the one needed last first, while over a bound. Pinned layers may
    /// keep the cache over its bounds for a moment (e.g. capacity 1 while the next layer is
    /// prefetched).
    fn evict(&mut self) {
        while self.over_budget() {
            let victim = self
                .slots
                .iter()
                .map(|(&l, _)| l)
                .filter(|&l| self.pins[l] == 0)
                .max_by_key(|&l| self.next_use(l));
            let Some(l) = victim else { break };
            self.slots.pop(&l);
            self.bytes -= self.span_bytes[l];
            self.stats.evictions += 1;
        }
    }

    /// Evicts down to the bounds (fetches that finished with nobody computing may leave the
    /// cache over them).
    pub fn trim(&mut self) {
        self.evict();
    }

    /// The fetches still in flight, with their layers.
    pub fn in_flight(&self) -> Vec<(usize, LayerFetch)> {
        self.slots
            .iter()
            .filter_map(|(&l, slot)| match slot {
                Slot::Fetching(f) => Some((l, f.clone())),
                Slot::Ready(_) => None,
            })
            .collect()
    }

    /// Forgets every fetch in flight (it is dropped, and what it would bring with it): a read
    /// begun by a caller whose context is gone (a canceled Workers request) can never complete.
    /// A later request for the layer reads it again. Returns how many were dropped.
    pub fn drop_fetches(&mut self) -> usize {
        let fetching: Vec<usize> = self
            .slots
            .iter()
            .filter(|(_, slot)| matches!(slot, Slot::Fetching(_)))
            .map(|(&l, _)| l)
            .collect();
        for &l in &fetching {
            self.slots.pop(&l);
            self.bytes -= self.span_bytes[l];
            self.pins[l] = self.pins[l].saturating_sub(1);
        }
        fetching.len()
    }

    /// Drops every layer (keeps counters).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.pins.iter_mut().for_each(|p| *p = 0);
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(n: usize) -> LocalBoxFuture<'static, Result<LayerBytes, SourceError>> {
        let pool = crate::pool::BufferPool::new(0);
        let bytes = PooledBytes::new(vec![0u8; n], &pool);
        Box::pin(futures::future::ready(Ok(Rc::new(bytes))))
    }

    fn fill(c: &mut LayerCache, layer: usize) {
        let f = c.start_fetch(layer, ready(10));
        let r = futures::executor::block_on(f);
        c.finish_fetch(layer, &r);
    }

    #[test]
    fn room_counts_the_layer_over_the_bounds_and_the_byte_bound() {
        let mut c = LayerCache::new(vec![10; 6], 2, None);
        assert_eq!(c.room(10), 3);
        fill(&mut c, 0);
        fill(&mut c, 1);
        assert_eq!(c.room(10), 1);
        let mut c = LayerCache::new(vec![10; 6], 5, Some(25));
        assert_eq!(c.room(10), 3);
        fill(&mut c, 0);
        assert_eq!(c.room(10), 2);
    }

    #[test]
    fn in_flight_lists_only_fetches_and_trim_restores_the_bounds() {
        let mut c = LayerCache::new(vec![10; 4], 1, None);
        fill(&mut c, 0);
        let pending = c.start_fetch(1, Box::pin(futures::future::pending()));
        drop(pending);
        let f2 = c.start_fetch(2, ready(10));
        let layers: Vec<usize> = c.in_flight().into_iter().map(|(l, _)| l).collect();
        assert_eq!(layers.len(), 2);
        assert!(layers.contains(&1) && layers.contains(&2), "{layers:?}");
        let r = futures::executor::block_on(f2);
        c.finish_fetch(2, &r);
        assert_eq!(
            c.in_flight()
                .into_iter()
                .map(|(l, _)| l)
                .collect::<Vec<_>>(),
            vec![1]
        );
        // Layer 2 finished with nobody computing: the cache is over its one-layer bound until
        // trimmed, and a fetch in flight (still pinned) is never the victim.
        c.trim();
        assert!(c.contains(1) && !c.contains(0));
    }

    #[test]
    fn dropped_fetches_are_read_again() {
        let mut c = LayerCache::new(vec![10; 3], 3, None);
        fill(&mut c, 0);
        drop(c.start_fetch(1, Box::pin(futures::future::pending())));
        drop(c.start_fetch(2, Box::pin(futures::future::pending())));
        assert_eq!(c.drop_fetches(), 2);
        assert!(c.in_flight().is_empty());
        assert!(c.contains(0) && !c.contains(1));
        assert_eq!(c.stats().resident_layer_bytes, 10);
        assert!(matches!(c.lookup(1, true), Lookup::Missing));
        fill(&mut c, 1);
        assert!(c.contains(1));
    }

    /// Runs `cycles` passes over `n` layers through a cache of `capacity`, as a host without
    /// prefetch would (demand lookup, fetch on a miss, compute pinned); the misses of each pass.
    fn passes(n: usize, capacity: usize, cycles: usize) -> Vec<usize> {
        let mut c = LayerCache::new(vec![10; n], capacity, None);
        (0..cycles)
            .map(|_| {
                let mut misses = 0;
                for l in 0..n {
                    if let Lookup::Missing = c.lookup(l, true) {
                        misses += 1;
                        fill(&mut c, l);
                    }
                    c.pin(l);
                    c.unpin(l);
                }
                misses
            })
            .collect()
    }

    #[test]
    fn a_cycle_of_layers_reads_only_what_does_not_fit() {
        // Least-recently-used would miss every layer on every pass.
        for (n, capacity) in [(10, 4), (30, 4), (30, 12), (18, 3)] {
            let misses = passes(n, capacity, 41);
            assert_eq!(misses[0], n);
            let later = &misses[1..];
            assert!(
                later.iter().all(|&m| m <= n - capacity + 1),
                "{n} {capacity}: {misses:?}"
            );
            let mean = later.iter().sum::<usize>() as f64 / later.len() as f64;
            assert!(mean >= (n - capacity) as f64, "{n} {capacity}: {mean}");
        }
        assert_eq!(passes(5, 5, 3), vec![5, 0, 0]);
        assert_eq!(passes(5, 1, 3), vec![5, 5, 5]);
        // Computing layer 0 with 1 and 2 cached and room for two: 0 goes, needed last.
        let mut c = LayerCache::new(vec![10; 3], 2, None);
        fill(&mut c, 0);
        fill(&mut c, 1);
        assert!(matches!(c.lookup(0, true), Lookup::Ready(_)));
        fill(&mut c, 2);
        assert!(!c.contains(0) && c.contains(1) && c.contains(2));
        let s = c.stats();
        assert_eq!(
            (
                s.hits,
                s.evictions,
                s.resident_layers,
                s.resident_layer_bytes
            ),
            (1, 1, 2, 20)
        );
    }

    #[test]
    fn pinned_layers_survive_and_bound_is_restored_on_unpin() {
        let mut c = LayerCache::new(vec![10; 3], 1, None);
        fill(&mut c, 0);
        c.pin(0);
        fill(&mut c, 1); // 0 pinned, 1 just fetched: both stay for now
        assert!(c.contains(0));
        c.unpin(0);
        assert!(!c.contains(0) && c.contains(1));
        assert_eq!(c.stats().peak_layer_bytes, 20);
    }

    #[test]
    fn byte_budget_evicts_too() {
        let mut c = LayerCache::new(vec![10, 10, 10], 10, Some(25));
        fill(&mut c, 0);
        fill(&mut c, 1);
        fill(&mut c, 2);
        assert_eq!(c.stats().resident_layers, 2);
        assert!(!c.contains(0));
    }

    #[test]
    fn failed_fetch_is_forgotten() {
        let mut c = LayerCache::new(vec![10; 2], 2, None);
        let err = SourceError::Read {
            start: 0,
            end: 1,
            message: "boom".into(),
        };
        let f = c.start_fetch(0, Box::pin(futures::future::ready(Err(err))));
        let r = futures::executor::block_on(f);
        c.finish_fetch(0, &r);
        assert!(!c.contains(0));
        assert_eq!(c.stats().resident_layer_bytes, 0);
        assert!(matches!(c.lookup(0, true), Lookup::Missing));
    }
}
