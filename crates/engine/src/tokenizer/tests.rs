use super::*;
use knot::TokenizerData;

/// A vocabulary of the 256 byte symbols, a few merges and three literal-match tokens.
fn tiny_data() -> TokenizerData {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
    let mut token_types = vec![1; 256];
    let merges = [
        "h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d",
    ];
    for merge in merges {
        tokens.push(merge.replace(' ', ""));
        token_types.push(1);
    }
    for (special, token_type) in [("<|im_start|>", 3), ("<|im_end|>", 3), ("<think>", 4)] {
        tokens.push(special.to_string());
        token_types.push(token_type);
    }
    TokenizerData {
        model: "gpt2".into(),
        pre: Some("smollm".into()),
        tokens,
        token_types,
        merges: merges.iter().map(|m| m.to_string()).collect(),
        bos_id: Some(265),
        eos_id: Some(266),
        add_bos: true,
        ..Default::default()
    }
}

fn tiny() -> Tokenizer {
    Tokenizer::from_data(&tiny_data()).unwrap()
}

fn id_of(tok: &Tokenizer, token: &str) -> u32 {
    (0..tok.vocab_size() as u32)
        .find(|&id| tok.token(id) == Some(token))
        .unwrap()
}

#[test]
fn encodes_with_merges_and_literal_tokens() {
    let tok = tiny();
    let hello = id_of(&tok, "hello");
    let world = id_of(&tok, "Ġworld");
    assert_eq!(tok.encode("hello world").unwrap(), [hello, world]);
    assert_eq!(
        tok.encode("<|im_start|>hello<think> world<|im_end|>")
            .unwrap(),
        [265, hello, 267, world, 266]
    );
    // A partial special token is ordinary text.
    let partial = tok.encode("<|im_start").unwrap();
    assert!(!partial.contains(&265));
    assert_eq!(tok.decode(&partial).unwrap(), "<|im_start");
    assert_eq!(tok.encode("").unwrap(), Vec::<u32>::new());
    assert_eq!(tok.encode_with_bos("hello").unwrap(), [265, hello]);
    assert_eq!(tok.bos_id(), Some(265));
    assert_eq!(tok.eos_id(), Some(266));
}

#[test]
fn without_add_bos_no_bos_is_prepended() {
    let data = TokenizerData {
        add_bos: false,
        ..tiny_data()
    };
    let tok = Tokenizer::from_data(&data).unwrap();
    assert_eq!(
        tok.encode_with_bos("he").unwrap(),
        tok.encode("he").unwrap()
    );
}

#[test]
fn decodes_bytes_and_control_tokens() {
    let tok = tiny();
    let ids = tok.encode("<|im_start|>héllo 中 😀\n").unwrap();
    assert_eq!(tok.decode(&ids).unwrap(), "<|im_start|>héllo 中 😀\n");
    assert_eq!(tok.token_bytes(id_of(&tok, "Ġworld")), Some(&b" world"[..]));
    // A lone continuation byte and a truncated sequence become U+FFFD, as in HF.
    let lone = tok.byte_ids[0x80].unwrap();
    assert_eq!(tok.decode(&[lone]).unwrap(), "\u{FFFD}");
    let e4 = tok.byte_ids[0xE4].unwrap();
    let a = tok.byte_ids[b'a' as usize].unwrap();
    assert_eq!(tok.decode(&[e4, a]).unwrap(), "\u{FFFD}a");
}

#[test]
fn decode_rejects_out_of_range_ids() {
    let tok = tiny();
    let n = tok.vocab_size() as u32;
    assert!(matches!(
        tok.decode(&[0, n]),
        Err(TokenizerError::IdOutOfRange { id, .. }) if id == n
    ));
    assert!(matches!(
        StreamDecoder::new(&tok).push(u32::MAX),
        Err(TokenizerError::IdOutOfRange { .. })
    ));
    assert_eq!(tok.token(n), None);
    assert_eq!(tok.token_bytes(n), None);
}

#[test]
fn stream_decoder_holds_back_split_characters() {
    let tok = tiny();
    let text = "a中😀b";
    let ids: Vec<u32> = text
        .bytes()
        .map(|b| tok.byte_ids[b as usize].unwrap())
        .collect();
    let mut stream = StreamDecoder::new(&tok);
    let pieces: Vec<String> = ids.iter().map(|&id| stream.push(id).unwrap()).collect();
    assert_eq!(pieces[0], "a");
    assert_eq!(pieces[1], "");
    assert_eq!(pieces[2], "");
    assert_eq!(pieces[3], "中");
    assert_eq!(pieces.concat() + &stream.finish(), text);

    // An unfinished sequence at the end is flushed as U+FFFD; invalid bytes mid-stream too.
    let mut stream = StreamDecoder::new(&tok);
    let e4 = tok.byte_ids[0xE4].unwrap();
    let ff = tok.byte_ids[0xFF].unwrap();
    assert_eq!(stream.push(e4).unwrap(), "");
    assert_eq!(stream.push(ff).unwrap(), "\u{FFFD}\u{FFFD}");
    assert_eq!(stream.push(e4).unwrap(), "");
    assert_eq!(stream.finish(), "\u{FFFD}");
    assert_eq!(stream.finish(), "");
}

#[test]
fn bad_data_is_a_typed_error() {
    let check = |data: TokenizerData| Tokenizer::from_data(&data).unwrap_err();
    let base = tiny_data;
    assert!(matches!(
        check(TokenizerData { model: "t5".into(), ..base() }),
        TokenizerError::UnknownModel(m) if m == "t5"
    ));
    assert!(matches!(
        check(TokenizerData {
            pre: Some("mystery".into()),
            ..base()
        }),
        TokenizerError::UnknownPreTokenizer(_)
    ));
    assert!(matches!(
        check(TokenizerData {
            tokens: vec![],
            token_types: vec![],
            merges: vec![],
            bos_id: None,
            eos_id: None,
            ..base()
        }),
        TokenizerError::EmptyVocabulary
    ));
    assert!(matches!(
        check(TokenizerData {
            token_types: vec![1; 3],
            ..base()
        }),
        TokenizerError::TokenTypeCount { types: 3, .. }
    ));
    for bad in ["he", "h  e", " he", "h e ", ""] {
        let mut data = base();
        data.merges.push(bad.into());
        assert!(
            matches!(check(data), TokenizerError::MalformedMerge { index: 9, .. }),
            "{bad:?}"
        );
    }
    let mut data = base();
    data.merges.push("q zz".into());
    assert!(matches!(
        check(data),
        TokenizerError::MergeTokenUnknown { token, .. } if token == "zz"
    ));
    let mut data = base();
    data.merges.push("w o".into()); // "wo" is not a token
    assert!(matches!(
        check(data),
        TokenizerError::MergeTokenUnknown { token, .. } if token == "wo"
    ));
    assert!(matches!(
        check(TokenizerData {
            eos_id: Some(10_000),
            ..base()
        }),
        TokenizerError::SpecialIdOutOfRange {
            which: "eos",
            id: 10_000,
            ..
        }
    ));
}

#[test]
fn missing_token_types_mean_no_literal_tokens() {
    let data = TokenizerData {
        token_types: vec![],
        ..tiny_data()
    };
    let tok = Tokenizer::from_data(&data).unwrap();
    assert!(!tok.encode("<think>").unwrap().contains(&267));
}

#[test]
fn bytes_without_a_token_are_dropped() {
    let mut data = tiny_data();
    // Rename the symbol of byte 0x04 so no token spells it.
    data.tokens[4] = "unused-symbol".into();
    let tok = Tokenizer::from_data(&data).unwrap();
    assert_eq!(tok.decode(&tok.encode("a\u{4}b").unwrap()).unwrap(), "ab");
}

// ---- Parity with Hugging Face on SmolLM2 (fixtures from scripts/reference/gen_tokenizer_fixtures.py)

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../../tests/fixtures/tokenizer/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn smollm2() -> Tokenizer {
    let data: TokenizerData = serde_json::from_str(&fixture("smollm2_tokenizer.json")).unwrap();
    Tokenizer::from_data(&data).unwrap()
}

#[derive(serde::Deserialize)]
struct Cases {
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
    /// HF's `decode(ids, skip_special_tokens=False)` (SentencePiece fixtures only).
    #[serde(default)]
    decoded: Option<String>,
}

fn smollm2_cases() -> Vec<Case> {
    let cases: Cases = serde_json::from_str(&fixture("smollm2.json")).unwrap();
    assert!(cases.cases.len() > 100);
    cases.cases
}

/// `text` with the bytes the vocabulary cannot spell removed: what a round trip gives back.
fn spellable(tok: &Tokenizer, text: &str) -> String {
    let bytes: Vec<u8> = text
        .bytes()
        .filter(|&b| tok.byte_ids[b as usize].is_some())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn smollm2_matches_hugging_face() {
    let tok = smollm2();
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.pre_tokenizer(), Some(PreTokenizer::DigitsGpt2));
    let mut failures = Vec::new();
    for case in smollm2_cases() {
        let ids = tok.encode(&case.text).unwrap();
        if ids != case.ids {
            failures.push(format!("{:?}: got {ids:?}, want {:?}", case.text, case.ids));
        }
        assert_eq!(
            tok.decode(&ids).unwrap(),
            spellable(&tok, &case.text),
            "round trip of {:?}",
            case.text
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn smollm2_stream_decoding_matches_decode() {
    let tok = smollm2();
    for case in smollm2_cases() {
        let mut stream = StreamDecoder::new(&tok);
        let mut text = String::new();
        for &id in &case.ids {
            // Every push returns whole chars only: a String cannot hold a split one, and
            // U+FFFD appears only where the input itself had an unspellable byte.
            text.push_str(&stream.push(id).unwrap());
        }
        text.push_str(&stream.finish());
        assert_eq!(text, tok.decode(&case.ids).unwrap(), "{:?}", case.text);
        assert!(!text.contains('\u{FFFD}') || case.text.contains('\u{FFFD}'));
    }
}

#[test]
fn pre_tokenizers_match_hugging_face_regexes() {
    #[derive(serde::Deserialize)]
    struct Fixture {
        families: HashMap<String, Vec<PreCase>>,
    }
    #[derive(serde::Deserialize)]
    struct PreCase {
        text: String,
        pieces: Vec<String>,
    }
    let fixture: Fixture = serde_json::from_str(&fixture("pretokenize.json")).unwrap();
    assert_eq!(fixture.families.len(), 4);
    let mut failures = Vec::new();
    for (family, cases) in &fixture.families {
        let pre = PreTokenizer::from_name(Some(family)).unwrap();
        assert!(cases.len() > 300);
        for case in cases {
            let mut pieces = Vec::new();
            pre.split(&case.text, |piece| pieces.push(piece));
            if pieces != case.pieces {
                failures.push(format!(
                    "{family} {:?}: got {pieces:?}, want {:?}",
                    case.text, case.pieces
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---- SentencePiece

/// A tiny SentencePiece vocabulary: control tokens, byte tokens, pieces with falling scores, a
/// user-defined space run and a literal user-defined tag.
fn tiny_spm_data() -> TokenizerData {
    let mut tokens: Vec<String> = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>"]
        .map(String::from)
        .to_vec();
    let mut token_types = vec![3; 5];
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    token_types.extend([6; 256]);
    for user_defined in ["  ", "\n", "<b>"] {
        tokens.push(user_defined.into());
        token_types.push(4);
    }
    for piece in [
        "▁", "a", "b", "c", "h", "e", "l", "o", "w", "r", "d", "é", "he", "ll", "▁w", "or", "hell",
        "hello", "▁wor", "▁worl", "▁world", "ab", "bc", "abc",
    ] {
        tokens.push(piece.into());
        token_types.push(1);
    }
    let scores = (0..tokens.len())
        .map(|id| {
            if token_types[id] == 1 {
                -(id as f32)
            } else {
                0.0
            }
        })
        .collect();
    TokenizerData {
        model: "llama".into(),
        pre: Some("default".into()),
        tokens,
        token_types,
        scores,
        bos_id: Some(2),
        eos_id: Some(1),
        unk_id: Some(3),
        add_bos: true,
        add_space_prefix: Some(false),
        ..Default::default()
    }
}

fn ids_of(tok: &Tokenizer, tokens: &[&str]) -> Vec<u32> {
    tokens.iter().map(|t| id_of(tok, t)).collect()
}

#[test]
fn sentencepiece_merges_best_pieces_first() {
    let tok = Tokenizer::from_data(&tiny_spm_data()).unwrap();
    assert_eq!(tok.pre_tokenizer(), None);
    assert_eq!(
        tok.encode("hello world").unwrap(),
        ids_of(&tok, &["hello", "▁world"])
    );
    // "ab" outranks "bc", so "abc" is reached through ("ab", "c").
    assert_eq!(tok.encode("abc").unwrap(), ids_of(&tok, &["abc"]));
    assert_eq!(tok.encode("bca").unwrap(), ids_of(&tok, &["bc", "a"]));
    // Literal tokens, the space run as an ordinary piece, the marker typed literally.
    assert_eq!(
        tok.encode("<start_of_turn>a  b\n<b>").unwrap(),
        [4].into_iter()
            .chain(ids_of(&tok, &["a", "  ", "b", "\n", "<b>"]))
            .collect::<Vec<_>>()
    );
    assert_eq!(tok.encode("▁w").unwrap(), ids_of(&tok, &["▁w"]));
    assert_eq!(tok.encode("").unwrap(), Vec::<u32>::new());
    assert_eq!(tok.encode_with_bos("a").unwrap(), [2, id_of(&tok, "a")]);
}

#[test]
fn sentencepiece_falls_back_to_bytes_and_decodes_them() {
    let tok = Tokenizer::from_data(&tiny_spm_data()).unwrap();
    let zhong = "中".bytes().map(|b| 5 + u32::from(b)).collect::<Vec<_>>();
    let ids = tok.encode("a中").unwrap();
    assert_eq!(ids[0], id_of(&tok, "a"));
    assert_eq!(ids[1..], zhong[..]);
    assert_eq!(tok.decode(&ids).unwrap(), "a中");
    assert_eq!(
        tok.decode(&tok.encode("he wor  é").unwrap()).unwrap(),
        "he wor  é"
    );
    assert_eq!(tok.decode(&[4, 1]).unwrap(), "<start_of_turn><eos>");
    // The stream holds a run of byte tokens back until a text token ends it.
    let mut stream = StreamDecoder::new(&tok);
    assert_eq!(stream.push(zhong[0]).unwrap(), "");
    assert_eq!(stream.push(zhong[1]).unwrap(), "");
    assert_eq!(stream.push(zhong[2]).unwrap(), "");
    assert_eq!(stream.push(ids[0]).unwrap(), "中a");
    assert_eq!(stream.finish(), "");
    // A run that is not valid UTF-8 as a whole: one U+FFFD per byte token, as HF's ByteFallback.
    let byte = |b: u8| 5 + u32::from(b);
    let a = ids[0];
    for (ids, text) in [
        (vec![byte(0xE4), byte(0xB8)], "\u{FFFD}\u{FFFD}"),
        (vec![byte(0xE4), a], "\u{FFFD}a"),
        (
            vec![byte(0xFF), byte(0xE4), byte(0xB8), a, byte(0x80)],
            "\u{FFFD}\u{FFFD}\u{FFFD}a\u{FFFD}",
        ),
        (
            vec![byte(0xE4), 4, byte(0xB8), byte(0xAD)],
            "\u{FFFD}<start_of_turn>\u{FFFD}\u{FFFD}",
        ),
    ] {
        assert_eq!(tok.decode(&ids).unwrap(), text, "{ids:?}");
        let mut stream = StreamDecoder::new(&tok);
        let streamed: String = ids.iter().map(|&id| stream.push(id).unwrap()).collect();
        assert_eq!(streamed + &stream.finish(), text, "{ids:?}");
    }
}

#[test]
fn sentencepiece_unknown_characters_fuse_into_unk_without_byte_tokens() {
    let mut data = tiny_spm_data();
    // Drop byte 0xE4's token: "中" (E4 B8 AD) can no longer fall back to bytes.
    data.tokens[5 + 0xE4] = "gone".into();
    data.token_types[5 + 0xE4] = 1;
    let tok = Tokenizer::from_data(&data).unwrap();
    assert_eq!(
        tok.encode("a中中b").unwrap(),
        [id_of(&tok, "a"), 3, id_of(&tok, "b")]
    );
}

#[test]
fn sentencepiece_space_prefix() {
    let data = TokenizerData {
        add_space_prefix: None,
        ..tiny_spm_data()
    };
    let tok = Tokenizer::from_data(&data).unwrap();
    assert_eq!(tok.encode("world").unwrap(), ids_of(&tok, &["▁world"]));
    // Only at the start of the text, not after a literal token.
    assert_eq!(
        tok.encode("<eos>world").unwrap()[1..],
        ids_of(&tok, &["w", "or", "l", "d"])[..]
    );
    // A leading space is the prefix already (HF's Metaspace); decoding drops one leading space.
    // (Checked against transformers' LlamaTokenizer(add_prefix_space=True) on this vocabulary.)
    assert_eq!(tok.encode(" world").unwrap(), tok.encode("world").unwrap());
    assert_eq!(tok.decode(&tok.encode(" world").unwrap()).unwrap(), "world");
    // (This vocabulary's "  " run outranks "▁w".)
    assert_eq!(tok.encode("  world").unwrap()[0], id_of(&tok, "  "));
    assert_eq!(
        tok.decode(&tok.encode("  world").unwrap()).unwrap(),
        " world"
    );
    let space_byte = 5 + u32::from(b' ');
    assert_eq!(tok.decode(&[space_byte, id_of(&tok, "a")]).unwrap(), "a");
    assert_eq!(
        tok.decode(&[4, id_of(&tok, "▁w")]).unwrap(),
        "<start_of_turn> w"
    );
    let ids = tok.encode("world hello").unwrap();
    assert_eq!(tok.decode(&ids).unwrap(), "world hello");
    let mut stream = StreamDecoder::new(&tok);
    let streamed: String = ids.iter().map(|&id| stream.push(id).unwrap()).collect();
    assert_eq!(streamed + &stream.finish(), "world hello");
}

#[test]
fn sentencepiece_ranks_by_score_when_scores_are_not_ordered_by_id() {
    let mut data = tiny_spm_data();
    let abc = data.tokens.iter().position(|t| t == "abc").unwrap();
    data.tokens[abc] = "unrelated".into();
    let by_id = Tokenizer::from_data(&data).unwrap();
    assert_eq!(by_id.encode("abc").unwrap(), ids_of(&by_id, &["ab", "c"]));
    let bc = data.tokens.iter().position(|t| t == "bc").unwrap();
    data.scores[bc] = 10.0;
    let tok = Tokenizer::from_data(&data).unwrap();
    assert_eq!(tok.encode("abc").unwrap(), ids_of(&tok, &["a", "bc"]));
}

#[test]
fn sentencepiece_bad_data_is_a_typed_error() {
    let data = TokenizerData {
        scores: vec![0.0; 3],
        ..tiny_spm_data()
    };
    assert!(matches!(
        Tokenizer::from_data(&data).unwrap_err(),
        TokenizerError::ScoreCount { scores: 3, .. }
    ));
    let data = TokenizerData {
        unk_id: Some(1 << 20),
        ..tiny_spm_data()
    };
    assert!(matches!(
        Tokenizer::from_data(&data).unwrap_err(),
        TokenizerError::SpecialIdOutOfRange {
            which: "unknown",
            ..
        }
    ));
    let data = TokenizerData {
        token_types: vec![1; 2],
        ..tiny_spm_data()
    };
    assert!(matches!(
        Tokenizer::from_data(&data).unwrap_err(),
        TokenizerError::TokenTypeCount { types: 2, .. }
    ));
}

// ---- Parity with Hugging Face on Gemma 3 (fixtures from gen_gemma_tokenizer_fixtures.py)

/// Gemma 3's tokenizer (262144 tokens, too large to commit) from the git-ignored models/ cache:
/// the converted models/gemma-3-270m.knot when present, else models/gemma3-tokenizer.json
/// (written by scripts/gemma3-tokenizer.sh). Neither: skipped, or a failure under
/// `KNOT_REQUIRE_MODELS`. Skipped under `KNOT_SKIP_MODELS` (the quick tier).
fn gemma3_data() -> Option<TokenizerData> {
    if std::env::var_os("KNOT_SKIP_MODELS").is_some() {
        eprintln!("skipping: Gemma 3's tokenizer (KNOT_SKIP_MODELS: the tiny-model tier)");
        return None;
    }
    let models = format!("{}/../../models", env!("CARGO_MANIFEST_DIR"));
    if let Ok(file) = std::fs::read(format!("{models}/gemma-3-270m.knot")) {
        let knot = knot::Knot::from_bytes(&file).unwrap();
        let range = knot.tokenizer_range();
        let blob = &file[range.start as usize..range.end as usize];
        return Some(knot::Knot::parse_tokenizer(blob).unwrap());
    }
    let path = format!("{models}/gemma3-tokenizer.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(serde_json::from_str(&text).unwrap()),
        Err(e) if std::env::var_os("KNOT_REQUIRE_MODELS").is_some() => {
            panic!("{path}: {e} (run scripts/gemma3-tokenizer.sh)")
        }
        Err(e) => {
            eprintln!("skipping: {path}: {e} (run scripts/gemma3-tokenizer.sh)");
            None
        }
    }
}

fn gemma3() -> Option<Tokenizer> {
    gemma3_data().map(|data| Tokenizer::from_data(&data).unwrap())
}

fn gemma3_cases() -> Vec<Case> {
    let cases: Cases = serde_json::from_str(&fixture("gemma3.json")).unwrap();
    assert!(cases.cases.len() > 200);
    cases.cases
}

#[test]
fn gemma3_matches_hugging_face() {
    let Some(tok) = gemma3() else { return };
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!(
        (tok.bos_id(), tok.eos_id(), tok.add_bos()),
        (Some(2), Some(1), true)
    );
    let mut failures = Vec::new();
    let mut round_trips = 0;
    let cases = gemma3_cases();
    for case in &cases {
        let ids = tok.encode(&case.text).unwrap();
        if ids != case.ids {
            failures.push(format!("{:?}: got {ids:?}, want {:?}", case.text, case.ids));
        }
        let decoded = tok.decode(&case.ids).unwrap();
        if Some(&decoded) != case.decoded.as_ref() {
            failures.push(format!(
                "decode {:?}: got {decoded:?}, want {:?}",
                case.text, case.decoded
            ));
        }
        if case.decoded.as_ref() == Some(&case.text) {
            round_trips += 1;
            assert_eq!(tok.decode(&ids).unwrap(), case.text);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Only inputs typing the `▁` marker itself do not come back unchanged.
    assert!(round_trips >= cases.iter().filter(|c| !c.text.contains('▁')).count());
}

/// Decoding alone, including byte-token runs that are not valid UTF-8.
#[test]
fn gemma3_decodes_byte_runs_as_hugging_face() {
    #[derive(serde::Deserialize)]
    struct Fixture {
        decode_cases: Vec<DecodeCase>,
    }
    #[derive(serde::Deserialize)]
    struct DecodeCase {
        ids: Vec<u32>,
        decoded: String,
    }
    let Some(tok) = gemma3() else { return };
    let fixture: Fixture = serde_json::from_str(&fixture("gemma3.json")).unwrap();
    assert!(fixture.decode_cases.len() >= 10);
    for case in &fixture.decode_cases {
        assert_eq!(
            tok.decode(&case.ids).unwrap(),
            case.decoded,
            "{:?}",
            case.ids
        );
        let mut stream = StreamDecoder::new(&tok);
        let streamed: String = case
            .ids
            .iter()
            .map(|&id| stream.push(id).unwrap())
            .collect();
        assert_eq!(streamed + &stream.finish(), case.decoded, "{:?}", case.ids);
    }
}

#[test]
fn gemma3_stream_decoding_matches_decode() {
    let Some(tok) = gemma3() else { return };
    for case in gemma3_cases() {
        let mut stream = StreamDecoder::new(&tok);
        let mut text = String::new();
        for &id in &case.ids {
            text.push_str(&stream.push(id).unwrap());
        }
        text.push_str(&stream.finish());
        assert_eq!(text, tok.decode(&case.ids).unwrap(), "{:?}", case.text);
    }
}

/// Run with `cargo test -p engine --release --lib tokenizer::tests::gemma3_speed -- --ignored --nocapture`.
#[test]
#[ignore = "timing, not a check"]
fn gemma3_speed() {
    let data = gemma3_data().unwrap();
    let start = std::time::Instant::now();
    let tok = Tokenizer::from_data(&data).unwrap();
    println!("from_data: {:?}", start.elapsed());
    let mut text = String::new();
    for case in gemma3_cases() {
        text.push_str(&case.text);
        text.push(' ');
    }
    while text.len() < 10_000 {
        text.push_str("The quick brown fox jumps over the lazy dog; fn main() { x += 1234; }\n");
    }
    let start = std::time::Instant::now();
    let rounds = 50;
    let mut n = 0;
    for _ in 0..rounds {
        n = tok.encode(&text).unwrap().len();
    }
    let per = start.elapsed() / rounds;
    println!("{} bytes -> {n} tokens in {per:?}", text.len());
}

/// Run with `cargo test -p engine --release --lib tokenizer::tests::encode_speed -- --ignored --nocapture`.
#[test]
#[ignore = "timing, not a check"]
fn encode_speed() {
    let data: TokenizerData = serde_json::from_str(&fixture("smollm2_tokenizer.json")).unwrap();
    let start = std::time::Instant::now();
    let tok = Tokenizer::from_data(&data).unwrap();
    println!("from_data: {:?}", start.elapsed());
    let mut text = String::new();
    for case in smollm2_cases() {
        text.push_str(&case.text);
        text.push(' ');
    }
    while text.len() < 10_000 {
        text.push_str("The quick brown fox jumps over the lazy dog; fn main() { x += 1234; }\n");
    }
    let start = std::time::Instant::now();
    let rounds = 50;
    let mut n = 0;
    for _ in 0..rounds {
        n = tok.encode(&text).unwrap().len();
    }
    let per = start.elapsed() / rounds;
    println!("{} bytes -> {n} tokens in {per:?}", text.len());
}

// ---- Limits

/// Encoding keeps tens of bytes per character, so an unbounded input was an unbounded
/// allocation; over [`MAX_ENCODE_BYTES`] it is refused, byte-level BPE and SentencePiece alike.
#[test]
fn encode_refuses_text_over_the_cap() {
    let too_long = "a".repeat(MAX_ENCODE_BYTES + 1);
    for tok in [tiny(), Tokenizer::from_data(&tiny_spm_data()).unwrap()] {
        for result in [tok.encode(&too_long), tok.encode_with_bos(&too_long)] {
            match result {
                Err(TokenizerError::InputTooLong { len, max }) => {
                    assert_eq!((len, max), (MAX_ENCODE_BYTES + 1, MAX_ENCODE_BYTES))
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(!tok.encode("hello").unwrap().is_empty());
    }
}

/// Thousands of literal tokens sharing a first byte (Gemma-3's `<unused…>`) and text made of that
/// byte: every position used to be compared with every token. The matches stay exact.
#[test]
fn many_specials_sharing_a_prefix_match_exactly() {
    for mut data in [tiny_data(), tiny_spm_data()] {
        let first = data.tokens.len() as u32;
        for i in 0..6000 {
            data.tokens.push(format!("<unused{i}>"));
            data.token_types.push(TOKEN_TYPE_CONTROL);
            if !data.scores.is_empty() {
                data.scores.push(0.0);
            }
        }
        let tok = Tokenizer::from_data(&data).unwrap();
        let text = format!("{}<unused4242><unused1>0<unused", "<".repeat(100_000));
        let ids = tok.encode(&text).unwrap();
        let specials: Vec<u32> = ids.iter().copied().filter(|&id| id >= first).collect();
        assert_eq!(specials, [first + 4242, first + 1], "{}", data.model);
        assert_eq!(tok.decode(&ids).unwrap(), text);
    }
}
