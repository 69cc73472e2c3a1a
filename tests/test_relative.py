"""Transformer-XL attention against a naive double loop over (query, key) pairs,
rel_shift against explicit indexing, the stop-gradient on the memory, and the
language model's causality and segment recurrence."""

import math

import pytest
import torch

from annotated_transformer.blocks.relative_attention import (
    RelativeMultiHeadAttention,
    rel_shift,
    relative_positions,
)
from annotated_transformer.models.transformer_xl import TransformerXLLM, XLConfig

B, LEN, MEM, D_MODEL, H = 2, 4, 3, 8, 2
D_K = D_MODEL // H


def sinusoid(distance, d_model):
    """R_d by the formula: sin(d ω_k) at feature 2k, cos(d ω_k) at
    2k + 1, ω_k = 10000^(-2k/d)."""
    out = []
    for k in range(d_model // 2):
        omega = 10000 ** (-2 * k / d_model)
        out += [math.sin(distance * omega), math.cos(distance * omega)]
    return torch.tensor(out, dtype=torch.float64)


def naive_attention(att, x, memory, mask):
    """A_ij = (q_i + u)·k_j + (q_i + v)·W_R R_{i−j}, one (batch,
    head, i, j) at a time."""
    context = x if memory is None else torch.cat([memory, x], dim=1)
    mem_len, klen = context.size(1) - x.size(1), context.size(1)
    out = torch.zeros(x.size(0), x.size(1), D_MODEL, dtype=torch.float64)
    for b in range(x.size(0)):
        for head in range(H):
            cols = slice(head * D_K, (head + 1) * D_K)
            for i in range(x.size(1)):
                q = att.w_q.weight[cols] @ x[b, i]
                scores = []
                for j in range(klen):
                    if not mask[b, i, j]:
                        scores.append(torch.tensor(-math.inf, dtype=torch.float64))
                        continue
                    k = att.w_k.weight[cols] @ context[b, j]
                    r = att.w_r.weight[cols] @ sinusoid(mem_len + i - j, D_MODEL)
                    scores.append((q + att.u[head]) @ k + (q + att.v[head]) @ r)
                weights = (torch.stack(scores) / math.sqrt(D_K)).softmax(0)
                values = torch.stack(
                    [att.w_v.weight[cols] @ context[b, j] for j in range(klen)]
                )
                out[b, i, cols] = weights @ values
    return att.w_o(out)


def causal(length, mem_len, batch=B):
    i, j = torch.arange(length)[:, None], torch.arange(mem_len + length)[None, :]
    return (j <= mem_len + i).expand(batch, length, mem_len + length)


def module(seed=0):
    torch.manual_seed(seed)
    att = RelativeMultiHeadAttention(D_MODEL, H).double().eval()
    with torch.no_grad():  # biases large enough to matter in the comparison
        att.u.normal_()
        att.v.normal_()
    return att


def inputs(seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, LEN, D_MODEL, generator=g, dtype=torch.float64)
    memory = torch.randn(B, MEM, D_MODEL, generator=g, dtype=torch.float64)
    return x, memory


def test_relative_positions_are_sinusoids_of_descending_distances():
    table = relative_positions(5, 6)
    expected = torch.stack([sinusoid(d, 6) for d in (4, 3, 2, 1, 0)])
    torch.testing.assert_close(table.double(), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize(("qlen", "klen"), [(1, 1), (4, 4), (3, 7), (5, 6)])
def test_rel_shift_matches_explicit_indexing(qlen, klen):
    x = torch.randn(2, qlen, klen)
    out = rel_shift(x)
    mem_len = klen - qlen
    for i in range(qlen):
        for j in range(mem_len + i + 1):  # the keys a causal query may see
            assert out[:, i, j].equal(x[:, i, j + qlen - 1 - i])


@pytest.mark.parametrize("with_memory", [False, True], ids=["no-memory", "memory"])
def test_efficient_attention_equals_double_loop(with_memory):
    att = module()
    x, memory = inputs()
    memory = memory if with_memory else None
    mem_len = MEM if with_memory else 0
    with torch.no_grad():
        expected = naive_attention(att, x, memory, causal(LEN, mem_len))
        torch.testing.assert_close(att(x, memory), expected)


def test_custom_mask_equals_double_loop():
    att = module()
    x, memory = inputs()
    mask = causal(LEN, MEM).clone()
    mask[1, :, :2] = (
        False  # the second sequence hides its two oldest memory positions
    )
    with torch.no_grad():
        torch.testing.assert_close(
            att(x, memory, mask), naive_attention(att, x, memory, mask)
        )


def test_scores_depend_on_distance_not_absolute_position():
    """Shifting the whole history right (more memory in front) leaves the new
    outputs alone when the extra memory is hidden: only distances enter the
    scores."""
    att = module()
    x, memory = inputs()
    extra = torch.randn(B, 2, D_MODEL, dtype=torch.float64)
    mask = causal(LEN, MEM + 2).clone()
    mask[:, :, :2] = False
    with torch.no_grad():
        torch.testing.assert_close(
            att(x, torch.cat([extra, memory], 1), mask), att(x, memory)
        )


def test_memory_is_detached():
    att = module()
    x, memory = inputs()
    x.requires_grad_()
    memory.requires_grad_()
    att(x, memory).sum().backward()
    assert memory.grad is None
    assert x.grad is not None and x.grad.abs().sum() > 0
    assert (
        att.u.grad is not None
        and att.v.grad is not None
        and att.w_r.weight.grad is not None
    )


def test_a_mask_cannot_reveal_the_future_and_sizes_are_checked_in_the_config():
    att = module()
    x, memory = inputs()
    # A mask that would let a query see the future is combined with the causal one.
    everything = torch.ones(LEN, MEM + LEN, dtype=torch.bool)
    torch.testing.assert_close(att(x, memory, everything), att(x, memory))
    with pytest.raises(ValueError, match="not divisible by h=3"):
        XLConfig(d_model=10, h=3)


def lm(mem_len=8, seed=0):
    torch.manual_seed(seed)
    return TransformerXLLM(
        XLConfig(vocab=256, d_model=16, h=2, N=2, d_ff=32, mem_len=mem_len)
    ).eval()


def tokens(length, seed=0):
    return torch.randint(
        0, 256, (B, length), generator=torch.Generator().manual_seed(seed)
    )


def test_lm_is_causal_with_and_without_memory():
    model = lm()
    first, second = tokens(5, seed=1), tokens(6, seed=2)
    changed = second.clone()
    changed[:, 3] = (changed[:, 3] + 1) % 256
    with torch.no_grad():
        _, memories = model(first)
        for mem in (None, memories):
            before, after = model(second, mem)[0], model(changed, mem)[0]
            torch.testing.assert_close(before[:, :3], after[:, :3])
            assert not torch.allclose(before[:, 3:], after[:, 3:])


def test_two_segments_with_memory_equal_one_long_segment():
    """With mem_len ≥ the first segment, each layer sees exactly the states it
    would see if both segments were one sequence (causality), so the second
    segment's logits agree."""
    model = lm(mem_len=5)
    first, second = tokens(5, seed=1), tokens(4, seed=2)
    with torch.no_grad():
        whole, _ = model(torch.cat([first, second], 1))
        _, memories = model(first)
        logits, new_memories = model(second, memories)
        torch.testing.assert_close(logits, whole[:, 5:])
        # The memory changes what the second segment predicts.
        assert not torch.allclose(model(second)[0], logits)
    assert [m.shape for m in memories] == [(B, 5, 16)] * 2
    assert [m.shape for m in new_memories] == [
        (B, 5, 16)
    ] * 2  # the last mem_len of 9 states
    assert not any(m.requires_grad for m in new_memories)


def test_short_memory_keeps_the_last_mem_len_states():
    model = lm(mem_len=3)
    first, second = tokens(5, seed=1), tokens(4, seed=2)
    with torch.no_grad():
        whole = model(torch.cat([first, second], 1))[1]
        _, memories = model(first)
        _, later = model(second, memories)
    assert [m.shape for m in memories] == [(B, 3, 16)] * 2
    # The inputs to block 0 are the embeddings, which depend on the token alone;
    # block 1's inputs saw only 3 of the first segment's 5 positions, so they
    # differ from the whole run.
    torch.testing.assert_close(later[0], whole[0])
    assert not torch.allclose(later[1], whole[1])


@pytest.mark.parametrize("mem_len", [0, 2, 5])
def test_memory_equals_one_masked_pass_over_both_segments(mem_len):
    """An independent reference for the memory: run the blocks once over [previous;
    current] with a mask that lets position p + i of the current segment see only
    the last mem_len positions of the previous one (and itself and earlier current
    ones), the previous segment seeing its own past only. The current segment's
    logits are those of the memory path."""
    model = lm(mem_len=mem_len)
    first, second = tokens(5, seed=1), tokens(4, seed=2)
    p, total = first.size(1), first.size(1) + second.size(1)
    i, j = torch.arange(total)[:, None], torch.arange(total)[None, :]
    mask = (j <= i) & ((i < p) | (j >= p - mem_len))  # (total, total)
    with torch.no_grad():
        h = model.embed(torch.cat([first, second], 1))
        for block in model.blocks:
            h = block(h, None, mask)
        expected = model.to_logits(h)[:, p:]
        _, memories = model(first)
        logits, _ = model(second, memories)
    torch.testing.assert_close(logits, expected)


def test_evaluation_may_keep_more_memory_than_training():
    model = lm(mem_len=2)
    with torch.no_grad():
        _, memories = model(tokens(5, seed=1), mem_len=4)
    assert [m.shape for m in memories] == [(B, 4, 16)] * 2
    with pytest.raises(ValueError, match="mem_len=-1 must be >= 0"):
        model(tokens(3), mem_len=-1)
    for bad in ({"N": 0}, {"vocab": 0}, {"mem_len": -1}):
        message = "need vocab, N and max_len >= 1, mem_len"
        with pytest.raises(ValueError, match=message):
            XLConfig(**bad)  # refused where the config is made, in one line


def test_lm_trains_through_one_segment_only():
    model = lm().train()
    first, second = tokens(5, seed=1), tokens(4, seed=2)
    _, memories = model(first)
    logits, _ = model(second, memories)
    logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_lm_errors():
    model = lm()
    with pytest.raises(ValueError, match="memories for 2 blocks"):
        model(tokens(3), [torch.zeros(B, 1, 16)])
    with pytest.raises(ValueError, match=r"at least one token"):
        model(torch.zeros((1, 0), dtype=torch.long))
