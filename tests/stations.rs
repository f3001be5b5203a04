//! A model split across stations computes what one process computes, bit for bit: layer
//! stations fed hidden states through the wire format, head stations each computing a slice of
//! the vocabulary, their answers folded by the gather. Checked on the real models (SmolLM2 on 2
//! and 4 layer stations with 2 head shards, Gemma-3-270M on 4 with 3; in wasm32 one real split,
//! SmolLM2 on 2 with 2), with two conversations interleaved on the same stations, a rewind, and
//! bad requests that must leave the stations serving. The coordinator embeds from a table it
//! read whole at open or from rows the head stations hand over, and after open reads nothing;
//! it runs every generation as one of its sequences (one at a time is a batch of one), each
//! able to resume a conversation the layer stations kept, as a cold run would go.

use engine::decode::GenerateOptions;
use engine::sampler::greedy;
use engine::{KvType, LmHead, Model, Session};
use host::station::bundle;
use host::station::coordinator::{Conversation, Model as Coordinator, ModelOptions, Pick};
use host::station::embedding::EmbeddingOptions;
use host::station::gather::{fold, join_logits, vocab_slices, Answer, Folded};
use host::station::head::{Again, LogitsAsk, MAX_CANDIDATES};
use host::station::placement::layer_ranges;
use host::station::rows::RowsMessage;
use host::station::sequences::{Admitted, Sequences};
use host::station::wire::{self, Elem, Hidden};
use host::station::{open_index, HeadShard, HeadStation, LayerShard, LayerStation, StationError};
use host::{MemorySource, ReadPolicy, Reader};
use knot_suite::{require_model, KnotFile};
use std::rc::Rc;

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

/// The splits checked: natively every one; in wasm32 (WASI) one real split, SmolLM2 on 2 layer
/// stations and 2 head shards (the same code, and the split arithmetic is target-independent).
fn splits() -> &'static [(&'static str, &'static [(usize, usize)])] {
    if cfg!(target_family = "wasm") {
        &[("SmolLM2-135M-Instruct.Q4_1.knot", &[(2, 2)])]
    } else {
        &[
            ("SmolLM2-135M-Instruct.Q4_1.knot", &[(2, 2), (4, 2)]),
            ("gemma-3-270m.knot", &[(4, 3)]),
        ]
    }
}

#[test]
fn split_models_match_one_process_bit_for_bit() {
    for &(name, splits) in splits() {
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
    // Bundles of several conversations: each bad one refused whole, before anything runs.
    let station = &mut st.layers[0];
    let part = |conversation: u64, pos: u32, rows: usize| Hidden {
        conversation,
        ..hidden(pos, cfg.dim, rows)
    };
    let bundle_of = |parts: &[Hidden]| {
        let msgs: Vec<Vec<u8>> = parts
            .iter()
            .map(|h| wire::encode(h, Elem::F32).unwrap())
            .collect();
        bundle::encode(bundle::HIDDEN, msgs.iter().map(|m| (0, m.as_slice())))
    };
    let twice = bundle_of(&[part(20, 0, 1), part(20, 0, 1)]);
    assert!(matches!(
        station.step(&twice, weights),
        Err(StationError::Duplicate(20))
    ));
    // More conversations than the station holds (4), more positions than a batch takes, one
    // part that does not start where its conversation is.
    let five: Vec<Hidden> = (0..5).map(|c| part(30 + c, 0, 1)).collect();
    assert!(matches!(
        station.step(&bundle_of(&five), weights),
        Err(StationError::Conversations { got: 5, max: 4 })
    ));
    let wide = bundle_of(&[part(21, 0, MAX_BATCH), part(22, 0, 1)]);
    assert!(matches!(
        station.step(&wide, weights),
        Err(StationError::BundleRows { .. })
    ));
    let misplaced = bundle_of(&[part(23, 0, 1), part(24, 5, 1)]);
    assert!(matches!(
        station.step(&misplaced, weights),
        Err(StationError::Position { got: 5, .. })
    ));
    let mut flipped = bundle_of(&[part(25, 0, 1)]);
    flipped[12] = 4;
    assert!(matches!(
        station.step(&flipped, weights),
        Err(StationError::Bundle(_))
    ));
    for c in 20..26 {
        assert_eq!(station.position(c), 0, "a refused bundle ran nothing");
    }
    // A part flagged to rewind drops the positions its conversation holds past its first (a
    // rejected draft's); unflagged, a part behind its conversation is refused, and one ahead
    // of it is refused flagged or not.
    let flagged = |flags: u8, h: &Hidden| {
        let m = wire::encode(h, Elem::F32).unwrap();
        bundle::encode(bundle::HIDDEN, [(flags, m.as_slice())])
    };
    station.step(&flagged(0, &part(27, 0, 3)), weights).unwrap();
    assert!(matches!(
        station.step(&flagged(0, &part(27, 1, 1)), weights),
        Err(StationError::Position {
            held: 3,
            got: 1,
            ..
        })
    ));
    assert!(matches!(
        station.step(&flagged(bundle::REWIND, &part(27, 5, 1)), weights),
        Err(StationError::Position {
            held: 3,
            got: 5,
            ..
        })
    ));
    assert_eq!(station.position(27), 3);
    station
        .step(&flagged(bundle::REWIND, &part(27, 1, 1)), weights)
        .unwrap();
    assert_eq!(station.position(27), 2);
    station.forget(27);
    // A head shard asked for logits of a bundle in which no part wants them.
    let lm0 = LmHead {
        output_norm: &model.resident.output_norm,
        output: &st.slices[0],
    };
    let none = bundle_of(&[part(26, 0, 1)]);
    let rows = vec![0u8; 4];
    let e = host::station::EmbeddingSlice {
        first: 0,
        row_bytes: 1,
        bytes: &rows,
    };
    assert!(matches!(
        st.heads[0].answer(&none, &lm0, e, 0, LogitsAsk::Every, 0),
        Err(StationError::NoLogits)
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
fn a_station_keeps_its_most_recent_conversations() {
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
    step(&mut station, 1).unwrap();
    // A third makes room by dropping the one used least recently (2), kept record and all.
    station.keep(2, vec![5]).unwrap();
    step(&mut station, 3).unwrap();
    assert_eq!(station.position(1), 2);
    assert_eq!(station.position(2), 0);
    assert_eq!(station.position(3), 1);
    assert!(!station
        .claim(2, 1, host::station::prefix_hash(&[5]))
        .unwrap());
    // Forgetting frees a place without dropping anyone else.
    station.forget(3);
    step(&mut station, 4).unwrap();
    assert_eq!(station.position(1), 2);
    // A station of one conversation gives it up for the next.
    let mut one = LayerStation::new(cfg, 0..2, MAX_CTX, KvType::F32, MAX_BATCH, 1).unwrap();
    step(&mut one, 1).unwrap();
    step(&mut one, 2).unwrap();
    assert_eq!((one.position(1), one.position(2)), (0, 1));
    station.forget(4);
    for conversation in 10..20 {
        step(&mut station, conversation).unwrap();
        assert_eq!(station.position(conversation), 1);
        station.forget(conversation);
        assert_eq!(station.position(conversation), 0);
    }
    assert_eq!(
        station.position(1),
        2,
        "forgotten ones never pushed out a live one"
    );
}

/// Stations built from what they read of the file (the index, then their own part) compute
/// what one process computes, and read nothing else: a head shard its rows of the LM head and
/// the output norm, a layer station its layers' span, the coordinator the tokenizer and, when
/// it fits, the embedding table. After open nobody reads the file: the coordinator's rows come
/// from its table or from the head stations (the prompt's in one round, each greedy pick's with
/// the logits that picked it).
#[test]
fn stations_read_only_their_part_of_the_file() {
    use futures::executor::block_on;
    // In wasm32 (WASI) SmolLM2 alone: one real split (see `splits`).
    let models: &[(&str, usize, usize)] = if cfg!(target_family = "wasm") {
        &[("SmolLM2-135M-Instruct.Q4_1.knot", 2, 2)]
    } else {
        &[
            ("SmolLM2-135M-Instruct.Q4_1.knot", 2, 2),
            ("gemma-3-270m.knot", 4, 4),
        ]
    };
    for &(name, layer_stations, head_shards) in models {
        let Some(path) = require_model(name) else {
            continue;
        };
        let file = KnotFile::read(&path);
        let model = file.model();
        let cfg = &model.config;
        let prompt = file
            .tokenizer()
            .encode_with_bos("Once upon a time, once")
            .unwrap();
        let (ids, want) = decode_alone(&model, &prompt, 4);
        let source: Rc<[u8]> = file.bytes.clone().into();
        // No timeout: the WASI build has no timer thread, and memory answers at once.
        let policy = ReadPolicy {
            timeout_ms: 0,
            ..ReadPolicy::default()
        };
        let reader = || Reader::new(Rc::new(MemorySource::new(source.clone())), policy);
        let opts = knot::ReadOptions::default();
        let index_bytes = {
            let r = reader();
            block_on(open_index(&r, &opts)).unwrap();
            r.io.bytes.get()
        };
        assert!(
            index_bytes < 1 << 20,
            "{name}: the index is {index_bytes} bytes"
        );

        let mut layers = Vec::new();
        let mut readers = Vec::new();
        for range in layer_ranges(cfg.n_layers, layer_stations).unwrap() {
            let r = reader();
            let knot = block_on(open_index(&r, &opts)).unwrap();
            let shard =
                block_on(LayerShard::read(&r, &knot, range.clone(), Some(1 << 20))).unwrap();
            let span = knot.layer_range(range.end - 1).unwrap().end
                - knot.layer_range(range.start).unwrap().start;
            assert_eq!(
                r.io.bytes.get() - index_bytes,
                span,
                "{name}: layers {range:?}"
            );
            assert_eq!(shard.bytes() as u64, span);
            let station =
                LayerStation::new(cfg, range, MAX_CTX, KvType::F32, MAX_BATCH, 1).unwrap();
            layers.push((shard, station));
            readers.push(r);
        }
        let mut heads = Vec::new();
        let mut head_bytes = 0;
        for slice in vocab_slices(cfg.vocab_size, head_shards) {
            let r = reader();
            let knot = block_on(open_index(&r, &opts)).unwrap();
            let shard = block_on(HeadShard::read(&r, &knot, slice.clone(), Some(1 << 20))).unwrap();
            let (norm, rows) = shard.matrices().unwrap();
            let expected = (norm.rows() * norm.row_bytes() + rows.rows() * rows.row_bytes()) as u64;
            assert_eq!(rows.rows(), slice.len());
            assert_eq!(
                r.io.bytes.get() - index_bytes,
                expected,
                "{name}: head {slice:?}"
            );
            head_bytes += shard.bytes();
            heads.push((
                shard,
                HeadStation::new(slice, cfg.dim, cfg.norm_eps, MAX_BATCH),
            ));
            readers.push(r);
        }
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        let held: Vec<String> = layers
            .iter()
            .map(|(s, _)| format!("{:.1}", mib(s.bytes())))
            .collect();
        eprintln!(
            "{name}: layer stations hold {} MiB of weights, head shards {:.1} MiB each",
            held.join(" / "),
            mib(head_bytes) / heads.len() as f64
        );
        // The head shards together hold the LM head once, not once each.
        let out = &model.resident.output;
        assert!(head_bytes < out.rows() * out.row_bytes() + heads.len() * 4 * cfg.dim + 64);

        // The coordinator: the index and the tokenizer, and the embedding table when it fits
        // the default budget (SmolLM2's does, Gemma-3's does not: its rows come from the heads).
        let coord = block_on(Coordinator::open(
            reader(),
            &opts,
            ModelOptions {
                context: MAX_CTX,
                max_batch: MAX_BATCH,
                head_shards,
                ..ModelOptions::default()
            },
        ))
        .unwrap();
        let table = model.resident.token_embd.rows() * model.resident.token_embd.row_bytes();
        let resident = (table as u64) <= EmbeddingOptions::default().budget;
        assert_eq!(coord.embedding_resident(), resident, "{name}");
        let stats = coord.stats();
        eprintln!(
            "{name}: the coordinator's embedding is {} ({} reads at open)",
            stats.embedding.mode, stats.reads_at_open
        );
        let station_reads = || readers.iter().map(|r| r.io.reads.get()).sum::<u64>();
        let stations_at_open = station_reads();
        let opts_greedy =
            engine::decode::GenerateOptions::from_json(r#"{"temperature": 0, "maxTokens": 4}"#)
                .unwrap();
        let mut seqs = Sequences::new(1, 0, 1);
        seqs.admit(&coord, &prompt, &opts_greedy).unwrap();
        let mut step = 0;
        while let Some(wanted) = seqs.plan(&coord).unwrap() {
            for (slot, wanted) in wanted {
                let (shard, station) = &heads[slot];
                let answer = station.rows(&wanted, shard.embedding()).unwrap();
                coord.add_rows(slot, &answer).unwrap();
            }
            let (mut msg, logits) = seqs.message(&coord).unwrap();
            assert!(logits, "the prompt fits one step");
            for (shard, station) in &mut layers {
                msg = station.step(&msg, &shard.weights().unwrap()).unwrap();
            }
            let mut answers = Vec::new();
            let mut parts = Vec::new();
            for (slot, (shard, station)) in heads.iter_mut().enumerate() {
                let (output_norm, output) = shard.matrices().unwrap();
                let lm = LmHead {
                    output_norm: &output_norm,
                    output: &output,
                };
                let top = coord.logit_rows();
                // Every logit, to compare them bit for bit.
                let answer = station
                    .answer(
                        &msg,
                        &lm,
                        shard.embedding(),
                        top,
                        LogitsAsk::Every,
                        seqs.step(),
                    )
                    .unwrap();
                // One sequence: one part in the shard's answer bundle.
                let part = bundle::decode(&answer, bundle::ANSWERS, 1).unwrap()[0].1;
                match coord.read_answer(slot, part) {
                    Answer::Value(m) => parts.push(m.logits),
                    other => panic!("{name}: {other:?}"),
                }
                answers.push(Answer::Value(answer));
            }
            let slices: Vec<_> = heads.iter().map(|(s, _)| s.slice()).collect();
            let logits = join_logits(&slices, &parts).unwrap();
            assert!(same_bits(&logits, &want[step]), "{name}: step {step}");
            let events = seqs.pick(&coord, Some(answers)).unwrap();
            let token = events[0].token.as_ref().unwrap();
            assert_eq!(token.id, ids[step], "{name}: token {step}");
            step += 1;
        }
        assert_eq!(step, ids.len());
        // Nothing read the file after open: not the coordinator, whose rows came from the head
        // stations (one round, the prompt's: each greedy pick's row rode with its logits) or
        // its own table; not the stations.
        let stats = coord.stats();
        let generation = stats.generation.unwrap();
        assert_eq!((stats.reads_since_open, generation.reads), (0, 0), "{name}");
        match resident {
            true => assert_eq!(generation.rows.rounds, 0),
            false => {
                assert_eq!((generation.rows.rounds, generation.rows.misses), (1, 0));
                let mut distinct = prompt.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(generation.rows.rows_fetched, distinct.len() as u64);
            }
        }
        assert_eq!(station_reads(), stations_at_open, "{name}");
        // An id outside the vocabulary is refused before anything is read or asked for.
        assert!(coord.rows_wanted(&[cfg.vocab_size as u32], false).is_err());
        assert!(seqs
            .admit(&coord, &[cfg.vocab_size as u32], &opts_greedy)
            .is_err());
        assert_eq!(coord.stats().reads_since_open, 0);
    }
}

/// A model split across stations built from what each reads of the file (through a reader
/// whose reads are counted), driven by a coordinator as the Worker drives them.
struct Split {
    coord: Coordinator,
    layers: Vec<(LayerShard, LayerStation)>,
    heads: Vec<(HeadShard, HeadStation)>,
    readers: Vec<Reader>,
    /// Rounds of `/again` the picks asked for, and the asks among them naming new sums (a
    /// draft's row whose pick asks otherwise than its step).
    again_rounds: usize,
    fresh_asks: usize,
}

impl Split {
    fn open(bytes: &Rc<[u8]>, layer_stations: usize, head_shards: usize, o: ModelOptions) -> Self {
        Self::open_holding(bytes, layer_stations, head_shards, o, 2)
    }

    /// [`Split::open`] with layer stations holding `conversations` conversations each.
    fn open_holding(
        bytes: &Rc<[u8]>,
        layer_stations: usize,
        head_shards: usize,
        o: ModelOptions,
        conversations: usize,
    ) -> Self {
        use futures::executor::block_on;
        let policy = ReadPolicy {
            timeout_ms: 0,
            ..ReadPolicy::default()
        };
        let reader = || Reader::new(Rc::new(MemorySource::new(bytes.clone())), policy);
        let opts = knot::ReadOptions::default();
        let o = ModelOptions { head_shards, ..o };
        let max_batch = o.max_batch;
        let coord = block_on(Coordinator::open(reader(), &opts, o)).unwrap();
        let cfg = coord.config().clone();
        let (mut layers, mut heads, mut readers) = (Vec::new(), Vec::new(), Vec::new());
        for range in layer_ranges(cfg.n_layers, layer_stations).unwrap() {
            let r = reader();
            let knot = block_on(open_index(&r, &opts)).unwrap();
            let shard = block_on(LayerShard::read(&r, &knot, range.clone(), Some(1 << 16)));
            let station =
                LayerStation::new(&cfg, range, MAX_CTX, KvType::F32, max_batch, conversations);
            layers.push((shard.unwrap(), station.unwrap()));
            readers.push(r);
        }
        for slice in coord.slices.clone() {
            let r = reader();
            let knot = block_on(open_index(&r, &opts)).unwrap();
            let shard = block_on(HeadShard::read(&r, &knot, slice.clone(), Some(1 << 16)));
            let station = HeadStation::new(slice, cfg.dim, cfg.norm_eps, max_batch);
            heads.push((shard.unwrap(), station));
            readers.push(r);
        }
        Split {
            coord,
            layers,
            heads,
            readers,
            again_rounds: 0,
            fresh_asks: 0,
        }
    }

    /// Reads the stations made.
    fn station_reads(&self) -> u64 {
        self.readers.iter().map(|r| r.io.reads.get()).sum()
    }

    /// One generation through the stations, a sequence run alone: its ids and text.
    fn generate(&mut self, prompt: &[u32], options: &str) -> (Vec<u32>, String) {
        let (ids, text, _) = self.generate_watched(prompt, options);
        (ids, text)
    }

    /// [`Split::generate`] with what the health monitor saw, when one watched.
    fn generate_watched(
        &mut self,
        prompt: &[u32],
        options: &str,
    ) -> (Vec<u32>, String, Option<engine::health::HealthMetrics>) {
        let mut seqs = Sequences::new(1, 0, 1);
        let arrivals = [Arrival {
            at: 0,
            prompt,
            options,
            cancel_after: None,
        }];
        let (mut got, _) = self.run_together(&mut seqs, &arrivals);
        let got = got.remove(0);
        (got.ids, got.text, got.health)
    }

    /// The rows `wanted` names, from the head stations holding them, handed to the coordinator.
    fn fetch_rows(&self, wanted: Vec<(usize, Vec<u32>)>) {
        for (slot, ids) in wanted {
            let (shard, station) = &self.heads[slot];
            let answer = station.rows(&ids, shard.embedding()).unwrap();
            self.coord.add_rows(slot, &answer).unwrap();
        }
    }

    /// `msg` through every layer station, in order.
    fn through_layers(&mut self, mut msg: Vec<u8>) -> Vec<u8> {
        for (shard, station) in &mut self.layers {
            msg = station.step(&msg, &shard.weights().unwrap()).unwrap();
        }
        msg
    }

    /// Each head station's `/logits` answer to `msg` (as `seqs` carried it), in slot order.
    fn head_answers(&mut self, msg: &[u8], seqs: &Sequences) -> Vec<Vec<u8>> {
        let (top, step) = (seqs.logit_rows(), seqs.step());
        let ask = self.coord.logits_ask();
        self.heads
            .iter_mut()
            .map(|(shard, station)| {
                let (output_norm, output) = shard.matrices().unwrap();
                let lm = LmHead {
                    output_norm: &output_norm,
                    output: &output,
                };
                station
                    .answer(msg, &lm, shard.embedding(), top, ask, step)
                    .unwrap()
            })
            .collect()
    }

    /// The head stations' `/again` answers to what `seqs` asks, as the coordinator hands them
    /// over (counted in `again_rounds`).
    fn again_answers(&mut self, seqs: &Sequences) -> Vec<Answer<Vec<u8>>> {
        self.again_rounds += 1;
        let step = seqs.step();
        (seqs.again().into_iter())
            .map(|(slot, asks)| {
                self.fresh_asks += asks.iter().filter(|a| a.sums.is_some()).count();
                let (shard, station) = &mut self.heads[slot];
                let (output_norm, output) = shard.matrices().unwrap();
                let lm = LmHead {
                    output_norm: &output_norm,
                    output: &output,
                };
                let row_bytes = shard.embedding().row_bytes;
                Answer::Value(station.again(step, &asks, &lm, row_bytes).unwrap())
            })
            .collect()
    }
}

/// Where the coordinator's embedding rows live in the tests: the table resident, and sharded (a
/// budget of 0 bytes; a small row cache, so that rows also leave it). In wasm32 (WASI) the
/// sharded table alone: the resident one is the older path.
fn embedding_modes() -> Vec<(&'static str, EmbeddingOptions)> {
    let sharded = EmbeddingOptions {
        budget: 0,
        cache_bytes: 64 << 10,
    };
    if cfg!(target_family = "wasm") {
        vec![("sharded", sharded)]
    } else {
        vec![
            ("resident", EmbeddingOptions::default()),
            ("sharded", sharded),
        ]
    }
}

/// The coordinator's decode loop over stations gives what a whole host gives, token for token
/// and text for text: greedy, seeded sampling, and under a COLTRANE constraint, with the
/// embedding table resident in the coordinator and with its rows handed over by the head
/// stations; and neither reads the file after open. A head shard that does not answer is
/// retried alone, while one that fails ends the request.
/// The whole model in one process, the reference a split is compared with.
fn whole_host(bytes: &Rc<[u8]>) -> host::Host {
    let policy = ReadPolicy {
        timeout_ms: 0,
        ..ReadPolicy::default()
    };
    futures::executor::block_on(host::Host::open(
        Rc::new(MemorySource::new(bytes.clone())),
        host::HostOptions {
            read_policy: policy,
            max_context: MAX_CTX,
            ..host::HostOptions::default()
        },
    ))
    .unwrap()
}

#[test]
fn the_coordinator_decodes_as_a_whole_host_does() {
    use engine::decode::GenerateOptions;
    use futures::executor::block_on;
    let Some(path) = require_model("SmolLM2-135M-Instruct.Q4_1.knot") else {
        return;
    };
    let file = KnotFile::read(&path);
    let bytes: Rc<[u8]> = file.bytes.clone().into();
    let mut host = whole_host(&bytes);
    let prompt = file
        .tokenizer()
        .encode_with_bos("Write a short poem about the sea, in four lines:")
        .unwrap();
    // Batches of 8: the prompt goes through in several messages.
    assert!(prompt.len() > 8);
    // Greedy; the samplings (top-p; top-k, min-p and the three penalties; temperature alone);
    // MOA; COLTRANE's JSON Schema. The head shards answer their largest 64 logits and, when a
    // pick asks, more of them (`/again`): picked exactly as from every logit.
    let options = [
        r#"{"temperature": 0, "maxTokens": 24}"#,
        r#"{"temperature": 0.9, "topP": 0.95, "seed": 7, "maxTokens": 24}"#,
        r#"{"seed": 3, "maxTokens": 24, "moa": {"k": 3}}"#,
        r#"{"temperature": 0.7, "topK": 40, "minP": 0.05, "repeatPenalty": 1.2,
            "presencePenalty": 0.4, "frequencyPenalty": -0.3, "seed": 11, "maxTokens": 24}"#,
        r#"{"temperature": 0.8, "seed": 5, "maxTokens": 24}"#,
        r#"{"maxTokens": 24, "coltrane": {"preset": "json_schema", "schema":
            {"type": "object", "properties": {"line": {"type": "string"}}, "required": ["line"]}}}"#,
        // The OpenAI routes' default: COLTRANE's class tier and its fallback, prosody's bias over
        // the last 16 tokens (here with the eddy breaker), greedy and sampled.
        r#"{"temperature": 0, "maxTokens": 24, "coltrane": {"prosody": "bias", "eddy": {"ngram": 8, "repeats": 2}}}"#,
        r#"{"temperature": 0.8, "topK": 40, "seed": 9, "maxTokens": 24, "coltrane": {"prosody": "bias"}}"#,
        // The health monitor, from the head shards' health sums: greedy with the routes'
        // default COLTRANE, and sampled.
        r#"{"temperature": 0, "maxTokens": 24, "health": true, "coltrane": {"prosody": "bias"}}"#,
        r#"{"temperature": 0.9, "topP": 0.95, "seed": 4, "maxTokens": 24, "health": true}"#,
    ];
    // Rounds of `/again` each asks for at most (greedy and top-k within what the shards send:
    // none, unless prosody's bias lifts a token they kept back; MOA's agents see the 40 largest,
    // within the 64 each shard sends; sampling adds up what the shards kept back from their level sums, so only a draw or
    // a top-p cut past the candidates asks again — here 12 of top-p 0.95's 24 tokens, 2 of
    // temperature 0.8's; COLTRANE names what it changes, so its sampled steps settle too).
    let most_again = [0, 16, 0, 0, 4, 24, 4, 4, 24, 24];
    let wants: Vec<_> = options
        .iter()
        .map(|o| {
            let opts = GenerateOptions::from_json(o).unwrap();
            block_on(host.generate(&prompt, &opts, &mut |_| true)).unwrap()
        })
        .collect();
    for (mode, embedding) in embedding_modes() {
        let o = ModelOptions {
            context: MAX_CTX,
            max_batch: 8,
            embedding,
            ..ModelOptions::default()
        };
        let mut split = Split::open(&bytes, 2, 2, o);
        assert_eq!(split.coord.stats().embedding.mode, mode);
        let stations_at_open = split.station_reads();
        for (c, (options, want)) in options.iter().zip(&wants).enumerate() {
            split.again_rounds = 0;
            let (ids, text, health) = split.generate_watched(&prompt, options);
            assert_eq!(ids, want.ids, "{mode}: {options}");
            assert_eq!(text, want.text, "{mode}: {options}");
            // The monitor's reading, step for step (its own time aside).
            let timeless = |h: Option<engine::health::HealthMetrics>| {
                h.map(|h| engine::health::HealthMetrics {
                    us_per_step: 0.0,
                    ..h
                })
            };
            assert_eq!(
                timeless(health),
                timeless(want.health.clone()),
                "{mode}: {options}"
            );
            assert!(split.again_rounds <= most_again[c], "{mode}: {options}");
            let stats = split.coord.stats();
            let generation = stats.generation.unwrap();
            eprintln!(
                "{mode}, {options}: {} tokens, rounds of rows {}, misses {}, rows fetched {}, \
                 riding {}, rounds of /again {}",
                ids.len(),
                generation.rows.rounds,
                generation.rows.misses,
                generation.rows.rows_fetched,
                generation.rows.rows_riding,
                split.again_rounds
            );
            // No read of the file after open, in either mode: the invariant of the per-token
            // path (a read brought back per id or per token fails here).
            assert_eq!(generation.reads, 0, "{mode}: {options}");
            if mode == "resident" {
                assert_eq!(generation.rows.rounds, 0);
            } else if c == 0 {
                // Greedy: the picked token's row always rode with the logits.
                assert_eq!((generation.rows.rounds, generation.rows.misses), (1, 0));
            }
        }
        assert_eq!(split.coord.stats().reads_since_open, 0, "{mode}");
        assert_eq!(split.station_reads(), stations_at_open, "{mode}");
        // `/again` for a step a head station no longer keeps, or a part the step did not have:
        // refused by name, and it keeps serving.
        let (shard, station) = &mut split.heads[0];
        let (output_norm, output) = shard.matrices().unwrap();
        let lm = LmHead {
            output_norm: &output_norm,
            output: &output,
        };
        let row_bytes = shard.embedding().row_bytes;
        let every = [Again::of(0, LogitsAsk::Every)];
        assert!(matches!(
            station.again(u64::MAX, &every, &lm, row_bytes),
            Err(StationError::StepGone(u64::MAX))
        ));
        let held = (1..=64u64)
            .rev()
            .find(|&s| station.again(s, &every, &lm, row_bytes).is_ok())
            .expect("the last steps are kept");
        assert!(matches!(
            station.again(held, &[Again::of(5, LogitsAsk::Every)], &lm, row_bytes),
            Err(StationError::PartOutside { part: 5, parts: 1 })
        ));
        let many = [Again::of(0, LogitsAsk::Largest(MAX_CANDIDATES + 1))];
        assert!(matches!(
            station.again(held, &many, &lm, row_bytes),
            Err(StationError::TooManyCandidates { .. })
        ));
        assert!(station.again(held, &every, &lm, row_bytes).is_ok());
    }

    // The gather: a missing answer asks for that slot alone; a failed one ends the request.
    let split = Split::open(&bytes, 2, 2, ModelOptions::default());
    let coord = &split.coord;
    let opts = GenerateOptions::from_json(r#"{"temperature": 0, "maxTokens": 4}"#).unwrap();
    let mut conv = Conversation::new(coord, 9, &prompt, 0, &opts).unwrap();
    let logits = |n: usize| RowsMessage {
        logits: vec![0.0f32; n],
        candidates: None,
        health: None,
        ids: Vec::new(),
        row_bytes: 1,
        rows: Vec::new(),
    };
    let part = logits(coord.slices[1].len());
    let retry = conv
        .pick(coord, vec![Answer::Missing, Answer::Value(part.clone())], 1)
        .unwrap();
    assert!(matches!(retry, Pick::Retry(ref slots) if slots == &[0]));
    let failed = conv.pick(
        coord,
        vec![Answer::Failed("boom".into()), Answer::Missing],
        1,
    );
    assert!(matches!(failed, Err(host::HostError::Station(ref m)) if m.contains("boom")));
    // Answers of the wrong length are refused, not joined.
    let short = conv.pick(
        coord,
        vec![Answer::Value(logits(3)), Answer::Value(part)],
        1,
    );
    assert!(matches!(short, Err(host::HostError::Station(_))));
    assert_eq!(conv.pos, 0, "nothing was accepted");
    // A malformed answer is that shard's failure; so are rows from outside its slice.
    assert!(matches!(
        coord.read_answer(0, &[1, 2, 3]),
        Answer::Failed(_)
    ));
    assert!(matches!(coord.read_answer(5, &[]), Answer::Failed(_)));
    assert!(coord.add_rows(0, b"KNRW").is_err());
    assert!(coord.add_rows(7, &[]).is_err());
    // Options a split model cannot honour are refused up front: the margin rule (its verify
    // rows are step-by-step rows bit for bit) and continuing a session.
    for bad in [r#"{"draftMode": {"margin": 0.5}}"#, r#"{"continue": true}"#] {
        let opts = GenerateOptions::from_json(bad).unwrap();
        assert!(
            Conversation::new(coord, 1, &prompt, 0, &opts).is_err(),
            "{bad}"
        );
    }
    assert!(Conversation::new(coord, 1, &[], 0, &opts).is_err());
    // A kept prefix must leave a token of the prompt to run.
    assert!(Conversation::new(coord, 1, &prompt, prompt.len(), &opts).is_err());
    // An id outside the vocabulary is refused at the start, before any row is asked for.
    let vocab = coord.config().vocab_size as u32;
    assert!(matches!(
        Conversation::new(coord, 1, &[1, vocab], 0, &opts),
        Err(host::HostError::Engine(
            engine::EngineError::TokenOutOfRange { .. }
        ))
    ));
}

/// A model whose embeddings are not tied (the tiny llama): a head station holds its slice of
/// the embedding table beside its slice of the LM head, and a coordinator embedding from rows it
/// hands over decodes as a whole host does.
#[test]
fn untied_embeddings_come_from_the_head_stations_too() {
    use engine::decode::GenerateOptions;
    use futures::executor::block_on;
    let bytes = std::fs::read(knot_suite::fixture("tiny/llama-f32.knot")).unwrap();
    let file = KnotFile {
        knot: knot::Knot::from_bytes(&bytes).unwrap(),
        bytes: bytes.clone(),
    };
    assert!(!file.knot.meta.config.tie_word_embeddings);
    let bytes: Rc<[u8]> = bytes.into();
    let mut host = whole_host(&bytes);
    let prompt = [1u32, 5, 9, 5, 2, 7];
    let o = ModelOptions {
        context: MAX_CTX,
        max_batch: 4,
        embedding: EmbeddingOptions {
            budget: 0,
            cache_bytes: 0,
        },
        ..ModelOptions::default()
    };
    let mut split = Split::open(&bytes, 1, 3, o);
    let model = file.model();
    for (shard, _) in &split.heads {
        let (_, output) = shard.matrices().unwrap();
        let e = shard.embedding();
        let slice = shard.slice();
        // Its own rows of the embedding, not the LM head's.
        assert_eq!(
            e.bytes.len(),
            slice.len() * model.resident.token_embd.row_bytes()
        );
        assert_eq!(
            shard.bytes(),
            e.bytes.len() + output.rows() * output.row_bytes() + 4 * model.config.dim
        );
    }
    for options in [
        r#"{"temperature": 0, "maxTokens": 12}"#,
        r#"{"temperature": 1.0, "seed": 11, "maxTokens": 12}"#,
    ] {
        let opts = GenerateOptions::from_json(options).unwrap();
        let want = block_on(host.generate(&prompt, &opts, &mut |_| true)).unwrap();
        let (ids, _) = split.generate(&prompt, options);
        assert_eq!(ids, want.ids, "{options}");
        assert_eq!(split.coord.stats().generation.unwrap().reads, 0);
    }
}

/// Prefix replay: a second turn that extends the first finds the stations still holding the
/// first turn's positions, claims them from every station, and runs only the rest, with logits
/// equal to running the whole second prompt from scratch; a station that does not hold them
/// (here: one that forgot) makes it a miss, and nothing is skipped.
#[test]
fn a_second_turn_replays_the_first_turns_prefix() {
    use host::station::coordinator::{replay_verdict, PrefixTable};
    let Some(path) = require_model("SmolLM2-135M-Instruct.Q4_1.knot") else {
        return;
    };
    let file = KnotFile::read(&path);
    let model = file.model();
    let tok = file.tokenizer();
    let mut st = Stations::new(&model, 2, 2);
    let first = tok
        .encode_with_bos("User: Name a colour.\nAssistant:")
        .unwrap();
    let (ids, _) = decode_alone(&model, &first, 6);
    // The first turn: the prompt and the generated ids but the last (picked, never run).
    let mut pos = 0;
    let mut batch = first.clone();
    for &id in &ids[..ids.len() - 1] {
        st.step(1, pos, &batch);
        pos += batch.len();
        batch = vec![id];
    }
    st.step(1, pos, &batch);
    let held: Vec<u32> = first.iter().chain(&ids[..ids.len() - 1]).copied().collect();
    let mut table = PrefixTable::new(2);
    for s in &mut st.layers {
        s.keep(1, held.clone()).unwrap();
    }
    assert!(table.remember(1, held.clone(), first.len()).is_empty());
    // The second turn extends the first.
    let mut second = held.clone();
    second.extend(
        tok.encode(" Blue.\nUser: And another?\nAssistant:")
            .unwrap(),
    );
    let (_, want) = decode_alone(&model, &second, 0);
    let replay = table.take_best(&second).unwrap();
    assert_eq!((replay.conversation, replay.len), (1, held.len()));
    let answers: Vec<Option<bool>> = st
        .layers
        .iter_mut()
        .map(|s| s.claim(replay.conversation, replay.len, replay.hash).ok())
        .collect();
    assert!(replay_verdict(&answers), "{answers:?}");
    let got = st.step(1, replay.len, &second[replay.len..]);
    assert!(same_bits(&got, &want[0]), "the replayed turn's logits");

    // A station that no longer holds the prefix answers miss: no skip.
    for s in &mut st.layers {
        s.keep(1, second.clone()).unwrap();
    }
    st.layers[1].forget(1);
    let answers: Vec<Option<bool>> = st
        .layers
        .iter_mut()
        .map(|s| s.claim(1, 4, host::station::prefix_hash(&second[..4])).ok())
        .collect();
    assert_eq!(answers, [Some(true), Some(false)]);
    assert!(!replay_verdict(&answers));
    // A wrong hash is a miss too, and changes nothing.
    st.layers[0].keep(1, second[..4].to_vec()).unwrap();
    assert!(!st.layers[0].claim(1, 4, 12345).unwrap());
    assert_eq!(st.layers[0].position(1), 4);
    // A kept record may not name more positions than the station holds; naming fewer drops
    // the positions past them (a rejected draft's).
    let more: Vec<u32> = second[..4].iter().chain(&second[..1]).copied().collect();
    assert!(st.layers[0].keep(1, more).is_err());
    st.layers[0].keep(1, second[..3].to_vec()).unwrap();
    assert_eq!(st.layers[0].position(1), 3);
}

/// One sequence of [`Split::run_together`]: admitted at step `at`, canceled by its consumer
/// after `cancel_after` tokens when given.
struct Arrival<'p> {
    at: usize,
    prompt: &'p [u32],
    options: &'p str,
    cancel_after: Option<usize>,
}

/// What a sequence run together got: how it was admitted, its ids and text, whether it was
/// canceled, and how its prompt was served in the end.
#[derive(Debug)]
struct Got {
    admitted: Admitted,
    ids: Vec<u32>,
    text: String,
    canceled: bool,
    prefix: Option<host::PrefixStatus>,
    health: Option<engine::health::HealthMetrics>,
    report: Option<host::SequenceReport>,
}

impl Split {
    /// Sequences run together over the stations as the package's stations backend runs them:
    /// admissions, claims (every layer station asked; a claim not granted by all has them
    /// forget the conversation) and cancellations between steps, each step one bundle through
    /// every layer station and one answer bundle from each head shard, and the stations told
    /// what to keep and forget after each step. Returns what each arrival got, in order, and
    /// the steps taken.
    fn run_together(&mut self, seqs: &mut Sequences, arrivals: &[Arrival]) -> (Vec<Got>, usize) {
        let mut got: Vec<Option<Got>> = (0..arrivals.len()).map(|_| None).collect();
        let mut steps = 0;
        loop {
            for (i, a) in arrivals.iter().enumerate().filter(|(_, a)| a.at == steps) {
                let opts = GenerateOptions::from_json(a.options).unwrap();
                let admitted = seqs.admit(&self.coord, a.prompt, &opts).unwrap();
                got[i] = Some(Got {
                    prefix: admitted.prefix.as_ref().map(|p| p.status),
                    admitted,
                    ids: Vec::new(),
                    text: String::new(),
                    canceled: false,
                    health: None,
                    report: None,
                });
            }
            for (a, g) in arrivals.iter().zip(&mut got) {
                let Some(g) = g else { continue };
                if a.cancel_after == Some(g.ids.len()) && !g.canceled {
                    assert!(seqs.cancel(g.admitted.id).unwrap());
                    g.canceled = true;
                }
            }
            self.claim(seqs, &mut got);
            self.settle(seqs);
            let Some(wanted) = seqs.plan(&self.coord).unwrap() else {
                if arrivals.iter().any(|a| a.at > steps) {
                    steps += 1;
                    continue;
                }
                break;
            };
            steps += 1;
            self.fetch_rows(wanted);
            let (msg, logits) = seqs.message(&self.coord).unwrap();
            let msg = self.through_layers(msg);
            let answers = logits.then(|| {
                let answers = self.head_answers(&msg, seqs);
                answers.into_iter().map(Answer::Value).collect()
            });
            let mut events = seqs.pick(&self.coord, answers).unwrap();
            while !seqs.again().is_empty() {
                let answers = self.again_answers(seqs);
                events.extend(seqs.pick_again(&self.coord, answers).unwrap());
            }
            for e in events {
                let token = e.token.unwrap();
                let g = got.iter_mut().flatten().find(|g| g.admitted.id == e.id);
                let g = g.expect("an event for a sequence admitted");
                g.ids.push(token.id);
                g.text.push_str(&token.text);
                g.health = token.health.clone().or(g.health.take());
                g.report = e.report.or(g.report.take());
            }
        }
        self.settle(seqs);
        (got.into_iter().map(Option::unwrap).collect(), steps)
    }

    /// Every layer station's answer to each claim the sequences wait for.
    fn claim(&mut self, seqs: &mut Sequences, got: &mut [Option<Got>]) {
        for (id, claim) in seqs.claims() {
            let answers: Vec<Option<bool>> = (self.layers.iter_mut())
                .map(|(_, s)| s.claim(id, claim.len, claim.hash).ok())
                .collect();
            let outcome = seqs.claimed(id, &answers).unwrap();
            if outcome.forget {
                self.forget(id);
            }
            let g = got
                .iter_mut()
                .flatten()
                .find(|g| g.admitted.id == id)
                .unwrap();
            g.prefix = outcome.prefix.map(|p| p.status);
        }
    }

    /// What the coordinator says the layer stations are to keep and forget.
    fn settle(&mut self, seqs: &mut Sequences) {
        let s = seqs.settle();
        for k in s.keep {
            for (_, station) in &mut self.layers {
                station.keep(k.conversation, k.ids.clone()).unwrap();
            }
        }
        for c in s.forget {
            self.forget(c);
        }
    }

    fn forget(&mut self, conversation: u64) {
        for (_, station) in &mut self.layers {
            station.forget(conversation);
        }
    }
}

/// Four conversations run together over the stations (each step one bundle through every
/// station, whatever the number of conversations): prompts of different lengths admitted at
/// different steps, a prompt longer than a batch running in chunks beside the others' decoding,
/// one canceled mid-way — each gets what it gets alone from a whole host, token for token and
/// text for text, under greedy, seeded sampling, MOA and a COLTRANE constraint; with the
/// embedding table resident and sharded. The stations run the bundle in far fewer steps than
/// the conversations one after another.
#[test]
fn conversations_run_together_as_each_runs_alone() {
    use futures::executor::block_on;
    let Some(path) = require_model("SmolLM2-135M-Instruct.Q4_1.knot") else {
        return;
    };
    let file = KnotFile::read(&path);
    let bytes: Rc<[u8]> = file.bytes.clone().into();
    let mut host = whole_host(&bytes);
    let tok = file.tokenizer();
    let prompts: Vec<Vec<u32>> = [
        "Write a short poem about the sea, in four lines:",
        "Hi",
        "List three colours of the rainbow, one per line, and then name a fruit of each colour:",
        "The capital of France is",
    ]
    .iter()
    .map(|p| tok.encode_with_bos(p).unwrap())
    .collect();
    let options = [
        r#"{"temperature": 0, "maxTokens": 12}"#,
        r#"{"temperature": 0.9, "topP": 0.95, "seed": 7, "maxTokens": 14}"#,
        r#"{"seed": 3, "maxTokens": 10, "moa": {"k": 3}}"#,
        r#"{"maxTokens": 12, "coltrane": {"preset": "json"}}"#,
    ];
    let alone: Vec<_> = prompts
        .iter()
        .zip(options)
        .map(|(p, o)| {
            let opts = GenerateOptions::from_json(o).unwrap();
            block_on(host.generate(p, &opts, &mut |_| true)).unwrap()
        })
        .collect();
    for (mode, embedding) in embedding_modes() {
        let o = ModelOptions {
            context: MAX_CTX,
            // 8 positions a step: the third prompt (longer) runs in chunks beside the others.
            max_batch: 8,
            embedding,
            ..ModelOptions::default()
        };
        let mut split = Split::open_holding(&bytes, 2, 2, o, 4);
        assert!(prompts[2].len() > 8);
        let arrivals: Vec<Arrival> = (0..4)
            .map(|i| Arrival {
                at: [0, 0, 3, 6][i],
                prompt: &prompts[i],
                options: options[i],
                cancel_after: (i == 1).then_some(5),
            })
            .collect();
        // The stations hold 4: with 4 running there is no room to keep one that ended.
        let mut seqs = Sequences::new(4, 0, 40);
        let (got, steps) = split.run_together(&mut seqs, &arrivals);
        for (i, want) in alone.iter().enumerate() {
            let g = &got[i];
            if g.canceled {
                assert_eq!(g.ids, want.ids[..g.ids.len()], "{mode}: {}", options[i]);
            } else {
                assert_eq!(g.ids, want.ids, "{mode}: {}", options[i]);
                assert_eq!(g.text, want.text, "{mode}: {}", options[i]);
            }
        }
        assert!(got[1].canceled && got[1].ids.len() == 5);
        // One after another, each prompt's chunks and tokens would be steps of their own.
        let apart: usize = alone
            .iter()
            .zip(&prompts)
            .map(|(w, p)| p.len().div_ceil(8) + w.ids.len() - 1)
            .sum();
        eprintln!("{mode}: 4 conversations together in {steps} steps (one after another: {apart})");
        assert!(steps < apart * 2 / 3, "{steps} steps for {apart} apart");
        assert_eq!(seqs.active(), 0);
        for (_, station) in &split.layers {
            for g in &got {
                let id = g.admitted.id;
                assert_eq!(station.position(id), 0, "with no room, {id} is forgotten");
            }
        }
        assert_eq!(split.coord.stats().reads_since_open, 0, "{mode}");
    }
}

/// Speculative decoding over the stations: a draft rides after the picked token, the layer
/// stations run them as one batch, the head shards answer every row, and the coordinator picks
/// row after row while each pick is the draft's token — asking a row again when its pick asks
/// otherwise than the step did (penalties, a constraint, the monitor moved on with the draft),
/// and having the stations drop a rejected draft's positions with the next message. Each
/// generation gets what a whole host gives, token for token, alone and two at once: greedy,
/// sampled with penalties and prosody's bias, COLTRANE's JSON Schema sampled, MOA and the
/// health monitor.
#[test]
fn drafts_over_the_stations_give_the_tokens_of_plain_decoding() {
    use futures::executor::block_on;
    let Some(path) = require_model("SmolLM2-135M-Instruct.Q4_1.knot") else {
        return;
    };
    let file = KnotFile::read(&path);
    let bytes: Rc<[u8]> = file.bytes.clone().into();
    let mut host = whole_host(&bytes);
    let tok = file.tokenizer();
    // Text that copies: prompt lookup drafts from it, and some drafts miss.
    let prompt = tok
        .encode_with_bos(
            "Copy the list exactly, twice.\nList: red apple, green pear, blue plum, black \
             cherry, yellow lemon, orange peach.\nCopy 1: red apple, green pear,",
        )
        .unwrap();
    let options = [
        r#"{"temperature": 0, "maxTokens": 32, "draftMode": true}"#,
        r#"{"temperature": 0.7, "topK": 40, "repeatPenalty": 1.1, "repeatLastN": 16,
            "presencePenalty": 0.3, "seed": 5, "maxTokens": 32, "draftMode": {"maxDraft": 6},
            "coltrane": {"prosody": "bias"}}"#,
        r#"{"temperature": 0.7, "seed": 8, "maxTokens": 24, "draftMode": true,
            "coltrane": {"preset": "json_schema", "schema":
            {"type": "object", "properties": {"list": {"type": "string"}}, "required": ["list"]}}}"#,
        r#"{"seed": 3, "maxTokens": 16, "moa": {"k": 3}, "draftMode": true}"#,
        r#"{"temperature": 0.8, "seed": 2, "maxTokens": 32, "health": true,
            "draftMode": {"adaptive": false, "maxDraft": 4}}"#,
        // The presence penalty's ids change only with a new token: a row after one asked anew
        // may be held again (by what the step asked, not what the row before it asked).
        r#"{"temperature": 0.7, "presencePenalty": 0.3, "seed": 8, "maxTokens": 32,
            "draftMode": true}"#,
    ];
    let wants: Vec<_> = options
        .iter()
        .map(|o| {
            let opts = GenerateOptions::from_json(o).unwrap();
            block_on(host.generate(&prompt, &opts, &mut |_| true)).unwrap()
        })
        .collect();
    for (mode, embedding) in embedding_modes() {
        let o = ModelOptions {
            context: MAX_CTX,
            max_batch: 16,
            embedding,
            ..ModelOptions::default()
        };
        let mut split = Split::open_holding(&bytes, 2, 2, o, 4);
        let (mut drafted, mut accepted) = (0, 0);
        // Each alone; then two at once (a draft shares the step's room).
        let runs: &[&[usize]] = match mode {
            "resident" => &[&[0], &[1], &[2], &[3], &[4], &[5]],
            _ => &[&[0, 1], &[2, 4], &[3, 5]],
        };
        // Each run's conversations numbered apart from those the stations keep.
        for (r, &run) in runs.iter().enumerate() {
            let mut seqs = Sequences::new(2, 2, 1 + 10 * r as u64);
            let arrivals: Vec<Arrival> = (run.iter())
                .map(|&i| Arrival {
                    at: 0,
                    prompt: &prompt,
                    options: options[i],
                    cancel_after: None,
                })
                .collect();
            let (got, _) = split.run_together(&mut seqs, &arrivals);
            for (g, &i) in got.iter().zip(run) {
                assert_eq!(g.ids, wants[i].ids, "{mode}: {}", options[i]);
                assert_eq!(g.text, wants[i].text, "{mode}: {}", options[i]);
                let d = g.report.as_ref().unwrap().decode.clone();
                eprintln!(
                    "{mode} {run:?}, {}: {} tokens in {} passes ({} verifying), {} of {} \
                     drafted kept",
                    options[i],
                    d.decode_tokens,
                    d.forward_passes,
                    d.verify_passes,
                    d.accepted,
                    d.drafted
                );
                assert!(d.forward_passes <= d.decode_tokens);
                drafted += d.drafted;
                accepted += d.accepted;
            }
            // What each kept conversation holds is what it carried, a rejected draft's
            // positions dropped: its ids.
            for (_, station) in &split.layers {
                for g in &got {
                    let held = station.position(g.admitted.id);
                    assert!(
                        held == 0 || held == prompt.len() + g.ids.len() - 1,
                        "{mode}"
                    );
                }
            }
        }
        // Drafts were carried, some kept and some not; rows whose pick asked otherwise than
        // their step were asked again.
        assert!(
            accepted > 0 && drafted > accepted,
            "{mode}: {accepted} of {drafted}"
        );
        assert!(split.fresh_asks > 0, "{mode}");
        assert_eq!(split.coord.stats().reads_since_open, 0, "{mode}");
    }
}

/// Gemma-3-270M (a 262,144-token vocabulary, its table sharded across the head stations) on
/// 4 layer + 4 head stations decodes as a whole host does in every mode the head shards answer
/// from candidates: greedy; sampled with top-k, top-p and min-p; the penalties; COLTRANE's JSON
/// Schema; MOA; the health monitor; and draft mode, greedy and sampled.
#[test]
fn gemma_on_four_and_four_stations_decodes_as_a_whole_host_does() {
    use futures::executor::block_on;
    let Some(path) = require_model("gemma-3-270m.knot") else {
        return;
    };
    let file = KnotFile::read(&path);
    let bytes: Rc<[u8]> = file.bytes.clone().into();
    let mut host = whole_host(&bytes);
    let tok = file.tokenizer();
    let capital = tok.encode_with_bos("The capital of France is").unwrap();
    let counting = tok
        .encode_with_bos(
            "one, two, three, four, five, six; one, two, three, four, five, six; one, two,",
        )
        .unwrap();
    let cases: [(&[u32], &str); 9] = [
        (&capital, r#"{"temperature": 0, "maxTokens": 16}"#),
        (
            &capital,
            r#"{"temperature": 0.8, "topK": 40, "topP": 0.9, "minP": 0.05, "seed": 3, "maxTokens": 16}"#,
        ),
        (
            &capital,
            r#"{"temperature": 0.7, "repeatPenalty": 1.1, "presencePenalty": 0.4,
            "frequencyPenalty": 0.2, "seed": 11, "maxTokens": 16}"#,
        ),
        (
            &capital,
            r#"{"maxTokens": 16, "coltrane": {"preset": "json_schema", "schema":
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}"#,
        ),
        (&capital, r#"{"seed": 3, "maxTokens": 16, "moa": {"k": 3}}"#),
        (
            &capital,
            r#"{"temperature": 0.9, "topP": 0.95, "seed": 4, "maxTokens": 16, "health": true}"#,
        ),
        (
            &capital,
            r#"{"temperature": 0, "maxTokens": 16, "coltrane": {"prosody": "bias"}, "health": true}"#,
        ),
        (
            &counting,
            r#"{"temperature": 0, "maxTokens": 16, "draftMode": true}"#,
        ),
        (
            &counting,
            r#"{"temperature": 0.7, "presencePenalty": 0.3, "seed": 8, "maxTokens": 16,
            "draftMode": true}"#,
        ),
    ];
    let o = ModelOptions {
        context: MAX_CTX,
        max_batch: 16,
        embedding: EmbeddingOptions {
            budget: 0,
            cache_bytes: 1 << 20,
        },
        ..ModelOptions::default()
    };
    let mut split = Split::open_holding(&bytes, 4, 4, o, 4);
    for (prompt, options) in cases {
        let opts = GenerateOptions::from_json(options).unwrap();
        let want = block_on(host.generate(prompt, &opts, &mut |_| true)).unwrap();
        split.again_rounds = 0;
        let (ids, text) = split.generate(prompt, options);
        assert_eq!(ids, want.ids, "{options}");
        assert_eq!(text, want.text, "{options}");
        eprintln!(
            "Gemma 4 + 4, {options}: {} tokens, {} rounds of /again",
            ids.len(),
            split.again_rounds
        );
    }
    assert_eq!(split.coord.stats().reads_since_open, 0);
}

/// Prefix replay per sequence: three conversations run together, then each one's next turn
/// (its whole history, the answer included, and a new message) run together again. Each turn
/// resumes the conversation the layer stations kept — claimed from every station, only the new
/// part carried, in chunks beside the others — and gets what a whole host gives for that
/// prompt cold, token for token and text for text, greedy, seeded and MOA. A claim a station
/// cannot grant (it lost the conversation) makes the turn a miss that runs whole, with the same
/// tokens; a sequence its consumer left is kept all the same and its next turn resumes it; the
/// oldest kept conversation is forgotten when the table is full.
#[test]
fn sequences_resume_kept_conversations_as_cold_runs_go() {
    use futures::executor::block_on;
    use host::PrefixStatus::{Hit, Miss};
    let Some(path) = require_model("SmolLM2-135M-Instruct.Q4_1.knot") else {
        return;
    };
    let file = KnotFile::read(&path);
    let bytes: Rc<[u8]> = file.bytes.clone().into();
    let mut host = whole_host(&bytes);
    let tok = file.tokenizer();
    let mut cold = |prompt: &[u32], options: &str| {
        let opts = GenerateOptions::from_json(options).unwrap();
        block_on(host.generate(prompt, &opts, &mut |_| true)).unwrap()
    };
    let options = [
        r#"{"temperature": 0, "maxTokens": 10, "reusePrefix": true}"#,
        r#"{"temperature": 0.9, "topP": 0.95, "seed": 7, "maxTokens": 10, "reusePrefix": true}"#,
        r#"{"seed": 3, "maxTokens": 10, "moa": {"k": 3}, "reusePrefix": true}"#,
    ];
    let first: Vec<Vec<u32>> = ["User: Name a colour.\nAssistant:", "Hi", "The sea is"]
        .iter()
        .map(|p| tok.encode_with_bos(p).unwrap())
        .collect();
    let o = ModelOptions {
        context: MAX_CTX,
        // 8 positions a step: a turn's new part runs in chunks beside the others.
        max_batch: 8,
        ..ModelOptions::default()
    };
    // Stations holding 6: 3 running and 3 kept.
    let mut split = Split::open_holding(&bytes, 2, 2, o, 6);
    let mut seqs = Sequences::new(3, 3, 100);
    let arrivals = |prompts: &[Vec<u32>], at: [usize; 3]| -> Vec<(usize, usize)> {
        (0..prompts.len()).map(|i| (i, at[i])).collect()
    };
    let run = |split: &mut Split,
               seqs: &mut Sequences,
               prompts: &[Vec<u32>],
               at,
               cancel: [Option<usize>; 3]| {
        let list: Vec<Arrival> = arrivals(prompts, at)
            .into_iter()
            .map(|(i, at)| Arrival {
                at,
                prompt: &prompts[i],
                options: options[i],
                cancel_after: cancel[i],
            })
            .collect();
        split.run_together(seqs, &list).0
    };
    let turn1 = run(&mut split, &mut seqs, &first, [0, 0, 1], [None; 3]);
    for (i, g) in turn1.iter().enumerate() {
        assert_eq!(
            g.ids,
            cold(&first[i], options[i]).ids,
            "turn 1, {}",
            options[i]
        );
        assert_eq!(g.prefix, Some(Miss), "nothing was kept yet");
    }
    assert_eq!((seqs.kept(), seqs.active()), (3, 0));
    // The next turn of each: the history as a chat client sends it (the answer re-encoded from
    // its text would do too: what counts is that it starts with what the stations hold).
    let next = |prompt: &[u32], got: &Got, more: &str| -> Vec<u32> {
        let mut p = prompt.to_vec();
        p.extend(&got.ids);
        p.extend(tok.encode(more).unwrap());
        p
    };
    let second: Vec<Vec<u32>> = (0..3)
        .map(|i| next(&first[i], &turn1[i], "\nUser: And then?\nAssistant:"))
        .collect();
    // Station 1 lost the third conversation: its claim is refused there.
    split.layers[1].1.forget(turn1[2].admitted.id);
    // The first is left by its consumer after 3 tokens.
    let turn2 = run(
        &mut split,
        &mut seqs,
        &second,
        [0, 0, 0],
        [Some(3), None, None],
    );
    for (i, g) in turn2.iter().enumerate() {
        assert_eq!(
            g.admitted.id, turn1[i].admitted.id,
            "turn 2 of {i} resumes its conversation"
        );
        let held = first[i].len() + turn1[i].ids.len() - 1;
        let claim = g.admitted.claim.expect("a kept prefix to claim");
        assert_eq!(claim.len, held, "all the stations hold of turn 1");
        let want = cold(&second[i], options[i]);
        let n = g.ids.len();
        assert_eq!(g.ids, want.ids[..n], "turn 2, {}", options[i]);
        if !g.canceled {
            assert_eq!(g.text, want.text, "turn 2, {}", options[i]);
        }
    }
    assert_eq!(turn2[0].prefix, Some(Hit));
    assert_eq!(turn2[1].prefix, Some(Hit));
    assert_eq!(
        turn2[2].prefix,
        Some(Miss),
        "a station could not grant the claim"
    );
    assert!(turn2[0].canceled && turn2[0].ids.len() == 3);
    // The one left after 3 tokens is kept with what it carried; its next turn resumes it.
    let third = vec![next(&second[0], &turn2[0], " Go on.")];
    let turn3 = run(&mut split, &mut seqs, &third, [0, 0, 0], [None; 3]);
    assert_eq!(turn3[0].admitted.id, turn1[0].admitted.id);
    assert_eq!(turn3[0].prefix, Some(Hit));
    assert_eq!(turn3[0].admitted.claim.unwrap().len, second[0].len() + 2);
    assert_eq!(turn3[0].ids, cold(&third[0], options[0]).ids, "turn 3");
    // Three kept, the table full: a new conversation ending pushes out the oldest (one of the
    // second and third chats: the first's turn 3 ended last), which the stations forget.
    let fresh = vec![tok.encode_with_bos("Count to three:").unwrap()];
    let turn = run(&mut split, &mut seqs, &fresh, [0, 0, 0], [None; 3]);
    assert_eq!(turn[0].prefix, Some(Miss));
    assert_eq!(seqs.kept(), 3);
    for (_, station) in &split.layers {
        let held = |g: &Got| station.position(g.admitted.id) > 0;
        assert!(held(&turn[0]) && held(&turn3[0]), "the newest are kept");
        assert!(
            held(&turn2[1]) != held(&turn2[2]),
            "the oldest kept is forgotten"
        );
    }
    assert_eq!(split.coord.stats().reads_since_open, 0);
}

/// The coordinator's sequences refuse what does not fit a step's order: past their count,
/// admissions, claims or cancellations while a step is in flight, a pick without a step, a
/// step planned before a claim is answered; a head shard's answer bundle of the wrong count
/// fails every sequence of that step with that shard's error, and the next step runs.
#[test]
fn conversations_run_together_refuse_what_breaks_the_step_order() {
    let Some(path) = require_model("SmolLM2-135M-Instruct.Q4_1.knot") else {
        return;
    };
    let file = KnotFile::read(&path);
    let bytes: Rc<[u8]> = file.bytes.clone().into();
    let split = Split::open_holding(&bytes, 2, 2, ModelOptions::default(), 4);
    let coord = &split.coord;
    let prompt = file.tokenizer().encode_with_bos("Hello there").unwrap();
    let opts = GenerateOptions::from_json(r#"{"temperature": 0, "maxTokens": 4}"#).unwrap();
    let mut seqs = Sequences::new(2, 0, 1);
    assert!(matches!(
        seqs.pick(coord, None),
        Err(host::HostError::NoContext)
    ));
    assert!(seqs.plan(coord).unwrap().is_none(), "nothing runs");
    let first = seqs.admit(coord, &prompt, &opts).unwrap();
    let second = seqs.admit(coord, &prompt, &opts).unwrap();
    assert_eq!((first.id, second.id), (1, 2));
    assert!(matches!(
        seqs.admit(coord, &prompt, &opts),
        Err(host::HostError::SequencesFull { max: 2 })
    ));
    // Options a split cannot honour are refused at admission.
    let draft = GenerateOptions::from_json(r#"{"draftMode": {"margin": 1}}"#).unwrap();
    assert!(Sequences::new(2, 0, 1)
        .admit(coord, &prompt, &draft)
        .is_err());
    // A claim answered for a sequence that waits for none is refused.
    assert!(seqs.claimed(1, &[Some(true)]).is_err());
    assert!(
        seqs.plan(coord).unwrap().unwrap().is_empty(),
        "the table is resident"
    );
    let (msg, logits) = seqs.message(coord).unwrap();
    assert!(logits && bundle::is(&msg, bundle::HIDDEN));
    for bad in [
        seqs.admit(coord, &prompt, &opts).map(drop),
        seqs.cancel(1).map(drop),
        seqs.plan(coord).map(drop),
        seqs.claimed(1, &[]).map(drop),
    ] {
        assert!(matches!(bad, Err(host::HostError::InvalidArgument(_))));
    }
    // Shard 0 answers a bundle of one answer for a step wanting one (only the oldest prompt
    // runs a step: the other waits its turn): shard 1 a malformed one.
    let answers = vec![
        Answer::Value(bundle::encode(bundle::ANSWERS, [])),
        Answer::Missing,
    ];
    let events = seqs.pick(coord, Some(answers)).unwrap();
    assert_eq!(events.len(), 1);
    assert!(events[0].done && matches!(events[0].token, Err(host::HostError::Station(_))));
    assert_eq!(seqs.active(), 1, "the other conversation goes on");
    assert!(seqs.plan(coord).unwrap().unwrap().is_empty());
    seqs.message(coord).unwrap();
    assert_eq!(seqs.abandon(), vec![2]);
    assert_eq!(seqs.active(), 0);
    // Neither is kept: the one whose answers failed went through the layers uncounted, the
    // abandoned one's step is unknown; the stations forget both.
    let settled = seqs.settle();
    assert!(settled.keep.is_empty());
    assert_eq!(settled.forget, vec![1, 2]);
    // A step given up on ends the sequences in it, not the prompt waiting for its turn.
    let mut seqs = Sequences::new(2, 0, 20);
    seqs.admit(coord, &prompt, &opts).unwrap();
    seqs.admit(coord, &prompt, &opts).unwrap();
    seqs.plan(coord).unwrap();
    seqs.message(coord).unwrap();
    assert_eq!(seqs.abandon(), vec![20]);
    assert_eq!(seqs.active(), 1);
    // A sequence admitted with a kept prefix waits for its claim before any step.
    let mut split = split;
    let mut seqs = Sequences::new(1, 1, 10);
    seqs.admit(&split.coord, &prompt, &opts).unwrap();
    seqs.plan(&split.coord).unwrap();
    let (msg, _) = seqs.message(&split.coord).unwrap();
    let msg = split.through_layers(msg);
    let answers = split
        .head_answers(&msg, &seqs)
        .into_iter()
        .map(Answer::Value)
        .collect();
    seqs.pick(&split.coord, Some(answers)).unwrap();
    assert!(seqs.cancel(10).unwrap());
    assert_eq!(
        seqs.settle().keep.len(),
        1,
        "kept: the stations hold what it carried"
    );
    let reuse = r#"{"temperature": 0, "maxTokens": 4, "reusePrefix": true}"#;
    let reuse = GenerateOptions::from_json(reuse).unwrap();
    let again = seqs.admit(&split.coord, &prompt, &reuse).unwrap();
    assert_eq!(again.id, 10, "it resumes the kept conversation");
    assert!(again.claim.is_some());
    assert!(matches!(
        seqs.plan(&split.coord),
        Err(host::HostError::InvalidArgument(ref m)) if m.contains("claim")
    ));
    // Left before its claim was answered: the kept conversation goes back as it was.
    assert!(seqs.cancel(10).unwrap());
    assert_eq!(seqs.settle(), Default::default());
    assert_eq!(seqs.kept(), 1);
}
