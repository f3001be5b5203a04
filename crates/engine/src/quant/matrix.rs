//! [`QMatrix`]: a weight matrix borrowed in its stored bytes, checked once when it is made so
//! the kernels can slice rows without checks of their own. What is done with it by format
//! (`dequantize_row`, `matmul`) is the dispatch in `mod.rs`.

use super::error::QuantError;
use knot::DType;

/// A borrowed row-major weight matrix [rows, cols] in its stored format (rows = out features).
#[derive(Clone, Copy, Debug)]
pub struct QMatrix<'a> {
    dtype: DType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: &'a [u8],
}

impl<'a> QMatrix<'a> {
    pub fn new(dtype: DType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self, QuantError> {
        let expected = Self::byte_len(dtype, rows, cols)?;
        let row_bytes = cols / dtype.block_len() * dtype.block_bytes();
        if data.len() != expected {
            return Err(QuantError::MatrixSize {
                dtype,
                rows,
                cols,
                expected,
                actual: data.len(),
            });
        }
        Ok(QMatrix {
            dtype,
            rows,
            cols,
            row_bytes,
            data,
        })
    }

    /// Bytes a `[rows, cols]` matrix of `dtype` occupies; fails for rows that are not whole
    /// blocks and sizes that overflow.
    pub fn byte_len(dtype: DType, rows: usize, cols: usize) -> Result<usize, QuantError> {
        let block_len = dtype.block_len();
        if !cols.is_multiple_of(block_len) {
            return Err(QuantError::ColsNotWholeBlocks {
                dtype,
                block_len,
                cols,
            });
        }
        let row_bytes = cols / block_len * dtype.block_bytes();
        rows.checked_mul(row_bytes)
            .filter(|_| rows.checked_mul(cols).is_some())
            .ok_or(QuantError::ShapeOverflow { dtype, rows, cols })
    }

    #[inline]
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    #[inline]
    pub fn rows(&self) -> usize {
        self.rows
    }
    #[inline]
    pub fn cols(&self) -> usize {
        self.cols
    }
    #[inline]
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The matrix of rows `rows` alone (a head station's slice of the vocabulary); `None` when
    /// the range is empty or passes the last row.
    pub fn rows_slice(&self, rows: std::ops::Range<usize>) -> Option<QMatrix<'a>> {
        if rows.is_empty() || rows.end > self.rows {
            return None;
        }
        Some(QMatrix {
            rows: rows.len(),
            data: &self.data[rows.start * self.row_bytes..rows.end * self.row_bytes],
            ..*self
        })
    }

    /// The stored bytes of row `r`.
    #[inline]
    pub(super) fn row(&self, r: usize) -> &'a [u8] {
        &self.data[r * self.row_bytes..(r + 1) * self.row_bytes]
    }
}
