"""ALiBi, attention with linear biases (Press et al. 2022): position as a penalty.

No position vector anywhere; each head penalises a key by how far back it is:

    score_h(i, j) = q_i · k_j / √d_k − m_h · (i − j),   j ≤ i,

with fixed slopes m_h = 2^(−8h/H), h = 1 … H (1/2, 1/4, … 1/256 for H = 8). Why: a
longer context than in training only adds larger distances, penalised more, so
ALiBi trains short and evaluates long.
"""

from __future__ import annotations

import torch
from torch import Tensor


def alibi_slopes(h: int) -> Tensor:
    """The head slopes m_h = 2^(−8h/H), h = 1 … H: (H,) float32."""
    if h < 1:
        raise ValueError(f"h must be a positive number of heads, got {h}")
    return 2.0 ** (-8.0 * torch.arange(1, h + 1, dtype=torch.float32) / h)


def alibi_bias(
    h: int, new: int, past: int = 0, device: torch.device | None = None
) -> Tensor:
    """The additive attention mask of ``new`` queries after ``past`` cached keys.

    returns float32 (h, new, past + new), to add to the scores (SDPA's
        ``attn_mask``): −m_h · (past + i − j) for keys j ≤ past + i, −inf after
    """
    queries = torch.arange(past, past + new, device=device)[:, None]  # (new, 1)
    keys = torch.arange(past + new, device=device)[None, :]  # (1, past + new)
    # (new, past + new): how far back each key is
    distance = (queries - keys).float()
    # (h, new, past + new)
    bias = -alibi_slopes(h).to(device)[:, None, None] * distance
    return bias.masked_fill(distance < 0, float("-inf"))
