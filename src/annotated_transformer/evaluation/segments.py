"""A text read as consecutive segments, with Transformer-XL's memory
carried from one to the next.

A vanilla language model trains on windows drawn anywhere in the text; each window
starts from nothing.
:class:`~annotated_transformer.models.transformer_xl.TransformerXLLM` needs the
*previous* segment of the same text before each segment, so the data must arrive in
order:

- **Training** (:func:`stream_segments`): the training bytes are cut into
  ``batch_size`` contiguous streams, one per row of the batch. Batch t holds the
  t-th segment of every stream, so row b of batch t + 1 continues row b of batch t,
  and the memory that batch t left behind is exactly the history batch t + 1 needs.
  An epoch reads every stream once, from an offset in [0, seg_len) drawn from the
  epoch's seed (the segment boundaries move from epoch to epoch); its first batch
  starts without memory (``fresh``).
- **Resuming**: the memory is training state, like the optimiser's moments.
  :class:`Memory` holds it between batches, and the runner's ``last.pt`` saves it
  (``state_dict``): a killed run resumes with the memory it had, so its losses are
  those of an uninterrupted run. (It cannot be recomputed: it was made by the
  weights of the previous step, which are gone.)
- **Evaluation** (:func:`segment_bits_per_byte`): the whole text as *one* stream of
  segments, each scored with at most ``mem_len`` remembered states per layer. Every
  byte after the first is scored once; a byte t positions into its segment sees t
  bytes of the segment plus the memory, and through the memory of the layers below,
  up to about N · mem_len bytes back.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.evaluation.metrics import BitsPerByte
from annotated_transformer.models.eval_mode import evaluating
from annotated_transformer.training.progress import tqdm


class Segments(NamedTuple):
    """One training batch: the next segment of every stream.

    x: (batch, seg_len) input bytes; y: (batch, seg_len) the byte after each (y[:,
        t] is the byte after x[:, t]); fresh: the first segment of its streams,
        with no memory before it.
    """

    x: Tensor
    y: Tensor
    fresh: bool


def stream_segments(
    data: Tensor, batch_size: int, seg_len: int, offset: int = 0
) -> list[Segments]:
    """One epoch of consecutive segments: ``batch_size`` streams, each
    read ``seg_len`` at a time.

    data: uint8 (n,). Stream b is the b-th of ``batch_size`` equal, contiguous
        pieces of ``data[offset:]``; batch t holds bytes t·seg_len .. (t+1)·seg_len
        of every stream (one more for the targets). The few bytes left over at the
        end of each stream are not read.
    """
    if batch_size < 1 or seg_len < 1 or offset < 0:
        raise ValueError(
            f"need batch_size, seg_len >= 1, offset >= 0: {batch_size}, {seg_len}"
        )
    per_stream = (len(data) - offset) // batch_size
    steps = (per_stream - 1) // seg_len
    if steps < 1:
        raise ValueError(
            f"{len(data)} bytes hold no segment of {seg_len} + 1 bytes in each of "
            f"{batch_size} streams: lower batch_size or max_len"
        )
    streams = data[offset : offset + batch_size * per_stream].view(
        batch_size, per_stream
    )
    batches = []
    for t in range(steps):
        # (batch, seg_len + 1): the segment and the byte after it
        chunk = streams[:, t * seg_len : (t + 1) * seg_len + 1].long()
        batches.append(Segments(chunk[:, :-1], chunk[:, 1:], fresh=t == 0))
    return batches


class Memory:
    """The per-layer memories one training batch leaves to the next (None: no
    memory yet).

    ``state_dict``/``load_state_dict`` as for an optimiser, so that checkpoints
    keep it.
    """

    def __init__(self) -> None:
        self.tensors: list[Tensor] | None = None

    def state_dict(self) -> dict[str, Any]:
        return (
            {}
            if self.tensors is None
            else {"memories": [m.cpu() for m in self.tensors]}
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tensors = state.get("memories")


def segment_loss(
    model: nn.Module, batch: Segments, memory: Memory
) -> tuple[Tensor, int]:
    """Summed next-byte cross-entropy (nats) of one batch of segments, and its size.

    The model reads ``batch.x`` after the memory the previous batch left (none when
    the batch is ``fresh``); the memory it leaves (detached: no gradient crosses
    the boundary) replaces it.
    """
    device = next(model.parameters()).device
    past = None if batch.fresh or memory.tensors is None else memory.tensors
    past = None if past is None else [m.to(device) for m in past]
    # logits: (batch, seg_len, 256)
    logits, memory.tensors = model(batch.x.to(device), past)
    flat = logits.float().flatten(0, 1)
    loss = F.cross_entropy(flat, batch.y.to(device).flatten(), reduction="sum")
    return loss, batch.y.numel()


def segment_bits_per_byte(
    model: nn.Module,
    data: Tensor,
    seg_len: int,
    mem_len: int,
    progress: bool = False,
) -> tuple[float, int]:
    """(bits per byte, bytes scored) of a whole text read as one stream of segments.

    data: uint8 (n,), n ≥ 2; segment s reads bytes s·seg_len .. s·seg_len + seg_len
        − 1 (the last one shorter) and predicts the byte after each, keeping
        ``mem_len`` states per layer for the next segment (0: every segment starts
        afresh). Bytes 1..n−1 are each scored once.
    """
    if len(data) < 2 or seg_len < 1 or mem_len < 0:
        raise ValueError(
            "need at least 2 bytes, seg_len >= 1 and mem_len >= 0; got "
            f"{len(data)} bytes, seg_len={seg_len}, mem_len={mem_len}"
        )
    device = next(model.parameters()).device
    meter, memories = BitsPerByte(), None
    starts = range(0, len(data) - 1, seg_len)
    with evaluating(model):
        for start in tqdm(starts, desc="evaluate", disable=not progress):
            chunk = data[start : start + seg_len + 1].long().unsqueeze(0).to(device)
            logits, memories = model(
                chunk[:, :-1], memories if mem_len else None, mem_len
            )
            meter.update(logits.float(), chunk[:, 1:])
    return meter.compute(), meter.count
