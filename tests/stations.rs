//! A model split across stations computes what one process computes, bit for bit: layer
//! stations fed hidden states through the wire format, head stations each computing a slice of
//! the vocabulary, their answers folded by the gather. Checked on the real models (SmolLM2 on 2
//! and 4 layer stations with 2 head shards, Gemma-3-270M on 4 with 3), with two conversations
//! interleaved on the same stations, a rewind, and bad requests that must leave the stations
//! serving.

use engine::sampler::greedy;
use engine::{KvType, LmHead, Model, Session};
use host::station::gather::{fold, join_logits, vocab_slices, Answer, Folded};
use host::station::placement::layer_ranges;
use host::station::wire::{self, Elem, Hidden};
use host::station::{HeadStation, LayerStation, StationError};
use knot_suite::{require_model, KnotFile};

const MAX_CTX: usize = 96;
const MAX_BATCH: usize = 64;

struct Stations<'m, 'a> {
    model: &'m Model<'a>,
    layers: Vec<LayerStation>,
    heads: Vec<HeadStation>,
    slices: Vec<engine::quant::QMatrix<'a>>,
}

impl<'m, 'a> Stations<'m, 'a> {
    fn new(model: &'m Model<'a>, n_layer_stations: usize, n_heads: usize) -> Self {
        let cfg = &model.config;
        let layers = layer_ranges(cfg.n_layers, n_layer_stations)
            .unwrap()
            .into_iter()
            .map(|r| LayerStation::new(cfg, r, MAX_CTX, KvType::F32, MAX_BATCH, 4).unwrap())
            .collect();
        let ranges = vocab_slices(cfg.vocab_size, n_heads);
        let slices = ranges
            .iter()
            .map(|r| model.resident.output.rows_slice(r.clone()).unwrap())
            .collect();
        let heads = ranges
            .into_iter()
            .map(|r| HeadStation::new(r, cfg.dim, cfg.norm_eps, MAX_BATCH))
            .collect();
        Stations {
            model,
            layers,
            heads,
            slices,
        }
    }

    /// The coordinator's part: embed, hop through the layer stations, gather the head shards.
    fn step(&mut self, conversation: u64, pos: usize, ids: &[u32]) -> Vec<f32> {
        let cfg = &self.model.config;
        let mut values = vec![0.0f32; ids.len() * cfg.dim];
        for (row, &id) in values.chunks_exact_mut(cfg.dim).zip(ids) {
            engine::embed(cfg, &self.model.resident.token_embd, id as usize, row);
        }
        let h = Hidden {
            conversation,
            pos: pos as u32,
            dim: cfg.dim as u32,
            values,
        };
        let mut msg = wire::encode(&h, Elem::F32).unwrap();
        for station in &mut self.layers {
            let r = station.layers();
            msg = station.step(&msg, &self.model.layers[r]).unwrap();
        }
        let answers = self
            .heads
            .iter_mut()
            .zip(&self.slices)
            .map(|(head, output)| {
                let lm = LmHead {
                    output_norm: &self.model.resident.output_norm,
                    output,
                };
                match head.logits(&msg, &lm) {
                    Ok(l) => Answer::Value(l.to_vec()),
                    Err(e) => Answer::Failed(e.to_string()),
                }
            })
            .collect();
        let Folded::Accept(parts) = fold(answers) else {
            panic!("a head shard did not answer")
        };
        let slices: Vec<_> = self.heads.iter().map(HeadStation::slice).collect();
        join_logits(&slices, &parts).unwrap()
    }
}

/// Greedy decoding of `n` tokens after `prompt`, and the logits of every step.
fn decode_alone(model: &Model, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut s = Session::new(&model.config, MAX_CTX).unwrap();
    let mut logits = vec![model.forward(&mut s, prompt, false).unwrap().to_vec()];
    let mut ids = Vec::new();
    for _ in 0..n {
        let id = greedy(logits.last().unwrap()).unwrap();
        ids.push(id);
        logits.push(model.forward(&mut s, &[id], false).unwrap().to_vec());
    }
    (ids, logits)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn split_models_match_one_process_bit_for_bit() {
    for (name, splits) in [
        ("SmolLM2-135M-Instruct.Q4_1.knot", &[(2, 2), (4, 2)][..]),
        ("gemma-3-270m.knot", &[(4, 3)][..]),
    ] {
        let Some(path) = require_model(name) else {
            continue;
        };
        let file = KnotFile::read(&path);
        let model = file.model();
        let tok = file.tokenizer();
        let prompts = [
            tok.encode_with_bos("The capital of France is").unwrap(),
            tok.encode_with_bos("def fibonacci(n):").unwrap(),
        ];
        let n = 16;
        let alone: Vec<_> = prompts.iter().map(|p| decode_alone(&model, p, n)).collect();
        for &(layer_stations, head_shards) in splits {
            let mut st = Stations::new(&model, layer_stations, head_shards);
            // Two conversations on the same stations, interleaved step by step.
            let mut got: Vec<Vec<Vec<f32>>> = vec![vec![], vec![]];
            for (c, p) in prompts.iter().enumerate() {
                got[c].push(st.step(c as u64, 0, p));
            }
            for i in 0..n {
                for (c, p) in prompts.iter().enumerate() {
                    let id = greedy(got[c].last().unwrap()).unwrap();
                    got[c].push(st.step(c as u64, p.len() + i, &[id]));
                }
            }
            for (c, (ids, want)) in alone.iter().enumerate() {
                assert_eq!(got[c].len(), want.len());
                for (step, (g, w)) in got[c].iter().zip(want).enumerate() {
                    assert!(
                        same_bits(g, w),
                        "{name} on {layer_stations}+{head_shards} stations, conversation {c}: \
                         logits of step {step} differ from one process"
                    );
                }
                let split_ids: Vec<u32> = got[c][..n].iter().map(|l| greedy(l).unwrap()).collect();
                assert_eq!(&split_ids, ids, "{name}: greedy ids");
            }
            // Rewind every station to the middle of conversation 0 and decode again from there.
            let back = prompts[0].len() + n / 2;
            for s in &mut st.layers {
                s.rewind(0, back).unwrap();
                assert_eq!(s.position(0), back);
            }
            let id = alone[0].0[n / 2];
            let again = st.step(0, back, &[id]);
            assert!(
                same_bits(&again, &alone[0].1[n / 2 + 1]),
                "{name}: after a rewind"
            );
        }
    }
}

#[test]
fn bad_requests_leave_stations_serving() {
    let Some(path) = require_model("SmolLM2-135M-Instruct.Q4_1.knot") else {
        return;
    };
    let file = KnotFile::read(&path);
    let model = file.model();
    let prompt = file.tokenizer().encode_with_bos("Hello there").unwrap();
    let (_, want) = decode_alone(&model, &prompt, 0);
    let mut st = Stations::new(&model, 2, 2);
    let cfg = &model.config;
    let station = &mut st.layers[0];
    let r = station.layers();
    let weights = &model.layers[r.clone()];
    let hidden = |pos: u32, dim: usize, rows: usize| Hidden {
        conversation: 7,
        pos,
        dim: dim as u32,
        values: vec![0.5; rows * dim],
    };
    // A batch that does not start where the station's cache ends.
    let msg = wire::encode(&hidden(3, cfg.dim, 1), Elem::F32).unwrap();
    assert!(matches!(
        station.step(&msg, weights),
        Err(StationError::Position {
            held: 0,
            got: 3,
            ..
        })
    ));
    // The wrong width, a corrupted message, too many rows, the wrong weights.
    let msg = wire::encode(&hidden(0, cfg.dim + 1, 1), Elem::F32).unwrap();
    assert!(matches!(
        station.step(&msg, weights),
        Err(StationError::Width { .. })
    ));
    let mut msg = wire::encode(&hidden(0, cfg.dim, 1), Elem::F32).unwrap();
    msg[40] ^= 1;
    assert!(matches!(
        station.step(&msg, weights),
        Err(StationError::Wire(wire::WireError::Checksum { .. }))
    ));
    let msg = wire::encode(&hidden(0, cfg.dim, MAX_BATCH + 1), Elem::F32).unwrap();
    assert!(matches!(
        station.step(&msg, weights),
        Err(StationError::Wire(wire::WireError::TooLarge { .. }))
    ));
    let msg = wire::encode(&hidden(0, cfg.dim, 1), Elem::F32).unwrap();
    assert!(matches!(
        station.step(&msg, &weights[1..]),
        Err(StationError::Weights { .. })
    ));
    // A batch past the context fails in the engine and leaves its conversation as it was.
    let full = |pos: u32| Hidden {
        conversation: 8,
        ..hidden(pos, cfg.dim, MAX_BATCH)
    };
    station
        .step(&wire::encode(&full(0), Elem::F32).unwrap(), weights)
        .unwrap();
    assert!(matches!(
        station.step(&wire::encode(&full(64), Elem::F32).unwrap(), weights),
        Err(StationError::Engine(
            engine::EngineError::ContextFull { .. }
        ))
    ));
    assert_eq!(station.position(8), MAX_BATCH);
    assert_eq!(station.position(7), 0);
    // Token ids enter at layer 0 only.
    let mut mid = Session::for_layers(cfg, 2..4, MAX_CTX, KvType::F32).unwrap();
    assert!(matches!(
        mid.begin(&prompt, &model.resident),
        Err(engine::EngineError::LayerRange {
            start: 2,
            end: 4,
            ..
        })
    ));
    // None of that touched anything: the next request is answered as if it came first.
    let got = st.step(7, 0, &prompt);
    assert!(same_bits(&got, &want[0]));
    // A head shard handed a batch of the wrong width refuses it.
    let lm = LmHead {
        output_norm: &model.resident.output_norm,
        output: &st.slices[0],
    };
    let msg = wire::encode(&hidden(0, cfg.dim - 1, 1), Elem::F32).unwrap();
    assert!(st.heads[0].logits(&msg, &lm).is_err());
}

#[test]
fn a_station_refuses_more_conversations_than_it_keeps() {
    let Some(path) = require_model("SmolLM2-135M-Instruct.Q4_1.knot") else {
        return;
    };
    let file = KnotFile::read(&path);
    let model = file.model();
    let cfg = &model.config;
    let mut station = LayerStation::new(cfg, 0..2, MAX_CTX, KvType::F32, MAX_BATCH, 2).unwrap();
    let step = |s: &mut LayerStation, conversation: u64| {
        let h = Hidden {
            conversation,
            pos: s.position(conversation) as u32,
            dim: cfg.dim as u32,
            values: vec![0.25; cfg.dim],
        };
        s.step(&wire::encode(&h, Elem::F32).unwrap(), &model.layers[0..2])
    };
    step(&mut station, 1).unwrap();
    step(&mut station, 2).unwrap();
    assert!(matches!(
        step(&mut station, 3),
        Err(StationError::Full { max: 2 })
    ));
    // Forgetting one makes room; the other keeps its position.
    station.forget(1);
    step(&mut station, 3).unwrap();
    assert_eq!(station.position(2), 1);
    assert_eq!(station.position(3), 1);
    assert_eq!(station.position(1), 0);
}
