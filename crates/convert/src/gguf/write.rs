//! Writes GGUF files; used by tests to craft inputs (valid and broken) without fixtures.

use super::value::{GgufArray, GgufValue};

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
