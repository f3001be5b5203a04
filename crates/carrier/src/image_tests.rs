use super::*;
use crate::medium::{source_position, CarrierMediumPipeline, Cell};
use crate::CarrierError;

fn gray(width: u32, height: u32, data: &[f32]) -> ImageInput<'_> {
    ImageInput {
        width,
        height,
        channels: 1,
        sample_range: SampleRange::Unit,
        data: ImageData::F32(data),
    }
}

fn kinds(cell: &PatchCell) -> Vec<&'static str> {
    cell.readings.iter().map(|r| r.reading.as_str()).collect()
}

#[test]
fn seed_two_by_one_example() {
    let p = ImageCarrierPipeline::new(54, vec![3, 54], 1).unwrap();
    // As JS builds it: a Float32Array, so the values are f32 roundings of 2/54 and 53/54.
    let data = [2.0f32 / 54.0, 53.0 / 54.0];
    let a = p.analyze(&gray(2, 1, &data)).unwrap();
    assert_eq!(a.patches.len(), 2);
    assert_eq!(kinds(&a.patches[0]), ["evolution", "resolution"]);
    assert_eq!(kinds(&a.patches[1]), ["evolution", "resolution"]);
    assert_eq!(a.patches[0].source_position, 2);
    assert_eq!(a.patches[1].source_position, 53);
    assert_eq!(a.patches[1].readings[0].copy_index, 17);
    assert_eq!(a.patches[1].readings[0].fiber_size, 18);
    let p1 = &a.patches[1];
    assert_eq!(
        (p1.x, p1.y, p1.width, p1.height, p1.channel),
        (1, 0, 1, 1, 0)
    );
    assert!(!p1.partial);

    let v = serde_json::to_value(&a).unwrap();
    assert_eq!(v["patches"][0]["readings"][0]["reading"], "evolution");
    assert_eq!(v["patches"][0]["readings"][1]["reading"], "resolution");
    assert_eq!(v["patchesX"], 2);
}

#[test]
fn image_cells_read_like_medium_cells() {
    // The same unit values through both pipelines give the same readings.
    let values: Vec<f32> = (0..=54).map(|i| i as f32 / 54.0).collect();
    let img = ImageCarrierPipeline::new(54, vec![3, 5, 7, 54], 1).unwrap();
    let a = img.analyze(&gray(55, 1, &values)).unwrap();
    let med = CarrierMediumPipeline::new(54, vec![3, 5, 7, 54]).unwrap();
    let cells: Vec<Cell> = (0..=54)
        .map(|i| Cell::new(format!("c{i}"), i as f64 / 54.0))
        .collect();
    let m = med.analyze(&cells).unwrap();
    for (pc, mc) in a.patches.iter().zip(&m.cells) {
        assert_eq!(pc.source_position, mc.source_position, "{}", mc.id);
        assert_eq!(pc.readings, mc.readings);
    }
}

#[test]
fn f32_boundaries_snap_for_every_i_over_s() {
    // f32 samples of i/S land on position i (S − 1 for i = S) for every S up to 4096 that we
    // can afford in a test; the unit range, a byte range and a shifted range.
    for s in (1..=4096u32).step_by(7).chain([54, 255, 256, 1000, 4096]) {
        let values: Vec<f32> = (0..=s).map(|i| i as f32 / s as f32).collect();
        let p = ImageCarrierPipeline::new(s, vec![1], 1).unwrap();
        let cols = p.analyze_columnar(&gray(s + 1, 1, &values)).unwrap();
        for (i, &k) in cols.source_positions.iter().enumerate() {
            assert_eq!(k, (i as u32).min(s - 1), "{i}/{s}");
        }
        let shifted: Vec<f32> = (0..=s).map(|i| -1.0 + 2.0 * i as f32 / s as f32).collect();
        let mut img = gray(s + 1, 1, &shifted);
        img.sample_range = SampleRange::Range { lo: -1.0, hi: 1.0 };
        let cols = p.analyze_columnar(&img).unwrap();
        for (i, &k) in cols.source_positions.iter().enumerate() {
            assert_eq!(k, (i as u32).min(s - 1), "shifted {i}/{s}");
        }
    }
}

#[test]
fn byte_images_match_the_f64_rule() {
    let bytes: Vec<u8> = (0..=255).collect();
    for s in [3u32, 5, 51, 54, 85, 255, 256, 1000] {
        let p = ImageCarrierPipeline::new(s, vec![3], 1).unwrap();
        let img = ImageInput {
            width: 256,
            height: 1,
            channels: 1,
            sample_range: SampleRange::Byte,
            data: ImageData::U8(&bytes),
        };
        let cols = p.analyze_columnar(&img).unwrap();
        for (v, &k) in cols.source_positions.iter().enumerate() {
            // Exact: floor(v·S/255), S−1 at v = 255.
            let want = ((v as u64 * u64::from(s)) / 255).min(u64::from(s) - 1) as u32;
            assert_eq!(k, want, "{v}/255 at S={s}");
            assert_eq!(Some(k), source_position(v as f64 / 255.0, s));
        }
    }
}

#[test]
fn partial_edge_patches() {
    // 5×3 image, patch 2: 3×2 patches, the last column 1 wide and the last row 1 tall.
    let data: Vec<f32> = (0..15).map(|i| i as f32 / 14.0).collect();
    let p = ImageCarrierPipeline::new(54, vec![3], 2).unwrap();
    let a = p.analyze(&gray(5, 3, &data)).unwrap();
    assert_eq!((a.grid.patches_x, a.grid.patches_y), (3, 2));
    let rects: Vec<_> = a
        .patches
        .iter()
        .map(|c| (c.x, c.y, c.width, c.height, c.partial))
        .collect();
    assert_eq!(
        rects,
        [
            (0, 0, 2, 2, false),
            (2, 0, 2, 2, false),
            (4, 0, 1, 2, true),
            (0, 2, 2, 1, true),
            (2, 2, 2, 1, true),
            (4, 2, 1, 1, true),
        ]
    );
    // Means over exactly the pixels inside each patch.
    let mean =
        |idx: &[usize]| idx.iter().map(|&i| f64::from(data[i])).sum::<f64>() / idx.len() as f64;
    let want = [
        mean(&[0, 1, 5, 6]),
        mean(&[2, 3, 7, 8]),
        mean(&[4, 9]),
        mean(&[10, 11]),
        mean(&[12, 13]),
        mean(&[14]),
    ];
    for (c, w) in a.patches.iter().zip(want) {
        assert!((c.unit_value - w).abs() < 1e-12, "{} vs {w}", c.unit_value);
        assert_eq!(c.source_position, source_position(w, 54).unwrap());
    }
    assert_eq!(a.patches[5].source_position, 53);
}

#[test]
fn channels_are_separate_cells() {
    // 2×2 RGB, patch 2: one patch, three cells.
    let data: [u8; 12] = [0, 100, 255, 0, 100, 255, 0, 100, 255, 0, 100, 255];
    let p = ImageCarrierPipeline::new(255, vec![3, 255], 2).unwrap();
    let img = ImageInput {
        width: 2,
        height: 2,
        channels: 3,
        sample_range: SampleRange::Byte,
        data: ImageData::U8(&data),
    };
    let a = p.analyze(&img).unwrap();
    let ks: Vec<_> = a
        .patches
        .iter()
        .map(|c| (c.channel, c.source_position))
        .collect();
    assert_eq!(ks, [(0, 0), (1, 100), (2, 254)]);
    assert_eq!(a.patches[1].id, "patch-0-c1");
    let cols = p.analyze_columnar(&img).unwrap();
    assert_eq!(cols.cell_count, 3);
    assert_eq!(cols.source_positions, [0, 100, 254]);
    // Observer-major: observer 0's three cells, then observer 1's.
    assert_eq!(cols.observer_positions, [0, 1, 2, 0, 100, 254]);
    assert_eq!(cols.readings, [1, 0, 0, 1, 1, 1]);
}

#[test]
fn columnar_matches_objects() {
    let (w, h, ch) = (37u32, 23u32, 3u32);
    let mut state = 12345u32;
    let data: Vec<f32> = (0..w * h * ch)
        .map(|_| {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (state >> 8) as f32 / (1u32 << 24) as f32
        })
        .collect();
    let img = ImageInput {
        width: w,
        height: h,
        channels: ch,
        sample_range: SampleRange::Unit,
        data: ImageData::F32(&data),
    };
    for patch in [1, 4, 8, 40] {
        // A small carrier uses lookup tables, a huge one plain arithmetic: both must agree.
        for s in [54, 4096, u32::MAX] {
            let p = ImageCarrierPipeline::new(s, vec![3, 7, 54], patch).unwrap();
            let a = p.analyze(&img).unwrap();
            let mut cols = ImageColumns::default();
            p.analyze_columnar_into(&img, &mut cols).unwrap();
            assert_eq!(cols.cell_count, a.patches.len());
            for (i, cell) in a.patches.iter().enumerate() {
                assert_eq!(cols.source_positions[i], cell.source_position);
                for (o, r) in cell.readings.iter().enumerate() {
                    let j = o * cols.cell_count + i;
                    assert_eq!(cols.observer_positions[j], r.observer_position);
                    assert_eq!(cols.copy_indices[j], r.copy_index);
                    assert_eq!(ReadingKind::from_code(cols.readings[j]), r.reading);
                    assert_eq!(cols.reading(o, i), *r);
                }
            }
            // Reusing the buffers for a smaller image shrinks them to its size.
            p.analyze_columnar_into(&gray(1, 1, &[0.5]), &mut cols)
                .unwrap();
            assert_eq!(cols.cell_count, 1);
            assert_eq!(cols.readings.len(), 3);
        }
    }
}

#[test]
fn sample_range_parsing() {
    assert_eq!(SampleRange::parse("unit").unwrap(), SampleRange::Unit);
    assert_eq!(SampleRange::parse("byte").unwrap(), SampleRange::Byte);
    assert_eq!(
        SampleRange::parse("[-1, 1]").unwrap(),
        SampleRange::Range { lo: -1.0, hi: 1.0 }
    );
    assert!(matches!(
        SampleRange::parse("percent"),
        Err(CarrierError::UnknownSampleRange(_))
    ));
    for bad in ["1,1", "2,1", "nan,1", "0,inf"] {
        assert!(
            matches!(
                SampleRange::parse(bad),
                Err(CarrierError::BadSampleRange { .. })
            ),
            "{bad}"
        );
    }
    let r: SampleRange = serde_json::from_str("\"byte\"").unwrap();
    assert_eq!(r, SampleRange::Byte);
    let r: SampleRange = serde_json::from_str("[0, 4095]").unwrap();
    assert_eq!(
        r,
        SampleRange::Range {
            lo: 0.0,
            hi: 4095.0
        }
    );
    assert!(serde_json::from_str::<SampleRange>("[1, 0]").is_err());
    assert!(serde_json::from_str::<SampleRange>("\"bytes\"").is_err());
    assert_eq!(
        serde_json::to_string(&SampleRange::Unit).unwrap(),
        "\"unit\""
    );
}

#[test]
fn validation_errors() {
    assert_eq!(
        ImageCarrierPipeline::new(0, vec![3], 1)
            .unwrap_err()
            .to_string(),
        "carrierBandwidth must be an integer >= 1, got 0"
    );
    assert_eq!(
        ImageCarrierPipeline::new(54, vec![], 1).unwrap_err(),
        CarrierError::NoObservers
    );
    assert!(ImageCarrierPipeline::new(54, vec![0], 1)
        .unwrap_err()
        .to_string()
        .contains("observerBandwidths[0]"));
    assert_eq!(
        ImageCarrierPipeline::new(54, vec![3], 0).unwrap_err(),
        CarrierError::ZeroPatchSize
    );

    let p = ImageCarrierPipeline::new(54, vec![3], 2).unwrap();
    let data = [0.5f32; 6];
    let e = p.analyze(&gray(2, 2, &data)).unwrap_err();
    assert_eq!(
        e,
        CarrierError::DataLengthMismatch {
            expected: 4,
            actual: 6
        }
    );
    let e = p.analyze_columnar(&gray(0, 2, &data)).unwrap_err();
    assert_eq!(e, CarrierError::ZeroImageDimension { field: "width" });
    let mut img = gray(3, 2, &data);
    img.channels = 0;
    assert_eq!(
        p.analyze(&img).unwrap_err(),
        CarrierError::ZeroImageDimension { field: "channels" }
    );
    let mut img = gray(3, 2, &data);
    img.sample_range = SampleRange::Range { lo: 1.0, hi: 1.0 };
    assert!(matches!(
        p.analyze(&img),
        Err(CarrierError::BadSampleRange { .. })
    ));
    // Dimensions whose product overflows are a mismatch, not a panic.
    let img = ImageInput {
        width: u32::MAX,
        height: u32::MAX,
        channels: u32::MAX,
        ..gray(3, 2, &data)
    };
    assert!(matches!(
        p.analyze(&img),
        Err(CarrierError::DataLengthMismatch { .. })
    ));
}

#[test]
fn out_of_range_samples_name_patch_and_channel() {
    let p = ImageCarrierPipeline::new(54, vec![3], 2).unwrap();
    // 4×3 RGB, patch 2. Pixel (3, 2) channel 1 is bad: patch (1, 1) = patch 3.
    for (bad, problem) in [
        (f32::NAN, "not a finite number within"),
        (f32::INFINITY, "not a finite number within"),
        (-0.25, "below"),
        (1.5, "above"),
    ] {
        let mut data = vec![0.5f32; 4 * 3 * 3];
        data[(2 * 4 + 3) * 3 + 1] = bad;
        let img = ImageInput {
            width: 4,
            height: 3,
            channels: 3,
            sample_range: SampleRange::Unit,
            data: ImageData::F32(&data),
        };
        for e in [
            p.analyze(&img).unwrap_err(),
            p.analyze_columnar(&img).unwrap_err(),
        ] {
            match &e {
                CarrierError::SampleOutOfRange {
                    patch,
                    patch_x,
                    patch_y,
                    channel,
                    pixel_x,
                    pixel_y,
                    problem: pr,
                    ..
                } => {
                    assert_eq!((*patch, *patch_x, *patch_y, *channel), (3, 1, 1, 1));
                    assert_eq!((*pixel_x, *pixel_y), (3, 2));
                    assert_eq!(*pr, problem);
                }
                other => panic!("unexpected {other:?}"),
            }
            assert!(
                e.to_string().starts_with("patch 3 (x=1, y=1) channel 1:"),
                "{e}"
            );
        }
    }
    // Bytes outside a custom range.
    let bytes = [10u8, 20, 30, 40];
    let img = ImageInput {
        width: 4,
        height: 1,
        channels: 1,
        sample_range: SampleRange::Range { lo: 0.0, hi: 25.0 },
        data: ImageData::U8(&bytes),
    };
    let e = p.analyze_columnar(&img).unwrap_err();
    assert!(
        e.to_string().contains("sample 30 at pixel (2, 0) is above"),
        "{e}"
    );
}

#[test]
fn extreme_values_fill_the_carrier() {
    let data = [0.0f32, 1.0, 0.0, 1.0];
    let p = ImageCarrierPipeline::new(7, vec![2], 1).unwrap();
    let cols = p.analyze_columnar(&gray(2, 2, &data)).unwrap();
    assert_eq!(cols.source_positions, [0, 6, 0, 6]);
}
