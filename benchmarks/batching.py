"""One Multi30k training epoch: bucketed and packed batches vs the
original's fixed padding.

    PYTHONPATH=src python benchmarks/batching.py [--quick] [--fraction F] \\
        [--threads N]

The Annotated Transformer padded every sentence to 72 tokens and took 32 sentences a
batch. Here the same model (the ``cpu`` preset's architecture with word
vocabularies, same seed, same optimiser and schedule) trains on the same data three
ways:

- ``original``: 32 sentences a batch, every sentence padded to 72 tokens, fp32;
- ``bucketed``: similar lengths batched together, padded to the batch's longest; the
  token budget is chosen so that a batch holds 32 sentences on average, hence about
  the same number of optimiser steps per epoch, so validation losses are comparable;
  fp32;
- ``bucketed`` in bf16: the same batches under bf16 autocast (weights and loss stay
  fp32), only on CPUs where bf16 matmuls are faster than fp32 (``bf16_is_fast``);
- ``--pools P,...``: bucketed within shuffled pools of P pairs
  (``pool_size``), fp32, one row each; a pool's budget is chosen again so that
  batches hold 32 sentences on average;
- ``packed``: random batches (no sorting by length) of 32 sentences on average,
  their pairs packed several to a row of ``--pack-width`` tokens with masks that
  keep each pair apart (``pack_width`` in the ``translate`` task); fp32.

For each: wall time of the epoch's training steps (and the process's CPU time,
steadier on a shared machine), real (non-padding) target tokens per second of wall
time, the padding ratio (both sides), and the validation loss after the epoch.
``--quick`` trains on the first 10% of each epoch's batches (the same fraction for
every row).

The target (issue 11): batches that are >= 4x faster per epoch than the original's
and end the epoch within 0.02 of its validation loss. Length buckets are fast but
sort the data, and that costs validation loss; packing keeps every batch a random
draw. The last lines say how each row fares against the target.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import time

import pandas as pd
import torch

from annotated_transformer.data.batching import (
    bucket_batches,
    fixed_batches,
    packed_batches,
)
from annotated_transformer.models.encoder_decoder import (
    Transformer,
)
from annotated_transformer.tasks.translation import (
    PRESETS,
    Translation,
    make_batch,
    make_packed_batch,
    pair_lengths,
)
from annotated_transformer.training.precision import bf16_is_fast
from annotated_transformer.training.schedules import make_scheduler
from annotated_transformer.training.trainer import (
    Trainer,
    make_optimizer,
    mean_loss,
)

ORIGINAL_LENGTH, ORIGINAL_BATCH = 72, 32


def budget_for(lengths: list[tuple[int, int]], sentences: int, batches=None) -> int:
    """The smallest token budget whose batches hold
    ``sentences`` sentences on average.

    batches(budget) -> the batches of an epoch (default: ``bucket_batches``)."""
    batches = batches or (lambda budget: bucket_batches(lengths, budget))
    target = math.ceil(len(lengths) / sentences)  # the original's number of batches
    low, high = max(max(pair) for pair in lengths), 100_000
    while low < high:  # fewer batches as the budget grows: bisect
        mid = (low + high) // 2
        if len(batches(mid)) <= target:
            high = mid
        else:
            low = mid + 1
    return low


def train_once(name, index, pairs, task, val_batches, precision) -> dict:
    """Train a fresh model on the batches ``index`` (one pass);
    time it, then validate."""
    # batches read only the special ids, which both vocabularies share
    vocab = task.src_vocab
    if name.startswith("packed"):
        batches = [make_packed_batch(pairs, rows, vocab) for rows in index]
    else:
        pad_to = ORIGINAL_LENGTH if name == "original" else None
        batches = [make_batch(pairs, i, vocab, pad_to) for i in index]
    torch.manual_seed(0)
    config = task.config
    vocabs = {"src_vocab": len(task.src_vocab), "tgt_vocab": len(task.tgt_vocab)}
    model = Transformer(dataclasses.replace(config.model, **vocabs))
    optimizer = make_optimizer(model)
    warmup = max(1, len(batches) // 10)
    scheduler = make_scheduler(
        optimizer, "cosine", config.lr, warmup, len(batches) + 1
    )
    trainer = Trainer(model, optimizer, task.loss, scheduler, precision=precision)
    start, cpu_start = time.perf_counter(), time.process_time()
    trainer.fit(lambda epoch: iter(batches), len(batches), progress=False)
    seconds, cpu_seconds = (
        time.perf_counter() - start,
        time.process_time() - cpu_start,
    )
    return {
        "batching": name,
        "precision": precision,
        "steps": len(batches),
        "seconds": round(seconds, 1),
        "cpu seconds": round(cpu_seconds, 1),
        "target tokens/s": round(sum(b.ntokens for b in batches) / seconds),
        "padding": round(padding(batches, vocab.stoi["<pad>"]), 3),
        "val loss": round(mean_loss(model, task.loss, val_batches), 3),
    }


def padding(batches, pad: int) -> float:
    """Fraction of the positions the model computes (source and
    target) that are padding."""
    real = sum(int((b.src != pad).sum() + (b.tgt_y != pad).sum()) for b in batches)
    total = sum(b.src.numel() + b.tgt_y.numel() for b in batches)
    return 1 - real / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="train on 10%% of the epoch"
    )
    parser.add_argument(
        "--fraction", type=float, help="train on this fraction of the epoch"
    )
    parser.add_argument(
        "--threads", type=int, help="torch threads (default: torch's choice)"
    )
    parser.add_argument(
        "--data-dir", help="data mirror folder (default: $AT_DATA_MIRROR)"
    )
    parser.add_argument(
        "--pools", default="", help="pool sizes for extra rows, e.g. 1000,4000"
    )
    parser.add_argument(
        "--pack-width", type=int, default=48, help="packed row width, tokens"
    )
    parser.add_argument(
        "--skip", default="", help="rows to leave out: original, bucketed, packed"
    )
    args = parser.parse_args()
    fraction = args.fraction or (0.1 if args.quick else 1.0)
    if args.threads:
        torch.set_num_threads(args.threads)

    # Word vocabularies, as the original padded words to 72 (and as the README's
    # figures were measured); fp32: the precision is chosen per row.
    config = dataclasses.replace(PRESETS["cpu"], tokens="words", tie=False)
    task = Translation(config, data_dir=args.data_dir)
    pairs = task.encode(task.split("train"))
    lengths = pair_lengths(pairs)
    val_pairs = task.encode(task.split("val"))
    val_index = bucket_batches(pair_lengths(val_pairs), 4000)
    val_batches = [make_batch(val_pairs, i, task.src_vocab) for i in val_index]

    budget = budget_for(lengths, ORIGINAL_BATCH)
    fixed = fixed_batches(len(pairs), ORIGINAL_BATCH, seed=0)
    bucketed = bucket_batches(lengths, budget, seed=0)
    fixed, bucketed = (
        b[: max(1, round(len(b) * fraction))] for b in (fixed, bucketed)
    )
    print(
        f"{len(pairs)} training pairs; bucket budget {budget} tokens "
        f"(~{ORIGINAL_BATCH} sentences a batch); training on {fraction:.0%} of an "
        f"epoch; {torch.get_num_threads()} threads"
    )

    runs = [("original", fixed, "fp32"), ("bucketed", bucketed, "fp32")]
    if bf16_is_fast(torch.device("cpu")):
        runs.append(("bucketed", bucketed, "bf16"))
    else:
        print("bf16 matmuls measured slower than fp32 on this CPU: no bf16 row")
    for pool in (int(p) for p in args.pools.split(",") if p):
        pooled = functools.partial(bucket_batches, lengths, pool_size=pool)
        index = pooled(budget_for(lengths, ORIGINAL_BATCH, pooled))
        runs.append(
            (
                f"pools of {pool}",
                index[: max(1, round(len(index) * fraction))],
                "fp32",
            )
        )
    width = args.pack_width
    packed = functools.partial(packed_batches, lengths, width=width)
    index = packed(budget_for(lengths, ORIGINAL_BATCH, packed))
    runs.append(
        (f"packed ({width})", index[: max(1, round(len(index) * fraction))], "fp32")
    )
    skip = [name for name in args.skip.split(",") if name]
    runs = [
        run for run in runs if not any(run[0].startswith(name) for name in skip)
    ]
    rows = []
    for name, index, precision in runs:
        rows.append(train_once(name, index, pairs, task, val_batches, precision))
        print(
            rows[-1], flush=True
        )  # each row as it finishes: a full epoch takes a while
    table = pd.DataFrame(rows)
    table["speed-up"] = (
        table["target tokens/s"] / table["target tokens/s"].iloc[0]
    ).round(2)
    print(table.to_string(index=False))
    if table["batching"].iloc[0] == "original":
        for _, row in table.iloc[1:].iterrows():
            gap = row["val loss"] - table["val loss"].iloc[0]
            met = row["speed-up"] >= 4 and abs(gap) <= 0.02
            print(
                f"{row['batching']} ({row['precision']}): {row['speed-up']:.2f}x "
                f"the original's speed, validation loss {gap:+.3f}: target "
                f"{'met' if met else 'missed'}"
            )


if __name__ == "__main__":
    main()
