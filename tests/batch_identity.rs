//! A batch of positions gives each position exactly the logits it gets alone: the property that
//! makes speculative decoding's verify pass pick the tokens step-by-step decoding picks. Checked
//! bit for bit on the real models (every weight format they hold) for every batch size a verify
//! pass uses, natively and in wasm (WASI).

use knot_suite::{require_model, KnotFile};

/// Each `vocab`-wide row of `rows` equals the step at its index, bit for bit.
fn assert_rows_are_the_steps(rows: &[f32], steps: &[Vec<f32>], vocab: usize, what: &str) {
    for (i, step) in steps.iter().enumerate() {
        let row = &rows[i * vocab..(i + 1) * vocab];
        let differ = row
            .iter()
            .zip(step)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        let worst = row
            .iter()
            .zip(step)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert_eq!(
            differ, 0,
            "{what}, row {i}: {differ} logits differ, max |Δ| {worst}"
        );
    }
}

#[test]
fn batched_rows_are_bit_identical_to_one_position_at_a_time() {
    for name in ["SmolLM2-135M-Instruct.Q4_1.knot", "gemma-3-270m.knot"] {
        let Some(path) = require_model(name) else {
            continue;
        };
        let file = KnotFile::read(&path);
        let model = file.model();
        let ids = file
            .tokenizer()
            .encode_with_bos("The quick brown fox jumps over the lazy dog, and then it runs away.")
            .unwrap();
        let (head, tail) = ids.split_at(6);
        let vocab = model.config.vocab_size;
        // Step by step: the reference rows.
        let mut s = engine::Session::new(&model.config, 64).unwrap();
        model.forward(&mut s, head, false).unwrap();
        let steps: Vec<Vec<f32>> = tail
            .iter()
            .map(|&t| model.forward(&mut s, &[t], false).unwrap().to_vec())
            .collect();
        // Every batch size up to a full verify pass (1 + MAX_DRAFT positions, 9 with the
        // default draft length), in one pass after the same head.
        for b in [2, 3, 4, 5, 8, 9] {
            let b = b.min(tail.len());
            let mut s = engine::Session::new(&model.config, 64).unwrap();
            model.forward(&mut s, head, false).unwrap();
            let rows = model.forward(&mut s, &tail[..b], true).unwrap();
            assert_rows_are_the_steps(rows, &steps[..b], vocab, &format!("{name}: batch {b}"));
        }
    }
}

/// Long prompts: a prompt's rows equal the same positions decoded one at a time far into the
/// context — past several 64-position key tiles, and on Gemma 3 past its 512-position sliding
/// window, whose start crosses a tile at position 575. The tail runs as one batch after a long
/// head (itself a batch), against single steps; natively at 1, 2 and 4 threads.
#[test]
fn long_prompt_rows_are_bit_identical_to_decoding() {
    for (name, head_len, tail_len) in [
        ("SmolLM2-135M-Instruct.Q4_1.knot", 120, 20),
        ("gemma-3-270m.knot", 560, 24),
    ] {
        let Some(path) = require_model(name) else {
            continue;
        };
        let file = KnotFile::read(&path);
        let model = file.model();
        let text = "Attention reads every key before the query, tile by tile. ".repeat(60);
        let ids = file.tokenizer().encode_with_bos(&text).unwrap();
        assert!(
            ids.len() >= head_len + tail_len,
            "{name}: {} ids",
            ids.len()
        );
        let (head, tail) = (&ids[..head_len], &ids[head_len..head_len + tail_len]);
        let vocab = model.config.vocab_size;
        let ctx = head_len + tail_len;
        let mut s = engine::Session::new(&model.config, ctx).unwrap();
        model.forward(&mut s, head, false).unwrap();
        let steps: Vec<Vec<f32>> = tail
            .iter()
            .map(|&t| model.forward(&mut s, &[t], false).unwrap().to_vec())
            .collect();
        let counts: &[usize] = if cfg!(target_arch = "wasm32") {
            &[1]
        } else {
            &[1, 2, 4]
        };
        for &threads in counts {
            let rows = engine::quant::with_threads(threads, || {
                let mut s = engine::Session::new(&model.config, ctx).unwrap();
                model.forward(&mut s, head, false).unwrap();
                model.forward(&mut s, tail, true).unwrap().to_vec()
            })
            .unwrap();
            let what = format!("{name}: {threads} threads, from position {head_len}");
            assert_rows_are_the_steps(&rows, &steps, vocab, &what);
        }
    }
}
