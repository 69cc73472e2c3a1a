"""Checks of chapter 06's exercises (Masks)."""

from types import ModuleType

import torch
from torch import nn

from annotated_transformer.exercises.grading import (
    assert_close,
    assert_equal,
    exercise,
    integers,
    rng,
    seed,
)


def _leak(mask: torch.Tensor, x: torch.Tensor, k: int) -> float:
    """Largest change of the outputs before position k of a 2-layer encoder run
    with ``mask`` (True = may attend) when the inputs from k on change."""
    torch.manual_seed(seed(0))
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    blocked = (~mask).repeat_interleave(2, dim=0)  # PyTorch's: True = blocked
    changed = x.clone()
    changed[:, k:] = torch.randn(changed[:, k:].shape)
    with torch.no_grad():
        before, after = encoder(x, mask=blocked), encoder(changed, mask=blocked)
    return float((after[:, :k] - before[:, :k]).abs().max())


@exercise(
    chapter="06",
    name="prefix_lm_mask",
    title="A prefix-LM mask, proved with the leak test",
    hint="OR two masks: 'key j is in the prefix' (j < prefix_len[b], one row per "
    "batch element, broadcast over queries) and the look-ahead mask j <= i.",
)
def check_prefix_lm_mask(m: ModuleType) -> None:
    size = 6
    prefix_len = torch.tensor([3, *integers(2, 0, size, 2)])  # row 0: the leak test
    expected = torch.tensor(
        [
            [[j < p or j <= i for j in range(size)] for i in range(size)]
            for p in prefix_len.tolist()
        ],
    )
    mask = m.prefix_lm_mask(prefix_len, size)
    assert_equal(mask, expected, "the mask")
    x = torch.randn(3, size, 16, generator=rng(1))
    for k in range(3, size):  # after every prefix of row 0: nothing leaks back
        assert _leak(mask[:1], x[:1], k) == 0, f"information leaks back from {k}"
    assert _leak(mask[:1], x[:1], 2) > 1e-4, "position 0 should see the prefix"


@exercise(
    chapter="06",
    name="masked_softmax",
    title="Find the bug: a mask fill that breaks in half precision",
    hint="what is the largest number a float16 can hold? Fill with a value that "
    "exists in every dtype: float('-inf'), or torch.finfo(scores.dtype).min.",
    question="the grader fills the scores in float16: what is the largest number "
    "a float16 can hold, and what does the fill value become?",
)
def check_masked_softmax(m: ModuleType) -> None:
    g = rng(2)
    scores = 4 * torch.randn(2, 4, 5, generator=g)
    mask = torch.ones(4, 5, dtype=torch.bool).tril(1)  # (q_len, k_len)
    expected = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    for dtype, tolerance in [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)]:
        got = m.masked_softmax(scores.to(dtype), mask)
        assert_close(got, expected, f"the weights in {dtype}", atol=tolerance)
    got = m.masked_softmax(scores.half(), mask)
    assert got.dtype == torch.float16, "keep the scores' dtype, float16"
    # float16 keeps 11 bits: a weight near 1 is off by up to a few 1e-3
    assert_close(got, expected, "the weights in float16", atol=3e-3)
    hidden = got[..., ~mask]
    assert_equal(hidden, torch.zeros_like(hidden), "the masked weights in float16")


@exercise(
    chapter="06",
    name="make_std_mask",
    title="Find the bug: padded target rows left unmasked",
    hint="the original only hides padded keys; decide what a padded query may "
    "see: give it one key that is not a real token, e.g. itself (torch.where on "
    "the rows of padded queries), so that its row is never empty.",
    question="print the mask's row for a padded target position: which keys may "
    "that query attend to, which should it, and what would a softmax over no key "
    "give?",
)
def check_make_std_mask(m: ModuleType) -> None:
    tgt = torch.tensor([[1, 5, 6, 0, 0], [0, 0, 1, 7, 8], [1, 4, 3, 9, 2]])
    mask = m.make_std_mask(tgt, 0)
    _check_std_mask(mask, tgt, 0)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    assert_equal(mask[2], causal, "the mask of sentence 2, which has no padding")
    g = rng(3)  # a random pad id, padding anywhere (left, right, inside, all)
    pad, length = integers(4, 1, 30, 1) + integers(5, 4, 9, 1)
    tgt = torch.randint(0, 30, (4, length), generator=g)
    tgt += (tgt >= pad).long()  # the real tokens: any id but pad
    padded = torch.rand(4, length, generator=g) < 0.4
    padded[0, :2], padded[1, -2:], padded[2] = True, True, True
    tgt[padded] = pad
    _check_std_mask(m.make_std_mask(tgt, pad), tgt, pad)


def _check_std_mask(mask: object, tgt: torch.Tensor, pad: int) -> None:
    """Real queries see exactly the real keys up to themselves; a padded query
    sees some key, and no real one."""
    batch, length = tgt.shape
    shape = (batch, length, length)
    assert isinstance(mask, torch.Tensor) and mask.shape == shape, (
        f"for targets of shape {tuple(tgt.shape)} return a mask of shape {shape}"
    )
    real = tgt != pad
    for b in range(batch):
        for i in range(length):
            row = mask[b, i].bool()
            if real[b, i]:
                r = range(length)
                want = torch.tensor([bool(real[b, j]) and j <= i for j in r])
                assert_equal(row, want, f"real query {i} of sentence {b}'s row")
            else:
                where = f"padded query {i} of sentence {b} (pad id {pad})"
                assert row.any(), f"{where} sees no key at all: NaN"
                assert not (real[b] & row).any(), f"{where} reads real tokens"


@exercise(
    chapter="06",
    name="sliding_window_mask",
    title="A causal sliding window",
    hint="two conditions on the offset i - j: at least 0 (no look-ahead) and "
    "below window (at most window - 1 steps back); build i and j as a column and "
    "a row of positions and let broadcasting make the square.",
)
def check_sliding_window_mask(m: ModuleType) -> None:
    drawn = tuple(integers(0, 1, 9, 2))
    for size, window in [(6, 3), (5, 1), (4, 10), drawn]:
        expected = torch.tensor(
            [[0 <= i - j < window for j in range(size)] for i in range(size)],
        )
        got = m.sliding_window_mask(size, window)
        assert_equal(got, expected, f"sliding_window_mask({size}, {window})")
