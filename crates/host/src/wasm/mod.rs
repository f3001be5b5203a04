//! The JS boundary (wasm32-unknown-unknown only): every export of the package's wasm. Nothing
//! here may panic — a panic aborts the whole wasm instance — and every failure becomes a JS
//! `Error` with a stable `code` (`errors.rs`).
//!
//! - `convert.rs` — values across the boundary: counts, indices, messages in; objects out;
//! - `source.rs` — a JS `KnotByteSource` as a `ByteSource`;
//! - `errors.rs` — failures as JS errors with codes;
//! - `host.rs` — `WasmHost`, behind `HostShim`;
//! - `station.rs` — the stations of a split model and their coordinator;
//! - `carrier.rs` — the carrier pipelines;
//! - `gguf.rs` — `WasmGgufConverter`, GGUF → knot for `convertGguf`;
//! - `helpers.rs` — MOA and COLTRANE helpers, and `errorCodes()`;
//! - `threads.rs` — the threaded build's workers joining the matmul pool.

mod carrier;
mod convert;
mod errors;
mod gguf;
mod helpers;
mod host;
mod source;
mod station;
mod threads;
