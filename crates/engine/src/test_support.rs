//! What unit tests across the crate build on: a byte-level tokenizer and logits pointing at a
//! token.

use crate::tokenizer::bpe::byte_to_char;
use crate::tokenizer::Tokenizer;
use knot::TokenizerData;
use std::rc::Rc;

/// The end-of-text id of [`bytes_tokenizer`].
pub const END: u32 = 256;

/// 256 byte tokens plus an end-of-text token, id 256.
pub fn bytes_tokenizer() -> Rc<Tokenizer> {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
    tokens.push("<|end|>".into());
    let mut token_types = vec![1; 256];
    token_types.push(3);
    let data = TokenizerData {
        model: "gpt2".into(),
        pre: Some("smollm".into()),
        tokens,
        token_types,
        eos_id: Some(END),
        ..Default::default()
    };
    Rc::new(Tokenizer::from_data(&data).unwrap())
}

/// Logits over [`bytes_tokenizer`]'s vocabulary that make greedy pick `id`.
pub fn pointing_at(id: u32) -> Vec<f32> {
    let mut l = vec![0.0f32; END as usize + 1];
    l[id as usize] = 10.0;
    l
}
