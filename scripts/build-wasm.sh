#!/usr/bin/env bash
# Builds the npm package's two wasm builds: pkg/dist/wasm (one thread: Workers, and wherever
# shared memory is missing) and pkg/dist/wasm-threads (shared memory and atomics: matmuls split
# across workers JS starts; docs/threads.md). Installs the tools it needs when missing
# (idempotent, so CI on a fresh machine can run it), compiles crates/host for wasm32 with SIMD128
# (the threaded build on the nightly pinned in scripts/nightly.sh, std rebuilt with atomics),
# generates the wasm-bindgen `web` bindings (they load in Node, Bun, Deno, Workers and browsers
# through initSync/init; the `bundler` target breaks Bun), optimizes with binaryen's wasm-opt and
# reports each gzipped size against the 1 MB budget. Nothing is rebuilt when the output is newer
# than every input (the crates' sources and manifests, Cargo.lock, .cargo/config.toml,
# rust-toolchain.toml, this script) and was made by the same tools (rustc, wasm-bindgen,
# wasm-opt) for the same crate and budget: then it only says so, in well under a second.
#
#   scripts/build-wasm.sh              tools + build (when something changed)
#   scripts/build-wasm.sh --force      tools + build, even when nothing changed
#   scripts/build-wasm.sh --tools      tools only (rust target, wasm-bindgen-cli, npm devDependencies)
#
# Both builds use one codegen unit (CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1, here only; native
# release builds keep four): the optimizer sees the whole crate, and the single-thread build is
# ~7% smaller gzipped (938 KB against 1,008 KB on 2026-12-05); greedy SmolLM2 in Node, one
# thread, medians of 6 fresh processes: decode 0.98x, prefill 0.99x of four units (this shared
# machine's noise).
#
# Environment: CRATE (default host) selects the cargo package; WASM_GZIP_BUDGET (bytes, default
# 1000000) the size budget; CARGO_TARGET_DIR is honoured.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
crate=${CRATE:-host}
budget=${WASM_GZIP_BUDGET:-1000000}
target_dir=${CARGO_TARGET_DIR:-$root/target}
out_dir=$root/pkg/dist/wasm
threads_dir=$root/pkg/dist/wasm-threads
# The threaded build: atomics, and shared memory imported from JS (up to wasm32's 4 GiB), with the
# thread-local storage exports wasm-bindgen sets up each thread with.
threads_rustflags="-C target-feature=+simd128,+atomics,+bulk-memory,+mutable-globals"
for arg in --shared-memory --import-memory --max-memory=4294967296 --export=__wasm_init_tls \
  --export=__tls_size --export=__tls_align --export=__tls_base; do
  threads_rustflags+=" -C link-arg=$arg"
done
source "$root/scripts/nightly.sh"
# What the last build was made with (outside dist/wasm, which is published).
stamp=$root/pkg/dist/.build-wasm-fingerprint

log() { printf '[build-wasm] %s\n' "$*" >&2; }

install_tools() {
  # RUSTUP_AUTO_INSTALL=0 machines do not add targets from rust-toolchain.toml by themselves.
  if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    log "adding rust target wasm32-unknown-unknown"
    rustup target add wasm32-unknown-unknown
  fi
  install_nightly

  # The CLI must match the wasm-bindgen crate exactly, or the generated glue does not fit.
  local want have
  want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)
  if [[ -z "$want" ]]; then
    log "no wasm-bindgen crate in Cargo.lock"
    exit 1
  fi
  have=$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)
  if [[ "$have" != "$want" ]]; then
    log "installing wasm-bindgen-cli $want (found '${have:-none}'); this takes a few minutes"
    # No --locked: the CLI's lockfile names a webpki-roots version that is gone from crates.io.
    # No default features: they only give wasm-bindgen-test-runner TLS (rustls and ring, the
    # slowest part of the build) to download browser drivers; the wasm-bindgen binary is the
    # same. --debug: unoptimized, it compiles in a fraction of the release build's CPU time and
    # writes byte-identical bindings (2.6 s instead of 0.6 s on this package's 21 MB input).
    cargo install wasm-bindgen-cli --version "$want" --no-default-features --debug
  fi

  # devDependencies: binaryen (wasm-opt), bun, deno, typescript.
  if [[ ! -f pkg/node_modules/.package-lock.json || pkg/package-lock.json -nt pkg/node_modules/.package-lock.json ]]; then
    log "installing npm devDependencies in pkg/"
    (cd pkg && npm ci --no-audit --no-fund)
  fi
}

# What the output was made from: the tools and settings (a change rebuilds even when no file is
# newer than the output).
fingerprint() {
  printf 'crate %s\nbudget %s\ncodegen-units 1\n' "$crate" "$budget"
  rustc --version
  rustup run "$NIGHTLY" rustc --version
  printf 'threads %s\n' "$threads_rustflags"
  wasm-bindgen --version
  pkg/node_modules/.bin/wasm-opt --version
  printf 'RUSTFLAGS %s\nCARGO_ENCODED_RUSTFLAGS %s\n' "${RUSTFLAGS:-}" "${CARGO_ENCODED_RUSTFLAGS:-}"
}

# True when the output exists, was made with the same fingerprint and no input is newer.
up_to_date() {
  local bg=$out_dir/${crate//-/_}_bg.wasm tbg=$threads_dir/${crate//-/_}_bg.wasm
  [[ -s "$bg" && -s "$out_dir/${crate//-/_}.js" && -f "$stamp" ]] || return 1
  [[ -s "$tbg" && -s "$threads_dir/${crate//-/_}.js" ]] || return 1
  [[ "$(fingerprint)" == "$(cat "$stamp")" ]] || return 1
  local newer
  newer=$(find crates/*/src crates/*/Cargo.toml Cargo.toml Cargo.lock .cargo/config.toml \
    rust-toolchain.toml scripts/build-wasm.sh -newer "$stamp" -print -quit 2>/dev/null)
  [[ -z "$newer" ]]
}

build() {
  # The stamp gets the time the build started: an input edited during the build is newer.
  mkdir -p "$out_dir" "$threads_dir"
  rm -f "$stamp" "$stamp".*
  local started
  started=$(mktemp "$stamp.XXXXXX")
  fingerprint > "$started"
  log "cargo build --release --target wasm32-unknown-unknown -p $crate (simd128 from .cargo/config.toml)"
  CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 cargo build --release --target wasm32-unknown-unknown \
    -p "$crate"
  bind_and_optimize "$target_dir/wasm32-unknown-unknown/release/${crate//-/_}.wasm" "$out_dir" -O3

  # A target directory of its own: std is rebuilt with atomics, and both builds stay cached.
  log "cargo +$NIGHTLY build -Z build-std=panic_abort,std (atomics, shared memory) -p $crate"
  env -u CARGO_ENCODED_RUSTFLAGS RUSTFLAGS="$threads_rustflags" CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 \
    cargo "+$NIGHTLY" build --release \
    --target wasm32-unknown-unknown -p "$crate" -Z build-std=panic_abort,std \
    --target-dir "$target_dir/wasm-threads"
  # -O2: -O3 measured no faster here (SmolLM2 in Node, Dec 2026) and once made this module's
  # greedy output differ (wasm-opt 132; not reproduced since). The identity tests guard it.
  bind_and_optimize "$target_dir/wasm-threads/wasm32-unknown-unknown/release/${crate//-/_}.wasm" \
    "$threads_dir" -O2 --enable-threads

  check_size
  mv "$started" "$stamp"
}

# bind_and_optimize IN.wasm OUT_DIR LEVEL [wasm-opt flags]: wasm-bindgen's `web` glue, then
# wasm-opt at LEVEL (-O3, -O2).
bind_and_optimize() {
  local wasm_in=$1 dir=$2 level=$3
  shift 3
  wasm-bindgen --target web --out-dir "$dir" "$wasm_in"
  local bg=$dir/${crate//-/_}_bg.wasm
  # The features rustc 1.95 enables for wasm32 by default, plus simd128 (ours); anything less
  # and wasm-opt rejects the module.
  pkg/node_modules/.bin/wasm-opt "$level" \
    --enable-simd --enable-bulk-memory --enable-bulk-memory-opt --enable-nontrapping-float-to-int \
    --enable-sign-ext --enable-mutable-globals --enable-multivalue --enable-reference-types "$@" \
    "$bg" -o "$bg"
}

check_size() {
  local dir bg raw gz over=0
  for dir in "$out_dir" "$threads_dir"; do
    bg=$dir/${crate//-/_}_bg.wasm
    raw=$(wc -c < "$bg")
    gz=$(gzip -9 -c "$bg" | wc -c)
    printf 'wasm: %s  %d bytes, %d bytes gzipped (budget %d)\n' "${bg#"$root"/}" "$raw" "$gz" "$budget"
    if (( gz > budget )); then
      log "gzipped ${bg#"$root"/} is over budget by $((gz - budget)) bytes"
      over=1
    fi
  done
  (( over == 0 )) || exit 1
}

install_tools
case "${1:-}" in
  --tools) ;;
  --force) build ;;
  "")
    if up_to_date; then
      log "up to date: no input is newer than pkg/dist/wasm and the tools are the same (--force rebuilds)"
      check_size
    else
      build
    fi
    ;;
  *) log "unknown argument: $1"; exit 2 ;;
esac
