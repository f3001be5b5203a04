use super::*;
use crate::kv::KvType;
use knot::{DType, FfnActivation, ModelConfig, RopeStyle};

fn gemma_like() -> ModelConfig {
    ModelConfig {
        n_layers: 1,
        dim: 8,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 4,
        ffn_dim: 8,
        vocab_size: 4,
        context_length: 16,
        rope_theta: 1e6,
        rope_style: RopeStyle::Neox,
        rope_dim: 4,
        norm_eps: 1e-6,
        tie_word_embeddings: true,
        bos_id: None,
        eos_ids: vec![],
        pad_id: None,
        add_bos: false,
        qkv_bias: true,
        qk_norm: true,
        sandwich_norms: true,
        scale_embeddings: true,
        ffn_activation: FfnActivation::GeluTanh,
        query_pre_attn_scalar: Some(4.0),
        sliding_window: Some(2),
        sliding_window_pattern: 6,
        rope_theta_local: Some(1e4),
    }
}

#[test]
fn a_layer_range_session_checks_its_range_and_its_input() {
    let cfg = ModelConfig {
        n_layers: 3,
        ..gemma_like()
    };
    for bad in [0..0, 2..4, 3..3] {
        assert!(matches!(
            Session::for_layers(&cfg, bad, 8, KvType::F32),
            Err(EngineError::BadConfig(_))
        ));
    }
    let mut s = Session::for_layers(&cfg, 1..2, 8, KvType::F32).unwrap();
    assert_eq!(s.layers(), 1..2);
    assert!(matches!(s.begin_hidden(&[]), Err(EngineError::EmptyBatch)));
    assert!(matches!(
        s.begin_hidden(&[0.0; 12]),
        Err(EngineError::HiddenShape { got: 12, dim: 8 })
    ));
    assert!(matches!(s.finish_hidden(), Err(EngineError::EmptyBatch)));
    s.begin_hidden(&[0.5; 16]).unwrap();
    // Layer 1 has not run: the batch cannot leave yet, nor could it end the model.
    assert!(matches!(
        s.finish_hidden(),
        Err(EngineError::LayerOrder {
            expected: 1,
            got: 2
        })
    ));
    assert!(s.abort_batch());
    assert_eq!(s.position(), 0);
    // A cache of another range's shape is refused.
    let mut other = Session::for_layers(&cfg, 0..2, 8, KvType::F32)
        .unwrap()
        .new_kv();
    assert!(matches!(
        s.swap_kv(&mut other),
        Err(EngineError::BadConfig(_))
    ));
}

#[test]
fn bad_window_and_query_scale_are_config_errors() {
    for bad in [
        ModelConfig {
            sliding_window: Some(0),
            ..gemma_like()
        },
        ModelConfig {
            query_pre_attn_scalar: Some(0.0),
            ..gemma_like()
        },
        ModelConfig {
            query_pre_attn_scalar: Some(f32::NAN),
            ..gemma_like()
        },
    ] {
        assert!(matches!(bad.validate(), Err(EngineError::BadConfig(_))));
        assert!(Session::new(&bad, 8).is_err());
    }
    gemma_like().validate().unwrap();
}

#[test]
fn non_finite_and_out_of_range_floats_are_config_errors() {
    let inf = f32::INFINITY;
    for (bad, field) in [
        // JSON `1e300` reads as an f32 infinity.
        (
            ModelConfig {
                norm_eps: inf,
                ..gemma_like()
            },
            "norm_eps",
        ),
        (
            ModelConfig {
                norm_eps: 1e30,
                ..gemma_like()
            },
            "norm_eps",
        ),
        (
            ModelConfig {
                norm_eps: -1e-6,
                ..gemma_like()
            },
            "norm_eps",
        ),
        (
            ModelConfig {
                norm_eps: f32::NAN,
                ..gemma_like()
            },
            "norm_eps",
        ),
        (
            ModelConfig {
                rope_theta: inf,
                ..gemma_like()
            },
            "rope_theta",
        ),
        (
            ModelConfig {
                rope_theta: f32::NAN,
                ..gemma_like()
            },
            "rope_theta",
        ),
        (
            ModelConfig {
                rope_theta: 0.0,
                ..gemma_like()
            },
            "rope_theta",
        ),
        (
            ModelConfig {
                rope_theta: -1e4,
                ..gemma_like()
            },
            "rope_theta",
        ),
        (
            ModelConfig {
                rope_theta_local: Some(inf),
                ..gemma_like()
            },
            "rope_theta_local",
        ),
        (
            ModelConfig {
                rope_theta_local: Some(0.5),
                ..gemma_like()
            },
            "rope_theta_local",
        ),
        (
            ModelConfig {
                query_pre_attn_scalar: Some(inf),
                ..gemma_like()
            },
            "query_pre_attn_scalar",
        ),
        (
            ModelConfig {
                query_pre_attn_scalar: Some(1e-30),
                ..gemma_like()
            },
            "query_pre_attn_scalar",
        ),
    ] {
        match bad.validate() {
            Err(EngineError::BadConfig(m)) => assert!(m.starts_with(field), "{m}"),
            other => panic!("{field}: {other:?}"),
        }
        assert!(Session::new(&bad, 8).is_err());
    }
    // The edges of the ranges are fine.
    ModelConfig {
        norm_eps: 0.0,
        rope_theta: 1.0,
        ..gemma_like()
    }
    .validate()
    .unwrap();
}

#[test]
fn a_kv_cache_beyond_the_address_space_is_refused_up_front() {
    // Every size within its cap, but the context the file claims (and the caller asks for)
    // times the per-position KV bytes cannot be addressed.
    let cfg = ModelConfig {
        n_layers: MAX_LAYERS,
        n_heads: 16,
        n_kv_heads: 16,
        head_dim: MAX_HEAD_DIM,
        rope_dim: MAX_HEAD_DIM,
        context_length: usize::MAX,
        ..gemma_like()
    };
    cfg.validate().unwrap();
    match Session::new(&cfg, usize::MAX) {
        Err(EngineError::TooLarge { what, bytes }) => {
            assert_eq!(what, "the KV cache");
            assert!(bytes > usize::MAX as u128);
        }
        other => panic!("{:?}", other.err()),
    }
    // A context the platform can hold opens (wasm32 included: 4 × 64 Ki × 8 bytes).
    Session::new(&ModelConfig { n_layers: 1, ..cfg }, 4).unwrap();
}

#[test]
fn huge_sizes_are_config_errors_not_overflows() {
    for bad in [
        // × head_dim 4 wraps to 4 (2^62 + 1 on 64 bits, 2^30 + 1 on wasm32).
        ModelConfig {
            n_heads: usize::MAX / 4 + 1,
            ..gemma_like()
        },
        ModelConfig {
            n_heads: (1 << 30) + 1,
            ..gemma_like()
        },
        ModelConfig {
            head_dim: usize::MAX / 2,
            rope_dim: usize::MAX / 2 - 1,
            ..gemma_like()
        },
        ModelConfig {
            ffn_dim: 1 << 30,
            ..gemma_like()
        },
        ModelConfig {
            vocab_size: usize::MAX,
            ..gemma_like()
        },
        ModelConfig {
            n_layers: usize::MAX / 2,
            ..gemma_like()
        },
        ModelConfig {
            dim: 1 << 31,
            ..gemma_like()
        },
    ] {
        match bad.validate() {
            Err(EngineError::BadConfig(m)) => assert!(m.contains("supported maximum"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(Session::new(&bad, 8).is_err());
        // The derived sizes saturate rather than wrap before validation.
        assert!(bad.q_dim() >= bad.n_heads.min(bad.head_dim));
    }
}

#[test]
fn every_switched_on_tensor_is_required() {
    let cfg = gemma_like();
    let (dim, q, kv, hd, ffn) = (8u64, 8u64, 4u64, 4u64, 8u64);
    let shapes: Vec<(&str, Vec<u64>)> = vec![
        ("attn_norm.weight", vec![dim]),
        ("attn_q.weight", vec![q, dim]),
        ("attn_k.weight", vec![kv, dim]),
        ("attn_v.weight", vec![kv, dim]),
        ("attn_output.weight", vec![dim, q]),
        ("ffn_norm.weight", vec![dim]),
        ("ffn_gate.weight", vec![ffn, dim]),
        ("ffn_up.weight", vec![ffn, dim]),
        ("ffn_down.weight", vec![dim, ffn]),
        ("attn_q.bias", vec![q]),
        ("attn_k.bias", vec![kv]),
        ("attn_v.bias", vec![kv]),
        ("attn_q_norm.weight", vec![hd]),
        ("attn_k_norm.weight", vec![hd]),
        ("post_attention_norm.weight", vec![dim]),
        ("post_ffw_norm.weight", vec![dim]),
    ];
    let data = vec![0u8; 4 * 64];
    let names: Vec<String> = shapes.iter().map(|(n, _)| format!("blk.0.{n}")).collect();
    let lookup = |skip: Option<String>| {
        let (names, shapes, data) = (&names, &shapes, &data);
        move |name: &str| {
            if skip.as_deref() == Some(name) {
                return None;
            }
            let i = names.iter().position(|n| n == name)?;
            let shape = &shapes[i].1;
            let n = shape.iter().product::<u64>() as usize;
            Some(TensorRef {
                dtype: DType::F32,
                shape: shape.as_slice(),
                data: &data[..4 * n],
            })
        }
    };
    LayerWeights::load(&cfg, 0, &lookup(None)).unwrap();
    for name in &names[9..] {
        match LayerWeights::load(&cfg, 0, &lookup(Some(name.clone()))) {
            Err(EngineError::MissingTensor(n)) => assert_eq!(&n, name),
            other => panic!("{name}: {:?}", other.err()),
        }
    }
    // A llama config does not ask for them.
    let llama = ModelConfig {
        qkv_bias: false,
        qk_norm: false,
        sandwich_norms: false,
        ..cfg
    };
    let w =
        LayerWeights::load(&llama, 0, &lookup(Some("blk.0.attn_q_norm.weight".into()))).unwrap();
    assert!(w.attn_qk_norm.is_none() && w.attn_qkv_bias.is_none());
}

#[test]
fn a_joint_batch_needs_begun_sessions_of_one_model() {
    let cfg = gemma_like();
    let mut joint = Joint::new(&cfg);
    assert!(matches!(joint.prepare(&[]), Err(EngineError::EmptyBatch)));
    let mut a = Session::new(&cfg, 8).unwrap();
    assert!(matches!(
        joint.prepare(&[&mut a]),
        Err(EngineError::EmptyBatch)
    ));
    a.begin_hidden(&[0.5; 8]).unwrap();
    let other = ModelConfig {
        n_layers: 2,
        ..gemma_like()
    };
    let mut b = Session::new(&other, 8).unwrap();
    b.begin_hidden(&[0.5; 8]).unwrap();
    assert!(matches!(
        joint.prepare(&[&mut a, &mut b]),
        Err(EngineError::BadConfig(_))
    ));
    let mut c = Session::new(&cfg, 8).unwrap();
    c.begin_hidden(&[0.25; 16]).unwrap();
    joint.prepare(&[&mut a, &mut c]).unwrap();
    // A session that has not been through the layers cannot end with logits.
    let bytes = vec![0u8; cfg.vocab_size * cfg.dim * 4];
    let table = crate::quant::QMatrix::new(DType::F32, cfg.vocab_size, cfg.dim, &bytes).unwrap();
    let norm = crate::quant::QMatrix::new(DType::F32, 1, cfg.dim, &bytes[..cfg.dim * 4]).unwrap();
    let w = ResidentWeights {
        token_embd: table,
        output_norm: norm,
        output: table,
    };
    let want = [LogitRows::Last, LogitRows::None];
    assert!(matches!(
        joint.finish(&mut [&mut a, &mut c], &want, &w),
        Err(EngineError::LayerOrder { .. })
    ));
    assert!(matches!(
        joint.finish(&mut [&mut a, &mut c], &want[..1], &w),
        Err(EngineError::BadConfig(_))
    ));
}
