"""BERT's masked language model: hide some tokens, predict them from both sides
(Devlin et al. 2019, §3.1).

A left-to-right model predicts token t from tokens < t. An encoder sees the whole
sentence, so "predict the next token" would be trivial; BERT instead corrupts the
input and asks for the original tokens back:

- each ordinary (non-special) token is *selected* with probability p = 0.15;
- of the selected: 80 % become ``[MASK]``, 10 % a random ordinary
  token, 10 % stay unchanged;
- the loss is the cross-entropy at the selected positions only.

Why not always ``[MASK]``? ``[MASK]`` never occurs when the model is fine-tuned, so
the model must also produce good representations of tokens that look normal; the
random 10 % make it distrust every input token a little, the unchanged 10 % bias it
towards the observed one.

Labels hold the original id at selected positions and ``-100`` elsewhere, the
default ``ignore_index`` of ``F.cross_entropy``, so
``F.cross_entropy(logits.transpose(1, 2), labels)`` averages over the selected
positions only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from annotated_transformer.blocks.embeddings import check_ids
from annotated_transformer.blocks.masks import check_integer_ids

IGNORE_INDEX = -100  # F.cross_entropy's default ignore_index
# Of the selected tokens: masked, replaced at random; the remaining 0.1 stay.
MASK_SHARE, RANDOM_SHARE = 0.8, 0.1


def _check_arguments(
    tokens: Tensor,
    mask_id: int,
    vocab_size: int,
    special_ids: Sequence[int],
    p: float,
) -> None:
    check_integer_ids(tokens)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p is a probability and must lie in [0, 1], got {p}")
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be a positive integer, got {vocab_size}")
    for name, ids in (("mask_id", [mask_id]), ("special_ids", list(special_ids))):
        if any(not 0 <= i < vocab_size for i in ids):
            raise ValueError(
                f"{name} {ids} must lie in [0, vocab_size={vocab_size})"
            )
    check_ids(tokens, vocab_size)


def mask_tokens(
    tokens: Tensor,
    *,
    mask_id: int,
    vocab_size: int,
    special_ids: Sequence[int],
    p: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Corrupt ``tokens`` for masked language modelling; return (inputs, labels).

    tokens: integer, any shape, e.g. (batch, len); ids in [0,
        vocab_size). Not modified.
    mask_id: the ``[MASK]`` id; special_ids: ids never selected and never drawn as
        random replacements (padding, ``[CLS]``, ``[SEP]``, ...); ``mask_id`` is
        always treated as special.
    p: probability that an ordinary token is selected.
    generator: the source of randomness; the same seed gives the same output.
    returns inputs (tokens' shape and dtype): selected positions replaced by
        ``mask_id`` (80 %), by a uniformly drawn ordinary id (10 %; it may by chance
        equal the original) or left unchanged (10 %), every other position equal to
        ``tokens``;
    labels (tokens' shape, int64): the original id where selected, -100 elsewhere.
    """
    _check_arguments(tokens, mask_id, vocab_size, special_ids, p)
    special = torch.zeros(vocab_size, dtype=torch.bool, device=tokens.device)
    special[list(special_ids)] = True
    special[mask_id] = True
    # the ids a random replacement may take
    ordinary_ids = (~special).nonzero().squeeze(1)
    if ordinary_ids.numel() == 0:
        raise ValueError(
            "every id in the vocabulary is special, so there is nothing to select "
            "or to draw as a random replacement; list only the reserved ids in "
            "special_ids"
        )

    def uniform() -> Tensor:
        return torch.rand(tokens.shape, generator=generator, device=tokens.device)

    # torch.rand lies in [0, 1): u < 0 never holds and u < 1 always does, so p = 0
    # and p = 1 select nothing and every ordinary token.
    selected = (uniform() < p) & ~special[tokens]
    # One draw decides: [0, 0.8) mask, [0.8, 0.9) random, [0.9, 1) keep.
    action = uniform()
    to_mask = selected & (action < MASK_SHARE)
    to_random = (
        selected & (action >= MASK_SHARE) & (action < MASK_SHARE + RANDOM_SHARE)
    )
    draw = torch.randint(
        ordinary_ids.numel(),
        tokens.shape,
        generator=generator,
        device=tokens.device,
    )
    inputs = torch.where(to_mask, torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(to_random, ordinary_ids[draw].to(tokens.dtype), inputs)
    labels = torch.where(selected, tokens.long(), IGNORE_INDEX)
    return inputs, labels
