//! What every reader of a knot file does first — the fixed header, then the metadata (two
//! reads, the second sized by the first and capped) — and the bounds on the spans a host holds.

use crate::error::HostError;
use crate::reader::Reader;
use engine::model::check_architecture;
use knot::{FixedHeader, Knot, ReadOptions, FIXED_HEADER_LEN};
use std::ops::Range;

/// The largest tokenizer blob accepted: the biggest real ones (262k-token vocabularies) take
/// about 6 MiB.
pub const MAX_TOKENIZER_BYTES: u64 = 1 << 28;

/// Reads and checks a knot file's index. A host reads this and then its tensors; a station
/// reads this and then only its part.
pub async fn read_index(reader: &Reader, opts: &ReadOptions) -> Result<Knot, HostError> {
    let mut prefix = reader.read(0, FIXED_HEADER_LEN as u64).await?;
    let prefix_len = FixedHeader::parse(&prefix, opts)?.prefix_len();
    prefix.extend(reader.read(FIXED_HEADER_LEN as u64, prefix_len).await?);
    // Without a known length, reads past the end surface as short reads instead.
    let knot = Knot::parse_prefix(&prefix, reader.source_len().unwrap_or(u64::MAX), opts)?;
    check_architecture(&knot.meta.architecture)?;
    Ok(knot)
}

/// Every span the host fetches lands in one buffer, so it must be addressable here (2 GiB on
/// wasm32) and within `max`; checked at open, before any read is sized by it.
pub fn fits_in_memory(
    what: impl Fn() -> String,
    range: &Range<u64>,
    max: u64,
) -> Result<(), HostError> {
    let bytes = range.end - range.start;
    let max = max.min(isize::MAX as u64);
    if bytes > max {
        return Err(HostError::TooLarge {
            what: what(),
            bytes,
            max,
        });
    }
    Ok(())
}
