"""Checks of chapter 07's exercises (The full model)."""

from types import ModuleType

import torch
from torch import nn

from annotated_transformer.exercises.grading import (
    assert_close,
    exercise,
    forbidden,
    integers,
    rng,
    seed,
)
from annotated_transformer.exercises.protocol import build
from annotated_transformer.models.encoder_decoder import make_model, tie_weights


@exercise(
    chapter="07",
    name="feed_forward",
    title="The feed-forward network from its formula",
    hint="x @ W_1 + b_1 acts on the last axis of a (batch, len, d_model) tensor, "
    "position by position; ReLU is max(0, ·), torch.relu.",
)
def check_feed_forward(m: ModuleType) -> None:
    g = rng(0)
    x = torch.randn(2, 3, 8, generator=g)
    reference = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8))
    first, last = reference[0], reference[2]
    with torch.no_grad():  # nn.Linear stores W transposed: y = x Wᵀ + b
        expected = reference(x)
        W_1, W_2 = first.weight.T, last.weight.T
        got = m.feed_forward(x, W_1, first.bias, W_2, last.bias)
    assert_close(got, expected, "FFN(x) (against nn.Linear, ReLU, nn.Linear)")


_LAYER = "torch.nn.TransformerEncoderLayer.forward"


@exercise(
    chapter="07",
    name="encoder_layer",
    title="One encoder layer, assembled by hand",
    hint="pre-norm: x + self_attn(LN1(x)) with the normalised x as query, key and "
    "value (self_attn returns (output, weights)); then x + "
    "linear2(relu(linear1(LN2(x)))).",
)
def check_encoder_layer(m: ModuleType) -> None:
    torch.manual_seed(seed(1))
    layer = build(
        nn.TransformerEncoderLayer,
        *(16, 4, 40),
        dropout=0.0,
        batch_first=True,
        norm_first=True,
    ).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        expected = layer(x)
        with forbidden(
            "transformer_encoder_layer",
            methods=(_LAYER,),
            why="assembled by hand",
        ):
            got = m.encoder_layer(x, layer)
    assert_close(got, expected, "the output (against nn.TransformerEncoderLayer)")


@exercise(
    chapter="07",
    name="tied_parameter_count",
    title="Parameters with one shared embedding table",
    hint="start from this chapter's closed form; with everything tied there is "
    "one vocab × d_model table instead of three, and the generator's vocab biases "
    "remain.",
)
def check_tied_parameter_count(m: ModuleType) -> None:
    drawn = tuple(integers(0, 2, 40, 4))
    for vocab, N, d_model, d_ff in [(50, 1, 16, 32), (37, 2, 8, 24), drawn]:
        d_model += d_model % 2  # h = 2 heads
        model = make_model(vocab, vocab, N=N, d_model=d_model, d_ff=d_ff, h=2)
        tie_weights(model, share_source=True)
        expected = sum(p.numel() for p in model.parameters())  # each tensor once
        got = m.tied_parameter_count(vocab, N, d_model, d_ff)
        assert got == expected, (
            f"vocab={vocab}, N={N}, d_model={d_model}, d_ff={d_ff}: "
            f"{got}, but the tied model has {expected}"
        )
