//! `knot bench --health`: what the decode-health monitor costs. Greedy decode of the bench prompt
//! with the monitor observing and without it, interleaved; the monitor times itself each step,
//! so its share of a token is measured within the same steps (robust on a noisy machine, where
//! a 1% difference in tok/s is below the noise).

use crate::bench::{ab_order, median, run_measured};
use crate::generate::open_host;
use engine::health::{HealthConfig, HealthPolicy};
use engine::DecodeConfig;
use futures::executor::block_on;
use std::path::Path;

pub fn run(
    path: &Path,
    n: usize,
    prompt_len: usize,
    runs: usize,
    json: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    if n == 0 || prompt_len == 0 || runs == 0 {
        return Err("-n, --prompt-len and --runs must be at least 1".into());
    }
    let mut host = open_host(path)?;
    let prompt = crate::bench::bench_prompt(&host, prompt_len, n)?;
    for l in 0..host.config().n_layers {
        block_on(host.load_layer(l))?;
    }
    let watched = DecodeConfig {
        health: Some(HealthConfig {
            policy: HealthPolicy::OFF,
            ..HealthConfig::default()
        }),
        ..DecodeConfig::default()
    };
    let plain = DecodeConfig::default();
    let (mut with, mut without, mut share) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..runs {
        for watch in ab_order(r) {
            let decode = if watch { &watched } else { &plain };
            let (_, tok_s, out) = run_measured(&mut host, &prompt, n, decode)?;
            if watch {
                let us = out.health.map_or(0.0, |m| m.us_per_step);
                // The monitor's time per step over the time per decode step, in the same run.
                let step_ms = 1000.0 / tok_s;
                share.push(us / 1000.0 / step_ms);
                with.push(tok_s);
            } else {
                without.push(tok_s);
            }
        }
    }
    let (w, wo, s) = (median(with), median(without), median(share));
    if json {
        let v = serde_json::json!({
            "decode_tok_s_with_monitor": w, "decode_tok_s_without": wo, "with_over_without": w / wo,
            "monitor_share_of_step": s, "prompt_len": prompt_len, "n": n, "runs": runs,
        });
        println!("{v}");
    } else {
        println!("greedy decode without the monitor: {wo:.1} tok/s; with it (observing): {w:.1} tok/s ({:.3}x, median of {runs})", w / wo);
        println!("the monitor's own time: {:.2}% of a decode step (median of {runs}, timed within the same steps)", s * 100.0);
    }
    Ok(())
}
