#!/usr/bin/env bash
# Writes models/gemma3-tokenizer.json, Gemma 3's tokenizer as knot::TokenizerData JSON, which the
# engine's Gemma tokenizer parity tests read (the 262144-token vocabulary is too large to commit).
# Needs models/gemma-3-270m-q4_k_m.gguf and a Python with the `gguf` package
# (PYTHON="$VENV/bin/python", the reference venv of scripts/reference/README.md). Idempotent: does nothing
# when the JSON is newer than the GGUF.
set -euo pipefail
cd "$(dirname "$0")/.."
gguf=models/gemma-3-270m-q4_k_m.gguf
out=models/gemma3-tokenizer.json
PYTHON="${PYTHON:-python3}"
if [ ! -f "$gguf" ]; then
  echo "gemma3-tokenizer: $gguf is missing (fetch the Gemma-3-270M GGUF first)" >&2
  exit 1
fi
if [ -s "$out" ] && [ "$out" -nt "$gguf" ]; then
  exit 0
fi
"$PYTHON" scripts/reference/dump_gguf_tokenizer.py "$gguf" "$out.tmp"
mv "$out.tmp" "$out"
echo "$out"
