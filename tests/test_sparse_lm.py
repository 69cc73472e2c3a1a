"""Sparse attention inside a model (sparse.SparseSelfAttention, sparsified, lm
attention=...) against dense attention under masks built from the patterns'
rules with Python loops."""

import math

import pytest
import torch

from annotated_transformer.blocks.kv_cache import KVCache
from annotated_transformer.blocks.sparse_attention import (
    Fixed,
    SparseSelfAttention,
    Strided,
    sparse_attention,
    sparsified,
)
from annotated_transformer.models.modern_decoder import (
    ModernConfig,
    ModernDecoderLM,
)
from annotated_transformer.runner import PRESETS
from annotated_transformer.tasks.base import from_settings, with_settings
from annotated_transformer.tasks.lm import LanguageModel, LanguageModelConfig
from annotated_transformer.tasks.variants import pattern_named

RULES = {  # the union of each pattern's two masks, as in Child et al. (2019)
    "strided": lambda i, j, l, c: j <= i and (i - j < l or (i - j) % l == 0),
    "fixed": lambda i, j, l, c: j <= i and (j // l == i // l or j % l >= l - c),
}


def rule_mask(pattern, n, stride, c):
    rule = RULES[pattern]
    return torch.tensor(
        [[rule(i, j, stride, c) for j in range(n)] for i in range(n)]
    )


def reference_attention(module, x, mask):
    """softmax(Q Kᵀ / √d_k + (−∞ where not mask)) V, head by head, then W^O."""
    heads = []
    for head in range(module.h):
        part = slice(head * module.d_k, (head + 1) * module.d_k)
        q, k, v = (w(x)[..., part] for w in (module.w_q, module.w_k, module.w_v))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(module.d_k)).masked_fill(
            ~mask, -math.inf
        )
        heads.append(scores.softmax(-1) @ v)
    return module.w_o(torch.cat(heads, dim=-1))


@pytest.mark.parametrize(
    ("pattern", "n", "stride", "c"),
    [
        ("strided", 12, 4, 1),
        ("strided", 13, 4, 1),
        ("fixed", 12, 4, 2),
        ("fixed", 11, 3, 1),
    ],
)
def test_sparse_self_attention_equals_dense_attention_under_the_rule_mask(
    pattern, n, stride, c
):
    torch.manual_seed(0)
    sizes = {"d_model": 16, "h": 4, "kv_heads": 4, "bias": True}
    config = ModernConfig(
        **sizes,
        attention=SparseSelfAttention,
        pattern=pattern_named(pattern, stride, c),
    )
    module = SparseSelfAttention(config).double()
    x = torch.randn(2, n, 16, dtype=torch.float64)
    expected = reference_attention(module, x, rule_mask(pattern, n, stride, c))
    torch.testing.assert_close(module(x), expected)
    # generation: a cache filled by the first n - 3 positions, then 3 new ones
    cache = KVCache()
    first = module(x[:, : n - 3], cache)
    last = module(x[:, n - 3 :], cache)
    torch.testing.assert_close(torch.cat([first, last], dim=1), expected)


def test_sparse_attention_pads_to_a_multiple_of_the_stride():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 2, 10, 4, dtype=torch.float64)
    mask = rule_mask("fixed", 10, 4, 1)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask
    )
    torch.testing.assert_close(sparse_attention(q, k, v, Fixed(4, 1)), expected)


def test_a_sparsified_model_keeps_its_weights_and_its_short_range_predictions():
    torch.manual_seed(0)
    dense = ModernDecoderLM(
        ModernConfig(50, 32, 4, 2, max_len=32, kv_heads=4)
    ).eval()
    sparse = sparsified(dense, Strided(8)).eval()  # the same parameter names
    assert type(sparse) is ModernDecoderLM and sparse.config.pattern == Strided(8)
    assert all(isinstance(b.attention, SparseSelfAttention) for b in sparse.blocks)
    x = torch.randint(0, 50, (2, 24))
    with torch.no_grad():
        # up to the stride the local mask is the whole causal
        # mask: the two models agree
        torch.testing.assert_close(sparse(x[:, :8]), dense(x[:, :8]))
        assert not torch.allclose(sparse(x)[:, 8:], dense(x)[:, 8:])
        cache = (
            sparse.new_cache()
        )  # cached generation equals the block-sparse forward
        steps = [sparse(x[:, :5], cache)] + [
            sparse(x[:, t : t + 1], cache) for t in range(5, 24)
        ]
        torch.testing.assert_close(
            torch.cat(steps, dim=1), sparse(x), rtol=1e-4, atol=1e-5
        )


def test_the_lm_option_builds_a_sparse_model_that_trains():
    config = with_settings(
        PRESETS["lm"]["tiny"],
        {
            "block": "gpt2",
            "attention": "fixed",
            "sparse_stride": 8,
            "sparse_summary": 2,
        },
    )
    task = LanguageModel(config)
    task.splits = {"train": torch.randint(0, 256, (2000,), dtype=torch.uint8)}
    model = task.build_model()
    assert all(isinstance(b.attention, SparseSelfAttention) for b in model.blocks)
    assert model.blocks[0].attention.pattern == Fixed(8, 2)
    loss, n = task.loss(model, next(iter(task.batches(0))))
    loss.backward()
    assert (
        n == config.batch_size * config.max_len
        and model.embed.weight.grad is not None
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"attention": "sliding"}, "use dense, strided, fixed"),
        ({"sparse_stride": 4}, "need attention=strided/fixed"),
        (
            {"attention": "fixed", "sparse_stride": 8, "sparse_summary": 1},
            "needs block=modern",
        ),
        ({"attention": "strided", "block": "modern"}, "sparse_stride >= 1"),
        (
            {
                "attention": "strided",
                "block": "modern",
                "sparse_stride": 8,
                "sparse_summary": 1,
            },
            "fixed pattern's",
        ),
        (
            {"attention": "fixed", "block": "gpt2", "sparse_stride": 8},
            "must lie in",
        ),
        (
            {
                "attention": "fixed",
                "block": "modern",
                "kv_heads": 2,
                "sparse_stride": 8,
            },
            "kv_heads=0",
        ),
    ],
)
def test_bad_sparse_settings_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        from_settings(LanguageModelConfig, changes)
