//! GGUF → knot, from a file: the header, metadata and tensor table parsed from a buffered
//! reader, then `knot_convert::ConversionPlan`'s pieces written in order, each tensor read from
//! its range of the GGUF.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use knot_convert::gguf::{GgufError, GgufFile};
use knot_convert::ConversionPlan;

use super::{io_err, write_knot, ConvertError, ConvertOptions, Progress, Summary};

/// Converts the GGUF file at `input` into a knot file at `output`.
pub fn gguf_to_knot(
    input: &Path,
    output: &Path,
    opts: &ConvertOptions,
    progress: Progress<'_>,
) -> Result<Summary, ConvertError> {
    let mut reader = BufReader::new(File::open(input).map_err(io_err(input))?);
    let gguf = GgufFile::read(&mut reader)?;
    let stem = input
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let plan = ConversionPlan::from_gguf(&gguf, opts, &stem)?;
    drop(gguf);
    write_knot(&plan, output, progress, |t| {
        // Every GGUF source tensor has its range (`knot_convert::gguf_model_source`), checked
        // to lie inside the file when the table was parsed.
        let range = t.range.expect("GGUF tensors have ranges");
        reader
            .seek(SeekFrom::Start(range.offset))
            .map_err(GgufError::Io)?;
        let len = usize::try_from(range.len).map_err(|_| GgufError::Truncated("tensor data"))?;
        let mut buf = vec![0u8; len];
        reader.read_exact(&mut buf).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                GgufError::Truncated("tensor data")
            } else {
                GgufError::Io(e)
            }
        })?;
        Ok(buf)
    })
}
