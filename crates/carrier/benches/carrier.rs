//! Cells per second: the medium pipeline over named cells, and a 3840×2160 RGBA frame through
//! the columnar image API at patch 8 and patch 1.

use carrier::{
    CarrierMediumPipeline, Cell, ImageCarrierPipeline, ImageColumns, ImageData, ImageInput,
    SampleRange,
};
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};

const W: u32 = 3840;
const H: u32 = 2160;

/// A deterministic frame with gradients and noise so positions vary across the carrier.
fn frame() -> Vec<u8> {
    let mut state = 0x9e37_79b9_u32;
    let mut data = Vec::with_capacity((W * H * 4) as usize);
    for y in 0..H {
        for x in 0..W {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            data.push((x * 255 / W) as u8);
            data.push((y * 255 / H) as u8);
            data.push(state as u8);
            data.push(255);
        }
    }
    data
}

fn medium(c: &mut Criterion) {
    let pipeline = CarrierMediumPipeline::new(54, vec![3, 5, 54]).unwrap();
    let cells: Vec<Cell> = (0..100_000)
        .map(|i| Cell::new(format!("cell-{i}"), (i % 1000) as f64 / 999.0))
        .collect();
    let mut g = c.benchmark_group("medium");
    g.throughput(Throughput::Elements(cells.len() as u64));
    g.bench_function("analyze 100k cells, 3 observers", |b| {
        b.iter(|| black_box(pipeline.analyze(black_box(&cells)).unwrap()))
    });
    g.finish();
}

fn image(c: &mut Criterion) {
    let data = frame();
    let input = ImageInput {
        width: W,
        height: H,
        channels: 4,
        sample_range: SampleRange::Byte,
        data: ImageData::U8(&data),
    };
    let mut g = c.benchmark_group("image 3840x2160 rgba columnar");
    g.sample_size(10);
    for patch in [8u32, 1] {
        let pipeline = ImageCarrierPipeline::new(54, vec![3, 54], patch).unwrap();
        let cells = u64::from(W.div_ceil(patch) * H.div_ceil(patch) * 4);
        g.throughput(Throughput::Elements(cells));
        let mut out = ImageColumns::default();
        g.bench_function(format!("patch {patch} ({cells} cells)"), |b| {
            b.iter(|| {
                pipeline
                    .analyze_columnar_into(black_box(&input), &mut out)
                    .unwrap();
                black_box(out.readings.len())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, medium, image);
criterion_main!(benches);
