"""The decoder-only language models of the ``lm`` task, by the names a config
gives them: one entry per ``block`` name (``--set block=NAME``), and the parts of
the modern block by name (``--set norm=…``, ``positions=…``, ``feed_forward=…``),
each read here once and turned into the classes the model's config names.

An entry (:class:`Variant`) names the model's config class and model class, the
layer class the model stacks, and what the task needs to know about how the
model reads text. A new variant is a model file under ``models/`` (its layers under
``blocks/``) and one entry in :data:`VARIANTS`; from the entry

- the task's config holds a model config of that class when ``block=NAME``, and
  refuses another variant's options
  (``LanguageModelConfig`` in :mod:`annotated_transformer.tasks.lm`);
- the task builds, trains, scores and samples the model
  (:class:`~annotated_transformer.tasks.lm.LanguageModel`);
- the runner checkpoints and shards its layers
  (:func:`annotated_transformer.runner.stack_layers`);
- ``tests/test_registry.py`` trains it one step and checks its cache.

The models themselves know no names: their configs hold classes. The command line
and saved configs name a model flat: ``block``, the sizes every variant has
(:data:`SIZES`) and the :class:`Options`; :func:`model_named` turns those into the
model config, :func:`model_settings` back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
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
class Options:
    """The settings that name the variant (``block``) and parts of its model on the
    command line and in saved configs, as strings and numbers. Each variant reads
    some of them (:attr:`Variant.options`, and the sparse ones where it is
    ``sparse``); the others keep these defaults. The sizes common to every variant
    (:data:`SIZES`) are its model config's own fields."""

    block: str = "2017"  # VARIANTS: 2017, modern, gpt2, xl
    kv_heads: int = 0  # modern: key/value heads (0: h, multi-head; 1: multi-query)
    norm: str = "rms"  # modern: rms or layer
    positions: str = "rope"  # modern: rope, alibi, learned, sinusoidal or none
    feed_forward: str = "swiglu"  # modern: swiglu, relu, gelu or relu2
    bias: bool = False  # modern: biases in the linear layers and LayerNorm
    mem_len: int | None = None  # xl: states kept per layer (None: max_len)
    attention: str = "dense"  # dense, strided or fixed (block-sparse)
    sparse_stride: int = 0  # sparse: l, the block length and stride
    sparse_summary: int = 0  # fixed: c, summary positions per block (1..l)


# The sizes every variant's model config holds, by the names they have there
# (d_ff: the width of a ReLU feed-forward, which SwiGLU matches in parameters).
SIZES = ("N", "d_model", "d_ff", "h", "dropout", "max_len")


@dataclass(frozen=True)
class Variant:
    """One language model the ``lm`` task can train.

    config: its model config class, which the task's config holds (``model``);
    model: the model class, built from it (``model(config)``).
    block: the class of the layer the model stacks N times: activation
        checkpointing recomputes each one, FSDP shards each one.
    options: the :class:`Options` that only this variant reads; every other
        variant refuses them when they differ from their defaults.
    memory: the model reads a text in consecutive segments and carries a memory
        from one to the next (``forward(x, memories, mem_len) -> (logits,
        memories)``, an attribute ``mem_len``: the memory it was trained with);
        otherwise it reads independent windows (``forward(x) -> logits``).
    sparse: its config takes block-sparse attention (``attention=strided`` or
        ``fixed``), :class:`~.blocks.sparse_attention.SparseSelfAttention`.
    samples: it has a key/value cache (``forward(x, cache)``, ``new_cache()``), so
        :func:`~annotated_transformer.evaluation.sampling.sample` generates from it.
    named: ``named(sizes, options) -> config``, the model config that flat
        settings name; ``naming(config) -> settings``, back. By default the
        config's fields named in :data:`SIZES` are the sizes, and it reads no
        option.
    """

    config: type
    model: type[nn.Module]
    block: type[nn.Module]
    options: tuple[str, ...] = ()
    memory: bool = False
    sparse: bool = False
    samples: bool = True
    named: Callable[[dict[str, Any], Options], Any] | None = None
    naming: Callable[[Any], dict[str, Any]] | None = None

    def config_named(self, sizes: dict[str, Any], options: Options) -> Any:
        """The model config of these sizes and options."""
        if self.named is not None:
            return self.named(sizes, options)
        own = {f.name for f in fields(self.config)}
        return self.config(**{k: v for k, v in sizes.items() if k in own})

    def settings(self, config: Any) -> dict[str, Any]:
        """``config``'s sizes and the options it was named by."""
        if self.naming is not None:
            return self.naming(config)
        return {k: getattr(config, k) for k in SIZES if hasattr(config, k)}


def sparse_parts(options: Options) -> dict[str, Any]:
    """The attention class and pattern of ``attention`` (nothing for "dense": the
    variant's own attention)."""
    if options.attention == "dense":
        return {}
    c = options.sparse_summary or 1
    pattern = pattern_named(options.attention, options.sparse_stride, c)
    return {"attention": SparseSelfAttention, "pattern": pattern}


def sparse_options(config: Any) -> dict[str, Any]:
    """The options of ``config``'s sparse pattern (none when it is dense)."""
    pattern = config.pattern
    if pattern is None:
        return {}
    name = next(k for k, v in PATTERNS.items() if type(pattern) is v)
    summary = getattr(pattern, "c", 0)
    return {"attention": name, "sparse_stride": pattern.stride} | (
        {"sparse_summary": summary} if summary else {}
    )


def name_of(value: Any, table: dict[str, Any]) -> str:
    """The name ``table`` gives ``value``."""
    return next(k for k, v in table.items() if v is value)


def modern_named(sizes: dict[str, Any], o: Options) -> ModernConfig:
    """The Llama-style model: its feed-forward has the parameters of a ReLU one
    ``d_ff`` wide (``relu_d_ff``); ``kv_heads=0`` means one key/value head per
    query head."""
    d_ff, others = sizes["d_ff"], {k: v for k, v in sizes.items() if k != "d_ff"}
    parts = modern_parts(o.norm, o.positions, o.feed_forward) | sparse_parts(o)
    return ModernConfig(
        **others, relu_d_ff=d_ff, kv_heads=o.kv_heads or None, bias=o.bias, **parts
    )


def modern_naming(c: ModernConfig) -> dict[str, Any]:
    position = next(k for k, (p, _) in POSITIONS.items() if p is c.positions)
    return {
        **{k: getattr(c, k) for k in SIZES if k != "d_ff"},
        "d_ff": c.relu_d_ff,
        "kv_heads": 0 if c.kv_heads == c.h else c.kv_heads,
        "norm": name_of(c.norm, NORMS),
        "positions": position,
        "feed_forward": name_of(c.feed_forward, FEED_FORWARDS),
        "bias": c.bias,
        **sparse_options(c),
    }


def gpt2_named(sizes: dict[str, Any], o: Options) -> GPTConfig:
    return GPTConfig(**sizes, **sparse_parts(o))


def gpt2_naming(c: GPTConfig) -> dict[str, Any]:
    return {k: getattr(c, k) for k in SIZES} | sparse_options(c)


def xl_named(sizes: dict[str, Any], o: Options) -> XLConfig:
    """Transformer-XL: ``max_len``-byte segments, a memory of ``mem_len`` states
    per layer (None: one segment, ``max_len``)."""
    mem_len = sizes["max_len"] if o.mem_len is None else o.mem_len
    return XLConfig(**sizes, mem_len=mem_len)


def xl_naming(c: XLConfig) -> dict[str, Any]:
    mem_len = None if c.mem_len == c.max_len else c.mem_len
    return {k: getattr(c, k) for k in SIZES} | {"mem_len": mem_len}


MODERN_OPTIONS = ("kv_heads", "norm", "positions", "feed_forward", "bias")

VARIANTS: dict[str, Variant] = {
    "2017": Variant(DecoderConfig, DecoderLM, TransformerBlock),
    "modern": Variant(
        ModernConfig, ModernDecoderLM, ModernBlock, MODERN_OPTIONS, sparse=True,
        named=modern_named, naming=modern_naming,
    ),
    "gpt2": Variant(
        GPTConfig, GPT2LM, ModernBlock, sparse=True, named=gpt2_named,
        naming=gpt2_naming,
    ),
    "xl": Variant(
        XLConfig, TransformerXLLM, TransformerXLBlock, ("mem_len",), memory=True,
        samples=False, named=xl_named, naming=xl_naming,
    ),
}  # fmt: skip


def variant_of(config: Any) -> str:
    """The name of the variant whose model config ``config`` is."""
    for name, variant in VARIANTS.items():
        if type(config) is variant.config:
            return name
    known = ", ".join(v.config.__name__ for v in VARIANTS.values())
    raise ValueError(
        f"a {type(config).__name__} is no language model's config: use one of "
        f"{known}"
    )


def variants_with(flag: str) -> str:
    """The names of the variants whose ``flag`` is true, for a message: e.g.
    ``variants_with("sparse")`` is ``"modern or gpt2"``."""
    return " or ".join(name for name, v in VARIANTS.items() if getattr(v, flag))


# --- the lm task's model, named flat (--set block=modern, saved configs)
# ------------------------------------------------------------------------------


def model_settings(config: Any) -> dict[str, Any]:
    """A variant's model config as flat settings: its ``block``, its sizes and its
    :class:`Options` (those it does not read at their defaults)."""
    block = variant_of(config)
    return asdict(Options(block=block)) | VARIANTS[block].settings(config)


def model_named(settings: dict[str, Any], default: Any) -> Any:
    """The model config that flat ``settings`` name (the others: ``default``'s
    settings), refusing in one line a name that is none, and another variant's
    option changed from its default (it would be silently ignored)."""
    flat = model_settings(default) | settings
    options = Options(**{f.name: flat[f.name] for f in fields(Options)})
    if options.block not in VARIANTS:
        raise ValueError(
            f"block={options.block!r}: use one of {', '.join(VARIANTS)}"
        )
    check_choices(options.norm, options.positions, options.feed_forward)
    check_sparse(options, flat["h"])
    variant, defaults = VARIANTS[options.block], Options()
    for name, other in VARIANTS.items():
        changed = [
            k
            for k in other.options
            if k not in variant.options
            and getattr(options, k) != getattr(defaults, k)
        ]
        if changed:
            raise ValueError(
                f"block={options.block} has no {', '.join(changed)}: use "
                f"block={name}"
            )
    sizes = {k: v for k, v in flat.items() if k in SIZES}
    return variant.config_named(sizes, options)


def check_sparse(o: Options, h: int) -> None:
    """Refuse sparse options that do not fit each other or the variant."""
    if o.attention not in ("dense", *PATTERNS):
        raise ValueError(
            f"attention={o.attention!r}: use dense, {', '.join(PATTERNS)}"
        )
    if o.attention == "dense":
        if o.sparse_stride or o.sparse_summary:
            raise ValueError(
                "sparse_stride and sparse_summary need attention=strided/fixed"
            )
        return
    other_block = not VARIANTS[o.block].sparse or o.positions == "alibi"
    if other_block or o.kv_heads not in (0, h):
        raise ValueError(
            f"attention={o.attention} needs block={variants_with('sparse')}, "
            "kv_heads=0 and no ALiBi"
        )
    if o.sparse_stride < 1:
        raise ValueError(f"attention={o.attention} needs sparse_stride >= 1")
    if o.attention == "strided" and o.sparse_summary:
        raise ValueError(
            "sparse_summary is the fixed pattern's: use attention=fixed"
        )
    if o.attention == "fixed" and not 1 <= o.sparse_summary <= o.sparse_stride:
        raise ValueError(
            f"sparse_summary={o.sparse_summary} must lie in [1, "
            f"sparse_stride={o.sparse_stride}]"
        )
