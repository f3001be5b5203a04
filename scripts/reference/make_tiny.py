#!/usr/bin/env python3
"""Build tiny random llama models and their reference outputs under tests/fixtures/tiny/.

For each variant this writes
  <name>.gguf      laid out as llama.cpp's convert_hf_to_gguf.py would for arch `llama`
                   (Q/K rows permuted for interleaved RoPE, norms f32, byte-level `gpt2` vocab)
  <name>-hf/       config.json + model.safetensors + tokenizer.json (HF layout)
  <name>.json      reference outputs computed by transformers in float32

and checks that transformers reloads both the GGUF and the HF directory with logits bit-identical
to the in-memory reference model (which verifies the Q/K permutation).

Usage: HF_HUB_OFFLINE=1 python scripts/reference/make_tiny.py [--out tests/fixtures/tiny]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oracle  # noqa: E402

SEED = 20250611
INIT_STD = 0.15
NORM_JITTER = 0.1
BOS_ID = 1
EOS_ID = 2
NEW_TOKENS = 32
PROMPT_SEED = 7

VARIANTS = [
    # name, stored dtype of matrices, tied embeddings, config.json layout
    ("llama-f32", "f32", False, "v5"),
    ("llama-f16", "f16", False, "v5"),
    ("llama-tied-f32", "f32", True, "v4"),
]


def tiny_config(tied: bool) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=tied,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=None,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
    )


def build_model(tied: bool, round_to_f16: bool) -> LlamaForCausalLM:
    """A float32 model with seeded weights; optionally every weight rounded through f16.

    Weights are drawn from our own generator in a fixed (sorted-name) order so they do not depend
    on transformers' init code. Norm weights are jittered around 1 so a wrong norm shows up.
    """
    config = tiny_config(tied)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name in sorted(params):
            p = params[name]
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + NORM_JITTER * noise)
            else:
                p.copy_(INIT_STD * noise)
            if round_to_f16:
                p.copy_(p.to(torch.float16).to(torch.float32))
    if tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model


def rope_theta(cfg: LlamaConfig) -> float:
    # transformers 5 moved rope_theta into rope_parameters.
    params = getattr(cfg, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))


def permute_for_gguf(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """HF q/k rows -> llama.cpp interleaved-RoPE row order (as convert_hf_to_gguf.py does).

    HF rotates pairs (i, i + d/2) within a head; ggml rotates adjacent pairs (2i, 2i+1). Within
    each head, row i of the first half goes to 2i and row i of the second half to 2i+1.
    """
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    rows = w.shape[0]
    half = rows // n_head // 2
    return w.reshape(n_head, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def byte_level_tokens() -> list[str]:
    """GPT-2's byte -> printable unicode mapping; token id i is the character for byte i."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    mapping = {}
    extra = 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return [mapping[b] for b in range(256)]



def add_byte_level_tokenizer(writer, vocab_size):
    """The tiny models' tokenizer: GPT-2 byte-level BPE over exactly the 256 byte tokens."""
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(byte_level_tokens())
    writer.add_token_types([gguf.TokenType.NORMAL] * vocab_size)
    # No merges: with a vocab of exactly the 256 byte tokens no merge result would be in the
    # vocab. The key is still written, as an empty string array.
    writer.add_empty_string_array(gguf.Keys.Tokenizer.MERGES)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_add_bos_token(False)

def gguf_tensor_name(hf_name: str) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    prefix = "model.layers."
    assert hf_name.startswith(prefix), hf_name
    layer, rest = hf_name[len(prefix) :].split(".", 1)
    suffix = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }[rest]
    return f"blk.{layer}.{suffix}"


class EmptyArrayGGUFWriter(gguf.GGUFWriter):
    """GGUFWriter that can store an empty array.

    The GGUF format allows arrays of length 0, but gguf-py refuses them. A byte-only vocab has no
    merges, and both llama.cpp and transformers expect the `tokenizer.ggml.merges` key of a `gpt2`
    tokenizer to exist (transformers otherwise derives merges from scores, which gpt2 lacks).
    """

    def add_empty_string_array(self, key: str) -> None:
        self.add_key_value(key, [], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.STRING)

    def _pack_val(self, val, vtype, add_vtype, sub_type=None):
        if vtype == gguf.GGUFValueType.ARRAY and len(val) == 0:
            out = bytearray()
            if add_vtype:
                out += self._pack("I", vtype)
            out += self._pack("I", sub_type)
            out += self._pack("Q", 0)
            return bytes(out)
        return super()._pack_val(val, vtype, add_vtype, sub_type)


def write_gguf(model: LlamaForCausalLM, path: Path, name: str, dtype: str) -> None:
    cfg = model.config
    writer = EmptyArrayGGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_freq_base(rope_theta(cfg))
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    writer.add_vocab_size(cfg.vocab_size)
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    add_byte_level_tokenizer(writer, cfg.vocab_size)

    state = model.state_dict()
    for hf_name in state:
        if hf_name == "lm_head.weight" and cfg.tie_word_embeddings:
            # Tied checkpoints carry no lm_head; the converter writes no output.weight.
            continue
        w = state[hf_name].detach().to(torch.float32).numpy().copy()
        if hf_name.endswith("q_proj.weight"):
            w = permute_for_gguf(w, cfg.num_attention_heads, cfg.num_attention_heads)
        elif hf_name.endswith("k_proj.weight"):
            w = permute_for_gguf(w, cfg.num_attention_heads, cfg.num_key_value_heads)
        # Like the converter's f16 mode: only matrices go to f16, 1-D tensors (norms) stay f32.
        if dtype == "f16" and w.ndim > 1:
            w = w.astype(np.float16)
        writer.add_tensor(gguf_tensor_name(hf_name), w)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def rewrite_config_v4_style(config_path: Path) -> None:
    """Rewrite config.json the way transformers 4.x (and most published checkpoints) spell it.

    transformers 5 writes `rope_parameters: {rope_theta, rope_type}` and `dtype`; older files have
    a top-level `rope_theta` and `torch_dtype`. One fixture in each spelling keeps a converter
    honest about both.
    """
    cfg = json.loads(config_path.read_text())
    rope = cfg.pop("rope_parameters")
    assert rope.get("rope_type", "default") == "default", rope
    cfg["rope_theta"] = rope["rope_theta"]
    cfg["rope_scaling"] = None
    cfg["torch_dtype"] = cfg.pop("dtype")
    config_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def write_hf_dir(model: LlamaForCausalLM, out_dir: Path, dtype: str, config_style: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    to_save = model
    if dtype == "f16":
        to_save = build_model(model.config.tie_word_embeddings, round_to_f16=True).to(torch.float16)
    to_save.save_pretrained(out_dir)
    # generation_config.json is not part of the fixture contract.
    (out_dir / "generation_config.json").unlink(missing_ok=True)
    if config_style == "v4":
        rewrite_config_v4_style(out_dir / "config.json")

    vocab = {tok: i for i, tok in enumerate(byte_level_tokens())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(out_dir / "tokenizer.json"))

    # Sanity: every byte is one token, id == byte value.
    sample = "Hi, knot! é"
    ids = tok.encode(sample).ids
    assert ids == list(sample.encode("utf-8")), (ids, sample)
    assert tok.decode(ids) == sample


def prompts() -> list[tuple[str, str | None, list[int]]]:
    gen = torch.Generator().manual_seed(PROMPT_SEED)
    single = [int(torch.randint(0, 256, (1,), generator=gen))]
    text = "The cat"
    rand20 = [int(v) for v in torch.randint(0, 256, (20,), generator=gen)]
    return [
        ("len1-random", None, single),
        ("len7-text-bytes", text, list(text.encode("utf-8"))),
        ("len20-random", None, rand20),
    ]


def check_reload(reference: LlamaForCausalLM, loaded, what: str) -> None:
    ids = [p for _, _, ids in prompts() for p in ids]
    want = oracle.logits_for(reference, ids)
    got = oracle.logits_for(loaded, ids)
    if not torch.equal(want, got):
        diff = float((want - got).abs().max())
        raise AssertionError(f"{what}: logits differ from the reference model (max abs diff {diff})")
    print(f"  reload ok: {what} (logits bit-identical)")


def make_variant(out: Path, name: str, dtype: str, tied: bool, config_style: str) -> None:
    print(f"{name}:")
    reference = build_model(tied, round_to_f16=(dtype == "f16"))

    gguf_path = out / f"{name}.gguf"
    write_gguf(reference, gguf_path, name, dtype)
    hf_dir = out / f"{name}-hf"
    write_hf_dir(reference, hf_dir, dtype, config_style)

    loaded = AutoModelForCausalLM.from_pretrained(str(out), gguf_file=gguf_path.name, dtype=torch.float32).eval()
    assert bool(loaded.config.tie_word_embeddings) == tied, "GGUF reload disagrees on tied embeddings"
    check_reload(reference, loaded, gguf_path.name)
    loaded_hf = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).eval()
    check_reload(reference, loaded_hf, hf_dir.name)

    cases = [
        oracle.reference_case(reference, case_name, ids, NEW_TOKENS, prompt=text, full_logits_last=True)
        for case_name, text, ids in prompts()
    ]
    cfg = reference.config
    data = {
        "model": name,
        "source": {
            "script": "scripts/reference/make_tiny.py",
            "gguf": gguf_path.name,
            "hf_dir": hf_dir.name,
            "hf_config_style": config_style,
            "weights": (
                f"torch.Generator seed {SEED}, params in sorted-name order: matrices N(0, {INIT_STD}), "
                f"norm weights 1 + {NORM_JITTER}*N(0, 1)"
                + ("; every weight rounded to f16, computed in f32" if dtype == "f16" else "")
            ),
            "stored_dtype": dtype,
            "tie_word_embeddings": tied,
            "config": {
                "vocab_size": cfg.vocab_size,
                "hidden_size": cfg.hidden_size,
                "intermediate_size": cfg.intermediate_size,
                "num_hidden_layers": cfg.num_hidden_layers,
                "num_attention_heads": cfg.num_attention_heads,
                "num_key_value_heads": cfg.num_key_value_heads,
                "max_position_embeddings": cfg.max_position_embeddings,
                "rms_norm_eps": cfg.rms_norm_eps,
                "rope_theta": rope_theta(cfg),
            },
            "compute": "transformers LlamaForCausalLM, float32, CPU, no KV cache; greedy = argmax "
            "over the full recomputed sequence; no BOS added",
            "tokenizer": "byte-level: token id == byte value (GPT-2 byte->unicode strings), no merges",
            "versions": oracle.library_versions(),
        },
        "cases": cases,
    }
    oracle.write_json(out / f"{name}.json", data)
    print(f"  wrote {name}.gguf, {name}-hf/, {name}.json")


def check_tokenizers(out: Path, name: str) -> None:
    """transformers' own tokenizers (from the GGUF and from tokenizer.json) map bytes to ids 1:1."""
    sample = "The cat sat. Über 42!"
    want = list(sample.encode("utf-8"))
    from_gguf = AutoTokenizer.from_pretrained(str(out), gguf_file=f"{name}.gguf")
    from_dir = AutoTokenizer.from_pretrained(str(out / f"{name}-hf"))
    for what, tok in (("GGUF", from_gguf), ("tokenizer.json", from_dir)):
        got = tok.encode(sample, add_special_tokens=False)
        if got != want:
            raise AssertionError(f"{name} {what} tokenizer: {got} != bytes {want}")
    print(f"  tokenizers ok: GGUF and tokenizer.json encode bytes 1:1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/tiny"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, dtype, tied, config_style in VARIANTS:
        make_variant(args.out, name, dtype, tied, config_style)
        check_tokenizers(args.out, name)


if __name__ == "__main__":
    main()
