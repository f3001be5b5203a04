//! The chat template renderer: template source and messages both from the input, as
//! `template\0role\0content\0role\0content…`, with the generation prompt on or off.
#![no_main]

use engine::chat::{render_chat, ChatMessage};
use knot_fuzz::split;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut parts = split(data, usize::MAX).into_iter();
    let Some(template) = parts.next() else {
        return;
    };
    let template = String::from_utf8_lossy(template);
    let fields: Vec<String> = parts
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    let messages: Vec<ChatMessage> = fields
        .chunks(2)
        .map(|m| ChatMessage::new(m[0].as_str(), m.get(1).map_or("", String::as_str)))
        .collect();
    let add_generation_prompt = data.len().is_multiple_of(2);
    let _ = render_chat(
        &template,
        &messages,
        add_generation_prompt,
        "<|im_start|>",
        "<|im_end|>",
    );
});
