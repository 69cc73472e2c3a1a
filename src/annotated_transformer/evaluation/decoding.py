"""Turning a trained encoder-decoder into output sequences: greedy
decoding and beam search.

Both are batched: they decode every source sentence at once, and they return token
ids (batch, length) that start with ``start_symbol``; after a sequence's
``end_symbol`` the remaining positions repeat ``end_symbol``.

With ``use_cache=True`` each step feeds only the newest token to the decoder and
reuses the keys/values of the earlier ones (``kv_cache.DecoderCache``); with
``use_cache=False`` each step re-runs the whole prefix, which is slower (O(n²)
instead of O(n) token passes) and is the reference the cached path is tested
against.

The model is put in eval mode (no dropout) while decoding and restored afterwards.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from annotated_transformer.blocks.kv_cache import DecoderCache
from annotated_transformer.blocks.masks import subsequent_mask
from annotated_transformer.models.encoder_decoder import EncoderDecoder, Transformer
from annotated_transformer.models.eval_mode import evaluating


def _check(src: Tensor, src_mask: Tensor, max_len: int) -> None:
    if src.dim() != 2 or src_mask.shape != (src.size(0), 1, src.size(1)):
        raise ValueError(
            f"expected src (batch, src_len) and src_mask (batch, 1, src_len), got "
            f"{tuple(src.shape)} and {tuple(src_mask.shape)}; build the mask with "
            "padding_mask"
        )
    if max_len < 1:
        raise ValueError(
            f"max_len={max_len} must be >= 1 (it counts the start symbol)"
        )


def _eval_mode(fn: Callable) -> Callable:
    """Run ``fn(model, ...)`` in eval mode without autograd, then
    restore the model's mode."""

    @functools.wraps(fn)
    def wrapper(model: EncoderDecoder, *args: Any, **kwargs: Any) -> Any:
        with evaluating(model):
            return fn(model, *args, **kwargs)

    return wrapper


class _Stepper:
    """Log-probabilities of the next token after ``ys``, with or
    without a key/value cache.

    memory (batch, src_len, d_model) and src_mask are fixed; ``ys``
    (batch, len) is the prefix.
    """

    def __init__(
        self, model: EncoderDecoder, memory: Tensor, src_mask: Tensor, cached: bool
    ):
        if cached and not isinstance(model, Transformer):
            raise ValueError(
                "use_cache=True needs a Transformer (make_model's 2017 model has "
                "no cache); build it with Transformer(TransformerConfig(...)) or "
                "pass use_cache=False"
            )
        self.model, self.memory, self.src_mask = model, memory, src_mask
        self.cache = DecoderCache(len(model.decoder.layers)) if cached else None

    def __call__(self, ys: Tensor) -> Tensor:
        if self.cache is None:
            # Recompute: the whole prefix under the look-ahead mask.
            mask = subsequent_mask(ys.size(1), device=ys.device)
            out = self.model.decode(self.memory, self.src_mask, ys, mask)
        else:
            # Only the newest token; it may attend to everything before it.
            out = self.model.decode(
                self.memory, self.src_mask, ys[:, -1:], None, self.cache
            )
        return self.model.generator(out[:, -1])  # (batch, vocab)

    def reorder(self, index: Tensor) -> None:
        """Follow the hypotheses ``index`` (beam search)."""
        self.memory = self.memory.index_select(0, index)
        self.src_mask = self.src_mask.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)


@_eval_mode
def greedy_decode(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor,
    max_len: int,
    start_symbol: int,
    end_symbol: int | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Pick the most probable next token at every step.

    src (batch, src_len); src_mask bool (batch, 1, src_len).
    returns (batch, len) ids, len <= max_len (start symbol included); decoding stops
        early once every sequence has produced ``end_symbol``.
    """
    _check(src, src_mask, max_len)
    step = _Stepper(model, model.encode(src, src_mask), src_mask, use_cache)
    ys = src.new_full((len(src), 1), start_symbol, dtype=torch.long)
    done = src.new_zeros(len(src), dtype=torch.bool)
    while ys.size(1) < max_len and not done.all():
        # (batch,): the most probable next token of each sequence
        next_word = step(ys).argmax(dim=-1)
        if end_symbol is not None:
            next_word = next_word.masked_fill(done, end_symbol)
            done |= next_word == end_symbol
        ys = torch.cat([ys, next_word.unsqueeze(1)], dim=1)
    return ys


def check_beam_size(beam_size: int) -> None:
    """Refuse a beam of fewer than one hypothesis."""
    if beam_size < 1:
        raise ValueError(f"beam={beam_size} must be >= 1 (1 is greedy decoding)")


def check_length_penalty(alpha: float) -> None:
    """Refuse a length penalty α outside [0, 5] (NaN included)."""
    if not 0.0 <= alpha <= 5.0:
        raise ValueError(
            f"alpha={alpha}: the length penalty α must lie in [0, 5] (0: none)"
        )


def gnmt_length_penalty(length: Tensor, alpha: float) -> Tensor:
    """lp(Y) = ((5 + |Y|) / 6)^α (Wu et al. 2016, GNMT, eq.
    14); α = 0 turns it off."""
    return ((5.0 + length) / 6.0) ** alpha


@_eval_mode
def beam_search(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor,
    max_len: int,
    start_symbol: int,
    end_symbol: int,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    use_cache: bool = True,
) -> Tensor:
    """Keep the ``beam_size`` best partial translations at every step.

    Hypotheses are ranked by GNMT's length-normalised score log P(Y|X) / lp(Y) with
    lp(Y) = ((5 + |Y|) / 6)^α, α = ``length_penalty`` in [0, 5] (0.6 in the paper;
    0 ranks by raw log probability, which favours short outputs). |Y| counts
    generated tokens, ``end_symbol`` included, the start symbol not. A finished
    hypothesis (it produced ``end_symbol``) keeps its score and its place in the
    beam; search stops when every beam of every sentence has finished, or at
    ``max_len``. The best hypothesis per sentence is returned.

    src (batch, src_len); src_mask (batch, 1, src_len) → ids
    (batch, len), len <= max_len.
    """
    _check(src, src_mask, max_len)
    check_beam_size(beam_size)
    check_length_penalty(length_penalty)
    batch, K, device = src.size(0), beam_size, src.device
    # (batch * K, src_len, d_model): each source once per beam
    memory = model.encode(src, src_mask).repeat_interleave(K, dim=0)
    step = _Stepper(model, memory, src_mask.repeat_interleave(K, dim=0), use_cache)
    ys = torch.full((batch * K, 1), start_symbol, dtype=torch.long, device=device)
    # Sum of log-probabilities per hypothesis; all K beams start as the same empty
    # hypothesis, so only the first may expand at step 1 (the others start at -inf).
    logp = torch.full((batch, K), -torch.inf, device=device)
    logp[:, 0] = 0.0
    length = torch.zeros(batch, K, device=device)
    done = torch.zeros(batch, K, dtype=torch.bool, device=device)
    for _ in range(max_len - 1):
        scores = step(ys).float().view(batch, K, -1)  # (batch, K, vocab)
        V = scores.size(-1)
        # A finished hypothesis can only be extended by end_symbol, at no cost.
        finished_row = torch.full((V,), -torch.inf, device=device)
        finished_row[end_symbol] = 0.0
        scores = torch.where(done.unsqueeze(-1), finished_row, scores)
        cand_logp = logp.unsqueeze(-1) + scores  # (batch, K, V)
        cand_len = (length + (~done).float()).unsqueeze(-1).expand(-1, -1, V)
        rank = cand_logp / gnmt_length_penalty(cand_len, length_penalty)
        top = rank.view(batch, K * V).topk(K, dim=-1).indices  # (batch, K)
        beam, token = top // V, top % V
        logp = cand_logp.view(batch, -1).gather(1, top)
        length = cand_len.reshape(batch, -1).gather(1, top)
        done = done.gather(1, beam) | (token == end_symbol)
        rows = (beam + torch.arange(batch, device=device).unsqueeze(1) * K).view(-1)
        step.reorder(rows)
        ys = torch.cat([ys.index_select(0, rows), token.view(-1, 1)], dim=1)
        if bool(done.all()):
            break
    score = logp / gnmt_length_penalty(length, length_penalty)
    best = score.argmax(dim=-1)  # (batch,)
    return ys.view(batch, K, -1)[torch.arange(batch, device=device), best]
