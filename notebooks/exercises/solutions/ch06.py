"""Reference solutions of chapter 06's exercises."""

import torch
from torch import Tensor


def prefix_lm_mask(prefix_len: Tensor, size: int) -> Tensor:
    """A prefix LM's mask: the prefix is read both ways, the rest causally.

    prefix_len: integer (batch,), how many first positions form each prefix
    returns bool (batch, size, size), True = may attend: query i sees key j
    when j < prefix_len (the whole prefix, also from inside it) or j <= i
    """
    j = torch.arange(size)
    in_prefix = j < prefix_len[:, None, None]  # (batch, 1, size)
    causal = torch.ones(size, size, dtype=torch.bool).tril()  # (size, size)
    return in_prefix | causal


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Attention weights: the softmax of the scores where mask is True, or 0.

    scores: (..., q_len, k_len) in any float dtype; mask: bool, broadcastable,
    True = may attend (every row has at least one True)
    returns weights of the scores' dtype and shape
    """
    lowest = torch.finfo(scores.dtype).min  # -inf would also do
    return scores.masked_fill(~mask, lowest).softmax(dim=-1)


def make_std_mask(tgt: Tensor, pad: int) -> Tensor:
    """The decoder's self-attention mask: no look-ahead and no padding.

    tgt: integer (batch, len); pad: the padding id
    returns bool (batch, len, len), True = may attend
    """
    length = tgt.size(-1)
    real = tgt != pad  # (batch, len)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    mask = real[:, None, :] & causal  # real queries: real keys j <= i
    itself = torch.eye(length, dtype=torch.bool)
    # a padded query attends to itself only
    return torch.where(real[:, :, None], mask, itself)


def sliding_window_mask(size: int, window: int) -> Tensor:
    """Causal attention over the last ``window`` positions only (the local
    attention of Longformer or Mistral, in its causal form).

    returns bool (size, size): query i sees key j when i - window < j <= i
    """
    i = torch.arange(size)[:, None]
    j = torch.arange(size)[None, :]
    return (j <= i) & (j > i - window)
