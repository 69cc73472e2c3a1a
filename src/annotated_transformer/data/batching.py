"""Batches of sentences with little padding: bucket by length under a token budget.

A batch is padded to its longest example, so a batch mixing a 5-token and a 40-token
sentence is mostly padding. ``bucket_batches`` sorts examples by length (within
shuffled pools, or globally), cuts the sorted list into batches whose padded size
``len(batch) × longest`` stays within ``max_tokens``, then shuffles the batches:
similar lengths share a batch, but the order of batches is random. The Annotated
Transformer instead padded every sentence to a fixed length (72 for its Multi30k
run) in batches of 32 sentences: ``fixed_batches`` + ``collate`` with ``pad_to``
reproduce that, for comparison.

Sorting by length has a cost beyond padding: a batch of only short (or only long)
sentences is a less varied sample than a random one, and one epoch of bucketed
batches ends at a worse validation loss than random batches at the same number of
steps (``benchmarks/batching.py``). ``packed_batches`` keeps the batches random and
removes the padding another way: it packs several pairs into each row
(``pack_rows``), and masks keep the pairs apart (:class:`PackedBatch`).

A batch of sentence pairs then becomes tensors with their masks: :class:`Batch`
(padded pairs, the decoder's input and target shifted by one) and
:class:`PackedBatch` (pairs packed several to a row), what the translation loss
(:func:`~annotated_transformer.training.loss.seq2seq_loss`) reads.

Everything random takes ``seed`` and ``epoch``, so the same arguments give
the same batches on every run and every rank, and training can resume
mid-epoch from a batch position.
"""

from __future__ import annotations

import math
import operator
import random
from collections.abc import Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

from annotated_transformer.blocks.masks import (
    check_rows,
    make_std_mask,
    padding_mask,
    segment_mask,
    segment_positions,
)

# The tokens of one example, or of each side of a pair (src, tgt).
Length = int | Sequence[int]
T = TypeVar("T")


def _size(length: Length) -> int:
    """An example's padded size: its longest side (what a
    batch must be padded to)."""
    return length if isinstance(length, int) else max(length)


def _sides(length: Length) -> tuple[int, ...]:
    """An example's token counts, one per side: (n,) or (src, tgt)."""
    return (length,) if isinstance(length, int) else tuple(length)


def _sort_key(length: Length) -> tuple[int, ...]:
    """Longest side first, then the sides themselves: pairs alike on
    both sides stay close."""
    return (length,) if isinstance(length, int) else (max(length), *length)


def bucket_batches(
    lengths: Sequence[Length],
    max_tokens: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    pool_size: int | None = None,
    start: int = 0,
) -> list[list[int]]:
    """Index batches of similar-length examples, each with
    ``len × longest <= max_tokens``.

    lengths: per example, its token count as it will be padded (include begin/end
        tokens), or a (src, tgt) pair of counts. pool_size: sort within shuffled
        pools of this many examples (None: sort all at once, least padding). start:
        skip the first ``start`` batches, to resume an epoch. Every example appears
        in exactly one batch.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens={max_tokens} must be >= 1")
    sizes = [_size(length) for length in lengths]
    too_long = [i for i, size in enumerate(sizes) if size > max_tokens]
    if too_long:
        raise ValueError(
            f"{len(too_long)} example(s) are longer than max_tokens={max_tokens} "
            f"(e.g. #{too_long[0]}, {sizes[too_long[0]]} tokens): filter them or "
            "raise max_tokens"
        )
    rng = random.Random(f"{seed}/{epoch}")
    order = list(range(len(sizes)))
    rng.shuffle(order)  # ties in length end up in a different order each epoch
    pool = pool_size or max(len(order), 1)
    batches: list[list[int]] = []
    for begin in range(0, len(order), pool):
        chunk = sorted(
            order[begin : begin + pool], key=lambda i: _sort_key(lengths[i])
        )
        batch: list[int] = []
        for i in chunk:  # sorted ascending: the newcomer is the batch's longest
            if batch and (len(batch) + 1) * sizes[i] > max_tokens:
                batches.append(batch)
                batch = []
            batch.append(i)
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    return batches[start:]


def pack_rows(lengths: Sequence[Length], width: int) -> list[list[int]]:
    """Examples into rows of about ``width`` tokens each, as
    equal in length as possible.

    lengths: as in ``bucket_batches``. Returns rows of indices into ``lengths``,
        every index in exactly one row. The number of rows is what the examples fill
        at ``width`` tokens a row (total tokens of the longer side / width, rounded
        up); each example, longest first, then joins the row that stays shortest
        with it. This greedy schedule ("longest processing time first") leaves rows
        that differ by less than one example's length, and a row is padded only to
        the longest row, so padding stays a fraction of a sentence per row.
    """
    if width < 1:
        raise ValueError(f"width={width} must be >= 1")
    sides = [_sides(length) for length in lengths]
    if not sides:
        return []
    totals = [sum(side) for side in zip(*sides, strict=True)]
    n_rows = math.ceil(max(totals) / width)
    rows: list[list[int]] = [[] for _ in range(n_rows)]
    # per row, the tokens on each side
    loads = [[0] * len(totals) for _ in range(n_rows)]
    order = sorted(
        range(len(sides)), key=lambda i: _sort_key(lengths[i]), reverse=True
    )
    for i in order:
        r = min(
            range(n_rows), key=lambda r: max(map(operator.add, loads[r], sides[i]))
        )
        rows[r].append(i)
        loads[r] = list(map(operator.add, loads[r], sides[i]))
    return [row for row in rows if row]


def packed_batches(
    lengths: Sequence[Length],
    max_tokens: int,
    width: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    start: int = 0,
) -> list[list[list[int]]]:
    """Random batches of about ``max_tokens`` real tokens, each
    packed into rows of ``width``.

    The examples are shuffled (seeded by ``seed`` and ``epoch``, no sorting by
    length) and cut into consecutive batches whose sizes (each example's longest
    side) sum to at most ``max_tokens``; each batch is then packed with
    ``pack_rows``. Returns, per batch, its rows of example indices. start: skip the
    first ``start`` batches, to resume an epoch.
    """
    sizes = [_size(length) for length in lengths]
    if max(sizes, default=0) > max_tokens:
        raise ValueError(
            f"an example has {max(sizes)} tokens, more than "
            f"max_tokens={max_tokens}: filter it or raise max_tokens"
        )
    order = list(range(len(sizes)))
    random.Random(f"{seed}/{epoch}").shuffle(order)
    groups: list[list[int]] = [[]]
    total = 0
    for i in order:
        if groups[-1] and total + sizes[i] > max_tokens:
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += sizes[i]
    return [
        [
            [group[j] for j in row]
            for row in pack_rows([lengths[i] for i in group], width)
        ]
        for group in groups[start:]
        if group
    ]


def fixed_batches(
    n: int, batch_size: int = 32, *, seed: int = 0, epoch: int = 0
) -> list[list[int]]:
    """The original's batching: shuffled examples, ``batch_size`` at a
    time (last may be short)."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    order = list(range(n))
    random.Random(f"{seed}/{epoch}").shuffle(order)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def padding_ratio(
    batches: Sequence[Sequence[Any]],
    lengths: Sequence[Length],
    pad_to: int | None = None,
    packed: bool = False,
) -> float:
    """Fraction of the padded positions that are padding, over all
    batches (and both sides).

    Each batch is padded to its longest example per side, or to ``pad_to`` (longer
    examples are then cut to ``pad_to``, as ``collate`` does). ``packed``: each
    batch is a list of rows (``packed_batches``) whose examples lie end to end,
    padded to the batch's longest row.
    """
    real = padded = 0
    for batch in batches:
        rows = batch if packed else [[i] for i in batch]
        row_lengths = [  # (rows, sides): the tokens of each row on each side
            [
                sum(side)
                for side in zip(*(_sides(lengths[i]) for i in row), strict=True)
            ]
            for row in rows
        ]
        # per side: the (n_rows,) token counts
        for side in zip(*row_lengths, strict=True):
            width = pad_to if pad_to is not None else max(side)
            real += sum(min(length, width) for length in side)
            padded += width * len(side)
    return 1.0 - real / padded if padded else 0.0


def shard_batches(
    batches: Sequence[T], rank: int, world_size: int, multiple: int = 1
) -> list[T]:
    """The share of rank ``rank`` of ``world_size`` for data-parallel training.

    Ranks take batches round-robin; the list is first cut to a multiple of
    ``world_size × multiple`` (``multiple``: micro-batches per optimiser step) so
    that every rank runs the same number of whole steps (a rank with one batch more
    would hang the others in its gradient all-reduce, and a step never straddles two
    epochs). Shares are disjoint.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
    if multiple < 1:
        raise ValueError(f"multiple={multiple} must be >= 1 micro-batches per step")
    usable = len(batches) - len(batches) % (world_size * multiple)
    return list(batches[rank:usable:world_size])


def collate(
    sequences: Sequence[Sequence[int]],
    pad: int,
    bos: int | None = None,
    eos: int | None = None,
    pad_to: int | None = None,
) -> torch.Tensor:
    """Token-id lists → a padded LongTensor ``(batch, length)``,
    with begin/end tokens added.

    Each row is ``[bos] + ids + [eos]`` followed by ``pad``; ``length`` is the
    longest row, or ``pad_to`` (rows longer than ``pad_to`` are cut, as in the
    original's fixed padding).
    """
    rows = [
        ([bos] if bos is not None else [])
        + list(ids)
        + ([eos] if eos is not None else [])
        for ids in sequences
    ]
    if not rows:
        raise ValueError("cannot collate an empty batch")
    if not all(rows):
        empty = next(i for i, row in enumerate(rows) if not row)
        raise ValueError(
            f"sequence {empty} of the batch is empty: it would be all padding, "
            "with nothing to attend to (map unknown words to <unk>, do not drop "
            "them)"
        )
    width = pad_to if pad_to is not None else max(len(row) for row in rows)
    out = torch.full((len(rows), width), pad, dtype=torch.long)
    for r, row in enumerate(rows):
        row = row[:width]
        out[r, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def check_pair(src: Tensor, tgt: Tensor | None) -> None:
    """Raise a ValueError unless ``tgt`` (if given) is a (batch, tgt_len >= 2)
    tensor of ids for the ``src`` rows: ``<s>`` then at least one token to
    predict. Checked once per batch, where it is made, not in every layer."""
    if tgt is not None and (
        tgt.dim() != 2 or tgt.size(1) < 2 or tgt.size(0) != src.size(0)
    ):
        raise ValueError(
            f"tgt must be (batch={src.size(0)}, tgt_len >= 2) ids (<s> "
            f"then at least one token to predict), got {tuple(tgt.shape)}"
        )


def moved(value: Any, device: torch.device | str) -> Any:
    """``value`` on ``device``: a tensor, or each tensor of a dict; anything else
    as it is."""
    if isinstance(value, Tensor):
        return value.to(device, non_blocking=True)
    if isinstance(value, dict):
        return {k: moved(v, device) for k, v in value.items()}
    return value


class Batch:
    """A batch of sentence pairs for teacher forcing, with its masks.

    src: (batch, src_len) ids; tgt: (batch, tgt_len) ids starting with <s>, or None;
        pad: the padding id (0, ``<pad>`` in
        :data:`~annotated_transformer.data.vocab.SPECIALS`; the original Annotated
        Transformer used 2).
    The decoder reads ``tgt`` = tgt[:, :-1] and must predict ``tgt_y`` = tgt[:, 1:]:
    src_mask (batch, 1, src_len); tgt, tgt_y (batch, tgt_len - 1);
    tgt_mask (batch, tgt_len - 1, tgt_len - 1); ntokens = number of non-padding
    ``tgt_y``. ``packing``: the model's extra inputs for packed rows
    (:class:`PackedBatch`); empty here.
    """

    def __init__(
        self, src: Tensor, tgt: Tensor | None = None, pad: int = 0
    ) -> None:
        check_pair(src, tgt)
        self.src = src
        self.src_mask = padding_mask(src, pad)
        self.tgt = self.tgt_y = self.tgt_mask = None
        self.ntokens = 0
        self.packing: dict[str, Tensor] = {}
        if tgt is not None:
            self.tgt = tgt[:, :-1]
            self.tgt_y = tgt[:, 1:]
            self.tgt_mask = make_std_mask(self.tgt, pad)
            self.ntokens = int((self.tgt_y != pad).sum())
        check_rows(self.src_mask, "src_mask")

    def to(self, device: torch.device | str) -> Batch:
        """Move every tensor to ``device`` (in place; returns self)."""
        for name, value in list(vars(self).items()):
            setattr(self, name, moved(value, device))
        return self

    def __len__(self) -> int:
        return self.src.size(0)


class PackedBatch(Batch):
    """Sentence pairs packed several to a row, one after another (sequence packing).

    rows: per row, its pairs ``(src_ids, tgt_ids)``, each side already holding
        ``<s>`` and ``</s>``. Pair k of a row is segment k + 1 of that row on both
        sides (0: padding). The decoder reads ``<s> y`` and predicts ``y </s>`` of
        every pair, and the masks
        (:func:`~annotated_transformer.blocks.masks.segment_mask`) keep each token
        inside its own pair: src_mask (rows, src_len, src_len); tgt_mask (rows,
        tgt_len, tgt_len), causal; ``packing["memory_mask"]`` (rows, tgt_len,
        src_len) for the source attention; and ``packing["src_pos"]``,
        ``packing["tgt_pos"]`` (rows, len) restart at 0 for every pair. So the model
        computes for each pair what it would in a padded batch, while the padding
        shrinks to the ends of the rows, whatever the mix of lengths.
    """

    def __init__(
        self,
        rows: Sequence[Sequence[tuple[Sequence[int], Sequence[int]]]],
        pad: int = 0,
    ):
        if not rows or not all(rows):
            raise ValueError(
                "a packed batch needs at least one row and a pair in every row"
            )
        if any(len(src) < 1 or len(tgt) < 2 for row in rows for src, tgt in row):
            raise ValueError(
                "every pair needs a source token and a target of >= 2 (<s> ... "
                "</s>)"
            )
        src, src_seg = _pack([[s for s, _ in row] for row in rows], pad)
        tgt, tgt_seg = _pack([[t[:-1] for _, t in row] for row in rows], pad)
        self.tgt_y, _ = _pack([[t[1:] for _, t in row] for row in rows], pad)
        self.src, self.tgt = src, tgt
        self.src_mask = segment_mask(src_seg, src_seg)
        self.tgt_mask = segment_mask(tgt_seg, tgt_seg, causal=True)
        self.ntokens = int((tgt_seg > 0).sum())
        self.packing = {
            "memory_mask": segment_mask(tgt_seg, src_seg),
            "src_pos": segment_positions(src_seg),
            "tgt_pos": segment_positions(tgt_seg),
        }


def _pack(
    rows: Sequence[Sequence[Sequence[int]]], pad: int
) -> tuple[Tensor, Tensor]:
    """Rows of id lists -> (ids, segments), both (rows, longest row): each
    row's lists one after another, then ``pad``; segments number the lists of a
    row from 1 (0: padding)."""
    width = max(sum(len(ids) for ids in row) for row in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    segments = torch.zeros((len(rows), width), dtype=torch.long)
    for r, row in enumerate(rows):
        flat = [i for seq in row for i in seq]
        ids[r, : len(flat)] = torch.tensor(flat, dtype=torch.long)
        segments[r, : len(flat)] = torch.repeat_interleave(
            torch.arange(1, len(row) + 1), torch.tensor([len(seq) for seq in row])
        )
    return ids, segments
