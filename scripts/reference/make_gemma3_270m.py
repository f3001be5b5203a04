#!/usr/bin/env python3
"""Reference outputs for Gemma-3-270M (Q4_K_M GGUF) -> tests/fixtures/gemma3-270m.json.

transformers loads tokenizer and model from the GGUF (weights dequantized to float32) and records,
for each prompt: the prompt ids (BOS first, as `tokenizer.ggml.add_bos_token` asks), 32 greedy
tokens and teacher-forced top-8 logits at every position (schema of make_smollm2.py). One prompt
is longer than the 512-token sliding window, so local layers really drop positions. Chat cases
are added when the GGUF carries a chat template.

Usage: HF_HUB_OFFLINE=1 python scripts/reference/make_gemma3_270m.py \
           --gguf models/gemma-3-270m-q4_k_m.gguf [--out tests/fixtures/gemma3-270m.json]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oracle  # noqa: E402
from make_smollm2 import CHAT_PROMPTS, PLAIN_PROMPTS, sha256_of  # noqa: E402

EXPECTED_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
NEW_TOKENS = 32


def long_prompt() -> str:
    """~530 tokens of seeded word salad ending in an open sentence: past the 512 window."""
    rng = random.Random(3)
    words = (
        "the river city night market old bridge song winter light small garden paper boat stone "
        "quiet north train window morning letter friend story mountain bread music"
    ).split()
    return " ".join(rng.choice(words) for _ in range(520)) + ". In the end, the story was about"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", type=Path, default=Path("models/gemma-3-270m-q4_k_m.gguf"))
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/gemma3-270m.json"))
    args = parser.parse_args()

    digest = sha256_of(args.gguf)
    if digest != EXPECTED_SHA256:
        sys.exit(f"{args.gguf}: sha256 {digest}, expected {EXPECTED_SHA256}")

    torch.set_num_threads(2)
    model_dir, gguf_name = str(args.gguf.parent), args.gguf.name
    tokenizer = AutoTokenizer.from_pretrained(model_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=gguf_name, dtype=torch.float32).eval()
    bos_id = tokenizer.bos_token_id

    prompts = [(name, text, None) for name, text in PLAIN_PROMPTS]
    prompts.append(("plain-long-window", long_prompt(), None))
    if getattr(tokenizer, "chat_template", None):
        for name, messages in CHAT_PROMPTS:
            if messages[0]["role"] == "system":
                continue
            rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            prompts.append((name, rendered, messages))

    cases = []
    t0 = time.perf_counter()
    for name, text, messages in prompts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if not ids or ids[0] != bos_id:
            ids = [bos_id] + ids
        case = oracle.reference_case(model, name, ids, NEW_TOKENS, prompt=text)
        case["greedy_text"] = tokenizer.decode(case["greedy_ids"])
        if messages is not None:
            case["chat"] = {"messages": messages, "add_generation_prompt": True, "rendered": text}
        cases.append(case)
        print(f"{name}: {len(ids)} prompt ids, margin {case['greedy_min_top2_margin']:.4f}: {case['greedy_text']!r}")
    print(f"generated in {time.perf_counter() - t0:.1f} s")

    data = {
        "model": "gemma-3-270m-q4_k_m",
        "source": {
            "script": "scripts/reference/make_gemma3_270m.py",
            "gguf": gguf_name,
            "gguf_sha256": digest,
            "compute": "transformers AutoModelForCausalLM.from_pretrained(gguf_file=..., dtype=float32): "
            "weights dequantized to f32, activations f32, CPU, no KV cache; greedy = argmax over the "
            "full recomputed sequence",
            "tokenizer": "transformers GGUF tokenizer, add_special_tokens=False, BOS prepended",
            "bos_token_id": bos_id,
            "eos_token_id": tokenizer.eos_token_id,
            "stop": "none: always exactly new_tokens greedy tokens, EOS does not stop generation",
            "bos_added": True,
            "top_k": oracle.TOP_K,
            "new_tokens": NEW_TOKENS,
            "versions": oracle.library_versions(),
        },
        "cases": cases,
    }
    oracle.write_json(args.out, data)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
