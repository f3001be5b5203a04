//! Images as carrier cells: every (patch, channel) is one cell whose unit value is the patch
//! mean of that channel, normalized by the sample range.
//!
//! One pass over the rows accumulates a row of patches at a time, so memory beyond the result
//! is one accumulator per (patch column, channel). The object result ([`ImageAnalysis`]) and the
//! columnar one ([`ImageColumns`]) share that pass.

use crate::error::CarrierError;
use crate::medium::{
    check_observers, read, snap_position, Reading, ReadingKind, ReadingTable, SNAP_EPSILONS,
    TABLE_LIMIT,
};
use serde::{Deserialize, Serialize};

/// What sample values mean: the range that maps onto unit values `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "SampleRangeRepr", into = "SampleRangeRepr")]
pub enum SampleRange {
    /// Floats in `[0, 1]`.
    Unit,
    /// `[0, 255]`.
    Byte,
    /// `[lo, hi]`, finite, `lo < hi`.
    Range { lo: f64, hi: f64 },
}

/// The JS spelling: `'unit'`, `'byte'` or `[lo, hi]`.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum SampleRangeRepr {
    Named(String),
    Pair([f64; 2]),
}

impl TryFrom<SampleRangeRepr> for SampleRange {
    type Error = CarrierError;
    fn try_from(r: SampleRangeRepr) -> Result<Self, CarrierError> {
        match r {
            SampleRangeRepr::Named(name) => SampleRange::parse(&name),
            SampleRangeRepr::Pair([lo, hi]) => {
                let range = SampleRange::Range { lo, hi };
                range.bounds()?;
                Ok(range)
            }
        }
    }
}

impl From<SampleRange> for SampleRangeRepr {
    fn from(r: SampleRange) -> Self {
        match r {
            SampleRange::Unit => SampleRangeRepr::Named("unit".into()),
            SampleRange::Byte => SampleRangeRepr::Named("byte".into()),
            SampleRange::Range { lo, hi } => SampleRangeRepr::Pair([lo, hi]),
        }
    }
}

impl SampleRange {
    /// `"unit"`, `"byte"` or `"lo,hi"`.
    pub fn parse(s: &str) -> Result<Self, CarrierError> {
        match s.trim() {
            "unit" => Ok(SampleRange::Unit),
            "byte" => Ok(SampleRange::Byte),
            other => {
                let pair = other.trim_start_matches('[').trim_end_matches(']');
                let mut parts = pair.split(',').map(|p| p.trim().parse::<f64>());
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(Ok(lo)), Some(Ok(hi)), None) => {
                        let range = SampleRange::Range { lo, hi };
                        range.bounds()?;
                        Ok(range)
                    }
                    _ => Err(CarrierError::UnknownSampleRange(s.to_string())),
                }
            }
        }
    }

    /// `(lo, hi)`, checked finite with `lo < hi`.
    pub fn bounds(&self) -> Result<(f64, f64), CarrierError> {
        let (lo, hi) = match *self {
            SampleRange::Unit => (0.0, 1.0),
            SampleRange::Byte => (0.0, 255.0),
            SampleRange::Range { lo, hi } => (lo, hi),
        };
        if lo.is_finite() && hi.is_finite() && lo < hi && (hi - lo).is_finite() {
            Ok((lo, hi))
        } else {
            Err(CarrierError::BadSampleRange { lo, hi })
        }
    }
}

/// Samples in row-major interleaved order (`((y·width + x)·channels + c)`). A JS
/// `Uint8ClampedArray` is `U8`.
#[derive(Debug, Clone, Copy)]
pub enum ImageData<'a> {
    F32(&'a [f32]),
    U8(&'a [u8]),
}

impl ImageData<'_> {
    pub fn len(&self) -> usize {
        match self {
            ImageData::F32(d) => d.len(),
            ImageData::U8(d) => d.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Clone, Copy)]
pub struct ImageInput<'a> {
    pub width: u32,
    pub height: u32,
    pub channels: u32,
    pub sample_range: SampleRange,
    pub data: ImageData<'a>,
}

/// Options as the JS constructor takes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageOptions {
    pub carrier_bandwidth: u32,
    pub observer_bandwidths: Vec<u32>,
    pub patch_size: u32,
}

/// The pixel rectangle of one patch; `partial` when it is cut by the right or bottom edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchRect {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
    pub partial: bool,
}

/// How patches tile an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchGrid {
    pub width: u32,
    pub height: u32,
    pub channels: u32,
    pub patch_size: u32,
    pub patches_x: u32,
    pub patches_y: u32,
}

impl PatchGrid {
    pub fn patch_count(&self) -> usize {
        self.patches_x as usize * self.patches_y as usize
    }

    /// Cells are (patch, channel) pairs: `patch·channels + channel`.
    pub fn cell_count(&self) -> usize {
        self.patch_count() * self.channels as usize
    }

    /// Patches are numbered row by row: `patchY·patchesX + patchX`.
    pub fn patch_rect(&self, patch: usize) -> PatchRect {
        let px = (patch % self.patches_x as usize) as u32;
        let py = (patch / self.patches_x as usize) as u32;
        let x = px * self.patch_size;
        let y = py * self.patch_size;
        let width = self.patch_size.min(self.width - x);
        let height = self.patch_size.min(self.height - y);
        PatchRect {
            x,
            y,
            width,
            height,
            partial: width < self.patch_size || height < self.patch_size,
        }
    }
}

/// One (patch, channel) cell with its geometry and one reading per observer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchCell {
    /// `patch-<patchIndex>-c<channel>`.
    pub id: String,
    pub patch_index: u32,
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
    pub channel: u32,
    pub partial: bool,
    pub unit_value: f64,
    pub source_position: u32,
    pub readings: Vec<Reading>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageAnalysis {
    #[serde(flatten)]
    pub grid: PatchGrid,
    pub carrier_bandwidth: u32,
    pub observer_bandwidths: Vec<u32>,
    /// Cell order: `patch·channels + channel`.
    pub patches: Vec<PatchCell>,
}

/// Columnar result: a handful of flat arrays instead of one object per cell.
///
/// With `n = cellCount` and observers numbered `o` in option order, cell `i` (=
/// `patch·channels + channel`) has its source position at `sourcePositions[i]` and its reading
/// by observer `o` at index `o·n + i` of `observerPositions`, `copyIndices` and `readings`
/// (1 = resolution, 0 = evolution). Fiber start and size follow from the observer position
/// ([`ImageColumns::reading`] rebuilds the full [`Reading`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageColumns {
    pub grid: Option<PatchGrid>,
    pub carrier_bandwidth: u32,
    pub observer_bandwidths: Vec<u32>,
    pub cell_count: usize,
    pub source_positions: Vec<u32>,
    pub observer_positions: Vec<u32>,
    pub copy_indices: Vec<u32>,
    pub readings: Vec<u8>,
}

impl ImageColumns {
    /// The full reading of `cell` by observer number `observer`.
    pub fn reading(&self, observer: usize, cell: usize) -> Reading {
        read(
            self.source_positions[cell],
            self.observer_bandwidths[observer],
            self.carrier_bandwidth,
        )
    }

    /// Observer `o`'s slice of a per-observer column.
    pub fn observer_slice<'a, T>(&self, column: &'a [T], observer: usize) -> &'a [T] {
        &column[observer * self.cell_count..(observer + 1) * self.cell_count]
    }
}

/// An image carrier: patch means of each channel read by observers of a carrier of bandwidth
/// `carrierBandwidth`.
#[derive(Debug, Clone)]
pub struct ImageCarrierPipeline {
    carrier_bandwidth: u32,
    observer_bandwidths: Vec<u32>,
    patch_size: u32,
    /// Per observer, the reading of every source position; `None` for huge carriers.
    tables: Option<Vec<ReadingTable>>,
}

/// What the row pass hands each cell, in cell order.
trait CellSink {
    fn cell(&mut self, cell: usize, unit_value: f64, source_position: u32);
}

impl ImageCarrierPipeline {
    pub fn new(
        carrier_bandwidth: u32,
        observer_bandwidths: Vec<u32>,
        patch_size: u32,
    ) -> Result<Self, CarrierError> {
        if carrier_bandwidth == 0 {
            return Err(CarrierError::ZeroBandwidth {
                field: "carrierBandwidth".into(),
            });
        }
        check_observers(&observer_bandwidths)?;
        if patch_size == 0 {
            return Err(CarrierError::ZeroPatchSize);
        }
        let tables = (carrier_bandwidth <= TABLE_LIMIT).then(|| {
            observer_bandwidths
                .iter()
                .map(|&b| ReadingTable::new(b, carrier_bandwidth))
                .collect()
        });
        Ok(ImageCarrierPipeline {
            carrier_bandwidth,
            observer_bandwidths,
            patch_size,
            tables,
        })
    }

    pub fn from_options(options: ImageOptions) -> Result<Self, CarrierError> {
        Self::new(
            options.carrier_bandwidth,
            options.observer_bandwidths,
            options.patch_size,
        )
    }

    pub fn carrier_bandwidth(&self) -> u32 {
        self.carrier_bandwidth
    }

    pub fn observer_bandwidths(&self) -> &[u32] {
        &self.observer_bandwidths
    }

    pub fn patch_size(&self) -> u32 {
        self.patch_size
    }

    /// Checks the image's shape against its data and returns the patch grid.
    pub fn grid(&self, image: &ImageInput) -> Result<PatchGrid, CarrierError> {
        for (field, v) in [
            ("width", image.width),
            ("height", image.height),
            ("channels", image.channels),
        ] {
            if v == 0 {
                return Err(CarrierError::ZeroImageDimension { field });
            }
        }
        image.sample_range.bounds()?;
        let expected = u64::from(image.width)
            .checked_mul(u64::from(image.height))
            .and_then(|n| n.checked_mul(u64::from(image.channels)));
        let actual = image.data.len() as u64;
        if expected != Some(actual) {
            return Err(CarrierError::DataLengthMismatch {
                expected: expected.unwrap_or(u64::MAX),
                actual,
            });
        }
        Ok(PatchGrid {
            width: image.width,
            height: image.height,
            channels: image.channels,
            patch_size: self.patch_size,
            patches_x: image.width.div_ceil(self.patch_size),
            patches_y: image.height.div_ceil(self.patch_size),
        })
    }

    /// One object per (patch, channel). For large images prefer [`Self::analyze_columnar`].
    pub fn analyze(&self, image: &ImageInput) -> Result<ImageAnalysis, CarrierError> {
        let grid = self.grid(image)?;
        struct Objects<'p> {
            pipeline: &'p ImageCarrierPipeline,
            grid: PatchGrid,
            cells: Vec<PatchCell>,
        }
        impl CellSink for Objects<'_> {
            fn cell(&mut self, cell: usize, unit_value: f64, k: u32) {
                let channels = self.grid.channels as usize;
                let (patch, channel) = (cell / channels, (cell % channels) as u32);
                let rect = self.grid.patch_rect(patch);
                let p = self.pipeline;
                self.cells.push(PatchCell {
                    id: format!("patch-{patch}-c{channel}"),
                    patch_index: patch as u32,
                    x: rect.x,
                    y: rect.y,
                    width: rect.width,
                    height: rect.height,
                    channel,
                    partial: rect.partial,
                    unit_value,
                    source_position: k,
                    readings: p
                        .observer_bandwidths
                        .iter()
                        .map(|&b| read(k, b, p.carrier_bandwidth))
                        .collect(),
                });
            }
        }
        let mut sink = Objects {
            pipeline: self,
            grid,
            cells: Vec::with_capacity(grid.cell_count()),
        };
        self.run(image, &grid, &mut sink)?;
        Ok(ImageAnalysis {
            grid,
            carrier_bandwidth: self.carrier_bandwidth,
            observer_bandwidths: self.observer_bandwidths.clone(),
            patches: sink.cells,
        })
    }

    /// Flat arrays (see [`ImageColumns`] for the layout).
    pub fn analyze_columnar(&self, image: &ImageInput) -> Result<ImageColumns, CarrierError> {
        let mut out = ImageColumns::default();
        self.analyze_columnar_into(image, &mut out)?;
        Ok(out)
    }

    /// [`Self::analyze_columnar`] into existing buffers, reusing their allocations (a video
    /// loop analyzes every frame into the same columns).
    pub fn analyze_columnar_into(
        &self,
        image: &ImageInput,
        out: &mut ImageColumns,
    ) -> Result<(), CarrierError> {
        let grid = self.grid(image)?;
        let cells = grid.cell_count();
        let observers = self.observer_bandwidths.len();
        let per_observer = cells
            .checked_mul(observers)
            .ok_or(CarrierError::ImageTooLarge {
                samples: image.data.len() as u64,
            })?;
        out.grid = Some(grid);
        out.carrier_bandwidth = self.carrier_bandwidth;
        out.observer_bandwidths
            .clone_from(&self.observer_bandwidths);
        out.cell_count = cells;
        // Every entry is written by the pass below; resizing only sets the lengths.
        out.source_positions.resize(cells, 0);
        out.observer_positions.resize(per_observer, 0);
        out.copy_indices.resize(per_observer, 0);
        out.readings.resize(per_observer, 0);

        struct Columns<'a> {
            pipeline: &'a ImageCarrierPipeline,
            cells: usize,
            source_positions: &'a mut [u32],
            observer_positions: &'a mut [u32],
            copy_indices: &'a mut [u32],
            readings: &'a mut [u8],
        }
        impl CellSink for Columns<'_> {
            #[inline]
            fn cell(&mut self, cell: usize, _unit_value: f64, k: u32) {
                self.source_positions[cell] = k;
                let p = self.pipeline;
                match &p.tables {
                    Some(tables) => {
                        for (o, t) in tables.iter().enumerate() {
                            let i = o * self.cells + cell;
                            let ki = k as usize;
                            self.observer_positions[i] = t.positions[ki];
                            self.copy_indices[i] = t.copy_indices[ki];
                            self.readings[i] = t.codes[ki];
                        }
                    }
                    None => {
                        for (o, &b) in p.observer_bandwidths.iter().enumerate() {
                            let i = o * self.cells + cell;
                            let r = read(k, b, p.carrier_bandwidth);
                            self.observer_positions[i] = r.observer_position;
                            self.copy_indices[i] = r.copy_index;
                            self.readings[i] = r.reading.code();
                        }
                    }
                }
            }
        }
        let mut sink = Columns {
            pipeline: self,
            cells,
            source_positions: &mut out.source_positions,
            observer_positions: &mut out.observer_positions,
            copy_indices: &mut out.copy_indices,
            readings: &mut out.readings,
        };
        self.run(image, &grid, &mut sink)
    }

    fn run<S: CellSink>(
        &self,
        image: &ImageInput,
        grid: &PatchGrid,
        sink: &mut S,
    ) -> Result<(), CarrierError> {
        let (lo, hi) = image.sample_range.bounds()?;
        match image.data {
            // Bytes are exact; only the mean and the normalization round.
            ImageData::U8(d) => {
                let check = !(lo <= 0.0 && hi >= 255.0);
                self.rows(d, grid, lo, hi, check, f64::EPSILON, sink)
            }
            // The f32 sample itself may be up to half an f32 ulp away from the value meant.
            ImageData::F32(d) => self.rows(d, grid, lo, hi, true, f64::from(f32::EPSILON), sink),
        }
    }

    /// The row pass: accumulate one row of patches, then hand each (patch, channel) mean to the
    /// sink. `input_epsilon` is the relative precision of the samples, for the boundary snap.
    #[allow(clippy::too_many_arguments)]
    fn rows<T: Sample, S: CellSink>(
        &self,
        data: &[T],
        grid: &PatchGrid,
        lo: f64,
        hi: f64,
        check_range: bool,
        input_epsilon: f64,
        sink: &mut S,
    ) -> Result<(), CarrierError> {
        let channels = grid.channels as usize;
        let patch = grid.patch_size as usize;
        let width = grid.width as usize;
        let row_len = width * channels;
        let patches_x = grid.patches_x as usize;
        let s = self.carrier_bandwidth;
        let s_f = f64::from(s);
        let span = hi - lo;
        // Tolerance of x = u·S (see docs/carrier.md): the samples' own precision scaled through
        // the normalization, plus the few f64 roundings of mean, normalization and product.
        let input_slack = SNAP_EPSILONS * input_epsilon * s_f / span;
        let f64_slack = SNAP_EPSILONS * f64::EPSILON;
        let lo_abs = lo.abs();
        let mut sums = vec![0.0f64; patches_x * channels];
        let mut cell = 0usize;
        for (py, band) in data.chunks(row_len * patch).enumerate() {
            sums.fill(0.0);
            for (dy, row) in band.chunks_exact(row_len).enumerate() {
                let mut in_range = true;
                for (acc, samples) in sums
                    .chunks_exact_mut(channels)
                    .zip(row.chunks(patch * channels))
                {
                    for pixel in samples.chunks_exact(channels) {
                        for (a, &v) in acc.iter_mut().zip(pixel) {
                            let v = v.to_f64();
                            in_range &= (v >= lo) & (v <= hi);
                            *a += v;
                        }
                    }
                }
                if check_range && !in_range {
                    let y = (py * patch + dy) as u32;
                    return Err(out_of_range(row, y, grid, lo, hi));
                }
            }
            let band_height = band.len() / row_len;
            for (px, acc) in sums.chunks_exact(channels).enumerate() {
                let band_width = patch.min(width - px * patch);
                let count = (band_width * band_height) as f64;
                for &sum in acc {
                    let mean = sum / count;
                    let u = ((mean - lo) / span).clamp(0.0, 1.0);
                    let x = u * s_f;
                    let tolerance = input_slack * (mean.abs() + lo_abs) + f64_slack * x;
                    sink.cell(cell, u, snap_position(x, tolerance, s));
                    cell += 1;
                }
            }
        }
        Ok(())
    }
}

/// The first sample of `row` outside `[lo, hi]`, as an error naming its patch and channel.
fn out_of_range<T: Sample>(row: &[T], y: u32, grid: &PatchGrid, lo: f64, hi: f64) -> CarrierError {
    let channels = grid.channels as usize;
    let (i, value) = row
        .iter()
        .map(|v| v.to_f64())
        .enumerate()
        .find(|&(_, v)| !(v >= lo && v <= hi))
        // Only called after the row pass saw such a sample.
        .expect("row holds an out-of-range sample");
    let x = (i / channels) as u32;
    let (patch_x, patch_y) = (x / grid.patch_size, y / grid.patch_size);
    CarrierError::SampleOutOfRange {
        patch: u64::from(patch_y) * u64::from(grid.patches_x) + u64::from(patch_x),
        patch_x,
        patch_y,
        channel: (i % channels) as u32,
        pixel_x: x,
        pixel_y: y,
        value,
        problem: if value.is_nan() || value.is_infinite() {
            "not a finite number within"
        } else if value < lo {
            "below"
        } else {
            "above"
        },
        lo,
        hi,
    }
}

trait Sample: Copy {
    fn to_f64(self) -> f64;
}

impl Sample for f32 {
    #[inline]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Sample for u8 {
    #[inline]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
}

/// Reading kinds of a columnar result for one observer, as strings (for tests and tools).
pub fn reading_kinds(columns: &ImageColumns, observer: usize) -> Vec<ReadingKind> {
    columns
        .observer_slice(&columns.readings, observer)
        .iter()
        .map(|&c| ReadingKind::from_code(c))
        .collect()
}

#[cfg(test)]
#[path = "image_tests.rs"]
mod tests;
