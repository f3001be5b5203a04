//! Picks from part of the logits against picks from all of them: the same tokens, draws and
//! reports, step after step, for every sampling setting and penalty, with the logits split into
//! shards that each send their largest few (then, when asked, every one above a threshold).

use super::*;
use crate::health::HealthSums;
use crate::sampler::{Pcg32, SamplerConfig};
use proptest::prelude::*;

/// Logits shaped like a language model's: a broad bulk and a few standing out.
fn lm_logits(rng: &mut Pcg32, vocab: usize, spread: f32) -> Vec<f32> {
    (0..vocab)
        .map(|_| {
            // A sum of uniforms: roughly normal.
            let g: f32 = (0..4).map(|_| rng.next_f32()).sum::<f32>() - 2.0;
            let peak = match rng.next_u32() % 200 {
                0 => 6.0 + 4.0 * rng.next_f32(),
                _ => 0.0,
            };
            g * spread + peak
        })
        .collect()
}

/// A head shard's answer: its `k` largest logits (largest first, lowest id on ties) and the
/// largest of the rest.
fn top_of(slice: &[f32], first: usize, k: usize) -> (Vec<(u32, f32)>, f32) {
    let mut all: Vec<(u32, f32)> = (slice.iter().enumerate())
        .map(|(i, &l)| ((first + i) as u32, l))
        .collect();
    all.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let bound = all.get(k).map_or(f32::NEG_INFINITY, |e| e.1);
    all.truncate(k);
    (all, bound)
}

/// Every logit of a shard at least `t`, and the largest of the rest.
fn above_of(slice: &[f32], first: usize, t: f32) -> (Vec<(u32, f32)>, f32) {
    let mut sent = Vec::new();
    let mut bound = f32::NEG_INFINITY;
    for (i, &l) in slice.iter().enumerate() {
        if l >= t {
            sent.push(((first + i) as u32, l));
        } else {
            bound = bound.max(l);
        }
    }
    (sent, bound)
}

/// The vector a coordinator builds from the shards' answers: known logits, −inf elsewhere, and
/// the largest bound.
fn assemble(vocab: usize, answers: &[(Vec<(u32, f32)>, f32)]) -> (Vec<f32>, f32) {
    let mut v = vec![f32::NEG_INFINITY; vocab];
    let mut bound = f32::NEG_INFINITY;
    for (sent, b) in answers {
        for &(id, l) in sent {
            v[id as usize] = l;
        }
        bound = bound.max(*b);
    }
    (v, bound)
}

#[derive(Debug, Default)]
struct Rounds {
    first: usize,
    above: usize,
    whole: usize,
}

/// With the logits of `watch` too (the tokens the stages change), as a shard answers them.
fn watching(
    (mut sent, bound): (Vec<(u32, f32)>, f32),
    slice: &[f32],
    first: usize,
    watch: &[u32],
) -> (Vec<(u32, f32)>, f32) {
    for &id in watch {
        let i = id as usize;
        if (first..first + slice.len()).contains(&i) && !sent.iter().any(|e| e.0 == id) {
            sent.push((id, slice[i - first]));
        }
    }
    (sent, bound)
}

/// One step through the partial path, asking as a coordinator would: the top `k` of each
/// shard (and, sampling at `sums`' temperature, its level sums and the logits of the tokens
/// the stages change), then every logit above the threshold named, then all of them.
#[allow(clippy::too_many_arguments)]
fn partial_step(
    p: &mut Pipeline,
    logits: &[f32],
    shards: usize,
    k: usize,
    sums: Option<f32>,
    health: bool,
    ctx: &StepContext,
    rounds: &mut Rounds,
) -> StepInfo {
    let vocab = logits.len();
    let width = vocab.div_ceil(shards);
    let slices = || {
        (0..vocab)
            .step_by(width)
            .map(|a| (a, (a + width).min(vocab)))
    };
    let touched = match sums.is_some() || health {
        true => p.touched(ctx),
        false => None,
    };
    // A monitor's sums need every token the stages change named (else every logit is read).
    let health_sums = (health && touched.is_some()).then(|| {
        let removed = touched
            .as_ref()
            .map(|t| t.removed_ranges())
            .unwrap_or_default();
        let parts: Vec<HealthSums> = (slices())
            .map(|(a, b)| HealthSums::of(&logits[a..b], a, &removed))
            .collect();
        HealthSums::merge(&parts)
    });
    let health_sums = health_sums.as_ref();
    let touched = touched.unwrap_or_default();
    let (watch, excluded) = (&touched.changed, touched.removed_ranges());
    let level_sums: Option<Vec<LevelSums>> = sums.map(|t| {
        (slices())
            .filter_map(|(a, b)| LevelSums::of_except(&logits[a..b], a, t, &excluded))
            .collect()
    });
    let level_sums = level_sums.as_deref();
    let answers: Vec<_> = slices()
        .map(|(a, b)| watching(top_of(&logits[a..b], a, k), &logits[a..b], a, watch))
        .collect();
    let (mut v, bound) = assemble(vocab, &answers);
    rounds.first += 1;
    let t = match p
        .sample_partial(&mut v, bound, level_sums, health_sums, ctx)
        .unwrap()
    {
        PartialPick::Decided(step) => return *step,
        PartialPick::Above(t) => t,
        PartialPick::Whole => f32::NEG_INFINITY,
    };
    if t > f32::NEG_INFINITY {
        rounds.above += 1;
        let answers: Vec<_> = slices()
            .map(|(a, b)| watching(above_of(&logits[a..b], a, t), &logits[a..b], a, watch))
            .collect();
        let (mut v, bound) = assemble(vocab, &answers);
        assert!(
            bound < t,
            "a threshold round leaves nothing at or above it unknown"
        );
        let again = p
            .sample_partial(&mut v, bound, level_sums, health_sums, ctx)
            .unwrap();
        if let PartialPick::Decided(step) = again {
            return *step;
        }
    }
    rounds.whole += 1;
    let (mut v, bound) = (logits.to_vec(), f32::NEG_INFINITY);
    if health {
        // Every logit known: the coordinator makes the whole pick, as one process does.
        return p.sample_in(&mut v, ctx).unwrap();
    }
    match p.sample_partial(&mut v, bound, None, None, ctx).unwrap() {
        PartialPick::Decided(step) => *step,
        other => panic!("every logit known, yet {other:?}"),
    }
}

fn pipeline(cfg: &SamplerConfig) -> Pipeline {
    Pipeline::new(&DecodeConfig {
        sampling: cfg.clone(),
        ..DecodeConfig::default()
    })
    .unwrap()
}

/// A vocabulary of `n` tokens for COLTRANE: the bytes, words, a sentence end every 50th, two
/// special tokens and end-of-text last.
fn coltrane_index(n: usize) -> std::sync::Arc<coltrane::Index> {
    // Built once: every pipeline of the property test shares it.
    static INDEX: std::sync::OnceLock<std::sync::Arc<coltrane::Index>> = std::sync::OnceLock::new();
    let index = INDEX.get_or_init(|| make_index(n));
    assert_eq!(index.vocab.len(), n);
    index.clone()
}

fn make_index(n: usize) -> std::sync::Arc<coltrane::Index> {
    let mut tokens: Vec<(coltrane::TokenKind, Vec<u8>)> = (0..=255u8)
        .map(|b| (coltrane::TokenKind::Text, vec![b]))
        .collect();
    for i in 256..n - 3 {
        let text = match i % 50 {
            0 => format!("{}.", "!?".repeat(i % 3)),
            _ => format!(" w{i}"),
        };
        tokens.push((coltrane::TokenKind::Text, text.into_bytes()));
    }
    for special in ["<|im_start|>", "<|im_sep|>", "<|end|>"] {
        tokens.push((coltrane::TokenKind::Special, special.as_bytes().to_vec()));
    }
    let eos = n as u32 - 1;
    let vocab = coltrane::Vocab::new(tokens.iter().map(|(k, b)| (*k, b.as_slice())), &[eos]);
    std::sync::Arc::new(coltrane::Index::new(vocab.unwrap()))
}

/// The sampler's pipeline with, if given, COLTRANE's default (class) tier and that prosody.
fn pipeline_with(
    cfg: &SamplerConfig,
    prosody: Option<coltrane::ProsodyMode>,
    vocab: usize,
) -> Pipeline {
    let mut p = pipeline(cfg);
    if let Some(prosody) = prosody {
        let cfg = coltrane::ColtraneConfig {
            prosody,
            ..coltrane::ColtraneConfig::default()
        };
        let stage = ColtraneStage::new(coltrane_index(vocab), cfg).unwrap();
        p.push_stage(Box::new(stage));
    }
    p
}

/// Runs `steps` steps both ways on the same logits; returns the rounds the partial path took.
fn compare(
    cfg: &SamplerConfig,
    seed: u64,
    vocab: usize,
    spread: f32,
    shards: usize,
    k: usize,
) -> Rounds {
    compare_with(cfg, None, false, false, seed, vocab, spread, shards, k)
}

/// [`compare`] with COLTRANE's class tier and `prosody`, over a budget of 12 tokens (so that
/// prosody leans in the last steps), with the shards' level sums when `sums`, and the health
/// monitor watching (from the shards' health sums) when `health`.
#[allow(clippy::too_many_arguments)]
fn compare_with(
    cfg: &SamplerConfig,
    prosody: Option<coltrane::ProsodyMode>,
    sums: bool,
    health: bool,
    seed: u64,
    vocab: usize,
    spread: f32,
    shards: usize,
    k: usize,
) -> Rounds {
    let mut whole = pipeline_with(cfg, prosody, vocab);
    let mut part = pipeline_with(cfg, prosody, vocab);
    if health {
        whole.watch(crate::health::HealthConfig::default());
        part.watch(crate::health::HealthConfig::default());
    }
    let mut rng = Pcg32::new(seed);
    let mut rounds = Rounds::default();
    const STEPS: usize = 12;
    for step in 0..STEPS {
        let ctx = StepContext {
            remaining: Some(STEPS - step),
            budget: Some(STEPS),
            clock: None,
        };
        let mut logits = lm_logits(&mut rng, vocab, spread);
        if rng.next_u32().is_multiple_of(4) {
            // A special token on top now and then: the class tier's fallback weighs it.
            logits[vocab - 3] += 6.0 + 6.0 * rng.next_f32();
        }
        let want = whole.sample_in(&mut logits.clone(), &ctx).unwrap();
        let t = (sums && cfg.temperature > 0.0).then_some(cfg.temperature);
        let got = partial_step(&mut part, &logits, shards, k, t, health, &ctx, &mut rounds);
        let what = format!("step {step} of {cfg:?} and {prosody:?}, {shards} shards of top {k}");
        assert_eq!(got.token, want.token, "{what}");
        assert_eq!(got.pick, want.pick, "{what}");
        assert_eq!(got.stages, want.stages, "{what}");
        assert_eq!(got.candidates, want.candidates, "{what}");
        assert_eq!(got.health, want.health, "{what}");
    }
    rounds
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]
    #[test]
    fn partial_picks_are_the_whole_logits_picks(
        seed in any::<u64>(),
        temperature in prop::sample::select(vec![0.0f32, 0.3, 0.7, 1.0, 1.6]),
        top_k in prop::sample::select(vec![0usize, 1, 5, 40]),
        top_p in prop::sample::select(vec![1.0f32, 0.95, 0.5]),
        min_p in prop::sample::select(vec![0.0f32, 0.05]),
        repeat_penalty in prop::sample::select(vec![1.0f32, 1.3, 0.8]),
        presence in prop::sample::select(vec![0.0f32, 0.5, -1.5]),
        frequency in prop::sample::select(vec![0.0f32, 0.4]),
        spread in prop::sample::select(vec![0.5f32, 2.0, 5.0]),
        shards in 1usize..5,
        k in prop::sample::select(vec![1usize, 8, 64]),
        sums in any::<bool>(),
        health in any::<bool>(),
        prosody in prop::sample::select(vec![
            None, Some(coltrane::ProsodyMode::Off), Some(coltrane::ProsodyMode::Bias),
            Some(coltrane::ProsodyMode::Observe),
        ]),
    ) {
        let cfg = SamplerConfig {
            temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n: 8,
            presence_penalty: presence, frequency_penalty: frequency, seed,
        };
        compare_with(&cfg, prosody, sums, health, seed, 3000, spread, shards, k);
    }
}

#[test]
fn greedy_settles_in_one_round_and_sampling_mostly_does() {
    let greedy = SamplerConfig::default();
    let r = compare(&greedy, 1, 3000, 2.0, 4, 8);
    assert_eq!((r.first, r.above, r.whole), (12, 0, 0));
    // So does the OpenAI routes' default: COLTRANE's class tier with its fallback, and prosody
    // leaning toward a sentence end over the last steps.
    let bias = Some(coltrane::ProsodyMode::Bias);
    let r = compare_with(&greedy, bias, false, false, 1, 3000, 2.0, 4, 8);
    assert_eq!(r.whole, 0, "{r:?}");
    // Top-k within what each shard sends: one round always.
    let top_k = SamplerConfig {
        temperature: 0.8,
        top_k: 8,
        seed: 3,
        ..SamplerConfig::default()
    };
    let r = compare(&top_k, 3, 3000, 2.0, 4, 8);
    assert_eq!((r.above, r.whole), (0, 0));
    // Top-p over a broad distribution: the threshold round settles what the first does not.
    let top_p = SamplerConfig {
        temperature: 1.0,
        top_p: 0.9,
        seed: 5,
        ..SamplerConfig::default()
    };
    let r = compare(&top_p, 5, 3000, 2.0, 4, 64);
    assert_eq!(r.whole, 0, "{r:?}");
    // Temperature alone, from the largest 8 of each shard: the same.
    let plain = SamplerConfig {
        temperature: 0.7,
        seed: 7,
        ..SamplerConfig::default()
    };
    let r = compare(&plain, 7, 3000, 2.0, 4, 8);
    assert_eq!(r.whole, 0, "{r:?}");
}

#[test]
fn with_the_shards_sums_sampling_mostly_settles_in_one_round() {
    let plain = SamplerConfig {
        temperature: 0.7,
        seed: 7,
        ..SamplerConfig::default()
    };
    let top_p = SamplerConfig {
        temperature: 1.0,
        top_p: 0.9,
        seed: 5,
        ..SamplerConfig::default()
    };
    let penalties = SamplerConfig {
        temperature: 0.7,
        presence_penalty: 0.5,
        frequency_penalty: 0.3,
        repeat_penalty: 1.1,
        seed: 11,
        ..SamplerConfig::default()
    };
    let min_p = SamplerConfig {
        temperature: 1.0,
        min_p: 0.05,
        seed: 13,
        ..SamplerConfig::default()
    };
    for cfg in [plain, top_p, penalties, min_p] {
        let without = compare_with(&cfg, None, false, false, cfg.seed, 3000, 2.0, 4, 8);
        let with = compare_with(&cfg, None, true, false, cfg.seed, 3000, 2.0, 4, 8);
        // Twelve steps: without the sums most need a threshold round (the total needs every
        // token that weighs anything); with them only a draw past the candidates does.
        assert_eq!(with.whole, 0, "{cfg:?}: {with:?}");
        assert!(
            with.above <= 4 && with.above <= without.above,
            "{cfg:?}: {with:?} {without:?}"
        );
    }
}

/// Twelve MOA steps (default config, `seed`) from the whole logits and from four shards of
/// their `k` largest, behind COLTRANE's prosody bias when `prosody`: the same tokens and
/// reports; returns the rounds the partial path took.
fn compare_moa(seed: u64, prosody: bool, k: usize) -> Rounds {
    let cfg = DecodeConfig {
        moa: Some(moa::MoaConfig::default()),
        sampling: SamplerConfig {
            seed,
            ..SamplerConfig::default()
        },
        ..DecodeConfig::default()
    };
    let build = || {
        let mut p = Pipeline::new(&cfg).unwrap();
        if prosody {
            let bias = coltrane::ColtraneConfig {
                prosody: coltrane::ProsodyMode::Bias,
                ..coltrane::ColtraneConfig::default()
            };
            p.push_stage(Box::new(
                ColtraneStage::new(coltrane_index(3000), bias).unwrap(),
            ));
        }
        p
    };
    let (mut whole, mut part) = (build(), build());
    let mut rng = Pcg32::new(seed);
    let mut rounds = Rounds::default();
    for step in 0..12 {
        let logits = lm_logits(&mut rng, 3000, 2.0);
        let ctx = StepContext {
            remaining: Some(12 - step),
            budget: Some(12),
            clock: None,
        };
        let want = whole.sample_in(&mut logits.clone(), &ctx).unwrap();
        let got = partial_step(&mut part, &logits, 4, k, None, false, &ctx, &mut rounds);
        let what = format!("seed {seed} step {step}");
        assert_eq!((got.token, &got.pick), (want.token, &want.pick), "{what}");
        assert_eq!(
            (&got.stages, got.candidates),
            (&want.stages, want.candidates),
            "{what}"
        );
    }
    rounds
}

#[test]
fn moa_picks_from_the_shards_largest_when_they_hold_its_top_k() {
    // MOA's agents see the 40 largest logits: four shards sending their 64 largest hold them.
    for seed in 0..6u64 {
        let rounds = compare_moa(seed, false, 64);
        assert_eq!((rounds.above, rounds.whole), (0, 0), "seed {seed}");
    }
    // Behind COLTRANE's prosody (its bias lifts the bound over the last steps), fewer than 40
    // known tokens may clear the bound: every logit above the 40th known settles it, in one
    // more round.
    let mut asked_again = 0;
    for seed in 0..4u64 {
        let rounds = compare_moa(seed, true, 16);
        assert_eq!(rounds.whole, 0, "seed {seed}: {rounds:?}");
        asked_again += rounds.above;
    }
    assert!(
        asked_again > 0,
        "the threshold round was never needed: the test checks nothing"
    );
}

#[test]
fn moa_over_the_whole_vocabulary_and_the_health_monitor_without_its_sums_take_every_logit() {
    // MOA over the whole vocabulary (top-k 0), and MOA's 40 with two tokens known.
    let mut whole_vocab = Pipeline::new(&DecodeConfig {
        moa: Some(moa::MoaConfig {
            top_k: 0,
            ..moa::MoaConfig::default()
        }),
        ..DecodeConfig::default()
    })
    .unwrap();
    let ctx = StepContext::default();
    let mut v = vec![1.0, f32::NEG_INFINITY, 3.0];
    assert_eq!(
        whole_vocab
            .sample_partial(&mut v, 0.0, None, None, &ctx)
            .unwrap(),
        PartialPick::Whole
    );
    let mut moa = Pipeline::new(&DecodeConfig {
        moa: Some(moa::MoaConfig::default()),
        ..DecodeConfig::default()
    })
    .unwrap();
    assert_eq!(
        moa.sample_partial(&mut v, 0.0, None, None, &ctx).unwrap(),
        PartialPick::Whole
    );
    // The health monitor without the shards' health sums (a split that sent none).
    let mut watched = pipeline(&SamplerConfig::default());
    watched.watch(crate::health::HealthConfig::default());
    assert_eq!(
        watched
            .sample_partial(&mut v, 0.0, None, None, &ctx)
            .unwrap(),
        PartialPick::Whole
    );
    // With them, but a known logit too few to know the top two: every logit above the second.
    let sums = HealthSums::of(&[1.0, f32::NEG_INFINITY, 3.0, 0.5], 0, &[]);
    let mut few = vec![f32::NEG_INFINITY, f32::NEG_INFINITY, 3.0, f32::NEG_INFINITY];
    match watched
        .sample_partial(&mut few, 1.0, None, Some(&sums), &ctx)
        .unwrap()
    {
        PartialPick::Above(t) => assert!(t < 1.0, "{t}"),
        other => panic!("{other:?}"),
    }
    // Every logit but one far below: it settles at once, reporting as from every logit.
    let mut most = vec![1.0, f32::NEG_INFINITY, 3.0, f32::NEG_INFINITY];
    let mut alone = pipeline(&SamplerConfig::default());
    alone.watch(crate::health::HealthConfig::default());
    let want = alone
        .sample(&mut [1.0, f32::NEG_INFINITY, 3.0, -40.0])
        .unwrap();
    let sums = HealthSums::of(&[1.0, f32::NEG_INFINITY, 3.0, -40.0], 0, &[]);
    match watched
        .sample_partial(&mut most, -40.0, None, Some(&sums), &ctx)
        .unwrap()
    {
        PartialPick::Decided(step) => assert_eq!((step.token, step.health), (2, want.health)),
        other => panic!("{other:?}"),
    }
    // Greedy without them: the known 3.0 is above the bound.
    let mut plain = pipeline(&SamplerConfig::default());
    match plain.sample_partial(&mut v, 0.0, None, None, &ctx).unwrap() {
        PartialPick::Decided(step) => assert_eq!(step.token, 2),
        other => panic!("{other:?}"),
    }
    // Sampling, with the largest known logit a hair above the bound: the same weight, so an
    // unknown token may tie it; only every logit settles it (and nothing panics).
    let mut sampled = pipeline(&SamplerConfig {
        temperature: 64.0,
        ..SamplerConfig::default()
    });
    let mut near = vec![3.0, f32::NEG_INFINITY, f32::NEG_INFINITY];
    let below = f32::from_bits(3.0f32.to_bits() - 1);
    assert_eq!(
        super::weights::weigh(3.0, 64.0),
        super::weights::weigh(below, 64.0)
    );
    assert_eq!(
        sampled
            .sample_partial(&mut near, below, None, None, &ctx)
            .unwrap(),
        PartialPick::Whole
    );
    // A bound at the largest known logit: an unknown one with a lower id could tie it.
    assert_eq!(
        plain.sample_partial(&mut v, 3.0, None, None, &ctx).unwrap(),
        PartialPick::Whole
    );
}
