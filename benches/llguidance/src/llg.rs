//! The llguidance side: the model's vocabulary as a `TokTrie`, and a JSON grammar that accepts
//! the same documents COLTRANE's `Preset::Json` does.

use coltrane::TokenKind;
use engine::tokenizer::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::ParserFactory;
use std::sync::Arc;

/// Longest whitespace run COLTRANE allows between JSON tokens (`coltrane::machine::MAX_WS`).
const MAX_WS: u8 = coltrane::machine::MAX_WS;

/// The tokenizer as llguidance sees it: each token's decoded bytes, special tokens (and the
/// end-of-text ids) behind llguidance's special-token marker `0xFF`, so no JSON text can
/// contain them, as COLTRANE keeps `TokenKind::Special` out.
struct Env {
    trie: TokTrie,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    /// Not canonical: llguidance then never forces a token (a singleton mask) from bytes the
    /// grammar forces, and every mask is the set of tokens whose bytes the grammar allows,
    /// which is what COLTRANE computes.
    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

pub fn tok_env(tokenizer: &Tokenizer, eos_ids: &[u32]) -> TokEnv {
    let n = tokenizer.vocab_size();
    let words: Vec<Vec<u8>> = (0..n as u32)
        .map(|id| {
            let bytes = tokenizer.token_bytes(id).unwrap_or_default();
            let special =
                tokenizer.token_kind(id) == Some(TokenKind::Special) || eos_ids.contains(&id);
            match special {
                true => [&[TokTrie::SPECIAL_TOKEN_MARKER], bytes].concat(),
                false => bytes.to_vec(),
            }
        })
        .collect();
    let info = TokRxInfo::new(n as u32, eos_ids[0]);
    let trie = TokTrie::from(&info, &words).with_eos_tokens(eos_ids);
    Arc::new(Env { trie })
}

/// llguidance's per-tokenizer state (its default token slices), as a server makes it once.
pub fn factory(env: &TokEnv) -> Result<ParserFactory, String> {
    let mut f = ParserFactory::new_simple(env).map_err(|e| format!("llguidance factory: {e}"))?;
    f.quiet();
    Ok(f)
}

/// "Any JSON value" as a JSON schema, with the options that make llguidance's language match
/// COLTRANE's: whitespace runs of 1..=24 bytes between tokens (and around the value), and
/// `\uXXXX` escapes of any character, not only of control characters.
pub fn any_json() -> TopLevelGrammar {
    let ws = format!(r"[\x20\x0A\x0D\x09]{{1,{MAX_WS}}}");
    TopLevelGrammar::from_json_schema(serde_json::json!({
        "x-guidance": {
            "whitespace_pattern": ws,
            "json_allow_general_unicode_escapes": true,
        }
    }))
}
