"""llama.cpp's own fidelity to the HF reference, on the reference prompts our parity tests use.

For each case of a parity fixture (tests/fixtures/smollm2.json, gemma3-270m.json) it loads the
same GGUF in llama.cpp (llama-cpp-python, CPU, one thread) and measures what tests/parity.rs
measures for this engine:

- teacher-forced: the fixture's whole id sequence in one batch; at each position, whether
  llama.cpp's argmax is HF's, and the largest |logit difference| over HF's top-8 ids;
- greedy: from the prompt, llama.cpp's greedy ids against HF's, and how many agree before the
  first difference.

    .venv-bench/bin/python scripts/reference/llama_cpp_parity.py \\
        tests/fixtures/smollm2.json models/SmolLM2-135M-Instruct.Q4_1.gguf [--json]

The venv is the one `scripts/bench.sh --llama-cpp` builds (llama-cpp-python from source). Ids are
fed as ids (no tokenizer involved), so a difference is the runtime's, not the tokenizer's.
"""

import argparse
import json
import sys

import numpy as np
from llama_cpp import Llama


def teacher_forced(llm, ids):
    llm.reset()
    llm.eval(ids)
    return np.asarray(llm.scores[: len(ids)], dtype=np.float64)


def greedy(llm, prompt, n):
    llm.reset()
    llm.eval(prompt)
    out = []
    for _ in range(n):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(tok)
        llm.eval([tok])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fixture")
    ap.add_argument("gguf")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()

    fixture = json.load(open(args.fixture))
    longest = max(len(c["teacher_forced"]["ids"]) for c in fixture["cases"])
    llm = Llama(
        model_path=args.gguf,
        n_ctx=max(512, longest + 8),
        n_batch=512,
        n_threads=1,
        logits_all=True,
        verbose=False,
    )
    rows = []
    for case in fixture["cases"]:
        tf = case["teacher_forced"]
        logits = teacher_forced(llm, tf["ids"])
        agree, max_diff = 0, 0.0
        for ours, ref in zip(logits, tf["positions"]):
            agree += int(np.argmax(ours)) == ref["ids"][0]
            diffs = [abs(ours[i] - l) for i, l in zip(ref["ids"], ref["logits"])]
            max_diff = max(max_diff, max(diffs))
        want = case["greedy_ids"]
        got = greedy(llm, case["prompt_ids"], len(want))
        same = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), len(want))
        rows.append(
            {
                "name": case["name"],
                "positions": len(tf["positions"]),
                "argmax_agree": agree,
                "max_abs_logit_diff": max_diff,
                "greedy_tokens": len(want),
                "greedy_same_prefix": same,
            }
        )
    total = sum(r["positions"] for r in rows)
    agree = sum(r["argmax_agree"] for r in rows)
    summary = {
        "fixture": args.fixture,
        "gguf": args.gguf,
        "teacher_forced_argmax": f"{agree}/{total}",
        "teacher_forced_rate": agree / total,
        "max_abs_logit_diff": max(r["max_abs_logit_diff"] for r in rows),
        "greedy_identical_cases": sum(r["greedy_same_prefix"] == r["greedy_tokens"] for r in rows),
        "cases": rows,
    }
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        print()
        return
    print(f"llama.cpp (llama-cpp-python) on {args.gguf} against {args.fixture}")
    print(f"{'case':<24} {'argmax':>9} {'max |dlogit|':>13} {'greedy same':>12}")
    for r in rows:
        print(
            f"{r['name']:<24} {r['argmax_agree']:>4}/{r['positions']:<4} "
            f"{r['max_abs_logit_diff']:>13.3f} {r['greedy_same_prefix']:>5}/{r['greedy_tokens']:<6}"
        )
    print(
        f"teacher-forced argmax {agree}/{total} ({100 * agree / total:.1f}%), "
        f"max |dlogit| {summary['max_abs_logit_diff']:.3f}, greedy identical on "
        f"{summary['greedy_identical_cases']}/{len(rows)} cases"
    )


if __name__ == "__main__":
    main()
