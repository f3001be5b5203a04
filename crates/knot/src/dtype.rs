//! Tensor element formats. Block formats follow ggml's layouts byte for byte.

use serde::{Deserialize, Serialize};

/// How a tensor's elements are stored. Quantized formats pack `block_len()` elements
/// into `block_bytes()` bytes; a row's length must be a multiple of `block_len()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DType {
    F32,
    F16,
    Bf16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q4K,
    Q5K,
    Q6K,
}

impl DType {
    pub const ALL: [DType; 11] = [
        DType::F32,
        DType::F16,
        DType::Bf16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
    ];

    /// Elements per block (1 for plain float formats).
    pub const fn block_len(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::Bf16 => 1,
            DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 => 32,
            DType::Q4K | DType::Q5K | DType::Q6K => 256,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::Bf16 => 2,
            DType::Q8_0 => 34,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q4K => 144,
            DType::Q5K => 176,
            DType::Q6K => 210,
        }
    }

    /// The name used in knot metadata (`"q4_1"`, `"f32"`, …).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::Q8_0 => "q8_0",
            DType::Q4_0 => "q4_0",
            DType::Q4_1 => "q4_1",
            DType::Q5_0 => "q5_0",
            DType::Q5_1 => "q5_1",
            DType::Q4K => "q4_k",
            DType::Q5K => "q5_k",
            DType::Q6K => "q6_k",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes taken by `n_elements` elements, or `None` if `n_elements` is not a whole number
    /// of blocks or the size overflows.
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        let bl = self.block_len() as u64;
        if !n_elements.is_multiple_of(bl) {
            return None;
        }
        (n_elements / bl).checked_mul(self.block_bytes() as u64)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
