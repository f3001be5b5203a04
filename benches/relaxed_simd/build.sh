#!/bin/sh
# Builds the relaxed-SIMD probe twice from one source: SIMD128 only, and SIMD128 + relaxed SIMD.
#   benches/relaxed_simd/build.sh && pkg/node_modules/.bin/deno run --allow-read benches/relaxed_simd/bench.mjs [rounds] [ms]
#   node --experimental-wasm-relaxed-simd benches/relaxed_simd/bench.mjs [rounds] [ms]    (Node 20)
set -e
cd "$(dirname "$0")"
RUSTFLAGS="-C target-feature=+simd128" cargo build --release --target wasm32-unknown-unknown --target-dir target/simd128
RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" cargo build --release --target wasm32-unknown-unknown --target-dir target/relaxed
cp target/simd128/wasm32-unknown-unknown/release/q4bench.wasm simd128.wasm
cp target/relaxed/wasm32-unknown-unknown/release/q4bench.wasm relaxed.wasm
