"""GPT-2's published checkpoints: Hugging Face's layout and names <-> the package's.

A checkpoint is a folder with ``config.json`` (the sizes: ``n_embd``, ``n_head``,
``n_layer``, ``n_positions``, ``vocab_size``, ``n_inner``, ``layer_norm_epsilon``)
and ``model.safetensors``, whose names map to
:class:`~annotated_transformer.models.gpt2.GPT2LM`'s (some files put
``transformer.`` in front of every name):

    wte, wpe, ln_f                  embed, position.embedding, norm
    h.i.ln_1, h.i.ln_2              blocks.i.norm1, blocks.i.norm2
    h.i.attn.c_attn                 blocks.i.attention.w_q, w_k, w_v (stacked)
    h.i.attn.c_proj                 blocks.i.attention.w_o
    h.i.mlp.c_fc, h.i.mlp.c_proj    blocks.i.feed_forward.w_1, w_2

GPT-2's code writes its linear layers as ``Conv1D``, y = x W + b with W (in, out):
the transpose of ``nn.Linear``'s (out, in), so every matrix is transposed on the way
in and out. Not weights, and skipped: ``h.i.attn.bias`` and ``h.i.attn.masked_bias``
(the causal mask, stored by older files) and ``lm_head.weight`` when it equals
``wte`` (tied).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

SKIPPED = (".attn.bias", ".attn.masked_bias")
LINEARS = {  # Conv1D -> nn.Linear
    "attn.c_proj": "attention.w_o",
    "mlp.c_fc": "feed_forward.w_1",
    "mlp.c_proj": "feed_forward.w_2",
}
NORMS = {"ln_1": "norm1", "ln_2": "norm2"}
QKV = ("w_q", "w_k", "w_v")


def gpt2_sizes(config: dict[str, Any]) -> dict[str, Any]:
    """The fields of :class:`~annotated_transformer.models.gpt2.GPTConfig` that
    config.json sets."""
    supported = {
        "activation_function": ("gelu_new", "gelu_pytorch_tanh"),
        "scale_attn_weights": (True,),
        "scale_attn_by_inverse_layer_idx": (False,),
        "tie_word_embeddings": (True,),
    }
    for key, allowed in supported.items():
        if config.get(key, allowed[0]) not in allowed:
            raise ValueError(
                f"config.json has {key}={config[key]!r}; GPT2LM implements GPT-2's "
                f"{allowed[0]!r} only"
            )
    return {
        "vocab": config["vocab_size"],
        "d_model": config["n_embd"],
        "h": config["n_head"],
        "N": config["n_layer"],
        "max_len": config["n_positions"],
        "d_ff": config.get("n_inner") or 4 * config["n_embd"],
        "eps": config.get("layer_norm_epsilon", 1e-5),
    }


def gpt2_config(config: Any) -> dict[str, Any]:
    """The config.json of a model built from ``config`` (a ``GPTConfig``)."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": config.vocab,
        "n_positions": config.max_len,
        "n_embd": config.d_model,
        "n_layer": config.N,
        "n_head": config.h,
        "n_inner": config.d_ff,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": config.eps,
        "resid_pdrop": config.dropout,
        "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout,
        "tie_word_embeddings": True,
    }


def _one_to_one(blocks: set[str]) -> list[tuple[str, str, bool]]:
    """(Hugging Face's name, GPT2LM's name, transposed?) of every weight but W^Q,
    W^K and W^V, for the blocks numbered ``blocks``."""
    pairs = [("wte", "embed"), ("wpe", "position.embedding")]
    names = [(f"{hf}.weight", f"{book}.weight", False) for hf, book in pairs]
    names += [(f"ln_f.{p}", f"norm.{p}", False) for p in ("weight", "bias")]
    for i, part in ((i, part) for i in blocks for part in ("weight", "bias")):
        hf, book = f"h.{i}.", f"blocks.{i}."
        for ln, norm in NORMS.items():
            names.append((f"{hf}{ln}.{part}", f"{book}{norm}.{part}", False))
        for conv, linear in LINEARS.items():
            conv_name, linear_name = f"{hf}{conv}.{part}", f"{book}{linear}.{part}"
            names.append((conv_name, linear_name, part == "weight"))
    return names


def from_hf(weights: dict[str, Tensor]) -> dict[str, Tensor]:
    """Hugging Face's GPT-2 weights -> GPT2LM's state dict; matrices (in, out)
    become (out, in). Names are not checked here: see :func:`check_names`."""
    weights = {name.removeprefix("transformer."): w for name, w in weights.items()}
    blocks = {name.split(".")[1] for name in weights if name.startswith("h.")}
    state = {}
    for hf, book, transposed in _one_to_one(blocks):
        state[book] = weights[hf].T if transposed else weights[hf]
    state["to_logits.weight"] = state["embed.weight"]  # tied
    for i, part in ((i, part) for i in blocks for part in ("weight", "bias")):
        qkv = weights[f"h.{i}.attn.c_attn.{part}"]
        qkv = qkv.T if part == "weight" else qkv  # (3 d_model, d_model), or bias
        for name, w in zip(QKV, qkv.chunk(3, dim=0), strict=True):
            state[f"blocks.{i}.attention.{name}.{part}"] = w
    return state


def to_hf(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """GPT2LM's state dict -> Hugging Face's GPT-2 names, contiguous as safetensors
    stores them; the tied output matrix once, as ``wte``."""
    blocks = {name.split(".")[1] for name in state if name.startswith("blocks.")}
    weights = {}
    for hf, book, transposed in _one_to_one(blocks):
        weights[hf] = state[book].T if transposed else state[book]
    for i, part in ((i, part) for i in blocks for part in ("weight", "bias")):
        qkv = torch.cat([state[f"blocks.{i}.attention.{n}.{part}"] for n in QKV])
        weights[f"h.{i}.attn.c_attn.{part}"] = qkv.T if part == "weight" else qkv
    return {name: w.detach().contiguous() for name, w in weights.items()}


def _listed(names: set[str]) -> str:
    """At most three names, then how many more."""
    more = f" (+{len(names) - 3} more)" if len(names) > 3 else ""
    return ", ".join(sorted(names)[:3]) + more


def check_names(weights: dict[str, Tensor], expected: dict[str, Tensor]) -> None:
    """Raise a one-line ValueError unless ``weights`` (a file's) hold exactly the
    names and shapes of ``expected`` (:func:`to_hf` of the model config.json
    describes), once :data:`SKIPPED` buffers and a tied ``lm_head`` are removed."""
    found = {n.removeprefix("transformer."): w for n, w in weights.items()}
    found = {n: w for n, w in found.items() if not n.endswith(SKIPPED)}
    head, wte = found.pop("lm_head.weight", None), found.get("wte.weight")
    if head is not None and wte is not None and not torch.equal(head, wte):
        raise ValueError("lm_head.weight differs from wte.weight: GPT2LM ties them")
    missing, extra = set(expected) - set(found), set(found) - set(expected)
    if missing or extra:
        differences = [("missing", missing), ("unexpected", extra)]
        what = "; ".join(f"{kind} {_listed(n)}" for kind, n in differences if n)
        raise ValueError(f"model.safetensors does not match config.json: {what}")
    for name, w in expected.items():
        if found[name].shape != w.shape:
            shape = tuple(found[name].shape)
            raise ValueError(
                f"model.safetensors has {name} of shape {shape}, but config.json "
                f"implies {tuple(w.shape)}"
            )
