#!/usr/bin/env python3
"""Generate tests/fixtures/tokenizer/gemma3.json: SentencePiece (GGUF `llama`) parity cases.

Usage: gen_gemma_tokenizer_fixtures.py MODEL_DIR GGUF_NAME
  (e.g. models gemma-3-270m-q4_k_m.gguf)
Needs `transformers`, `tokenizers`, `gguf`, `torch` (transformers' GGUF reader imports it); runs
offline (HF_HUB_OFFLINE=1). The ids come from transformers'
`AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=GGUF_NAME)` with `add_special_tokens=False`;
"decoded" is that tokenizer's `decode(ids, skip_special_tokens=False)`. The cases are SmolLM2's
(gen_tokenizer_fixtures.py) plus Gemma-specific ones: its control and user-defined tokens,
whitespace runs, byte fallback, long texts, and fuzz.

The vocabulary itself (262144 tokens) is too large to commit; the Rust test reads it from
models/gemma3-tokenizer.json, written by
`dump_gguf_tokenizer.py models/gemma-3-270m-q4_k_m.gguf models/gemma3-tokenizer.json`.
"""
import json
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_tokenizer_fixtures import CASES, fuzz_cases  # noqa: E402

OUT = Path(__file__).resolve().parent.parent.parent / "tests" / "fixtures" / "tokenizer"

GEMMA_CASES = [
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text<eos>", "<pad><unk><mask>", "<unused0> and <unused6241>", "[multimodal]",
    "<start_of_image><end_of_image>", " <start_of_turn> ", "<start_of_turn<end_of_turn>",
    "<START_OF_TURN> not special", "<table><tr><td>cell</td></tr></table>", "<b>bold</b> <i>it</i>",
    "<h1>Title</h1>\n<code>x = 1</code>",
    "\n", "\n\n", "\n" * 40, "a\n\n\nb", "\t", "\t\t\t", "\t" * 40, "a\tb\t\tc", " " * 31, " " * 40,
    "  two", "x  y   z    w", " \n \t ", "\n  indented\n    more",
    "▁literal marker", "▁▁", "a▁b", " ▁ ", "<0x41> not a byte", "\x00nul", "\x1b[0m escape",
    "\ue000 private use", "𠀀 ext-B", "\U0010fffd plane 16", "🫠🫨 new emoji", "ℌ𝔢𝔩𝔩𝔬", "ﬁ ligature",
    "Zürich Ærø Łódź", "supercalifragilisticexpialidocious", "antidisestablishmentarianism",
    "The year 1987 had 365 days.", "3.141592653589793238", "pneumonoultramicroscopicsilicovolcanoconiosis",
    "¡Hola! ¿Cómo estás?", "Ça va? Très bien.", "Grüß Gott", "東京タワー", "ㄱㄴㄷ", "ꦲꦏ꧀ꦱꦫ",
    "Mix of 中文 and English and 日本語", "x" * 100, "ab" * 50,
]

# Longer texts, where merges interact across words (SentencePiece has no pre-tokenizer).
LONG_CASES = [
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age "
    "of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season "
    "of Light, it was the season of Darkness.",
    "Die Würde des Menschen ist unantastbar. Sie zu achten und zu schützen ist Verpflichtung aller "
    "staatlichen Gewalt. Œuvres complètes, Ærøskøbing, Şişli, Čeština, Português.",
    "人工智能是计算机科学的一个分支，它企图了解智能的实质，并生产出一种新的能以人类智能相似的方式做出反应的智能机器。"
    "東京は日本の首都です。서울은 한국의 수도입니다.",
    "| col a | col b |\n|-------|-------|\n| 1.5   | `x`   |\n\n```python\nimport numpy as np\n"
    "x = np.zeros((3, 4), dtype=np.float32)  # comment\nprint(f\"{x.shape=}\")\n```\n",
    '{"name": "knot", "version": [0, 1, 2], "nested": {"ok": true, "none": null, "pi": 3.14}}',
    "<bos><start_of_turn>user\nWrite a haiku about Rust.<end_of_turn>\n<start_of_turn>model\n"
    "Ownership flows on,\nborrowed light through safe lifetimes,\nno data races.<end_of_turn>\n",
    "    def __init__(self, x):\n        self.x = x\n\n\tif (a && b || !c) { return a->b; }\r\n",
    "😀😃😄😁😆😅😂🤣🥲☺️😊😇🙂🙃😉😌😍🥰😘 🏳️‍🌈 👩🏾‍💻 ✊🏿",
    "Numbers: 0 1 12 123 1234 12345 123456 1234567 3.14 2.718281828 -42 +7 1e10 1_000_000 0xDEADBEEF",
]


def mixed_fuzz(count, seed=777):
    """Random strings over every character the fixed cases use, to mix scripts and merges."""
    alphabet = sorted(set("".join(CASES + GEMMA_CASES + LONG_CASES)))
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(count)]


def gemma_fuzz(count, seed=4321):
    """Random strings over spaces, newlines, tabs, ▁, specials and rare characters."""
    alphabet = list("aé中 \t\n▁.1'😀\ue000\x00") + [
        "  ", "<start_of_turn>", "<end_of_turn>", "<b>", "<eos>", "\n\n", "\t\t", "▁▁", "the", "ing",
    ]
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))) for _ in range(count)]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    import transformers
    from transformers import AutoTokenizer

    model_dir, gguf_name = sys.argv[1], sys.argv[2]
    tok = AutoTokenizer.from_pretrained(model_dir, gguf_file=gguf_name)
    texts = CASES + fuzz_cases(60) + GEMMA_CASES + gemma_fuzz(80) + LONG_CASES + mixed_fuzz(150)
    cases = []
    round_trips = 0
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        decoded = tok.decode(ids, skip_special_tokens=False)
        round_trips += decoded == text
        cases.append({"text": text, "ids": ids, "decoded": decoded})
    print(f"{len(cases)} cases, {round_trips} round-trip", file=sys.stderr)
    # Decoding alone: byte-token runs that are not valid UTF-8 (HF's ByteFallback gives one U+FFFD
    # per byte token of such a run), control tokens inside a run.
    byte = lambda b: tok.convert_tokens_to_ids(f"<0x{b:02X}>")  # noqa: E731
    a, turn = tok.convert_tokens_to_ids("a"), tok.convert_tokens_to_ids("<start_of_turn>")
    decode_ids = [
        [byte(0xE4), byte(0xB8)], [byte(0xE4), a], [byte(0xE4), byte(0xB8), byte(0xAD)],
        [byte(0xFF), byte(0xE4), byte(0xB8), a, byte(0x80)], [byte(0xE4), turn, byte(0xB8), byte(0xAD)],
        [byte(0x61), byte(0x62)], [byte(0x61), byte(0xC3)], [byte(0xF0), byte(0x9F), byte(0x98), byte(0x80)],
        [byte(0xF0), byte(0x9F), byte(0x98)], [tok.convert_tokens_to_ids("\u2581"), byte(0x20), a],
    ]
    decode_cases = [{"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)} for ids in decode_ids]
    source = {
        "script": "scripts/reference/gen_gemma_tokenizer_fixtures.py",
        "gguf": gguf_name,
        "tokenizer": type(tok).__name__,
        "versions": {"transformers": transformers.__version__},
        "bos_with_add_special_tokens": tok.encode("a")[:1],
    }
    with open(OUT / "gemma3.json", "w", encoding="utf-8") as out:
        json.dump({"source": source, "cases": cases, "decode_cases": decode_cases}, out, ensure_ascii=False, indent=1)
        out.write("\n")


if __name__ == "__main__":
    main()
