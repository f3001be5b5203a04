//! `knot inspect`: reads only the header and metadata (the prefix), never the tensor payload.

use knot::{FixedHeader, Knot, ReadOptions, FIXED_HEADER_LEN};
use std::borrow::Cow;
use std::fs::File;
use std::io::Read;
use std::path::Path;

pub fn read_prefix(path: &Path) -> Result<Knot, Box<dyn std::error::Error>> {
    let mut f = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let file_len = f.metadata()?.len();
    let opts = ReadOptions::default();
    let mut fixed = [0u8; FIXED_HEADER_LEN];
    f.read_exact(&mut fixed)
        .map_err(|_| format!("{} is too short to be a knot file", path.display()))?;
    let header = FixedHeader::parse(&fixed, &opts)?;
    // prefix_len is bounded by the metadata cap checked in FixedHeader::parse.
    let mut prefix = fixed.to_vec();
    prefix.resize(header.prefix_len() as usize, 0);
    f.read_exact(&mut prefix[FIXED_HEADER_LEN..])
        .map_err(|_| format!("{} is truncated inside its metadata", path.display()))?;
    Ok(Knot::parse_prefix(&prefix, file_len, &opts)?)
}

pub fn run(path: &Path, json: bool) -> Result<(), Box<dyn std::error::Error>> {
    let k = read_prefix(path)?;
    print!("{}", render(&path.display().to_string(), &k, json)?);
    Ok(())
}

/// What `run` prints. Every string from the file goes through [`printable`]: a tensor name or
/// architecture holding terminal escapes must not drive the user's terminal.
pub fn render(path: &str, k: &Knot, json: bool) -> Result<String, serde_json::Error> {
    use std::fmt::Write;
    let m = &k.meta;
    if json {
        let v = serde_json::json!({
            "header": {
                "version": k.header.version,
                "meta_len": k.header.meta_len,
                "payload_offset": k.payload_offset,
                "file_len": k.file_len,
            },
            "metadata": m,
        });
        // serde_json escapes C0 controls in strings but writes DEL, C1 controls (e.g. the
        // one-byte CSI, U+009B) and bidi overrides as they are; outside strings the text has
        // none of them but newlines, so escaping the rest keeps it the same JSON.
        let text = serde_json::to_string_pretty(&v)?;
        let mut out = String::with_capacity(text.len() + 1);
        for c in text.chars() {
            match c {
                '\n' => out.push(c),
                c if unsafe_char(c) => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => out.push(c),
            }
        }
        out.push('\n');
        return Ok(out);
    }
    let p = printable;
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    line(format!(
        "{}: knot v{}, {:.1} MiB",
        p(path),
        k.header.version,
        mib(k.file_len)
    ));
    line(format!(
        "  metadata {} bytes, payload at {}",
        k.header.meta_len, k.payload_offset
    ));
    line(format!(
        "  name {:?}, architecture {}",
        m.name,
        p(&m.architecture)
    ));
    let c = &m.config;
    line(format!(
        "  layers {}, dim {}, heads {}/{} kv, head_dim {}, ffn {}, vocab {}, context {}",
        c.n_layers,
        c.dim,
        c.n_heads,
        c.n_kv_heads,
        c.head_dim,
        c.ffn_dim,
        c.vocab_size,
        c.context_length
    ));
    line(format!(
        "  rope {:?} theta {} dims {}, norm eps {:e}, tied embeddings {}",
        c.rope_style, c.rope_theta, c.rope_dim, c.norm_eps, c.tie_word_embeddings
    ));
    line(format!("  bos {:?}, eos {:?}", c.bos_id, c.eos_ids));
    line(format!(
        "  tokenizer {} (pre {:?}), {:.2} MiB; chat template: {}",
        p(&m.tokenizer.model),
        m.tokenizer.pre,
        mib(m.tokenizer.blob.size),
        if m.chat_template.is_some() {
            "yes"
        } else {
            "no"
        }
    ));
    line(format!(
        "  resident span @{} {:.2} MiB",
        m.resident.offset,
        mib(m.resident.size)
    ));
    for (i, s) in m.layers.iter().enumerate() {
        line(format!(
            "  layer {i:>3} span @{} {:.2} MiB",
            s.offset,
            mib(s.size)
        ));
    }
    line(format!(
        "  {:<32} {:>6} {:>16} {:>12} {:>10}",
        "tensor", "dtype", "shape", "offset", "bytes"
    ));
    for t in &m.tensors {
        let shape = t
            .shape
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("x");
        line(format!(
            "  {:<32} {:>6} {:>16} {:>12} {:>10}",
            p(&t.name),
            p(&t.dtype),
            shape,
            t.offset,
            t.size
        ));
    }
    Ok(out)
}

/// Control characters (C0, DEL, C1: escape sequences, carriage returns, the one-byte CSI) and
/// bidirectional overrides: what could move the cursor or reorder the text on a terminal.
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every [`unsafe_char`] written as a `\u{…}` escape; everything else as is.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use knot::{DType, FfnActivation, KnotBuilder, ModelConfig, RopeStyle, TokenizerData};

    /// A one-layer file whose architecture, tokenizer model and an extra tensor's name carry
    /// terminal escapes (the knot reader accepts any names).
    fn hostile() -> Knot {
        let config = ModelConfig {
            n_layers: 1,
            dim: 32,
            n_heads: 4,
            n_kv_heads: 4,
            head_dim: 8,
            ffn_dim: 32,
            vocab_size: 4,
            context_length: 16,
            rope_theta: 10000.0,
            rope_style: RopeStyle::Neox,
            rope_dim: 8,
            norm_eps: 1e-5,
            tie_word_embeddings: true,
            bos_id: None,
            eos_ids: vec![],
            pad_id: None,
            add_bos: false,
            qkv_bias: false,
            qk_norm: false,
            sandwich_norms: false,
            scale_embeddings: false,
            ffn_activation: FfnActivation::Silu,
            query_pre_attn_scalar: None,
            sliding_window: None,
            sliding_window_pattern: 0,
            rope_theta_local: None,
        };
        let tokenizer = TokenizerData {
            model: "gpt2\x1b[2J".into(),
            tokens: (0..4).map(|i| i.to_string()).collect(),
            ..Default::default()
        };
        let mut b = KnotBuilder::new("n\x1b]0;x\x07", "llama\x1b[31m\r", config, tokenizer);
        b.add_tensor("token_embd.weight", DType::F32, vec![4, 32]);
        b.add_tensor("output_norm.weight", DType::F32, vec![32]);
        b.add_tensor("evil\x1b[2J\u{9b}1m\u{202e}.weight", DType::F32, vec![32]);
        for name in knot::CANONICAL_LAYER_TENSORS {
            let shape = if name.ends_with("norm") {
                vec![32]
            } else {
                vec![32, 32]
            };
            b.add_tensor(knot::layer_tensor_name(0, name), DType::F32, shape);
        }
        // Inspect reads only the prefix; the payload need not exist.
        let plan = b.plan().unwrap();
        Knot::parse_prefix(
            plan.prefix(),
            plan.file_len(),
            &knot::ReadOptions::default(),
        )
        .unwrap()
    }

    #[test]
    fn nothing_from_the_file_reaches_the_terminal_raw() {
        let k = hostile();
        for json in [false, true] {
            let text = render("m.knot", &k, json).unwrap();
            let raw: Vec<char> = text
                .chars()
                .filter(|&c| (c.is_control() && c != '\n') || c == '\u{202e}')
                .collect();
            assert!(raw.is_empty(), "json {json}: {raw:?} in {text}");
            assert!(text.contains("evil"), "{text}");
        }
        let text = render("m.knot", &k, false).unwrap();
        assert!(
            text.contains("architecture llama\\u{1b}[31m\\u{d}"),
            "{text}"
        );
        assert!(
            text.contains("evil\\u{1b}[2J\\u{9b}1m\\u{202e}.weight"),
            "{text}"
        );
        // The JSON still parses, to the same strings.
        let v: serde_json::Value =
            serde_json::from_str(&render("m.knot", &k, true).unwrap()).unwrap();
        assert_eq!(v["metadata"]["architecture"], "llama\x1b[31m\r");
        assert!(v["metadata"]["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "evil\x1b[2J\u{9b}1m\u{202e}.weight"));
    }

    #[test]
    fn printable_leaves_ordinary_text_alone() {
        assert!(matches!(printable("blk.0.attn_q.weight"), Cow::Borrowed(_)));
        assert_eq!(printable("日本語 ü"), "日本語 ü");
        assert_eq!(printable("a\tb\x7f"), "a\\u{9}b\\u{7f}");
    }
}
