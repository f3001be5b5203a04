//! Tokenizer loading: a knot tokenizer blob (JSON `TokenizerData`) as a file may carry it, built
//! into a tokenizer that then encodes, decodes every id and builds its constraint index.
#![no_main]

use engine::tokenizer::Tokenizer;
use knot::Knot;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(blob) = Knot::parse_tokenizer(data) else {
        return;
    };
    let Ok(tok) = Tokenizer::from_data(&blob) else {
        return;
    };
    for text in [
        "Hello, world!",
        " <|im_start|>user\n 12345 ☃ é\t\r\n",
        "▁▁a",
    ] {
        let ids = tok.encode_with_bos(text).expect("short text encodes");
        assert!(ids.iter().all(|&id| (id as usize) < tok.vocab_size()));
        let _ = tok.decode(&ids);
    }
    let all: Vec<u32> = (0..tok.vocab_size() as u32 + 1).collect();
    let _ = tok.decode(&all);
    let eos: Vec<u32> = tok.eos_id().into_iter().collect();
    let _ = tok.constraint_index(&eos);
});
