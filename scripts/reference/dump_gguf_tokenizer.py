#!/usr/bin/env python3
"""Write a GGUF file's tokenizer as knot::TokenizerData JSON (crates/knot/src/meta.rs).

Usage: dump_gguf_tokenizer.py MODEL.gguf OUT.json
  e.g. dump_gguf_tokenizer.py models/gemma-3-270m-q4_k_m.gguf models/gemma3-tokenizer.json
Needs the `gguf` package (pip install gguf).
"""
import json
import sys

from gguf import GGUFReader


def field_value(reader, key):
    """The scalar, string or array stored under `key`, or None when the file lacks it."""
    field = reader.fields.get(key)
    if field is None:
        return None
    values = []
    for index in field.data:
        part = field.parts[index]
        if field.types[-1].name == "STRING":
            values.append(bytes(part).decode("utf-8"))
        else:
            values.append(part.tolist()[0])
    is_array = field.types[0].name == "ARRAY"
    return values if is_array else values[0]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    reader = GGUFReader(sys.argv[1])
    prefix = "tokenizer.ggml."
    data = {
        "model": field_value(reader, prefix + "model"),
        "pre": field_value(reader, prefix + "pre"),
        "tokens": field_value(reader, prefix + "tokens"),
        "token_types": field_value(reader, prefix + "token_type") or [],
        "merges": field_value(reader, prefix + "merges") or [],
        "scores": field_value(reader, prefix + "scores") or [],
        "bos_id": field_value(reader, prefix + "bos_token_id"),
        "eos_id": field_value(reader, prefix + "eos_token_id"),
        "unk_id": field_value(reader, prefix + "unknown_token_id"),
        "pad_id": field_value(reader, prefix + "padding_token_id"),
        "add_bos": bool(field_value(reader, prefix + "add_bos_token") or False),
        "add_eos": bool(field_value(reader, prefix + "add_eos_token") or False),
    }
    add_space_prefix = field_value(reader, prefix + "add_space_prefix")
    if add_space_prefix is not None:
        data["add_space_prefix"] = bool(add_space_prefix)
    with open(sys.argv[2], "w", encoding="utf-8") as out:
        json.dump(data, out, ensure_ascii=False, separators=(",", ":"))
        out.write("\n")


if __name__ == "__main__":
    main()
