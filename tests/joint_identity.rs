//! Sessions run together ([`engine::Joint`]: their rows share each layer's matmuls) give each
//! session exactly the logits it gets alone, bit for bit: prompts of different lengths
//! prefilled in one pass, then decode steps at different positions, their LM head rows in one
//! matmul (`Joint::finish`), on the real models.

use knot_suite::{require_model, KnotFile};

#[test]
fn sessions_run_together_equal_each_session_alone() {
    for name in ["SmolLM2-135M-Instruct.Q4_1.knot", "gemma-3-270m.knot"] {
        let Some(path) = require_model(name) else {
            continue;
        };
        let file = KnotFile::read(&path);
        let model = file.model();
        let tok = file.tokenizer();
        let prompts: Vec<Vec<u32>> = [
            "The quick brown fox jumps over the lazy dog.",
            "Hello",
            "Rust and WebAssembly: a short list of reasons to use both together",
        ]
        .iter()
        .map(|p| tok.encode_with_bos(p).unwrap())
        .collect();
        // A few tokens each conversation goes on with, fed to both runs alike.
        let next: Vec<u32> = tok.encode_with_bos(" and then it ran away").unwrap();
        let steps = 4;

        // Alone: each session by itself, its logits after the prompt and after each step.
        let alone: Vec<Vec<Vec<f32>>> = prompts
            .iter()
            .map(|p| {
                let mut s = engine::Session::new(&model.config, 128).unwrap();
                let mut out = vec![model.forward(&mut s, p, false).unwrap().to_vec()];
                for &t in &next[..steps] {
                    out.push(model.forward(&mut s, &[t], false).unwrap().to_vec());
                }
                out
            })
            .collect();

        // Together: the same batches, every layer run once for all three sessions.
        let mut sessions: Vec<engine::Session> = prompts
            .iter()
            .map(|_| engine::Session::new(&model.config, 128).unwrap())
            .collect();
        let mut joint = engine::Joint::new(&model.config);
        let mut together: Vec<Vec<Vec<f32>>> = vec![Vec::new(); prompts.len()];
        for step in 0..=steps {
            for (s, p) in sessions.iter_mut().zip(&prompts) {
                let batch = if step == 0 {
                    &p[..]
                } else {
                    &next[step - 1..step]
                };
                joint.begin(s, batch, &model.resident).unwrap();
            }
            let mut refs: Vec<&mut engine::Session> = sessions.iter_mut().collect();
            joint.prepare(&refs).unwrap();
            for (l, w) in model.layers.iter().enumerate() {
                joint.run_layer(&mut refs, l, w).unwrap();
            }
            // One LM head matmul for every session's last row.
            let want = vec![engine::LogitRows::Last; refs.len()];
            joint.finish(&mut refs, &want, &model.resident).unwrap();
            for (i, t) in together.iter_mut().enumerate() {
                t.push(joint.logits(i).to_vec());
            }
        }

        for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
            for (step, (a, t)) in a.iter().zip(t).enumerate() {
                let differ = a
                    .iter()
                    .zip(t)
                    .filter(|(x, y)| x.to_bits() != y.to_bits())
                    .count();
                assert_eq!(
                    differ, 0,
                    "{name}: session {i}, step {step}: {differ} logits differ"
                );
            }
        }
    }
}
