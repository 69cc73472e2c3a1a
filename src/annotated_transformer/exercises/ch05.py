"""Checks of chapter 05's exercises (Normalisation and residuals)."""

from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.exercises.grading import (
    assert_close,
    exercise,
    forbidden,
    rng,
)
from annotated_transformer.exercises.protocol import build

NORMS = ("layer_norm", "rms_norm", "group_norm", "batch_norm", "instance_norm")
"""The built-in normalisations, which the exercises ask to write by hand."""


@exercise(
    chapter="05",
    name="running_statistics",
    title="Batch norm's running averages",
    hint="the statistics are per channel, over the batch and positions axes (0 "
    "and 2); PyTorch's running variance uses the unbiased batch variance (divide "
    "by n - 1), although it normalises the batch with the biased one.",
)
def check_running_statistics(m: ModuleType) -> None:
    g = rng(0)
    x = 2 * torch.randn(4, 3, 5, generator=g) + 1  # (batch, channels, positions)
    mean, var = torch.randn(3, generator=g), torch.rand(3, generator=g) + 0.5
    expected_mean, expected_var = mean.clone(), var.clone()
    F.batch_norm(x, expected_mean, expected_var, training=True, momentum=0.1)
    with forbidden(*NORMS, why="compute the statistics yourself"):
        new_mean, new_var = m.running_statistics(x, mean, var, 0.1)
    assert_close(new_mean, expected_mean, "the running mean (F.batch_norm's)")
    assert_close(new_var, expected_var, "the running variance (F.batch_norm's)")


@exercise(
    chapter="05",
    name="token_group_norm",
    title="Group norm, one token at a time",
    hint="reshape the features into (groups, d_model // groups) and take the mean "
    "and the biased variance over the last axis only, then reshape back.",
)
def check_token_group_norm(m: ModuleType) -> None:
    g = rng(1)
    x = 3 * torch.randn(2, 5, 12, generator=g) - 1  # (batch, len, d_model)
    reference = nn.GroupNorm(4, 12, eps=1e-5, affine=False)  # (N, C) inputs
    expected = reference(x.reshape(10, 12)).reshape(x.shape)
    with forbidden(*NORMS, why="by hand"):
        got = m.token_group_norm(x, 4)
    assert_close(got, expected, "the output (against nn.GroupNorm)")
    small = x / 1000  # variance 1e-5, as large as eps: leaving eps out shows
    expected = reference(small.reshape(10, 12)).reshape(x.shape)
    with forbidden(*NORMS, why="by hand"):
        got = m.token_group_norm(small, 4)
    assert_close(got, expected, "the output for inputs of std 0.003")


@exercise(
    chapter="05",
    name="layer_norm",
    title="Find the bug: the original's LayerNorm",
    hint="compare with the formula at the top of this chapter, term by term: "
    "which variance (divided by d or by d - 1), and where does eps go?",
    question="write Ba et al.'s formula beside the code, term by term: does every "
    "term compute what the formula's does?",
)
def check_layer_norm(m: ModuleType) -> None:
    g = rng(2)
    x = 3 * torch.randn(2, 4, 8, generator=g) + 1  # a small d shows the difference
    reference = nn.LayerNorm(8, eps=1e-5)
    with torch.no_grad():
        reference.weight.copy_(torch.rand(8, generator=g) + 0.5)
        reference.bias.copy_(torch.randn(8, generator=g))
        expected = reference(x)
    gamma, beta = reference.weight.detach(), reference.bias.detach()
    with forbidden(*NORMS, why="by hand"):
        got = m.layer_norm(x, gamma, beta, 1e-5)
    assert_close(got, expected, "the output (against nn.LayerNorm)")
    eps = 2.0  # where eps goes shows only when it is not tiny next to σ²
    expected = F.layer_norm(x, (8,), gamma, beta, eps)
    with forbidden(*NORMS, why="by hand"):
        got = m.layer_norm(x, gamma, beta, eps)
    assert_close(got, expected, f"the output with eps={eps} (against F.layer_norm)")


@exercise(
    chapter="05",
    name="residual_block",
    title="Pre-norm and post-norm sub-layers",
    hint="pre-norm normalises the sub-layer's input and adds the raw x: x + "
    "f(LN(x)); post-norm normalises after the sum: LN(x + f(x)).",
)
def check_residual_block(m: ModuleType) -> None:
    g = rng(3)
    x = torch.randn(2, 3, 6, generator=g)
    weight, shift = torch.randn(6, 6, generator=g), torch.randn(6, generator=g)

    def sublayer(z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(z @ weight) + shift

    norm = build(nn.LayerNorm, 6)
    with torch.no_grad():
        pre = m.residual_block(x, sublayer, norm, pre_norm=True)
        post = m.residual_block(x, sublayer, norm, pre_norm=False)
        assert_close(pre, x + sublayer(F.layer_norm(x, (6,))), "pre-norm")
        assert_close(post, F.layer_norm(x + sublayer(x), (6,)), "post-norm")
