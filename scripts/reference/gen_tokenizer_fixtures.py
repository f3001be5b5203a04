#!/usr/bin/env python3
"""Generate the tokenizer parity fixtures under tests/fixtures/tokenizer/.

Usage: gen_tokenizer_fixtures.py MODEL_DIR GGUF_NAME
  (e.g. `models SmolLM2-135M-Instruct.Q4_1.gguf` from the repository root)
Needs `tokenizers`, `gguf`, and for the cross-check `transformers` + `torch` (its GGUF reader
imports torch). Writes:

- smollm2_tokenizer.json: the GGUF tokenizer as knot::TokenizerData (dump_gguf_tokenizer.py).
- smollm2.json: {"cases": [{"text", "ids"}]}. The ids come from Hugging Face `tokenizers` set up as
  SmolLM2's own tokenizer.json is: BPE over the GGUF vocab/merges, pre-tokenizer
  Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)], the
  GGUF control tokens added as special tokens. transformers' AutoTokenizer(gguf_file=...) is also
  run: it drops the Digits step for `smollm` files, so it disagrees on text with digits; those
  cases carry its ids as "autotokenizer_gguf_ids" for the record, and the script prints them.
- pretokenize.json: {"families": {name: [{"text", "pieces"}]}} from tokenizers' own regex
  pre-tokenizers (Split with the family regex, behavior isolated), for every family the engine has.
"""
import json
import os
import random
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers  # noqa: E402
from tokenizers.models import BPE  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE.parent.parent / "tests" / "fixtures" / "tokenizer"

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
          r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
         r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

CASES = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "a  b", "a   b", "a" + " " * 10 + "b", "  leading", "trailing  ", " ", "  ", " " * 10, "",
    "tab\tseparated\tvalues", "\t\tindented", "line one\nline two", "crlf\r\nline\r\n", "\n\n\nthree",
    "a \n b", "x\n  y", "end\n", "mixed \t \n whitespace", "nbsp\u00a0here", "ideographic\u3000space",
    "café", "naïve résumé", "Ångström façade", "e\u0301 combining", "Straße",
    "你好，世界！", "日本語のテキスト", "한국어 텍스트", "Привет, мир", "مرحبا بالعالم", "नमस्ते दुनिया",
    "ภาษาไทย", "Ελληνικά",
    "emoji 😀👍🏽", "family 👨‍👩‍👧‍👦 zwj", "flags 🇺🇸🇫🇷", "❤️ heart", "🤖🦀",
    "fn main() {\n    println!(\"Hello, {}!\", name);\n}\n",
    "def f(x):\n    if x > 0:\n        return x ** 2\n    return -x\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
    "<html><body class=\"x\">text</body></html>",
    "1234567", "3.14159", "1,000", "1,000,000.50", "Year 2024 and 99 bottles", "v1.2.3-beta",
    "0x1F 0b1010 1e-9", "١٢٣ Arabic-Indic digits", "Ⅻ roman ½ fraction ²",
    "don't", "I'M", "they'll", "we've", "she'd", "it's", "you're", "'s", "O'Neil's", "rock 'n' roll",
    "DON'T", "'quoted'", "isn''t",
    "Wait... what?!", "---", "a--b", "(parens) [brackets] {braces}", "#hashtag @mention $100 50%",
    "¿Qué? ¡Sí!", "«guillemets» „quotes“", "“smart” ‘quotes’", "email@example.com", "https://example.com/a?b=c&d=e",
    "<|im_start|>", "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more", " <|im_end|> ", "<|im_start|<|im_end|>", "<repo_name>x<file_sep>",
    "<|IM_START|> not special", "ctrl\x01\x04\x7f chars", "\u200bzero width", "soft\u00adhyphen",
]


def fuzz_cases(count, seed=1234):
    """Random strings over the character classes the pre-tokenizers distinguish."""
    alphabet = list("aZé中ж'sStTmdDlLrReEvVſ 1234567890\t\n\r\x0b\x0c\x85.,!?-_()\u00a0\u2028\u3000"
                    "\u0301\u0947😀Ⅻ½٣") + ["\r\n", "  ", "'", "'", "<|im_end|>"]
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))) for _ in range(count)]


def smollm2_reference(data):
    vocab = {token: index for index, token in enumerate(data["tokens"])}
    merges = [tuple(merge.split(" ")) for merge in data["merges"]]
    tokenizer = Tokenizer(BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([
        AddedToken(token, normalized=False, special=True)
        for token, token_type in zip(data["tokens"], data["token_types"]) if token_type == 3
    ])
    return tokenizer


def autotokenizer(model_dir, gguf_name):
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(model_dir, gguf_file=gguf_name)
    except Exception as error:  # noqa: BLE001 - the cross-check is optional
        print(f"AutoTokenizer unavailable ({error}); skipping the cross-check", file=sys.stderr)
        return None


def splitter(family):
    split = lambda regex: pre_tokenizers.Split(Regex(regex), behavior="isolated")  # noqa: E731
    if family == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), split(GPT2)])
    return split({"gpt2": GPT2, "llama-bpe": LLAMA3, "qwen2": QWEN2}[family])


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model_dir, gguf_name = sys.argv[1], sys.argv[2]
    OUT.mkdir(parents=True, exist_ok=True)
    data_path = OUT / "smollm2_tokenizer.json"
    subprocess.run([sys.executable, str(HERE / "dump_gguf_tokenizer.py"),
                    str(Path(model_dir) / gguf_name), str(data_path)], check=True)
    data = json.loads(data_path.read_text(encoding="utf-8"))

    reference = smollm2_reference(data)
    auto = autotokenizer(model_dir, gguf_name)
    texts = CASES + fuzz_cases(60)
    cases = []
    disagreements = 0
    for text in texts:
        ids = reference.encode(text, add_special_tokens=False).ids
        case = {"text": text, "ids": ids}
        if auto is not None:
            auto_ids = auto.encode(text, add_special_tokens=False)
            if auto_ids != ids:
                disagreements += 1
                case["autotokenizer_gguf_ids"] = auto_ids
                print(f"AutoTokenizer(gguf) differs on {text!r}", file=sys.stderr)
        cases.append(case)
    print(f"{len(cases)} cases, {disagreements} where AutoTokenizer(gguf) differs", file=sys.stderr)
    with open(OUT / "smollm2.json", "w", encoding="utf-8") as out:
        json.dump({"cases": cases}, out, ensure_ascii=False, indent=1)
        out.write("\n")

    families = {}
    pre_texts = CASES + fuzz_cases(300, seed=99)
    for family in ["gpt2", "smollm", "llama-bpe", "qwen2"]:
        pre = splitter(family)
        families[family] = [
            {"text": text, "pieces": [piece for piece, _ in pre.pre_tokenize_str(text)]}
            for text in pre_texts
        ]
    with open(OUT / "pretokenize.json", "w", encoding="utf-8") as out:
        json.dump({"families": families}, out, ensure_ascii=False)
        out.write("\n")


if __name__ == "__main__":
    main()
