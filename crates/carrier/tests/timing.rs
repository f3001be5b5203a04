//! Wall-clock figures where criterion does not run (wasm32-wasip1 in Node):
//! `cargo test -p carrier --release --target wasm32-wasip1 --test timing -- --ignored --nocapture`
//! (also runs natively). Ignored by default: it allocates ~700 MB and is only meaningful in
//! release builds.

use carrier::{
    CarrierMediumPipeline, Cell, ImageCarrierPipeline, ImageColumns, ImageData, ImageInput,
    SampleRange,
};
use std::time::Instant;

fn best_of<F: FnMut()>(runs: usize, mut f: F) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
#[ignore = "timing: run in release with --ignored --nocapture"]
fn cells_per_second() {
    let (w, h) = (3840u32, 2160u32);
    let mut state = 0x9e37_79b9_u32;
    let mut data = Vec::with_capacity((w * h * 4) as usize);
    for y in 0..h {
        for x in 0..w {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            data.extend_from_slice(&[(x * 255 / w) as u8, (y * 255 / h) as u8, state as u8, 255]);
        }
    }
    let input = ImageInput {
        width: w,
        height: h,
        channels: 4,
        sample_range: SampleRange::Byte,
        data: ImageData::U8(&data),
    };
    for patch in [8u32, 1] {
        let p = ImageCarrierPipeline::new(54, vec![3, 54], patch).unwrap();
        let mut out = ImageColumns::default();
        let secs = best_of(3, || p.analyze_columnar_into(&input, &mut out).unwrap());
        let cells = out.cell_count as f64;
        println!(
            "3840x2160 RGBA patch {patch}: {} cells x 2 observers in {:.1} ms = {:.1} M cells/s",
            out.cell_count,
            secs * 1e3,
            cells / secs / 1e6
        );
        assert_eq!(out.readings.len(), out.cell_count * 2);
    }

    let pipeline = CarrierMediumPipeline::new(54, vec![3, 5, 54]).unwrap();
    let cells: Vec<Cell> = (0..100_000)
        .map(|i| Cell::new(format!("cell-{i}"), (i % 1000) as f64 / 999.0))
        .collect();
    let secs = best_of(5, || {
        assert_eq!(pipeline.analyze(&cells).unwrap().cells.len(), cells.len());
    });
    println!(
        "medium analyze: 100000 cells x 3 observers in {:.1} ms = {:.2} M cells/s",
        secs * 1e3,
        1e5 / secs / 1e6
    );
}
