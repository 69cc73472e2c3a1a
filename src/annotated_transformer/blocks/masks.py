"""Attention masks: which keys each query may look at (Vaswani et al. 2017, §3.2.3).

Masks are bool, ``True`` = *may attend* (the convention of PyTorch's
``scaled_dot_product_attention``), without the head axis (attention adds it):
padding, look-ahead, both (the decoder's), rows packed with several sentences, and
prompts padded on the left to be generated in one batch.
"""

from __future__ import annotations

import torch
from torch import Tensor


def check_tokens(tokens: Tensor, name: str = "tokens") -> None:
    """Raise a ValueError unless ``tokens`` is an integer (batch, len) tensor."""
    if tokens.dim() != 2:
        raise ValueError(
            f"{name} must be token ids of shape (batch, len), got "
            f"{tuple(tokens.shape)}"
        )
    check_integer_ids(tokens, name)


def check_integer_ids(tokens: Tensor, name: str = "tokens") -> None:
    """Raise a ValueError unless ``tokens`` (any shape) has an integer dtype."""
    if (
        tokens.dtype.is_floating_point
        or tokens.dtype.is_complex
        or tokens.dtype == torch.bool
    ):
        raise ValueError(
            f"{name} must hold integer token ids, got dtype {tokens.dtype}"
        )


def subsequent_mask(
    size: int, offset: int = 0, device: torch.device | str | None = None
) -> Tensor:
    """Look-ahead mask: query position i may attend to key positions j ≤ i.

    size: number of queries; offset: positions decoded before them (with a cache the
        queries are positions offset … offset + size − 1, the keys 0 … that)
    returns bool (1, size, offset + size), lower-triangular (diagonal included)
    """
    if size < 1:
        raise ValueError(
            f"subsequent_mask needs a positive integer size, got {size!r}"
        )
    ones = torch.ones(size, offset + size, dtype=torch.bool, device=device)
    return ones.tril(diagonal=offset).unsqueeze(0)


def window_mask(
    size: int, window: int, device: torch.device | str | None = None
) -> Tensor:
    """Sliding-window mask, both ways: i may attend to j when |i − j| ≤ window.

    returns bool (1, size, size), a band of width 2·window + 1 around the diagonal
    """
    if window < 0:
        raise ValueError(
            f"window={window} must be >= 0 (0: each position sees itself)"
        )
    i = torch.arange(size, device=device)
    return ((i[:, None] - i[None, :]).abs() <= window).unsqueeze(0)


def padding_mask(tokens: Tensor, pad: int) -> Tensor:
    """Key-padding mask: every query may attend to every non-padding key.

    tokens: integer (batch, len); pad: the padding token id
    returns bool (batch, 1, len); the singleton axis broadcasts over query positions
    """
    check_tokens(tokens, "tokens")
    return (tokens != pad).unsqueeze(-2)


def make_std_mask(tgt: Tensor, pad: int) -> Tensor:
    """Decoder self-attention mask: no look-ahead, no padding (the original's name).

    tgt: integer (batch, len), the decoder input; pad: the padding token id
    returns bool (batch, len, len), ``mask[b, i, j]`` = may query i attend to key j

    A real query i attends to the real keys j ≤ i; a padded query only to itself.
    The original hides padded keys only (harvardnlp/annotated-transformer #137), so
    a left-padded query can have no key at all: its softmax gives NaN.
    """
    check_tokens(tgt, "tgt")
    real = tgt != pad  # (batch, len)
    mask = padding_mask(tgt, pad) & subsequent_mask(tgt.size(-1), device=tgt.device)
    padded_query_row = ~real.unsqueeze(-1)  # (batch, len, 1)
    eye = torch.eye(tgt.size(-1), dtype=torch.bool, device=tgt.device)  # (len, len)
    return torch.where(padded_query_row, eye, mask)


target_mask = make_std_mask
"""A descriptive name for :func:`make_std_mask`."""


def segment_mask(
    q_segments: Tensor, k_segments: Tensor, causal: bool = False
) -> Tensor:
    """Attention inside packed rows: a query sees only the keys of its own sentence.

    q_segments: integer (batch, q_len), k_segments: integer (batch, k_len), each
        token's sentence in its row, numbered from 1, 0 for padding; causal: also
        hide later keys (the decoder's self-attention)
    returns bool (batch, q_len, k_len), ``mask[b, i, j]`` = may query i attend to j;
        a padding query attends to every key (no empty row, no NaN)
    """
    # (batch, q_len, k_len)
    same = q_segments.unsqueeze(-1) == k_segments.unsqueeze(-2)
    if causal:
        q_len, k_len = q_segments.size(-1), k_segments.size(-1)
        past = torch.ones(q_len, k_len, dtype=torch.bool, device=same.device)
        same = same & past.tril()
    padding_query = (q_segments == 0).unsqueeze(-1)  # (batch, q_len, 1)
    return (same & ~padding_query) | padding_query


def segment_positions(segments: Tensor) -> Tensor:
    """Each token's position within its own segment, restarting at every one.

    segments: integer (batch, len), as in :func:`segment_mask` -> long (batch, len);
    segments [1, 1, 1, 2, 2, 0] -> positions [0, 1, 2, 0, 1, 0]
    """
    index = torch.arange(segments.size(-1), device=segments.device)
    index = index.expand_as(segments)
    starts = torch.ones_like(segments, dtype=torch.bool)
    # True where a new segment begins
    starts[:, 1:] = segments[:, 1:] != segments[:, :-1]
    first = torch.where(starts, index, 0).cummax(dim=-1).values
    return index - first


def left_padding_mask(real: Tensor, new: int) -> Tensor:
    """Which keys the last ``new`` queries may see in left-padded rows.

    real: bool (batch, past + new), True = a token, False = padding before it
    returns bool (batch, new, past + new): query i (position past + i) sees the
    tokens j ≤ past + i; a padding query only itself (an empty row would be NaN)
    """
    if real.dtype != torch.bool or real.dim() != 2 or not 1 <= new <= real.size(1):
        raise ValueError(
            f"real must be bool (batch, past + new) with new={new} positions, "
            f"got {real.dtype} {tuple(real.shape)}"
        )
    past = real.size(1) - new
    causal = subsequent_mask(new, past, real.device)  # (1, new, past + new)
    keys = torch.arange(real.size(1), device=real.device)
    itself = keys == keys[past:, None]  # (new, past + new): key j = past + i
    return causal & real.unsqueeze(1) | itself


def left_padding_positions(real: Tensor, new: int) -> Tensor:
    """Positions (batch, new) of the last ``new`` places, counted from each row's
    first token as if it had no padding (padding: 0). real: (batch, past + new)."""
    return (real.long().cumsum(-1) - 1).clamp(min=0)[:, real.size(1) - new :]


def check_rows(mask: Tensor, name: str = "mask") -> None:
    """Raise a ValueError if a query row of ``mask`` (..., q_len, k_len) has no key.

    Such a row's softmax is 0/0, NaN. It reads the mask's values, so it runs once
    where a batch is built, not in every attention layer.
    """
    if not bool(mask.any(dim=-1).all()):
        raise ValueError(
            f"{name} has a query row with no key it may attend to; softmax over an "
            "empty set is undefined and would give NaN. Let every query see at "
            "least one key (e.g. the begin-of-sequence token), and ignore padded "
            "query positions in the loss instead."
        )


def check_mask(
    mask: Tensor, batch: int, q_len: int, k_len: int, name: str = "mask"
) -> None:
    """Raise a ValueError unless ``mask`` is bool (batch|1, q_len|1, k_len)."""
    if mask.dtype != torch.bool:
        raise ValueError(
            f"{name} must be boolean (True = may attend), got dtype {mask.dtype}"
        )
    shape = tuple(mask.shape)
    if (
        mask.dim() != 3
        or mask.size(0) not in (1, batch)
        or mask.size(1) not in (1, q_len)
        or mask.size(2) != k_len
    ):
        raise ValueError(
            f"{name} has shape {shape} but must be (batch={batch} or 1, "
            f"q_len={q_len} or 1, k_len={k_len}); build it with padding_mask / "
            "make_std_mask"
        )
