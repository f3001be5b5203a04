//! The host over in-memory and instrumented sources: parity with the engine run directly, LRU
//! and prefetch behaviour counted read by read, and recovery from failing sources.

use engine::decode::GenerateOptions;
mod common;

use common::Instrumented;
use engine::EngineError;
use futures::executor::block_on;
use host::{ErrorCode, Host, HostError, HostOptions, SourceError};
use knot::Knot;
use knot_suite::{fixture, load_reference, require_model};
use std::rc::Rc;

fn tiny_bytes() -> Vec<u8> {
    std::fs::read(fixture("tiny/llama-f32.knot")).unwrap()
}

fn open(src: Rc<Instrumented>, lru: usize) -> Host {
    let opts = HostOptions {
        lru_capacity: lru,
        ..HostOptions::default()
    };
    block_on(Host::open(src, opts)).unwrap()
}

/// Greedy options for `n` tokens, continuing the conversation or not.
fn opts(n: usize, continue_session: bool) -> GenerateOptions {
    GenerateOptions {
        max_tokens: n,
        continue_session,
        ..GenerateOptions::default()
    }
}

fn generate(
    host: &mut Host,
    prompt: &[u32],
    n: usize,
    continue_session: bool,
) -> Result<Vec<u32>, HostError> {
    let out = block_on(host.generate(prompt, &opts(n, continue_session), &mut |_| true))?;
    Ok(out.ids)
}

fn greedy(host: &mut Host, prompt: &[u32], n: usize) -> Vec<u32> {
    generate(host, prompt, n, false).unwrap()
}

#[test]
fn greedy_tokens_match_the_reference() {
    let reference = load_reference("tiny/llama-f32.json");
    for lru in [1, 2, 16] {
        let mut host = open(Instrumented::new(tiny_bytes()), lru);
        for case in &reference.cases {
            // The tiny model's end-of-text id may appear in the reference continuation.
            let eos = &host.config().eos_ids.clone();
            let want: Vec<u32> = match case.greedy_ids.iter().position(|id| eos.contains(id)) {
                Some(i) => case.greedy_ids[..=i].to_vec(),
                None => case.greedy_ids.clone(),
            };
            assert_eq!(
                greedy(&mut host, &case.prompt_ids, 32),
                want,
                "lru {lru} {}",
                case.name
            );
        }
    }
}

#[test]
fn open_reads_exactly_header_metadata_and_resident_span() {
    let bytes = tiny_bytes();
    let knot = Knot::from_bytes(&bytes).unwrap();
    let src = Instrumented::new(bytes);
    let host = open(src.clone(), 2);
    let log = src.log.borrow().clone();
    let (tok, res) = (knot.tokenizer_range(), knot.resident_range());
    assert_eq!(
        log,
        vec![(0, 10), (10, knot.payload_offset), (tok.start, res.end)]
    );
    assert!(
        res.start - tok.end < 64,
        "only alignment padding between blob and tensors"
    );
    let s = host.stats();
    assert_eq!(s.bytes_fetched, res.end - tok.start + knot.payload_offset);
    assert_eq!(s.range_reads, 3);
}

#[test]
fn capacity_covering_all_layers_means_no_misses_after_the_first_token() {
    let bytes = tiny_bytes();
    let knot = Knot::from_bytes(&bytes).unwrap();
    let n_layers = knot.meta.layers.len();
    let src = Instrumented::new(bytes);
    let mut host = open(src.clone(), n_layers);
    greedy(&mut host, &[1, 2, 3], 1);
    let after_first = host.stats();
    assert!(after_first.cache.misses >= 1);
    greedy(&mut host, &[4, 5], 8);
    let s = host.stats();
    assert_eq!(s.cache.misses, after_first.cache.misses, "no new misses");
    assert_eq!(s.cache.evictions, 0);
    // Bytes fetched: the prefix reads plus each layer span exactly once, nothing more.
    let layer_bytes: u64 = knot.meta.layers.iter().map(|s| s.size).sum();
    let res_end = knot.resident_range().end;
    assert_eq!(
        s.bytes_fetched,
        knot.payload_offset + (res_end - knot.tokenizer_range().start) + layer_bytes
    );
}

/// Reads issued per token with a cache smaller than the model: exactly one per layer.
fn check_reads_per_token(bytes: Vec<u8>, lru: usize) {
    let n_layers = Knot::from_bytes(&bytes).unwrap().meta.layers.len();
    assert!(lru < n_layers);
    let src = Instrumented::new(bytes);
    let mut host = open(src.clone(), lru);
    let before = src.reads();
    // A 20-token prompt runs layer-major: one read per layer for the whole prompt.
    let prompt: Vec<u32> = (0..20).collect();
    let out = greedy(&mut host, &prompt, 6);
    let forwards = out.len(); // the prompt, then one per further token
    assert_eq!(src.reads() - before, forwards * n_layers, "lru {lru}");
    assert!(host.stats().cache.resident_layers <= lru);
}

#[test]
fn small_capacity_reads_each_layer_once_per_token() {
    check_reads_per_token(tiny_bytes(), 1);
    if let Some(path) = require_model("SmolLM2-135M-Instruct.Q4_1.knot") {
        for lru in [1, 2] {
            check_reads_per_token(std::fs::read(path.clone()).unwrap(), lru);
        }
    }
}

#[test]
fn peak_layer_memory_follows_capacity() {
    let knot = Knot::from_bytes(&tiny_bytes()).unwrap();
    let span = knot.meta.layers[0].size;
    let mut host = open(Instrumented::new(tiny_bytes()), 1);
    greedy(&mut host, &[1, 2, 3], 4);
    // Capacity 1 plus the prefetched next layer.
    assert!(host.stats().cache.peak_layer_bytes <= 2 * span);
}

#[test]
fn a_failed_read_is_an_error_and_the_host_recovers() {
    let bytes = tiny_bytes();
    let knot = Knot::from_bytes(&bytes).unwrap();
    let expected = greedy(
        &mut open(Instrumented::new(bytes.clone()), 1),
        &[7, 8, 9],
        6,
    );
    let src = Instrumented::new(bytes);
    let mut host = open(src.clone(), 1);
    // Layer 0 is the prompt's first read, one the host waits for (a failed prefetch is read
    // again instead: see tests/reads.rs).
    src.fail_at.set(Some(knot.layer_range(0).unwrap().start));
    let err = generate(&mut host, &[7, 8, 9], 6, false).unwrap_err();
    assert!(
        matches!(err, HostError::Source(SourceError::Permanent { .. })),
        "{err}"
    );
    assert_eq!(greedy(&mut host, &[7, 8, 9], 6), expected);
    // Mid-generation failure, then continuing the same session.
    let mut host = open(src.clone(), 1);
    let first = greedy(&mut host, &[7, 8, 9], 3);
    src.fail_at.set(Some(knot.layer_range(0).unwrap().start));
    assert!(generate(&mut host, &[], 3, true).is_err());
    let rest = generate(&mut host, &[], 3, true).unwrap();
    assert_eq!([first, rest].concat(), expected);
}

#[test]
fn short_reads_are_length_errors() {
    let src = Instrumented::new(tiny_bytes());
    src.short.set(true);
    let opts = HostOptions {
        read_policy: host::ReadPolicy {
            backoff_ms: 1,
            ..Default::default()
        },
        ..HostOptions::default()
    };
    let err = block_on(Host::open(src, opts)).err().unwrap();
    // Retried as transient, then surfaced with the last cause and the attempt count.
    let HostError::Source(SourceError::Exhausted { attempts: 3, cause }) = &err else {
        panic!("{err}")
    };
    assert!(
        matches!(
            **cause,
            SourceError::Length {
                got: 9,
                expected: 10,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().ends_with("(gave up after 3 attempts)"),
        "{err}"
    );
}

#[test]
fn bad_inputs_are_typed_errors() {
    let opts = HostOptions {
        lru_capacity: 0,
        ..HostOptions::default()
    };
    let err = block_on(Host::open(Instrumented::new(tiny_bytes()), opts))
        .err()
        .unwrap();
    assert_eq!(
        (err.code(), err.param()),
        (ErrorCode::InvalidOption, Some("lruCapacity"))
    );
    let err = block_on(Host::open(
        Instrumented::new(b"GGUF and more bytes".to_vec()),
        HostOptions::default(),
    ))
    .err()
    .unwrap();
    assert!(matches!(err, HostError::Knot(_)), "{err}");
    assert_eq!(err.code(), ErrorCode::InvalidModel);
    let mut host = open(Instrumented::new(tiny_bytes()), 2);
    let err = generate(&mut host, &[1, 999], 2, false).unwrap_err();
    assert!(matches!(
        err,
        HostError::Engine(engine::EngineError::TokenOutOfRange { id: 999, .. })
    ));
    assert_eq!(err.code(), ErrorCode::TokenOutOfRange);
    let err = generate(&mut host, &[], 2, false).unwrap_err();
    assert!(matches!(err, HostError::EmptyPrompt), "{err}");
    let err = generate(&mut host, &[], 2, true).unwrap_err();
    assert!(matches!(err, HostError::NoContext), "{err}");
    let long: Vec<u32> = (0..200).map(|i| i % 256).collect();
    let err = generate(&mut host, &long, 2, false).unwrap_err();
    assert!(
        matches!(
            err,
            HostError::PromptTooLong {
                tokens: 200,
                context: 128
            }
        ),
        "{err}"
    );
    let bad_moa = GenerateOptions::from_json(r#"{"moa": {"k": 0}}"#);
    assert!(bad_moa.is_err());
    assert!(matches!(
        host.prefetch_layer(99),
        Err(HostError::NoSuchLayer(99))
    ));
    assert!(greedy(&mut host, &[1, 2], 0).is_empty());
}

#[test]
fn on_token_can_stop_generation() {
    let mut host = open(Instrumented::new(tiny_bytes()), 2);
    let mut seen = 0;
    let out = block_on(host.generate(&[1, 2, 3], &opts(20, false), &mut |_| {
        seen += 1;
        seen < 3
    }))
    .unwrap();
    assert_eq!(out.ids.len(), 3);
    assert_eq!(out.finish_reason, None);
}

#[test]
fn smollm2_through_the_host_matches_the_engine_in_memory() {
    let Some(path) = require_model("SmolLM2-135M-Instruct.Q4_1.knot") else {
        return;
    };
    let bytes = std::fs::read(&path).unwrap();
    let file = knot_suite::KnotFile::read(&path);
    let model = file.model();
    let prompt = [1u32, 9690, 198, 2683, 359, 253, 5356, 5646];
    let mut s = engine::Session::new(&model.config, 64).unwrap();
    let mut want =
        vec![engine::sampler::greedy(model.forward(&mut s, &prompt, false).unwrap()).unwrap()];
    while want.len() < 12 {
        let next = engine::sampler::greedy(
            model
                .forward(&mut s, &[*want.last().unwrap()], false)
                .unwrap(),
        )
        .unwrap();
        want.push(next);
    }
    let mut host = open(Instrumented::new(bytes), 3);
    let got = greedy(&mut host, &prompt, 12);
    assert_eq!(got, want[..got.len()]);
}

/// The tiny fixture rebuilt through the knot writer after `edit` changed its config or tensor
/// shapes; tensor bytes are zeros (only opening is tested).
fn rebuilt(edit: impl FnOnce(&mut knot::KnotBuilder)) -> Vec<u8> {
    let bytes = tiny_bytes();
    let k = Knot::from_bytes(&bytes).unwrap();
    let tok = k.tokenizer_range();
    let tokenizer = Knot::parse_tokenizer(&bytes[tok.start as usize..tok.end as usize]).unwrap();
    let m = &k.meta;
    let mut b = knot::KnotBuilder::new(&m.name, &m.architecture, m.config.clone(), tokenizer);
    b.chat_template = m.chat_template.clone();
    for t in &m.tensors {
        let dtype = knot::DType::from_name(&t.dtype).unwrap();
        b.add_tensor(&t.name, dtype, t.shape.clone());
    }
    edit(&mut b);
    let plan = b.plan().unwrap();
    let largest = plan.tensors().iter().map(|t| t.size).max().unwrap();
    let zeros = vec![0u8; largest as usize];
    plan.to_bytes(|name| {
        let size = plan.tensors().iter().find(|t| t.name == name)?.size;
        Some(&zeros[..size as usize])
    })
    .unwrap()
}

fn open_err(bytes: Vec<u8>) -> HostError {
    block_on(Host::open(Instrumented::new(bytes), HostOptions::default()))
        .err()
        .expect("the file opened")
}

#[test]
fn configs_that_lie_about_the_layers_fail_at_open() {
    // The rebuilt file itself opens.
    block_on(Host::open(
        Instrumented::new(rebuilt(|_| {})),
        HostOptions::default(),
    ))
    .unwrap();

    // ffn_dim far beyond what the layers hold: above the cap, then within it.
    let err = open_err(rebuilt(|b| b.config.ffn_dim = 1 << 30));
    assert!(
        matches!(&err, HostError::Engine(EngineError::BadConfig(m)) if m.contains("ffn_dim")),
        "{err}"
    );
    let err = open_err(rebuilt(|b| b.config.ffn_dim = engine::model::MAX_FFN_DIM));
    assert!(
        matches!(&err, HostError::Engine(EngineError::BadShape { name, .. }) if name == "blk.0.ffn_gate.weight"),
        "{err}"
    );
    // One tensor of the last layer disagrees with the config.
    let err = open_err(rebuilt(|b| {
        let last = b.config.n_layers - 1;
        let t = b
            .tensors
            .iter_mut()
            .find(|t| t.name == format!("blk.{last}.attn_q.weight"))
            .unwrap();
        t.shape[0] /= 2;
    }));
    assert!(
        matches!(&err, HostError::Engine(EngineError::BadShape { name, .. }) if name.ends_with("attn_q.weight")),
        "{err}"
    );
    // RoPE over more dims than a head has (the rope tables would be sized by it).
    let err = open_err(rebuilt(|b| b.config.rope_dim = 1 << 31));
    assert!(
        matches!(&err, HostError::Engine(EngineError::BadConfig(m)) if m.contains("rope_dim")),
        "{err}"
    );
    // A float far out of its range (the model would emit zeros).
    let err = open_err(rebuilt(|b| b.config.norm_eps = 1e30));
    assert!(
        matches!(&err, HostError::Engine(EngineError::BadConfig(m)) if m.contains("norm_eps")),
        "{err}"
    );
}

/// A source whose length is unknown (an HTTP server that does not say): the reader can then
/// check spans only against u64::MAX.
struct UnknownLength(host::MemorySource);

impl host::ByteSource for UnknownLength {
    fn len(&self) -> Option<u64> {
        None
    }
    fn read(&self, start: u64, end: u64) -> host::ReadFuture {
        self.0.read(start, end)
    }
}

#[test]
fn a_huge_tokenizer_blob_is_refused_before_it_is_read() {
    // The blob moved past the end of the tensors and claimed to be 1 TiB: with no known length
    // the file validates, and the host used to ask the source for all of it in one read.
    let bytes = tiny_bytes();
    let k = Knot::from_bytes(&bytes).unwrap();
    let mut meta = k.meta.clone();
    let payload_len = k.file_len - k.payload_offset;
    meta.tokenizer.blob = knot::Span {
        offset: payload_len,
        size: 1 << 40,
    };
    let mut json = serde_json::to_vec(&meta).unwrap();
    // Keep the payload where it was: pad the JSON as the writer does.
    let codec_at = (knot::FIXED_HEADER_LEN + json.len()).div_ceil(64) * 64;
    json.resize(codec_at - knot::FIXED_HEADER_LEN, b' ');
    let header = knot::FixedHeader {
        version: knot::VERSION,
        meta_len: json.len() as u32,
    };
    let mut file = header.to_bytes().to_vec();
    file.extend_from_slice(&json);
    file.push(knot::CODEC_RAW);
    file.extend_from_slice(&bytes[k.payload_offset as usize..]);
    let src = Rc::new(UnknownLength(host::MemorySource::new(file)));
    let err = block_on(Host::open(src, HostOptions::default()))
        .err()
        .unwrap();
    assert!(
        matches!(&err, HostError::TooLarge { what, bytes, .. } if what == "the tokenizer blob" && *bytes == 1 << 40),
        "{err}"
    );
}
