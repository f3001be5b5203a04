//! The reader against crafted files, valid and broken (written by `write.rs`).

use std::io::Cursor;

use knot::DType;

use super::write::*;
use super::*;

fn tiny() -> Vec<u8> {
    file(
        &[
            ("general.architecture", GgufValue::String("llama".into())),
            ("a.u8", GgufValue::U8(7)),
            ("a.i8", GgufValue::I8(-7)),
            ("a.u16", GgufValue::U16(700)),
            ("a.i16", GgufValue::I16(-700)),
            ("a.u32", GgufValue::U32(70000)),
            ("a.i32", GgufValue::I32(-70000)),
            ("a.f32", GgufValue::F32(1.5)),
            ("a.bool", GgufValue::Bool(true)),
            ("a.u64", GgufValue::U64(1 << 40)),
            ("a.i64", GgufValue::I64(-(1 << 40))),
            ("a.f64", GgufValue::F64(2.25)),
            (
                "a.arr",
                GgufValue::array(vec![
                    GgufValue::String("x".into()),
                    GgufValue::String("yz".into()),
                ])
                .unwrap(),
            ),
            (
                "a.nested",
                GgufValue::array(vec![GgufValue::array(vec![
                    GgufValue::I32(1),
                    GgufValue::I32(2),
                ])
                .unwrap()])
                .unwrap(),
            ),
            (
                "a.bytes",
                GgufValue::Array(GgufArray::U8((0..=255).collect())),
            ),
            (
                "a.bools",
                GgufValue::Array(GgufArray::Bool(vec![true, false])),
            ),
            (
                "a.f64s",
                GgufValue::Array(GgufArray::F64(vec![-1.5, 1e300])),
            ),
        ],
        &[
            RawTensor {
                name: "a".into(),
                dims: vec![3, 2],
                type_id: 0,
                data: (0..24).collect(),
            },
            RawTensor {
                name: "b".into(),
                dims: vec![32],
                type_id: 8,
                data: vec![9; 34],
            },
        ],
    )
}

#[test]
fn reads_every_value_type_and_tensor_table() {
    let bytes = tiny();
    let mut cur = Cursor::new(&bytes);
    let g = GgufFile::read(&mut cur).unwrap();
    assert_eq!(g.version, 3);
    assert_eq!(g.alignment, 32);
    assert_eq!(g.data_offset % 32, 0);
    assert_eq!(
        g.get("general.architecture").unwrap().as_str(),
        Some("llama")
    );
    assert_eq!(g.get("a.u8").unwrap().as_u64(), Some(7));
    assert_eq!(g.get("a.i8").unwrap().as_i64(), Some(-7));
    assert_eq!(g.get("a.i8").unwrap().as_u64(), None);
    assert_eq!(g.get("a.u16").unwrap(), &GgufValue::U16(700));
    assert_eq!(g.get("a.i16").unwrap(), &GgufValue::I16(-700));
    assert_eq!(g.get("a.u32").unwrap().as_u64(), Some(70000));
    assert_eq!(g.get("a.i32").unwrap().as_i64(), Some(-70000));
    assert_eq!(g.get("a.f32").unwrap().as_f32(), Some(1.5));
    assert_eq!(g.get("a.bool").unwrap().as_bool(), Some(true));
    assert_eq!(g.get("a.u64").unwrap().as_u64(), Some(1 << 40));
    assert_eq!(g.get("a.i64").unwrap().as_i64(), Some(-(1 << 40)));
    assert_eq!(g.get("a.f64").unwrap().as_f32(), Some(2.25));
    let arr = g.get("a.arr").unwrap().as_array().unwrap();
    assert_eq!(arr.get(1).unwrap().as_str(), Some("yz"));
    assert_eq!(arr.as_strings().unwrap(), ["x", "yz"]);
    let nested = g.get("a.nested").unwrap().as_array().unwrap();
    assert_eq!(
        nested.get(0).unwrap().as_array().unwrap().get(1),
        Some(GgufValue::I32(2))
    );
    // Arrays are stored as vectors of their element type.
    assert_eq!(
        g.get("a.bytes").unwrap(),
        &GgufValue::Array(GgufArray::U8((0..=255).collect()))
    );
    let bools = g.get("a.bools").unwrap().as_array().unwrap();
    assert_eq!(
        bools.iter().collect::<Vec<_>>(),
        [GgufValue::Bool(true), GgufValue::Bool(false)]
    );
    let f64s = g.get("a.f64s").unwrap().as_array().unwrap();
    assert_eq!((f64s.len(), f64s.get(1)), (2, Some(GgufValue::F64(1e300))));

    let a = g.tensor("a").unwrap();
    assert_eq!((a.dtype, a.shape(), a.size), (DType::F32, vec![2, 3], 24));
    let b = g.tensor("b").unwrap();
    assert_eq!((b.dtype, b.size, b.offset), (DType::Q8_0, 34, 32));
    assert_eq!(
        g.read_tensor(&mut cur, a).unwrap(),
        (0..24).collect::<Vec<u8>>()
    );
    assert_eq!(g.read_tensor(&mut cur, b).unwrap(), vec![9; 34]);
}

fn err(bytes: Vec<u8>) -> GgufError {
    GgufFile::read(&mut Cursor::new(bytes)).unwrap_err()
}

#[test]
fn rejects_bad_magic() {
    let mut b = tiny();
    b[..4].copy_from_slice(b"GGML");
    assert!(matches!(err(b), GgufError::BadMagic(m) if &m == b"GGML"));
}

#[test]
fn rejects_version_1_and_4() {
    for v in [1u32, 4] {
        let mut b = tiny();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        assert!(matches!(err(b), GgufError::UnsupportedVersion(x) if x == v));
    }
    let mut b = tiny();
    b[4..8].copy_from_slice(&2u32.to_le_bytes());
    assert!(GgufFile::read(&mut Cursor::new(b)).is_ok());
}

#[test]
fn rejects_truncation_everywhere_in_the_header() {
    let b = tiny();
    let g = GgufFile::read(&mut Cursor::new(&b)).unwrap();
    // Every cut inside the header/tables is a Truncated error, never a panic.
    for cut in 0..g.data_offset as usize - 32 {
        let e = err(b[..cut].to_vec());
        assert!(
            matches!(
                e,
                GgufError::Truncated(_) | GgufError::TensorBeyondEof { .. }
            ),
            "cut {cut}: {e:?}"
        );
    }
}

#[test]
fn caps_counts_and_lengths_before_allocating() {
    let mut b = tiny();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(err(b), GgufError::TooMany { what: "tensor", .. }));
    let mut b = tiny();
    b[16..24].copy_from_slice(&(1u64 << 62).to_le_bytes());
    assert!(matches!(
        err(b),
        GgufError::TooMany {
            what: "metadata key-value",
            ..
        }
    ));
    // First key's length.
    let mut b = tiny();
    b[24..32].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
    assert!(matches!(err(b), GgufError::StringTooLong { .. }));
    // A string within the cap but beyond the end of the file.
    let mut b = tiny();
    b[24..32].copy_from_slice(&(1u64 << 20).to_le_bytes());
    assert!(matches!(err(b), GgufError::Truncated(_)));
    let huge_array = file(&[("x", GgufValue::Array(GgufArray::U8(vec![1])))], &[]);
    let mut b = huge_array;
    // Array length sits after key (8+1), value type (4), element type (4).
    let at = 24 + 9 + 4 + 4;
    b[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(
        err(b),
        GgufError::TooMany {
            what: "array element",
            ..
        }
    ));
}

#[test]
fn rejects_unknown_tensor_type() {
    let b = file(
        &[],
        &[RawTensor {
            name: "q2k".into(),
            dims: vec![256],
            type_id: 10,
            data: vec![0; 84],
        }],
    );
    assert!(matches!(
        err(b),
        GgufError::UnknownGgmlType { type_id: 10, .. }
    ));
}

#[test]
fn rejects_unknown_value_type_and_bad_bool() {
    let mut b = file(&[("k", GgufValue::U8(1))], &[]);
    b[24 + 9..24 + 13].copy_from_slice(&99u32.to_le_bytes());
    assert!(matches!(err(b), GgufError::UnknownValueType(99)));
    let mut b = file(&[("k", GgufValue::Bool(true))], &[]);
    b[24 + 13] = 2;
    assert!(matches!(err(b), GgufError::BadBool(2)));
}

#[test]
fn rejects_tensor_data_beyond_eof() {
    let mut b = tiny();
    b.truncate(b.len() - 1);
    assert!(matches!(err(b), GgufError::TensorBeyondEof { ref tensor, .. } if tensor == "b"));
}

#[test]
fn rejects_bad_shapes_and_alignment() {
    let b = file(
        &[],
        &[RawTensor {
            name: "q".into(),
            dims: vec![16, 2],
            type_id: 8,
            data: vec![0; 34],
        }],
    );
    assert!(matches!(err(b), GgufError::InvalidShape { .. }));
    let b = file(
        &[],
        &[RawTensor {
            name: "big".into(),
            dims: vec![1 << 32, 1 << 32, 1 << 32],
            type_id: 0,
            data: vec![],
        }],
    );
    assert!(matches!(err(b), GgufError::InvalidShape { .. }));
    let b = file(
        &[],
        &[RawTensor {
            name: "five".into(),
            dims: vec![1, 1, 1, 1, 1],
            type_id: 0,
            data: vec![0; 4],
        }],
    );
    assert!(matches!(err(b), GgufError::TooManyDims { n_dims: 5, .. }));
    let b = file(&[("general.alignment", GgufValue::U32(24))], &[]);
    assert!(matches!(err(b), GgufError::BadAlignment(24)));
    let b = file(&[("k", GgufValue::U8(1)), ("k", GgufValue::U8(2))], &[]);
    assert!(matches!(err(b), GgufError::DuplicateKey(_)));
}

#[test]
fn rejects_misaligned_tensor_offset() {
    let mut b = file(
        &[],
        &[RawTensor {
            name: "a".into(),
            dims: vec![8],
            type_id: 0,
            data: vec![0; 32],
        }],
    );
    // Header 24, name 8+1, n_dims 4, dims 8, type 4: the offset field is at 49.
    assert_eq!(&b[49..57], &[0; 8]);
    b[49] = 4;
    assert!(matches!(
        err(b),
        GgufError::Misaligned {
            offset: 4,
            alignment: 32,
            ..
        }
    ));
}

#[test]
fn rejects_tensors_sharing_data() {
    let tensor = |name: &str| RawTensor {
        name: name.into(),
        dims: vec![8],
        type_id: 0,
        data: vec![1; 32],
    };
    let good = file(&[], &[tensor("first"), tensor("second"), tensor("third")]);
    GgufFile::read(&mut Cursor::new(&good)).unwrap();
    // The offset field of `second`: after its name, n_dims (4), one dim (8) and type (4).
    let at = good.windows(6).position(|w| w == b"second").unwrap() + 6 + 4 + 8 + 4;
    assert_eq!(&good[at..at + 8], &32u64.to_le_bytes());
    for (offset, first, second) in [(0u64, "first", "second"), (64, "second", "third")] {
        // Aliasing a whole tensor, or a part of it (the next one starts at 64).
        let mut b = good.clone();
        b[at..at + 8].copy_from_slice(&offset.to_le_bytes());
        match err(b) {
            GgufError::Overlap {
                first: f,
                second: s,
            } => {
                assert_eq!((f.as_str(), s.as_str()), (first, second))
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn custom_alignment_moves_the_data_section() {
    let b = file(&[("general.alignment", GgufValue::U32(64))], &[]);
    let g = GgufFile::read(&mut Cursor::new(b)).unwrap();
    assert_eq!(g.alignment, 64);
    assert_eq!(g.data_offset % 64, 0);
}
