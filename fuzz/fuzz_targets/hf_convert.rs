//! A HuggingFace directory as the converter reads it: `config.json`, `tokenizer.json` and
//! `tokenizer_config.json` from the input (NUL-separated), beside the tiny llama checkpoint's
//! weights, so the config and tokenizer parsing run through to the layout and the knot file.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use knot_cli::convert::{hf_to_knot, ConvertOptions};
use knot_fuzz::{fixture, scratch_dir, split};
use libfuzzer_sys::fuzz_target;

/// This process's model directory, holding the fixture weights.
fn model_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch_dir("hf");
        std::fs::copy(
            fixture("tiny/llama-f16-hf/model.safetensors"),
            dir.join("model.safetensors"),
        )
        .expect("fixture weights");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let dir = model_dir();
    let parts = split(data, 3);
    let names = ["config.json", "tokenizer.json", "tokenizer_config.json"];
    for (i, name) in names.iter().enumerate() {
        let path = dir.join(name);
        match parts.get(i) {
            Some(bytes) => std::fs::write(&path, bytes).expect("scratch write"),
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    let _ = hf_to_knot(
        dir,
        &dir.join("out.knot"),
        &ConvertOptions::default(),
        &|_, _| {},
    );
});
