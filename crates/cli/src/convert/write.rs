//! Writing a knot file from a [`ModelSource`]: choose output dtypes, plan the layout, stream
//! tensors one at a time into `<output>.partial`, then rename it into place.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use knot::{DType, KnotBuilder};

use super::requant;
use super::{io_err, ConvertError, ConvertOptions, ModelSource, Progress, SourceTensor, Summary};

/// Plans and writes the knot file; `fetch` returns a tensor's bytes in its source dtype.
pub(crate) fn write_knot(
    source: ModelSource,
    output: &Path,
    opts: &ConvertOptions,
    progress: Progress<'_>,
    mut fetch: impl FnMut(&SourceTensor) -> Result<Vec<u8>, ConvertError>,
) -> Result<Summary, ConvertError> {
    // The engine's bounds (layer count, sizes, finite floats) before anything is planned or
    // allocated from the source's numbers: a file the engine would refuse is not written.
    if let Err(e) = engine::model::ConfigExt::validate(&source.config) {
        return Err(ConvertError::InvalidConfig(match e {
            engine::EngineError::BadConfig(m) => m,
            other => other.to_string(),
        }));
    }
    let mut builder = KnotBuilder::new(
        opts.name.clone().unwrap_or(source.name),
        source.architecture,
        source.config,
        source.tokenizer,
    );
    builder.chat_template = source.chat_template;
    let by_name: std::collections::HashMap<&str, &SourceTensor> = source
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t))
        .collect();
    for t in &source.tensors {
        builder.add_tensor(
            t.name.clone(),
            requant::output_dtype(t, opts.dtype),
            t.shape.clone(),
        );
    }
    let plan = builder.plan()?;
    let total: u64 = plan.tensors().iter().map(|t| t.size).sum();

    let partial = partial_path(output);
    let file = File::create(&partial).map_err(io_err(&partial))?;
    let result = (|| {
        let mut writer = plan.writer(BufWriter::with_capacity(1 << 20, file))?;
        let mut done = 0u64;
        let mut converted = 0usize;
        progress(0, total);
        for entry in plan.tensors() {
            // The plan was built from `source.tensors`, so every entry has a source.
            let src = by_name[entry.name.as_str()];
            let bytes = fetch(src)?;
            let out_dtype = DType::from_name(&entry.dtype).expect("plan dtypes are valid");
            let bytes = if out_dtype == src.dtype {
                bytes
            } else {
                converted += 1;
                requant::convert(src, &bytes, out_dtype)?
            };
            writer.write_tensor(&entry.name, &bytes)?;
            done += entry.size;
            progress(done, total);
        }
        let mut out = writer.finish()?;
        out.flush().map_err(io_err(&partial))?;
        out.into_inner()
            .map_err(|e| ConvertError::Io {
                path: partial.clone(),
                source: e.into_error(),
            })?
            .sync_all()
            .map_err(io_err(&partial))?;
        Ok(converted)
    })();
    let converted = match result {
        Ok(c) => c,
        Err(e) => {
            // Best effort: the partial file is garbage, the original error matters more.
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    std::fs::rename(&partial, output).map_err(io_err(output))?;
    Ok(Summary {
        name: plan.meta.name.clone(),
        architecture: plan.meta.architecture.clone(),
        n_layers: plan.meta.layers.len(),
        n_tensors: plan.tensors().len(),
        converted_tensors: converted,
        payload_offset: plan.payload_offset(),
        file_len: plan.file_len(),
    })
}

fn partial_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    output.with_file_name(name)
}
