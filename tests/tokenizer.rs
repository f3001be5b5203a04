//! Tokenizer and chat-template parity with HF on the real SmolLM2 vocabulary, read from the
//! converted knot file exactly as the runtime reads it. Runs natively and under wasm32.

use engine::chat::{render_chat, ChatMessage};
use engine::tokenizer::StreamDecoder;
use knot_suite::{fixture, load_reference, require_model, KnotFile};
use serde::Deserialize;

#[derive(Deserialize)]
struct Cases {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
}

fn smollm2() -> Option<KnotFile> {
    require_model("SmolLM2-135M-Instruct.Q4_1.knot").map(|p| KnotFile::read(&p))
}

#[test]
fn smollm2_tokenizer_matches_hf() {
    let Some(file) = smollm2() else { return };
    let tok = file.tokenizer();
    let path = fixture("tokenizer/smollm2.json");
    let cases: Cases = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(cases.cases.len() >= 20);
    for c in &cases.cases {
        assert_eq!(tok.encode(&c.text).unwrap(), c.ids, "encode {:?}", c.text);
        // SmolLM2's vocabulary has no token for some control bytes (e.g. 0x04); HF drops them
        // when encoding, as we do, so such texts cannot round-trip.
        let lossless = !c
            .text
            .chars()
            .any(|ch| ch.is_control() && !"\t\n\r".contains(ch));
        if lossless {
            assert_eq!(tok.decode(&c.ids).unwrap(), c.text, "decode {:?}", c.text);
        }
        let decoded = tok.decode(&c.ids).unwrap();
        // Streaming one id at a time yields the same text, never a broken character.
        let mut stream = StreamDecoder::new(&tok);
        let mut text = String::new();
        for &id in &c.ids {
            text += &stream.push(id).unwrap();
        }
        text += &stream.finish();
        assert_eq!(text, decoded, "stream {:?}", c.text);
    }
}

#[test]
fn smollm2_prompts_tokenize_like_hf() {
    let Some(file) = smollm2() else { return };
    let tok = file.tokenizer();
    for case in load_reference("smollm2.json").cases {
        let Some(chat) = case.chat else {
            let prompt = case
                .prompt
                .as_deref()
                .expect("plain cases record their prompt");
            assert_eq!(
                tok.encode_with_bos(prompt).unwrap(),
                case.prompt_ids,
                "{}",
                case.name
            );
            continue;
        };
        let messages: Vec<ChatMessage> = chat
            .messages
            .iter()
            .map(|m| ChatMessage::new(m.role.clone(), m.content.clone()))
            .collect();
        let template = file
            .knot
            .meta
            .chat_template
            .as_deref()
            .expect("chat template");
        let name = |id: Option<u32>| id.and_then(|i| tok.token(i)).unwrap_or("").to_string();
        let rendered = render_chat(
            template,
            &messages,
            true,
            &name(tok.bos_id()),
            &name(tok.eos_id()),
        )
        .unwrap();
        assert_eq!(rendered, chat.rendered, "{}", case.name);
        assert_eq!(
            tok.encode(&rendered).unwrap(),
            case.prompt_ids,
            "{}",
            case.name
        );
    }
}
