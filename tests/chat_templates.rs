//! The chat templates implied by real vocabularies (`engine::chat::implied_template`): Gemma-3-270M,
//! whose file has no template, gets Gemma's turns; SmolLM2's ChatML agrees with its own template.

use engine::chat::{chat_prompt, implied_template, ChatMessage};
use knot_suite::{require_model, KnotFile};

#[test]
fn gemma3_270m_implies_gemma_turns_with_one_bos() {
    let Some(path) = require_model("gemma-3-270m.knot") else {
        return;
    };
    let file = KnotFile::read(&path);
    assert_eq!(
        file.knot.meta.chat_template, None,
        "the premise: no template in the file"
    );
    let tok = file.tokenizer();
    let implied = implied_template(&file.knot.meta.architecture, &tok).expect("a convention");
    assert_eq!(implied.name, "gemma");
    let prompt = chat_prompt(
        Some(implied.template),
        &tok,
        &[ChatMessage::new("user", "Hi!")],
    )
    .unwrap();
    // Chat prompts are encoded without adding BOS: the template writes it.
    let ids = tok.encode(&prompt).unwrap();
    let expected = tok
        .encode("<bos><start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\n")
        .unwrap();
    assert_eq!(ids, expected);
    let bos = tok.bos_id().expect("Gemma has a BOS");
    assert_eq!(ids[0], bos);
    assert_eq!(ids.iter().filter(|&&id| id == bos).count(), 1, "{ids:?}");
}

#[test]
fn smollm2_implies_chatml_as_its_own_template_renders_it() {
    let Some(path) = require_model("SmolLM2-135M-Instruct.Q4_1.knot") else {
        return;
    };
    let file = KnotFile::read(&path);
    let tok = file.tokenizer();
    let implied = implied_template(&file.knot.meta.architecture, &tok).expect("a convention");
    assert_eq!(implied.name, "chatml");
    let messages = [
        ChatMessage::new("system", "S"),
        ChatMessage::new("user", "Hi"),
    ];
    let own = file
        .knot
        .meta
        .chat_template
        .as_deref()
        .expect("SmolLM2's template");
    assert_eq!(
        chat_prompt(Some(implied.template), &tok, &messages).unwrap(),
        chat_prompt(Some(own), &tok, &messages).unwrap()
    );
}
