//! What the fuzz targets share: the fixtures they build tokenizers from, and the framing that
//! packs several text inputs into one fuzz input.

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::OnceLock;

use engine::tokenizer::Tokenizer;
use knot::Knot;

/// A file under `tests/fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

/// Splits `data` at NUL bytes into at most `n` parts (the last keeps any further NULs). Several
/// text inputs travel in one fuzz input this way, so seeds stay plain text files.
pub fn split(data: &[u8], n: usize) -> Vec<&[u8]> {
    data.splitn(n, |&b| b == 0).collect()
}

/// The tokenizer blob of a knot fixture, as the runtime reads it.
fn knot_tokenizer(name: &str) -> knot::TokenizerData {
    let file = std::fs::read(fixture(name)).expect("fixture knot file");
    let knot = Knot::from_bytes(&file).expect("fixture parses");
    let range = knot.tokenizer_range();
    Knot::parse_tokenizer(&file[range.start as usize..range.end as usize]).expect("blob parses")
}

/// A fixture tokenizer with what a round-trip check needs to know about its vocabulary.
pub struct FixtureTokenizer {
    pub tok: Tokenizer,
    pub unk_id: Option<u32>,
    /// Bytes that have a single-byte token: text made of these must round-trip.
    pub spellable: [bool; 256],
}

/// The fixture tokenizers: tiny byte-level BPE (llama), tiny SentencePiece (gemma3), and the
/// real SmolLM2 vocabulary. Built once per process.
pub fn tokenizers() -> &'static [FixtureTokenizer] {
    static TOKENIZERS: OnceLock<Vec<FixtureTokenizer>> = OnceLock::new();
    TOKENIZERS.get_or_init(|| {
        let smollm2: knot::TokenizerData = serde_json::from_slice(
            &std::fs::read(fixture("tokenizer/smollm2_tokenizer.json")).expect("fixture"),
        )
        .expect("fixture parses");
        [
            knot_tokenizer("tiny/llama-f32.knot"),
            knot_tokenizer("tiny/gemma3-f32.knot"),
            smollm2,
        ]
        .iter()
        .map(|data| {
            let tok = Tokenizer::from_data(data).expect("fixture tokenizer builds");
            let mut spellable = [false; 256];
            for id in 0..tok.vocab_size() as u32 {
                if let Some(&[b]) = tok.token_bytes(id) {
                    spellable[b as usize] = true;
                }
            }
            FixtureTokenizer {
                tok,
                unk_id: data.unk_id,
                spellable,
            }
        })
        .collect()
    })
}

/// The tiny byte-level BPE tokenizer, for targets that decode what they generate.
pub fn tiny_tokenizer() -> Rc<Tokenizer> {
    thread_local! {
        static TINY: Rc<Tokenizer> = Rc::new(
            Tokenizer::from_data(&knot_tokenizer("tiny/llama-f32.knot")).expect("fixture builds"),
        );
    }
    TINY.with(Rc::clone)
}

/// A scratch directory of this process under the system temp dir (`TMPDIR`; `scripts/fuzz.sh`
/// points it at a directory it removes afterwards), for the targets that go through files.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("knot-fuzz-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}
