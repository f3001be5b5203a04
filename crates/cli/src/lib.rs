//! Library side of the `knot` command: model conversion and the subcommands' logic.

pub mod bench;
pub mod bench_draft;
pub mod carrier_cmd;
pub mod convert;
pub mod generate;
pub mod gguf;
pub mod inspect;
pub mod loaded;
pub mod progress;
