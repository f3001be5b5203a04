use super::*;
use crate::attention::{attend_all_with, Attention, AttentionBuffers};
use crate::quant::{available_kernels, Kernel};
use crate::sampler::Pcg32;

fn random(rng: &mut Pcg32, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.next_f32() * 2.0 - 1.0) * scale)
        .collect()
}

struct Setup {
    n_heads: usize,
    n_kv_heads: usize,
    hd: usize,
}

impl Setup {
    fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.hd
    }
}

/// A one-layer cache of `kv_type`; `ring: false` keeps every position of a window layer (what
/// attention must give with or without the ring).
fn cache(s: &Setup, kv_type: KvType, window: Option<usize>, max: usize, ring: bool) -> KvCache {
    let mut c = KvCache::new(
        KvShape {
            n_layers: 1,
            kv_dim: s.kv_dim(),
            max_positions: max,
            kv_type,
        },
        &[window],
    );
    if !ring {
        if let Layers::F32(l) = &mut c.layers {
            l[0].k.ring = None;
            l[0].v.ring = None;
        }
        if let Layers::F16(l) = &mut c.layers {
            l[0].k.ring = None;
            l[0].v.ring = None;
        }
    }
    c
}

/// Runs `total` positions of random q/k/v through `c` in batches of the given sizes (cycled),
/// as the session does (round, attend, append, commit), and returns every position's output.
/// Position p's q/k/v depend only on `seed` and the position held before it.
fn run(c: &mut KvCache, s: &Setup, total: usize, batches: &[usize], seed: u64) -> Vec<f32> {
    run_with(crate::quant::best_kernel(), c, s, total, batches, seed)
}

/// [`run`] on a chosen kernel path.
fn run_with(
    kernel: Kernel,
    c: &mut KvCache,
    s: &Setup,
    total: usize,
    batches: &[usize],
    seed: u64,
) -> Vec<f32> {
    let q_dim = s.n_heads * s.hd;
    let (mut q_all, mut k_all, mut v_all) = (Vec::new(), Vec::new(), Vec::new());
    for p in c.len()..c.len() + total {
        let mut rng = Pcg32::new(seed.wrapping_mul(1_000_003).wrapping_add(p as u64));
        q_all.extend(random(&mut rng, q_dim, 1.0));
        k_all.extend(random(&mut rng, s.kv_dim(), 3.0));
        v_all.extend(random(&mut rng, s.kv_dim(), 1.0));
    }
    let mut out = vec![0.0; total * q_dim];
    let mut buf = AttentionBuffers::default();
    let mut done = 0;
    let mut i = 0;
    while done < total {
        let n = batches[i % batches.len()].min(total - done);
        i += 1;
        let mut k = k_all[done * s.kv_dim()..(done + n) * s.kv_dim()].to_vec();
        let mut v = v_all[done * s.kv_dim()..(done + n) * s.kv_dim()].to_vec();
        c.round(&mut k);
        c.round(&mut v);
        attend_all_with(
            kernel,
            0,
            &mut [(
                &*c,
                Attention {
                    q: &q_all[done * q_dim..(done + n) * q_dim],
                    k: &k,
                    v: &v,
                    out: &mut out[done * q_dim..(done + n) * q_dim],
                    n,
                    n_heads: s.n_heads,
                    n_kv_heads: s.n_kv_heads,
                    head_dim: s.hd,
                    scale: 0.125,
                },
            )],
            &mut buf,
        );
        c.append(0, &k, &v);
        c.commit(n);
        done += n;
    }
    out
}

const GQA: Setup = Setup {
    n_heads: 6,
    n_kv_heads: 2,
    hd: 8,
};

#[test]
fn a_batch_gives_bit_for_bit_what_single_positions_give() {
    for kv_type in [KvType::F32, KvType::F16] {
        for window in [None, Some(5), Some(70)] {
            let mut one = cache(&GQA, kv_type, window, 400, true);
            let mut many = cache(&GQA, kv_type, window, 400, true);
            let a = run(&mut one, &GQA, 300, &[1], 7);
            let b = run(&mut many, &GQA, 300, &[37, 1, 9, 130, 2], 7);
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{kv_type:?} window {window:?}"
            );
        }
    }
}

/// Attention split across the matmul threads — a prompt's positions, a decoded position's kv
/// heads — gives the bits one thread gives. Wide enough heads and long enough for both splits.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn every_thread_count_attends_to_the_same_bits() {
    let wide = Setup {
        n_heads: 8,
        n_kv_heads: 4,
        hd: 32,
    };
    for kv_type in [KvType::F32, KvType::F16] {
        let attend = |t: usize| {
            let mut c = cache(&wide, kv_type, None, 400, true);
            crate::quant::with_threads(t, || run(&mut c, &wide, 400, &[130, 1, 1, 9], 3)).unwrap()
        };
        let one = attend(1);
        for t in [2, 3, 4] {
            let got = attend(t);
            assert!(
                one.iter()
                    .zip(&got)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{kv_type:?} at {t} threads"
            );
        }
    }
}

/// Every kernel path (AVX2, SIMD128, portable — those this machine runs) attends in tiles as
/// one position at a time: 300 positions cross four 64-key tiles, windows of 5, 70 and 200 start
/// mid-tile and cross tiles as they slide, heads of 20 are not a whole number of vectors, and
/// groups of 1, 3 and 4 query heads per kv head fill an item's rows unevenly.
#[test]
fn every_kernel_attends_in_tiles_as_one_position_at_a_time() {
    let shapes = [
        GQA,
        Setup {
            n_heads: 4,
            n_kv_heads: 1,
            hd: 20,
        },
        Setup {
            n_heads: 2,
            n_kv_heads: 2,
            hd: 16,
        },
    ];
    for kernel in available_kernels() {
        for s in &shapes {
            for kv_type in [KvType::F32, KvType::F16] {
                for window in [None, Some(5), Some(70), Some(200)] {
                    let mut one = cache(s, kv_type, window, 400, true);
                    let mut many = cache(s, kv_type, window, 400, true);
                    let a = run_with(kernel, &mut one, s, 300, &[1], 7);
                    let b = run_with(kernel, &mut many, s, 300, &[37, 1, 9, 130, 2, 121], 7);
                    let differ = a
                        .iter()
                        .zip(&b)
                        .filter(|(x, y)| x.to_bits() != y.to_bits())
                        .count();
                    assert_eq!(
                        differ, 0,
                        "{kernel:?} {kv_type:?} window {window:?} hd {}",
                        s.hd
                    );
                }
            }
        }
    }
}

/// SIMD128 and the portable path are both a multiply then an add, lane by lane: they give the
/// same bits (checked where both run, in wasm32; natively the portable path is alone).
#[test]
fn the_unfused_paths_agree_bit_for_bit() {
    let unfused: Vec<Kernel> = available_kernels()
        .into_iter()
        .filter(|&k| k != Kernel::Avx2)
        .collect();
    for kv_type in [KvType::F32, KvType::F16] {
        let outs: Vec<Vec<f32>> = unfused
            .iter()
            .map(|&k| {
                let mut c = cache(&GQA, kv_type, Some(70), 400, true);
                run_with(k, &mut c, &GQA, 200, &[64, 1, 50], 5)
            })
            .collect();
        for (k, out) in unfused.iter().zip(&outs) {
            assert!(
                out.iter()
                    .zip(&outs[0])
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{k:?} differs from {:?}",
                unfused[0]
            );
        }
    }
}

#[test]
fn a_ring_attends_exactly_as_keeping_every_position() {
    // 700 positions wrap a window-5 ring (128 slots) several times and a window-70 ring (192).
    for kv_type in [KvType::F32, KvType::F16] {
        for window in [Some(5), Some(70)] {
            for batches in [&[1][..], &[3, 200, 1, 64]] {
                let mut ring = cache(&GQA, kv_type, window, 1000, true);
                let mut full = cache(&GQA, kv_type, window, 1000, false);
                let a = run(&mut ring, &GQA, 700, batches, 11);
                let b = run(&mut full, &GQA, 700, batches, 11);
                assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
                assert!(ring.bytes() < full.bytes());
            }
        }
    }
}

/// Against softmax(q·k·scale)·v in f64, on every kernel path: the last positions of 200, with
/// and without a window that reaches back across tiles (heads of 4: padded to a vector).
#[test]
fn attention_matches_a_direct_computation() {
    let s = Setup {
        n_heads: 2,
        n_kv_heads: 1,
        hd: 4,
    };
    let total = 200;
    let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for p in 0..total as u64 {
        let mut rng = Pcg32::new(3 * 1_000_003 + p);
        q.extend(random(&mut rng, 8, 1.0));
        k.extend(random(&mut rng, 4, 3.0));
        v.extend(random(&mut rng, 4, 1.0));
    }
    for kernel in available_kernels() {
        for window in [None, Some(4), Some(130)] {
            let mut c = cache(&s, KvType::F32, window, 256, true);
            let out = run_with(kernel, &mut c, &s, total, &[1, 70], 3);
            for t in [63, 64, 127, 128, 199] {
                let first = window.map_or(0, |w| (t + 1usize).saturating_sub(w));
                for h in 0..2 {
                    let qh = &q[(t * 2 + h) * 4..][..4];
                    let scores: Vec<f64> = (first..=t)
                        .map(|p| {
                            (0..4)
                                .map(|i| qh[i] as f64 * k[p * 4 + i] as f64)
                                .sum::<f64>()
                                * 0.125
                        })
                        .collect();
                    let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for i in 0..4 {
                        let want: f64 = (first..=t)
                            .zip(&e)
                            .map(|(p, w)| w / z * v[p * 4 + i] as f64)
                            .sum();
                        let got = out[(t * 2 + h) * 4 + i] as f64;
                        assert!(
                            (got - want).abs() < 1e-5,
                            "{kernel:?} window {window:?} position {t} head {h} dim {i}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn f16_storage_rounds_to_nearest_and_saturates() {
    assert_eq!(F16::round(1.0), 1.0);
    assert_eq!(F16::round(1.0 + 1.0 / 4096.0), 1.0); // below half an f16 ulp
    assert_eq!(F16::round(1e6), 65504.0);
    assert_eq!(F16::round(-1e30), -65504.0);
    assert_eq!(F16::round(f32::INFINITY), 65504.0);
    let mut row = [0.1f32, -3.7, 1234.5];
    let c = cache(&GQA, KvType::F16, None, 8, true);
    c.round(&mut row);
    for (x, want) in row.iter().zip([0.1f32, -3.7, 1234.5]) {
        assert!((x - want).abs() <= want.abs() / 1024.0);
        assert_eq!(F16::round(*x), *x, "rounding is idempotent");
    }
}

#[test]
fn rewinds_reach_back_as_far_as_the_rings_hold() {
    let mut global = cache(&GQA, KvType::F32, None, 1000, true);
    run(&mut global, &GQA, 500, &[50], 1);
    assert_eq!(global.earliest_rewind(), 0);
    assert!(global.truncate(3));
    assert_eq!(global.len(), 3);
    assert!(!global.truncate(4), "forward is not a rewind");

    // Window 70 in 192 slots: position p needs p-69..p-1, so 123 positions can be dropped.
    let mut local = cache(&GQA, KvType::F32, Some(70), 1000, true);
    run(&mut local, &GQA, 500, &[50], 1);
    assert_eq!(local.earliest_rewind(), 500 - 123);
    assert!(!local.truncate(376));
    assert!(local.truncate(377));
    assert_eq!(local.len(), 377);
}

#[test]
fn a_rewound_ring_continues_as_if_the_dropped_positions_never_came() {
    // 400 positions, drop the last 60, run 100 more: equal to running those 440 straight.
    let s = &GQA;
    let mut a = cache(s, KvType::F16, Some(70), 1000, true);
    run(&mut a, s, 400, &[33], 5);
    assert!(a.truncate(340));
    let mut b = cache(s, KvType::F16, Some(70), 1000, true);
    let straight = run(&mut b, s, 340, &[33], 5);
    // Same continuation on both.
    let q_dim = s.n_heads * s.hd;
    let tail_a = run(&mut a, s, 100, &[7], 9);
    let tail_b = run(&mut b, s, 100, &[7], 9);
    assert_eq!(straight.len(), 340 * q_dim);
    assert!(tail_a
        .iter()
        .zip(&tail_b)
        .all(|(x, y)| x.to_bits() == y.to_bits()));
}

#[test]
fn abandoning_a_batch_keeps_the_conversation_unless_a_ring_was_overwritten() {
    let s = &GQA;
    let mut rng = Pcg32::new(2);
    let mut c = cache(s, KvType::F32, Some(70), 1000, true);
    run(&mut c, s, 300, &[100], 3);
    // 20 positions fit in the slack: abandoning them keeps all 300.
    let k = random(&mut rng, 20 * s.kv_dim(), 1.0);
    c.append(0, &k, &k);
    assert!(c.abandon());
    assert_eq!(c.len(), 300);
    // 150 positions overwrite slots positions 230..299 still need: the conversation is lost.
    let k = random(&mut rng, 150 * s.kv_dim(), 1.0);
    c.append(0, &k, &k);
    assert!(!c.abandon());
    assert_eq!(c.len(), 0);
    // A global layer never loses anything.
    let mut g = cache(s, KvType::F32, None, 1000, true);
    run(&mut g, s, 300, &[100], 3);
    let k = random(&mut rng, 500 * s.kv_dim(), 1.0);
    g.append(0, &k, &k);
    assert!(g.abandon());
    assert_eq!(g.len(), 300);
}

#[test]
fn memory_is_what_the_pages_for_the_positions_take() {
    let s = &GQA;
    let shape = KvShape {
        n_layers: 2,
        kv_dim: s.kv_dim(),
        max_positions: 1000,
        kv_type: KvType::F16,
    };
    let windows = [None, Some(70)];
    let mut c = KvCache::new(shape, &windows);
    assert_eq!(c.bytes(), 0);
    for positions in [1, 64, 65, 300, 1000] {
        c.reserve(positions);
        assert_eq!(c.bytes() as u128, shape.bytes_at(positions, &windows));
    }
    // Global: 1000 positions in 16 pages of 64; local: 192 slots in 3 pages; K and V; 2 bytes.
    assert_eq!(c.bytes(), (16 + 3) * 64 * 16 * 2 * 2);
    // Clearing keeps the pages for the next conversation.
    c.clear();
    assert_eq!(c.bytes(), (16 + 3) * 64 * 16 * 2 * 2);
}

#[test]
fn a_copy_attends_exactly_as_the_original_and_leaves_it_alone() {
    for kv_type in [KvType::F32, KvType::F16] {
        for window in [None, Some(5), Some(70)] {
            // 200 positions wrap the window-5 ring; the copy's destination held something else.
            let mut original = cache(&GQA, kv_type, window, 400, true);
            run(&mut original, &GQA, 200, &[64], 3);
            let mut copy = cache(&GQA, kv_type, window, 400, true);
            run(&mut copy, &GQA, 90, &[7], 11);
            assert!(copy.copy_from(&original));
            assert_eq!(copy.len(), 200);
            let a = run(&mut copy, &GQA, 50, &[9], 5);
            let b = run(&mut original, &GQA, 50, &[9], 5);
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{kv_type:?} window {window:?}"
            );
        }
    }
    // Another shape is refused, and nothing changes.
    let small = cache(&GQA, KvType::F32, None, 400, true);
    let mut other = cache(&GQA, KvType::F16, None, 400, true);
    run(&mut other, &GQA, 3, &[1], 1);
    assert!(!other.copy_from(&small));
    assert_eq!(other.len(), 3);
}
