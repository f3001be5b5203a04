//! Causal grouped-query attention over the KV cache, in tiles, with a running softmax.
//!
//! A work item is the query heads that share one kv head, at up to [`ITEM_ROWS`] / group
//! consecutive positions of a batch: its rows (position × head) sit in vector lanes. Keys and
//! values come in tiles of [`KEY_TILE`] positions, aligned to absolute positions. Per tile:
//! scores S = Q·Kᵀ, then the online softmax — a running maximum m and sum l per row — rescales
//! the row's output by e^(m_old − m_new) and adds P·V. So no n × n matrix ever exists: an item's
//! scratch is fixed ([`scratch_bytes`]), whatever the prompt's length. A sliding-window layer's
//! items visit only the tiles their windows reach.
//!
//! Invariant — bit identity: a row's result depends only on its query, the keys and values it
//! sees and the (absolute) tile boundaries. Each score accumulates over the head dimension in
//! order; maxima and sums run over a tile's keys in order; a key the row does not see scores −∞
//! and weighs exactly 0; a tile it sees nothing of leaves its state as it was (×1, +0). So a
//! prompt's rows equal the same positions decoded one at a time, whatever the other rows of
//! their item, the thread count, or the sequences batched beside them.

mod lanes;

use crate::kv::{KvCache, Stored};
use crate::quant::threads::{parts, Shared};
use crate::quant::Kernel;
use lanes::{Lanes, Portable};

/// Keys per tile; tiles start at multiples of it (the KV cache's page size, so a tile is one
/// page's rows).
pub const KEY_TILE: usize = crate::kv::PAGE_POSITIONS;

/// Query rows (positions × heads sharing a kv head) an item takes: enough to reuse each loaded
/// key and value many times — at 64, two threads reading a 4k prompt's cache scaled 1.45×, at
/// 128 1.9× — few enough that a prompt's items spread across threads and the scratch stays in
/// L2.
const ITEM_ROWS: usize = 128;

/// Head dimensions are padded with zeros to a multiple of this (every path's lane count).
const HEAD_ALIGN: usize = 8;

/// One attention call's inputs and output, row-major per position: `q` and `out` are
/// `[n][n_heads][head_dim]`, `k` and `v` `[n][n_kv_heads][head_dim]`; the keys and values
/// already rounded to the cache's storage type ([`KvCache::round`]).
pub struct Attention<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub out: &'a mut [f32],
    pub n: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
}

/// What [`attend_all`] keeps between calls.
#[derive(Default)]
pub struct AttentionBuffers {
    /// Each job's first item, positions per item, and output.
    starts: Vec<usize>,
    spans: Vec<usize>,
    outs: Vec<Shared<f32>>,
    /// Used when the items run on the calling thread.
    scratch: Scratch,
}

impl AttentionBuffers {
    /// Sizes the calling thread's scratch for this head layout now, so attention there never
    /// allocates.
    pub fn reserve(&mut self, n_heads: usize, n_kv_heads: usize, head_dim: usize) {
        let group = n_heads / n_kv_heads.max(1);
        let rows = positions_per_item(usize::MAX, group) * group;
        self.scratch.fit(
            rows,
            rows.next_multiple_of(HEAD_ALIGN),
            head_dim.next_multiple_of(HEAD_ALIGN),
        );
    }
}

/// Positions per item for a batch of `n` and `group` query heads per kv head.
fn positions_per_item(n: usize, group: usize) -> usize {
    (ITEM_ROWS / group.max(1)).clamp(1, n.max(1))
}

/// Bytes one thread's attention scratch takes at most, for this head layout.
pub fn scratch_bytes(n_heads: usize, n_kv_heads: usize, head_dim: usize) -> usize {
    let group = n_heads / n_kv_heads.max(1);
    let rows = positions_per_item(usize::MAX, group) * group;
    let (rp, hp) = (
        rows.next_multiple_of(HEAD_ALIGN),
        head_dim.next_multiple_of(HEAD_ALIGN),
    );
    4 * (hp * rp + 5 * rp + KEY_TILE * rp + rows * hp + 2 * KEY_TILE * hp)
}

/// Causal attention of a batch's queries over layer `layer` of `kv`: positions before the batch
/// from the cache, the batch's own from `a.k` / `a.v`.
pub fn attend(kv: &KvCache, layer: usize, a: Attention<'_>, buf: &mut AttentionBuffers) {
    attend_all(layer, &mut [(kv, a)], buf);
}

/// The attention of several sequences' batches over layer `layer` at once, each `(its cache,
/// its attention)`: their items share one hand-off to the matmul threads (sequences decoding
/// together would otherwise hand off one small attention each). Each item is computed by one
/// thread, as it would be alone: the same bits.
pub fn attend_all(
    layer: usize,
    jobs: &mut [(&KvCache, Attention<'_>)],
    buf: &mut AttentionBuffers,
) {
    attend_all_with(crate::quant::best_kernel(), layer, jobs, buf);
}

/// [`attend_all`] with a chosen kernel path (tests compare the paths).
#[doc(hidden)]
pub fn attend_all_with(
    kernel: Kernel,
    layer: usize,
    jobs: &mut [(&KvCache, Attention<'_>)],
    buf: &mut AttentionBuffers,
) {
    // The outputs are taken out of the jobs: items write them through pointers, each its own
    // (job, positions, kv head) spans; the jobs are shared for their inputs.
    let (mut items, mut work) = (0, 0);
    buf.starts.clear();
    buf.spans.clear();
    buf.outs.clear();
    for (kv, a) in jobs.iter_mut() {
        let span = positions_per_item(a.n, a.n_heads / a.n_kv_heads.max(1));
        buf.starts.push(items);
        buf.spans.push(span);
        items += a.n.div_ceil(span) * a.n_kv_heads;
        work += a.n * (kv.len() + a.n) * a.n_heads * a.head_dim;
        let out = std::mem::take(&mut a.out);
        buf.outs.push(Shared::new(out.as_mut_ptr()));
    }
    let jobs = &*jobs;
    let (starts, spans, outs) = (&buf.starts, &buf.spans, &buf.outs);
    let one = |item: usize, scratch: &mut Scratch| {
        let j = starts.partition_point(|&s| s <= item) - 1;
        let (kv, a) = &jobs[j];
        let i = item - starts[j];
        let t0 = i / a.n_kv_heads * spans[j];
        let it = Item {
            kv,
            layer,
            a,
            t0,
            t1: (t0 + spans[j]).min(a.n),
            g: i % a.n_kv_heads,
            out: outs[j],
        };
        run(kernel, &it, scratch);
    };
    // Interleaved: later positions attend over more.
    let ran = parts(items, work, &|part, parts| {
        let mut scratch = Scratch::default();
        for item in (part..items).step_by(parts) {
            one(item, &mut scratch);
        }
    });
    if !ran {
        for item in 0..items {
            one(item, &mut buf.scratch);
        }
    }
}

/// One work item: positions `t0..t1` of a batch, the query heads sharing kv head `g`.
struct Item<'a> {
    kv: &'a KvCache,
    layer: usize,
    a: &'a Attention<'a>,
    t0: usize,
    t1: usize,
    g: usize,
    /// The job's output; this item writes only its own rows' heads.
    out: Shared<f32>,
}

/// An item's working memory: `rp` rows padded to whole vectors, `hp` the padded head.
#[derive(Default)]
struct Scratch {
    /// `[hp][rp]`: the queries (scaled), rows in lanes.
    qt: Vec<f32>,
    /// `[rp]` each: a row's visible positions `lo..hi`, running max and sum, this tile's rescale.
    lo: Vec<f32>,
    hi: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
    alpha: Vec<f32>,
    /// `[KEY_TILE][rp]`: scores, then weights.
    s: Vec<f32>,
    /// `[rows][hp]`: the running output.
    o: Vec<f32>,
    /// `[KEY_TILE][hp]`: the tile's keys and values as f32.
    k: Vec<f32>,
    v: Vec<f32>,
}

impl Scratch {
    fn fit(&mut self, rows: usize, rp: usize, hp: usize) {
        let size = |b: &mut Vec<f32>, n: usize| {
            b.clear();
            b.resize(n, 0.0);
        };
        size(&mut self.qt, hp * rp);
        for b in [&mut self.lo, &mut self.hi, &mut self.l, &mut self.alpha] {
            size(b, rp);
        }
        self.m.clear();
        self.m.resize(rp, f32::NEG_INFINITY);
        size(&mut self.s, KEY_TILE * rp);
        size(&mut self.o, rows * hp);
        // Zeros in the padded dimensions stay: loads write only the first head_dim.
        size(&mut self.k, KEY_TILE * hp);
        size(&mut self.v, KEY_TILE * hp);
    }
}

fn run(kernel: Kernel, it: &Item<'_>, s: &mut Scratch) {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Kernel::Avx2 is only chosen (or accepted by tests) where it was detected.
        Kernel::Avx2 => unsafe { item_avx2(it, s) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Kernel::Simd128 => item::<lanes::Simd128>(it, s),
        _ => item::<Portable>(it, s),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn item_avx2(it: &Item<'_>, s: &mut Scratch) {
    item::<lanes::Avx2>(it, s)
}

/// One item, start to end.
#[inline(always)]
fn item<L: Lanes>(it: &Item<'_>, s: &mut Scratch) {
    let a = it.a;
    let (hd, g) = (a.head_dim, it.g);
    let group = a.n_heads / a.n_kv_heads;
    let q_row = a.n_heads * hd;
    let rows = (it.t1 - it.t0) * group;
    let (rp, hp) = (rows.next_multiple_of(L::N), hd.next_multiple_of(HEAD_ALIGN));
    let pos = it.kv.len();
    let window = it.kv.window(it.layer);
    s.fit(rows, rp, hp);

    // Row r = (t - t0)·group + h is query head g·group + h at batch position t; it sees
    // positions lo..hi. Padding rows copy the last real one (finite, never written out).
    for r in 0..rp {
        let (t, h) = (it.t0 + r.min(rows - 1) / group, r.min(rows - 1) % group);
        let q = &a.q[t * q_row + (g * group + h) * hd..][..hd];
        for (d, &x) in q.iter().enumerate() {
            s.qt[d * rp + r] = x * a.scale;
        }
        // Exact as f32: contexts stay far below 2^24 positions.
        let hi = pos + t + 1;
        s.hi[r] = hi as f32;
        s.lo[r] = window.map_or(0, |w| hi.saturating_sub(w)) as f32;
    }
    // Rows' ranges move forward with t: the first row's starts and ends first.
    let start = |t: usize| window.map_or(0, |w| (pos + t + 1).saturating_sub(w));
    let (first, end) = (start(it.t0), pos + it.t1);
    let (last_start, first_end) = (start(it.t1 - 1), pos + it.t0 + 1);

    let mut tile = first / KEY_TILE * KEY_TILE;
    while tile < end {
        let (ks, ke) = (tile.max(first), (tile + KEY_TILE).min(end));
        load_tile::<L>(it, ks..ke, hd, hp, s);
        scores::<L>(s, ke - ks, rp, hp);
        if last_start > ks || first_end < ke {
            mask::<L>(s, ks, ke - ks, rp);
        }
        softmax_step::<L>(s, ke - ks, rp);
        accumulate::<L>(s, ke - ks, rows, rp, hp);
        tile += KEY_TILE;
    }

    for r in 0..rows {
        let (t, h) = (it.t0 + r / group, r % group);
        let at = t * q_row + (g * group + h) * hd;
        // SAFETY: this item alone writes query head g·group + h of position t, inside the
        // job's output (`n * q_row` values).
        let out = unsafe { std::slice::from_raw_parts_mut(it.out.get().add(at), hd) };
        for (o, &x) in out.iter_mut().zip(&s.o[r * hp..]) {
            *o = x / s.l[r];
        }
    }
}

/// Keys and values of `positions` (within one tile) for kv head `g` into `s.k`, `s.v` as f32:
/// the batch's own from the attention's input, earlier ones from the cache.
#[inline(always)]
fn load_tile<L: Lanes>(
    it: &Item<'_>,
    positions: std::ops::Range<usize>,
    hd: usize,
    hp: usize,
    s: &mut Scratch,
) {
    let (a, pos) = (it.a, it.kv.len());
    let (kv_dim, off) = (a.n_kv_heads * hd, it.g * hd);
    for (j, p) in positions.enumerate() {
        let (kd, vd) = (&mut s.k[j * hp..][..hd], &mut s.v[j * hp..][..hd]);
        if p >= pos {
            let at = (p - pos) * kv_dim + off;
            kd.copy_from_slice(&a.k[at..at + hd]);
            vd.copy_from_slice(&a.v[at..at + hd]);
            continue;
        }
        for (src, dst) in [
            (it.kv.keys(it.layer, p), kd),
            (it.kv.values(it.layer, p), vd),
        ] {
            match src {
                Stored::F32(row) => dst.copy_from_slice(&row[off..off + hd]),
                Stored::F16(row) => L::widen(&row[off..off + hd], dst),
            }
        }
    }
}

/// `s.s[j][r] = Σ_d qt[d][r] · k[j][d]` for the tile's `nk` keys, each sum in order of d.
#[inline(always)]
fn scores<L: Lanes>(s: &mut Scratch, nk: usize, rp: usize, hp: usize) {
    let (qt, k, out) = (s.qt.as_ptr(), s.k.as_ptr(), s.s.as_mut_ptr());
    let vectors = rp / L::N;
    let mut j = 0;
    while j + 4 <= nk {
        // SAFETY: keys j..j+4 < nk ≤ KEY_TILE, within `Scratch::fit`'s sizes.
        unsafe { score_rows::<L, 4>(qt, k, out, j, vectors, rp, hp) };
        j += 4;
    }
    while j < nk {
        // SAFETY: as above, key j.
        unsafe { score_rows::<L, 1>(qt, k, out, j, vectors, rp, hp) };
        j += 1;
    }
}

/// Keys `j..j+KB` against every row vector.
///
/// # Safety
/// Keys `j..j+KB` are within the tile.
#[inline(always)]
unsafe fn score_rows<L: Lanes, const KB: usize>(
    qt: *const f32,
    k: *const f32,
    out: *mut f32,
    j: usize,
    vectors: usize,
    rp: usize,
    hp: usize,
) {
    // SAFETY (each call): vectors v..v+RB of rp / N; d < hp; keys per the contract.
    let mut v = 0;
    while v + 2 <= vectors {
        unsafe { score_tile::<L, KB, 2>(qt, k, out, (j, v), rp, hp) };
        v += 2;
    }
    if v < vectors {
        unsafe { score_tile::<L, KB, 1>(qt, k, out, (j, v), rp, hp) };
    }
}

/// Scores of keys `j..j+KB` for row vectors `v..v+RB`, accumulated in registers.
///
/// # Safety
/// Keys, row vectors and dimensions within `Scratch::fit`'s sizes.
#[inline(always)]
unsafe fn score_tile<L: Lanes, const KB: usize, const RB: usize>(
    qt: *const f32,
    k: *const f32,
    out: *mut f32,
    (j, v): (usize, usize),
    rp: usize,
    hp: usize,
) {
    let mut acc = [[L::splat(0.0); RB]; KB];
    for d in 0..hp {
        let mut q = [L::splat(0.0); RB];
        for (b, q) in q.iter_mut().enumerate() {
            // SAFETY: per the contract.
            *q = unsafe { L::load(qt.add(d * rp + (v + b) * L::N)) };
        }
        for (kb, acc) in acc.iter_mut().enumerate() {
            // SAFETY: per the contract.
            let key = L::splat(unsafe { *k.add((j + kb) * hp + d) });
            for (a, &q) in acc.iter_mut().zip(&q) {
                *a = L::mul_add(q, key, *a);
            }
        }
    }
    for (kb, acc) in acc.iter().enumerate() {
        for (b, &a) in acc.iter().enumerate() {
            // SAFETY: per the contract.
            unsafe { L::store(out.add((j + kb) * rp + (v + b) * L::N), a) };
        }
    }
}

/// −∞ for the scores of keys a row does not see (after its position, before its window).
#[inline(always)]
fn mask<L: Lanes>(s: &mut Scratch, ks: usize, nk: usize, rp: usize) {
    let minus_inf = L::splat(f32::NEG_INFINITY);
    for v in (0..rp).step_by(L::N) {
        // SAFETY: v + N ≤ rp elements of lo, hi and each score row j < nk ≤ KEY_TILE.
        let (lo, hi) = unsafe { (L::load(&s.lo[v]), L::load(&s.hi[v])) };
        for j in 0..nk {
            let x = L::splat((ks + j) as f32);
            let at = s.s[j * rp + v..].as_mut_ptr();
            unsafe { L::store(at, L::within(lo, hi, x, L::load(at), minus_inf)) };
        }
    }
}

/// The online softmax over one tile: each row's new maximum, the rescale of what it summed so
/// far, and the tile's weights e^(s − m) in place of its scores, summed in order of key.
#[inline(always)]
fn softmax_step<L: Lanes>(s: &mut Scratch, nk: usize, rp: usize) {
    for v in (0..rp).step_by(L::N) {
        let sc = s.s.as_mut_ptr();
        // The maximum is exact in any order: four chains, for latency.
        let mut most = [L::splat(f32::NEG_INFINITY); 4];
        for j in 0..nk {
            // SAFETY: j < nk ≤ KEY_TILE score rows of rp, v + N ≤ rp.
            most[j % 4] = L::max(most[j % 4], unsafe { L::load(sc.add(j * rp + v)) });
        }
        let tile_max = L::max(L::max(most[0], most[1]), L::max(most[2], most[3]));
        // SAFETY: v + N ≤ rp elements of m, l, alpha.
        let old = unsafe { L::load(&s.m[v]) };
        let new = L::max(old, tile_max);
        // Exactly 1 when the maximum stays (e^0 is not computed, so a row this tile adds
        // nothing to keeps its bits; and −∞ − −∞ never happens).
        let alpha = L::where_greater(
            tile_max,
            old,
            L::exp_nonpositive(L::sub(old, new)),
            L::splat(1.0),
        );
        let mut sum = L::mul(unsafe { L::load(&s.l[v]) }, alpha);
        for j in 0..nk {
            // SAFETY: as above.
            let p = L::exp_nonpositive(L::sub(unsafe { L::load(sc.add(j * rp + v)) }, new));
            unsafe { L::store(sc.add(j * rp + v), p) };
            sum = L::add(sum, p);
        }
        unsafe {
            L::store(&mut s.m[v], new);
            L::store(&mut s.l[v], sum);
            L::store(&mut s.alpha[v], alpha);
        }
    }
}

/// `o[r] = o[r] · alpha[r] + Σ_j p[j][r] · v[j]`, in order of j.
#[inline(always)]
fn accumulate<L: Lanes>(s: &mut Scratch, nk: usize, rows: usize, rp: usize, hp: usize) {
    let (p, vals, o, alpha) = (
        s.s.as_ptr(),
        s.v.as_ptr(),
        s.o.as_mut_ptr(),
        s.alpha.as_ptr(),
    );
    let vectors = hp / L::N;
    let mut r = 0;
    while r + 4 <= rows {
        // SAFETY: rows r..r+4 < rows, within `Scratch::fit`'s sizes.
        unsafe { pv_rows::<L, 4>(p, vals, o, alpha, r, vectors, nk, rp, hp) };
        r += 4;
    }
    while r < rows {
        // SAFETY: as above, row r.
        unsafe { pv_rows::<L, 1>(p, vals, o, alpha, r, vectors, nk, rp, hp) };
        r += 1;
    }
}

/// Rows `r..r+RB` over every output vector.
///
/// # Safety
/// Rows `r..r+RB` are the item's.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn pv_rows<L: Lanes, const RB: usize>(
    p: *const f32,
    vals: *const f32,
    o: *mut f32,
    alpha: *const f32,
    r: usize,
    vectors: usize,
    nk: usize,
    rp: usize,
    hp: usize,
) {
    // SAFETY (each call): vectors d..d+DB of hp / N; keys j < nk; rows per the contract.
    let mut d = 0;
    while d + 2 <= vectors {
        unsafe { pv_tile::<L, RB, 2>(p, vals, o, alpha, (r, d), nk, rp, hp) };
        d += 2;
    }
    if d < vectors {
        unsafe { pv_tile::<L, RB, 1>(p, vals, o, alpha, (r, d), nk, rp, hp) };
    }
}

/// Rows `r..r+RB`, output vectors `d..d+DB`, over the tile's keys, in registers.
///
/// # Safety
/// Rows, vectors and keys within `Scratch::fit`'s sizes.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn pv_tile<L: Lanes, const RB: usize, const DB: usize>(
    p: *const f32,
    vals: *const f32,
    o: *mut f32,
    alpha: *const f32,
    (r, d): (usize, usize),
    nk: usize,
    rp: usize,
    hp: usize,
) {
    let at = |rb: usize, db: usize| (r + rb) * hp + (d + db) * L::N;
    let mut acc = [[L::splat(0.0); DB]; RB];
    for (rb, acc) in acc.iter_mut().enumerate() {
        // SAFETY: per the contract.
        let a = L::splat(unsafe { *alpha.add(r + rb) });
        for (db, acc) in acc.iter_mut().enumerate() {
            *acc = L::mul(unsafe { L::load(o.add(at(rb, db))) }, a);
        }
    }
    for j in 0..nk {
        let mut v = [L::splat(0.0); DB];
        for (db, v) in v.iter_mut().enumerate() {
            // SAFETY: per the contract.
            *v = unsafe { L::load(vals.add(j * hp + (d + db) * L::N)) };
        }
        for (rb, acc) in acc.iter_mut().enumerate() {
            let w = L::splat(unsafe { *p.add(j * rp + r + rb) });
            for (a, &v) in acc.iter_mut().zip(&v) {
                *a = L::mul_add(w, v, *a);
            }
        }
    }
    for (rb, acc) in acc.iter().enumerate() {
        for (db, &a) in acc.iter().enumerate() {
            unsafe { L::store(o.add(at(rb, db)), a) };
        }
    }
}
