"""Shared reference computations for the fixture scripts.

Everything runs in float32 on the CPU. Greedy decoding recomputes the whole sequence at every
step (no KV cache) so the recorded greedy ids and the teacher-forced logits come from the same
kind of computation; `reference_case` checks that they agree.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import torch

TOP_K = 8


def library_versions() -> dict:
    import gguf
    import numpy
    import tokenizers
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gguf": getattr(gguf, "__version__", None) or _dist_version("gguf"),
        "tokenizers": tokenizers.__version__,
        "numpy": numpy.__version__,
    }


def _dist_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


@torch.no_grad()
def logits_for(model, ids: list[int]) -> torch.Tensor:
    """Logits [len(ids), vocab] in float32 for one unpadded sequence."""
    input_ids = torch.tensor([ids], dtype=torch.long)
    out = model(input_ids=input_ids, use_cache=False)
    return out.logits[0].to(torch.float32)


@torch.no_grad()
def greedy(model, prompt_ids: list[int], new_tokens: int) -> list[int]:
    ids = list(prompt_ids)
    generated = []
    for _ in range(new_tokens):
        next_id = int(torch.argmax(logits_for(model, ids)[-1]))
        ids.append(next_id)
        generated.append(next_id)
    return generated


def top_k(row: torch.Tensor, k: int = TOP_K) -> dict:
    # Stable descending sort so equal logits keep ascending id order (deterministic ties).
    order = torch.sort(row, descending=True, stable=True).indices[:k]
    return {
        "ids": [int(i) for i in order],
        "logits": [float(row[i]) for i in order],
    }


def reference_case(
    model,
    name: str,
    prompt_ids: list[int],
    new_tokens: int,
    prompt: str | None = None,
    full_logits_last: bool = False,
) -> dict:
    greedy_ids = greedy(model, prompt_ids, new_tokens)
    all_ids = list(prompt_ids) + greedy_ids
    logits = logits_for(model, all_ids)

    positions = [top_k(logits[p]) for p in range(len(all_ids))]

    # The greedy choice at each generated step must be the teacher-forced argmax; the smallest
    # top-1/top-2 gap tells a consumer how much numeric slack the greedy comparison has.
    min_margin = float("inf")
    for step, token in enumerate(greedy_ids):
        row = logits[len(prompt_ids) - 1 + step]
        pos = positions[len(prompt_ids) - 1 + step]
        if pos["ids"][0] != token:
            raise AssertionError(
                f"{name}: greedy id {token} at step {step} is not the teacher-forced argmax {pos['ids'][0]}"
            )
        best2 = torch.topk(row, 2).values
        min_margin = min(min_margin, float(best2[0] - best2[1]))

    case = {
        "name": name,
        "prompt": prompt,
        "prompt_ids": list(prompt_ids),
        "greedy_ids": greedy_ids,
        "greedy_min_top2_margin": min_margin,
        "teacher_forced": {"ids": all_ids, "positions": positions},
    }
    if full_logits_last:
        case["full_logits_last"] = [float(v) for v in logits[-1]]
    return case


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Python floats print with the shortest repr that round-trips; an f32 widened to f64 is
    # exact, so the JSON carries the f32 values bit for bit.
    text = json.dumps(data, indent=1, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")
