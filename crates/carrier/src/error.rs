//! Typed errors. Field names in messages are the JS option names (`sourceBandwidth`, ...), so a
//! binding layer can pass the message through unchanged.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum CarrierError {
    /// A bandwidth of 0 has no positions at all.
    #[error("{field} must be an integer >= 1, got 0")]
    ZeroBandwidth { field: String },

    #[error("observerBandwidths must name at least one observer")]
    NoObservers,

    #[error("cell {id:?}: unitValue {value} is not a finite number")]
    UnitValueNotFinite { id: String, value: f64 },

    #[error("cell {id:?}: unitValue {value} is outside [0, 1]")]
    UnitValueOutOfRange { id: String, value: f64 },

    /// A reading handed back to `fiber_states` that this pipeline cannot have produced.
    #[error("reading: {field} {value} is not valid for {context}")]
    InvalidReading {
        field: &'static str,
        value: u64,
        context: String,
    },

    /// Listing every compatible value of a fiber this large would exhaust memory.
    #[error("fiber of {size} source positions is too large to list (limit {limit})")]
    FiberTooLarge { size: u64, limit: u64 },

    #[error("patchSize must be an integer >= 1, got 0")]
    ZeroPatchSize,

    #[error("image {field} must be >= 1, got 0")]
    ZeroImageDimension { field: &'static str },

    #[error("image data has {actual} samples, expected width*height*channels = {expected}")]
    DataLengthMismatch { expected: u64, actual: u64 },

    #[error("image of {samples} samples does not fit in memory on this target")]
    ImageTooLarge { samples: u64 },

    #[error("sampleRange {0:?} is not 'unit', 'byte' or a [lo, hi] pair")]
    UnknownSampleRange(String),

    #[error("sampleRange [{lo}, {hi}] must be finite with lo < hi")]
    BadSampleRange { lo: f64, hi: f64 },

    #[error(
        "patch {patch} (x={patch_x}, y={patch_y}) channel {channel}: sample {value} at pixel \
         ({pixel_x}, {pixel_y}) is {problem} the sample range [{lo}, {hi}]"
    )]
    SampleOutOfRange {
        patch: u64,
        patch_x: u32,
        patch_y: u32,
        channel: u32,
        pixel_x: u32,
        pixel_y: u32,
        value: f64,
        problem: &'static str,
        lo: f64,
        hi: f64,
    },
}
