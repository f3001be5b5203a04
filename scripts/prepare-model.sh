#!/usr/bin/env bash
# Makes sure the default model is present as a knot file: downloads the GGUF (scripts/fetch-model.sh,
# sha256-checked) and converts it with the release `knot` binary when the knot is missing or stale.
# Prints the knot's path.
set -euo pipefail
cd "$(dirname "$0")/.."
gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf
out=models/SmolLM2-135M-Instruct.Q4_1.knot
scripts/fetch-model.sh models >&2
cargo build --release --quiet -p knot-cli
if [ ! -s "$out" ] || [ "$gguf" -nt "$out" ] || [ target/release/knot -nt "$out" ]; then
  target/release/knot convert "$gguf" "$out.tmp" >&2
  mv "$out.tmp" "$out"
fi
echo "$out"
