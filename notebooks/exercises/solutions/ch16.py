"""Reference solutions to chapter 16's exercises (BERT and GPT-2)."""

from __future__ import annotations

import math
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


def token_bits_per_byte(
    log_probs: Tensor,
    targets: Tensor,
    token_bytes: Tensor,
) -> float:
    """Bits per byte of a model over tokens: Σ −log₂ p(target) / Σ bytes.

    log_probs: (n, V) natural-log probabilities; targets: (n,); token_bytes:
    (V,), the length in bytes of every token.
    """
    nats = -log_probs.double().gather(1, targets[:, None]).sum().item()
    return nats / math.log(2) / token_bytes[targets].sum().item()


def gpt2_parameters(
    vocab: int,
    d_model: int,
    N: int,
    max_len: int,
    d_ff: int,
) -> int:
    """Parameters of GPT2LM, counted matrix by matrix.

    The tied token table, learned positions, N pre-norm blocks with biases
    everywhere (2 LayerNorms, W^Q W^K W^V W^O, a GELU MLP of two layers) and a
    final LayerNorm.
    """
    norm = 2 * d_model
    attention = 4 * (d_model * d_model + d_model)
    mlp = d_model * d_ff + d_ff + d_ff * d_model + d_model
    tables = vocab * d_model + max_len * d_model  # tokens (tied), positions
    return tables + N * (2 * norm + attention + mlp) + norm
