//! Option parsing on every surface: the JSON options object (sampling, `moa`, `coltrane` with
//! its schema, `draftMode`), `HostShim.open`'s options, the CLI's `--draft` and `--moa` specs, an
//! OpenAI `response_format`. Options that parse then drive a short generation on the tiny vocabulary.
#![no_main]

use engine::decode::{GenerateOptions, Generation};
use engine::draft::DraftConfig;
use libfuzzer_sys::fuzz_target;
use moa::MoaConfig;

/// Generation steps tried per accepted options object.
const STEPS: usize = 8;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = DraftConfig::parse_spec(text);
    let _ = MoaConfig::parse_spec(text);
    let _ = host::options::open_options(text);
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        let _ = coltrane::openai::preset_from_response_format(&v);
    }
    let Ok(opts) = GenerateOptions::from_json(text) else {
        return;
    };
    let tokenizer = knot_fuzz::tiny_tokenizer();
    let eos: Vec<u32> = tokenizer.eos_id().into_iter().collect();
    let vocab = tokenizer.vocab_size();
    let Ok(mut generation) = Generation::new(&opts, tokenizer, &eos, STEPS) else {
        return;
    };
    generation.accept_context(&[1, 2, 3]);
    for step in 0..STEPS {
        if generation.finished().is_some() {
            break;
        }
        let mut logits: Vec<f32> = (0..vocab)
            .map(|i| ((i * 31 + step * 7) % 17) as f32 - 8.0)
            .collect();
        match generation.next(&mut logits) {
            Ok(e) => assert!((e.id as usize) < vocab),
            Err(_) => break,
        }
    }
});
