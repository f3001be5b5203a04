//! The GGUF reader (header, metadata, tensor table, tensor bytes), then the converter's metadata
//! path (architecture, hyperparameters, tokenizer, layout) through to writing a knot file.
//!
//! The input is a GGUF file or just its head: for the converter it is extended with zeros to
//! [`PADDED_LEN`] (a sparse file), so a head whose tensor table fits gets converted with zero
//! weights and the seeds need not carry weights.
#![no_main]

use std::io::{Cursor, Write};
use std::path::PathBuf;
use std::sync::OnceLock;

use knot_cli::convert::{gguf_to_knot, ConvertOptions};
use knot_cli::gguf::GgufFile;
use knot_fuzz::scratch_dir;
use libfuzzer_sys::fuzz_target;

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| scratch_dir("gguf"))
}

/// Length the converter's input file is extended to.
const PADDED_LEN: u64 = 4 << 20;

fuzz_target!(|data: &[u8]| {
    let mut cursor = Cursor::new(data);
    if let Ok(gguf) = GgufFile::read(&mut cursor) {
        for t in &gguf.tensors {
            let _ = gguf.read_tensor(&mut cursor, t);
        }
    }
    if !data.starts_with(b"GGUF") {
        return;
    }
    let input = scratch().join("in.gguf");
    let mut file = std::fs::File::create(&input).expect("scratch file");
    file.write_all(data).expect("scratch write");
    file.set_len(PADDED_LEN.max(data.len() as u64))
        .expect("scratch extend");
    drop(file);
    let _ = gguf_to_knot(
        &input,
        &scratch().join("out.knot"),
        &ConvertOptions::default(),
        &|_, _| {},
    );
});
