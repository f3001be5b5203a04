//! The KV cache: every layer's keys and values, one row of `kv_dim` per position, stored as f32
//! or f16, and attention over it.
//!
//! Rows live in fixed pages of [`PAGE_POSITIONS`], allocated as positions arrive and kept across
//! resets: the cache grows without copying, so memory never passes what the positions need (in
//! wasm, memory never shrinks, and a doubling `Vec` would leave the high-water mark at twice the
//! need). A sliding-window layer keeps only its window plus [`REWIND_POSITIONS`] in a ring of
//! pages, so its cache stops growing at the window.
//!
//! Invariant: a key or value reads back the same whether it comes from the cache or from the
//! batch that produced it (the batch's rows are rounded to the storage type first), so a batch of
//! positions gives bit for bit what one position at a time gives.

use crate::quant::float::{f16_to_f32, f32_to_f16};

/// How keys and values are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    #[default]
    F32,
    /// Half the memory; values rounded to nearest even, saturating at ±65504.
    F16,
}

impl KvType {
    pub fn parse(name: &str) -> Option<KvType> {
        match name {
            "f32" => Some(KvType::F32),
            "f16" => Some(KvType::F16),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
        }
    }

    pub fn bytes(self) -> usize {
        match self {
            KvType::F32 => 4,
            KvType::F16 => 2,
        }
    }
}

/// Positions per page.
pub const PAGE_POSITIONS: usize = 64;

/// Positions a sliding-window layer keeps beyond its window, so a verify pass (at most
/// `MAX_DRAFT + 1` positions) can be rewound.
pub const REWIND_POSITIONS: usize = 64;

/// A stored element.
trait Cell: Copy + Default + Sync {
    fn store(x: f32) -> Self;
    /// What `x` reads back as once stored.
    fn round(x: f32) -> f32;
}

impl Cell for f32 {
    fn store(x: f32) -> f32 {
        x
    }
    fn round(x: f32) -> f32 {
        x
    }
}

/// f16 bits.
#[derive(Clone, Copy, Default)]
#[repr(transparent)]
struct F16(u16);

impl F16 {
    fn bits(row: &[F16]) -> &[u16] {
        // SAFETY: F16 is a transparent u16.
        unsafe { std::slice::from_raw_parts(row.as_ptr().cast::<u16>(), row.len()) }
    }
}

/// The largest finite f16: values beyond it are stored as it, not as infinity, so a large key
/// cannot turn attention scores into NaN.
const F16_MAX: f32 = 65504.0;

impl Cell for F16 {
    fn store(x: f32) -> F16 {
        F16(f32_to_f16(x.clamp(-F16_MAX, F16_MAX)))
    }
    fn round(x: f32) -> f32 {
        f16_to_f32(F16::store(x).0)
    }
}

/// One layer's keys (or values): position `p` lives in slot `p` (or `p % ring` for a window).
struct Rows<T> {
    pages: Vec<Box<[T]>>,
    width: usize,
    /// Slot count of a ring (a multiple of the page size); `None`: one slot per position.
    ring: Option<usize>,
}

impl<T: Cell> Rows<T> {
    fn slot(&self, pos: usize) -> usize {
        self.ring.map_or(pos, |r| pos % r)
    }

    /// Slots needed to hold positions `0..positions`.
    fn slots_for(&self, positions: usize) -> usize {
        self.ring.map_or(positions, |r| positions.min(r))
    }

    /// Allocates pages until positions `0..positions` have slots.
    fn ensure(&mut self, positions: usize) {
        let pages = self.slots_for(positions).div_ceil(PAGE_POSITIONS);
        while self.pages.len() < pages {
            self.pages
                .push(vec![T::default(); PAGE_POSITIONS * self.width].into_boxed_slice());
        }
    }

    fn row(&self, pos: usize) -> &[T] {
        let s = self.slot(pos);
        &self.pages[s / PAGE_POSITIONS][(s % PAGE_POSITIONS) * self.width..][..self.width]
    }

    fn write(&mut self, pos: usize, src: &[f32]) {
        let s = self.slot(pos);
        let w = self.width;
        let row = &mut self.pages[s / PAGE_POSITIONS][(s % PAGE_POSITIONS) * w..][..w];
        for (d, &x) in row.iter_mut().zip(src) {
            *d = T::store(x);
        }
    }

    fn bytes(&self) -> usize {
        self.pages.len() * PAGE_POSITIONS * self.width * std::mem::size_of::<T>()
    }
}

struct LayerKv<T> {
    k: Rows<T>,
    v: Rows<T>,
    /// Positions a query sees (the current one included), for a sliding-window layer.
    window: Option<usize>,
}

enum Layers {
    F32(Vec<LayerKv<f32>>),
    F16(Vec<LayerKv<F16>>),
}

/// One conversation's keys and values for every layer. A session owns one; a host can keep
/// others and swap them in (a cache per conversation).
pub struct KvCache {
    layers: Layers,
    kv_type: KvType,
    kv_dim: usize,
    max_positions: usize,
    /// Positions held.
    len: usize,
    /// The batch in progress wrote over ring slots that positions before it still need, so
    /// abandoning it loses the conversation.
    clobbered: bool,
}

/// The shape a cache is built for.
#[derive(Debug, Clone, Copy)]
pub struct KvShape {
    pub n_layers: usize,
    pub kv_dim: usize,
    /// The most positions it holds.
    pub max_positions: usize,
    pub kv_type: KvType,
}

/// The slots a layer with this window keeps, `None` when it keeps every position.
fn ring_slots(window: Option<usize>) -> Option<usize> {
    window.map(|w| (w + REWIND_POSITIONS).div_ceil(PAGE_POSITIONS) * PAGE_POSITIONS)
}

impl KvShape {
    /// Bytes the cache takes once it holds `positions` (pages allocated for them), given each
    /// layer's window (`windows[l]`, `None` for a global layer).
    pub fn bytes_at(&self, positions: usize, windows: &[Option<usize>]) -> u128 {
        let positions = positions.min(self.max_positions);
        windows
            .iter()
            .map(|&w| {
                let slots = ring_slots(w).map_or(positions, |r| positions.min(r));
                let rows = slots.div_ceil(PAGE_POSITIONS) * PAGE_POSITIONS;
                2 * rows as u128 * self.kv_dim as u128 * self.kv_type.bytes() as u128
            })
            .sum()
    }
}

impl KvCache {
    /// An empty cache; `windows[l]` is layer `l`'s sliding window (`None`: global).
    pub fn new(shape: KvShape, windows: &[Option<usize>]) -> KvCache {
        fn layers<T: Cell>(shape: &KvShape, windows: &[Option<usize>]) -> Vec<LayerKv<T>> {
            windows
                .iter()
                .take(shape.n_layers)
                .map(|&window| {
                    let rows = || Rows {
                        pages: Vec::new(),
                        width: shape.kv_dim,
                        ring: ring_slots(window),
                    };
                    LayerKv {
                        k: rows(),
                        v: rows(),
                        window,
                    }
                })
                .collect()
        }
        KvCache {
            layers: match shape.kv_type {
                KvType::F32 => Layers::F32(layers(&shape, windows)),
                KvType::F16 => Layers::F16(layers(&shape, windows)),
            },
            kv_type: shape.kv_type,
            kv_dim: shape.kv_dim,
            max_positions: shape.max_positions,
            len: 0,
            clobbered: false,
        }
    }

    pub fn kv_type(&self) -> KvType {
        self.kv_type
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// Layers it keeps keys and values for.
    pub fn layers(&self) -> usize {
        match &self.layers {
            Layers::F32(l) => l.len(),
            Layers::F16(l) => l.len(),
        }
    }

    /// Bytes allocated (pages are kept when positions are dropped, for reuse).
    pub fn bytes(&self) -> usize {
        fn sum<T: Cell>(layers: &[LayerKv<T>]) -> usize {
            layers.iter().map(|l| l.k.bytes() + l.v.bytes()).sum()
        }
        match &self.layers {
            Layers::F32(l) => sum(l),
            Layers::F16(l) => sum(l),
        }
    }

    /// Allocates pages for `positions` now (at most the cache's size), so that memory is taken
    /// up front rather than during a generation.
    pub fn reserve(&mut self, positions: usize) {
        let positions = positions.min(self.max_positions);
        fn ensure<T: Cell>(layers: &mut [LayerKv<T>], positions: usize) {
            for l in layers {
                l.k.ensure(positions);
                l.v.ensure(positions);
            }
        }
        match &mut self.layers {
            Layers::F32(l) => ensure(l, positions),
            Layers::F16(l) => ensure(l, positions),
        }
    }

    /// Forgets every position; pages are kept.
    pub fn clear(&mut self) {
        self.len = 0;
        self.clobbered = false;
    }

    /// The earliest position [`KvCache::truncate`] can go back to: a window layer's ring holds
    /// only its window plus [`REWIND_POSITIONS`].
    pub fn earliest_rewind(&self) -> usize {
        let slack =
            |window: Option<usize>| window.map(|w| ring_slots(Some(w)).unwrap_or(w) - w + 1);
        let windows: Vec<Option<usize>> = match &self.layers {
            Layers::F32(l) => l.iter().map(|l| l.window).collect(),
            Layers::F16(l) => l.iter().map(|l| l.window).collect(),
        };
        windows
            .into_iter()
            .filter_map(slack)
            .map(|s| self.len.saturating_sub(s))
            .max()
            .unwrap_or(0)
    }

    /// Keeps the first `len` positions, if the rings still hold what they need for it.
    pub fn truncate(&mut self, len: usize) -> bool {
        if len > self.len || len < self.earliest_rewind() {
            return false;
        }
        self.len = len;
        true
    }

    /// Becomes a copy of `src` (a cache of the same shape): its positions, slot for slot, so
    /// attention over the copy reads the very bits `src` holds. Pages already allocated are
    /// reused; false (and nothing changed) when the shapes differ.
    pub fn copy_from(&mut self, src: &KvCache) -> bool {
        fn copy<T: Cell>(dst: &mut [LayerKv<T>], src: &[LayerKv<T>], len: usize) -> bool {
            if dst.len() != src.len() {
                return false;
            }
            for (d, s) in dst.iter_mut().zip(src) {
                if d.window != s.window || d.k.ring != s.k.ring || d.k.width != s.k.width {
                    return false;
                }
            }
            for (d, s) in dst.iter_mut().zip(src) {
                for (dr, sr) in [(&mut d.k, &s.k), (&mut d.v, &s.v)] {
                    dr.ensure(len);
                    let pages = dr.slots_for(len).div_ceil(PAGE_POSITIONS);
                    for (dp, sp) in dr.pages.iter_mut().zip(&sr.pages).take(pages) {
                        dp.copy_from_slice(sp);
                    }
                }
            }
            true
        }
        if self.kv_type != src.kv_type
            || self.kv_dim != src.kv_dim
            || self.max_positions != src.max_positions
        {
            return false;
        }
        let copied = match (&mut self.layers, &src.layers) {
            (Layers::F32(d), Layers::F32(s)) => copy(d, s, src.len),
            (Layers::F16(d), Layers::F16(s)) => copy(d, s, src.len),
            _ => false,
        };
        if copied {
            self.len = src.len;
            self.clobbered = false;
        }
        copied
    }

    /// Rounds a batch's keys or values to what the cache will read back, so the batch's own
    /// positions are seen exactly as later positions will see them.
    pub fn round(&self, rows: &mut [f32]) {
        match self.kv_type {
            KvType::F32 => {}
            KvType::F16 => rows.iter_mut().for_each(|x| *x = F16::round(*x)),
        }
    }

    /// Writes the keys and values of `n = k.len() / kv_dim` positions from `len` on into layer
    /// `layer` (they count once [`KvCache::commit`] says the batch is whole).
    pub fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        let (len, kv_dim) = (self.len, self.kv_dim);
        let n = k.len() / kv_dim;
        fn write<T: Cell>(
            l: &mut LayerKv<T>,
            len: usize,
            n: usize,
            kv_dim: usize,
            k: &[f32],
            v: &[f32],
        ) -> bool {
            l.k.ensure(len + n);
            l.v.ensure(len + n);
            // A ring keeps only its last slots: earlier positions of a long batch would be
            // overwritten within the batch anyway.
            let skip = l.k.ring.map_or(0, |r| n.saturating_sub(r));
            for t in skip..n {
                l.k.write(len + t, &k[t * kv_dim..][..kv_dim]);
                l.v.write(len + t, &v[t * kv_dim..][..kv_dim]);
            }
            // Whether the batch reused slots of positions the conversation still needs if the
            // batch is abandoned: it overwrote positions [len - r, len + n - r), and position
            // `len` needs [len + 1 - w, len).
            match (l.k.ring, l.window) {
                (Some(r), Some(w)) => {
                    (len + 1).saturating_sub(w) < len.min((len + n).saturating_sub(r))
                }
                _ => false,
            }
        }
        let clobbered = match &mut self.layers {
            Layers::F32(l) => write(&mut l[layer], len, n, kv_dim, k, v),
            Layers::F16(l) => write(&mut l[layer], len, n, kv_dim, k, v),
        };
        self.clobbered |= clobbered;
    }

    /// The batch written by [`KvCache::append`] is complete: its `n` positions count.
    pub fn commit(&mut self, n: usize) {
        self.len += n;
        self.clobbered = false;
    }

    /// The batch is abandoned: returns false when it overwrote positions the conversation
    /// needs, in which case the cache is cleared.
    pub fn abandon(&mut self) -> bool {
        let kept = !self.clobbered;
        if !kept {
            self.clear();
        }
        self.clobbered = false;
        kept
    }

    /// Layer `layer`'s sliding window (positions a query sees, itself included), if it has one.
    pub(crate) fn window(&self, layer: usize) -> Option<usize> {
        match &self.layers {
            Layers::F32(l) => l[layer].window,
            Layers::F16(l) => l[layer].window,
        }
    }

    /// Position `p`'s keys (all kv heads) in layer `layer`; `p` is held and still in the ring.
    pub(crate) fn keys(&self, layer: usize, p: usize) -> Stored<'_> {
        match &self.layers {
            Layers::F32(l) => Stored::F32(l[layer].k.row(p)),
            Layers::F16(l) => Stored::F16(F16::bits(l[layer].k.row(p))),
        }
    }

    /// Position `p`'s values, as [`KvCache::keys`].
    pub(crate) fn values(&self, layer: usize, p: usize) -> Stored<'_> {
        match &self.layers {
            Layers::F32(l) => Stored::F32(l[layer].v.row(p)),
            Layers::F16(l) => Stored::F16(F16::bits(l[layer].v.row(p))),
        }
    }
}

/// A stored row as the cache holds it.
pub(crate) enum Stored<'a> {
    F32(&'a [f32]),
    /// f16 bits.
    F16(&'a [u16]),
}

#[cfg(test)]
mod tests;
