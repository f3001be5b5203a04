//! The carrier pipelines on arbitrary options and inputs, as the JS constructors and `analyze`
//! calls receive them: medium cells and readings, images of any shape and sample range, object
//! and columnar results.
#![no_main]

use arbitrary::Arbitrary;
use carrier::{
    fiber_states, CarrierMediumPipeline, Cell, ImageCarrierPipeline, ImageData, ImageInput,
    SampleRange,
};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Samples {
    U8(Vec<u8>),
    F32(Vec<f32>),
}

#[derive(Arbitrary, Debug)]
enum Input {
    Medium {
        source_bandwidth: u32,
        observer_bandwidths: Vec<u32>,
        cells: Vec<(String, f64)>,
        readings: Vec<(u32, u32)>,
    },
    Image {
        carrier_bandwidth: u32,
        observer_bandwidths: Vec<u32>,
        patch_size: u32,
        width: u32,
        height: u32,
        channels: u32,
        sample_range: String,
        samples: Samples,
    },
    /// The options objects as JSON, as a caller may send them.
    Json(String),
}

fuzz_target!(|input: Input| match input {
    Input::Medium {
        source_bandwidth,
        observer_bandwidths,
        cells,
        readings,
    } => {
        for &(b, p) in &readings {
            let _ = fiber_states(source_bandwidth, b, p);
        }
        let Ok(pipeline) = CarrierMediumPipeline::new(source_bandwidth, observer_bandwidths) else {
            return;
        };
        let cells: Vec<Cell> = cells.into_iter().map(|(id, u)| Cell::new(id, u)).collect();
        if let Ok(analysis) = pipeline.analyze(&cells) {
            for reading in analysis.cells.iter().flat_map(|c| &c.readings).take(64) {
                let _ = pipeline.fiber_states(reading);
            }
        }
    }
    Input::Image {
        carrier_bandwidth,
        observer_bandwidths,
        patch_size,
        width,
        height,
        channels,
        sample_range,
        samples,
    } => {
        let Ok(sample_range) = SampleRange::parse(&sample_range) else {
            return;
        };
        let Ok(pipeline) =
            ImageCarrierPipeline::new(carrier_bandwidth, observer_bandwidths, patch_size)
        else {
            return;
        };
        let data = match &samples {
            Samples::U8(d) => ImageData::U8(d),
            Samples::F32(d) => ImageData::F32(d),
        };
        let image = ImageInput {
            width,
            height,
            channels,
            sample_range,
            data,
        };
        let _ = pipeline.analyze(&image);
        if let Ok(columns) = pipeline.analyze_columnar(&image) {
            for o in 0..columns.observer_bandwidths.len() {
                let _ = carrier::image::reading_kinds(&columns, o);
                for cell in 0..columns.cell_count.min(16) {
                    let _ = columns.reading(o, cell);
                }
            }
        }
    }
    Input::Json(text) => {
        if let Ok(o) = serde_json::from_str::<carrier::MediumOptions>(&text) {
            let _ = CarrierMediumPipeline::from_options(o);
        }
        if let Ok(o) = serde_json::from_str::<carrier::ImageOptions>(&text) {
            let _ = ImageCarrierPipeline::from_options(o);
        }
        let _ = serde_json::from_str::<SampleRange>(&text);
    }
});
