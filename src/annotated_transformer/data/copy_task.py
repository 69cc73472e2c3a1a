"""The copy task (Annotated Transformer): random sequences whose target is the
source, the first task an encoder-decoder learns.

Batches of it are :class:`~annotated_transformer.data.batching.Batch`es, seeded,
so ``lambda epoch: copy_task_batches(..., seed=epoch)`` is a resumable data
source for the :class:`~annotated_transformer.training.trainer.Trainer`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from annotated_transformer.data.batching import Batch


def copy_task_batches(
    vocab: int,
    batch_size: int,
    n_batches: int,
    seq_len: int = 10,
    *,
    seed: int = 0,
    variable: bool = False,
) -> Iterator[Batch]:
    """The copy task (Annotated Transformer): random sequences
    whose target is the source.

    Ids are drawn from 2..vocab-1 after a start symbol 1; 0 is padding (never
    drawn). Seeded, so ``lambda epoch: copy_task_batches(..., seed=epoch)``
    is a resumable data source.

    ``variable=True`` is a version closer to translation: sources of 1 to
    ``seq_len`` symbols drawn from 3..vocab-1, closed by an end symbol 2 and
    padded with 0, src (batch, seq_len + 1); the target is the start symbol 1
    followed by the source, so the decoder must learn when to stop.
    """
    least_vocab, least_len = (4, 1) if variable else (3, 2)
    if vocab < least_vocab or seq_len < least_len:
        raise ValueError(
            f"the copy task needs vocab >= {least_vocab} and seq_len >= "
            f"{least_len}, got {vocab}, {seq_len}"
        )
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n_batches):
        if variable:
            yield variable_copy_batch(vocab, batch_size, seq_len, gen)
        else:
            data = torch.randint(2, vocab, (batch_size, seq_len), generator=gen)
            data[:, 0] = 1
            yield Batch(data, data.clone(), pad=0)


def variable_copy_batch(
    vocab: int, n: int, max_len: int, gen: torch.Generator
) -> Batch:
    """``n`` variable-length copy examples: src (n,
    max_len + 1), tgt (n, max_len + 2)."""
    lengths = torch.randint(1, max_len + 1, (n,), generator=gen)
    symbols = torch.randint(3, vocab, (n, max_len + 1), generator=gen)
    src = symbols.masked_fill(torch.arange(max_len + 1) >= lengths.unsqueeze(1), 0)
    src[torch.arange(n), lengths] = 2  # </s> right after the last symbol
    tgt = torch.cat([torch.ones(n, 1, dtype=src.dtype), src], dim=1)  # <s> + source
    return Batch(src, tgt, pad=0)
