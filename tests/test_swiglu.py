"""The SwiGLU feed-forward against its formula; the 2/3 width
rule against the ReLU FFN."""

import pytest
import torch
import torch.nn.functional as F

from annotated_transformer.blocks.feed_forward import (
    PositionwiseFeedForward,
    SwiGLU,
    swiglu_width,
)


def count(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("bias", [False, True])
def test_matches_the_formula(bias):
    torch.manual_seed(0)
    ffn = SwiGLU(12, 20, bias=bias).double()
    x = torch.randn(2, 5, 12, dtype=torch.float64)
    W1, W2, W3 = ffn.w1.weight, ffn.w2.weight, ffn.w3.weight
    b1, b2, b3 = (ffn.w1.bias, ffn.w2.bias, ffn.w3.bias) if bias else (0, 0, 0)
    a = x @ W1.T + b1
    expected = (
        a * torch.sigmoid(a) * (x @ W3.T + b3)
    ) @ W2.T + b2  # silu(a) = a σ(a)
    torch.testing.assert_close(ffn(x), expected)
    assert count(ffn) == 3 * 12 * 20 + bias * (2 * 20 + 12)


def test_dropout_acts_on_the_hidden_units_in_training_only():
    torch.manual_seed(0)
    ffn = SwiGLU(8, 16, dropout=0.5)
    x = torch.randn(3, 8)
    hidden = F.silu(ffn.w1(x)) * ffn.w3(x)
    torch.testing.assert_close(ffn.eval()(x), ffn.w2(hidden))
    torch.manual_seed(1)
    trained = ffn.train()(x)
    torch.manual_seed(1)
    torch.testing.assert_close(trained, ffn.w2(F.dropout(hidden, 0.5)))


@pytest.mark.parametrize("d_model", [64, 512])
@pytest.mark.parametrize("d_ff", [96, 256, 2048, 3072, 100])
def test_two_thirds_width_has_the_relu_ffn_parameters(d_model, d_ff):
    width = swiglu_width(d_ff)
    assert width % 8 == 0 and width >= 2 * d_ff / 3
    ffn = PositionwiseFeedForward(d_model, d_ff)
    relu = (
        ffn.w_1.weight.numel() + ffn.w_2.weight.numel()
    )  # the 2017 FFN without its biases
    assert relu == 2 * d_model * d_ff
    extra = count(SwiGLU(d_model, width)) - relu
    assert 0 <= extra < 3 * d_model * 8
    if 2 * d_ff % 24 == 0:
        assert extra == 0


def test_width_examples_and_bad_input():
    assert [swiglu_width(n) for n in (96, 2048, 4 * 128)] == [64, 1368, 344]
    assert swiglu_width(100, multiple_of=1) == 67
    with pytest.raises(ValueError, match="must be positive integers"):
        swiglu_width(0)
