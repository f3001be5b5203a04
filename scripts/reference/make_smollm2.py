#!/usr/bin/env python3
"""Reference outputs for SmolLM2-135M-Instruct (Q4_1 GGUF) -> tests/fixtures/smollm2.json.

transformers loads tokenizer and model from the GGUF (weights dequantized to float32) and records,
for plain-text and chat-template prompts: the prompt ids, 32 greedy tokens and teacher-forced top-8
logits at every position. Chat cases also carry HF's rendered prompt string.

Tokenization note: transformers builds the GGUF tokenizer with the plain GPT-2 split regex because
it has no entry for `tokenizer.ggml.pre = "smollm"`. llama.cpp (and SmolLM2's own tokenizer.json)
first split every digit on its own. `prompt_ids` use the smollm split (HF's GGUF tokenizer with a
`Digits(individual_digits=True)` pre-split in front). SmolLM2's merges never join digits (nor a
space and a digit), so in practice both agree; should a case ever differ, HF's unmodified ids are
recorded as `hf_gguf_tokenizer_ids`.

Usage: HF_HUB_OFFLINE=1 python scripts/reference/make_smollm2.py \
           --gguf models/SmolLM2-135M-Instruct.Q4_1.gguf [--out tests/fixtures/smollm2.json]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import sys
import time
from pathlib import Path

import torch
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oracle  # noqa: E402

EXPECTED_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
NEW_TOKENS = 32

PLAIN_PROMPTS = [
    ("plain-capital", "The capital of France is"),
    ("plain-code", "def fibonacci(n):"),
    ("plain-story", "Once upon a time, in a small village,"),
    ("plain-numbers", "Here is a list of numbers: 1, 2, 3, 5, 8, 13, 21, 34,"),
]

CHAT_PROMPTS = [
    ("chat-capital", [{"role": "user", "content": "What is the capital of France?"}]),
    ("chat-haiku", [{"role": "user", "content": "Write a haiku about the sea."}]),
    ("chat-hashmap", [{"role": "user", "content": "Explain what a hash map is in one sentence."}]),
    (
        "chat-system",
        [
            {"role": "system", "content": "You are a terse assistant. Answer in one word."},
            {"role": "user", "content": "What color is the sky on a clear day?"},
        ],
    ),
]


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def smollm_split(tokenizer):
    """A copy of HF's GGUF tokenizer that splits digits individually, as `pre = smollm` means."""
    fixed = copy.deepcopy(tokenizer)
    fixed.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    return fixed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", type=Path, default=Path("models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/smollm2.json"))
    args = parser.parse_args()

    digest = sha256_of(args.gguf)
    if digest != EXPECTED_SHA256:
        sys.exit(f"{args.gguf}: sha256 {digest}, expected {EXPECTED_SHA256}")

    torch.set_num_threads(2)
    model_dir, gguf_name = str(args.gguf.parent), args.gguf.name

    t0 = time.perf_counter()
    hf_tokenizer = AutoTokenizer.from_pretrained(model_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=gguf_name, dtype=torch.float32).eval()
    load_seconds = time.perf_counter() - t0
    print(f"loaded in {load_seconds:.1f} s")

    tokenizer = smollm_split(hf_tokenizer)
    bos_id = tokenizer.bos_token_id
    # add_special_tokens=True shows what HF itself would prepend for this file.
    probe = tokenizer("Hello", add_special_tokens=True)["input_ids"]
    bos_added_by_hf = bool(probe) and probe[0] == bos_id
    print(f"bos id {bos_id}; HF adds BOS by default: {bos_added_by_hf}")

    prompts = [(name, text, None) for name, text in PLAIN_PROMPTS]
    for name, messages in CHAT_PROMPTS:
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompts.append((name, rendered, messages))

    cases = []
    t0 = time.perf_counter()
    for name, text, messages in prompts:
        # The chat template writes its own special tokens; plain prompts get no BOS, matching
        # tokenizer.ggml.add_bos_token = false.
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        hf_ids = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
        if messages is not None:
            templated = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if hasattr(templated, "keys"):
                templated = templated["input_ids"]
            if list(templated) != ids and list(templated) != hf_ids:
                raise AssertionError(f"{name}: apply_chat_template ids differ from encoding the rendered text")
        case = oracle.reference_case(model, name, ids, NEW_TOKENS, prompt=text)
        case["greedy_text"] = tokenizer.decode(case["greedy_ids"])
        if hf_ids != ids:
            case["hf_gguf_tokenizer_ids"] = hf_ids
        if messages is not None:
            case["chat"] = {"messages": messages, "add_generation_prompt": True, "rendered": text}
        cases.append(case)
        print(f"{name}: {len(ids)} prompt ids, margin {case['greedy_min_top2_margin']:.4f}: {case['greedy_text']!r}")
    generate_seconds = time.perf_counter() - t0
    print(f"generated in {generate_seconds:.1f} s")

    data = {
        "model": "SmolLM2-135M-Instruct.Q4_1",
        "source": {
            "script": "scripts/reference/make_smollm2.py",
            "gguf": gguf_name,
            "gguf_sha256": digest,
            "compute": "transformers AutoModelForCausalLM.from_pretrained(gguf_file=..., dtype=float32): "
            "weights dequantized to f32, activations f32, CPU, no KV cache; greedy = argmax over the "
            "full recomputed sequence",
            "tokenizer": "transformers GGUF tokenizer with a Digits(individual_digits=True) pre-split "
            "(the `smollm` pre-tokenizer); encoded with add_special_tokens=False",
            "bos_token_id": bos_id,
            "eos_token_id": tokenizer.eos_token_id,
            "stop": "none: always exactly new_tokens greedy tokens, EOS does not stop generation",
            "bos_added": False,
            "hf_adds_bos_by_default": bos_added_by_hf,
            "chat_template_source": "tokenizer.chat_template from the GGUF, rendered by transformers (jinja2)",
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
