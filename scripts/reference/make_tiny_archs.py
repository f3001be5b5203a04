#!/usr/bin/env python3
"""Build tiny random qwen2 / qwen3 / gemma3 models and their reference outputs under tests/fixtures/tiny/.

For each architecture this writes
  <name>.gguf      laid out as llama.cpp's convert_hf_to_gguf.py would (Qwen2Model, Qwen3Model,
                   Gemma3Model): tensor names from gguf-py's own TensorNameMap, no Q/K permutation
                   (these archs use NEOX RoPE), gemma3 norm weights stored as 1 + w
  <name>-hf/       config.json + model.safetensors + tokenizer.json (HF layout)
  <name>.json      reference outputs computed by transformers in float32 (schema of make_tiny.py)

and checks that transformers reloads both the GGUF and the HF directory with logits bit-identical
to the in-memory reference model.

The tokenizer is the byte-level one of make_tiny.py (token id == byte): these fixtures test the
forward pass, not the tokenizer.

Gemma3 notes. llama.cpp's GGUF has no key for the sliding-window layer pattern (llama.cpp fixes it
at every 6th layer global), for query_pre_attn_scalar (llama.cpp uses head_dim) or for the local
RoPE base (10000); the model therefore has 6 layers, query_pre_attn_scalar == head_dim and the
default local base, and the GGUF reload passes query_pre_attn_scalar, which transformers' GGUF
loader does not read either.

Usage: HF_HUB_OFFLINE=1 python scripts/reference/make_tiny_archs.py [--out tests/fixtures/tiny]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import oracle  # noqa: E402
from make_tiny import (  # noqa: E402
    BOS_ID,
    EOS_ID,
    INIT_STD,
    NEW_TOKENS,
    NORM_JITTER,
    SEED,
    EmptyArrayGGUFWriter,
    add_byte_level_tokenizer,
    byte_level_tokens,
    check_reload,
    prompts,
)

GEMMA_SLIDING_WINDOW = 4
GEMMA_LAYERS = 6  # llama.cpp's fixed pattern: layers 0-4 local, layer 5 global


def common(**kw) -> dict:
    base = dict(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=None,
    )
    base.update(kw)
    return base


def qwen2_model():
    cfg = Qwen2Config(**common(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               rope_theta=1000000.0, use_sliding_window=False))
    return Qwen2ForCausalLM(cfg)


def qwen3_model():
    cfg = Qwen3Config(**common(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                               rope_theta=1000000.0, attention_bias=False, use_sliding_window=False))
    return Qwen3ForCausalLM(cfg)


def gemma3_model():
    cfg = Gemma3TextConfig(**common(
        num_hidden_layers=GEMMA_LAYERS, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
        query_pre_attn_scalar=32, sliding_window=GEMMA_SLIDING_WINDOW, tie_word_embeddings=True,
        hidden_activation="gelu_pytorch_tanh", attn_logit_softcapping=None, final_logit_softcapping=None,
    ))
    return Gemma3ForCausalLM(cfg)


ARCHS = {
    # name: (builder, gguf arch)
    "qwen2-f32": (qwen2_model, gguf.MODEL_ARCH.QWEN2),
    "qwen3-f32": (qwen3_model, gguf.MODEL_ARCH.QWEN3),
    "gemma3-f32": (gemma3_model, gguf.MODEL_ARCH.GEMMA3),
}


def is_gemma(model) -> bool:
    return model.config.model_type == "gemma3_text"


def build_model(name: str):
    """Seeded f32 weights in sorted-name order. Norm weights are jittered around an effective 1:
    Gemma stores the offset from 1 (its norm multiplies by 1 + w), the others store w."""
    model = ARCHS[name][0]().to(torch.float32).eval()
    gen = torch.Generator().manual_seed(SEED)
    gemma = is_gemma(model)
    with torch.no_grad():
        params = dict(model.named_parameters())
        for pname in sorted(params):
            p = params[pname]
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if pname.endswith("norm.weight"):
                p.copy_((0.0 if gemma else 1.0) + NORM_JITTER * noise)
            else:
                p.copy_(INIT_STD * noise)
    return model


def rope_theta(cfg, layer_type: str = "full_attention") -> float:
    params = getattr(cfg, "rope_parameters", None) or {}
    if layer_type in params:
        params = params[layer_type]
    return float(params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))


def write_gguf(model, path: Path, name: str, arch) -> None:
    cfg = model.config
    gemma = is_gemma(model)
    writer = EmptyArrayGGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    writer.add_name(name)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_freq_base(rope_theta(cfg))
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    if getattr(cfg, "head_dim", None) is not None:
        # TextModel.set_gguf_parameters writes key/value length whenever config.json has head_dim.
        writer.add_key_length(cfg.head_dim)
        writer.add_value_length(cfg.head_dim)
    if gemma:
        writer.add_sliding_window(cfg.sliding_window)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    add_byte_level_tokenizer(writer, cfg.vocab_size)

    # The converter's own HF -> GGUF name table.
    name_map = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    for hf_name, t in model.state_dict().items():
        if hf_name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        w = t.detach().to(torch.float32).numpy().copy()
        if gemma and hf_name.endswith("norm.weight"):
            # Gemma3Model.modify_tensors: norm weights + norm_shift (1.0).
            w = w + np.float32(1.0)
        new = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert new is not None, hf_name
        writer.add_tensor(new, w)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_hf_dir(model, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    (out_dir / "generation_config.json").unlink(missing_ok=True)
    vocab = {tok: i for i, tok in enumerate(byte_level_tokens())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(out_dir / "tokenizer.json"))


def config_summary(cfg) -> dict:
    keys = ["model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
            "rms_norm_eps", "tie_word_embeddings", "sliding_window", "query_pre_attn_scalar",
            "layer_types", "hidden_activation", "hidden_act"]
    out = {k: getattr(cfg, k) for k in keys if getattr(cfg, k, None) is not None}
    out["rope_theta"] = rope_theta(cfg)
    if getattr(cfg, "layer_types", None) and "sliding_attention" in cfg.layer_types:
        out["rope_theta_local"] = rope_theta(cfg, "sliding_attention")
    return out


def make_variant(out: Path, name: str) -> None:
    print(f"{name}:")
    reference = build_model(name)
    arch = ARCHS[name][1]
    gguf_path = out / f"{name}.gguf"
    write_gguf(reference, gguf_path, name, arch)
    hf_dir = out / f"{name}-hf"
    write_hf_dir(reference, hf_dir)

    # transformers' GGUF loader reads neither query_pre_attn_scalar (gemma3) nor
    # attention.key_length for qwen3 (it falls back to Qwen3Config's head_dim of 128).
    extra = {}
    if is_gemma(reference):
        extra["query_pre_attn_scalar"] = reference.config.query_pre_attn_scalar
    if reference.config.model_type == "qwen3":
        extra["head_dim"] = reference.config.head_dim
    loaded = AutoModelForCausalLM.from_pretrained(
        str(out), gguf_file=gguf_path.name, dtype=torch.float32, **extra
    ).eval()
    check_reload(reference, loaded, gguf_path.name)
    loaded_hf = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32).eval()
    check_reload(reference, loaded_hf, hf_dir.name)

    cases = [
        oracle.reference_case(reference, case_name, ids, NEW_TOKENS, prompt=text, full_logits_last=True)
        for case_name, text, ids in prompts()
    ]
    data = {
        "model": name,
        "source": {
            "script": "scripts/reference/make_tiny_archs.py",
            "gguf": gguf_path.name,
            "hf_dir": hf_dir.name,
            "weights": (
                f"torch.Generator seed {SEED}, params in sorted-name order: matrices and biases "
                f"N(0, {INIT_STD}), norm weights (effective) 1 + {NORM_JITTER}*N(0, 1)"
            ),
            "stored_dtype": "f32",
            "tie_word_embeddings": bool(reference.config.tie_word_embeddings),
            "config": config_summary(reference.config),
            "compute": f"transformers {type(reference).__name__}, float32, CPU, no KV cache; greedy = "
            "argmax over the full recomputed sequence; no BOS added",
            "tokenizer": "byte-level: token id == byte value (GPT-2 byte->unicode strings), no merges",
            "versions": oracle.library_versions(),
        },
        "cases": cases,
    }
    oracle.write_json(out / f"{name}.json", data)
    print(f"  wrote {name}.gguf, {name}-hf/, {name}.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/tiny"))
    parser.add_argument("--only", nargs="*", default=list(ARCHS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only:
        make_variant(args.out, name)


if __name__ == "__main__":
    main()
