#!/usr/bin/env bash
# Runs the fuzz targets (fuzz/, docs/fuzzing.md) for SECONDS_PER_TARGET each (default 60): all of
# them, or the TARGETs named. Installs the pinned nightly toolchain (scripts/nightly.sh) and
# cargo-fuzz when missing. Each target starts from a scratch copy of its committed seeds
# (fuzz/corpus/<target>/) plus its regression inputs (fuzz/regressions/<target>/), so runs leave
# git clean, with its dictionary (fuzz/dicts/<target>.dict) when it has one. Prints executions per
# target and in total; exits non-zero if any target crashed, timed out or ran out of memory,
# after naming the reproducer (fuzz/artifacts/<target>/…).
#
# Environment: FUZZ_TARGET_DIR (cargo target dir, default fuzz/target), FUZZ_TIMEOUT (seconds
# one input may take, default 10), FUZZ_RSS_MB (memory limit, default 2048).
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
secs=${1:-60}
shift || true
timeout=${FUZZ_TIMEOUT:-10}
rss_mb=${FUZZ_RSS_MB:-2048}
target_dir=${FUZZ_TARGET_DIR:-$PWD/fuzz/target}

source scripts/nightly.sh
install_nightly
if ! cargo "+$NIGHTLY" fuzz --version 2>/dev/null | grep -qF "$CARGO_FUZZ_VERSION"; then
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

cd fuzz
if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo "+$NIGHTLY" fuzz list)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The targets that go through files write them under TMPDIR.
mkdir -p "$work/tmp"
export TMPDIR="$work/tmp"

# The committed Cargo.lock as it is: fails, instead of rewriting it, when it is out of date
# (then `cargo +$NIGHTLY fetch` in fuzz/ adds what is missing and changes nothing else; commit it).
cargo "+$NIGHTLY" fetch --locked --quiet

# One build of every target (address sanitizer, debug assertions, overflow checks).
cargo "+$NIGHTLY" fuzz build --target-dir "$target_dir"

total=0
failed=()
printf '%-16s %12s %10s\n' target executions exec/s
for t in "${targets[@]}"; do
    corpus="$work/corpus/$t"
    mkdir -p "$corpus" "artifacts/$t"
    if [ -d "corpus/$t" ]; then cp -R "corpus/$t/." "$corpus/"; fi
    dirs=("$corpus")
    if [ -d "regressions/$t" ]; then dirs+=("regressions/$t"); fi
    extra=()
    if [ -f "dicts/$t.dict" ]; then extra+=("-dict=dicts/$t.dict"); fi
    log="$work/$t.log"
    status=0
    cargo "+$NIGHTLY" fuzz run --target-dir "$target_dir" "$t" "${dirs[@]}" -- \
        -max_total_time="$secs" -timeout="$timeout" -rss_limit_mb="$rss_mb" \
        -print_final_stats=1 "${extra[@]}" >"$log" 2>&1 || status=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    execs=${execs:-0}
    total=$((total + execs))
    printf '%-16s %12d %10d\n' "$t" "$execs" $((execs / (secs > 0 ? secs : 1)))
    if [ "$status" -ne 0 ]; then
        failed+=("$t")
        echo "---- $t failed (exit $status):"
        # The panic or sanitizer report, the first stack frames, and where the input went.
        grep -E -A1 'panicked at' "$log" | head -n 4 || true
        grep -E '^==[0-9]+== ?ERROR|^SUMMARY|^ +#[0-9]+ 0x' "$log" | head -n 24 || true
        artifact=$(sed -n 's/.*Test unit written to //p' "$log" | tail -n 1)
        echo "reproducer: fuzz/${artifact#"$PWD/"}"
        echo "replay: (cd fuzz && cargo +$NIGHTLY fuzz run $t ${artifact#"$PWD/"})"
        echo "----"
    fi
done
printf '%-16s %12d\n' total "$total"

if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzzing found failures in: ${failed[*]} (reproducers under fuzz/artifacts/)" >&2
    exit 1
fi
