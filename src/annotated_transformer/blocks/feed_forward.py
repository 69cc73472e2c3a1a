"""Feed-forward layers: the paper's, max(0, x W₁ + b₁) W₂ + b₂, and its variants.

SwiGLU (Shazeer 2020) gates a second linear map of x by the SiLU of the first,
SwiGLU(x) = (silu(x W₁) ⊙ x W₃) W₂, silu(z) = z · σ(z); a hidden width of
2/3 · d_ff keeps the 2017 feed-forward's parameters without biases.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


def swiglu_width(d_ff: int, multiple_of: int = 8) -> int:
    """The SwiGLU hidden width with the parameters of a width-``d_ff`` ReLU one.

    2/3 · d_ff rounded up to a multiple of ``multiple_of`` (Llama's rule: such
    matrix sizes run faster on GPUs), e.g. 2048 → 1368 (+0.2 % parameters), 96 → 64.
    """
    if d_ff < 1 or multiple_of < 1:
        raise ValueError(
            f"d_ff={d_ff} and multiple_of={multiple_of} must be positive integers"
        )
    return -(-2 * d_ff // (3 * multiple_of)) * multiple_of  # ⌈2 d_ff / (3 m)⌉ · m


class SwiGLU(nn.Module):
    """(silu(x W₁) ⊙ x W₃) W₂, dropout on the hidden units, no biases by default.

    x: (..., d_model) -> (..., d_model); hidden width d_ff (:func:`swiglu_width`)
    """

    matrices = 3

    @staticmethod
    def width(d_ff: int) -> int:
        """The hidden width with the parameters of a width-``d_ff`` ReLU one."""
        return swiglu_width(d_ff)

    def __init__(
        self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = False
    ) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=bias)  # the gate
        self.w3 = nn.Linear(d_model, d_ff, bias=bias)  # the gated value
        self.w2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.dropout(F.silu(self.w1(x)) * self.w3(x)))


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W₁ + b₁) W₂ + b₂, one MLP at every position (eq. 2).

    x: (batch, len, d_model) -> same; hidden width d_ff (2048 in the paper);
        ``bias=False`` drops b₁ and b₂
    """

    def __init__(
        self, d_model: int, d_ff: int, dropout: float = 0.1, bias: bool = True
    ) -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(F.relu(self.w_1(x))))


class ReLUFeedForward(PositionwiseFeedForward):
    """The paper's feed-forward as a modern block's part, with :class:`SwiGLU`'s
    ``matrices`` (2) and ``width`` (``d_ff`` itself: equal parameters)."""

    matrices = 2

    @staticmethod
    def width(d_ff: int) -> int:
        return d_ff


class GELUFeedForward(ReLUFeedForward):
    """FFN(x) = GELU(x W₁ + b₁) W₂ + b₂, with the tanh approximation
    GELU(x) ≈ ½x(1 + tanh(√(2/π)(x + 0.044715x³))).

    x: (batch, len, d_model) -> (batch, len, d_model)
    """

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(F.gelu(self.w_1(x), approximate="tanh")))


class ReLU2FeedForward(ReLUFeedForward):
    """FFN(x) = max(0, x W₁ + b₁)² W₂ + b₂, squared ReLU (So et al. 2021, Primer).

    x: (batch, len, d_model) -> (batch, len, d_model)
    """

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(F.relu(self.w_1(x)).square()))
