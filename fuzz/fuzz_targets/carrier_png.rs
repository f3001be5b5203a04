//! `knot carrier`'s image input: a PNG file decoded, analyzed by a fixed pipeline, summarized
//! and drawn as a heatmap.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use carrier::ImageCarrierPipeline;
use knot_cli::carrier_cmd::{heatmap, read_png, summarize};
use knot_fuzz::scratch_dir;
use libfuzzer_sys::fuzz_target;

fn input_path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| scratch_dir("png").join("in.png"))
}

fuzz_target!(|data: &[u8]| {
    let path = input_path();
    std::fs::write(path, data).expect("scratch write");
    let Ok(png) = read_png(path) else {
        return;
    };
    let pipeline = ImageCarrierPipeline::new(256, vec![3, 16, 255], 4).expect("fixed options");
    if let Ok(columns) = pipeline.analyze_columnar(&png.input()) {
        let _ = summarize(&columns);
        let _ = heatmap(&columns);
    }
});
