#!/usr/bin/env bash
# The main job: generate an answer from the default model (SmolLM2-135M-Instruct) on a fresh
# machine. Extra arguments go to `knot generate` (e.g. --prompt "..." -n 64 --temperature 0).
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(scripts/prepare-model.sh)
if [ $# -eq 0 ]; then
  set -- --prompt "What is the capital of France? Answer in one sentence." -n 64 --temperature 0
fi
exec target/release/knot generate "$model" --chat "$@"
