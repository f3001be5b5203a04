//! Converting GGUF files and HuggingFace directories to knot files: the file drivers of
//! `knot-convert`'s sans-I/O plan.
//!
//! Both converters reduce their input to a [`ModelSource`] (config, tokenizer, tensor list),
//! `knot_convert::ConversionPlan` lays the output out as a header and pieces, and
//! [`write_knot`] (`write.rs`) streams the pieces one at a time into `<output>.partial`, then
//! renames it into place. GGUF metadata parsing, the architecture table, the tokenizer, the
//! requantization and the layout all live in `knot-convert` (which the wasm package uses too);
//! this module reads and writes files, and holds the HF reader.

mod from_gguf;
mod from_hf;
mod write;

use std::path::Path;

pub use knot_convert::{
    arch, requant, tokenizer, ConvertError, ConvertOptions, ModelSource, SourceTensor, Summary,
    TargetDType,
};

pub use from_gguf::gguf_to_knot;
pub use from_hf::hf_to_knot;
pub(crate) use write::write_knot;

/// Called with (bytes of tensor data done, total bytes of tensor data).
pub type Progress<'a> = &'a dyn Fn(u64, u64);

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ConvertError + '_ {
    move |source| ConvertError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests;
