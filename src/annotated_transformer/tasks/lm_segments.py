"""How the ``lm`` task reads a text for a model with a memory (``block=xl``,
Transformer-XL, chapter 18): consecutive segments, the memory carried from one
to the next.

The other variants read independent windows
(:class:`~annotated_transformer.tasks.lm.RandomWindows`); a variant whose registry
entry has ``memory=True`` (:mod:`annotated_transformer.tasks.variants`) is read
here instead. The same five methods, another regime:

- training batches: the training bytes as ``batch_size`` parallel streams of
  ``max_len``-byte segments, from an offset drawn from the epoch's seed
  (:func:`~annotated_transformer.evaluation.segments.stream_segments`);
- loss: each batch read after the memory the previous one left
  (:func:`~annotated_transformer.evaluation.segments.segment_loss`); the memory
  is the task's ``stream``, saved in ``last.pt`` for resuming;
- validation and test: bits per byte of the text as one stream of segments, with
  ``mem_len`` states of memory per layer
  (:func:`~annotated_transformer.evaluation.segments.segment_bits_per_byte`).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from annotated_transformer.evaluation.segments import (
    Memory,
    Segments,
    segment_bits_per_byte,
    segment_loss,
    stream_segments,
)
from annotated_transformer.tasks.base import epoch_generator
from annotated_transformer.training import distributed as dist


class TextTask(Protocol):
    """What a reader reads of its ``lm`` task
    (:class:`~annotated_transformer.tasks.lm.LanguageModel`): the config (sizes,
    seed, ``eval_bytes``), the text's splits and the training ids."""

    @property
    def config(self) -> Any: ...

    @property
    def splits(self) -> dict[str, Tensor]: ...

    @property
    def train_ids(self) -> Tensor: ...


class ConsecutiveSegments:
    """The ``lm`` task's batches, loss and scores for a model with a memory.

    ``stream``: the :class:`~annotated_transformer.evaluation.segments.Memory` one
    training batch leaves to the next.
    """

    def __init__(self, task: TextTask) -> None:
        self.task, self.stream = task, Memory()

    def batches(self, epoch: int) -> list[Segments]:
        """The training text's consecutive segments in ``batch_size`` streams,
        from a seeded offset in [0, max_len): the same for the same epoch."""
        c = self.task.config
        generator = epoch_generator(c.seed, epoch)
        if dist.world_size() > 1:
            raise ValueError(
                f"block={c.block} trains in one process: its streams are not "
                "sharded"
            )
        offset = int(torch.randint(c.max_len, (1,), generator=generator))
        return stream_segments(self.task.train_ids, c.batch_size, c.max_len, offset)

    def loss(self, model: nn.Module, batch: Segments) -> tuple[Tensor, int]:
        """Summed next-byte cross-entropy (nats) of a batch of segments, after
        the memory the previous batch left, and its size."""
        return segment_loss(model, batch, self.stream)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Bits per byte of the first ``eval_bytes`` of the validation split,
        read in order with the training memory (and the loss in nats)."""
        c = self.task.config
        val = self.task.splits["val"][: c.eval_bytes + 1]
        bpb, _ = segment_bits_per_byte(model, val, c.max_len, model.mem_len)
        return {"val_loss": bpb * math.log(2), "val_bpb": bpb}

    def score(
        self,
        model: nn.Module,
        data: Tensor,
        mem_len: int | None = None,
        **windows: Any,
    ) -> dict[str, Any]:
        """Bits per byte of a whole text (uint8 (n,)) read as one stream of
        ``max_len``-byte segments with ``mem_len`` states of memory per layer
        (default: the training ``mem_len``). Windows do not apply."""
        c = self.task.config
        if windows:
            raise ValueError(
                f"block={c.block} reads segments in order: no context, stride, "
                "batch size"
            )
        mem_len = model.mem_len if mem_len is None else mem_len
        bpb, scored = segment_bits_per_byte(model, data, c.max_len, mem_len)
        return {
            "bits_per_byte": bpb,
            "bytes_scored": scored,
            "segment": c.max_len,
            "mem_len": mem_len,
        }
