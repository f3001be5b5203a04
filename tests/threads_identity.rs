//! Threads change nothing: a matmul's rows split across 2 or 4 threads give the logits one
//! thread gives, bit for bit — prefill and decode steps on the real models — and so the same
//! tokens, greedy and seeded, through the host's decode loop. (The kernels' own check, every
//! format and kernel at 1–4 threads, is `engine::quant`'s `every_thread_count_gives_the_same_bits`.)

use engine::decode::GenerateOptions;
use engine::quant::with_threads;
use knot_suite::{require_model, KnotFile};
use std::rc::Rc;

#[test]
fn every_thread_count_gives_the_same_logits_and_tokens() {
    for name in ["SmolLM2-135M-Instruct.Q4_1.knot", "gemma-3-270m.knot"] {
        let Some(path) = require_model(name) else {
            continue;
        };
        let file = KnotFile::read(&path);
        let model = file.model();
        let tok = file.tokenizer();
        let prompt = tok
            .encode_with_bos("Rust and WebAssembly: a short list of reasons to use both together")
            .unwrap();
        let logits = |threads: usize| {
            with_threads(threads, || {
                let mut s = engine::Session::new(&model.config, 96).unwrap();
                let mut out = vec![model.forward(&mut s, &prompt, true).unwrap().to_vec()];
                for t in [42u32, 7, 1000, 3] {
                    out.push(model.forward(&mut s, &[t], false).unwrap().to_vec());
                }
                out
            })
            .unwrap()
        };
        let bits = |v: &[Vec<f32>]| {
            v.iter()
                .map(|r| r.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        };
        let one = logits(1);
        for t in [2, 4] {
            assert!(
                bits(&logits(t)) == bits(&one),
                "{name}: logits at {t} threads"
            );
        }

        let bytes: Rc<[u8]> = file.bytes.clone().into();
        let generate = |threads: usize, options: &str| {
            with_threads(threads, || {
                let mut host = futures::executor::block_on(host::Host::open(
                    Rc::new(host::MemorySource::new(bytes.clone())),
                    host::HostOptions {
                        // No read timer: the executor here has none.
                        read_policy: host::ReadPolicy {
                            timeout_ms: 0,
                            ..host::ReadPolicy::default()
                        },
                        max_context: 128,
                        ..host::HostOptions::default()
                    },
                ))
                .unwrap();
                let opts = GenerateOptions::from_json(options).unwrap();
                futures::executor::block_on(host.generate(&prompt, &opts, &mut |_| true)).unwrap()
            })
            .unwrap()
        };
        for options in [
            r#"{"temperature": 0, "maxTokens": 12}"#,
            r#"{"temperature": 0.9, "topP": 0.95, "seed": 11, "maxTokens": 12}"#,
        ] {
            let want = generate(1, options);
            for t in [2, 4] {
                let got = generate(t, options);
                assert_eq!(got.ids, want.ids, "{name} at {t} threads: {options}");
                assert_eq!(got.text, want.text, "{name} at {t} threads: {options}");
            }
        }
    }
}
