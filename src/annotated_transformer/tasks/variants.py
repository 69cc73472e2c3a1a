"""The decoder-only language models of the ``lm`` task, by the names a config
gives them: one entry per ``block`` name (``--set block=NAME``), and the parts of
the modern block by name (``--set norm=…``, ``positions=…``, ``feed_forward=…``),
each read here once and turned into the classes the model's config names.

An entry (:class:`Variant`) says how to build the model from the task's config,
which layer class the model stacks, and what the task needs to know about how the
model reads text. A new variant is a model file under ``models/`` (its layers under
``blocks/``) and one entry in :data:`VARIANTS`; from the entry

- the config accepts ``block=NAME`` and refuses another variant's options
  (``LanguageModelConfig`` in :mod:`annotated_transformer.tasks.lm`);
- the task builds, trains, scores and samples the model
  (:class:`~annotated_transformer.tasks.lm.LanguageModel`);
- the runner checkpoints and shards its layers
  (:func:`annotated_transformer.runner.stack_layers`);
- ``tests/test_registry.py`` trains it one step and checks its cache.

The models themselves know no names: their configs hold classes.

A builder takes the config (a ``LanguageModelConfig``: ``N``, ``d_model``, ``d_ff``,
``h``, ``dropout``, ``max_len`` and the variant's own options) and the vocabulary
size, and builds the model's own config object from them, the one object the
model passes to every layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from annotated_transformer.blocks.feed_forward import (
    GELUFeedForward,
    ReLU2FeedForward,
    ReLUFeedForward,
    SwiGLU,
)
from annotated_transformer.blocks.grouped_query_attention import (
    ALiBiAttention,
    GroupedQueryAttention,
    RotaryAttention,
)
from annotated_transformer.blocks.layers import TransformerBlock
from annotated_transformer.blocks.norms import layer_norm, rms_norm
from annotated_transformer.blocks.positional import (
    ALiBiPositions,
    LearnedPositions,
    NoPositions,
    RotaryPositions,
    SinusoidalPositions,
)
from annotated_transformer.blocks.sparse_attention import (
    Fixed,
    SparsePattern,
    SparseSelfAttention,
    Strided,
)
from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM
from annotated_transformer.models.gpt2 import GPT2LM, GPTConfig
from annotated_transformer.models.modern_decoder import (
    ModernBlock,
    ModernConfig,
    ModernDecoderLM,
)
from annotated_transformer.models.transformer_xl import (
    TransformerXLBlock,
    TransformerXLLM,
    XLConfig,
)

NORMS = {"rms": rms_norm, "layer": layer_norm}
# Each way of giving positions and the attention that applies them.
POSITIONS: dict[str, tuple[type[NoPositions], type[GroupedQueryAttention]]] = {
    "rope": (RotaryPositions, RotaryAttention),
    "alibi": (ALiBiPositions, ALiBiAttention),
    "learned": (LearnedPositions, GroupedQueryAttention),
    "sinusoidal": (SinusoidalPositions, GroupedQueryAttention),
    "none": (NoPositions, GroupedQueryAttention),
}
FEED_FORWARDS: dict[str, type[ReLUFeedForward | SwiGLU]] = {
    "swiglu": SwiGLU,
    "relu": ReLUFeedForward,
    "gelu": GELUFeedForward,
    "relu2": ReLU2FeedForward,
}


# The sparse attention patterns (``attention=strided``).
PATTERNS: dict[str, type[SparsePattern]] = {"strided": Strided, "fixed": Fixed}


def pattern_named(name: str, stride: int, c: int = 1) -> SparsePattern:
    """The pattern a config names; one clear error for a name that is none."""
    if name not in PATTERNS:
        raise ValueError(f"pattern={name!r}: use one of {', '.join(PATTERNS)}")
    return PATTERNS[name].of(stride, c)


def check_choices(norm: str, positions: str, feed_forward: str) -> None:
    """One clear error for a part of the modern block that does not exist."""
    for name, value, table in (
        ("norm", norm, NORMS),
        ("positions", positions, POSITIONS),
        ("feed_forward", feed_forward, FEED_FORWARDS),
    ):
        if value not in table:
            raise ValueError(f"{name}={value!r}: use one of {', '.join(table)}")


def modern_parts(
    norm: str = "rms", positions: str = "rope", feed_forward: str = "swiglu"
) -> dict[str, Any]:
    """The classes a :class:`ModernConfig` takes for the parts named (``norm``,
    ``positions`` and the ``attention`` that applies them, ``feed_forward``)."""
    position, attention = POSITIONS[positions]
    return {
        "norm": NORMS[norm],
        "positions": position,
        "attention": attention,
        "feed_forward": FEED_FORWARDS[feed_forward],
    }


@dataclass(frozen=True)
class Variant:
    """One language model the ``lm`` task can train.

    build: ``build(config, vocab)`` -> the model, untrained.
    block: the class of the layer the model stacks N times: activation
        checkpointing recomputes each one, FSDP shards each one.
    options: the config's settings that only this variant reads; every other
        variant refuses them when they differ from their defaults.
    memory: the model reads a text in consecutive segments and carries a memory
        from one to the next (``forward(x, memories, mem_len) -> (logits,
        memories)``, an attribute ``mem_len``: the memory it was trained with);
        otherwise it reads independent windows (``forward(x) -> logits``).
    sparse: its config takes block-sparse attention (``attention=strided`` or
        ``fixed``), :class:`~.blocks.sparse_attention.SparseSelfAttention`.
    samples: it has a key/value cache (``forward(x, cache)``, ``new_cache()``), so
        :func:`~annotated_transformer.evaluation.sampling.sample` generates from it.
    """

    build: Callable[[Any, int], nn.Module]
    block: type[nn.Module]
    options: tuple[str, ...] = ()
    memory: bool = False
    sparse: bool = False
    samples: bool = True


def build_2017(c: Any, vocab: int) -> DecoderLM:
    """The 2017 block (post-norm, ReLU), learned positions."""
    return DecoderLM(
        DecoderConfig(vocab, c.d_model, c.h, c.N, c.max_len, c.d_ff, c.dropout)
    )


def sparse_parts(c: Any) -> dict[str, Any]:
    """The attention class and pattern of the config's ``attention`` (nothing
    for "dense": the variant's own attention)."""
    if c.attention == "dense":
        return {}
    pattern = pattern_named(c.attention, c.sparse_stride, c.sparse_summary or 1)
    return {"attention": SparseSelfAttention, "pattern": pattern}


def build_modern(c: Any, vocab: int) -> ModernDecoderLM:
    """The Llama-style model, its parts from the config. SwiGLU is
    ``swiglu_width(d_ff)`` wide, the parameter count of a ReLU feed-forward of
    width ``d_ff``; ``kv_heads=0`` means one key/value head per query head."""
    parts = modern_parts(c.norm, c.positions, c.feed_forward) | sparse_parts(c)
    modern = ModernConfig(
        vocab, c.d_model, c.h, c.N, c.max_len,
        parts["feed_forward"].width(c.d_ff), kv_heads=c.kv_heads or None,
        dropout=c.dropout, bias=c.bias, **parts,
    )  # fmt: skip
    return ModernDecoderLM(modern)


def build_gpt2(c: Any, vocab: int) -> GPT2LM:
    """GPT-2: pre-norm LayerNorm, GELU, tied embeddings."""
    sizes = GPTConfig(
        vocab, c.d_model, c.h, c.N, c.max_len, c.d_ff, dropout=c.dropout,
        **sparse_parts(c),
    )  # fmt: skip
    return GPT2LM(sizes)


def build_xl(c: Any, vocab: int) -> TransformerXLLM:
    """Transformer-XL: ``max_len``-byte segments, a memory of ``mem_len`` states
    per layer (None: one segment, ``max_len``)."""
    mem_len = c.max_len if c.mem_len is None else c.mem_len
    return TransformerXLLM(
        XLConfig(vocab, c.d_model, c.h, c.N, c.d_ff, mem_len, c.dropout)
    )


MODERN_OPTIONS = ("kv_heads", "norm", "positions", "feed_forward", "bias")

VARIANTS: dict[str, Variant] = {
    "2017": Variant(build_2017, TransformerBlock),
    "modern": Variant(build_modern, ModernBlock, MODERN_OPTIONS, sparse=True),
    "gpt2": Variant(build_gpt2, ModernBlock, sparse=True),
    "xl": Variant(
        build_xl, TransformerXLBlock, ("mem_len",), memory=True, samples=False
    ),
}


def variants_with(flag: str) -> str:
    """The names of the variants whose ``flag`` is true, for a message: e.g.
    ``variants_with("sparse")`` is ``"modern or gpt2"``."""
    return " or ".join(name for name, v in VARIANTS.items() if getattr(v, flag))
