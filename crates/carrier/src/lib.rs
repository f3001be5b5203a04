//! Carrier medium: where a unit value sits on a carrier of `S` positions, what an observer of
//! bandwidth `b` reads of it, and what that reading loses (the copy index within its fiber).
//!
//! Deterministic integer arithmetic, no I/O, no learned parameters: it reconstructs no pixels.
//! Entry points: [`CarrierMediumPipeline`] for named unit values, [`ImageCarrierPipeline`] for
//! images (object or columnar results). Semantics with worked tables: `docs/carrier.md`.
//!
//! Results are plain serde structs with the JS field names (`observerBandwidth`, `copyIndex`,
//! ...), so a wasm-bindgen layer can hand them over as they are.

mod error;
pub mod image;
pub mod medium;

pub use error::CarrierError;
pub use image::{
    ImageAnalysis, ImageCarrierPipeline, ImageColumns, ImageData, ImageInput, ImageOptions,
    PatchCell, PatchGrid, PatchRect, SampleRange,
};
pub use medium::{
    fiber, fiber_states, observer_position, read, source_position, CarrierMediumPipeline, Cell,
    CellAnalysis, Fiber, FiberStates, MediumAnalysis, MediumOptions, Reading, ReadingKind,
};
