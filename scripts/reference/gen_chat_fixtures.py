#!/usr/bin/env python3
"""Generate tests/fixtures/chat/chat.json: chat templates rendered by Hugging Face
`apply_chat_template` (transformers' own Jinja2 environment), for engine::chat's parity test.

Usage: gen_chat_fixtures.py MODEL_DIR GGUF_NAME   (needs transformers, torch, gguf)
Templates: `smollm2` (the GGUF's tokenizer.chat_template) and `pycompat`, a hand-written template
using what HF templates lean on: Python string/dict methods, namespace, loop, tojson,
raise_exception. Its map literals list keys in sorted order: minijinja (without its
`preserve_order` feature) sorts map literal keys, Jinja2 keeps them as written.
"""
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoTokenizer  # noqa: E402

OUT = Path(__file__).resolve().parent.parent.parent / "tests" / "fixtures" / "chat" / "chat.json"

PYCOMPAT = """{{ bos_token }}
{%- set ns = namespace(system=false, count=0) %}
{%- for message in messages %}
    {%- if message['role'] not in ['system', 'user', 'assistant'] %}
        {{- raise_exception('Unsupported role: ' + message['role']) }}
    {%- endif %}
    {%- if message.role == 'system' %}{% set ns.system = true %}{% endif %}
    {%- set ns.count = ns.count + 1 %}
<|{{ message.role }}|>
{{ message.content.strip() }}
    {%- if message.content.startswith('!') %} [command]{% endif %}
    {%- if message['content'].endswith('?') %} [question]{% endif %}
    {%- if loop.last %} (last of {{ loop.length }}){% endif %}
{% endfor %}
{%- if add_generation_prompt %}
<|assistant|>
{%- else %}
{{ eos_token }}
{%- endif %}
system={{ ns.system }} count={{ ns.count }} upper={{ messages[0].content.upper() }}
words={{ messages[0]['content'].split() | join('|') }} trimmed=[{{ '  pad  ' | trim }}]
{% for key, value in {'a': [2.5, true, none], 'b': 1}.items() %}{{ key }}={{ value | tojson }};{% endfor %}

{{ {'n': [1, 2.5, false, none], 'name': 'café <&> "q"', 'nested': {'x': 'tab\\there'}} | tojson }}
{{ messages | tojson }}
{{ messages[-1] | tojson(indent=2) }}
"""

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
    [
        {"role": "user", "content": "  Hello there  "},
        {"role": "assistant", "content": "Hi! How can I help?"},
        {"role": "user", "content": "!reset\nnow"},
    ],
    [{"role": "user", "content": "Unicode: café 中文 😀 \"quotes\" \\ backslash\ttab"}],
]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], gguf_file=sys.argv[2])
    templates = {"smollm2": tokenizer.chat_template, "pycompat": PYCOMPAT}
    cases = []
    for name, template in templates.items():
        for messages in CONVERSATIONS + [[{"role": "tool", "content": "x"}]]:
            for add_generation_prompt in (False, True):
                case = {
                    "template": name,
                    "messages": messages,
                    "add_generation_prompt": add_generation_prompt,
                    "bos_token": tokenizer.bos_token,
                    "eos_token": tokenizer.eos_token,
                }
                try:
                    case["expected"] = tokenizer.apply_chat_template(
                        messages, chat_template=template, tokenize=False,
                        add_generation_prompt=add_generation_prompt)
                except Exception as error:  # noqa: BLE001 - raise_exception surfaces here
                    case["error"] = str(error)
                cases.append(case)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as out:
        json.dump({"templates": templates, "cases": cases}, out, ensure_ascii=False, indent=1)
        out.write("\n")
    print(f"{len(cases)} cases, {sum('error' in c for c in cases)} errors", file=sys.stderr)


if __name__ == "__main__":
    main()
