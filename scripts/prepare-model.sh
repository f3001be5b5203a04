#!/usr/bin/env bash
# Makes sure the real models are present as knot files: downloads the GGUFs (sha256-checked) and
# converts them with the `knot` binary when a knot is missing or stale. Prints the path of the
# default model's knot (SmolLM2-135M-Instruct); Gemma-3-270M is prepared too with --all.
# KNOT_BIN names a knot binary already built (the test suite passes its test-profile build, whose
# conversion is byte-identical); without it the release binary is built and used.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${KNOT_BIN:-target/release/knot}
if [ -z "${KNOT_BIN:-}" ]; then
  cargo build --release --quiet -p knot-cli
fi

convert() { # GGUF KNOT
  if [ ! -s "$2" ] || [ "$1" -nt "$2" ] || [ "$bin" -nt "$2" ]; then
    "$bin" convert "$1" "$2.tmp" >&2
    mv "$2.tmp" "$2"
  fi
}

scripts/fetch-model.sh models >&2
convert models/SmolLM2-135M-Instruct.Q4_1.gguf models/SmolLM2-135M-Instruct.Q4_1.knot
if [ "${1:-}" = "--all" ]; then
  scripts/fetch-gemma.sh models >&2
  convert models/gemma-3-270m-q4_k_m.gguf models/gemma-3-270m.knot
fi
echo models/SmolLM2-135M-Instruct.Q4_1.knot
