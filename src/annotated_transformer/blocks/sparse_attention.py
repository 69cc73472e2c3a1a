"""Sparse attention (Child et al. 2019): each query reads O(√n) keys, not n.

Masks are bool (n, n), True = may attend, query i, key j, all causal (j ≤ i).
Strided pattern, stride l (data with a period, e.g. image rows): local
``0 ≤ i − j < l`` and strided ``(i − j) mod l = 0``. Fixed pattern (text), blocks
of l with c summary positions: block ``⌊j / l⌋ = ⌊i / l⌋`` and summary
``j mod l ≥ l − c``. Two layers reach every j ≤ i (:func:`two_layer_reach`): local
then strided, or block then block | summary. With l ≈ √n: about n√n pairs, not n².

The kernels compute dense attention under a pattern's union (the paper's "merged"
head, with which any two layers reach every j ≤ i) block by block, never forming
an (n, n) score matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.blocks.kv_cache import KVCache
from annotated_transformer.blocks.rope import rotate_pairs


def _check_pattern(n: int, stride: int, c: int | None = None) -> None:
    if n < 1 or stride < 1:
        raise ValueError(f"n={n} and stride={stride} must be positive integers")
    if c is not None and not 1 <= c <= stride:
        raise ValueError(
            f"c={c} summary positions per block must lie in [1, stride={stride}]"
        )


def _grid(n: int) -> tuple[Tensor, Tensor]:
    """Query and key indices (n, 1) and (1, n), to broadcast to (n, n)."""
    i = torch.arange(n)
    return i[:, None], i[None, :]


def strided_masks(n: int, stride: int) -> tuple[Tensor, Tensor]:
    """The strided pattern's two masks, bool (n, n) each, True = may attend.

    returns (local, strided): local[i, j] = 0 ≤ i − j < stride;
    strided[i, j] = j ≤ i and (i − j) mod stride = 0
    """
    _check_pattern(n, stride)
    i, j = _grid(n)
    return (i - j >= 0) & (i - j < stride), (j <= i) & ((i - j) % stride == 0)


def fixed_masks(n: int, stride: int, c: int) -> tuple[Tensor, Tensor]:
    """The fixed pattern's two masks, bool (n, n) each, True = may attend.

    returns (block, summary): block[i, j] = j ≤ i and ⌊j / stride⌋ = ⌊i / stride⌋;
    summary[i, j] = j ≤ i and j mod stride ≥ stride − c
    """
    _check_pattern(n, stride, c)
    i, j = _grid(n)
    return (j <= i) & (j // stride == i // stride), (j <= i) & (
        j % stride >= stride - c
    )


def two_layer_reach(first: Tensor, second: Tensor) -> Tensor:
    """Which positions a query reads through two stacked attention layers.

    first, second: bool (n, n), the lower and the upper layer's masks (``A | B``
        for a layer whose heads use masks A and B)
    returns bool (n, n): reach[i, j] = ∃ k: second[i, k] and first[k, j]
    """
    if (
        first.shape != second.shape
        or first.dim() != 2
        or first.size(0) != first.size(1)
    ):
        raise ValueError(
            "masks must be square and of one shape (n, n), got "
            f"{tuple(first.shape)} and {tuple(second.shape)}"
        )
    return (second.long() @ first.long()) > 0


def reaches_all_earlier(first: Tensor, second: Tensor) -> bool:
    """True when two layers (``first`` below ``second``) let i read every j ≤ i."""
    n = first.size(0)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    return bool(two_layer_reach(first, second)[causal].all())


def attended_pairs(mask: Tensor) -> int:
    """The (query, key) pairs a bool mask lets attend: the work of one head."""
    return int(mask.sum())


def _check_blocks(n: int, stride: int, c: int | None = None) -> None:
    _check_pattern(n, stride, c)
    if n % stride != 0:
        raise ValueError(
            f"sequence length n={n} must be a multiple of stride={stride}; pad the "
            "sequence (and mask the padding out of the loss) to the next multiple"
        )


def strided_pairs(n: int, stride: int) -> int:
    """Pairs under local | strided, for n a multiple of stride: query i reads
    min(i + 1, stride) local keys and ⌊i / stride⌋ strided ones further back."""
    _check_blocks(n, stride)
    m = n // stride
    return (
        stride * (stride + 1) // 2
        + (n - stride) * stride
        + stride * m * (m - 1) // 2
    )


def fixed_pairs(n: int, stride: int, c: int) -> int:
    """Pairs under block | summary, for n a multiple of stride: query i reads
    (i mod stride) + 1 keys of its block and c of each earlier block."""
    _check_blocks(n, stride, c)
    m = n // stride
    return m * stride * (stride + 1) // 2 + c * stride * m * (m - 1) // 2


def _check_qkv(
    q: Tensor, k: Tensor, v: Tensor, stride: int, c: int | None = None
) -> None:
    if q.dim() != 4 or q.shape != k.shape or v.shape[:-1] != q.shape[:-1]:
        raise ValueError(
            "q, k must be (batch, heads, n, d_k) and v (batch, heads, n, d_v), got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    _check_blocks(q.size(2), stride, c)


def _softmax_parts(
    parts: list[Tensor], masks: list[Tensor], scale: float
) -> list[Tensor]:
    """One softmax over the key sets of ``parts`` (scores, masked by ``masks``),
    split back into the parts. Every query keeps itself, so no row is empty."""
    masked = [
        s.masked_fill(~m, float("-inf")) for s, m in zip(parts, masks, strict=True)
    ]
    scores = torch.cat(masked, dim=-1)
    weights = (scores * scale).softmax(dim=-1)
    return list(weights.split([s.size(-1) for s in parts], dim=-1))


def fixed_sparse_attention(
    q: Tensor, k: Tensor, v: Tensor, stride: int, c: int
) -> Tensor:
    """Causal attention under the fixed pattern's union, block | summary.

    q, k: (batch, heads, n, d_k); v: (batch, heads, n, d_v); n a multiple of stride
    returns (batch, heads, n, d_v) = softmax(Q Kᵀ / √d_k) V under block | summary

    Each of the m = n / stride query blocks scores its own block (stride × stride)
    and the m·c summary keys, of which it keeps those of earlier blocks:
    n · (stride + m·c) scores instead of n².
    """
    _check_qkv(q, k, v, stride, c)
    batch, heads, n, d_k = q.shape
    m = n // stride
    qb, kb, vb = (t.reshape(batch, heads, m, stride, t.size(-1)) for t in (q, k, v))
    # every block's last c keys and values
    k_sum = kb[..., stride - c :, :].reshape(batch, heads, 1, m * c, d_k)
    v_sum = vb[..., stride - c :, :].reshape(batch, heads, 1, m * c, v.size(-1))

    # (stride, stride)
    own = torch.ones(stride, stride, dtype=torch.bool, device=q.device).tril()
    block = torch.arange(m, device=q.device)
    # (m, 1, m·c): the summary keys of the blocks before the query's
    earlier = (block.repeat_interleave(c)[None, :] < block[:, None])[:, None, :]
    # scores (.., m, stride, stride) and (.., m, stride, m·c), one softmax
    w_own, w_sum = _softmax_parts(
        [qb @ kb.transpose(-2, -1), qb @ k_sum.transpose(-2, -1)],
        [own, earlier],
        1 / math.sqrt(d_k),
    )
    out = w_own @ vb + w_sum @ v_sum  # (batch, heads, m, stride, d_v)
    return out.reshape(batch, heads, n, v.size(-1))


def _with_previous_row(x: Tensor) -> Tensor:
    """(.., m, stride, d) -> (.., m, 2·stride, d): rows a − 1 (0 for a = 0), a."""
    previous = torch.cat([torch.zeros_like(x[:, :, :1]), x[:, :, :-1]], dim=2)
    return torch.cat([previous, x], dim=3)


def strided_sparse_attention(
    q: Tensor, k: Tensor, v: Tensor, stride: int
) -> Tensor:
    """Causal attention under the strided pattern's union, local | strided.

    q, k: (batch, heads, n, d_k); v: (batch, heads, n, d_v); n a multiple of stride
    returns (batch, heads, n, d_v) = softmax(Q Kᵀ / √d_k) V under local | strided

    Position i = a·stride + r is row a, column r of an (m = n / stride, stride)
    grid: its local keys lie in rows a − 1 and a (2·stride scores), its strided keys
    in column r of the rows before a (m scores): n · (2·stride + m) instead of n².
    """
    _check_qkv(q, k, v, stride)
    batch, heads, n, d_k = q.shape
    m = n // stride
    qb, kb, vb = (t.reshape(batch, heads, m, stride, t.size(-1)) for t in (q, k, v))
    k_loc, v_loc = (_with_previous_row(x) for x in (kb, vb))
    r = torch.arange(stride, device=q.device)
    a = torch.arange(m, device=q.device)
    t = torch.arange(2 * stride, device=q.device)
    # Key t of row a's window is position (a - 1)·stride + t: local
    # iff r < t ≤ stride + r.
    local = (t[None, None, :] > r[None, :, None]) & (
        t[None, None, :] <= stride + r[None, :, None]
    )
    # (m, stride, 2·stride)
    local = local & ((a[:, None, None] > 0) | (t[None, None, :] >= stride))

    # columns: (.., stride, m, d)
    qc, kc, vc = (x.transpose(2, 3) for x in (qb, kb, vb))
    # strided: rows a' < a, (m, 1, m)
    strided = (a[None, :] < a[:, None])[:, None, :]
    w_loc, w_col = _softmax_parts(
        [qb @ k_loc.transpose(-2, -1), (qc @ kc.transpose(-2, -1)).transpose(2, 3)],
        [local, strided],
        1 / math.sqrt(d_k),
    )
    # (.., m, stride, d_v)
    out = w_loc @ v_loc + (w_col.transpose(2, 3) @ vc).transpose(2, 3)
    return out.reshape(batch, heads, n, v.size(-1))


# --- in a model
# ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SparsePattern:
    """A pattern of stride (or block size) l: its two masks, and block-sparse
    attention under their union."""

    stride: int

    def __post_init__(self) -> None:
        _check_pattern(1, self.stride)

    @classmethod
    def of(cls, stride: int, c: int) -> SparsePattern:
        """The pattern from a config's options (c: the fixed pattern's only)."""
        return cls(stride)

    def masks(self, n: int) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        raise NotImplementedError


@dataclass(frozen=True)
class Strided(SparsePattern):
    """The strided pattern with stride l: local | strided."""

    def masks(self, n: int) -> tuple[Tensor, Tensor]:
        return strided_masks(n, self.stride)

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return strided_sparse_attention(q, k, v, self.stride)


@dataclass(frozen=True)
class Fixed(SparsePattern):
    """The fixed pattern, blocks of l with c summary positions: block | summary."""

    c: int = 1

    def __post_init__(self) -> None:
        _check_pattern(1, self.stride, self.c)

    @classmethod
    def of(cls, stride: int, c: int) -> Fixed:
        return cls(stride, c)

    def masks(self, n: int) -> tuple[Tensor, Tensor]:
        return fixed_masks(n, self.stride, self.c)

    def attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return fixed_sparse_attention(q, k, v, self.stride, self.c)


def sparse_mask(pattern: SparsePattern, n: int) -> Tensor:
    """A pattern's union mask, bool (n, n): local | strided, block | summary."""
    first, second = pattern.masks(n)
    return first | second


def sparse_attention(
    q: Tensor, k: Tensor, v: Tensor, pattern: SparsePattern
) -> Tensor:
    """Block-sparse causal attention under ``pattern``'s union mask, any length n.

    q, k: (batch, heads, n, d_k); v: (batch, heads, n, d_v); returns like v.
    n is padded at the end to a multiple of stride: no real query reads a later
    (padded) key, and the padded outputs are cut.
    """
    n, pad = q.size(-2), -q.size(-2) % pattern.stride
    q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    return pattern.attend(q, k, v)[..., :n, :]


class SparseSizes(Protocol):
    """The fields of a model's config sparse attention is built from."""

    d_model: int
    h: int
    bias: bool
    pattern: SparsePattern


class SparseSelfAttention(nn.Module):
    """Causal multi-head self-attention, each head under ``pattern``'s union mask.

    Grouped-query attention's W^Q, W^K, W^V, W^O with kv_heads = h, under the same
    names, so a dense model's weights load. Without a cache it runs
    :func:`sparse_attention`; with a :class:`KVCache` the new queries attend densely
    under rows past … past + new of :func:`sparse_mask`. No attention dropout.

    x: (batch, new, d_model) -> same; terms: optional RoPE (cos, sin) of the new
        positions; no mask: the patterns assume unpadded rows (``takes_padding``)
    """

    takes_padding = False

    def __init__(self, config: SparseSizes) -> None:
        super().__init__()
        c = config
        self.h, self.d_k, self.pattern = c.h, c.d_model // c.h, c.pattern
        self.w_q, self.w_k, self.w_v, self.w_o = (
            nn.Linear(c.d_model, c.d_model, bias=c.bias) for _ in range(4)
        )

    def forward(
        self,
        x: Tensor,
        cache: KVCache | None = None,
        terms: tuple[Tensor, Tensor] | None = None,
        mask: Tensor | None = None,
    ) -> Tensor:
        past, new = (0 if cache is None else cache.length), x.size(1)
        q, k, v = (
            w(x).unflatten(-1, (self.h, self.d_k)).transpose(1, 2) for w in self.qkv
        )
        if terms is not None:
            q, k = rotate_pairs(q, *terms), rotate_pairs(k, *terms)
        if cache is not None:
            # (batch, h, past + new, d_k)
            k, v = cache.update(k, v)
        if past == 0:
            out = sparse_attention(q, k, v, self.pattern)
        else:
            mask = sparse_mask(self.pattern, past + new)[past:]
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask.to(x.device)
            )
        return self.w_o(out.transpose(1, 2).flatten(2))  # (batch, new, d_model)

    @property
    def qkv(self) -> tuple[nn.Linear, nn.Linear, nn.Linear]:
        return self.w_q, self.w_k, self.w_v


def sparsified(model: nn.Module, pattern: SparsePattern) -> nn.Module:
    """``model`` (a ModernDecoderLM or GPT2LM) with block-sparse attention under
    ``pattern``: the same class built again from its config, with
    :class:`SparseSelfAttention` as its attention, and ``model``'s weights."""
    config = replace(model.config, attention=SparseSelfAttention, pattern=pattern)
    sparse = type(model)(config)
    sparse.load_state_dict(model.state_dict())
    return sparse
