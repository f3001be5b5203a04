"""Size/quality trade-off of `knot convert --dtype`: converts a GGUF to each target format and
measures teacher-forced argmax agreement with the HF reference fixture (HF computes in f32 on the
GGUF's dequantized weights, i.e. the unquantized reference of that model).
  python3 scripts/bench/quant_tradeoff.py models/SmolLM2-135M-Instruct.Q4_1.gguf tests/fixtures/smollm2.json
Needs target/release/knot. Prints a markdown table."""
import json, os, subprocess, sys, tempfile

gguf, fixture = sys.argv[1], sys.argv[2]
knot = os.environ.get("KNOT_BIN", "target/release/knot")
cases = json.load(open(fixture))["cases"]
rows = []
with tempfile.TemporaryDirectory() as tmp:
    for dtype in ["keep", "f32", "f16", "q8_0", "q4_k", "q4_0"]:
        out = os.path.join(tmp, f"{dtype}.knot")
        subprocess.run([knot, "convert", gguf, out, "--dtype", dtype], check=True, capture_output=True)
        agree = total = 0
        for c in cases:
            ids = c["teacher_forced"]["ids"]
            r = subprocess.run([knot, "logits", out, "--tokens", ",".join(map(str, ids)), "--top", "1", "--json"],
                               check=True, capture_output=True, text=True)
            for ours, ref in zip(json.loads(r.stdout)["positions"], c["teacher_forced"]["positions"]):
                total += 1
                agree += ours["ids"][0] == ref["ids"][0]
        rows.append((dtype, os.path.getsize(out), agree, total))
print("| --dtype | file size | teacher-forced argmax agreement |")
print("|---|---|---|")
for dtype, size, agree, total in rows:
    print(f"| {dtype} | {size / 2**20:.1f} MiB | {agree}/{total} ({100 * agree / total:.1f}%) |")
