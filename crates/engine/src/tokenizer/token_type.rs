//! GGUF token types (`tokenizer.ggml.token_type`), shared by both models: they decide which
//! tokens match literally in text, which decode as text, and which are SentencePiece bytes.

/// GGUF token types. Control and user-defined tokens are matched literally in text and decoded
/// as their own text.
pub const TOKEN_TYPE_NORMAL: i32 = 1;
pub const TOKEN_TYPE_CONTROL: i32 = 3;
pub const TOKEN_TYPE_USER_DEFINED: i32 = 4;
pub const TOKEN_TYPE_BYTE: i32 = 6;

/// Token types that are never text: unknown, control (`<|im_end|>`, `<unused0>`), unused.
/// User-defined tokens decode to their own text (Gemma's newline runs are user-defined).
pub fn special_type(t: Option<i32>) -> bool {
    matches!(t, Some(2 | TOKEN_TYPE_CONTROL | 5))
}
