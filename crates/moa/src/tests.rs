use super::*;
use proptest::prelude::*;

fn zipf(n: usize, slope: f32) -> Vec<f32> {
    (0..n).map(|j| -slope * ((j + 1) as f32).ln()).collect()
}

fn sum(p: &[f64]) -> f64 {
    p.iter().sum()
}

#[test]
fn a_step_is_a_distribution_over_the_top_k() {
    let mut moa = Moa::new(MoaConfig {
        top_k: 4,
        ..MoaConfig::default()
    })
    .unwrap();
    let logits = [0.5f32, 3.0, f32::NEG_INFINITY, 2.0, 2.0, -1.0, 1.0];
    let step = moa.step(&logits).unwrap();
    // Descending by logit, ties by id; the masked token is never a candidate.
    assert_eq!(step.ids, [1, 3, 4, 6]);
    assert!((sum(step.probs) - 1.0).abs() < 1e-12);
    assert!(step.probs.windows(2).all(|w| w[0] >= w[1] - 1e-15));
    let r = &step.report;
    assert_eq!(r.temperatures, [0.5, 0.7, 0.9]);
    assert_eq!(r.survivors, [0, 1, 2]);
    assert!((sum(&r.weights) - 1.0).abs() < 1e-12);
    // (3 survivors − 1) + (7 logits − 4 candidates)
    assert_eq!(r.deficit, 2 + 3);
    assert!(!r.fallback && r.entropy > 0.0 && r.spread == 0.4);
}

#[test]
fn whole_vocabulary_has_no_top_k_deficit() {
    let mut moa = Moa::new(MoaConfig {
        top_k: 0,
        ..MoaConfig::default()
    })
    .unwrap();
    let step = moa.step(&[1.0, f32::NEG_INFINITY, 0.0]).unwrap();
    assert_eq!(step.ids, [0, 2]);
    assert_eq!(step.report.deficit, 2);
}

#[test]
fn an_overflowing_cold_view_is_raced_out() {
    // Only the coldest agent's scaled logits overflow f64.
    let mut moa = Moa::new(MoaConfig {
        base_temperature: 1.0,
        temperature_spread: 2.0,
        min_temperature: 1e-300,
        sensitivity: 0.0,
        ..MoaConfig::default()
    })
    .unwrap();
    let step = moa.step(&[3.0e38, 1.0, 0.0]).unwrap();
    assert_eq!(step.report.survivors, [1, 2]);
    assert_eq!(step.report.weights[0], 0.0);
    assert_eq!(step.report.deficit, 1);
    assert!(!step.report.fallback);
    // A NaN or +inf candidate poisons every view: the raw argmax is taken.
    let mut moa = Moa::new(MoaConfig::default()).unwrap();
    let step = moa.step(&[f32::NAN, 1.0, f32::NEG_INFINITY]).unwrap();
    assert!(step.report.fallback);
    assert_eq!(step.ids, [1]);
    assert_eq!(step.probs, [1.0]);
    assert!(step.report.survivors.is_empty());
    assert!(step.report.weights.iter().all(|&w| w == 0.0));
    let step = moa.step(&[f32::INFINITY, 1.0]).unwrap();
    assert!(step.report.fallback);
    assert_eq!(step.ids, [0]);
}

#[test]
fn nothing_to_pick_is_an_error() {
    let mut moa = Moa::new(MoaConfig::default()).unwrap();
    assert_eq!(
        moa.step(&[f32::NEG_INFINITY; 3]).err(),
        Some(MoaError::NoCandidates)
    );
    assert_eq!(moa.step(&[]).err(), Some(MoaError::NoCandidates));
    assert_eq!(
        moa.step(&[f32::NAN, f32::NEG_INFINITY]).err(),
        Some(MoaError::NoCandidates)
    );
}

#[test]
fn complement_vote_and_uniform_give_distributions() {
    for merge in [Merge::ComplementVote, Merge::Uniform] {
        let mut moa = Moa::new(MoaConfig {
            merge,
            ..MoaConfig::default()
        })
        .unwrap();
        let step = moa.step(&zipf(100, 1.0)).unwrap();
        assert_eq!(step.ids.len(), 40);
        assert!((sum(step.probs) - 1.0).abs() < 1e-12);
        assert_eq!(step.report.weights, [1.0 / 3.0; 3]);
    }
}

/// Runs `steps` steps on the same logits, accepting each; returns the last report.
fn run(moa: &mut Moa, logits: &[f32], steps: usize) -> MoaReport {
    let mut last = None;
    for _ in 0..steps {
        last = Some(moa.step(logits).unwrap().report);
        moa.accept();
    }
    last.unwrap()
}

#[test]
fn interfere_drives_the_measured_ratio_to_the_target_on_a_stationary_stream() {
    let mut spreads = Vec::new();
    for logits in [
        zipf(200, 1.0),
        zipf(200, 2.5),
        (0..60).map(|j| -0.08 * j as f32).collect(),
    ] {
        for start in [0.05, 0.4, 1.2] {
            let mut moa = Moa::new(MoaConfig {
                temperature_spread: start,
                ..MoaConfig::default()
            })
            .unwrap();
            let r = run(&mut moa, &logits, 400);
            let rho = r.ratio.unwrap();
            assert!(
                (rho.ln() - PHI.ln()).abs() < 1e-3,
                "start {start}: ratio {rho}"
            );
            spreads.push(moa.spread());
        }
    }
    // The spread it settles on depends on the logits, not on where it started: a controller,
    // not a recurrence that reaches φ whatever it is fed.
    for shape in spreads.chunks(3) {
        assert!(
            shape.iter().all(|s| (s - shape[0]).abs() < 1e-3),
            "{spreads:?}"
        );
    }
    assert!((spreads[0] - spreads[3]).abs() > 0.05, "{spreads:?}");
    assert!((spreads[3] - spreads[6]).abs() > 0.05, "{spreads:?}");
}

#[test]
fn sensitivity_zero_disables_adaptation() {
    let mut moa = Moa::new(MoaConfig {
        sensitivity: 0.0,
        ..MoaConfig::default()
    })
    .unwrap();
    let r = run(&mut moa, &zipf(200, 1.0), 50);
    assert_eq!((r.spread, moa.spread()), (0.4, 0.4));
    assert!(r.ratio.is_some() && !r.valve);
}

#[test]
fn the_valve_fires_when_the_agents_collapse() {
    let mut moa = Moa::new(MoaConfig {
        temperature_spread: 0.01,
        ..MoaConfig::default()
    })
    .unwrap();
    let logits = zipf(200, 1.0);
    let mut fired = None;
    for step in 0..interfere::VALVE_STEPS as usize {
        let r = moa.step(&logits).unwrap().report;
        moa.accept();
        if r.valve {
            fired = Some(step);
        }
    }
    assert_eq!(fired, Some(interfere::VALVE_STEPS as usize - 1));
}

#[test]
fn near_certain_steps_are_not_measured() {
    let mut moa = Moa::new(MoaConfig::default()).unwrap();
    let mut logits = vec![0.0f32; 50];
    logits[7] = 40.0;
    let r = run(&mut moa, &logits, 5);
    assert_eq!(r.ratio, None);
    assert_eq!(moa.spread(), 0.4);
}

#[test]
fn accept_rollback_and_reset_restore_the_controller() {
    let mut moa = Moa::new(MoaConfig::default()).unwrap();
    let logits = zipf(200, 1.0);
    run(&mut moa, &logits, 3);
    let after3 = moa.spread();
    run(&mut moa, &logits, 4);
    assert_ne!(moa.spread(), after3);
    moa.rollback(4);
    assert_eq!(moa.spread(), after3);
    // A prompt token (no step before it) changes nothing, but still counts for rollback.
    moa.accept();
    assert_eq!(moa.spread(), after3);
    moa.rollback(1);
    assert_eq!(moa.spread(), after3);
    // A step that is not accepted does not move the state.
    moa.step(&logits).unwrap();
    moa.rollback(0);
    moa.accept();
    assert_eq!(moa.spread(), after3);
    moa.reset();
    assert_eq!(moa.spread(), 0.4);
    moa.rollback(10); // nothing to undo: no-op
    assert_eq!(moa.spread(), 0.4);
}

#[test]
fn golden_run_is_the_same_on_every_target() {
    // A digest of every probability's bits over 60 adapting steps, checked natively and in
    // wasm32 (the suite runs both): the seeded token sequence depends on nothing else.
    let mut moa = Moa::new(MoaConfig::default()).unwrap();
    let mut digest = 0u64;
    for step in 0..60u32 {
        let logits: Vec<f32> = (0..300u32)
            .map(|j| ((j * 7919 + step * 104729) % 1000) as f32 / 97.0 - 5.0)
            .collect();
        let s = moa.step(&logits).unwrap();
        for (&id, &p) in s.ids.iter().zip(s.probs) {
            digest = digest.rotate_left(5) ^ p.to_bits() ^ id as u64;
        }
        digest ^= s.report.spread.to_bits();
        moa.accept();
    }
    assert_eq!(digest, GOLDEN_DIGEST);
}
const GOLDEN_DIGEST: u64 = 15886797561641046090;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_step_is_a_distribution(
        logits in prop::collection::vec(
            prop_oneof![
                8 => -30.0f32..30.0,
                1 => Just(f32::NEG_INFINITY),
                1 => Just(f32::NAN),
                1 => Just(f32::INFINITY),
            ],
            1..120,
        ),
        k in 1usize..6,
        top_k in 0usize..50,
        spread in 0.0f64..2.0,
        merge in prop_oneof![Just(Merge::DeficitWeighted), Just(Merge::Uniform), Just(Merge::ComplementVote)],
        use_kl in any::<bool>(),
    ) {
        let cfg = MoaConfig { k, top_k, temperature_spread: spread, merge, use_kl, ..MoaConfig::default() };
        let mut moa = Moa::new(cfg).unwrap();
        match moa.step(&logits) {
            Err(MoaError::NoCandidates) => {
                // Only when nothing is finite-or-+inf.
                prop_assert!(logits.iter().all(|l| l.is_nan() || *l == f32::NEG_INFINITY));
            }
            Err(e) => prop_assert!(false, "{e}"),
            Ok(step) => {
                let r = &step.report;
                prop_assert!((sum(step.probs) - 1.0).abs() < 1e-9);
                prop_assert!(step.probs.iter().all(|p| *p >= 0.0 && p.is_finite()));
                prop_assert_eq!(r.weights.len(), k);
                prop_assert!(r.weights.iter().all(|w| *w >= 0.0));
                prop_assert!(r.survivors.iter().all(|&i| i < k));
                prop_assert!(r.survivors.windows(2).all(|w| w[0] < w[1]));
                if !r.fallback {
                    prop_assert!((sum(&r.weights) - 1.0).abs() < 1e-9);
                }
                // Masked tokens never carry probability.
                for (&id, &p) in step.ids.iter().zip(step.probs) {
                    prop_assert!(logits[id as usize] != f32::NEG_INFINITY || p == 0.0);
                }
                if top_k > 0 {
                    prop_assert!(step.ids.len() <= top_k);
                }
            }
        }
    }

    #[test]
    fn merge_distributions_gives_a_distribution(
        dists in prop::collection::vec(prop::collection::vec(0.0f64..1.0, 5), 1..6),
        use_kl in any::<bool>(),
    ) {
        prop_assume!(dists.iter().all(|d| d.iter().sum::<f64>() > 0.0));
        let m = merge_distributions(&dists, Merge::DeficitWeighted, use_kl).unwrap();
        prop_assert!((sum(&m.merged) - 1.0).abs() < 1e-9);
        prop_assert!((sum(&m.weights) - 1.0).abs() < 1e-9);
        prop_assert!(m.weights.iter().all(|w| *w >= 0.0));
        prop_assert_eq!(m.deficit, dists.len() - 1);
    }
}
