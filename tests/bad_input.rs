//! Bad input against the real pipeline: corrupted and truncated knot files, and bad requests to
//! the engine. Nothing may panic (in wasm a panic kills the instance); each case must surface as a
//! typed error. Runs natively and under wasm32.

use engine::{EngineError, Session};
use knot::{Knot, KnotError};
use knot_suite::{fixture, KnotFile};

fn tiny() -> Vec<u8> {
    std::fs::read(fixture("tiny/llama-f32.knot")).unwrap()
}

/// Walks a (possibly corrupted) file as far as it validates: parse, load, one forward step.
fn try_run(bytes: &[u8]) -> Result<(), String> {
    let knot = Knot::from_bytes(bytes).map_err(|e| e.to_string())?;
    engine::model::check_architecture(&knot.meta.architecture).map_err(|e| e.to_string())?;
    let src = engine::model::knot_tensors(&knot, bytes);
    let model = engine::Model::load(&knot.meta.config, &src).map_err(|e| e.to_string())?;
    let mut s = Session::new(&model.config, 4).map_err(|e| e.to_string())?;
    model
        .forward(&mut s, &[1, 2], false)
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[test]
fn every_truncation_of_the_prefix_is_a_truncated_error() {
    let bytes = tiny();
    let knot = Knot::from_bytes(&bytes).unwrap();
    let prefix = knot.payload_offset as usize;
    for len in 0..prefix {
        match Knot::from_bytes(&bytes[..len]) {
            Err(KnotError::Truncated { .. }) => {}
            other => panic!("length {len}: expected Truncated, got {other:?}"),
        }
    }
    // Cutting into the payload: tensors past the end of the file.
    for len in [prefix + 1, bytes.len() / 2, bytes.len() - 1] {
        assert!(Knot::from_bytes(&bytes[..len]).is_err(), "length {len}");
    }
}

#[test]
fn bit_flips_in_header_and_metadata_never_panic() {
    let bytes = tiny();
    let prefix = Knot::from_bytes(&bytes).unwrap().payload_offset as usize;
    let (mut rejected, mut accepted) = (0, 0);
    // Every byte of the prefix, three different bits each.
    for pos in 0..prefix {
        for bit in [0u8, 3, 6] {
            let mut b = bytes.clone();
            b[pos] ^= 1 << bit;
            match try_run(&b) {
                Ok(()) => accepted += 1,
                Err(_) => rejected += 1,
            }
        }
    }
    // Most flips break the header or the JSON; flips inside a name or a float may still run.
    assert!(
        rejected > accepted,
        "rejected {rejected}, accepted {accepted}"
    );
}

#[test]
fn specific_header_corruptions_give_specific_errors() {
    let bytes = tiny();
    let mut b = bytes.clone();
    b[0] = b'X';
    assert!(matches!(Knot::from_bytes(&b), Err(KnotError::BadMagic(_))));
    let mut b = bytes.clone();
    b[4] = 9;
    assert!(matches!(
        Knot::from_bytes(&b),
        Err(KnotError::UnsupportedVersion(9))
    ));
    let mut b = bytes.clone();
    b[6..10].copy_from_slice(&0u32.to_le_bytes());
    assert!(matches!(
        Knot::from_bytes(&b),
        Err(KnotError::EmptyMetadata)
    ));
    let mut b = bytes.clone();
    b[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        Knot::from_bytes(&b),
        Err(KnotError::MetadataTooLong { .. })
    ));
    let knot = Knot::from_bytes(&bytes).unwrap();
    let mut b = bytes.clone();
    b[knot.payload_offset as usize - 1] = 7; // the codec byte
    assert!(matches!(
        Knot::from_bytes(&b),
        Err(KnotError::UnsupportedCodec(7))
    ));
}

#[test]
fn engine_rejects_bad_requests_with_typed_errors() {
    let file = KnotFile::read(&fixture("tiny/llama-f32.knot"));
    let model = file.model();
    let vocab = model.config.vocab_size as u32;
    let mut s = Session::new(&model.config, 8).unwrap();
    assert!(matches!(
        model.forward(&mut s, &[1, vocab], false),
        Err(EngineError::TokenOutOfRange { id, .. }) if id == vocab
    ));
    assert!(matches!(
        model.forward(&mut s, &[], false),
        Err(EngineError::EmptyBatch)
    ));
    // The failed calls left the session usable.
    assert_eq!(s.position(), 0);
    model
        .forward(&mut s, &[1, 2, 3, 4, 5, 6, 7, 8], false)
        .unwrap();
    assert!(matches!(
        model.forward(&mut s, &[1], false),
        Err(EngineError::ContextFull { needed: 9, max: 8 })
    ));
    // Layers must run in order; finishing early is an error, not garbage.
    s.reset();
    s.begin(&[1], &model.resident).unwrap();
    assert!(matches!(
        s.run_layer(1, &model.layers[1]),
        Err(EngineError::LayerOrder { .. })
    ));
    assert!(matches!(
        s.finish(&model.resident, false),
        Err(EngineError::LayerOrder { .. })
    ));
    // Rewinds go back, between batches, and forget exactly the positions past the target.
    assert!(matches!(
        s.rewind(0),
        Err(EngineError::Rewind { to: 0, .. })
    ));
    s.abort_batch();
    model.forward(&mut s, &[1, 2, 3, 4], false).unwrap();
    assert!(matches!(
        s.rewind(5),
        Err(EngineError::Rewind { to: 5, held: 4, .. })
    ));
    s.rewind(2).unwrap();
    assert_eq!(s.position(), 2);
    let again = model.forward(&mut s, &[5], false).unwrap().to_vec();
    let mut fresh = Session::new(&model.config, 8).unwrap();
    let want = model.forward(&mut fresh, &[1, 2, 5], false).unwrap();
    assert_eq!(again, want);
}

#[test]
fn unknown_architecture_is_named() {
    let err = engine::model::check_architecture("mamba").unwrap_err();
    assert_eq!(err.to_string(), "unsupported architecture \"mamba\"");
}
