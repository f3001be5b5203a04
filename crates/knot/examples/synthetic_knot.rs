//! Writes a synthetic llama-style knot of any size: Q8_0 weights from a seeded PRNG (the same
//! file for the same arguments), unit norms, a byte-level tokenizer padded to the vocabulary
//! with filler tokens. What it says is noise; what it is for is size — loading, splitting and
//! serving a model larger than the real ones here (`examples/worker/scripts/big-knot.mjs`).
//!
//!   cargo run --release -p knot --example synthetic_knot -- OUTPUT [--layers 32] [--dim 1024]
//!       [--ffn 4096] [--vocab 32000] [--seed 1]

use std::io::BufWriter;

use knot::{
    layer_tensor_name, DType, FfnActivation, KnotBuilder, ModelConfig, RopeStyle, TokenizerData,
    CANONICAL_LAYER_TENSORS, OUTPUT, OUTPUT_NORM, TOKEN_EMBD,
};

/// The shape of the model to write.
struct Shape {
    layers: usize,
    dim: usize,
    ffn: usize,
    vocab: usize,
    seed: u64,
}

fn parse_args() -> Result<(String, Shape), String> {
    let mut args = std::env::args().skip(1);
    let mut out = None;
    let mut s = Shape {
        layers: 32,
        dim: 1024,
        ffn: 4096,
        vocab: 32000,
        seed: 1,
    };
    while let Some(a) = args.next() {
        let mut value = |name: &str| -> Result<usize, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{name} needs a whole number"))
        };
        match a.as_str() {
            "--layers" => s.layers = value("--layers")?,
            "--dim" => s.dim = value("--dim")?,
            "--ffn" => s.ffn = value("--ffn")?,
            "--vocab" => s.vocab = value("--vocab")?,
            "--seed" => s.seed = value("--seed")? as u64,
            _ if out.is_none() && !a.starts_with("--") => out = Some(a),
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    // 64-dim heads; Q8_0 blocks of 32 along every row.
    if !s.dim.is_multiple_of(64) || !s.ffn.is_multiple_of(32) || s.layers == 0 || s.vocab < 257 {
        return Err(
            "--dim must be a multiple of 64, --ffn of 32, --layers ≥ 1, --vocab ≥ 257".into(),
        );
    }
    let usage =
        "usage: synthetic_knot OUTPUT [--layers N] [--dim N] [--ffn N] [--vocab N] [--seed N]";
    Ok((out.ok_or(usage)?, s))
}

/// GPT-2's byte-level alphabet: each byte as the character its BPE vocabularies spell it with.
fn byte_char(b: u8) -> char {
    let printable = |c: u8| (b'!'..=b'~').contains(&c) || (0xa1..=0xac).contains(&c) || c >= 0xae;
    if printable(b) {
        return char::from(b);
    }
    let shifted = (0..b).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(256 + shifted).unwrap_or('?')
}

/// splitmix64: a small seeded PRNG.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// `n` values of Q8_0 (blocks of an f16 scale and 32 i8), quants uniform in [-127, 127], the
/// scale making a row of `cols` sum to a unit-scale output.
fn q8_0(rng: &mut Rng, n: usize, cols: usize) -> Vec<u8> {
    // f16 bits of 1 / (127 · sqrt(cols / 3)): uniform quants have variance 127² / 3.
    let scale = 1.0 / (127.0 * (cols as f32 / 3.0).sqrt());
    let bits = f16_bits(scale);
    let mut out = Vec::with_capacity(n / 32 * 34);
    for _ in 0..n / 32 {
        out.extend_from_slice(&bits.to_le_bytes());
        let mut r = 0u64;
        for i in 0..32 {
            if i % 8 == 0 {
                r = rng.next();
            }
            let q = ((r >> (8 * (i % 8))) & 0xff) as u8;
            // 255 values, symmetric: -127..=127.
            out.push(((q % 255) as i16 - 127) as i8 as u8);
        }
    }
    out
}

/// The f16 bits of a normal, positive `x` well inside f16's range.
fn f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    let mant = (b >> 13) & 0x3ff;
    ((exp as u32) << 10 | mant) as u16
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (path, s) = parse_args()?;
    let heads = s.dim / 64;
    let config = ModelConfig {
        n_layers: s.layers,
        dim: s.dim,
        n_heads: heads,
        n_kv_heads: heads,
        head_dim: 64,
        ffn_dim: s.ffn,
        vocab_size: s.vocab,
        context_length: 2048,
        rope_theta: 10000.0,
        rope_style: RopeStyle::Neox,
        rope_dim: 64,
        norm_eps: 1e-5,
        tie_word_embeddings: false,
        bos_id: None,
        eos_ids: vec![256],
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
    // The 256 bytes, an end-of-text token, and fillers up to the vocabulary.
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    tokens.push("<|endoftext|>".into());
    tokens.extend((tokens.len()..s.vocab).map(|i| format!("<|filler{i}|>")));
    let mut token_types = vec![1; s.vocab];
    token_types[256..].fill(3);
    let tokenizer = TokenizerData {
        model: "gpt2".into(),
        tokens,
        token_types,
        eos_id: Some(256),
        ..Default::default()
    };
    let (d, f, v) = (s.dim as u64, s.ffn as u64, s.vocab as u64);
    let mut b = KnotBuilder::new("synthetic", "llama", config, tokenizer);
    b.add_tensor(TOKEN_EMBD, DType::Q8_0, vec![v, d]);
    b.add_tensor(OUTPUT_NORM, DType::F32, vec![d]);
    b.add_tensor(OUTPUT, DType::Q8_0, vec![v, d]);
    for layer in 0..s.layers {
        for name in CANONICAL_LAYER_TENSORS {
            let (dtype, shape) = match name {
                "attn_norm" | "ffn_norm" => (DType::F32, vec![d]),
                "ffn_gate" | "ffn_up" => (DType::Q8_0, vec![f, d]),
                "ffn_down" => (DType::Q8_0, vec![d, f]),
                _ => (DType::Q8_0, vec![d, d]),
            };
            b.add_tensor(layer_tensor_name(layer, name), dtype, shape);
        }
    }
    let plan = b.plan()?;
    let file = std::fs::File::create(&path).map_err(|e| format!("{path}: {e}"))?;
    let mut w = plan.writer(BufWriter::new(file))?;
    let mut rng = Rng(s.seed);
    while let Some(t) = w.next_tensor() {
        let n: u64 = t.shape.iter().product();
        let bytes = match t.dtype.as_str() {
            "f32" => 1f32.to_le_bytes().repeat(n as usize),
            _ => q8_0(&mut rng, n as usize, *t.shape.last().unwrap_or(&1) as usize),
        };
        let name = t.name.clone();
        w.write_tensor(&name, &bytes)?;
    }
    w.finish()?;
    println!("{path}: {} bytes, {} layers", plan.file_len(), s.layers);
    Ok(())
}
