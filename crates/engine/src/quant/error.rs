//! What can be wrong with a matrix or a buffer handed to the kernels.

use knot::DType;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    #[error("{dtype} packs {block_len} elements per block, but the row length is {cols}")]
    ColsNotWholeBlocks {
        dtype: DType,
        block_len: usize,
        cols: usize,
    },
    #[error("{dtype} matrix [{rows}, {cols}] is too large to address")]
    ShapeOverflow {
        dtype: DType,
        rows: usize,
        cols: usize,
    },
    #[error("{dtype} matrix [{rows}, {cols}] needs {expected} bytes, got {actual}")]
    MatrixSize {
        dtype: DType,
        rows: usize,
        cols: usize,
        expected: usize,
        actual: usize,
    },
    #[error("{len} bytes are not a whole number of {dtype} blocks ({block_bytes} bytes each)")]
    BytesNotWholeBlocks {
        dtype: DType,
        block_bytes: usize,
        len: usize,
    },
    #[error("{len} values are not a whole number of {dtype} blocks ({block_len} values each)")]
    ValuesNotWholeBlocks {
        dtype: DType,
        block_len: usize,
        len: usize,
    },
    #[error("{dtype} bytes hold {elements} values but the output has room for {out_len}")]
    OutputLength {
        dtype: DType,
        elements: usize,
        out_len: usize,
    },
}
