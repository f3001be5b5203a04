use super::*;
use crate::sampler::Pcg32;

const VOCAB: usize = 64;

/// Logits with `token` on top by `lead` nats over a flat rest.
fn peaked(token: u32, lead: f32) -> Vec<f32> {
    let mut l = vec![0.0f32; VOCAB];
    l[token as usize] = lead;
    l
}

fn step(m: &mut HealthMonitor, logits: &[f32], token: u32) -> HealthReport {
    m.before_stages(logits);
    m.after_pick(logits, token, None, None)
}

fn monitor(window: usize) -> HealthMonitor {
    HealthMonitor::new(HealthConfig {
        window,
        ..HealthConfig::default()
    })
}

#[test]
fn scalars_of_known_distributions() {
    let mut m = monitor(16);
    // Uniform over the vocabulary.
    // (The sums are integers: each token's fraction of a level in 2^-16, so ≈ 1e-5 nats.)
    let r = step(&mut m, &[1.5; VOCAB], 3);
    assert!(
        (r.entropy - (VOCAB as f64).ln()).abs() < 1e-5,
        "{}",
        r.entropy
    );
    assert!((r.surprisal - (VOCAB as f64).ln()).abs() < 1e-12);
    assert_eq!(r.margin, 0.0);
    // Two tokens at ln 3 apart, the rest out of reach: p = 3/4, 1/4.
    let mut l = vec![-100.0f32; VOCAB];
    l[5] = 3f32.ln();
    l[9] = 0.0;
    let r = step(&mut m, &l, 9);
    let h = -(0.75f64 * 0.75f64.ln() + 0.25 * 0.25f64.ln());
    assert!((r.entropy - h).abs() < 1e-6, "{}", r.entropy);
    assert!((r.surprisal - 4f64.ln()).abs() < 1e-6);
    assert!((r.margin - 0.5).abs() < 1e-6);
    assert_eq!(r.faces.waste, 0.0);
    // A token the sums left out: surprisal capped, not infinite.
    let r = step(&mut m, &l, 0);
    assert!(r.surprisal > CANDIDATE_NATS as f64 && r.surprisal.is_finite());
}

#[test]
fn waste_counts_non_finite_logits_and_masked_mass() {
    let mut m = monitor(16);
    let mut l = vec![0.0f32; VOCAB];
    l[1] = f32::NAN;
    l[2] = f32::INFINITY;
    m.before_stages(&l);
    // A stage masks half of the finite tokens.
    let mut after = l.clone();
    for t in after.iter_mut().skip(3).step_by(2) {
        *t = f32::NEG_INFINITY;
    }
    let r = m.after_pick(&after, 4, None, None);
    let finite = VOCAB - 2;
    let masked = (3..VOCAB).step_by(2).count() as f64 / finite as f64;
    let expected = 2.0 / VOCAB as f64 + masked;
    assert!(
        (r.faces.waste - expected).abs() < 1e-9,
        "{} vs {expected}",
        r.faces.waste
    );
}

#[test]
fn a_peaked_loop_is_boundary_collapse_and_varied_text_is_normal() {
    let mut rng = Pcg32::new(3);
    let mut m = monitor(32);
    // Varied tokens from a broad distribution.
    for _ in 0..80 {
        let l: Vec<f32> = (0..VOCAB).map(|_| rng.next_f32() * 2.0).collect();
        let t = (rng.next_f32() * VOCAB as f32) as u32 % VOCAB as u32;
        let r = step(&mut m, &l, t);
        assert_eq!(r.state, HealthState::Normal);
    }
    // Then a loop of period 3, each token near-certain.
    let mut states = Vec::new();
    for i in 0..12 {
        let t = [7, 8, 9][i % 3];
        states.push(step(&mut m, &peaked(t, 30.0), t).state);
    }
    // Three repeats of the period: collapse from the ninth loop token on.
    assert!(
        states[..8]
            .iter()
            .all(|s| *s != HealthState::BoundaryCollapse),
        "{states:?}"
    );
    assert!(
        states[8..]
            .iter()
            .all(|s| *s == HealthState::BoundaryCollapse),
        "{states:?}"
    );
    let metrics = m.metrics();
    assert_eq!(metrics.steps, 92);
    assert_eq!(metrics.first_boundary_collapse, Some(88));
    assert_eq!(metrics.boundary_collapse_steps, 4);
}

#[test]
fn a_confident_loop_is_not_collapse_when_the_model_is_unsure() {
    // The same loop with a flat distribution: repeating, but not degenerate.
    let mut m = monitor(16);
    for i in 0..30 {
        let t = [7, 8][i % 2];
        assert_ne!(
            step(&mut m, &[0.0; VOCAB], t).state,
            HealthState::BoundaryCollapse
        );
    }
}

#[test]
fn a_brown_falling_entropy_with_rising_repetition_is_pre_collapse() {
    let mut rng = Pcg32::new(11);
    let mut m = monitor(32);
    // Entropy walks down (the top token's lead grows as a random walk with drift) while the
    // tokens fall into repeating 4-grams more and more.
    let mut lead = 0.5f32;
    let mut last = None;
    for i in 0..64 {
        lead += 0.12 + (rng.next_f32() - 0.5) * 0.2;
        let repeating = i >= 32 && (i % 8) < 6;
        let t = if repeating {
            [20, 21, 22, 23, 24, 25][(i % 8) as usize]
        } else {
            30 + i as u32 % 30
        };
        last = Some(step(&mut m, &peaked(t, lead), t));
    }
    let r = last.unwrap();
    let a = r.alpha.expect("window full");
    assert!(a.entropy > 1.0, "{a:?}");
    assert!(
        r.entropy_slope < 0.0 && r.repetition > 0.1 && r.repetition_trend > 0.0,
        "{r:?}"
    );
    assert_eq!(r.state, HealthState::PreCollapse);
    assert_eq!(r.colour, Some(NoiseColour::nearest(a.entropy)));
}

#[test]
fn rollback_forgets_the_steps_it_undoes() {
    let mut rng = Pcg32::new(5);
    let inputs: Vec<(Vec<f32>, u32)> = (0..40)
        .map(|i| {
            (
                (0..VOCAB).map(|_| rng.next_f32() * 4.0).collect(),
                (i * 7 % VOCAB) as u32,
            )
        })
        .collect();
    let mut a = monitor(16);
    let mut b = monitor(16);
    a.accept_context();
    b.accept_context();
    for (l, t) in &inputs {
        step(&mut a, l, *t);
    }
    for (l, t) in &inputs[..35] {
        step(&mut b, l, *t);
    }
    a.rollback(5);
    assert_eq!(a.metrics(), b.metrics());
    let (next, t) = (&inputs[0].0, 1);
    assert_eq!(step(&mut a, next, t), step(&mut b, next, t));
}

#[test]
fn opportunity_shrinks_with_the_budget_and_diversity_counts_distinct_tokens() {
    let mut m = monitor(16);
    let two = |a: u32, b: u32| {
        let mut l = vec![-50.0f32; VOCAB];
        l[a as usize] = 0.0;
        l[b as usize] = 0.0;
        l
    };
    // Always choosing 1 between 1 and 2: half the plausible tokens unexplored.
    m.before_stages(&two(1, 2));
    let r = m.after_pick(&two(1, 2), 1, Some(11), Some(10));
    assert!((r.faces.opportunity - 0.5).abs() < 1e-12);
    assert_eq!(r.faces.diversity, 1.0);
    m.before_stages(&two(1, 2));
    let r = m.after_pick(&two(1, 2), 1, Some(2), Some(10));
    assert!((r.faces.opportunity - 0.5 * 0.1).abs() < 1e-12);
    assert_eq!(r.faces.diversity, 0.5);
    assert!(
        (r.faces.score - (r.faces.waste + r.faces.opportunity + r.faces.diversity)).abs() < 1e-15
    );
}

#[test]
fn configs_are_checked() {
    let bad = |f: fn(&mut HealthConfig)| {
        let mut c = HealthConfig::default();
        f(&mut c);
        c.validate().unwrap_err().to_string()
    };
    assert!(bad(|c| c.window = 8).contains("health.window"));
    assert!(bad(|c| c.window = 5000).contains("health.window"));
    assert!(bad(|c| c.thresholds.pre_alpha = f64::NAN).contains("preAlpha"));
    assert!(bad(|c| c.thresholds.collapse_repeats = 1).contains("collapseRepeats"));
    assert!(HealthConfig::default().validate().is_ok());
}

mod policy {
    use super::*;
    use crate::pipeline::{Distribution, Greedy, PickReport, Picker, Pipeline, PipelineError};
    use std::cell::Cell;
    use std::rc::Rc;

    fn watched(policy: HealthPolicy, picker: Box<dyn Picker>) -> Pipeline {
        let mut p = Pipeline::from_parts(Vec::new(), picker, 0);
        p.watch(HealthConfig {
            window: 32,
            policy,
            ..HealthConfig::default()
        });
        p
    }

    /// Greedy along a cycle 7 → 8 → 9 → 7 …, each next token near-certain: a model stuck in a
    /// loop. Returns the tokens picked.
    fn run_loop(p: &mut Pipeline, steps: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let mut last = 9u32;
        for _ in 0..steps {
            let next = [8, 9, 7][(last - 7) as usize];
            let mut l = peaked(next, 30.0);
            // The way out of the loop, a distant second.
            l[40] = 5.0;
            let step = p.sample(&mut l).unwrap();
            out.push(step.token);
            last = if (7..=9).contains(&step.token) {
                step.token
            } else {
                9
            };
        }
        out
    }

    #[test]
    fn the_eddy_breaker_bans_the_loop_once_it_collapses() {
        let off = run_loop(&mut watched(HealthPolicy::OFF, Box::new(Greedy)), 20);
        assert!(off.iter().all(|t| (7..=9).contains(t)), "{off:?}");
        let mut p = watched(HealthPolicy::default(), Box::new(Greedy));
        let on = run_loop(&mut p, 20);
        // Three periods in (nine tokens), the continuation is banned: token 40 breaks out.
        assert_eq!(&on[..9], &off[..9]);
        assert_eq!(on[9], 40, "{on:?}");
        let m = p.health_metrics().unwrap();
        assert!(
            m.eddy_steps >= 1 && m.first_boundary_collapse == Some(8),
            "{m:?}"
        );
    }

    /// A picker that is greedy and counts the valves it is asked to open.
    struct Valved(Rc<Cell<u32>>);

    impl Picker for Valved {
        fn distribution(
            &mut self,
            logits: &[f32],
            out: &mut Distribution,
        ) -> Result<PickReport, PipelineError> {
            Greedy.distribution(logits, out)
        }
        fn open_valve(&mut self) -> bool {
            self.0.set(self.0.get() + 1);
            true
        }
    }

    /// Drives the drift of `a_brown_falling_entropy_with_rising_repetition_is_pre_collapse`
    /// through a pipeline; returns the states.
    fn drift(p: &mut Pipeline) -> Vec<HealthState> {
        let mut rng = Pcg32::new(11);
        let mut lead = 0.5f32;
        (0..64)
            .map(|i| {
                lead += 0.12 + (rng.next_f32() - 0.5) * 0.2;
                let repeating = i >= 32 && (i % 8) < 6;
                let t = if repeating {
                    [20, 21, 22, 23, 24, 25][i % 8]
                } else {
                    30 + i as u32 % 30
                };
                let mut l = peaked(t, lead);
                p.sample(&mut l).unwrap().health.unwrap().state
            })
            .collect()
    }

    #[test]
    fn under_pre_collapse_the_valve_opens_once_per_span_and_drafts_are_capped() {
        let valves = Rc::new(Cell::new(0));
        let mut p = watched(HealthPolicy::default(), Box::new(Valved(valves.clone())));
        let states = drift(&mut p);
        let pre = states
            .iter()
            .filter(|s| **s == HealthState::PreCollapse)
            .count();
        assert!(
            pre >= 1 && *states.last().unwrap() == HealthState::PreCollapse,
            "{states:?}"
        );
        // Once on entering, then at most once per VALVE_STEPS steps.
        let span = moa::interfere::VALVE_STEPS as usize;
        assert!(
            valves.get() >= 1 && valves.get() as usize <= pre.div_ceil(span),
            "{} for {pre}",
            valves.get()
        );
        assert_eq!(p.health_metrics().unwrap().valves, u64::from(valves.get()));
        let mut draft = vec![1, 2, 3, 4, 5];
        p.cap_draft(&mut draft);
        assert_eq!(draft, [1, 2]);
        assert_eq!(p.health_metrics().unwrap().capped_drafts, 1);

        // Switched off, nothing acts.
        let valves = Rc::new(Cell::new(0));
        let mut p = watched(HealthPolicy::OFF, Box::new(Valved(valves.clone())));
        assert_eq!(drift(&mut p), states);
        assert_eq!(valves.get(), 0);
        let mut draft = vec![1, 2, 3, 4, 5];
        p.cap_draft(&mut draft);
        assert_eq!(draft.len(), 5);
    }
}

#[test]
fn the_fast_exponential_matches_the_library() {
    for i in 0..=20_000 {
        let x = -(i as f64) * 0.001;
        let (got, want) = (super::sums::exp_neg(x), x.exp());
        assert!(((got - want) / want).abs() < 1e-11, "{x}: {got} vs {want}");
    }
}

#[test]
fn order_keys_sort_as_the_floats_and_come_back() {
    let mut rng = Pcg32::new(9);
    let mut v: Vec<f32> = (0..2000).map(|_| (rng.next_f32() - 0.5) * 1e4).collect();
    v.extend([0.0, -0.0, f32::MIN, f32::MAX, -1e-40, 1e-40, -3.5, 3.5]);
    for &a in &v {
        let (ka, back) = super::monitor::order_key_for_tests(a);
        assert_eq!(back.to_bits(), a.to_bits());
        for &b in v.iter().take(200) {
            let kb = super::monitor::order_key_for_tests(b).0;
            if a < b {
                assert!(ka < kb, "{a} {b}");
            }
        }
    }
}

#[test]
fn the_max_skips_infinities_and_nan_in_any_chunk() {
    let mut m = monitor(16);
    let mut l: Vec<f32> = (0..300).map(|i| (i % 17) as f32 * 0.1).collect();
    l[5] = f32::NAN;
    l[130] = f32::INFINITY;
    l[131] = f32::NEG_INFINITY;
    l[250] = 30.0;
    let r = step(&mut m, &l, 250);
    // 30 is the top (the rest out of reach); NaN and +inf counted as waste, -inf neither.
    assert!(r.surprisal < 0.01, "{}", r.surprisal);
    assert!((r.faces.waste - 2.0 / 300.0).abs() < 1e-12);
}

#[test]
fn sums_split_across_shards_add_up_to_the_whole() {
    let mut rng = Pcg32::new(17);
    for case in 0..40 {
        let n = 300 + case * 37;
        let mut l: Vec<f32> = (0..n).map(|_| (rng.next_f32() - 0.5) * 24.0).collect();
        if case % 3 == 0 {
            l[5] = f32::NAN;
            l[n - 2] = f32::INFINITY;
            l[7] = f32::NEG_INFINITY;
        }
        let removed = [(3u32, 40u32), (n as u32 / 2, n as u32 / 2 + 9)];
        let whole = HealthSums::of(&l, 0, &removed);
        for shards in 1..5 {
            let width = n.div_ceil(shards);
            let parts: Vec<HealthSums> = (0..n)
                .step_by(width)
                .map(|first| HealthSums::of(&l[first..(first + width).min(n)], first, &removed))
                .collect();
            assert_eq!(
                HealthSums::merge(&parts),
                whole,
                "case {case}, {shards} shards"
            );
        }
    }
}

#[test]
fn a_monitor_reading_shards_sums_and_their_candidates_reports_as_from_every_logit() {
    let mut rng = Pcg32::new(23);
    let n = 1000;
    let (mut whole, mut part) = (monitor(16), monitor(16));
    for step_no in 0..40 {
        let spread = 2.0 + (step_no % 5) as f32 * 4.0;
        let l: Vec<f32> = (0..n).map(|_| (rng.next_f32() - 0.5) * spread).collect();
        // A mask removes two ranges (some steps none); shards of 250 answer their 64 largest.
        let removed: Vec<(u32, u32)> = match step_no % 4 {
            0 => vec![],
            _ => vec![(10, 200), (600 + step_no as u32, 700)],
        };
        let in_removed = |t: usize| {
            removed
                .iter()
                .any(|&(s, e)| (s as usize..e as usize).contains(&t))
        };
        let after: Vec<f32> = (0..n)
            .map(|t| {
                if in_removed(t) {
                    f32::NEG_INFINITY
                } else {
                    l[t]
                }
            })
            .collect();
        let mut known = vec![f32::NEG_INFINITY; n];
        let mut sums = Vec::new();
        for first in (0..n).step_by(250) {
            let slice = &l[first..first + 250];
            let mut order: Vec<usize> = (0..250).collect();
            order.sort_by(|&a, &b| slice[b].total_cmp(&slice[a]));
            for &i in &order[..64] {
                known[first + i] = slice[i];
            }
            sums.push(HealthSums::of(slice, first, &removed));
        }
        let known_after: Vec<f32> = (0..n)
            .map(|t| {
                if in_removed(t) {
                    f32::NEG_INFINITY
                } else {
                    known[t]
                }
            })
            .collect();
        // The token: the largest one left (a pick's tokens are always known).
        let token = (0..n)
            .filter(|&t| !in_removed(t))
            .max_by(|&a, &b| l[a].total_cmp(&l[b]).then(b.cmp(&a)))
            .unwrap() as u32;
        whole.before_stages(&l);
        let want = whole.after_pick(&after, token, Some(40 - step_no), Some(40));
        part.before_stages_part(&known, HealthSums::merge(&sums), &removed);
        let got = part.after_pick(&known_after, token, Some(40 - step_no), Some(40));
        assert_eq!(got, want, "step {step_no}");
    }
    assert_eq!(part.metrics(), whole.metrics());
}
