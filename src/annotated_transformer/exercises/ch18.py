"""Checks of chapter 18's exercises: a sparse mask, the relative shift, a relative
bias, Transformer-XL's memory."""

from __future__ import annotations

from types import ModuleType

import torch

from annotated_transformer.exercises.grading import (
    assert_close,
    assert_equal,
    exercise,
    integers,
    rng,
)

CHAPTER = "18"


def _strided(i: int, j: int, stride: int) -> bool:
    """The definition: one of the last stride positions, or whole strides back."""
    return 0 <= i - j < stride or (j <= i and (i - j) % stride == 0)


@exercise(
    chapter=CHAPTER,
    name="strided_mask",
    title="The strided sparse mask, without loops",
    hint="Build the query and key indices as (n, 1) and (1, n) tensors and write "
    "both conditions on i − j with broadcasting; nothing in the future (i − j < "
    "0).",
)
def check_strided_mask(m: ModuleType) -> None:
    drawn = tuple(integers(0, 1, 30, 2))
    for n, stride in ((16, 4), (10, 3), (7, 1), (9, 9), (33, 5), drawn):
        r = range(n)
        expected = torch.tensor([[_strided(i, j, stride) for j in r] for i in r])
        assert_equal(m.strided_mask(n, stride), expected, f"n={n}, stride={stride}")


@exercise(
    chapter=CHAPTER,
    name="rel_shift",
    title="The relative shift",
    hint="Row i must slide left by qlen − 1 − i places. A gather with an index "
    "built from i and j works; so does padding a zero column in front and reading "
    "the same numbers with another shape.",
)
def check_rel_shift(m: ModuleType) -> None:
    gen = rng(0)
    for qlen, memory in ((3, 2), (4, 0), (1, 5), (5, 5)):
        klen = qlen + memory
        x = torch.randn(2, 3, qlen, klen, generator=gen)
        got = m.rel_shift(x)
        shape = tuple(got.shape)
        assert shape == x.shape, f"expected shape {tuple(x.shape)}, got {shape}"
        for i in range(qlen):
            for j in range(memory + i + 1):  # the visible keys
                distance = memory + i - j
                column = klen - 1 - distance  # where x keeps that distance
                assert torch.equal(got[..., i, j], x[..., i, column]), (
                    f"qlen {qlen}, memory {memory}: query {i}, key {j} should hold "
                    "the "
                    f"score of distance {distance}, column {column} of x"
                )


@exercise(
    chapter=CHAPTER,
    name="relative_bias",
    title="A learned relative-position bias",
    hint="Index the table with the distance i − j clipped to [0, D] for every "
    "pair (advanced indexing with an (n, n) tensor of distances keeps the heads "
    "axis), then put −inf on the future keys.",
)
def check_relative_bias(m: ModuleType) -> None:
    gen = rng(1)
    # 3 heads; distances 0, 1, 2 and 3, which also stands for any longer distance
    table = torch.randn(3, 4, generator=gen)
    n = 6
    expected = torch.full((3, n, n), float("-inf"))
    for h in range(3):
        for i in range(n):
            for j in range(i + 1):
                expected[h, i, j] = table[h, min(i - j, 3)]
    got = m.relative_bias(table, n)
    shape = tuple(got.shape)
    assert shape == (3, n, n), f"expected (3, {n}, {n}), got {shape}"
    future = torch.ones(n, n, dtype=torch.bool).triu(1).expand(3, n, n)
    assert (got[future] == float("-inf")).all(), "future keys must get −inf"
    assert_close(got[~future], expected[~future], "the bias on visible keys")


@exercise(
    chapter=CHAPTER,
    name="update_memory",
    title="Transformer-XL's memory",
    hint="Concatenate the old memory and the new states along the positions (axis "
    "1), keep the last mem_len, and cut them from the autograd graph.",
)
def check_update_memory(m: ModuleType) -> None:
    hidden = torch.arange(2 * 3 * 2, dtype=torch.float32).reshape(2, 3, 2)
    hidden.requires_grad_(True)
    first = m.update_memory(None, hidden, 4)
    assert_equal(first, hidden.detach(), "the first memory (all 3 states)")
    assert not first.requires_grad, "the memory must carry no gradient (detach it)"
    later = hidden.detach() + 100
    second = m.update_memory(first, later, 4)
    expected = torch.cat([hidden.detach()[:, 2:], later], dim=1)  # last 4 of 6
    assert_equal(second, expected, "the memory after a second segment")
    assert_equal(m.update_memory(second, later, 2), later[:, 1:], "mem_len=2")
    gen = rng(2)  # segments of random lengths, against a list of every state
    batch, d = integers(3, 1, 5, 2)
    (mem_len,) = integers(4, 1, 12, 1)
    memory, states = None, []
    for n in integers(5, 1, 8, 4):
        hidden = torch.randn(batch, n, d, generator=gen, requires_grad=True)
        memory = m.update_memory(memory, hidden, mem_len)
        states += hidden.detach().unbind(1)
        kept = states[-mem_len:]
        what = f"the memory (mem_len {mem_len}) after {len(states)} states"
        assert_equal(memory, torch.stack(kept, dim=1), what)
        assert not memory.requires_grad, "the memory must carry no gradient"
