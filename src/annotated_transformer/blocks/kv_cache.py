"""Key/value caches for incremental decoding.

A decoder generates one token at a time. Without a cache, step t re-runs the whole
prefix of t tokens through every layer, so a sequence of length n costs O(n²)
token-layer passes. The keys and values of earlier positions never change (the
decoder is causal), so we keep their projections and compute only the new position's
query, key and value at each step.

Two kinds of cache per decoder layer:

- self-attention: grows by one position per step (new keys/values are appended);
- source attention: the encoder memory is fixed, so its keys and values are
  projected once (``static=True``) and reused at every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Projected keys and values of one attention module,
    ``(batch, heads, len, d_k)`` each.

    ``static=False``: :meth:`update` appends the new positions and returns
    everything so far. ``static=True``: the first :meth:`update` stores its
    keys/values; later calls ignore their arguments and return the stored ones (the
    source memory does not change while decoding).
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
        """True when a static cache already holds its keys/values
        (no projection needed)."""
        return self.static and self.key is not None

    def update(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``key``/``value`` ``(batch, heads, new, d_k)``;
        return all cached ones."""
        if self.key is None or self.value is None:
            self.key, self.value = key, value
        elif not self.static:
            self.key = torch.cat([self.key, key], dim=-2)
            self.value = torch.cat([self.value, value], dim=-2)
        return self.key, self.value

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (beam search: follow the
        surviving hypotheses)."""
        if self.key is not None and self.value is not None:
            self.key = self.key.index_select(0, index)
            self.value = self.value.index_select(0, index)


@dataclass
class DecoderCache:
    """One ``(self_kv, src_kv)`` pair of :class:`KVCache` per decoder layer.

    ``length`` is the number of target positions already decoded, i.e. the position
    offset of the next token.
    """

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
    """Bytes held by the keys and values of a list of self-attention
    caches (one per layer)."""
    return sum(
        t.numel() * t.element_size() for c in caches for t in (c.key, c.value)
    )
