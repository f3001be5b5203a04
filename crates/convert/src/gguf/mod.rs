//! A streaming GGUF (v2/v3) reader: parses the header, key-value metadata and tensor table from
//! any `Read + Seek` and reads tensor data on demand, never the whole file; or, without I/O,
//! from the file's first bytes as a driver fetches them ([`PrefixReader`]).
//! Layout per ggml's `docs/gguf.md`: all integers little-endian; strings are a u64 length then
//! UTF-8 bytes; tensor data starts at the first `general.alignment` boundary after the tensor
//! table, and tensor offsets are relative to it.
//!
//! `mod.rs` holds the public API and [`GgufFile`]; `value.rs` the typed metadata values and
//! arrays; `reader.rs` the counting reader that parses them under [`GgufLimits`], and the
//! errors; `tensor.rs` the tensor table entries and the ggml type ids knot can store;
//! `prefix.rs` the sans-I/O [`PrefixReader`]; `write.rs` a GGUF writer for tests and fuzzers.

use std::collections::HashMap;
use std::io::{self, Read, Seek, SeekFrom};

mod prefix;
mod reader;
mod tensor;
mod value;
#[doc(hidden)]
pub mod write;

#[cfg(test)]
mod tests;

pub use prefix::PrefixReader;
pub use reader::{GgufError, GgufLimits};
pub use tensor::{dtype_from_ggml, ggml_type_of, GgufTensorInfo};
pub use value::{GgufArray, GgufValue};

use reader::{check_count, eof_as, Counting};

pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Everything but the tensor data.
#[derive(Debug, Clone)]
pub struct GgufFile {
    pub version: u32,
    /// Key-value pairs in file order.
    pub metadata: Vec<(String, GgufValue)>,
    pub tensors: Vec<GgufTensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    pub file_len: u64,
    key_index: HashMap<String, usize>,
}

impl GgufFile {
    /// Reads and checks the header, metadata and tensor table.
    pub fn read<R: Read + Seek>(reader: &mut R) -> Result<GgufFile, GgufError> {
        GgufFile::read_with_limits(reader, &GgufLimits::default())
    }

    pub fn read_with_limits<R: Read + Seek>(
        reader: &mut R,
        limits: &GgufLimits,
    ) -> Result<GgufFile, GgufError> {
        let file_len = reader.seek(SeekFrom::End(0))?;
        reader.seek(SeekFrom::Start(0))?;
        GgufFile::parse(io::BufReader::new(reader), file_len, limits)
    }

    /// Parses the header, metadata and tensor table from `reader`, positioned at the start of
    /// a file of `file_len` bytes.
    pub fn parse<R: Read>(
        reader: R,
        file_len: u64,
        limits: &GgufLimits,
    ) -> Result<GgufFile, GgufError> {
        let mut r = Counting::new(reader, *limits);
        let mut magic = [0u8; 4];
        r.exact(&mut magic, "magic")?;
        if magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic(magic));
        }
        let version = r.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let n_tensors = r.u64("tensor count")?;
        let n_kv = r.u64("metadata count")?;
        check_count("tensor", n_tensors, limits.max_tensors)?;
        check_count("metadata key-value", n_kv, limits.max_kv)?;

        let mut metadata = Vec::with_capacity(n_kv as usize);
        let mut key_index = HashMap::with_capacity(n_kv as usize);
        for _ in 0..n_kv {
            let key = r.string("metadata key")?;
            let type_id = r.u32("metadata value type")?;
            let value = r.value(type_id, 0)?;
            if key_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(GgufError::DuplicateKey(key));
            }
            metadata.push((key, value));
        }
        let alignment = match key_index.get("general.alignment") {
            Some(&i) => {
                let a = metadata[i].1.as_u64().unwrap_or(0);
                if a == 0 || !a.is_power_of_two() {
                    return Err(GgufError::BadAlignment(a));
                }
                a
            }
            None => DEFAULT_ALIGNMENT,
        };

        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut names = HashMap::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            let info = r.tensor_info()?;
            if names.insert(info.name.clone(), ()).is_some() {
                return Err(GgufError::DuplicateTensor(info.name));
            }
            tensors.push(info);
        }
        let data_offset = r
            .pos
            .div_ceil(alignment)
            .checked_mul(alignment)
            .ok_or(GgufError::Truncated("padding"))?;
        for t in &tensors {
            if t.offset % alignment != 0 {
                return Err(GgufError::Misaligned {
                    tensor: t.name.clone(),
                    offset: t.offset,
                    alignment,
                });
            }
            let end = data_offset
                .checked_add(t.offset)
                .and_then(|s| s.checked_add(t.size));
            match end {
                Some(end) if end <= file_len => {}
                _ => {
                    return Err(GgufError::TensorBeyondEof {
                        tensor: t.name.clone(),
                        end: end.unwrap_or(u64::MAX),
                        file_len,
                    })
                }
            }
        }
        // Tensors sharing bytes would each be copied out by a converter, so a small file could
        // expand into an arbitrarily large one. Extents were checked to end inside the file.
        let mut extents: Vec<(u64, u64, &str)> = tensors
            .iter()
            .map(|t| (t.offset, t.offset + t.size, t.name.as_str()))
            .collect();
        extents.sort_unstable();
        for w in extents.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(GgufError::Overlap {
                    first: w[0].2.to_string(),
                    second: w[1].2.to_string(),
                });
            }
        }
        Ok(GgufFile {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
            file_len,
            key_index,
        })
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Reads one tensor's bytes (bounds were checked when the table was parsed).
    pub fn read_tensor<R: Read + Seek>(
        &self,
        reader: &mut R,
        tensor: &GgufTensorInfo,
    ) -> Result<Vec<u8>, GgufError> {
        reader.seek(SeekFrom::Start(self.data_offset + tensor.offset))?;
        let len = usize::try_from(tensor.size).map_err(|_| GgufError::Truncated("tensor data"))?;
        let mut buf = vec![0u8; len];
        reader
            .read_exact(&mut buf)
            .map_err(|e| eof_as("tensor data", e))?;
        Ok(buf)
    }
}
