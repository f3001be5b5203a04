//! What the engine accepts of a model's config: the architectures it runs, the derived sizes
//! (`q_dim`, `kv_dim`) and the bounds every size and float from the file must keep
//! ([`ConfigExt::validate`]), checked before anything is allocated from them.

use super::error::EngineError;
use knot::ModelConfig;

/// Architectures this engine runs.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &["llama", "qwen2", "qwen3", "gemma3"];

/// Rejects architectures the forward pass does not implement, naming them.
pub fn check_architecture(name: &str) -> Result<(), EngineError> {
    if SUPPORTED_ARCHITECTURES.contains(&name) {
        Ok(())
    } else {
        Err(EngineError::UnsupportedArchitecture(name.to_string()))
    }
}

/// Derived sizes the config does not store, and the checks of what it accepts.
pub trait ConfigExt {
    fn q_dim(&self) -> usize;
    fn kv_dim(&self) -> usize;
    fn validate(&self) -> Result<(), EngineError>;
    /// Every id below the vocabulary size: the one check of token ids, wherever they enter.
    fn check_tokens(&self, ids: &[u32]) -> Result<(), EngineError>;
}

/// Bounds on the sizes a config may declare, checked before anything is allocated from them
/// (they come from the file): far above every model this engine is for, far below what would
/// overflow a product or exhaust a wasm32 address space by themselves.
pub const MAX_DIM: usize = 1 << 16;
pub const MAX_FFN_DIM: usize = 1 << 18;
pub const MAX_HEADS: usize = 1 << 10;
pub const MAX_HEAD_DIM: usize = 1 << 12;
pub const MAX_VOCAB: usize = 1 << 22;
pub const MAX_LAYERS: usize = 1 << 12;
/// RMSNorm epsilons are 1e-5 or 1e-6; one near 1 already swamps typical activations.
pub const MAX_NORM_EPS: f32 = 1.0;
/// The attention scale's divisor is about `head_dim`; this is `MAX_HEAD_DIM²`.
pub const MAX_QUERY_PRE_ATTN_SCALAR: f32 = (1u32 << 24) as f32;

impl ConfigExt for ModelConfig {
    // `validate` bounds heads and head_dim, so these products cannot overflow once it passed;
    // before that, they saturate instead of wrapping.
    fn q_dim(&self) -> usize {
        self.n_heads.saturating_mul(self.head_dim)
    }
    fn kv_dim(&self) -> usize {
        self.n_kv_heads.saturating_mul(self.head_dim)
    }
    fn check_tokens(&self, ids: &[u32]) -> Result<(), EngineError> {
        let vocab = self.vocab_size;
        match ids.iter().find(|&&id| id as usize >= vocab) {
            Some(&id) => Err(EngineError::TokenOutOfRange { id, vocab }),
            None => Ok(()),
        }
    }
    fn validate(&self) -> Result<(), EngineError> {
        let bad = |m: &str| Err(EngineError::BadConfig(m.to_string()));
        if self.dim == 0 || self.n_heads == 0 || self.n_kv_heads == 0 || self.head_dim == 0 {
            return bad("dim, heads and head_dim must be positive");
        }
        for (name, value, max) in [
            ("dim", self.dim, MAX_DIM),
            ("ffn_dim", self.ffn_dim, MAX_FFN_DIM),
            ("n_heads", self.n_heads, MAX_HEADS),
            ("n_kv_heads", self.n_kv_heads, MAX_HEADS),
            ("head_dim", self.head_dim, MAX_HEAD_DIM),
            ("vocab_size", self.vocab_size, MAX_VOCAB),
            ("n_layers", self.n_layers, MAX_LAYERS),
        ] {
            if value > max {
                return Err(EngineError::BadConfig(format!(
                    "{name} {value} is above the supported maximum {max}"
                )));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad("n_heads must be a multiple of n_kv_heads");
        }
        if self.rope_dim > self.head_dim || !self.rope_dim.is_multiple_of(2) {
            return bad("rope_dim must be even and at most head_dim");
        }
        if self.vocab_size == 0 || self.ffn_dim == 0 || self.n_layers == 0 {
            return bad("vocab_size, ffn_dim and n_layers must be positive");
        }
        if self.sliding_window == Some(0) {
            return bad("sliding_window must be positive");
        }
        // Floats from the file: out of these ranges they are infinite or NaN (a JSON 1e300 reads
        // as inf) or make every activation vanish or overflow, so the model would quietly emit
        // nonsense instead of failing.
        let floats = [
            ("rope_theta", Some(self.rope_theta), 1.0, f32::MAX),
            ("rope_theta_local", self.rope_theta_local, 1.0, f32::MAX),
            ("norm_eps", Some(self.norm_eps), 0.0, MAX_NORM_EPS),
            (
                "query_pre_attn_scalar",
                self.query_pre_attn_scalar,
                1.0,
                MAX_QUERY_PRE_ATTN_SCALAR,
            ),
        ];
        for (name, value, min, max) in floats {
            if let Some(v) = value.filter(|v| !(*v >= min && *v <= max)) {
                return Err(EngineError::BadConfig(format!(
                    "{name} {v} is outside [{min}, {max:e}]"
                )));
            }
        }
        Ok(())
    }
}
