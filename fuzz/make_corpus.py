#!/usr/bin/env python3
"""Writes the seed corpus (fuzz/corpus/<target>/) from the repository's fixtures and, when
present, the real models in models/. Run from anywhere; it replaces the seed files it makes and
leaves others alone. Seeds are kept small: prefixes and headers, not whole weight files."""

import json
import os
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIX = os.path.join(ROOT, "tests", "fixtures")
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
TINY = ["llama-f32", "llama-f16", "llama-tied-f32", "qwen2-f32", "qwen3-f32", "gemma3-f32"]
REAL_KNOTS = ["SmolLM2-135M-Instruct.Q4_1.knot", "gemma-3-270m.knot"]
REAL_GGUFS = ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]


def seed(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def dictionary(target, words):
    """A libFuzzer dictionary (fuzz/dicts/<target>.dict): tokens mutations splice in."""
    d = os.path.join(ROOT, "fuzz", "dicts")
    os.makedirs(d, exist_ok=True)

    def quoted(w):
        b = w.encode() if isinstance(w, str) else w
        return '"' + "".join(chr(c) if 32 <= c < 127 and c not in b'"\\' else f"\\x{c:02X}" for c in b) + '"'

    with open(os.path.join(d, f"{target}.dict"), "w") as f:
        f.writelines(quoted(w) + "\n" for w in sorted(set(words)))


def json_keys(v, out):
    if isinstance(v, dict):
        for k, x in v.items():
            out.add(f'"{k}"')
            if k not in ("vocab", "merges"):
                json_keys(x, out)
    elif isinstance(v, list):
        for x in v[:8]:
            json_keys(x, out)
    return out


def read(*parts):
    with open(os.path.join(*parts), "rb") as f:
        return f.read()


def knot_prefix(path):
    with open(path, "rb") as f:
        head = f.read(10)
        meta_len = struct.unpack("<I", head[6:10])[0]
        prefix_len = ((10 + meta_len + 3) & ~3) + 1
        f.seek(0)
        return f.read(prefix_len)


def knot_tokenizer_blob(path):
    data = read(path)
    prefix = knot_prefix(path)
    meta = json.loads(prefix[10 : 10 + struct.unpack("<I", prefix[6:10])[0]])
    blob = meta["tokenizer"]["blob"]
    start = len(prefix) + blob["offset"]
    return data[start : start + blob["size"]]


class Gguf:
    """Just enough of a GGUF reader to find where the tensor data starts and read strings."""

    SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def __init__(self, f):
        self.f = f

    def take(self, fmt):
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self.f.read(size))[0]

    def string(self):
        return self.f.read(self.take("Q")).decode("utf-8", "replace")

    def value(self, t):
        if t in self.SCALARS:
            return self.take(self.SCALARS[t])
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("I"), self.take("Q")
            return [self.value(et) for _ in range(n)]
        raise ValueError(f"GGUF value type {t}")

    @classmethod
    def header(cls, path):
        """(bytes up to the tensor data, metadata dict)."""
        with open(path, "rb") as f:
            g = cls(f)
            assert f.read(4) == b"GGUF"
            g.take("I")
            n_tensors, n_kv = g.take("Q"), g.take("Q")
            kv = {}
            for _ in range(n_kv):
                key = g.string()
                kv[key] = g.value(g.take("I"))
            for _ in range(n_tensors):
                g.string()
                dims = g.take("I")
                f.read(8 * dims + 4 + 8)
            align = kv.get("general.alignment", 32)
            end = (f.tell() + align - 1) // align * align
            f.seek(0)
            return f.read(end), kv


def png(width, height, color, depth, pixels):
    """A PNG of one IDAT chunk; `pixels` holds the raw rows without filter bytes."""

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    row = len(pixels) // height
    raw = b"".join(b"\0" + pixels[y * row : (y + 1) * row] for y in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, 0)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    if color == 3:
        out += chunk(b"PLTE", bytes(range(12)))
    return out + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def main():
    models = os.path.join(ROOT, "models")
    templates = json.loads(read(FIX, "chat", "chat.json"))["templates"]

    # knot prefix reader: header + metadata + codec byte of every tiny and real model.
    knot_words = {"KNOT", "\x01\x00", "\xff\xff\xff\x00", "18446744073709551615", "-1", "1e300"}
    for name in TINY:
        prefix = knot_prefix(os.path.join(FIX, "tiny", f"{name}.knot"))
        seed("knot_prefix", f"{name}.prefix", prefix)
        json_keys(json.loads(prefix[10 : 10 + struct.unpack("<I", prefix[6:10])[0]]), knot_words)
    dictionary("knot_prefix", knot_words)
    for name in REAL_KNOTS:
        path = os.path.join(models, name)
        if os.path.exists(path):
            seed("knot_prefix", f"{name}.prefix", knot_prefix(path))

    # GGUF: everything before the tensor data (the target pads the file out to it).
    gguf_words = {"GGUF", "\xff\xff\xff\xff\xff\xff\xff\x7f", "\x00\x00\x00\x01"}
    for name in TINY:
        head, kv = Gguf.header(os.path.join(FIX, "tiny", f"{name}.gguf"))
        seed("gguf", f"{name}.head", head)
        gguf_words.update(k for k in kv)
    dictionary("gguf", gguf_words)
    for name in REAL_GGUFS:
        path = os.path.join(models, name)
        if os.path.exists(path):
            _, kv = Gguf.header(path)
            if "tokenizer.chat_template" in kv:
                templates[name.split(".")[0].split("-q4")[0]] = kv["tokenizer.chat_template"]

    # HF directory: config.json \0 tokenizer.json \0 tokenizer_config.json.
    hf_words = {"\x00", "null", "true", "-1", "1e300", "4294967296", '"bos_token"', '"eos_token"', '"add_bos_token"', '"chat_template"', '"added_tokens"'}
    for name in TINY:
        d = os.path.join(FIX, "tiny", f"{name}-hf")
        json_keys(json.loads(read(d, "config.json")), hf_words)
        json_keys(json.loads(read(d, "tokenizer.json")), hf_words)
    dictionary("hf_convert", hf_words)
    for name in TINY:
        d = os.path.join(FIX, "tiny", f"{name}-hf")
        if not os.path.isdir(d):
            continue
        tok_config = json.dumps({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True})
        seed("hf_convert", name, read(d, "config.json") + b"\0" + read(d, "tokenizer.json") + b"\0" + tok_config.encode())

    # Tokenizers: a selector byte (0 tiny BPE, 1 tiny SentencePiece, 2 SmolLM2) and a text.
    texts = []
    for fixture in ["smollm2.json", "gemma3.json"]:
        texts += [c["text"] for c in json.loads(read(FIX, "tokenizer", fixture))["cases"]]
    texts = sorted(set(texts), key=lambda t: (len(t), t))[::4][:40]
    for i, text in enumerate(texts):
        seed("tokenizer", f"text{i:02}", bytes([i % 3]) + text.encode())

    # Tokenizer blobs of the tiny models (BPE and SentencePiece).
    for name in ["llama-f32", "qwen2-f32", "gemma3-f32"]:
        seed("tokenizer_data", f"{name}.json", knot_tokenizer_blob(os.path.join(FIX, "tiny", f"{name}.knot")))

    # Chat templates: the real ones with a conversation.
    conversation = ["system", "Be brief.", "user", "Hi", "assistant", "Hello!", "user", "2+2?"]
    for name, template in templates.items():
        seed("chat_template", name, "\0".join([template] + conversation))
    jinja = ["{%", "%}", "{{", "}}", "{#", "#}", "{%-", "-%}", "for ", " in ", "endfor", "if ", "elif", "else", "endif", "set ", "macro ", "endmacro", "call", "filter", "namespace(", "loop.index", "loop.last", "messages", "message['role']", "message.content", "add_generation_prompt", "bos_token", "raise_exception(", "range(", "indent(", "tojson", "indent=", "|", "~", "**", "*", "//", "%", "join", "items()", "strip()", "split(", "upper()", "replace(", "startswith(", "format(", "batch(", "slice(", "center(", "wordwrap(", "truncate(", "999999999", "-1", "1e300", "[::-1]", "recursive", "loop(", "cycler(", "dict(", "lipsum(", "none", "true"]
    dictionary("chat_template", jinja)

    # Options: JSON objects, CLI specs, response formats.
    options = {
        "greedy": {},
        "sampling": {"temperature": 0.8, "topK": 40, "topP": 0.9, "minP": 0.05, "repeatPenalty": 1.1, "repeatLastN": 64, "seed": 7, "maxTokens": 16},
        "moa": {"moa": {"k": 4, "baseTemperature": 0.7, "temperatureSpread": 0.4, "merge": "vote", "useKl": True}, "seed": 1},
        "draft": {"draftMode": {"ngram": 3, "maxDraft": 8, "adaptive": True, "margin": 0.5}, "ignoreEos": True, "continue": False},
        "balanced": {"coltrane": {"preset": "balanced", "maxDepth": 4, "eddy": {"ngram": 3, "repeats": 2}, "prosody": "bias"}},
        "json": {"coltrane": {"preset": "json", "fallbackMass": 0.1}},
        "nan": {"temperature": "NaN", "topP": "Infinity"},
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
    }
    for name, o in options.items():
        seed("options", f"{name}.json", json.dumps(o))
    for name in sorted(os.listdir(os.path.join(FIX, "coltrane", "schemas"))):
        schema = json.loads(read(FIX, "coltrane", "schemas", name))
        seed("options", f"schema_{name}", json.dumps({"coltrane": {"schema": schema}, "maxTokens": 8}))
    option_words = {'"NaN"', '"Infinity"', '"-Infinity"', "1e308", "-0", "1e-45", "18446744073709551616", "9007199254740993", "lookup:", "n=", "k=", "margin=", "adaptive=", "base=", "spread=", "merge=", "top-k=", "kl=", "sensitivity=", "target=", "min-temperature="}
    option_words |= {'"' + k + '"' for k in ["temperature", "topK", "topP", "minP", "repeatPenalty", "repeatLastN", "seed", "moa", "coltrane", "maxTokens", "continue", "ignoreEos", "draftMode", "ngram", "maxDraft", "adaptive", "margin", "preset", "schema", "eddy", "maxDepth", "fallbackMass", "prosody", "k", "baseTemperature", "temperatureSpread", "minTemperature", "merge", "useKl", "sensitivity", "target", "repeats", "json", "balanced", "json_schema", "bias", "observe", "vote", "uniform", "deficit", "type", "json_schema", "json_object", "text"]}
    option_words |= {'"' + k + '"' for k in ["properties", "required", "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "enum", "const", "$ref", "$defs", "definitions", "anyOf", "oneOf", "allOf", "additionalProperties", "minimum", "maximum", "format", "string", "integer", "number", "boolean", "object", "array", "null"]}
    dictionary("options", option_words)
    seed("options", "draft_spec", "lookup:n=3,k=8,adaptive=1,margin=0.5")
    seed("options", "moa_spec", "k=3,base=0.7,spread=0.4,merge=deficit,top-k=40,sensitivity=0.1,kl=true")

    # Structured targets (sampler, carrier) start from a few byte strings.
    for target in ["sampler", "carrier"]:
        for i in range(4):
            seed(target, f"bytes{i}", bytes((j * 37 + i * 11) % 256 for j in range(64 * (i + 1))))

    # PNG images: grey, grey+alpha, RGB, 16-bit RGBA, indexed (unsupported).
    seed("carrier_png", "gray8.png", png(5, 3, 0, 8, bytes(range(15))))
    seed("carrier_png", "graya8.png", png(4, 4, 4, 8, bytes(range(32))))
    seed("carrier_png", "rgb8.png", png(3, 2, 2, 8, bytes(range(18))))
    seed("carrier_png", "rgba16.png", png(2, 2, 6, 16, bytes(range(32))))
    seed("carrier_png", "indexed.png", png(2, 2, 3, 8, bytes([0, 1, 2, 3])))


if __name__ == "__main__":
    main()
