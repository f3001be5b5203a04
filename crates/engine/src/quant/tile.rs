//! How a matmul walks its output: tiles of weight rows, each streamed past groups of tokens. The
//! architecture kernels drive their row dots through `tiled_matmul!`.

/// Rows per tile in multi-token matmuls: a tile's weights stay in L1 while every token group
/// streams past them.
pub(super) const ROW_TILE: usize = 16;
/// Tokens per weight-row pass: each unpacked weight block serves this many tokens.
pub const TOKEN_GROUP: usize = 4;

/// Drives a row kernel over [rows × n]: for each tile of rows and each group of up to
/// `TOKEN_GROUP` tokens starting at `$t0`, evaluates `$dot` (an expression of `$r`, `$t0` and the
/// const `$nt`, returning `[f32; $nt]`) and stores the results token-major into `$out`.
macro_rules! tiled_matmul {
    ($rows:expr, $n:expr, $out:expr, |$r:ident, $t0:ident, $nt:ident| $dot:expr) => {{
        let rows: usize = $rows;
        let n: usize = $n;
        let out: &mut [f32] = $out;
        let mut r0 = 0;
        while r0 < rows {
            let r1 = (r0 + $crate::quant::tile::ROW_TILE).min(rows);
            let mut $t0 = 0;
            while $t0 < n {
                let group = (n - $t0).min($crate::quant::tile::TOKEN_GROUP);
                macro_rules! group_of {
                    ($k:literal) => {{
                        const $nt: usize = $k;
                        for $r in r0..r1 {
                            let v: [f32; $nt] = $dot;
                            for (i, v) in v.into_iter().enumerate() {
                                out[($t0 + i) * rows + $r] = v;
                            }
                        }
                    }};
                }
                match group {
                    4 => group_of!(4),
                    3 => group_of!(3),
                    2 => group_of!(2),
                    _ => group_of!(1),
                }
                $t0 += group;
            }
            r0 = r1;
        }
    }};
}
#[allow(unused_imports)] // used by the SIMD modules only
pub(crate) use tiled_matmul;
