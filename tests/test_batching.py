"""Length-bucketed batching, padding ratio, DDP sharding and collation."""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.nn.utils.rnn import pad_sequence

from annotated_transformer.data import batching

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def random_pairs(n: int = 3_000, seed: int = 0) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        src = rng.randint(3, 60)
        pairs.append((src, max(2, src + rng.randint(-5, 5))))
    return pairs


def test_every_example_once_and_under_budget():
    lengths = random_pairs()
    for pool_size in (None, 500):
        batches = batching.bucket_batches(
            lengths, 1_000, seed=3, pool_size=pool_size
        )
        counts = Counter(i for batch in batches for i in batch)
        assert sorted(counts) == list(range(len(lengths))) and set(
            counts.values()
        ) == {1}
        for batch in batches:
            longest = max(max(lengths[i]) for i in batch)
            assert len(batch) * longest <= 1_000


def test_bucketing_pads_less_than_random_batches():
    lengths = random_pairs()
    bucketed = batching.bucket_batches(lengths, 1_000, seed=0)
    # the same batch sizes, filled at random
    order = list(range(len(lengths)))
    random.Random(1).shuffle(order)
    shuffled, at = [], 0
    for batch in bucketed:
        shuffled.append(order[at : at + len(batch)])
        at += len(batch)
    pooled = batching.bucket_batches(lengths, 1_000, seed=0, pool_size=300)
    ratios = [
        batching.padding_ratio(b, lengths) for b in (bucketed, pooled, shuffled)
    ]
    assert ratios[0] < 0.06 and ratios[0] <= ratios[1] < ratios[2]


def test_seeded_deterministic_and_resumable():
    lengths = random_pairs(500)
    first = batching.bucket_batches(lengths, 600, seed=5, epoch=2)
    assert first == batching.bucket_batches(lengths, 600, seed=5, epoch=2)
    assert first != batching.bucket_batches(lengths, 600, seed=5, epoch=3)
    assert (
        batching.bucket_batches(lengths, 600, seed=5, epoch=2, start=7) == first[7:]
    )


def test_too_long_example_is_reported():
    with pytest.raises(ValueError, match="max_tokens=10"):
        batching.bucket_batches([4, 11, 3], 10)
    with pytest.raises(ValueError, match="max_tokens"):
        batching.bucket_batches([4], 0)


def test_padding_ratio_by_hand():
    # batch [0, 1] padded to 4: 2 pads; batch [2] padded to 3:
    # none -> 2 of 11 positions
    assert batching.padding_ratio([[0, 1], [2]], [2, 4, 3]) == pytest.approx(2 / 11)
    # fixed width 5, longer rows cut: real 2 + 4 + 3 = 9 of 15
    assert batching.padding_ratio(
        [[0, 1], [2]], [2, 4, 3], pad_to=5
    ) == pytest.approx(6 / 15)
    # pairs count both sides: src (2, 4) -> 2 pads of 8; tgt (3, 3) -> none of 6
    assert batching.padding_ratio([[0, 1]], [(2, 3), (4, 3)]) == pytest.approx(
        2 / 14
    )


def test_fixed_batches():
    batches = batching.fixed_batches(100, 32, seed=0)
    assert [len(b) for b in batches] == [32, 32, 32, 4]
    assert sorted(i for b in batches for i in b) == list(range(100))
    assert batches == batching.fixed_batches(100, 32, seed=0)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_ddp_shards_are_disjoint_and_equal(world_size):
    batches = batching.bucket_batches(random_pairs(1_000), 800, seed=0)
    shards = [
        batching.shard_batches(batches, r, world_size) for r in range(world_size)
    ]
    assert len({len(shard) for shard in shards}) == 1
    assert len(shards[0]) == len(batches) // world_size
    seen = [tuple(b) for shard in shards for b in shard]
    assert len(seen) == len(set(seen))  # no batch on two ranks
    assert set(seen) <= {tuple(b) for b in batches}
    with pytest.raises(ValueError, match="rank"):
        batching.shard_batches(batches, world_size, world_size)


def test_collate_matches_pad_sequence():
    ids = [[5, 6, 7], [8], [9, 10]]
    got = batching.collate(ids, pad=0, bos=1, eos=2)
    expected = pad_sequence(
        [torch.tensor([1, *x, 2]) for x in ids], batch_first=True
    )
    assert got.dtype == torch.long and torch.equal(got, expected)
    fixed = batching.collate(ids, pad=0, bos=1, eos=2, pad_to=4)
    assert fixed.tolist() == [[1, 5, 6, 7], [1, 8, 2, 0], [1, 9, 10, 2]]
    assert batching.collate([[3]], pad=0).tolist() == [[3]]
    with pytest.raises(ValueError, match="empty"):
        batching.collate([], pad=0)


def test_multi30k_bucketing_beats_the_original_fixed_padding():
    mirror = Path(os.environ.get("AT_DATA_MIRROR", SHARED)).resolve()
    if not (mirror / "multi30k").is_dir():
        pytest.skip(
            f"no Multi30k in data mirror {mirror}; set AT_DATA_MIRROR to "
            "shared/data"
        )
    from annotated_transformer.data.multi30k import load_split

    de, en = load_split("train", mirror=mirror)
    # word counts + begin/end tokens stand in for token counts here
    lengths = [
        (len(s.split()) + 2, len(t.split()) + 2)
        for s, t in zip(de, en, strict=True)
    ]
    bucketed = batching.bucket_batches(lengths, 2_000, seed=0)
    fixed = batching.fixed_batches(len(lengths), 32, seed=0)
    assert batching.padding_ratio(bucketed, lengths) < 0.1
    assert batching.padding_ratio(fixed, lengths, pad_to=72) > 0.7
