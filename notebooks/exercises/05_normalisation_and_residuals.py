"""Chapter 05 exercises (Normalisation and residuals): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=05
or  python -m annotated_transformer.exercises 05
"""

from collections.abc import Callable

from torch import Tensor, nn


def running_statistics(
    x: Tensor, mean: Tensor, var: Tensor, momentum: float
) -> tuple[Tensor, Tensor]:
    """Batch norm's running averages after one training batch.

    x: (batch, channels, positions); mean, var: (channels,), running averages
    returns the new (mean, var): (1 - momentum)·old + momentum·statistic, the
    batch's statistic, its variance unbiased (divided by n - 1, n = batch ·
    positions)
    """
    raise NotImplementedError


def token_group_norm(x: Tensor, groups: int, eps: float = 1e-5) -> Tensor:
    """Group norm of each token on its own: its features split into ``groups``
    groups, each standardised with its own mean and (biased) variance.

    x: (batch, len, d_model), d_model divisible by groups -> the same shape
    """
    raise NotImplementedError


def layer_norm(
    x: Tensor,
    gamma: Tensor,
    beta: Tensor,
    eps: float = 1e-5,
) -> Tensor:
    """Layer norm over the last axis: gamma (x - μ) / √(σ² + eps) + beta.

    x: (..., d); gamma, beta: (d,); σ² the biased variance (divided by d)

    FIND THE BUG: this is the original Annotated Transformer's formula, and its
    outputs differ from nn.LayerNorm's. Fix it so that they agree.
    """
    mean = x.mean(-1, keepdim=True)
    std = x.std(-1, keepdim=True)
    return gamma * (x - mean) / (std + eps) + beta


def residual_block(
    x: Tensor,
    sublayer: Callable[[Tensor], Tensor],
    norm: nn.Module,
    pre_norm: bool,
) -> Tensor:
    """One residual sub-layer: pre-norm x + f(LN(x)), post-norm LN(x + f(x)).

    x: (batch, len, d_model); sublayer f and norm LN keep that shape
    """
    raise NotImplementedError
