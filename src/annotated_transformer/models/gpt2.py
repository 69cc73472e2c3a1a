"""GPT-2 (Radford et al. 2019): the 2017 decoder-only model with four changes.

- pre-norm LayerNorm blocks and a final LayerNorm: a
  :class:`~annotated_transformer.models.modern_decoder.ModernDecoderLM` with
  ``norm=layer_norm``, learned positions, biases and ``kv_heads=h``;
- GELU instead of ReLU in the feed-forward, x · Φ(x) in the tanh approximation
  GPT-2's code uses: a smooth ReLU that lets small negative values through;
- tied input and output embeddings: logits h Eᵀ with the token table E itself (no
  output bias), as the 2017 paper's §3.4 already did;
- :func:`gpt2_init_`: weights N(0, 0.02²), biases zero, positions N(0, 0.01²), and
  the two residual projections of each block (W^O and W₂) scaled by 1/√(2N), so
  that the residual stream, a sum of 2N contributions, starts with about the
  embeddings' variance at any depth.

:meth:`GPT2LM.from_pretrained` loads the published checkpoints
(:mod:`~annotated_transformer.models.gpt2_weights`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from annotated_transformer.blocks.feed_forward import GELUFeedForward
from annotated_transformer.blocks.norms import layer_norm
from annotated_transformer.blocks.positional import LearnedPositions, NoPositions
from annotated_transformer.models import gpt2_weights as hf_gpt2
from annotated_transformer.models.modern_decoder import (
    ModernConfig,
    ModernDecoderLM,
)

from ..blocks.grouped_query_attention import GroupedQueryAttention

INIT_STD = 0.02  # GPT-2's weights and token embeddings
POSITION_STD = 0.01  # GPT-2's learned position table


def residual_projections(model: ModernDecoderLM) -> list[nn.Linear]:
    """The 2N layers that write into the residual stream:
    each block's W^O and W₂."""
    return [
        layer
        for b in model.blocks
        for layer in (b.attention.w_o, b.feed_forward.w_2)
    ]


def gpt2_init_(model: ModernDecoderLM) -> None:
    """GPT-2's initialisation, in place: N(0, 0.02²) weights, zero biases,
    N(0, 0.01²) positions, residual projections N(0, (0.02 / √(2N))²) with N
    blocks; norms stay 1 and 0."""
    for module in model.modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=INIT_STD)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    nn.init.normal_(model.position.embedding.weight, std=POSITION_STD)
    for layer in residual_projections(model):
        nn.init.normal_(
            layer.weight, std=INIT_STD / math.sqrt(2 * len(model.blocks))
        )


@dataclass(frozen=True)
class GPTConfig(ModernConfig):
    """GPT-2's choices among :class:`ModernConfig`'s parts: pre-norm LayerNorm
    (eps 1e-5), learned positions, GELU of width 4 · d_model (d_ff None), biases,
    one key/value head per query head, tied embeddings, no dropout."""

    kv_heads: int | None = None
    norm: Callable[[int, bool, float | None], nn.Module] = layer_norm
    positions: type[NoPositions] = LearnedPositions
    attention: type[GroupedQueryAttention] = GroupedQueryAttention
    feed_forward: type[nn.Module] = GELUFeedForward
    bias: bool = True
    eps: float | None = 1e-5
    tie_embeddings: bool = True


class GPT2LM(ModernDecoderLM):
    """GPT-2: N pre-norm LayerNorm blocks with GELU, learned positions, tied
    embeddings, initialised as GPT-2 was (:func:`gpt2_init_`).

    logits = LayerNorm(blocks(dropout(E[x] + P))) Eᵀ
    x: integer (batch, len), ids in [0, vocab); returns logits (batch, len, vocab)
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__(config)
        gpt2_init_(self)

    @classmethod
    def from_pretrained(cls, path: str | Path, dropout: float = 0.0) -> GPT2LM:
        """A published GPT-2 from a folder in Hugging Face's layout: config.json
        and model.safetensors (:mod:`~annotated_transformer.models.gpt2_weights`).
        Every weight must be there and no other (one-line error naming the
        difference)."""
        path = Path(path).expanduser()
        files = [path / "config.json", path / "model.safetensors"]
        if not all(f.is_file() for f in files):
            raise FileNotFoundError(
                f"{path} must hold config.json and model.safetensors (a GPT-2 "
                "checkpoint in Hugging Face's layout)"
            )
        config = json.loads(files[0].read_text(encoding="utf-8"))
        return cls.from_weights(config, load_file(files[1]), dropout)

    @classmethod
    def from_weights(
        cls,
        config: dict,
        weights: dict[str, Tensor],
        dropout: float = 0.0,
    ) -> GPT2LM:
        """A GPT-2 from ``config.json``'s content and weights named as in Hugging
        Face's ``model.safetensors`` (or a ``GPT2LMHeadModel.state_dict()``),
        strictly."""
        sizes = GPTConfig(**hf_gpt2.gpt2_sizes(config), dropout=dropout)
        with torch.device("meta"):  # sizes only: every weight is then replaced
            model = cls(sizes)
        hf_gpt2.check_names(weights, hf_gpt2.to_hf(model.state_dict()))
        dtype = torch.get_default_dtype()
        state = hf_gpt2.from_hf(weights)
        state = {name: w.to(dtype).contiguous() for name, w in state.items()}
        model.load_state_dict(state, assign=True)
        model.to_logits.weight = model.embed.weight  # tied again (assign set two)
        return model

    def save_pretrained(self, path: str | Path) -> None:
        """Write config.json and model.safetensors in Hugging Face's layout."""
        path = Path(path).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        config = hf_gpt2.gpt2_config(self.config)
        (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        save_file(hf_gpt2.to_hf(self.state_dict()), path / "model.safetensors")
