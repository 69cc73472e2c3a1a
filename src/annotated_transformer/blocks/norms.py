"""RMSNorm (Zhang & Sennrich 2019): layer norm without the mean.

Layer norm recentres and rescales each vector,
g ⊙ (x − mean) / √(var + ε) + b. RMSNorm keeps only the rescaling, by the
root mean square of the features, and a gain g:

    RMSNorm(x) = g ⊙ x / √(mean(x²) + ε).

No mean to subtract and no bias: fewer operations per token and, in practice
(T5, Llama and most large models since), the same quality. It is one of the
changes of the "modern" block.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RMSNorm(nn.Module):
    """g ⊙ x / √(mean(x²) + eps) over the last axis; g starts at 1
    (the identity on unit-rms x).

    The gain is called ``weight``, as in ``torch.nn.RMSNorm``,
    so their state dicts match.
    x: (..., d_model) -> (..., d_model)
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
    """The original's layer norm: a₂ ⊙ (x − mean) / (std +
    eps) + b₂ over the last axis.

    std is the unbiased (n − 1) standard deviation and eps is added to it,
    not to the variance; ``nn.LayerNorm`` computes (x − mean) / √(var + eps)
    with the biased variance.
    x: (..., d_model) -> (..., d_model)
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
