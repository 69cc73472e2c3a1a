"""Sequence packing: segment masks and positions, row packing, and packed batches
that give the model exactly what padded batches give it."""

from __future__ import annotations

import math
import random

import pytest
import torch

from annotated_transformer import runner
from annotated_transformer.blocks.masks import segment_mask, segment_positions
from annotated_transformer.blocks.positional import (
    PositionalEmbedding,
    PositionalEncoding,
    check_positions,
)
from annotated_transformer.data import batching
from annotated_transformer.data.batching import Batch, PackedBatch
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
)
from annotated_transformer.training.loss import seq2seq_loss


def random_segments(rows: int, length: int, seed: int) -> torch.Tensor:
    """Rows of consecutive segments 1, 2, ... of random
    lengths, then padding (0)."""
    rng = random.Random(seed)
    out = torch.zeros(rows, length, dtype=torch.long)
    for r in range(rows):
        i, k = 0, 1
        while i < length - rng.randint(0, 4):
            n = rng.randint(1, 5)
            out[r, i : i + n] = k
            i, k = i + n, k + 1
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_segment_mask_against_its_definition(causal):
    q, k = random_segments(3, 12, seed=0), random_segments(3, 12, seed=0)
    if not causal:
        k = random_segments(3, 9, seed=1)
    mask = segment_mask(q, k, causal=causal)
    assert mask.shape == (3, q.size(1), k.size(1))
    for b in range(3):
        for i in range(q.size(1)):
            for j in range(k.size(1)):
                if (
                    q[b, i] == 0
                ):  # padding queries see everything (never an empty row)
                    expected = True
                else:
                    expected = bool(q[b, i] == k[b, j]) and (not causal or j <= i)
                assert mask[b, i, j].item() == expected, (b, i, j)


def test_segment_positions_count_from_each_segment_start():
    segments = random_segments(4, 20, seed=2)
    positions = segment_positions(segments)
    for b in range(4):
        count = 0
        for i in range(20):
            count = (
                0 if i == 0 or segments[b, i] != segments[b, i - 1] else count + 1
            )
            assert positions[b, i].item() == count
    assert segment_positions(torch.tensor([[1, 1, 1, 2, 2, 0]])).tolist() == [
        [0, 1, 2, 0, 1, 0]
    ]


@pytest.mark.parametrize(
    "module", [PositionalEncoding(16, 0.0, 50), PositionalEmbedding(16, 50)]
)
def test_positions_tensor_equals_an_offset_per_row(module):
    x = torch.randn(2, 7, 16)
    positions = torch.tensor([[3, 4, 5, 6, 7, 8, 9], [0, 1, 2, 0, 1, 2, 3]])
    out = module(x, positions)
    torch.testing.assert_close(out[0], module(x[:1], 3)[0])
    torch.testing.assert_close(out[1, :3], module(x[1:, :3], 0)[0])
    torch.testing.assert_close(out[1, 3:], module(x[1:, 3:], 0)[0])
    # Checked where positions enter a model, once (Transformer.encode, decode).
    with pytest.raises(ValueError, match="positions must lie in"):
        check_positions(7, positions + 45, max_len=50)
    with pytest.raises(ValueError, match="long tensor of shape"):
        check_positions(7, positions[:, :3], max_len=50)


def test_pack_rows_fills_the_fewest_rows_and_balances_them():
    rng = random.Random(0)
    lengths = [rng.randint(1, 30) for _ in range(400)]
    rows = batching.pack_rows(lengths, 40)
    assert sorted(i for row in rows for i in row) == list(range(400))
    assert len(rows) == math.ceil(
        sum(lengths) / 40
    )  # as many rows as full rows would need
    loads = [sum(lengths[i] for i in row) for row in rows]
    # "Longest first into the shortest row" (Graham 1969): the longest row was the
    # shortest when it received its last example, which is among the shortest
    # examples.
    longest = rows[loads.index(max(loads))]
    assert max(loads) - lengths[longest[-1]] <= min(loads)
    assert lengths[longest[-1]] <= sorted(lengths)[len(lengths) // 4]


def test_pack_rows_balances_pairs_on_both_sides():
    rng = random.Random(1)
    pairs = [(rng.randint(2, 20), rng.randint(2, 20)) for _ in range(300)] + [
        (50, 3)
    ]
    rows = batching.pack_rows(pairs, 32)
    assert sorted(i for row in rows for i in row) == list(range(301))
    longer_side = max(sum(p[side] for p in pairs) for side in (0, 1))
    assert len(rows) == math.ceil(longer_side / 32)
    widest = max(
        max(sum(pairs[i][side] for i in row) for side in (0, 1)) for row in rows
    )
    assert (
        widest <= 50 + 2
    )  # the long example's row, and every other row, stay near 32 or it
    assert [300] in rows or all(len(row) > 1 for row in rows)
    with pytest.raises(ValueError, match="width=0 must be >= 1"):
        batching.pack_rows(pairs, 0)
    assert batching.pack_rows([], 8) == []


def test_packed_batches_are_random_seeded_and_under_budget():
    rng = random.Random(2)
    pairs = [(rng.randint(2, 30), rng.randint(2, 30)) for _ in range(2_000)]
    batches = batching.packed_batches(pairs, 500, 64, seed=3, epoch=1)
    flat = [i for batch in batches for row in batch for i in row]
    assert sorted(flat) == list(range(2_000))
    assert all(sum(max(pairs[i]) for row in b for i in row) <= 500 for b in batches)
    assert batches == batching.packed_batches(pairs, 500, 64, seed=3, epoch=1)
    assert batches != batching.packed_batches(pairs, 500, 64, seed=3, epoch=2)
    assert (
        batching.packed_batches(pairs, 500, 64, seed=3, epoch=1, start=5)
        == batches[5:]
    )
    # Not sorted by length: a batch's lengths spread like the whole data's (bucketed
    # batches hold one length each).
    spread = [
        max(max(pairs[i]) for r in b for i in r)
        - min(max(pairs[i]) for r in b for i in r)
        for b in batches
    ]
    assert sum(spread) / len(spread) > 20
    with pytest.raises(ValueError, match="more than max_tokens=20"):
        batching.packed_batches(pairs, 20, 64)


def random_pairs(
    n: int, vocab: int, seed: int
) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(seed)

    def ids() -> list[int]:
        return torch.randint(
            3, vocab, (int(torch.randint(1, 10, (1,), generator=g)),), generator=g
        ).tolist()

    return [(ids(), ids()) for _ in range(n)]


def test_packed_batch_gives_the_padded_batchs_loss_and_gradients():
    """Each pair, packed beside others, gets exactly what it
    gets in a padded batch."""
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(20, 20, N=2, d_model=32, d_ff=64, h=4, dropout=0.0)
    ).double()
    pairs = random_pairs(9, 20, seed=1)
    full = [([1, *s, 2], [1, *t, 2]) for s, t in pairs]
    rows = batching.pack_rows([(len(s), len(t)) for s, t in full], 16)
    packed = PackedBatch([[full[i] for i in row] for row in rows], pad=0)
    padded = Batch(
        batching.collate([s for s, _ in pairs], 0, 1, 2),
        batching.collate([t for _, t in pairs], 0, 1, 2),
        pad=0,
    )
    assert len(packed) == len(rows) < len(padded) == 9
    assert packed.ntokens == padded.ntokens == sum(len(t) + 1 for _, t in pairs)
    loss = seq2seq_loss(0, 0.1)
    grads = []
    for batch in (padded, packed):
        model.zero_grad()
        total, _ = loss(model, batch)
        total.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        grads[-1].append(total.detach())
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


def test_packed_batch_rejects_empty_rows():
    with pytest.raises(ValueError, match="a pair in every row"):
        PackedBatch([[([1, 5, 2], [1, 6, 2])], []])
    with pytest.raises(ValueError, match="target of >= 2"):
        PackedBatch([[([1, 5, 2], [1])]])


def test_translation_pack_width_trains_on_packed_random_batches(multi30k_mirror):
    from annotated_transformer.tasks.translation import Translation

    config = runner.new_config(
        "translate", "tiny", ["train_limit=300", "pack_width=48"]
    )
    task = Translation(config, data_dir=multi30k_mirror)
    batches = list(task.batches(0))
    assert all(isinstance(b, PackedBatch) for b in batches)
    assert sum(b.ntokens for b in batches) == sum(
        len(t) + 1 for _, t in task.train_pairs
    )
    longest = max(
        len(s) + 2 for s, _ in task.train_pairs
    )  # a longer pair has its own row
    assert max(b.src.size(1) for b in batches) <= max(48, longest)
    assert sum(b.src.size(0) for b in batches) < 0.6 * len(
        task.train_pairs
    )  # ~2 a row
    model = task.build_model()
    total, count = task.loss(model, batches[0])
    assert torch.isfinite(total) and count == batches[0].ntokens
    with pytest.raises(ValueError, match="pool_size must stay 0"):
        runner.new_config("translate", "tiny", ["pack_width=48", "pool_size=100"])
    with pytest.raises(ValueError, match="pack_width=-1 must be >= 0"):
        runner.new_config("translate", "tiny", ["pack_width=-1"])


def test_padding_ratio_of_packed_rows_by_hand():
    lengths = [(3, 4), (2, 2), (5, 1)]
    # rows [0, 1] and [2]: source rows 5 and 5 tokens, target
    # rows 6 and 1 (padded to 6)
    assert (
        batching.padding_ratio([[[0, 1], [2]]], lengths, packed=True) == 1 - 17 / 22
    )
    assert (
        batching.padding_ratio([[0, 1, 2]], lengths) == 1 - 17 / 27
    )  # one pair a row
