#!/usr/bin/env bash
# JSON-mode mask time, COLTRANE against the llguidance crate on the same tokenizer and the same
# documents (benches/llguidance: a standalone package, so llguidance is never part of the
# workspace's build, tests or CI; nothing else calls this script). Runs on every model present
# of SmolLM2-135M (49k vocabulary) and Gemma-3-270m (262k).
#   scripts/bench-json-mask.sh                 # readable tables
#   scripts/bench-json-mask.sh --json          # one JSON object
#   scripts/bench-json-mask.sh --runs 3        # the documents 3 times over (fresh matchers)
set -euo pipefail
cd "$(dirname "$0")/.."
# Its own target directory (JSON_MASK_TARGET_DIR overrides), apart from the workspace's.
export CARGO_TARGET_DIR="${JSON_MASK_TARGET_DIR:-$PWD/target/llguidance-bench}"
cargo build --quiet --release --manifest-path benches/llguidance/Cargo.toml

models=()
for m in models/SmolLM2-135M-Instruct.Q4_1.knot models/gemma-3-270m.knot; do
  if [ -f "$m" ]; then models+=("$m"); else echo "skipping $m (not present)" >&2; fi
done
if [ ${#models[@]} -eq 0 ]; then
  echo "no model present: see scripts/prepare-model.sh and scripts/fetch-gemma.sh" >&2
  exit 1
fi
# What was measured: the commit, and whether COLTRANE had uncommitted changes.
echo "coltrane at $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- crates/coltrane 2>/dev/null || echo ' + uncommitted changes')" >&2
"$CARGO_TARGET_DIR/release/json-mask-bench" "$@" "${models[@]}"
