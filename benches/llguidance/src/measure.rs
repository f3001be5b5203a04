//! One model's measurement: both libraries forced through every document, their masks
//! compared, the probes run.

use crate::docs::{self, Rfc};
use crate::llg;
use coltrane::{Coltrane, ColtraneConfig, Index, Preset, TokenKind};
use engine::tokenizer::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{SimpleVob, TokEnv};
use llguidance::{Matcher, ParserFactory};
use std::sync::Arc;
use std::time::Instant;

/// A model's tokenizer and end-of-text ids.
pub struct Model {
    pub name: String,
    pub tokenizer: Tokenizer,
    pub eos_ids: Vec<u32>,
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// Latency summary in microseconds (nearest-rank percentiles).
#[derive(Default)]
pub struct Summary {
    pub n: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(samples: &[f64]) -> Summary {
        if samples.is_empty() {
            return Summary::default();
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let at = |q: f64| s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
        Summary {
            n: s.len(),
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            mean: s.iter().sum::<f64>() / s.len() as f64,
            max: s[s.len() - 1],
        }
    }
}

/// A document as the model's tokens.
pub struct Encoded {
    pub name: &'static str,
    pub ids: Vec<u32>,
    /// Tokens of kind `Special` in the tokenizer's own encoding, replaced by the longest
    /// non-special tokens spelling the same bytes: neither matcher may emit a special token, so
    /// the document as encoded could not be generated under either.
    pub respelled: Vec<u32>,
}

/// A token one library refused although the document needs it.
pub struct Refusal {
    pub library: &'static str,
    pub doc: &'static str,
    pub position: usize,
    pub token: String,
    /// The document's text before the token.
    pub prefix: String,
}

/// Why the two masks differ on a token that only COLTRANE allows: the known differences of the
/// two JSON languages (see the probes), or something else.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Why {
    /// Raw DEL (0x7f) inside a string: RFC 8259 allows it, llguidance wants `\u007f`.
    Del,
    /// The `\/` escape: RFC 8259 has it, llguidance's JSON strings do not.
    SlashEscape,
    /// A `\uDXXX` escape that is not part of a surrogate pair.
    Surrogate,
    /// Whitespace before or after the top-level value: RFC 8259 allows it, llguidance does not.
    OuterSpace,
    Other,
}

impl Why {
    pub const ALL: [Why; 5] = [
        Why::Del,
        Why::SlashEscape,
        Why::Surrogate,
        Why::OuterSpace,
        Why::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Why::Del => "raw DEL in a string",
            Why::SlashEscape => "\\/ escape",
            Why::Surrogate => "unpaired \\uDXXX escape",
            Why::OuterSpace => "whitespace around the top-level value",
            Why::Other => "unexplained",
        }
    }

    /// Classifies a token only COLTRANE allows, from its bytes, the document's bytes before it
    /// (an escape can start in an earlier token) and whether the top-level value is complete
    /// or not yet started (`outer`).
    fn of(before: &[u8], bytes: &[u8], outer: bool) -> Why {
        let ws = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
        let before = &before[before.len().saturating_sub(6)..];
        let joined = [before, bytes].concat();
        // A pattern that ends inside this token.
        let has = |pat: &[u8]| {
            joined
                .windows(pat.len())
                .enumerate()
                .any(|(i, w)| w == pat && i + pat.len() > before.len())
        };
        if bytes.contains(&0x7f) {
            Why::Del
        } else if has(b"\\/") {
            Why::SlashEscape
        } else if has(b"\\ud") || has(b"\\uD") {
            Why::Surrogate
        } else if outer && bytes.first().is_some_and(|&b| ws(b)) {
            Why::OuterSpace
        } else {
            Why::Other
        }
    }
}

/// Where the whole masks differ, by reason.
#[derive(Default)]
pub struct MaskDiffs {
    pub compared: usize,
    /// Positions where the masks differ at all.
    pub positions: usize,
    /// Per `Why` (indexed by `Why as usize`): positions where such a token differs, and token slots.
    pub by_why: [(usize, usize); 5],
    /// Tokens only llguidance allows (always unexplained).
    pub only_llguidance: usize,
    /// A few unexplained differences: where, and what.
    pub examples: Vec<(String, String)>,
}

/// What one library made of a probe.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Accepts,
    /// Refused the token of the byte at this offset (the input's length: end-of-text refused).
    RefusesAt(usize),
}

pub struct ProbeResult {
    pub name: &'static str,
    pub bytes: Vec<u8>,
    pub rfc: Rfc,
    pub coltrane: Verdict,
    pub llguidance: Verdict,
}

/// Everything measured on one model.
pub struct Report {
    pub model: String,
    pub vocab: usize,
    pub eos_ids: Vec<u32>,
    pub docs: usize,
    pub runs: usize,
    /// Special tokens the tokenizer's encodings used, replaced (`Encoded::respelled`).
    pub respelled: Vec<(String, usize)>,
    pub coltrane: Summary,
    pub llguidance: Summary,
    pub coltrane_first: Summary,
    pub coltrane_advance: Summary,
    pub llguidance_advance: Summary,
    pub llguidance_first: Summary,
    pub coltrane_vocab_ms: f64,
    pub llguidance_trie_ms: f64,
    pub llguidance_factory_ms: f64,
    pub coltrane_new: Summary,
    pub llguidance_new: Summary,
    pub refusals: Vec<Refusal>,
    pub diffs: MaskDiffs,
    pub probes: Vec<ProbeResult>,
    pub probes_skipped: Vec<&'static str>,
}

/// One library's pass over one document.
struct Pass {
    /// Mask times, one per position.
    times: Vec<f64>,
    /// Times to consume each forced token (COLTRANE: `accept`; llguidance: `consume_token`).
    advance: Vec<f64>,
    /// Time to make the matcher (COLTRANE: `Coltrane::new`; llguidance: compile the grammar and
    /// make the matcher).
    setup_us: f64,
    /// The masks, when kept for comparison, as 64-bit words (bit `id % 64` of word `id / 64`).
    masks: Vec<Vec<u64>>,
    /// COLTRANE only, when kept: whether the JSON value was complete before each token.
    complete: Vec<bool>,
    /// The position of the first forced token refused (the mask lacked it, or accepting failed).
    refused: Option<usize>,
}

impl Pass {
    fn new(len: usize, setup_us: f64) -> Pass {
        Pass {
            times: Vec::with_capacity(len + 1),
            advance: Vec::with_capacity(len),
            setup_us,
            masks: Vec::new(),
            complete: Vec::new(),
            refused: None,
        }
    }
}

struct Bench<'a> {
    model: &'a Model,
    index: Arc<Index>,
    env: TokEnv,
    factory: ParserFactory,
    grammar: TopLevelGrammar,
}

impl Bench<'_> {
    /// The token forced after the document: the first end-of-text id (the one llguidance's
    /// mask allows; COLTRANE's allows every end-of-text id).
    fn eos(&self) -> u32 {
        self.model.eos_ids[0]
    }

    fn is_special(&self, id: u32) -> bool {
        self.model.tokenizer.token_kind(id) == Some(TokenKind::Special)
            || self.model.eos_ids.contains(&id)
    }

    fn run_coltrane(&self, ids: &[u32], keep: bool) -> Pass {
        let cfg = ColtraneConfig {
            preset: Some(Preset::Json),
            ..ColtraneConfig::default()
        };
        let t = Instant::now();
        let mut c = Coltrane::new(self.index.clone(), cfg).expect("the JSON preset");
        let mut pass = Pass::new(ids.len(), us(t));
        for (i, &tok) in ids.iter().chain(&[self.eos()]).enumerate() {
            if keep {
                pass.complete.push(c.can_end());
            }
            let t = Instant::now();
            let mask = c.compute_mask(None);
            pass.times.push(us(t));
            let allowed = mask.contains(tok);
            if keep {
                pass.masks.push(mask.words().to_vec());
            }
            if !allowed {
                pass.refused = Some(i);
                break;
            }
            if i < ids.len() {
                let t = Instant::now();
                let ok = c.accept(tok).is_ok();
                pass.advance.push(us(t));
                if !ok {
                    pass.refused = Some(i);
                    break;
                }
            }
        }
        pass
    }

    fn run_llguidance(&self, ids: &[u32], keep: bool) -> Pass {
        let t = Instant::now();
        let mut m = Matcher::new(self.factory.create_parser(self.grammar.clone()));
        let mut pass = Pass::new(ids.len(), us(t));
        if let Some(e) = m.get_error() {
            panic!("llguidance could not compile the grammar: {e}");
        }
        for (i, &tok) in ids.iter().chain(&[self.eos()]).enumerate() {
            let t = Instant::now();
            let mask = m.compute_mask_or_eos();
            pass.times.push(us(t));
            let mask = mask.unwrap_or_else(|_| self.env.tok_trie().alloc_token_set());
            let allowed = mask.is_allowed(tok);
            if keep {
                pass.masks.push(vob_words(&mask));
            }
            if !allowed {
                pass.refused = Some(i);
                break;
            }
            if i < ids.len() {
                let t = Instant::now();
                let ok = m.consume_token(tok).is_ok();
                pass.advance.push(us(t));
                if !ok {
                    pass.refused = Some(i);
                    break;
                }
            }
        }
        pass
    }

    /// Adds where the whole masks of a document differ, ignoring end-of-text ids past the first
    /// (llguidance's mask only ever holds the first; both accept any of them).
    fn compare(&self, doc: &Encoded, c: &Pass, l: &Pass, out: &mut MaskDiffs) {
        let tok = &self.model.tokenizer;
        let mut before: Vec<u8> = Vec::new();
        for (pos, (mc, ml)) in c.masks.iter().zip(&l.masks).enumerate() {
            if pos > 0 {
                before.extend(tok.token_bytes(doc.ids[pos - 1]).unwrap_or_default());
            }
            out.compared += 1;
            let outer = pos == 0 || c.complete[pos];
            let mut seen = [false; 5];
            let mut differs = false;
            for (w, (&x, &y)) in mc.iter().zip(ml).enumerate() {
                let mut diff = x ^ y;
                while diff != 0 {
                    let bit = diff.trailing_zeros();
                    diff &= diff - 1;
                    let id = (w * 64) as u32 + bit;
                    if self.model.eos_ids[1..].contains(&id) {
                        continue;
                    }
                    differs = true;
                    let by_coltrane = x & (1 << bit) != 0;
                    let bytes = tok.token_bytes(id).unwrap_or_default();
                    let why = match by_coltrane {
                        true => Why::of(&before, bytes, outer),
                        false => Why::Other,
                    };
                    let k = why as usize;
                    out.by_why[k].1 += 1;
                    seen[k] = true;
                    out.only_llguidance += usize::from(!by_coltrane);
                    if why == Why::Other && out.examples.len() < 8 {
                        let who = match by_coltrane {
                            true => "only COLTRANE allows",
                            false => "only llguidance allows",
                        };
                        out.examples.push((
                            format!(
                                "{} @{pos} after {}",
                                doc.name,
                                show(&String::from_utf8_lossy(&before))
                            ),
                            format!("{who} {}", show_token(tok, id)),
                        ));
                    }
                }
            }
            for (k, s) in seen.iter().enumerate() {
                out.by_why[k].0 += usize::from(*s);
            }
            out.positions += usize::from(differs);
        }
    }

    /// The tokenizer's encoding of `text`, with special tokens respelled (`Encoded`).
    fn encode(&self, name: &'static str, text: &str) -> Result<Encoded, String> {
        let tok = &self.model.tokenizer;
        let raw = tok.encode(text).map_err(|e| e.to_string())?;
        if spell_bytes(tok, &raw) != text.as_bytes() {
            return Err("the tokens' bytes do not spell the document".into());
        }
        if tok.decode(&raw).ok().as_deref() != Some(text) {
            return Err("decode(encode(text)) differs from the text".into());
        }
        if serde_json::from_str::<serde_json::Value>(text).is_err() {
            return Err("not valid JSON".into());
        }
        let mut ids = Vec::with_capacity(raw.len());
        let mut respelled = Vec::new();
        for id in raw {
            if !self.is_special(id) {
                ids.push(id);
                continue;
            }
            respelled.push(id);
            let bytes = tok.token_bytes(id).unwrap_or_default();
            // The trie keeps special tokens behind their marker byte, so this never finds one.
            ids.extend(self.env.tok_trie().greedy_tokenize(bytes));
        }
        if spell_bytes(tok, &ids) != text.as_bytes() || ids.iter().any(|&i| self.is_special(i)) {
            return Err("cannot spell the document without special tokens".into());
        }
        Ok(Encoded {
            name,
            ids,
            respelled,
        })
    }

    /// For each byte, a token spelling exactly it (a text token if there is one, else a byte
    /// token).
    fn byte_tokens(&self) -> Vec<Option<u32>> {
        let tok = &self.model.tokenizer;
        let mut out: Vec<Option<u32>> = vec![None; 256];
        for id in 0..tok.vocab_size() as u32 {
            if self.is_special(id) {
                continue;
            }
            if let Some(&[b]) = tok.token_bytes(id) {
                let slot = &mut out[b as usize];
                if slot.is_none() || tok.token_kind(id) == Some(TokenKind::Text) {
                    *slot = Some(id);
                }
            }
        }
        out
    }

    fn probes(&self) -> (Vec<ProbeResult>, Vec<&'static str>) {
        let byte_tok = self.byte_tokens();
        let verdict = |p: Pass| p.refused.map_or(Verdict::Accepts, Verdict::RefusesAt);
        let (mut done, mut skipped) = (Vec::new(), Vec::new());
        for (name, bytes, rfc) in docs::probes() {
            let ids: Option<Vec<u32>> = bytes.iter().map(|&b| byte_tok[b as usize]).collect();
            let Some(ids) = ids else {
                skipped.push(name);
                continue;
            };
            done.push(ProbeResult {
                name,
                coltrane: verdict(self.run_coltrane(&ids, false)),
                llguidance: verdict(self.run_llguidance(&ids, false)),
                bytes,
                rfc,
            });
        }
        (done, skipped)
    }
}

/// llguidance's 32-bit mask words as 64-bit ones, laid out as COLTRANE's.
fn vob_words(v: &SimpleVob) -> Vec<u64> {
    v.as_slice()
        .chunks(2)
        .map(|c| c[0] as u64 | (c.get(1).copied().unwrap_or(0) as u64) << 32)
        .collect()
}

fn spell_bytes(tok: &Tokenizer, ids: &[u32]) -> Vec<u8> {
    ids.iter()
        .flat_map(|&id| tok.token_bytes(id).unwrap_or_default().iter().copied())
        .collect()
}

pub fn spell(tok: &Tokenizer, ids: &[u32]) -> String {
    String::from_utf8_lossy(&spell_bytes(tok, ids)).into_owned()
}

pub fn show_token(tok: &Tokenizer, id: u32) -> String {
    let bytes = tok.token_bytes(id).unwrap_or_default();
    let kind = tok.token_kind(id).map_or("?".into(), |k| format!("{k:?}"));
    format!("token {id} {:?} ({kind})", String::from_utf8_lossy(bytes))
}

/// The last 60 characters of a text, escaped.
pub fn show(s: &str) -> String {
    let n = s.chars().count();
    let tail: String = s.chars().skip(n.saturating_sub(60)).collect();
    match n > 60 {
        true => format!("…{tail:?}"),
        false => format!("{tail:?}"),
    }
}

pub fn run(model: &Model, runs: usize) -> Result<Report, String> {
    let tok = &model.tokenizer;
    let t = Instant::now();
    let index = tok
        .constraint_index(&model.eos_ids)
        .map_err(|e| format!("COLTRANE vocabulary: {e}"))?;
    let coltrane_vocab_ms = us(t) / 1e3;
    let t = Instant::now();
    let env = llg::tok_env(tok, &model.eos_ids);
    let llguidance_trie_ms = us(t) / 1e3;
    let t = Instant::now();
    let factory = llg::factory(&env)?;
    let llguidance_factory_ms = us(t) / 1e3;
    let bench = Bench {
        model,
        index,
        env,
        factory,
        grammar: llg::any_json(),
    };

    let mut docs = Vec::new();
    for &(name, text) in docs::DOCS {
        docs.push(
            bench
                .encode(name, text)
                .map_err(|e| format!("document {name}: {e}"))?,
        );
    }
    let mut respelled: Vec<(String, usize)> = Vec::new();
    for &id in docs.iter().flat_map(|d| &d.respelled) {
        let shown = show_token(tok, id);
        match respelled.iter_mut().find(|(s, _)| *s == shown) {
            Some((_, n)) => *n += 1,
            None => respelled.push((shown, 1)),
        }
    }

    // Mask times, first-mask times, advance times and matcher set-up times of each library.
    let (mut ct, mut lt, mut cf, mut lf, mut cn, mut ln) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut ca, mut la) = (vec![], vec![]);
    let mut refusals = Vec::new();
    let mut diffs = MaskDiffs::default();
    for run in 0..runs {
        let keep = run == 0;
        for (d, doc) in docs.iter().enumerate() {
            // Alternate which library goes first.
            let (c, l) = match d % 2 == 0 {
                true => {
                    let c = bench.run_coltrane(&doc.ids, keep);
                    (c, bench.run_llguidance(&doc.ids, keep))
                }
                false => {
                    let l = bench.run_llguidance(&doc.ids, keep);
                    (bench.run_coltrane(&doc.ids, keep), l)
                }
            };
            ct.extend(&c.times);
            lt.extend(&l.times);
            ca.extend(&c.advance);
            la.extend(&l.advance);
            cf.push(c.times[0]);
            lf.push(l.times[0]);
            cn.push(c.setup_us);
            ln.push(l.setup_us);
            if !keep {
                continue;
            }
            for (library, pass) in [("COLTRANE", &c), ("llguidance", &l)] {
                if let Some(i) = pass.refused {
                    let token = doc.ids.get(i).copied().unwrap_or(bench.eos());
                    refusals.push(Refusal {
                        library,
                        doc: doc.name,
                        position: i,
                        token: show_token(tok, token),
                        prefix: spell(tok, &doc.ids[..i.min(doc.ids.len())]),
                    });
                }
            }
            bench.compare(doc, &c, &l, &mut diffs);
        }
    }
    let (probes, probes_skipped) = bench.probes();
    Ok(Report {
        model: model.name.clone(),
        vocab: tok.vocab_size(),
        eos_ids: model.eos_ids.clone(),
        docs: docs.len(),
        runs,
        respelled,
        coltrane: Summary::of(&ct),
        llguidance: Summary::of(&lt),
        coltrane_first: Summary::of(&cf),
        coltrane_advance: Summary::of(&ca),
        llguidance_advance: Summary::of(&la),
        llguidance_first: Summary::of(&lf),
        coltrane_vocab_ms,
        llguidance_trie_ms,
        llguidance_factory_ms,
        coltrane_new: Summary::of(&cn),
        llguidance_new: Summary::of(&ln),
        refusals,
        diffs,
        probes,
        probes_skipped,
    })
}
