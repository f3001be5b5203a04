//! `knot inspect`: reads only the header and metadata (the prefix), never the tensor payload.

use knot::{FixedHeader, Knot, ReadOptions, FIXED_HEADER_LEN};
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
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "{}: knot v{}, {:.1} MiB",
        path.display(),
        k.header.version,
        mib(k.file_len)
    );
    println!(
        "  metadata {} bytes, payload at {}",
        k.header.meta_len, k.payload_offset
    );
    println!("  name {:?}, architecture {}", m.name, m.architecture);
    let c = &m.config;
    println!(
        "  layers {}, dim {}, heads {}/{} kv, head_dim {}, ffn {}, vocab {}, context {}",
        c.n_layers,
        c.dim,
        c.n_heads,
        c.n_kv_heads,
        c.head_dim,
        c.ffn_dim,
        c.vocab_size,
        c.context_length
    );
    println!(
        "  rope {:?} theta {} dims {}, norm eps {:e}, tied embeddings {}",
        c.rope_style, c.rope_theta, c.rope_dim, c.norm_eps, c.tie_word_embeddings
    );
    println!("  bos {:?}, eos {:?}", c.bos_id, c.eos_ids);
    println!(
        "  tokenizer {} (pre {:?}), {:.2} MiB; chat template: {}",
        m.tokenizer.model,
        m.tokenizer.pre,
        mib(m.tokenizer.blob.size),
        if m.chat_template.is_some() {
            "yes"
        } else {
            "no"
        }
    );
    println!(
        "  resident span @{} {:.2} MiB",
        m.resident.offset,
        mib(m.resident.size)
    );
    for (i, s) in m.layers.iter().enumerate() {
        println!("  layer {i:>3} span @{} {:.2} MiB", s.offset, mib(s.size));
    }
    println!(
        "  {:<32} {:>6} {:>16} {:>12} {:>10}",
        "tensor", "dtype", "shape", "offset", "bytes"
    );
    for t in &m.tensors {
        let shape = t
            .shape
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("x");
        println!(
            "  {:<32} {:>6} {:>16} {:>12} {:>10}",
            t.name, t.dtype, shape, t.offset, t.size
        );
    }
    Ok(())
}
