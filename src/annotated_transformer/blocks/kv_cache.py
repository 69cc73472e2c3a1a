"""Key/value caches for incremental decoding.

Why: a causal decoder's earlier keys and values never change, so each step computes
only the new position's, not the whole prefix again (O(n) token-layer passes for n
tokens, not O(n²)). Self-attention's cache grows by the new positions; source
attention's (``static=True``) holds the encoder memory, projected once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class KVCache:
    """One attention's projected keys and values, (batch, heads, len, d_k) each.

    :meth:`update` appends the new positions and returns all so far; a static cache
    keeps its first keys/values and returns them, ignoring later arguments.
    """

    static: bool = False
    key: Tensor | None = None
    value: Tensor | None = None

    @property
    def length(self) -> int:
        """Number of cached positions."""
        return 0 if self.key is None else self.key.size(-2)

    @property
    def ready(self) -> bool:
        """True when a static cache holds its keys/values (nothing to project)."""
        return self.static and self.key is not None

    def update(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Add key and value (batch, heads, new, d_k); return all cached ones."""
        if self.key is None or self.value is None:
            self.key, self.value = key, value
        elif not self.static:
            self.key = torch.cat([self.key, key], dim=-2)
            self.value = torch.cat([self.value, value], dim=-2)
        return self.key, self.value

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (beam search: the surviving hypotheses)."""
        if self.key is not None and self.value is not None:
            self.key = self.key.index_select(0, index)
            self.value = self.value.index_select(0, index)


@dataclass
class DecoderCache:
    """One ``(self_kv, src_kv)`` pair of :class:`KVCache` per decoder layer;
    ``length``, the positions decoded so far, is the next token's position."""

    n_layers: int
    layers: list[tuple[KVCache, KVCache]] = field(init=False)

    def __post_init__(self) -> None:
        self.layers = [
            (KVCache(), KVCache(static=True)) for _ in range(self.n_layers)
        ]

    @property
    def length(self) -> int:
        return self.layers[0][0].length if self.layers else 0

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` in every layer's caches."""
        for self_kv, src_kv in self.layers:
            self_kv.reorder(index)
            src_kv.reorder(index)


def cache_bytes(caches: list[KVCache]) -> int:
    """Bytes held by the keys and values of self-attention caches, one per layer."""
    return sum(
        t.numel() * t.element_size() for c in caches for t in (c.key, c.value)
    )
