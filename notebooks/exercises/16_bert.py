"""Chapter 16 exercises (BERT): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=16
or  python -m annotated_transformer.exercises 16
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


def mask_exactly(
    tokens: Tensor,
    mask_id: int,
    vocab_size: int,
    special_ids: Sequence[int],
    p: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """The original BERT's masking of ``tokens`` (b, n): returns (inputs, labels).

    In each row select exactly max(1, round(p · k)) of its k ordinary tokens (ids
    not in special_ids and not mask_id); of those, 80 % become mask_id, 10 % a
    random ordinary id, 10 % stay. labels: the original id where selected, -100
    elsewhere.
    Draw every random number from ``generator``.
    """
    raise NotImplementedError


def load_matching(model: nn.Module, state: dict[str, Tensor]) -> list[str]:
    """Start ``model`` from a pretrained ``state`` (a state dict).

    Copy every tensor of ``state`` whose name and shape match one of the model's;
    returns the sorted names of the model's tensors that were not loaded
    """
    raise NotImplementedError



def masked_accuracy(logits: Tensor, labels: Tensor) -> float:
    """The share of hidden words the masked LM predicts.

    logits: (b, n, V); labels: (b, n), the original id where a word was selected
    and -100 elsewhere. Count only the selected positions.
    """
    raise NotImplementedError
