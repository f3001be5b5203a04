"""llama.cpp baseline for `scripts/bench.sh`: single-thread prefill and decode tokens/s on a GGUF,
measured the same way as benches/forward.rs (the prompt as one batch, then 64 single-token steps,
median of 3 runs — 1 run above 1024 tokens — no sampling cost). Needs the `llama_cpp` module (pip
package llama-cpp-python, built from source); prints one JSON line.
    llama_cpp_baseline.py MODEL.gguf [THREADS=1] [PROMPT_LEN=128]"""
import json, statistics, sys, time

import llama_cpp
import numpy as np

path = sys.argv[1]
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
prompt_len = int(sys.argv[3]) if len(sys.argv) > 3 else 128
n = 64
runs = 1 if prompt_len > 1024 else 3
# Room for the prompt and the decode steps after it. The prompt goes to llama.cpp as one batch;
# llama.cpp runs it in physical batches of its default size (n_ubatch 512), as llama-bench does.
n_ctx = prompt_len + n + 16
llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=max(512, prompt_len),
                      n_threads=threads, n_threads_batch=threads, verbose=False)
vocab = llm.n_vocab()


def greedy():
    # The last evaluated token's logits, straight from the context: without logits_all,
    # llama-cpp-python does not copy them into `llm.scores`.
    return int(np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(vocab,)).argmax())


prompt = [(i * 7919 + 13) % vocab for i in range(prompt_len)]
prefill, decode = [], []
for _ in range(runs):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    prefill.append(prompt_len / (time.perf_counter() - t0))
    nxt = greedy()
    t1 = time.perf_counter()
    for _ in range(n):
        llm.eval([nxt])
        nxt = greedy()
    decode.append(n / (time.perf_counter() - t1))
print(json.dumps({"target": "llama.cpp", "threads": threads, "version": llama_cpp.__version__,
                  "prefill_tok_s": round(statistics.median(prefill), 2),
                  "decode_tok_s": round(statistics.median(decode), 2),
                  "prompt_len": prompt_len, "n": n, "runs": runs}))
