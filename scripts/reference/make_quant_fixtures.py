"""Block-format dequantization fixtures: raw block bytes and gguf-py's numpy dequantization.

Writes tests/fixtures/quant/<dtype>.json, each with
  dtype          knot's name of the format
  source         where the blocks came from
  blocks         the raw block bytes, hex
  expected_bits  gguf-py's dequantized values, as f32 bit patterns (exact comparison)
  input_bits     (only for formats gguf-py can quantize) the f32 values gguf-py quantized into
                 `blocks`, so the Rust quantizer can be checked byte for byte against it

Real tensors come from the Gemma-3-270M Q4_K_M GGUF (llama.cpp-quantized: Q5_0, Q4_K, Q6_K,
Q8_0 blocks copied as stored). Q5_1, Q4_0, Q4_1 and BF16 are quantized by gguf-py from real
Q8_0 embedding rows. gguf-py has no Q5_K quantizer and the GGUF holds no Q5_K tensor, so the
Q5_K blocks reuse real Q4_K blocks (scales and nibbles) with seeded random fifth bits.

Usage: $PYTHON scripts/reference/make_quant_fixtures.py [gguf] [out_dir]
  (PYTHON: the reference venv's python, see scripts/reference/README.md)
"""

import json
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf.quants import dequantize, quantize

GGUF = Path(sys.argv[1] if len(sys.argv) > 1 else "models/gemma-3-270m-q4_k_m.gguf")
OUT = Path(sys.argv[2] if len(sys.argv) > 2 else "tests/fixtures/quant")

BLOCK = {  # (values, bytes) per block
    T.Q8_0: (32, 34),
    T.Q4_0: (32, 18),
    T.Q4_1: (32, 20),
    T.Q5_0: (32, 22),
    T.Q5_1: (32, 24),
    T.Q4_K: (256, 144),
    T.Q5_K: (256, 176),
    T.Q6_K: (256, 210),
    T.BF16: (1, 2),
}
NAME = {
    T.Q8_0: "q8_0",
    T.Q4_0: "q4_0",
    T.Q4_1: "q4_1",
    T.Q5_0: "q5_0",
    T.Q5_1: "q5_1",
    T.Q4_K: "q4_k",
    T.Q5_K: "q5_k",
    T.Q6_K: "q6_k",
    T.BF16: "bf16",
}

reader = GGUFReader(GGUF)
tensors = {t.name: t for t in reader.tensors}


def row_bytes(name: str, row: int, values: int) -> tuple[np.ndarray, T]:
    """The stored bytes of the first `values` elements of row `row` of tensor `name`."""
    t = tensors[name]
    qtype = t.tensor_type
    per_block, block_bytes = BLOCK[qtype]
    data = np.asarray(t.data).view(np.uint8).reshape(int(t.shape[1]), -1)
    return data[row, : values // per_block * block_bytes].copy(), qtype


def write(qtype: T, source: str, blocks: np.ndarray, inputs: np.ndarray | None = None) -> None:
    blocks = np.ascontiguousarray(blocks, dtype=np.uint8)
    per_block, block_bytes = BLOCK[qtype]
    assert blocks.size % block_bytes == 0
    expected = dequantize(blocks, qtype).astype(np.float32).reshape(-1)
    assert expected.size == blocks.size // block_bytes * per_block
    doc = {
        "dtype": NAME[qtype],
        "source": source,
        "blocks": blocks.tobytes().hex(),
        "expected_bits": [int(b) for b in expected.view(np.uint32)],
    }
    if inputs is not None:
        doc["input_bits"] = [int(b) for b in inputs.astype(np.float32).view(np.uint32)]
    path = OUT / f"{NAME[qtype]}.json"
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"{path}: {expected.size} values, {path.stat().st_size} bytes")


OUT.mkdir(parents=True, exist_ok=True)

# Real blocks as llama.cpp stored them: a few from two layers, first and last row.
for qtype, picks, values in [
    (T.Q5_0, [("blk.0.attn_q.weight", 0), ("blk.11.ffn_up.weight", 2047)], 128),
    (T.Q4_K, [("blk.0.attn_output.weight", 0), ("blk.2.ffn_down.weight", 639)], 256),
    (T.Q6_K, [("blk.0.ffn_down.weight", 0), ("blk.1.ffn_down.weight", 639)], 256),
    (T.Q8_0, [("token_embd.weight", 0), ("blk.0.attn_v.weight", 255)], 128),
]:
    parts = []
    for name, row in picks:
        b, got = row_bytes(name, row, values)
        assert got == qtype, (name, got)
        parts.append(b)
    source = "Gemma-3-270M Q4_K_M GGUF: " + ", ".join(f"{n} row {r}" for n, r in picks)
    write(qtype, source, np.concatenate(parts))

# Formats the GGUF does not hold: gguf-py quantizes real values (embedding rows of common
# tokens, dequantized from Q8_0).
emb, _ = row_bytes("token_embd.weight", 1000, 256)
emb2, _ = row_bytes("token_embd.weight", 262143, 256)
real = np.concatenate([dequantize(emb, T.Q8_0), dequantize(emb2, T.Q8_0)]).astype(np.float32)
for qtype in [T.Q5_1, T.Q4_0, T.Q4_1, T.BF16]:
    x = real[:64] if qtype == T.BF16 else real[:256]
    blocks = quantize(x.reshape(1, -1), qtype).reshape(-1)
    write(qtype, "gguf-py quantize() of token_embd.weight rows 1000/262143 (Gemma-3-270M)", blocks, x)

# Q5_K: real Q4_K headers and nibbles, seeded random fifth bits.
q4k, _ = row_bytes("blk.3.attn_output.weight", 7, 512)
rng = np.random.default_rng(5)
q5k = []
for blk in q4k.reshape(-1, 144):
    qh = rng.integers(0, 256, size=32, dtype=np.uint8)
    q5k.append(np.concatenate([blk[:16], qh, blk[16:]]))
write(
    T.Q5_K,
    "blk.3.attn_output.weight row 7 Q4_K blocks (Gemma-3-270M) with seeded random qh (numpy seed 5)",
    np.concatenate(q5k),
)
