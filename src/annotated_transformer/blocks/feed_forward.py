"""The SwiGLU feed-forward (Shazeer 2020, "GLU Variants Improve Transformer").

The paper's feed-forward is max(0, x W₁) W₂. A gated linear unit multiplies a second
linear map of x, element by element, by a nonlinear "gate" of the first; with the
SiLU (swish) gate, silu(z) = z · σ(z):

    SwiGLU(x) = (silu(x W₁) ⊙ x W₃) W₂.

Three matrices instead of two. To compare at equal cost, Shazeer shrinks the hidden
width to 2/3 of the original d_ff: then 3 · d_model · (2/3 · d_ff) = 2 · d_model ·
d_ff, the parameter count of the 2017 feed-forward without biases
(:func:`swiglu_width`). PaLM and Llama use it.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn


def swiglu_width(d_ff: int, multiple_of: int = 8) -> int:
    """The SwiGLU hidden width with the parameters of a
    width-``d_ff`` ReLU feed-forward.

    2/3 · d_ff rounded up to a multiple of ``multiple_of`` (Llama's rule: matrix
    sizes that are multiples of 8 or more run faster on GPUs). The rounding adds
    fewer than 3 · d_model · multiple_of parameters per block, and none when
    2 · d_ff is a multiple of 3 · multiple_of, e.g. 2048 → 1368 (+0.2 %), 96 → 64
    (exactly equal).
    """
    if d_ff < 1 or multiple_of < 1:
        raise ValueError(
            f"d_ff={d_ff} and multiple_of={multiple_of} must be positive integers"
        )
    return -(-2 * d_ff // (3 * multiple_of)) * multiple_of  # ⌈2 d_ff / (3 m)⌉ · m


class SwiGLU(nn.Module):
    """(silu(x W₁) ⊙ x W₃) W₂, dropout on the hidden units, no biases by default.

    x: (..., d_model) -> (..., d_model); hidden width d_ff
        (see :func:`swiglu_width`)
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
    """FFN(x) = max(0, x W₁ + b₁) W₂ + b₂, the same two-layer MLP
    at every position (eq. 2).

    x: (batch, len, d_model) -> (batch, len, d_model); hidden width d_ff (2048 in
        the paper); ``bias=False`` drops b₁ and b₂ (the modern block's choice)
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
    """The paper's feed-forward as a part of the modern block
    (``ModernConfig.feed_forward``): with its count of weight matrices, for the
    parameter formula, and the hidden width that has the parameters of a
    width-``d_ff`` ReLU one (itself)."""

    matrices = 2

    @staticmethod
    def width(d_ff: int) -> int:
        return d_ff


class GELUFeedForward(ReLUFeedForward):
    """FFN(x) = GELU(x W₁ + b₁) W₂ + b₂, GELU(x) ≈ ½x(1 +
    tanh(√(2/π)(x + 0.044715x³))).

    x: (batch, len, d_model) -> (batch, len, d_model)
    """

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(F.gelu(self.w_1(x), approximate="tanh")))


class ReLU2FeedForward(ReLUFeedForward):
    """FFN(x) = max(0, x W₁ + b₁)² W₂ + b₂: squared ReLU (So et al. 2021,
    "Primer"), a ReLU whose positive side grows quadratically.

    x: (batch, len, d_model) -> (batch, len, d_model)
    """

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(F.relu(self.w_1(x)).square()))
