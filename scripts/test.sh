#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run). Installs what it needs on a fresh machine:
# the wasm targets, the default model, wasm-bindgen-cli and the npm devDependencies (binaryen, bun,
# deno, typescript; miniflare and openai for the Worker; playwright-core and Debian's chromium for
# the browser page). Node comes with the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n== %s\n' "$*"; }

step "toolchain targets"
rustup target add wasm32-unknown-unknown wasm32-wasip1

step "real models (SmolLM2-135M-Instruct, Gemma-3-270M) and the JSON Schema Test Suite"
scripts/prepare-model.sh --all
scripts/fetch-json-schema-suite.sh

step "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "native tests"
# A missing model fails the model tests instead of skipping them.
export KNOT_REQUIRE_MODELS=1
cargo test --workspace --no-fail-fast

step "fuzzing: every target for 20 s (nightly, cargo-fuzz, address sanitizer; docs/fuzzing.md)"
scripts/fuzz.sh 20

step "wasm32 build (the crates the wasm package is made of)"
cargo build --target wasm32-unknown-unknown -p knot -p engine -p moa -p coltrane -p carrier -p host

step "wasm32 tests in Node (WASI): kernels, tokenizer, decode pipeline, MOA and COLTRANE, parity, batch identity, stations"
cargo test --no-fail-fast --target wasm32-wasip1 -p knot -p engine -p moa -p coltrane -p carrier
cargo test --no-fail-fast --target wasm32-wasip1 -p knot-suite --test parity --test tokenizer --test bad_input --test batch_identity --test stations

step "wasm package: build (wasm-bindgen, wasm-opt, size budget) and the JS suite in Node, Bun and Deno"
scripts/build-wasm.sh
(cd pkg && npm test)

step "the Worker in workerd (Miniflare, local R2), driven by the official openai client"
(cd examples/worker && npm ci --no-audit --no-fund && npm test)

step "the browser page in headless Chromium (playwright-core; Chromium from Debian's packages)"
(cd examples/web && npm ci --no-audit --no-fund && npm test)
