"""Checks of chapter 11's exercises: maps in eval mode, head entropy, rollout."""

from __future__ import annotations

import math
from types import ModuleType

import torch

from annotated_transformer.blocks.masks import padding_mask
from annotated_transformer.exercises.grading import (
    assert_close,
    exercise,
    rng,
    seed,
)
from annotated_transformer.exercises.protocol import build
from annotated_transformer.models.encoder_decoder import make_model

CHAPTER = "11"


@exercise(
    chapter=CHAPTER,
    name="encoder_attention_maps",
    title="Find the bug: attention maps of a model still in training mode",
    question="Draw the same map twice: do you get the same picture? Which modules "
    "behave differently while a model trains, and how do you switch them off (and "
    "back)?",
    hint="dropout: put the model in eval() for the maps and give it back in the "
    "mode it came in (model.training tells).",
)
def check_encoder_attention_maps(module: ModuleType) -> None:
    torch.manual_seed(seed(0))
    sizes = {"N": 2, "d_model": 16, "d_ff": 32, "h": 2, "dropout": 0.5}
    model = build(make_model, 12, 12, **sizes)
    # two sentences, the second ending in <pad> (id 0)
    src = torch.tensor([[2, 5, 7, 9, 3], [2, 6, 8, 3, 0]])
    src_mask = padding_mask(src, 0)  # (2, 1, 5)
    assert model.training, "the model starts in training mode, as after training"
    maps = module.encoder_attention_maps(model, src, src_mask)
    assert len(maps) == 2, f"one map per encoder layer (2), got {len(maps)}"
    for layer, weights in enumerate(maps, 1):
        assert weights.shape == (2, 2, 5, 5), (
            f"layer {layer}: expected (batch, heads, len, len) = (2, 2, 5, 5), got "
            f"{tuple(weights.shape)}"
        )
        sums = weights.sum(-1)
        assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5), (
            f"layer {layer}: rows of an attention map sum to 1; yours sum to "
            f"{sums.min():.2f}..{sums.max():.2f}, so some weights were zeroed and "
            "the "
            "others scaled up"
        )
        assert (weights[1, :, :, 4] == 0).all(), "the <pad> key must get weight 0"
        assert (weights[0] > 0).all(), "no real key may get weight exactly 0"
    again = module.encoder_attention_maps(model, src, src_mask)
    for first, second in zip(maps, again, strict=True):
        assert torch.equal(first, second), "two calls drew different maps"
    assert model.training, "give the model back in the mode you found it (training)"
    model.eval()
    module.encoder_attention_maps(model, src, src_mask)
    assert not model.training, (
        "give the model back in the mode you found it (evaluation)"
    )


@exercise(
    chapter=CHAPTER,
    name="normalised_entropy",
    title="Comparing heads whose rows see different numbers of keys",
    hint="A row over n visible keys has at most log₂ n bits; divide each row's "
    "entropy (0 · log 0 taken as 0) by that, and average over the rows with n ≥ "
    "2.",
)
def check_normalised_entropy(module: ModuleType) -> None:
    gen = rng(0)
    n = 6
    causal = torch.ones(n, n, dtype=torch.bool).tril()  # row i sees i + 1 keys
    scores = torch.randn(3, 4, n, n, generator=gen, dtype=torch.float64)
    weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    bits = torch.distributions.Categorical(probs=weights).entropy() / math.log(2)
    most = torch.log2(torch.arange(1, n + 1, dtype=torch.float64))  # (n,)
    expected = (bits[..., 1:] / most[1:]).mean(-1)  # row 0 has a single key
    got = module.normalised_entropy(weights, causal)
    assert not torch.isnan(got).any(), "weights of exactly 0 must not give NaN"
    assert_close(got, expected, "the normalised entropies of 3 × 4 heads")
    uniform = causal.double() / causal.sum(-1, keepdim=True)
    flat = module.normalised_entropy(uniform[None], causal)
    assert_close(flat, torch.ones(1), "uniform rows (1 each)")
    diagonal = torch.eye(n, dtype=torch.float64)[None]
    peaked = module.normalised_entropy(diagonal, causal)
    assert_close(peaked, torch.zeros(1), "all weight on one key (0)")


def _mixed(weights: list) -> list:
    """(mean over the heads + identity) / 2 of one layer's map, as lists."""
    heads, n = len(weights), len(weights[0])
    r = range(n)
    mean = [[sum(w[i][j] for w in weights) / heads for j in r] for i in r]
    return [[(mean[i][j] + (i == j)) / 2 for j in r] for i in r]


@exercise(
    chapter=CHAPTER,
    name="attention_rollout",
    title="Attention rollout through the layers",
    hint="Per layer: average the heads, add the identity for the residual "
    "connection, make the rows sum to 1 again; then multiply the layers, the "
    "upper one on the left.",
)
def check_attention_rollout(module: ModuleType) -> None:
    gen = rng(1)
    shape = (2, 4, 4)  # (heads, n, n)
    maps = [torch.randn(shape, generator=gen).softmax(-1).double() for _ in "abc"]
    mixed = [_mixed(weights.tolist()) for weights in maps]  # rows sum to 1
    # Sum over every path i = k_3 -> k_2 -> k_1 -> k_0 = j through the layers.
    r = range(4)
    flow = [[float(i == j) for j in r] for i in r]
    for layer in mixed:
        flow = [[sum(layer[i][k] * flow[k][j] for k in r) for j in r] for i in r]
    paths = torch.tensor(flow, dtype=torch.float64)
    assert_close(module.attention_rollout(maps), paths, "the rollout of 3 layers")
    single = torch.tensor(mixed[0], dtype=torch.float64)
    assert_close(module.attention_rollout(maps[:1]), single, "one layer's rollout")
