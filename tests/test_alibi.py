"""ALiBi: the slopes of Press et al. (2022) and attention with linear
biases against a loop."""

import math

import pytest
import torch

from annotated_transformer.blocks.alibi import alibi_bias, alibi_slopes
from annotated_transformer.blocks.grouped_query_attention import (
    ALiBiAttention,
)
from annotated_transformer.blocks.kv_cache import KVCache
from annotated_transformer.models.modern_decoder import ModernConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def test_slopes_are_the_papers_geometric_sequence():
    # The paper's example: 8 heads take 1/2, 1/4, ..., 1/256.
    torch.testing.assert_close(
        alibi_slopes(8), torch.tensor([2.0**-k for k in range(1, 9)])
    )
    # 16 heads interleave: 2^(-0.5), 2^(-1), ..., 2^(-8).
    torch.testing.assert_close(
        alibi_slopes(16), torch.tensor([2 ** (-k / 2) for k in range(1, 17)])
    )


def test_bias_is_minus_slope_times_distance_and_hides_the_future():
    bias = alibi_bias(
        2, new=3, past=2
    )  # queries at positions 2, 3, 4; keys 0 ... 4
    for h, m in enumerate([1 / 16, 1 / 256]):
        for i in range(3):
            for j in range(5):
                expected = -m * (2 + i - j) if j <= 2 + i else -math.inf
                assert bias[h, i, j].item() == pytest.approx(expected)


def naive_alibi_attention(att: ALiBiAttention, x: torch.Tensor) -> torch.Tensor:
    """softmax(q·k/√d_k − m_h (i − j)) v by loops over heads,
    queries and keys (j ≤ i)."""
    b, n, _ = x.shape
    group, d_k = att.h // att.kv_heads, att.d_k
    q = att.w_q(x).view(b, n, att.h, d_k)
    k = att.w_k(x).view(b, n, att.kv_heads, d_k)
    v = att.w_v(x).view(b, n, att.kv_heads, d_k)
    slopes = [2 ** (-8 * (head + 1) / att.h) for head in range(att.h)]
    out = torch.zeros(b, n, att.h, d_k, dtype=x.dtype)
    for s in range(b):
        for head in range(att.h):
            g, m = head // group, slopes[head]
            for i in range(n):
                scores = torch.stack(
                    [
                        q[s, i, head] @ k[s, j, g] / math.sqrt(d_k) - m * (i - j)
                        for j in range(i + 1)
                    ]
                )
                weights = scores.softmax(0)
                out[s, i, head] = sum(weights[j] * v[s, j, g] for j in range(i + 1))
    return att.w_o(out.flatten(2))


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_alibi_attention_equals_the_loop_and_its_cached_form(kv_heads):
    torch.manual_seed(0)
    att = ALiBiAttention(ModernConfig(d_model=16, h=4, kv_heads=kv_heads))
    att = att.double().eval()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    full = att(x)
    torch.testing.assert_close(full, naive_alibi_attention(att, x))
    cache = KVCache()
    steps = torch.cat(
        [att(x[:, :3], cache), att(x[:, 3:5], cache), att(x[:, 5:], cache)], 1
    )
    torch.testing.assert_close(steps, full)


def test_a_bias_computed_once_by_the_model_is_the_one_each_layer_would_compute():
    torch.manual_seed(0)
    att = ALiBiAttention(ModernConfig(d_model=16, h=4, kv_heads=2)).double().eval()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    torch.testing.assert_close(att(x, terms=alibi_bias(4, 6)), att(x))
