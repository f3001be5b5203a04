//! A streaming GGUF (v2/v3) reader: parses the header, key-value metadata and tensor table from
//! any `Read + Seek` and reads tensor data on demand, never the whole file.
//! Layout per ggml's `docs/gguf.md`: all integers little-endian; strings are a u64 length then
//! UTF-8 bytes; tensor data starts at the first `general.alignment` boundary after the tensor
//! table, and tensor offsets are relative to it.

use std::collections::HashMap;
use std::io::{self, Read, Seek, SeekFrom};

use knot::DType;
use thiserror::Error;

pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Caps on untrusted counts, checked before anything is allocated from them.
#[derive(Debug, Clone, Copy)]
pub struct GgufLimits {
    pub max_tensors: u64,
    pub max_kv: u64,
    pub max_string_len: u64,
    pub max_array_len: u64,
    pub max_dims: u32,
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

/// A metadata value. Arrays hold values of one type (checked while parsing).
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(GgufArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// An array value stored as a vector of its element type, so it costs in memory about what it
/// takes in the file: a `u8` element is one byte, not a 32-byte [`GgufValue`] (a 16 MiB array
/// would otherwise become 512 MiB).
#[derive(Debug, Clone, PartialEq)]
pub enum GgufArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<GgufArray>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl GgufArray {
    pub fn len(&self) -> usize {
        match self {
            GgufArray::U8(v) => v.len(),
            GgufArray::I8(v) => v.len(),
            GgufArray::U16(v) => v.len(),
            GgufArray::I16(v) => v.len(),
            GgufArray::U32(v) => v.len(),
            GgufArray::I32(v) => v.len(),
            GgufArray::F32(v) => v.len(),
            GgufArray::Bool(v) => v.len(),
            GgufArray::String(v) => v.len(),
            GgufArray::Array(v) => v.len(),
            GgufArray::U64(v) => v.len(),
            GgufArray::I64(v) => v.len(),
            GgufArray::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a value (a string or nested array is cloned).
    pub fn get(&self, i: usize) -> Option<GgufValue> {
        Some(match self {
            GgufArray::U8(v) => GgufValue::U8(*v.get(i)?),
            GgufArray::I8(v) => GgufValue::I8(*v.get(i)?),
            GgufArray::U16(v) => GgufValue::U16(*v.get(i)?),
            GgufArray::I16(v) => GgufValue::I16(*v.get(i)?),
            GgufArray::U32(v) => GgufValue::U32(*v.get(i)?),
            GgufArray::I32(v) => GgufValue::I32(*v.get(i)?),
            GgufArray::F32(v) => GgufValue::F32(*v.get(i)?),
            GgufArray::Bool(v) => GgufValue::Bool(*v.get(i)?),
            GgufArray::String(v) => GgufValue::String(v.get(i)?.clone()),
            GgufArray::Array(v) => GgufValue::Array(v.get(i)?.clone()),
            GgufArray::U64(v) => GgufValue::U64(*v.get(i)?),
            GgufArray::I64(v) => GgufValue::I64(*v.get(i)?),
            GgufArray::F64(v) => GgufValue::F64(*v.get(i)?),
        })
    }

    /// Every element as a value, in order.
    pub fn iter(&self) -> impl Iterator<Item = GgufValue> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The elements of a string array, without copying them.
    pub fn as_strings(&self) -> Option<&[String]> {
        match self {
            GgufArray::String(v) => Some(v),
            _ => None,
        }
    }

    /// Builds an array from values of one type (`None` if they are mixed); an empty list is
    /// an empty `u8` array.
    pub fn from_values(items: Vec<GgufValue>) -> Option<GgufArray> {
        macro_rules! collect {
            ($variant:ident) => {
                GgufArray::$variant(
                    items
                        .into_iter()
                        .map(|v| match v {
                            GgufValue::$variant(x) => Some(x),
                            _ => None,
                        })
                        .collect::<Option<Vec<_>>>()?,
                )
            };
        }
        let Some(first) = items.first() else {
            return Some(GgufArray::U8(Vec::new()));
        };
        Some(match first {
            GgufValue::U8(_) => collect!(U8),
            GgufValue::I8(_) => collect!(I8),
            GgufValue::U16(_) => collect!(U16),
            GgufValue::I16(_) => collect!(I16),
            GgufValue::U32(_) => collect!(U32),
            GgufValue::I32(_) => collect!(I32),
            GgufValue::F32(_) => collect!(F32),
            GgufValue::Bool(_) => collect!(Bool),
            GgufValue::String(_) => collect!(String),
            GgufValue::Array(_) => collect!(Array),
            GgufValue::U64(_) => collect!(U64),
            GgufValue::I64(_) => collect!(I64),
            GgufValue::F64(_) => collect!(F64),
        })
    }

    /// The GGUF type id of the elements.
    pub fn element_type_id(&self) -> u32 {
        match self {
            GgufArray::U8(_) => 0,
            GgufArray::I8(_) => 1,
            GgufArray::U16(_) => 2,
            GgufArray::I16(_) => 3,
            GgufArray::U32(_) => 4,
            GgufArray::I32(_) => 5,
            GgufArray::F32(_) => 6,
            GgufArray::Bool(_) => 7,
            GgufArray::String(_) => 8,
            GgufArray::Array(_) => 9,
            GgufArray::U64(_) => 10,
            GgufArray::I64(_) => 11,
            GgufArray::F64(_) => 12,
        }
    }
}

impl GgufValue {
    /// An array value from values of one type (see [`GgufArray::from_values`]).
    pub fn array(items: Vec<GgufValue>) -> Option<GgufValue> {
        GgufArray::from_values(items).map(GgufValue::Array)
    }

    /// Any non-negative integer value.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer value that fits in i64.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            GgufValue::I8(v) => Some(v.into()),
            GgufValue::I16(v) => Some(v.into()),
            GgufValue::I32(v) => Some(v.into()),
            GgufValue::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// Any float (f64 narrowed) value.
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            GgufValue::F32(v) => Some(v),
            GgufValue::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&GgufArray> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// Name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            GgufValue::U8(_) => "u8",
            GgufValue::I8(_) => "i8",
            GgufValue::U16(_) => "u16",
            GgufValue::I16(_) => "i16",
            GgufValue::U32(_) => "u32",
            GgufValue::I32(_) => "i32",
            GgufValue::F32(_) => "f32",
            GgufValue::Bool(_) => "bool",
            GgufValue::String(_) => "string",
            GgufValue::Array(_) => "array",
            GgufValue::U64(_) => "u64",
            GgufValue::I64(_) => "i64",
            GgufValue::F64(_) => "f64",
        }
    }
}

/// The ggml type ids knot can store, and their knot dtypes.
pub fn dtype_from_ggml(type_id: u32) -> Option<DType> {
    Some(match type_id {
        0 => DType::F32,
        1 => DType::F16,
        2 => DType::Q4_0,
        3 => DType::Q4_1,
        6 => DType::Q5_0,
        7 => DType::Q5_1,
        8 => DType::Q8_0,
        12 => DType::Q4K,
        13 => DType::Q5K,
        14 => DType::Q6K,
        30 => DType::Bf16,
        _ => return None,
    })
}

/// The ggml type id of a knot dtype (inverse of [`dtype_from_ggml`]).
pub fn ggml_type_of(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Q4_0 => 2,
        DType::Q4_1 => 3,
        DType::Q5_0 => 6,
        DType::Q5_1 => 7,
        DType::Q8_0 => 8,
        DType::Q4K => 12,
        DType::Q5K => 13,
        DType::Q6K => 14,
        DType::Bf16 => 30,
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GgufTensorInfo {
    pub name: String,
    /// ggml `ne` order: innermost (contiguous) dimension first.
    pub dims: Vec<u64>,
    pub dtype: DType,
    /// Relative to the data section.
    pub offset: u64,
    pub size: u64,
}

impl GgufTensorInfo {
    /// Outermost dimension first, as knot stores shapes.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }

    pub fn n_elements(&self) -> u64 {
        // Parsing proved the product fits.
        self.dims.iter().product()
    }
}

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
        let mut r = Counting {
            inner: io::BufReader::new(reader),
            pos: 0,
            limits: *limits,
        };
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

fn check_count(what: &'static str, count: u64, max: u64) -> Result<(), GgufError> {
    if count > max {
        return Err(GgufError::TooMany { what, count, max });
    }
    Ok(())
}

fn eof_as(what: &'static str, e: io::Error) -> GgufError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        GgufError::Truncated(what)
    } else {
        GgufError::Io(e)
    }
}

/// Arrays nested deeper than this are rejected (real files use one level).
const MAX_NESTING: usize = 4;

/// A reader that knows its position, so the data section offset needs no extra seek.
struct Counting<R> {
    inner: R,
    pos: u64,
    limits: GgufLimits,
}

impl<R: Read> Counting<R> {
    fn exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), GgufError> {
        self.inner.read_exact(buf).map_err(|e| eof_as(what, e))?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let mut b = [0u8; N];
        self.exact(&mut b, what)?;
        Ok(b)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &'static str) -> Result<String, GgufError> {
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

    fn value(&mut self, type_id: u32, depth: usize) -> Result<GgufValue, GgufError> {
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

    fn tensor_info(&mut self) -> Result<GgufTensorInfo, GgufError> {
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

/// Writes GGUF files; used by tests to craft inputs (valid and broken) without fixtures.
#[cfg(test)]
pub(crate) mod write {
    use super::*;

    pub fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }

    pub fn value(out: &mut Vec<u8>, v: &GgufValue) {
        match v {
            GgufValue::U8(x) => out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::Bool(x) => out.push(*x as u8),
            GgufValue::String(s) => string(out, s),
            GgufValue::Array(items) => array(out, items),
            GgufValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
            GgufValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        }
    }

    /// Element type, length, elements (an array value after its type id).
    pub fn array(out: &mut Vec<u8>, items: &GgufArray) {
        out.extend_from_slice(&items.element_type_id().to_le_bytes());
        out.extend_from_slice(&(items.len() as u64).to_le_bytes());
        match items {
            GgufArray::Array(nested) => nested.iter().for_each(|a| array(out, a)),
            _ => items.iter().for_each(|v| value(out, &v)),
        }
    }

    pub fn type_id(v: &GgufValue) -> u32 {
        match v {
            GgufValue::U8(_) => 0,
            GgufValue::I8(_) => 1,
            GgufValue::U16(_) => 2,
            GgufValue::I16(_) => 3,
            GgufValue::U32(_) => 4,
            GgufValue::I32(_) => 5,
            GgufValue::F32(_) => 6,
            GgufValue::Bool(_) => 7,
            GgufValue::String(_) => 8,
            GgufValue::Array(_) => 9,
            GgufValue::U64(_) => 10,
            GgufValue::I64(_) => 11,
            GgufValue::F64(_) => 12,
        }
    }

    /// A tensor to write: name, ne-order dims, ggml type id, data bytes.
    pub struct RawTensor {
        pub name: String,
        pub dims: Vec<u64>,
        pub type_id: u32,
        pub data: Vec<u8>,
    }

    /// A complete GGUF v3 file with 32-byte alignment.
    pub fn file(kv: &[(&str, GgufValue)], tensors: &[RawTensor]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(kv.len() as u64).to_le_bytes());
        for (k, v) in kv {
            string(&mut out, k);
            out.extend_from_slice(&type_id(v).to_le_bytes());
            value(&mut out, v);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::new();
        for t in tensors {
            string(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.type_id.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offsets.push(offset);
            offset = (offset + t.data.len() as u64).div_ceil(32) * 32;
        }
        let data_start = out.len().div_ceil(32) * 32;
        out.resize(data_start, 0);
        for (t, off) in tensors.iter().zip(offsets) {
            out.resize(data_start + off as usize, 0);
            out.extend_from_slice(&t.data);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::write::*;
    use super::*;
    use std::io::Cursor;

    fn tiny() -> Vec<u8> {
        file(
            &[
                ("general.architecture", GgufValue::String("llama".into())),
                ("a.u8", GgufValue::U8(7)),
                ("a.i8", GgufValue::I8(-7)),
                ("a.u16", GgufValue::U16(700)),
                ("a.i16", GgufValue::I16(-700)),
                ("a.u32", GgufValue::U32(70000)),
                ("a.i32", GgufValue::I32(-70000)),
                ("a.f32", GgufValue::F32(1.5)),
                ("a.bool", GgufValue::Bool(true)),
                ("a.u64", GgufValue::U64(1 << 40)),
                ("a.i64", GgufValue::I64(-(1 << 40))),
                ("a.f64", GgufValue::F64(2.25)),
                (
                    "a.arr",
                    GgufValue::array(vec![
                        GgufValue::String("x".into()),
                        GgufValue::String("yz".into()),
                    ])
                    .unwrap(),
                ),
                (
                    "a.nested",
                    GgufValue::array(vec![GgufValue::array(vec![
                        GgufValue::I32(1),
                        GgufValue::I32(2),
                    ])
                    .unwrap()])
                    .unwrap(),
                ),
                (
                    "a.bytes",
                    GgufValue::Array(GgufArray::U8((0..=255).collect())),
                ),
                (
                    "a.bools",
                    GgufValue::Array(GgufArray::Bool(vec![true, false])),
                ),
                (
                    "a.f64s",
                    GgufValue::Array(GgufArray::F64(vec![-1.5, 1e300])),
                ),
            ],
            &[
                RawTensor {
                    name: "a".into(),
                    dims: vec![3, 2],
                    type_id: 0,
                    data: (0..24).collect(),
                },
                RawTensor {
                    name: "b".into(),
                    dims: vec![32],
                    type_id: 8,
                    data: vec![9; 34],
                },
            ],
        )
    }

    #[test]
    fn reads_every_value_type_and_tensor_table() {
        let bytes = tiny();
        let mut cur = Cursor::new(&bytes);
        let g = GgufFile::read(&mut cur).unwrap();
        assert_eq!(g.version, 3);
        assert_eq!(g.alignment, 32);
        assert_eq!(g.data_offset % 32, 0);
        assert_eq!(
            g.get("general.architecture").unwrap().as_str(),
            Some("llama")
        );
        assert_eq!(g.get("a.u8").unwrap().as_u64(), Some(7));
        assert_eq!(g.get("a.i8").unwrap().as_i64(), Some(-7));
        assert_eq!(g.get("a.i8").unwrap().as_u64(), None);
        assert_eq!(g.get("a.u16").unwrap(), &GgufValue::U16(700));
        assert_eq!(g.get("a.i16").unwrap(), &GgufValue::I16(-700));
        assert_eq!(g.get("a.u32").unwrap().as_u64(), Some(70000));
        assert_eq!(g.get("a.i32").unwrap().as_i64(), Some(-70000));
        assert_eq!(g.get("a.f32").unwrap().as_f32(), Some(1.5));
        assert_eq!(g.get("a.bool").unwrap().as_bool(), Some(true));
        assert_eq!(g.get("a.u64").unwrap().as_u64(), Some(1 << 40));
        assert_eq!(g.get("a.i64").unwrap().as_i64(), Some(-(1 << 40)));
        assert_eq!(g.get("a.f64").unwrap().as_f32(), Some(2.25));
        let arr = g.get("a.arr").unwrap().as_array().unwrap();
        assert_eq!(arr.get(1).unwrap().as_str(), Some("yz"));
        assert_eq!(arr.as_strings().unwrap(), ["x", "yz"]);
        let nested = g.get("a.nested").unwrap().as_array().unwrap();
        assert_eq!(
            nested.get(0).unwrap().as_array().unwrap().get(1),
            Some(GgufValue::I32(2))
        );
        // Arrays are stored as vectors of their element type.
        assert_eq!(
            g.get("a.bytes").unwrap(),
            &GgufValue::Array(GgufArray::U8((0..=255).collect()))
        );
        let bools = g.get("a.bools").unwrap().as_array().unwrap();
        assert_eq!(
            bools.iter().collect::<Vec<_>>(),
            [GgufValue::Bool(true), GgufValue::Bool(false)]
        );
        let f64s = g.get("a.f64s").unwrap().as_array().unwrap();
        assert_eq!((f64s.len(), f64s.get(1)), (2, Some(GgufValue::F64(1e300))));

        let a = g.tensor("a").unwrap();
        assert_eq!((a.dtype, a.shape(), a.size), (DType::F32, vec![2, 3], 24));
        let b = g.tensor("b").unwrap();
        assert_eq!((b.dtype, b.size, b.offset), (DType::Q8_0, 34, 32));
        assert_eq!(
            g.read_tensor(&mut cur, a).unwrap(),
            (0..24).collect::<Vec<u8>>()
        );
        assert_eq!(g.read_tensor(&mut cur, b).unwrap(), vec![9; 34]);
    }

    fn err(bytes: Vec<u8>) -> GgufError {
        GgufFile::read(&mut Cursor::new(bytes)).unwrap_err()
    }

    #[test]
    fn rejects_bad_magic() {
        let mut b = tiny();
        b[..4].copy_from_slice(b"GGML");
        assert!(matches!(err(b), GgufError::BadMagic(m) if &m == b"GGML"));
    }

    #[test]
    fn rejects_version_1_and_4() {
        for v in [1u32, 4] {
            let mut b = tiny();
            b[4..8].copy_from_slice(&v.to_le_bytes());
            assert!(matches!(err(b), GgufError::UnsupportedVersion(x) if x == v));
        }
        let mut b = tiny();
        b[4..8].copy_from_slice(&2u32.to_le_bytes());
        assert!(GgufFile::read(&mut Cursor::new(b)).is_ok());
    }

    #[test]
    fn rejects_truncation_everywhere_in_the_header() {
        let b = tiny();
        let g = GgufFile::read(&mut Cursor::new(&b)).unwrap();
        // Every cut inside the header/tables is a Truncated error, never a panic.
        for cut in 0..g.data_offset as usize - 32 {
            let e = err(b[..cut].to_vec());
            assert!(
                matches!(
                    e,
                    GgufError::Truncated(_) | GgufError::TensorBeyondEof { .. }
                ),
                "cut {cut}: {e:?}"
            );
        }
    }

    #[test]
    fn caps_counts_and_lengths_before_allocating() {
        let mut b = tiny();
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(err(b), GgufError::TooMany { what: "tensor", .. }));
        let mut b = tiny();
        b[16..24].copy_from_slice(&(1u64 << 62).to_le_bytes());
        assert!(matches!(
            err(b),
            GgufError::TooMany {
                what: "metadata key-value",
                ..
            }
        ));
        // First key's length.
        let mut b = tiny();
        b[24..32].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
        assert!(matches!(err(b), GgufError::StringTooLong { .. }));
        // A string within the cap but beyond the end of the file.
        let mut b = tiny();
        b[24..32].copy_from_slice(&(1u64 << 20).to_le_bytes());
        assert!(matches!(err(b), GgufError::Truncated(_)));
        let huge_array = file(&[("x", GgufValue::Array(GgufArray::U8(vec![1])))], &[]);
        let mut b = huge_array;
        // Array length sits after key (8+1), value type (4), element type (4).
        let at = 24 + 9 + 4 + 4;
        b[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(matches!(
            err(b),
            GgufError::TooMany {
                what: "array element",
                ..
            }
        ));
    }

    #[test]
    fn rejects_unknown_tensor_type() {
        let b = file(
            &[],
            &[RawTensor {
                name: "q2k".into(),
                dims: vec![256],
                type_id: 10,
                data: vec![0; 84],
            }],
        );
        assert!(matches!(
            err(b),
            GgufError::UnknownGgmlType { type_id: 10, .. }
        ));
    }

    #[test]
    fn rejects_unknown_value_type_and_bad_bool() {
        let mut b = file(&[("k", GgufValue::U8(1))], &[]);
        b[24 + 9..24 + 13].copy_from_slice(&99u32.to_le_bytes());
        assert!(matches!(err(b), GgufError::UnknownValueType(99)));
        let mut b = file(&[("k", GgufValue::Bool(true))], &[]);
        b[24 + 13] = 2;
        assert!(matches!(err(b), GgufError::BadBool(2)));
    }

    #[test]
    fn rejects_tensor_data_beyond_eof() {
        let mut b = tiny();
        b.truncate(b.len() - 1);
        assert!(matches!(err(b), GgufError::TensorBeyondEof { ref tensor, .. } if tensor == "b"));
    }

    #[test]
    fn rejects_bad_shapes_and_alignment() {
        let b = file(
            &[],
            &[RawTensor {
                name: "q".into(),
                dims: vec![16, 2],
                type_id: 8,
                data: vec![0; 34],
            }],
        );
        assert!(matches!(err(b), GgufError::InvalidShape { .. }));
        let b = file(
            &[],
            &[RawTensor {
                name: "big".into(),
                dims: vec![1 << 32, 1 << 32, 1 << 32],
                type_id: 0,
                data: vec![],
            }],
        );
        assert!(matches!(err(b), GgufError::InvalidShape { .. }));
        let b = file(
            &[],
            &[RawTensor {
                name: "five".into(),
                dims: vec![1, 1, 1, 1, 1],
                type_id: 0,
                data: vec![0; 4],
            }],
        );
        assert!(matches!(err(b), GgufError::TooManyDims { n_dims: 5, .. }));
        let b = file(&[("general.alignment", GgufValue::U32(24))], &[]);
        assert!(matches!(err(b), GgufError::BadAlignment(24)));
        let b = file(&[("k", GgufValue::U8(1)), ("k", GgufValue::U8(2))], &[]);
        assert!(matches!(err(b), GgufError::DuplicateKey(_)));
    }

    #[test]
    fn rejects_misaligned_tensor_offset() {
        let mut b = file(
            &[],
            &[RawTensor {
                name: "a".into(),
                dims: vec![8],
                type_id: 0,
                data: vec![0; 32],
            }],
        );
        // Header 24, name 8+1, n_dims 4, dims 8, type 4: the offset field is at 49.
        assert_eq!(&b[49..57], &[0; 8]);
        b[49] = 4;
        assert!(matches!(
            err(b),
            GgufError::Misaligned {
                offset: 4,
                alignment: 32,
                ..
            }
        ));
    }

    #[test]
    fn rejects_tensors_sharing_data() {
        let tensor = |name: &str| RawTensor {
            name: name.into(),
            dims: vec![8],
            type_id: 0,
            data: vec![1; 32],
        };
        let good = file(&[], &[tensor("first"), tensor("second"), tensor("third")]);
        GgufFile::read(&mut Cursor::new(&good)).unwrap();
        // The offset field of `second`: after its name, n_dims (4), one dim (8) and type (4).
        let at = good.windows(6).position(|w| w == b"second").unwrap() + 6 + 4 + 8 + 4;
        assert_eq!(&good[at..at + 8], &32u64.to_le_bytes());
        for (offset, first, second) in [(0u64, "first", "second"), (64, "second", "third")] {
            // Aliasing a whole tensor, or a part of it (the next one starts at 64).
            let mut b = good.clone();
            b[at..at + 8].copy_from_slice(&offset.to_le_bytes());
            match err(b) {
                GgufError::Overlap {
                    first: f,
                    second: s,
                } => {
                    assert_eq!((f.as_str(), s.as_str()), (first, second))
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn custom_alignment_moves_the_data_section() {
        let b = file(&[("general.alignment", GgufValue::U32(64))], &[]);
        let g = GgufFile::read(&mut Cursor::new(b)).unwrap();
        assert_eq!(g.alignment, 64);
        assert_eq!(g.data_offset % 64, 0);
    }
}
