//! The tokenizers on arbitrary text and ids: the first byte picks a fixture tokenizer, the rest
//! is the text. Encoding yields ids inside the vocabulary; decoding gives the text back whenever
//! the vocabulary can spell it; decoding and stream-decoding any ids never panics.
#![no_main]

use engine::tokenizer::StreamDecoder;
use knot_fuzz::FixtureTokenizer;
use libfuzzer_sys::fuzz_target;

/// Whether `text` must come back exactly from `ids` (its encoding).
fn lossless(f: &FixtureTokenizer, text: &str, ids: &[u32]) -> bool {
    match f.tok.pre_tokenizer() {
        // SentencePiece: unless a piece fell back to the unknown token, or the text types the
        // `▁` space marker itself.
        None => !text.contains('▁') && f.unk_id.is_none_or(|u| !ids.contains(&u)),
        // Byte-level BPE: when the vocabulary spells every byte.
        Some(_) => text.bytes().all(|b| f.spellable[b as usize]),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let tokenizers = knot_fuzz::tokenizers();
    let fixture = &tokenizers[pick as usize % tokenizers.len()];
    let tok = &fixture.tok;
    let text = String::from_utf8_lossy(rest);
    // libFuzzer inputs are far below the encode cap, so encoding must succeed.
    let ids = tok.encode(&text).expect("text under the cap encodes");
    assert!(ids.iter().all(|&id| (id as usize) < tok.vocab_size()));
    let decoded = tok.decode(&ids).expect("encoded ids decode");
    if lossless(fixture, &text, &ids) {
        assert_eq!(decoded, text, "round trip");
    }
    // The same bytes read as ids, some past the vocabulary.
    let raw: Vec<u32> = rest
        .chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0)))
        .map(|x| x % (tok.vocab_size() as u32 + 8))
        .collect();
    let whole = tok.decode(&raw);
    let mut stream = StreamDecoder::new(tok);
    let mut streamed = String::new();
    let mut ok = true;
    for &id in &raw {
        match stream.push(id) {
            Ok(s) => streamed.push_str(&s),
            Err(_) => ok = false,
        }
    }
    streamed.push_str(&stream.finish());
    assert_eq!(whole.is_ok(), ok, "decode and stream agree on errors");
    if let Ok(whole) = whole {
        assert_eq!(streamed, whole, "stream decode matches decode");
    }
});
