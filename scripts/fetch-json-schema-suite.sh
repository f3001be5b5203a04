#!/usr/bin/env bash
# Fetch the official JSON Schema Test Suite (drafts 2020-12 and 7) into DEST_DIR (default:
# models/json-schema-suite, git-ignored) for tests/json_schema_suite.rs. Only package registries
# are reachable, so the suite comes from the PyPI sdist of python-jsonschema, which vendors it
# under json/tests/: we download the sdist without installing it, verify its sha256, and
# extract only json/tests/draft2020-12/ and json/tests/draft7/ (optional/ included; the test
# skips it). Prints the directory holding both. Idempotent: quiet (just the path) when present.
set -euo pipefail

DEST_DIR="${1:-models/json-schema-suite}"
PACKAGE="jsonschema==4.23.0"
SDIST="jsonschema-4.23.0.tar.gz"
PREFIX="jsonschema-4.23.0/json/tests/"
DRAFTS=(draft2020-12 draft7)
EXPECTED_SHA256="d71497fef26351a33265337fa77ffeb82423f3ea21283cd9467bb03999266bc4"

PYTHON="${PYTHON:-python3}"
present=1
for draft in "${DRAFTS[@]}"; do
    stamp="$DEST_DIR/$draft/.sdist-sha256"
    if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$EXPECTED_SHA256" ]]; then
        present=0
    fi
done
if [[ "$present" == 1 ]]; then
    echo "$DEST_DIR"
    exit 0
fi

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

work_dir="$(mktemp -d)"
trap 'rm -rf "$work_dir"' EXIT

echo "fetch-json-schema-suite: downloading the $PACKAGE sdist" >&2
"$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "$PACKAGE" -d "$work_dir" >&2

sdist="$work_dir/$SDIST"
if [[ ! -f "$sdist" ]]; then
    echo "fetch-json-schema-suite: pip download produced no $SDIST in $work_dir" >&2
    exit 1
fi
actual="$(sha256_of "$sdist")"
if [[ "$actual" != "$EXPECTED_SHA256" ]]; then
    echo "fetch-json-schema-suite: SHA256 MISMATCH for $SDIST" >&2
    echo "fetch-json-schema-suite:   expected $EXPECTED_SHA256" >&2
    echo "fetch-json-schema-suite:   actual   $actual" >&2
    exit 1
fi

# Extract into a temporary directory, then move it into place, so an interrupted run never
# leaves a partial suite under the final name.
mkdir -p "$DEST_DIR"
for draft in "${DRAFTS[@]}"; do
    partial="$work_dir/$draft"
    "$PYTHON" - "$sdist" "$PREFIX$draft/" "$partial" <<'PY'
import os, sys, tarfile
sdist, prefix, out = sys.argv[1:4]
count = 0
with tarfile.open(sdist, "r:gz") as tf:
    for m in tf.getmembers():
        if not m.isfile() or not m.name.startswith(prefix) or not m.name.endswith(".json"):
            continue
        rel = m.name[len(prefix):]
        parts = rel.split("/")
        if any(p in ("", ".", "..") for p in parts):
            sys.exit(f"fetch-json-schema-suite: unexpected member {m.name}")
        dest = os.path.join(out, *parts)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with tf.extractfile(m) as src, open(dest, "wb") as dst:
            dst.write(src.read())
        count += 1
if count == 0:
    sys.exit(f"fetch-json-schema-suite: no files under {prefix} in {sdist}")
PY
    echo "$EXPECTED_SHA256" >"$partial/.sdist-sha256"
    rm -rf "${DEST_DIR:?}/$draft"
    mv "$partial" "$DEST_DIR/$draft"
done
echo "fetch-json-schema-suite: ${DRAFTS[*]} ready in $DEST_DIR (sha256 verified)" >&2
echo "$DEST_DIR"
