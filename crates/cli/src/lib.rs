//! Library side of the `knot` command: model conversion and the subcommands' logic.

pub mod bench;
pub mod bench_draft;
pub mod bench_health;
pub mod bench_parallel;
pub mod carrier_cmd;
pub mod convert;
/// The GGUF reader, which lives in `knot-convert`.
pub use knot_convert::gguf;
pub mod generate;
pub mod inspect;
pub mod loaded;
pub mod progress;
