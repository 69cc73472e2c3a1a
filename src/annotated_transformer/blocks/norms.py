"""Norms: the original's layer norm, and RMSNorm (Zhang & Sennrich 2019).

Layer norm recentres and rescales, g ⊙ (x − mean) / √(var + ε) + b; RMSNorm only
rescales, g ⊙ x / √(mean(x²) + ε): fewer operations per token and, in practice
(T5, Llama), the same quality.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RMSNorm(nn.Module):
    """g ⊙ x / √(mean(x²) + eps) over the last axis; g starts at 1.

    x: (..., d_model) -> (..., d_model); g is ``weight``, as in ``torch.nn.RMSNorm``
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        if d_model < 1:
            raise ValueError(f"d_model must be a positive integer, got {d_model}")
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * rms * self.weight


def rms_norm(d_model: int, bias: bool, eps: float | None) -> RMSNorm:
    """RMSNorm for a model's table of norms: no bias to drop; eps 1e-6 unless
    given (Llama's checkpoints set 1e-5)."""
    return RMSNorm(d_model, 1e-6 if eps is None else eps)


def layer_norm(d_model: int, bias: bool, eps: float | None) -> nn.LayerNorm:
    """``nn.LayerNorm`` for a model's table of norms: its bias only if ``bias``;
    eps PyTorch's 1e-5 unless given."""
    return nn.LayerNorm(d_model, eps=1e-5 if eps is None else eps, bias=bias)


class LayerNorm(nn.Module):
    """The original's layer norm, a₂ ⊙ (x − mean) / (std + eps) + b₂, last axis.

    x: (..., d_model) -> (..., d_model); std is unbiased (n − 1) and eps is added
    to it, where ``nn.LayerNorm`` computes (x − mean) / √(var + eps), var biased
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(d_model))
        self.b_2 = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2
