//! Writing a [`ConversionPlan`] to a file: the header, then each piece in order (a tensor is
//! fetched, passed through the plan's transform and written before the next is fetched) into
//! `<output>.partial`, then a rename into place.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use knot_convert::{ConversionPlan, Piece};

use super::{io_err, ConvertError, Progress, SourceTensor, Summary};

/// Writes the planned knot file; `fetch` returns a source tensor's bytes in its source dtype.
pub(crate) fn write_knot(
    plan: &ConversionPlan,
    output: &Path,
    progress: Progress<'_>,
    mut fetch: impl FnMut(&SourceTensor) -> Result<Vec<u8>, ConvertError>,
) -> Result<Summary, ConvertError> {
    let total = plan.tensor_bytes();
    let partial = partial_path(output);
    let file = File::create(&partial).map_err(io_err(&partial))?;
    let result = (|| {
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(plan.header()).map_err(io_err(&partial))?;
        let mut done = 0u64;
        progress(0, total);
        for (i, piece) in plan.pieces().iter().enumerate() {
            match piece {
                Piece::Literal(bytes) => out.write_all(bytes).map_err(io_err(&partial))?,
                Piece::Tensor(t) => {
                    let bytes = plan.transform(i, fetch(&plan.sources()[t.source])?)?;
                    out.write_all(&bytes).map_err(io_err(&partial))?;
                    done += t.len;
                    progress(done, total);
                }
            }
        }
        out.flush().map_err(io_err(&partial))?;
        out.into_inner()
            .map_err(|e| ConvertError::Io {
                path: partial.clone(),
                source: e.into_error(),
            })?
            .sync_all()
            .map_err(io_err(&partial))
    })();
    if let Err(e) = result {
        // Best effort: the partial file is garbage, the original error matters more.
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    std::fs::rename(&partial, output).map_err(io_err(output))?;
    Ok(plan.summary())
}

fn partial_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    output.with_file_name(name)
}
