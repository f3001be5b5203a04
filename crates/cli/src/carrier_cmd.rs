//! `knot carrier IMAGE.png`: the carrier readings of an image's patches, summarized per
//! observer, optionally as a copy-index heatmap PNG (see docs/carrier.md).

use carrier::{
    fiber, CarrierError, ImageCarrierPipeline, ImageColumns, ImageData, ImageInput, PatchGrid,
    ReadingKind, SampleRange,
};
use serde::Serialize;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(clap::Args, Debug, Clone)]
pub struct CarrierArgs {
    /// PNG image: gray, gray+alpha, RGB or RGBA at 8 or 16 bits (palettes and low bit depths
    /// are expanded to 8 bits; 16-bit samples are scaled to [0, 1]).
    pub image: PathBuf,
    /// Carrier bandwidth S: distinguishable positions of the source carrier.
    #[arg(long)]
    pub bandwidth: u32,
    /// Observer bandwidths, comma separated (e.g. 3,54).
    #[arg(long, value_delimiter = ',', required = true)]
    pub observers: Vec<u32>,
    /// Patch edge in pixels; edge patches may be smaller.
    #[arg(long, default_value_t = 8)]
    pub patch: u32,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write a heatmap PNG: one panel per observer, each patch colored by its copy index
    /// divided by (fiber size − 1), averaged over channels.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Error)]
pub enum CarrierCmdError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a readable PNG: {source}")]
    Decode {
        path: PathBuf,
        source: png::DecodingError,
    },
    #[error("{path}: unsupported PNG layout {color:?} at {depth:?}")]
    UnsupportedPng {
        path: PathBuf,
        color: png::ColorType,
        depth: png::BitDepth,
    },
    #[error("{path}: cannot write PNG: {source}")]
    Encode {
        path: PathBuf,
        source: png::EncodingError,
    },
    #[error("heatmap of {width}x{height} pixels is too large")]
    HeatmapTooLarge { width: u64, height: u64 },
    #[error(transparent)]
    Carrier(#[from] CarrierError),
}

/// Decoded samples: 8-bit PNGs stay bytes (`'byte'` range), 16-bit ones become unit floats.
#[derive(Debug, Clone, PartialEq)]
pub enum Samples {
    U8(Vec<u8>),
    F32(Vec<f32>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct DecodedPng {
    pub width: u32,
    pub height: u32,
    pub channels: u32,
    pub bit_depth: u8,
    pub samples: Samples,
}

impl DecodedPng {
    pub fn input(&self) -> ImageInput<'_> {
        let (sample_range, data) = match &self.samples {
            Samples::U8(d) => (SampleRange::Byte, ImageData::U8(d)),
            Samples::F32(d) => (SampleRange::Unit, ImageData::F32(d)),
        };
        ImageInput {
            width: self.width,
            height: self.height,
            channels: self.channels,
            sample_range,
            data,
        }
    }
}

/// Largest decoded image accepted (bytes), far above a 16-bit 8K RGBA frame.
const PNG_DECODE_LIMIT: usize = 1 << 30;

pub fn read_png(path: &Path) -> Result<DecodedPng, CarrierCmdError> {
    let file = File::open(path).map_err(|source| CarrierCmdError::Io {
        path: path.into(),
        source,
    })?;
    let decode_err = |source| CarrierCmdError::Decode {
        path: path.into(),
        source,
    };
    let mut decoder = png::Decoder::new_with_limits(
        BufReader::new(file),
        png::Limits {
            bytes: PNG_DECODE_LIMIT,
        },
    );
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder.read_info().map_err(decode_err)?;
    let (color, depth) = reader.output_color_type();
    let unsupported = || CarrierCmdError::UnsupportedPng {
        path: path.into(),
        color,
        depth,
    };
    let channels = match color {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => return Err(unsupported()),
    };
    let size = reader
        .output_buffer_size()
        .filter(|&n| n <= PNG_DECODE_LIMIT)
        .ok_or_else(|| decode_err(png::DecodingError::LimitsExceeded))?;
    let mut buf = vec![0u8; size];
    let info = reader.next_frame(&mut buf).map_err(decode_err)?;
    buf.truncate(info.buffer_size());
    let (width, height) = (info.width, info.height);
    // Rows may be padded past width·channels·bytes per sample; keep exactly the samples.
    let row_samples = width as usize * channels;
    let (bit_depth, samples) = match depth {
        png::BitDepth::Eight => {
            let mut out = Vec::with_capacity(row_samples * height as usize);
            for row in buf.chunks(info.line_size).take(height as usize) {
                out.extend_from_slice(&row[..row_samples]);
            }
            (8, Samples::U8(out))
        }
        png::BitDepth::Sixteen => {
            let mut out = Vec::with_capacity(row_samples * height as usize);
            for row in buf.chunks(info.line_size).take(height as usize) {
                out.extend(
                    row[..row_samples * 2]
                        .chunks_exact(2)
                        .map(|b| f32::from(u16::from_be_bytes([b[0], b[1]])) / 65535.0),
                );
            }
            (16, Samples::F32(out))
        }
        _ => return Err(unsupported()),
    };
    Ok(DecodedPng {
        width,
        height,
        channels: channels as u32,
        bit_depth,
        samples,
    })
}

/// Per-observer counts over all (patch, channel) cells.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObserverSummary {
    pub observer_bandwidth: u32,
    pub resolutions: u64,
    pub evolutions: u64,
    pub mean_copy_index: f64,
    /// The distinct sizes of the fibers the cells fell in, ascending.
    pub fiber_sizes: Vec<u32>,
    /// Cells whose copy index an observer of this bandwidth could itself carry.
    pub copy_index_representable: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CarrierReport {
    pub image: PathBuf,
    pub bit_depth: u8,
    #[serde(flatten)]
    pub grid: PatchGrid,
    pub partial_patches: u64,
    pub cells: u64,
    pub carrier_bandwidth: u32,
    pub observers: Vec<ObserverSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heatmap: Option<PathBuf>,
}

pub fn summarize(columns: &ImageColumns) -> Vec<ObserverSummary> {
    let s = columns.carrier_bandwidth;
    columns
        .observer_bandwidths
        .iter()
        .enumerate()
        .map(|(o, &b)| {
            let readings = columns.observer_slice(&columns.readings, o);
            let copies = columns.observer_slice(&columns.copy_indices, o);
            let positions = columns.observer_slice(&columns.observer_positions, o);
            let resolutions = readings
                .iter()
                .filter(|&&r| r == ReadingKind::Resolution.code())
                .count() as u64;
            let copy_sum: u64 = copies.iter().map(|&c| u64::from(c)).sum();
            // Fiber sizes take at most two values (⌊S/b⌋ and ⌈S/b⌉), so this list stays tiny.
            let mut fiber_sizes: Vec<u32> = Vec::new();
            let mut representable = 0u64;
            for &j in positions {
                let size = fiber(j, b, s).size;
                representable += u64::from(size <= b);
                if !fiber_sizes.contains(&size) {
                    fiber_sizes.push(size);
                }
            }
            fiber_sizes.sort_unstable();
            let n = readings.len() as u64;
            ObserverSummary {
                observer_bandwidth: b,
                resolutions,
                evolutions: n - resolutions,
                mean_copy_index: if n == 0 {
                    0.0
                } else {
                    copy_sum as f64 / n as f64
                },
                fiber_sizes,
                copy_index_representable: representable,
            }
        })
        .collect()
}

/// A few stops of a viridis-like ramp (dark violet → blue → teal → green → yellow), linearly
/// interpolated: perceptually ordered and readable in grayscale.
const RAMP: [[f32; 3]; 5] = [
    [68.0, 1.0, 84.0],
    [59.0, 82.0, 139.0],
    [33.0, 145.0, 140.0],
    [94.0, 201.0, 98.0],
    [253.0, 231.0, 37.0],
];

pub fn ramp(t: f32) -> [u8; 3] {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    let x = t * (RAMP.len() - 1) as f32;
    let i = (x as usize).min(RAMP.len() - 2);
    let f = x - i as f32;
    let (a, b) = (RAMP[i], RAMP[i + 1]);
    [0, 1, 2].map(|c| (a[c] + (b[c] - a[c]) * f).round() as u8)
}

/// Pixels between observer panels.
const PANEL_GAP: u32 = 4;
const GAP_COLOR: [u8; 3] = [32, 32, 32];
/// Heatmap pixel budget (RGB): refuses absurd sizes instead of allocating them.
const HEATMAP_LIMIT: u64 = 1 << 28;

/// Panel pixels per patch: small grids are enlarged so a panel is a few hundred pixels wide.
pub fn heatmap_scale(grid: &PatchGrid) -> u32 {
    (512 / grid.patches_x.max(grid.patches_y)).clamp(1, 16)
}

/// RGB heatmap: one panel per observer, left to right in observer order; each patch a
/// `scale×scale` block colored by its copy index / (fiber size − 1) averaged over channels
/// (0 where the fiber is a single position, i.e. nothing is lost).
pub fn heatmap(columns: &ImageColumns) -> Result<(u32, u32, Vec<u8>), CarrierCmdError> {
    // analyze_columnar always sets the grid.
    let grid = columns.grid.expect("columns come from an image analysis");
    let scale = heatmap_scale(&grid);
    let observers = columns.observer_bandwidths.len() as u64;
    let panel_w = u64::from(grid.patches_x) * u64::from(scale);
    let width = panel_w * observers + u64::from(PANEL_GAP) * (observers - 1);
    let height = u64::from(grid.patches_y) * u64::from(scale);
    if width * height > HEATMAP_LIMIT || width > u64::from(u32::MAX) {
        return Err(CarrierCmdError::HeatmapTooLarge { width, height });
    }
    let (width, height, panel_w) = (width as u32, height as u32, panel_w as u32);
    let mut pixels = GAP_COLOR.repeat(width as usize * height as usize);
    let channels = grid.channels as usize;
    let s = columns.carrier_bandwidth;
    for (o, &b) in columns.observer_bandwidths.iter().enumerate() {
        let copies = columns.observer_slice(&columns.copy_indices, o);
        let positions = columns.observer_slice(&columns.observer_positions, o);
        let x0 = o as u32 * (panel_w + PANEL_GAP);
        for patch in 0..grid.patch_count() {
            let mut t = 0.0f32;
            for c in patch * channels..(patch + 1) * channels {
                let size = fiber(positions[c], b, s).size;
                if size > 1 {
                    t += copies[c] as f32 / (size - 1) as f32;
                }
            }
            let color = ramp(t / channels as f32);
            let px = (patch % grid.patches_x as usize) as u32;
            let py = (patch / grid.patches_x as usize) as u32;
            for y in py * scale..(py + 1) * scale {
                let row = y as usize * width as usize;
                for x in x0 + px * scale..x0 + (px + 1) * scale {
                    let i = (row + x as usize) * 3;
                    pixels[i..i + 3].copy_from_slice(&color);
                }
            }
        }
    }
    Ok((width, height, pixels))
}

pub fn write_rgb_png(
    path: &Path,
    width: u32,
    height: u32,
    rgb: &[u8],
) -> Result<(), CarrierCmdError> {
    let encode_err = |source| CarrierCmdError::Encode {
        path: path.into(),
        source,
    };
    let file = File::create(path).map_err(|source| CarrierCmdError::Io {
        path: path.into(),
        source,
    })?;
    let mut encoder = png::Encoder::new(BufWriter::new(file), width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(encode_err)?;
    writer.write_image_data(rgb).map_err(encode_err)?;
    writer.finish().map_err(encode_err)
}

/// Decode, analyze, summarize and (with `--out`) draw the heatmap.
pub fn analyze(args: &CarrierArgs) -> Result<CarrierReport, CarrierCmdError> {
    let pipeline = ImageCarrierPipeline::new(args.bandwidth, args.observers.clone(), args.patch)?;
    let png = read_png(&args.image)?;
    let columns = pipeline.analyze_columnar(&png.input())?;
    // analyze_columnar always sets the grid.
    let grid = columns.grid.expect("columns come from an image analysis");
    let partial_patches = (0..grid.patch_count())
        .filter(|&p| grid.patch_rect(p).partial)
        .count() as u64;
    if let Some(out) = &args.out {
        let (w, h, rgb) = heatmap(&columns)?;
        write_rgb_png(out, w, h, &rgb)?;
    }
    Ok(CarrierReport {
        image: args.image.clone(),
        bit_depth: png.bit_depth,
        grid,
        partial_patches,
        cells: columns.cell_count as u64,
        carrier_bandwidth: columns.carrier_bandwidth,
        observers: summarize(&columns),
        heatmap: args.out.clone(),
    })
}

pub fn format_table(r: &CarrierReport) -> String {
    let g = &r.grid;
    let mut s = format!(
        "{}: {}x{}, {} channel(s), {}-bit; patch {} -> {}x{} patches ({} partial), {} cells; \
         carrier bandwidth {}\n",
        r.image.display(),
        g.width,
        g.height,
        g.channels,
        r.bit_depth,
        g.patch_size,
        g.patches_x,
        g.patches_y,
        r.partial_patches,
        r.cells,
        r.carrier_bandwidth
    );
    s += &format!(
        "{:>10} {:>12} {:>12} {:>16} {:>12} {:>16}\n",
        "observer", "resolution", "evolution", "mean copy index", "fiber sizes", "copy idx fits"
    );
    for o in &r.observers {
        let sizes: Vec<String> = o.fiber_sizes.iter().map(u32::to_string).collect();
        s += &format!(
            "{:>10} {:>12} {:>12} {:>16.3} {:>12} {:>16}\n",
            o.observer_bandwidth,
            o.resolutions,
            o.evolutions,
            o.mean_copy_index,
            sizes.join(","),
            o.copy_index_representable
        );
    }
    if let Some(h) = &r.heatmap {
        s += &format!("heatmap: {}\n", h.display());
    }
    s
}

pub fn run(args: &CarrierArgs) -> Result<(), Box<dyn std::error::Error>> {
    let report = analyze(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", format_table(&report));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("knot-carrier-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write_png(
        path: &Path,
        w: u32,
        h: u32,
        color: png::ColorType,
        depth: png::BitDepth,
        data: &[u8],
    ) {
        let file = File::create(path).unwrap();
        let mut enc = png::Encoder::new(BufWriter::new(file), w, h);
        enc.set_color(color);
        enc.set_depth(depth);
        let mut wr = enc.write_header().unwrap();
        wr.write_image_data(data).unwrap();
        wr.finish().unwrap();
    }

    fn args(image: PathBuf, observers: Vec<u32>, patch: u32, out: Option<PathBuf>) -> CarrierArgs {
        CarrierArgs {
            image,
            bandwidth: 54,
            observers,
            patch,
            json: false,
            out,
        }
    }

    #[test]
    fn gray_png_summary_and_heatmap() {
        let dir = temp_dir("gray");
        let img = dir.join("g.png");
        // 5×3 gray, 8-bit, alternating 0 and 255 (positions 0 and 53).
        let data: Vec<u8> = (0..15).map(|i| if i % 2 == 0 { 0 } else { 255 }).collect();
        write_png(
            &img,
            5,
            3,
            png::ColorType::Grayscale,
            png::BitDepth::Eight,
            &data,
        );
        let out = dir.join("heat.png");
        let report = analyze(&args(img.clone(), vec![3, 54], 1, Some(out.clone()))).unwrap();
        assert_eq!(report.cells, 15);
        assert_eq!(report.partial_patches, 0);
        assert_eq!(report.bit_depth, 8);
        let b3 = &report.observers[0];
        // 0 → k=0: resolution, copy 0; 255 → k=53: evolution, copy 17.
        assert_eq!((b3.resolutions, b3.evolutions), (8, 7));
        assert!((b3.mean_copy_index - 7.0 * 17.0 / 15.0).abs() < 1e-12);
        assert_eq!(b3.fiber_sizes, [18]);
        assert_eq!(b3.copy_index_representable, 0);
        let b54 = &report.observers[1];
        assert_eq!((b54.resolutions, b54.evolutions), (15, 0));
        assert_eq!(b54.fiber_sizes, [1]);
        assert_eq!(b54.copy_index_representable, 15);

        // The heatmap: two panels of 5×3 patches at scale 16, 4 px apart.
        let heat = read_png(&out).unwrap();
        assert_eq!(
            (heat.width, heat.height, heat.channels),
            (5 * 16 * 2 + 4, 3 * 16, 3)
        );
        let Samples::U8(px) = heat.samples else {
            panic!("8-bit heatmap")
        };
        let at = |x: u32, y: u32| {
            let i = ((y * heat.width + x) * 3) as usize;
            [px[i], px[i + 1], px[i + 2]]
        };
        assert_eq!(at(0, 0), ramp(0.0), "value 0: copy index 0");
        assert_eq!(at(16, 0), ramp(1.0), "value 255: copy index 17 of 18");
        assert_eq!(at(80, 0), GAP_COLOR);
        assert_eq!(at(84 + 16, 0), ramp(0.0), "b = S loses nothing");

        let table = format_table(&report);
        assert!(table.contains("5x3, 1 channel(s), 8-bit"), "{table}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["observers"][0]["observerBandwidth"], 3);
        assert_eq!(json["patchesX"], 5);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rgba_and_sixteen_bit_pngs() {
        let dir = temp_dir("rgba");
        // 3×2 RGBA 8-bit, patch 2: 2×1 patches, the right one partial.
        let img = dir.join("rgba.png");
        let data: Vec<u8> = (0..3 * 2 * 4).map(|i| (i * 10) as u8).collect();
        write_png(
            &img,
            3,
            2,
            png::ColorType::Rgba,
            png::BitDepth::Eight,
            &data,
        );
        let report = analyze(&args(img, vec![3, 5, 54], 2, None)).unwrap();
        assert_eq!((report.grid.patches_x, report.grid.patches_y), (2, 1));
        assert_eq!(report.partial_patches, 1);
        assert_eq!(report.cells, 8);
        assert_eq!(report.observers.len(), 3);
        let sizes = &report.observers[1].fiber_sizes;
        assert!(
            !sizes.is_empty() && sizes.iter().all(|s| [10, 11].contains(s)),
            "b=5: {sizes:?}"
        );

        // 16-bit gray+alpha: 65535 is the top of the range.
        let img16 = dir.join("ga16.png");
        let samples: [u16; 4] = [0, 65535, 65535, 32768];
        let bytes: Vec<u8> = samples.iter().flat_map(|v| v.to_be_bytes()).collect();
        write_png(
            &img16,
            2,
            1,
            png::ColorType::GrayscaleAlpha,
            png::BitDepth::Sixteen,
            &bytes,
        );
        let png = read_png(&img16).unwrap();
        assert_eq!((png.channels, png.bit_depth), (2, 16));
        assert_eq!(
            png.samples,
            Samples::F32(vec![0.0, 1.0, 1.0, 32768.0 / 65535.0])
        );
        let cols = ImageCarrierPipeline::new(54, vec![54], 1)
            .unwrap()
            .analyze_columnar(&png.input())
            .unwrap();
        assert_eq!(cols.source_positions, [0, 53, 53, 27]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_inputs() {
        let dir = temp_dir("bad");
        let missing = dir.join("missing.png");
        let e = analyze(&args(missing, vec![3], 8, None)).unwrap_err();
        assert!(matches!(e, CarrierCmdError::Io { .. }), "{e}");

        let not_png = dir.join("text.png");
        std::fs::write(&not_png, b"this is not a png").unwrap();
        let e = analyze(&args(not_png.clone(), vec![3], 8, None)).unwrap_err();
        assert!(matches!(e, CarrierCmdError::Decode { .. }), "{e}");
        assert!(e.to_string().contains("not a readable PNG"), "{e}");

        // A truncated PNG: valid header, image data cut off.
        let good = dir.join("good.png");
        write_png(
            &good,
            4,
            4,
            png::ColorType::Rgb,
            png::BitDepth::Eight,
            &[7u8; 48],
        );
        let bytes = std::fs::read(&good).unwrap();
        let cut = dir.join("cut.png");
        std::fs::write(&cut, &bytes[..bytes.len() - 20]).unwrap();
        assert!(analyze(&args(cut, vec![3], 8, None)).is_err());

        // Bad options are carrier errors, reported before the file is read.
        let e = analyze(&args(good.clone(), vec![], 8, None)).unwrap_err();
        assert!(matches!(
            e,
            CarrierCmdError::Carrier(CarrierError::NoObservers)
        ));
        let e = analyze(&args(good.clone(), vec![3], 0, None)).unwrap_err();
        assert!(matches!(
            e,
            CarrierCmdError::Carrier(CarrierError::ZeroPatchSize)
        ));
        let mut a = args(good.clone(), vec![3], 8, None);
        a.bandwidth = 0;
        assert!(analyze(&a)
            .unwrap_err()
            .to_string()
            .contains("carrierBandwidth"));

        // An unwritable heatmap path.
        let e = analyze(&args(good, vec![3], 8, Some(dir.join("no/such/dir/h.png")))).unwrap_err();
        assert!(matches!(e, CarrierCmdError::Io { .. }), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ramp_endpoints_and_order() {
        assert_eq!(ramp(0.0), [68, 1, 84]);
        assert_eq!(ramp(1.0), [253, 231, 37]);
        assert_eq!(ramp(f32::NAN), ramp(0.0));
        // Luminance rises along the ramp.
        let lum = |c: [u8; 3]| 0.2126 * c[0] as f32 + 0.7152 * c[1] as f32 + 0.0722 * c[2] as f32;
        let mut last = -1.0;
        for i in 0..=20 {
            let l = lum(ramp(i as f32 / 20.0));
            assert!(l > last, "{i}");
            last = l;
        }
    }
}
