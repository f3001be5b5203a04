"""llama.cpp baseline for `scripts/bench.sh`: single-thread prefill and decode tokens/s on a GGUF,
measured the same way as benches/forward.rs (128-token prompt as one batch, then 64 single-token
steps, median of 3 runs, no sampling cost). Needs the `llama_cpp` module (pip package
llama-cpp-python, built from source); prints one JSON line."""
import json, statistics, sys, time

import llama_cpp

path = sys.argv[1]
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
prompt_len, n, runs = 128, 64, 3
llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=threads,
                      n_threads_batch=threads, verbose=False)
vocab = llm.n_vocab()
prompt = [(i * 7919 + 13) % vocab for i in range(prompt_len)]
prefill, decode = [], []
for _ in range(runs):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    prefill.append(prompt_len / (time.perf_counter() - t0))
    nxt = int(llm.scores[llm.n_tokens - 1].argmax())
    t1 = time.perf_counter()
    for _ in range(n):
        llm.eval([nxt])
        nxt = int(llm.scores[llm.n_tokens - 1].argmax())
    decode.append(n / (time.perf_counter() - t1))
print(json.dumps({"target": "llama.cpp", "threads": threads, "version": llama_cpp.__version__,
                  "prefill_tok_s": round(statistics.median(prefill), 2),
                  "decode_tok_s": round(statistics.median(decode), 2)}))
