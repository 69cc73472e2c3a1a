"""Chapter 06 exercises (Masks): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=06
or  python -m annotated_transformer.exercises 06
"""

import torch
from torch import Tensor


def prefix_lm_mask(prefix_len: Tensor, size: int) -> Tensor:
    """A prefix LM's mask: the prefix is read both ways, the rest causally.

    prefix_len: integer (batch,), how many first positions form each prefix
    returns bool (batch, size, size), True = may attend: query i sees key j
    when j < prefix_len (the whole prefix, also from inside it) or j <= i
    """
    raise NotImplementedError


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Attention weights: the softmax of the scores where mask is True, or 0.

    scores: (..., q_len, k_len) in any float dtype; mask: bool, broadcastable,
    True = may attend (every row has at least one True)
    returns weights of the scores' dtype and shape

    FIND THE BUG: the original Annotated Transformer's way. It works in float32;
    make it work in every floating-point dtype, float16 included.
    """
    return scores.masked_fill(~mask, -1e9).softmax(dim=-1)


def make_std_mask(tgt: Tensor, pad: int) -> Tensor:
    """The decoder's self-attention mask: no look-ahead and no padding.

    tgt: integer (batch, len); pad: the padding id
    returns bool (batch, len, len), True = may attend

    FIND THE BUG: the original Annotated Transformer's mask (issue #137). Fix
    the rows of padded queries: they must not read real tokens, and no row may
    be left without any key.
    """
    length = tgt.size(-1)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    return (tgt != pad).unsqueeze(-2) & causal


def sliding_window_mask(size: int, window: int) -> Tensor:
    """Causal attention over the last ``window`` positions only (the local
    attention of Longformer or Mistral, in its causal form).

    returns bool (size, size): query i sees key j when i - window < j <= i
    """
    raise NotImplementedError
