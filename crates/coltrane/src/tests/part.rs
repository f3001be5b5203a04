//! A step on part of the logits against the same step on all of them: the same report, counts,
//! known logits and masks, every unknown logit under the bound it returns — for the class tier,
//! the folds, eddy bans, JSON, each prosody mode and fallback threshold, with the logits split
//! into shards that each send their largest few (then every one above the threshold asked for).

use super::*;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Logits like a model's: a broad bulk, a few tokens standing out, and now and then a special
/// token on top (so the class tier's fallback has something to weigh).
fn logits(rng: &mut Rng, v: &Vocab, spread: f32) -> Vec<f32> {
    let mut l: Vec<f32> = (0..v.len())
        .map(|_| (0..4).map(|_| rng.unit()).sum::<f32>() * spread)
        .collect();
    for _ in 0..3 {
        let id = rng.next() as usize % v.len();
        l[id] += 4.0 + 6.0 * rng.unit();
    }
    if rng.next().is_multiple_of(4) {
        let special = v.len() - 2; // <|im_start|>
        l[special] += 8.0 + 8.0 * rng.unit();
    }
    l
}

/// What a coordinator knows after asking each shard for its `k` largest (or, with `above`,
/// every logit at least that): the known logits, −inf for the rest, and the largest of the rest.
fn known(
    logits: &[f32],
    shards: usize,
    k: usize,
    above: Option<f32>,
) -> (Vec<f32>, f32, Vec<bool>) {
    let width = logits.len().div_ceil(shards);
    let mut v = vec![f32::NEG_INFINITY; logits.len()];
    let mut sent = vec![false; logits.len()];
    let mut bound = f32::NEG_INFINITY;
    for a in (0..logits.len()).step_by(width) {
        let b = (a + width).min(logits.len());
        let mut ids: Vec<usize> = (a..b).collect();
        ids.sort_by(|&x, &y| logits[y].total_cmp(&logits[x]).then(x.cmp(&y)));
        for (rank, &id) in ids.iter().enumerate() {
            let send = match above {
                Some(t) => logits[id] >= t,
                None => rank < k,
            };
            if send {
                v[id] = logits[id];
                sent[id] = true;
            } else {
                bound = bound.max(logits[id]);
            }
        }
    }
    (v, bound, sent)
}

#[derive(Debug, Default)]
struct Rounds {
    first: usize,
    above: usize,
    whole: usize,
    /// Steps whose fallback relaxed a tier, and of those, the ones settled in the first round.
    relaxed: usize,
    relaxed_first: usize,
}

/// Runs `steps` steps of `cfg` on both, the partial one asking as a coordinator would; returns
/// the rounds it took.
fn compare(cfg: ColtraneConfig, seed: u64, spread: f32, shards: usize, k: usize) -> Rounds {
    let v = test_vocab();
    let (mut whole, mut part) = (coltrane(cfg.clone()), coltrane(cfg.clone()));
    let mut rng = Rng(seed | 1);
    let mut rounds = Rounds::default();
    let budget = 24;
    // A short cycle the text falls into now and then, for the eddy tier.
    let cycle = tokenize(&v, b" the cat");
    for step in 0..budget {
        let remaining = Some(budget - step);
        let all = logits(&mut rng, &v, spread);
        let mut want = all.clone();
        let report = whole.apply(&mut want, remaining, None);
        let before = part.metrics();
        let mut above = None;
        let (got, after, sent) = loop {
            let (mut got, bound, sent) = match above {
                Some(f32::NEG_INFINITY) => (all.clone(), f32::NEG_INFINITY, vec![true; all.len()]),
                _ => known(&all, shards, k, above),
            };
            match part.apply_part(&mut got, bound, remaining, None) {
                Ok((r, after)) => {
                    assert_eq!(r, report, "step {step} of {cfg:?}");
                    break (got, after, sent);
                }
                Err(t) => {
                    assert!(bound > f32::NEG_INFINITY, "every logit known, yet {t}");
                    assert_eq!(part.metrics(), before, "nothing counted");
                    above = Some(t);
                }
            }
        };
        match above {
            None => rounds.first += 1,
            Some(f32::NEG_INFINITY) => rounds.whole += 1,
            Some(_) => rounds.above += 1,
        }
        if report.relaxed > 0 {
            rounds.relaxed += 1;
            rounds.relaxed_first += usize::from(above.is_none());
        }
        assert_eq!(part.metrics(), whole.metrics(), "step {step} of {cfg:?}");
        for (id, (&g, &w)) in got.iter().zip(&want).enumerate() {
            match sent[id] {
                true => assert_eq!(g.to_bits(), w.to_bits(), "token {id} at step {step}"),
                false => assert!(w <= after, "unknown {id}: {w} above the bound {after}"),
            }
        }
        // The same token into both: the best allowed, or the cycle's next now and then.
        let token = match rng.next() % 3 {
            0 => cycle[step % cycle.len()],
            _ => argmax(&want).unwrap_or(eos(&v)),
        };
        assert_eq!(whole.accept(token).is_ok(), part.accept(token).is_ok());
    }
    rounds
}

fn argmax(l: &[f32]) -> Option<u32> {
    fallback::argmax(l).filter(|&t| l[t as usize].is_finite())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn a_step_on_part_of_the_logits_is_the_step_on_all(
        seed in any::<u64>(),
        preset in prop::sample::select(vec![None, Some(Preset::Balanced), Some(Preset::Json)]),
        eddy in any::<bool>(),
        prosody in prop::sample::select(vec![ProsodyMode::Off, ProsodyMode::Bias, ProsodyMode::Observe]),
        fallback_mass in prop::sample::select(vec![0.0f64, 0.05, 0.5, 0.95]),
        spread in prop::sample::select(vec![0.5f32, 2.0]),
        shards in 1usize..4,
        k in prop::sample::select(vec![1usize, 4, 16]),
    ) {
        let cfg = ColtraneConfig {
            preset,
            eddy: eddy.then_some(EddyConfig { ngram: 8, repeats: 2 }),
            prosody,
            fallback_mass,
            ..ColtraneConfig::default()
        };
        compare(cfg, seed, spread, shards, k);
    }
}

/// The OpenAI routes' default (the class tier, its fallback at 5%, prosody's bias) from each
/// shard's largest 16: most steps settle at once — a fallback that relaxes the class tier too —
/// the rest with a threshold round.
#[test]
fn the_default_chat_step_settles_from_a_few_logits() {
    let cfg = ColtraneConfig {
        prosody: ProsodyMode::Bias,
        ..ColtraneConfig::default()
    };
    let mut total = Rounds::default();
    for seed in 1..9 {
        for spread in [0.5, 2.0] {
            let r = compare(cfg.clone(), seed, spread, 2, 16);
            total.first += r.first;
            total.above += r.above;
            total.whole += r.whole;
            total.relaxed += r.relaxed;
            total.relaxed_first += r.relaxed_first;
        }
    }
    assert!(total.first > 3 * (total.above + total.whole), "{total:?}");
    assert!(total.relaxed_first > 0, "{total:?}");
}
