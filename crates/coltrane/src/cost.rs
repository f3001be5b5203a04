//! Byte counts that may be unreachable: closing costs and fewest bytes, shared by the schema
//! graph, the matcher and the leaf automata (numbers, patterns).

/// "Unreachable" for byte counts (a quarter of `u32::MAX`: sums of a few stay below overflow).
pub const INF: u32 = u32::MAX / 4;
