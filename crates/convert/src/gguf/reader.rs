//! The counting reader that parses the header, metadata and tensor table, every untrusted count
//! checked against [`GgufLimits`] before anything is allocated from it; and [`GgufError`].

use std::io::{self, Read};

use knot::DType;
use thiserror::Error;

use super::tensor::{dtype_from_ggml, GgufTensorInfo};
use super::value::{GgufArray, GgufValue};

/// Caps on untrusted counts, checked before anything is allocated from them.
#[derive(Debug, Clone, Copy)]
pub struct GgufLimits {
    pub max_tensors: u64,
    pub max_kv: u64,
    pub max_string_len: u64,
    pub max_array_len: u64,
    pub max_dims: u32,
    /// Header, metadata and tensor table together, for a reader that holds them in memory
    /// ([`super::PrefixReader`]).
    pub max_prefix_len: u64,
}

impl Default for GgufLimits {
    fn default() -> Self {
        GgufLimits {
            max_tensors: 1 << 16,
            max_kv: 1 << 16,
            // Chat templates are a few KiB; 16 MiB leaves room for anything real.
            max_string_len: 16 << 20,
            // Vocabularies reach ~256k entries; 16M is far beyond any real tokenizer.
            max_array_len: 1 << 24,
            // ggml's GGML_MAX_DIMS.
            max_dims: 4,
            // Real files need a few MiB (a 256k vocabulary with its merges is about 10 MiB).
            max_prefix_len: 256 << 20,
        }
    }
}

#[derive(Debug, Error)]
pub enum GgufError {
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("not a GGUF file: magic is {0:02x?}")]
    BadMagic([u8; 4]),
    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    #[error("GGUF file is truncated (while reading {0})")]
    Truncated(&'static str),
    #[error("{what} count {count} exceeds the limit {max}")]
    TooMany {
        what: &'static str,
        count: u64,
        max: u64,
    },
    #[error("string of {len} bytes exceeds the limit {max}")]
    StringTooLong { len: u64, max: u64 },
    #[error("header, metadata and tensor table take more than {max} bytes")]
    PrefixTooLong { max: u64 },
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    #[error("unknown metadata value type {0}")]
    UnknownValueType(u32),
    #[error("nested arrays deeper than {0} levels")]
    NestingTooDeep(usize),
    #[error("boolean value {0} is neither 0 nor 1")]
    BadBool(u8),
    #[error("general.alignment {0} is not a positive power of two")]
    BadAlignment(u64),
    #[error("metadata key {0} appears twice")]
    DuplicateKey(String),
    #[error("tensor {0} appears twice")]
    DuplicateTensor(String),
    #[error("tensor {tensor}: {n_dims} dimensions (at most {max})")]
    TooManyDims {
        tensor: String,
        n_dims: u32,
        max: u32,
    },
    #[error("tensor {tensor}: unsupported ggml type {type_id}")]
    UnknownGgmlType { tensor: String, type_id: u32 },
    #[error("tensor {tensor}: invalid dimensions {dims:?} for {dtype}")]
    InvalidShape {
        tensor: String,
        dims: Vec<u64>,
        dtype: DType,
    },
    #[error(
        "tensor {tensor}: data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    Misaligned {
        tensor: String,
        offset: u64,
        alignment: u64,
    },
    #[error("tensors {first} and {second} share data bytes")]
    Overlap { first: String, second: String },
    #[error(
        "tensor {tensor}: data ends at byte {end}, beyond the end of the file ({file_len} bytes)"
    )]
    TensorBeyondEof {
        tensor: String,
        end: u64,
        file_len: u64,
    },
}

pub(super) fn check_count(what: &'static str, count: u64, max: u64) -> Result<(), GgufError> {
    if count > max {
        return Err(GgufError::TooMany { what, count, max });
    }
    Ok(())
}

pub(super) fn eof_as(what: &'static str, e: io::Error) -> GgufError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        GgufError::Truncated(what)
    } else {
        GgufError::Io(e)
    }
}

/// Arrays nested deeper than this are rejected (real files use one level).
const MAX_NESTING: usize = 4;

/// A reader that knows its position, so the data section offset needs no extra seek.
pub(super) struct Counting<R> {
    inner: R,
    /// Bytes read so far.
    pub(super) pos: u64,
    limits: GgufLimits,
}

impl<R: Read> Counting<R> {
    pub(super) fn new(inner: R, limits: GgufLimits) -> Counting<R> {
        Counting {
            inner,
            pos: 0,
            limits,
        }
    }

    pub(super) fn exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), GgufError> {
        self.inner.read_exact(buf).map_err(|e| eof_as(what, e))?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let mut b = [0u8; N];
        self.exact(&mut b, what)?;
        Ok(b)
    }

    pub(super) fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub(super) fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub(super) fn string(&mut self, what: &'static str) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        if len > self.limits.max_string_len {
            return Err(GgufError::StringTooLong {
                len,
                max: self.limits.max_string_len,
            });
        }
        // The length is capped, but a truncated file could still claim up to the cap.
        let bytes = self.bytes(len, what)?;
        String::from_utf8(bytes).map_err(|_| GgufError::InvalidUtf8)
    }

    pub(super) fn value(&mut self, type_id: u32, depth: usize) -> Result<GgufValue, GgufError> {
        const W: &str = "metadata value";
        Ok(match type_id {
            0 => GgufValue::U8(u8::from_le_bytes(self.array(W)?)),
            1 => GgufValue::I8(i8::from_le_bytes(self.array(W)?)),
            2 => GgufValue::U16(u16::from_le_bytes(self.array(W)?)),
            3 => GgufValue::I16(i16::from_le_bytes(self.array(W)?)),
            4 => GgufValue::U32(u32::from_le_bytes(self.array(W)?)),
            5 => GgufValue::I32(i32::from_le_bytes(self.array(W)?)),
            6 => GgufValue::F32(f32::from_le_bytes(self.array(W)?)),
            7 => match self.array::<1>(W)?[0] {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => return Err(GgufError::BadBool(b)),
            },
            8 => GgufValue::String(self.string(W)?),
            9 => GgufValue::Array(self.array_value(depth)?),
            10 => GgufValue::U64(u64::from_le_bytes(self.array(W)?)),
            11 => GgufValue::I64(i64::from_le_bytes(self.array(W)?)),
            12 => GgufValue::F64(f64::from_le_bytes(self.array(W)?)),
            other => return Err(GgufError::UnknownValueType(other)),
        })
    }

    /// An array after its value type: element type, length, elements.
    fn array_value(&mut self, depth: usize) -> Result<GgufArray, GgufError> {
        if depth >= MAX_NESTING {
            return Err(GgufError::NestingTooDeep(MAX_NESTING));
        }
        let elem_type = self.u32("array element type")?;
        let len = self.u64("array length")?;
        check_count("array element", len, self.limits.max_array_len)?;
        macro_rules! fixed {
            ($variant:ident, $t:ty) => {{
                const N: usize = std::mem::size_of::<$t>();
                let bytes = self.bytes(len * N as u64, "array elements")?;
                GgufArray::$variant(
                    bytes
                        .chunks_exact(N)
                        .map(|c| <$t>::from_le_bytes(c.try_into().expect("N bytes")))
                        .collect(),
                )
            }};
        }
        // Grow with the data rather than trusting the length for the allocation.
        let cap = (len as usize).min(4096);
        Ok(match elem_type {
            0 => fixed!(U8, u8),
            1 => fixed!(I8, i8),
            2 => fixed!(U16, u16),
            3 => fixed!(I16, i16),
            4 => fixed!(U32, u32),
            5 => fixed!(I32, i32),
            6 => fixed!(F32, f32),
            7 => GgufArray::Bool(
                self.bytes(len, "array elements")?
                    .into_iter()
                    .map(|b| match b {
                        0 => Ok(false),
                        1 => Ok(true),
                        b => Err(GgufError::BadBool(b)),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            8 => {
                let mut items = Vec::with_capacity(cap);
                for _ in 0..len {
                    items.push(self.string("metadata value")?);
                }
                GgufArray::String(items)
            }
            9 => {
                let mut items = Vec::with_capacity(cap);
                for _ in 0..len {
                    items.push(self.array_value(depth + 1)?);
                }
                GgufArray::Array(items)
            }
            10 => fixed!(U64, u64),
            11 => fixed!(I64, i64),
            12 => fixed!(F64, f64),
            other => return Err(GgufError::UnknownValueType(other)),
        })
    }

    /// `len` bytes, read through `take` so memory grows only with bytes actually present.
    fn bytes(&mut self, len: u64, what: &'static str) -> Result<Vec<u8>, GgufError> {
        let mut bytes = Vec::new();
        (&mut self.inner)
            .take(len)
            .read_to_end(&mut bytes)
            .map_err(|e| eof_as(what, e))?;
        if bytes.len() as u64 != len {
            return Err(GgufError::Truncated(what));
        }
        self.pos += len;
        Ok(bytes)
    }

    pub(super) fn tensor_info(&mut self) -> Result<GgufTensorInfo, GgufError> {
        let name = self.string("tensor name")?;
        let n_dims = self.u32("tensor dimension count")?;
        if n_dims == 0 || n_dims > self.limits.max_dims {
            return Err(GgufError::TooManyDims {
                tensor: name,
                n_dims,
                max: self.limits.max_dims,
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.u64("tensor dimensions")?);
        }
        let type_id = self.u32("tensor type")?;
        let offset = self.u64("tensor offset")?;
        let dtype = dtype_from_ggml(type_id).ok_or_else(|| GgufError::UnknownGgmlType {
            tensor: name.clone(),
            type_id,
        })?;
        let invalid = || GgufError::InvalidShape {
            tensor: name.clone(),
            dims: dims.clone(),
            dtype,
        };
        // Blocks run along the innermost dimension and never straddle rows.
        if dims.contains(&0) || dims[0] % dtype.block_len() as u64 != 0 {
            return Err(invalid());
        }
        let n = dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(invalid)?;
        let size = dtype.bytes_for(n).ok_or_else(invalid)?;
        Ok(GgufTensorInfo {
            name,
            dims,
            dtype,
            offset,
            size,
        })
    }
}
