//! The knot prefix reader as a host uses it: the fixed header, the prefix length it asks for,
//! then the parse against the file length the source reports (the whole input, or a prefix of a
//! far larger file), and every accessor and the engine's config and tensor checks on success.
#![no_main]

use engine::model::{ConfigExt, LayerLayout, ResidentLayout};
use knot::{Knot, ReadOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let opts = ReadOptions::default();
    let _ = Knot::prefix_len(data, &opts);
    for file_len in [data.len() as u64, 1u64 << 40, u64::MAX] {
        let Ok(knot) = Knot::parse_prefix(data, file_len, &opts) else {
            continue;
        };
        for t in &knot.meta.tensors {
            let _ = knot.tensor(&t.name);
            let _ = knot.tensor_bytes(data, &t.name);
        }
        let resident = knot.resident_tensors();
        let _ = knot.resident_range();
        let tokenizer = knot.tokenizer_range();
        if let Some(blob) = data.get(tokenizer.start as usize..tokenizer.end as usize) {
            if let Ok(t) = Knot::parse_tokenizer(blob) {
                let _ = engine::tokenizer::Tokenizer::from_data(&t);
            }
        }
        let layers: Vec<_> = (0..=knot.n_layers())
            .map(|l| (knot.layer_range(l), knot.layer_tensors(l)))
            .collect();
        let cfg = &knot.meta.config;
        if cfg.validate().is_ok() {
            let _ = ResidentLayout::locate(cfg, &resident);
            for (l, (_, tensors)) in layers.iter().enumerate() {
                if let Some(tensors) = tensors {
                    let _ = LayerLayout::locate(cfg, l, tensors);
                }
            }
        }
    }
});
