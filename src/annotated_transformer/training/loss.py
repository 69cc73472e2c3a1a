"""Label smoothing (Szegedy et al. 2016; Vaswani et al. 2017,
section 5.4, ε_ls = 0.1).

Instead of a one-hot target, each token's target is a smoothed distribution q over
the vocabulary of V classes. This package uses PyTorch's convention, the one
``F.cross_entropy(label_smoothing=ε)`` implements:

    q(c) = (1 - ε) · [c = y] + ε / V          for every class c, padding included

(the original Annotated Transformer instead put 1 - ε on y and ε / (V - 2) on every
class but y and padding; ``OriginalLabelSmoothing`` reproduces that one for
comparison). Positions whose target is the padding index contribute
nothing.

Two ways to compute the same thing:

- ``LabelSmoothing``: the explicit form that teaches — build q, then the KL
  divergence KL(q ‖ p) = Σ_c q(c) (log q(c) - log p(c)).
- ``smoothed_cross_entropy``: the fast form used in training — the cross-entropy
  H(q, p) = -Σ_c q(c) log p(c), fused in ``F.cross_entropy``.

They differ by a constant: KL(q ‖ p) = H(q, p) - H(q), and the entropy H(q) of the
target does not depend on the model, so both give the same gradients
(tests/test_loss.py checks this).

What the :class:`~annotated_transformer.training.trainer.Trainer` calls is a
``LossFn``: ``loss_fn(model, batch) -> (loss_sum, n_tokens)``, the loss summed over
a batch's tokens and their count. ``seq2seq_loss`` is the translation's (and the
copy task's), on a :class:`~annotated_transformer.data.batching.Batch`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.data.batching import Batch
from annotated_transformer.training.checkpoints import unwrap

LossFn = Callable[[nn.Module, Any], tuple[Tensor, Tensor | int]]


def _check_smoothing(smoothing: float) -> None:
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(
            f"smoothing={smoothing} must be in [0, 1): it is the mass moved off y"
        )


def _check_classes(size: int, padding_idx: int | None, smoothing: float) -> None:
    _check_smoothing(smoothing)
    if size < 1:
        raise ValueError(f"size={size} must be a positive number of classes")
    if padding_idx is not None and not 0 <= padding_idx < size:
        raise ValueError(
            f"padding_idx={padding_idx} is not a class id in [0, {size})"
        )


def _check_scores(x: torch.Tensor, target: torch.Tensor, size: int) -> None:
    if x.dim() != 2 or x.size(1) != size or target.shape != x.shape[:1]:
        raise ValueError(
            f"LabelSmoothing expects x (n, {size}) log-probabilities and target "
            f"(n,), got x {tuple(x.shape)} and target {tuple(target.shape)}; "
            "flatten (batch, len) first with x.view(-1, V) and target.view(-1)"
        )
    if target.numel() and (target.min() < 0 or target.max() >= size):
        raise ValueError(f"target ids must lie in [0, {size})")


class LabelSmoothing(nn.Module):
    """KL(q ‖ p) summed over the non-padding positions, with q the smoothed target.

    size: vocabulary size V; padding_idx: the padding token (its positions are
        skipped), or None when there is no padding; smoothing: ε.
    forward(x, target): x log-probabilities (n, V); target (n,) ids → loss, a scalar
        (sum). After each call ``self.true_dist`` holds q, (n, V), for pictures.

    Unlike the original, it stays finite for every finite x: zero target entries are
    skipped instead of computing 0 · log 0, and batches with no padding, one padding
    token or only padding all work (an all-padding batch gives 0).
    """

    def __init__(
        self, size: int, padding_idx: int | None, smoothing: float = 0.0
    ) -> None:
        super().__init__()
        _check_classes(size, padding_idx, smoothing)
        self.size, self.padding_idx, self.smoothing = size, padding_idx, smoothing
        self.true_dist: torch.Tensor | None = None

    def smoothed(self, ids: torch.Tensor) -> torch.Tensor:
        """q(c) = (1 − ε)·[c = y] + ε / V for target ids (n,): (n, V)."""
        eps = self.smoothing
        return F.one_hot(ids, self.size) * (1.0 - eps) + eps / self.size

    def target_distribution(self, target: torch.Tensor) -> torch.Tensor:
        """q for each target id: target (n,) → (n, V); rows of padding
        positions are all zero."""
        ids = target.reshape(-1)
        q = self.smoothed(ids)
        if self.padding_idx is not None:
            q[ids == self.padding_idx] = 0.0
        return q

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        _check_scores(x, target, self.size)
        q = self.true_dist = self.target_distribution(target).to(x.dtype)
        # Σ q (log q - x), skipping q = 0 entries: xlogy gives 0·log 0 = 0, and
        # masking x there avoids 0 · (-inf) = NaN when the model puts zero
        # probability on a zero-target class.
        return (torch.xlogy(q, q) - q * x.masked_fill(q == 0, 0.0)).sum()


class OriginalLabelSmoothing(LabelSmoothing):
    """The Annotated Transformer's smoothing, for comparison: 1 − ε on y,
    ε / (V − 2) on every class but y and padding, none on padding."""

    def __init__(self, size: int, padding_idx: int, smoothing: float = 0.0) -> None:
        if padding_idx is None or size < 3:
            raise ValueError(
                "OriginalLabelSmoothing needs a padding_idx and size >= 3 (got "
                f"size={size}, padding_idx={padding_idx}): ε is spread over the "
                "classes that are neither the target nor padding"
            )
        super().__init__(size, padding_idx, smoothing)

    def smoothed(self, ids: torch.Tensor) -> torch.Tensor:
        eps, V = self.smoothing, self.size
        q = torch.full((ids.numel(), V), eps / (V - 2), device=ids.device)
        q.scatter_(1, ids.reshape(-1, 1), 1.0 - eps)
        q[:, self.padding_idx] = 0.0
        return q


def smoothed_cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    padding_idx: int | None,
    smoothing: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fast path: H(q, p) summed over non-padding
    positions, computed in float32.

    logits: (..., V) scores or log-probabilities (log_softmax is idempotent, so a
        ``Generator`` that returns log-probabilities works too); target: (...) ids.
    returns (loss_sum, n_tokens): a scalar sum and the number of
        non-padding positions, so that callers can divide by the tokens of
        a whole (accumulated) batch.
    """
    _check_smoothing(smoothing)
    if logits.shape[:-1] != target.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and target {tuple(target.shape)} "
            "disagree: expected logits (..., V) and target (...) with the same "
            "leading sizes"
        )
    ignore = -100 if padding_idx is None else padding_idx
    loss_sum = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(),
        target.reshape(-1),
        ignore_index=ignore,
        label_smoothing=smoothing,
        reduction="sum",  # a sum, not a mean: an all-padding batch gives 0, not 0/0
    )
    n_tokens = (target != ignore).sum()
    return loss_sum, n_tokens


def seq2seq_loss(padding_idx: int, smoothing: float = 0.1) -> LossFn:
    """The translation loss: label-smoothed cross-entropy of an
    ``EncoderDecoder`` on a ``Batch``.

    Returns ``loss_fn(model, batch) -> (loss_sum, n_tokens)`` for ``Trainer``. The
    logits come from ``generator.logits`` so that ``F.cross_entropy`` does the
    fused log-softmax in fp32.
    """

    def loss_fn(model: nn.Module, batch: Batch) -> tuple[Tensor, Tensor]:
        hidden = model(
            batch.src, batch.tgt, batch.src_mask, batch.tgt_mask, **batch.packing
        )
        logits = unwrap(model).generator.logits(hidden)  # (b, len, vocab)
        return smoothed_cross_entropy(logits, batch.tgt_y, padding_idx, smoothing)

    return loss_fn
