//! Opens a knot file through a byte source (file, HTTP, R2, memory), keeps the resident tensors,
//! streams layers through an LRU with prefetch, and drives decode. The same code runs natively
//! and inside wasm, where `wasm/` exports it to JS as `WasmHost` (wrapped as `HostShim`).

pub mod cache;
pub mod chat_template;
mod clock;
pub mod error;
pub mod helpers;
pub mod host;
pub mod index;
pub mod memory;
pub mod options;
pub mod pool;
pub mod prefix;
pub mod reader;
pub mod source;
pub mod station;

pub use error::{ErrorCode, HostError};
pub use host::{
    DecodeStats, Generated, Host, PrefillWindowCreated, PrefillWindowInfo, PrefillWindowStats,
    PrefixKind, PrefixReport, SequenceEvent, SequenceId, SequenceReport, Stats,
};
pub use memory::MemoryPlan;
pub use options::HostOptions;
pub use prefix::PrefixStatus;
pub use reader::{Abort, ReadPolicy, Reader};
pub use source::{ByteSource, FileSource, MemorySource, ReadFuture, SourceError};

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
mod wasm;
