//! Helpers shared by the cross-crate tests: fixture paths and schemas, model loading.

use serde::Deserialize;
use std::path::PathBuf;

pub mod tool_corpus;

/// Absolute path under tests/fixtures (absolute so it also resolves under WASI).
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// Absolute path under the git-ignored models/ cache that scripts/fetch-model.sh fills.
pub fn model_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("models")
        .join(rel)
}

/// Whether the real-model tests are left out (`KNOT_SKIP_MODELS`, set by `scripts/test.sh
/// --quick`, the tier of the tiny fixtures): they skip even when the models are present.
pub fn skip_models() -> bool {
    std::env::var_os("KNOT_SKIP_MODELS").is_some()
}

/// Returns the model file if present. When `KNOT_REQUIRE_MODELS` is set (the test command sets
/// it), a missing model is a failure, so CI can never pass by skipping. `KNOT_SKIP_MODELS`
/// (the quick tier) skips the real-model tests whatever is present.
pub fn require_model(rel: &str) -> Option<PathBuf> {
    if skip_models() {
        eprintln!("skipping: {rel} (KNOT_SKIP_MODELS: the tiny-model tier)");
        return None;
    }
    let p = model_path(rel);
    if p.exists() {
        return Some(p);
    }
    if std::env::var_os("KNOT_REQUIRE_MODELS").is_some() {
        panic!("{} is missing: run scripts/fetch-model.sh", p.display());
    }
    eprintln!(
        "skipping: {} not present (run scripts/fetch-model.sh)",
        p.display()
    );
    None
}

/// The model a benchmark runs on: the first argument that is not a flag (`cargo bench` passes
/// `--bench`), else the default model. Exits with a hint when the file is missing.
pub fn bench_model_arg() -> PathBuf {
    let path = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(PathBuf::from)
        .unwrap_or_else(|| model_path("SmolLM2-135M-Instruct.Q4_1.knot"));
    if !path.exists() {
        eprintln!(
            "{} is missing: run scripts/prepare-model.sh",
            path.display()
        );
        std::process::exit(1);
    }
    path
}

/// The reference oracle's output (scripts/reference/): one file per model.
#[derive(Debug, Deserialize)]
pub struct Reference {
    pub model: String,
    pub cases: Vec<ReferenceCase>,
}

#[derive(Debug, Deserialize)]
pub struct ReferenceCase {
    pub name: String,
    #[serde(default)]
    pub prompt: Option<String>,
    pub prompt_ids: Vec<u32>,
    pub greedy_ids: Vec<u32>,
    pub teacher_forced: TeacherForced,
    #[serde(default)]
    pub full_logits_last: Option<Vec<f32>>,
    #[serde(default)]
    pub chat: Option<ChatCase>,
}

#[derive(Debug, Deserialize)]
pub struct TeacherForced {
    pub ids: Vec<u32>,
    pub positions: Vec<TopK>,
}

#[derive(Debug, Deserialize)]
pub struct TopK {
    pub ids: Vec<u32>,
    pub logits: Vec<f32>,
}

#[derive(Debug, Deserialize)]
pub struct ChatCase {
    pub messages: Vec<ChatMessageFixture>,
    pub rendered: String,
}

#[derive(Debug, Deserialize)]
pub struct ChatMessageFixture {
    pub role: String,
    pub content: String,
}

pub fn load_reference(rel: &str) -> Reference {
    let p = fixture(rel);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A knot file read whole, ready to build an `engine::Model` from.
pub struct KnotFile {
    pub bytes: Vec<u8>,
    pub knot: knot::Knot,
}

impl KnotFile {
    pub fn read(path: &std::path::Path) -> KnotFile {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let knot =
            knot::Knot::from_bytes(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        KnotFile { bytes, knot }
    }

    pub fn model(&self) -> engine::Model<'_> {
        let src = engine::model::knot_tensors(&self.knot, &self.bytes);
        engine::Model::load(&self.knot.meta.config, &src).expect("model loads")
    }

    pub fn tokenizer(&self) -> engine::tokenizer::Tokenizer {
        let span = self.knot.meta.tokenizer.blob;
        let start = (self.knot.payload_offset + span.offset) as usize;
        let data: knot::TokenizerData =
            serde_json::from_slice(&self.bytes[start..start + span.size as usize])
                .expect("tokenizer blob");
        engine::tokenizer::Tokenizer::from_data(&data).expect("tokenizer")
    }
}
