//! The tensor table: an entry ([`GgufTensorInfo`]) and the ggml type ids knot can store.

use knot::DType;

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

/// One entry of the tensor table, its size checked against its type and dimensions.
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
