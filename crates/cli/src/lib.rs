//! Library side of the `knot` command: model conversion and the subcommands' logic.

pub mod convert;
pub mod gguf;
pub mod progress;
pub mod bench;
pub mod inspect;
pub mod loaded;
