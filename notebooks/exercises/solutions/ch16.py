"""Reference solutions to chapter 16's exercises (BERT)."""

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
    """The original BERT's masking of ``tokens`` (b, n): (inputs, labels).

    In each row exactly max(1, round(p · k)) of its k ordinary tokens are
    selected; of those, 80 % become ``mask_id``, 10 % a random ordinary id and
    10 % stay. labels: the original id where selected, -100 elsewhere.
    """
    special = torch.zeros(vocab_size, dtype=torch.bool)
    special[list(special_ids)] = True
    special[mask_id] = True
    ordinary_ids = (~special).nonzero().squeeze(1)
    inputs = tokens.clone()
    labels = torch.full_like(tokens, -100)  # F.cross_entropy's ignore_index
    for row in range(tokens.size(0)):
        candidates = (~special[tokens[row]]).nonzero().squeeze(1)
        if candidates.numel() == 0:
            continue
        count = max(1, round(p * candidates.numel()))
        order = torch.randperm(candidates.numel(), generator=generator)
        chosen = candidates[order[:count]]
        labels[row, chosen] = tokens[row, chosen]
        action = torch.rand(count, generator=generator)
        n_ordinary = ordinary_ids.numel()
        draw = torch.randint(n_ordinary, (count,), generator=generator)
        original = tokens[row, chosen]
        replaced = torch.where(action < 0.9, ordinary_ids[draw], original)
        inputs[row, chosen] = torch.where(action < 0.8, mask_id, replaced)
    return inputs, labels


def load_matching(model: nn.Module, state: dict[str, Tensor]) -> list[str]:
    """Start ``model`` from a pretrained ``state`` (a state dict).

    Copies every tensor whose name and shape match one of the model's; returns
    the sorted names of the model's tensors left as they were (a new head).
    """
    own = model.state_dict()
    kept = {}
    for name, value in state.items():
        if name in own and own[name].shape == value.shape:
            kept[name] = value
    model.load_state_dict(kept, strict=False)  # copies into the model
    return sorted(set(own) - set(kept))



def masked_accuracy(logits: Tensor, labels: Tensor) -> float:
    """The share of hidden words the masked LM predicts.

    logits: (b, n, V); labels: (b, n), the original id where selected, -100
    elsewhere; only the selected positions count.
    """
    hidden = labels != -100
    right = logits.argmax(-1)[hidden] == labels[hidden]
    return right.double().mean().item()
