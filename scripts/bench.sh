#!/usr/bin/env bash
# Speed on the default model, everything measured in one run so the ratios are meaningful on a
# shared, noisy machine: the engine natively and as wasm32+SIMD128 in Node (benches/forward.rs,
# same code), and llama.cpp (single thread) as the baseline.
#   scripts/bench.sh                  # ours only
#   scripts/bench.sh --llama-cpp      # also llama.cpp via llama-cpp-python==0.3.36, built from
#                                     # source into .venv-bench (10-20 min the first time)
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(scripts/prepare-model.sh)
gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf
rustup target add wasm32-wasip1 >/dev/null 2>&1

llama=""
if [ "${1:-}" = "--llama-cpp" ]; then
  if [ ! -x .venv-bench/bin/python ] || ! .venv-bench/bin/python -c 'import llama_cpp' 2>/dev/null; then
    python3 -m venv .venv-bench
    .venv-bench/bin/pip install --quiet llama-cpp-python==0.3.36
  fi
  llama=.venv-bench/bin/python
fi

cargo bench --quiet --bench forward --no-run >/dev/null 2>&1
cargo bench --quiet --bench forward --target wasm32-wasip1 --no-run >/dev/null 2>&1
results=$(mktemp)
# Interleave the runs so that load from elsewhere hits each of them alike.
for round in 1 2; do
  cargo bench --quiet --bench forward -- "$PWD/$model" | tail -n 1 >> "$results"
  cargo bench --quiet --bench forward --target wasm32-wasip1 -- "$PWD/$model" | tail -n 1 >> "$results"
  if [ -n "$llama" ]; then "$llama" scripts/bench/llama_cpp_baseline.py "$gguf" 1 >> "$results"; fi
done
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
best = {}
for r in rows:  # best of the rounds: the least disturbed measurement of each
    b = best.setdefault(r["target"], {"prefill_tok_s": 0, "decode_tok_s": 0})
    for k in ("prefill_tok_s", "decode_tok_s"):
        b[k] = max(b[k], r[k])
names = {"x86_64": "engine native (1 thread)", "wasm32": "engine wasm32+simd128 in Node", "llama.cpp": "llama.cpp native (1 thread)"}
print(f"{'':34} {'prefill tok/s':>14} {'decode tok/s':>13}")
for t, b in best.items():
    print(f"{names.get(t, t):34} {b['prefill_tok_s']:14.1f} {b['decode_tok_s']:13.1f}")
base = best.get("llama.cpp")
if base:
    for t, b in best.items():
        if t != "llama.cpp":
            print(f"{names.get(t, t)} / llama.cpp: prefill {b['prefill_tok_s']/base['prefill_tok_s']:.2f}x, decode {b['decode_tok_s']/base['decode_tok_s']:.2f}x")
PY
rm -f "$results"
