"""A byte-level language model (Part V): predict each next byte of
Tiny Shakespeare or enwik8.

- Data: one long stream of bytes per split (:mod:`annotated_transformer.data.byte_corpora`); the
  vocabulary is the 256 byte values, so there is no tokenizer at all.
- Batches: random windows of ``max_len`` + 1 bytes, a seeded draw per epoch; an
  epoch is as many windows as cover the training bytes once on average.
- Model: :class:`~annotated_transformer.models.decoder_only.DecoderLM`, the 2017 block with a
  causal mask and learned positions (``block="2017"``), or
  :class:`~annotated_transformer.models.modern_decoder.
  ModernDecoderLM`, today's block (``block="modern"``: pre-norm
  RMSNorm, rotary positions,
  grouped-query attention with ``kv_heads`` key/value heads, SwiGLU of width
  ``swiglu_width(d_ff)``, which keeps the feed-forward's parameter count, no
  biases). The modern block's switches ``norm``, ``positions``, ``feed_forward`` and
  ``bias`` step from one to the other (chapter 15). ``block="gpt2"``:
  :class:`~annotated_transformer.models.gpt2.GPT2LM`, GPT-2's recipe (pre-norm LayerNorm,
  GELU, tied embeddings, 1/√(2N) residual init). ``block="xl"``:
  :class:`~annotated_transformer.models.transformer_xl.TransformerXLLM` (relative positions and a
  memory of ``mem_len`` states per layer, chapter 17), which reads ``max_len``-byte
  segments of the text in order (:mod:`annotated_transformer.evaluation.segments`).
- Tokens (chapter 16): ``tokens="bytes"`` (the default) or ``"bpe"``, a byte-level
  BPE of ``bpe_merges`` merges (:mod:`~annotated_transformer.data.byte_bpe`) learned on
  the training split only and saved in the task's state; the model then reads
  ``max_len`` *tokens*.
- Sparse attention (chapter 17): ``attention="strided"`` or ``"fixed"`` replaces
  every block's attention (``block=modern`` or ``gpt2``) by block-sparse attention
  under that pattern's union mask (:func:`~annotated_transformer.blocks.sparse_attention.sparsify_`),
  blocks of ``sparse_stride`` positions and, for "fixed", ``sparse_summary`` summary
  positions each.
- Loss: next-byte cross-entropy summed over the batch's positions.
- Validation: the loss on the first ``eval_bytes`` of the validation split in
  consecutive windows (quick, for the learning curve); test: bits per byte of the
  *whole* validation split with overlapping windows
  (:func:`evaluate_bits_per_byte`). Transformer-XL is validated and tested on
  consecutive segments with its memory instead
  (:func:`annotated_transformer.evaluation.segments.evaluate_bits_per_byte`).

Bits per byte over a whole text: the mean of −log₂ p(xₜ | context) over every byte
xₜ after the first. The model reads at most ``max_len`` bytes, so the text is scored
in overlapping windows of ``context`` bytes that advance by ``stride``: the first
window scores all its positions, each later one only the positions no window scored
before (its last ``stride``), the last window is aligned with the end of the text.
Every byte after the first is scored exactly once, with at least
``context − stride + 1`` bytes of context (all the bytes before it near the start).
``stride = context`` would be the cheapest and the worst (some bytes with one byte
of context), ``stride = 1`` the best and ``context`` times dearer. The default is
``context // 2``. (Bloem's ``former`` printed the *total* bits of a batch and called
it bits per byte, issue #38; published enwik8 numbers are means, like this one.)

Bits per byte of a BPE model: the validation text is encoded whole, the *token*
stream is scored with the same overlapping windows (so no token is ever cut by a
window: windows are made of whole tokens), and the total bits of the scored tokens
are divided by the total bytes those tokens spell: bits per byte = Σ −log₂
p(tokenₜ | context) / Σ bytes(tokenₜ). Every byte after the first token is counted
once, so the figure is comparable with the byte model's on the same text (which
counts every byte after the first). Two honest caveats: a context of ``max_len``
tokens spans several times more bytes than ``max_len`` bytes do; and the model
scores the one tokenization BPE produces, not the sum over every tokenization of the
same bytes, so its bits per byte are an upper bound on what the model itself assigns
the text.

Scores on ``enwik8_prefix`` (the first 10⁶ bytes) are not comparable with published
enwik8 results, which train on 90M bytes and score the last 5M.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.blocks.feed_forward import swiglu_width
from annotated_transformer.blocks.sparse_attention import PATTERNS, sparsify_
from annotated_transformer.data.byte_bpe import ByteBPE
from annotated_transformer.data.byte_corpora import (
    DATASETS,
    load_splits,
    random_windows,
)
from annotated_transformer.evaluation import segments
from annotated_transformer.evaluation.metrics import BitsPerByte
from annotated_transformer.evaluation.sampling import (
    check_sampling,
    decode,
    encode,
    sample,
)
from annotated_transformer.models.decoder_only import DecoderLM
from annotated_transformer.models.gpt2 import GPT2LM
from annotated_transformer.models.modern_decoder import (
    ModernDecoderLM,
    check_choices,
)
from annotated_transformer.models.transformer_xl import TransformerXLLM
from annotated_transformer.tasks.base import (
    Task,
    TrainConfig,
    check_texts,
    epoch_generator,
)
from annotated_transformer.training import distributed as dist
from annotated_transformer.training.progress import tqdm
from annotated_transformer.training.trainer import evaluating

PREFIX_NOTE = (
    "enwik8_prefix is the first 10^6 bytes of enwik8: its scores are not "
    "comparable with published enwik8 bits per byte (90M train / 5M test)"
)


@dataclass(frozen=True)
class LanguageModelConfig(TrainConfig):
    """A language-model run: the text, the window, the model
    (``make_model``'s names)."""

    dataset: str = "tinyshakespeare"  # tinyshakespeare, enwik8 or enwik8_prefix
    block: str = (
        "2017"  # "2017" (DecoderLM), "modern" (ModernDecoderLM), "gpt2" or "xl"
    )
    kv_heads: int = 0  # modern: key/value heads (0: h, multi-head; 1: multi-query)
    norm: str = "rms"  # modern: rms or layer
    positions: str = "rope"  # modern: rope, alibi, learned, sinusoidal or none
    feed_forward: str = (
        "swiglu"  # modern: swiglu (width swiglu_width(d_ff)) or relu
    )
    bias: bool = False  # modern: biases in the linear layers and LayerNorm
    batch_size: int = 32  # windows per batch
    eval_bytes: int = 65_536  # validation bytes scored at every validation
    N: int = 4
    d_model: int = 128
    d_ff: int = 512
    h: int = 4
    dropout: float = 0.0
    max_len: int = (
        128  # the context: bytes (or tokens) per window (xl: per segment)
    )
    # block="xl" (Transformer-XL) only
    mem_len: int | None = (
        None  # states kept per layer from earlier segments (None: max_len)
    )
    # GPT-2's tokens (chapter 16)
    tokens: str = (
        "bytes"  # "bytes" (256 ids) or "bpe" (byte-level BPE learned on train)
    )
    bpe_merges: int = 0  # tokens=bpe: merges learned (vocabulary 256 + merges)
    # Sparse attention (chapter 17)
    attention: str = (
        "dense"  # dense, strided or fixed (block-sparse, every head the union)
    )
    sparse_stride: int = 0  # sparse: l, the block length and stride
    sparse_summary: int = (
        0  # fixed: c, summary positions at the end of every block (1..l)
    )

    positive = (
        *TrainConfig.positive,
        *("batch_size", "eval_bytes", "N", "d_model", "d_ff", "h", "max_len"),
    )
    shares = ("dropout",)

    @property
    def model(self) -> dict[str, Any]:
        return {
            k: getattr(self, k)
            for k in ("N", "d_model", "d_ff", "h", "dropout", "max_len")
        }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset not in DATASETS:
            raise ValueError(
                f"dataset={self.dataset!r}: use one of {', '.join(DATASETS)}"
            )
        if self.block not in ("2017", "modern", "gpt2", "xl"):
            raise ValueError(f"block={self.block!r}: use 2017, modern, gpt2 or xl")
        if self.kv_heads and self.h % self.kv_heads:
            raise ValueError(
                f"kv_heads={self.kv_heads} must divide h={self.h} (0: h)"
            )
        check_choices(self.norm, self.positions, self.feed_forward)
        if self.block != "modern":
            modern = ("kv_heads", "norm", "positions", "feed_forward", "bias")
            default = {f.name: f.default for f in fields(self)}
            changed = [k for k in modern if getattr(self, k) != default[k]]
            if changed:
                raise ValueError(
                    f"block={self.block} has no {', '.join(changed)}: use "
                    "block=modern"
                )
        if self.tokens not in ("bytes", "bpe"):
            raise ValueError(f"tokens={self.tokens!r}: use bytes or bpe")
        if (self.tokens == "bpe") != (self.bpe_merges > 0):
            raise ValueError(
                f"tokens={self.tokens} with bpe_merges={self.bpe_merges}: BPE "
                "needs bpe_merges >= 1, bytes need bpe_merges=0"
            )
        self._check_sparse()
        check_xl(self)

    def _check_sparse(self) -> None:
        if self.attention not in ("dense", *PATTERNS):
            raise ValueError(
                f"attention={self.attention!r}: use dense, {', '.join(PATTERNS)}"
            )
        if self.attention == "dense":
            if self.sparse_stride or self.sparse_summary:
                raise ValueError(
                    "sparse_stride and sparse_summary need attention=strided/fixed"
                )
            return
        other_block = (
            self.block not in ("modern", "gpt2") or self.positions == "alibi"
        )
        if other_block or self.kv_heads not in (0, self.h):
            raise ValueError(
                f"attention={self.attention} needs block=modern or gpt2, "
                "kv_heads=0 and no ALiBi"
            )
        if self.sparse_stride < 1:
            raise ValueError(f"attention={self.attention} needs sparse_stride >= 1")
        if self.attention == "strided" and self.sparse_summary:
            raise ValueError(
                "sparse_summary is the fixed pattern's: use attention=fixed"
            )
        if (
            self.attention == "fixed"
            and not 1 <= self.sparse_summary <= self.sparse_stride
        ):
            raise ValueError(
                f"sparse_summary={self.sparse_summary} must lie in [1, "
                f"sparse_stride={self.sparse_stride}]"
            )


def check_xl(c: LanguageModelConfig) -> None:
    """Refuse Transformer-XL settings on another block, and runner
    options XL cannot take."""
    if c.block != "xl":
        if c.mem_len is not None:
            raise ValueError(
                f"mem_len={c.mem_len} is Transformer-XL's memory: add block=xl"
            )
        return
    if c.tokens != "bytes" or c.attention != "dense":
        raise ValueError(
            "block=xl reads bytes with dense relative attention: drop "
            "tokens/attention"
        )
    if c.activation_checkpointing or c.sharding != "none":
        raise ValueError(
            "block=xl supports neither activation_checkpointing nor sharding=fsdp "
            "(its blocks take a memory): turn them off"
        )


PRESETS = {
    # CI: 137k parameters, 150 steps; well under a minute on 2 CPU cores. Learns
    # spaces, frequent letters and the XML skeleton, not words.
    "tiny": LanguageModelConfig(
        N=2,
        d_model=64,
        d_ff=256,
        h=4,
        max_len=64,
        batch_size=16,
        steps=150,
        schedule="noam",
        lr=3e-3,
        warmup=30,
        clip_norm=1.0,
        eval_every=50,
        eval_bytes=8_192,
    ),
    # A laptop: 0.9M parameters, 3,000 steps of 4,096 bytes (~12 passes over Tiny
    # Shakespeare's training bytes); 28 minutes on one thread. Dropout 0 keeps the
    # fused attention kernel on (attention dropout leaves it): a short run gains
    # more from speed than from regularisation.
    "cpu": LanguageModelConfig(
        N=4,
        d_model=128,
        d_ff=512,
        h=4,
        max_len=128,
        batch_size=32,
        steps=3_000,
        schedule="noam",
        lr=2e-3,
        warmup=200,
        clip_norm=1.0,
        eval_every=250,
        eval_bytes=65_536,
    ),
    # One GPU, bf16: 38M parameters, 12 layers on 512-byte contexts, the shape of
    # the 12-layer character model of Al-Rfou et al. (2018); 100k steps of 16k bytes
    # (~18 passes over enwik8's 90M training bytes). Not run in this project's CI.
    "gpu": LanguageModelConfig(
        dataset="enwik8",
        N=12,
        d_model=512,
        d_ff=2_048,
        h=8,
        dropout=0.1,
        max_len=512,
        batch_size=32,
        steps=100_000,
        schedule="noam",
        lr=6e-4,
        warmup=4_000,
        clip_norm=1.0,
        eval_every=2_000,
        eval_bytes=1_000_000,
        precision="bf16",
    ),
}


# --- bits per byte over a whole text
# --------------------------------------------------------


def window_plan(n: int, context: int, stride: int) -> list[tuple[int, int]]:
    """Windows ``(start, first)`` that score each byte
    1..n-1 of an n-byte text once.

    A window reads bytes ``start .. start + L - 1`` (L = min(context, n - 1)) and
    predicts bytes ``start + 1 .. start + L``; it scores those from ``first`` on.
    """
    if n < 2:
        raise ValueError(
            f"a text of {n} byte(s) has no byte to predict; give at least 2"
        )
    if context < 1 or not 1 <= stride <= context:
        raise ValueError(
            f"need context >= 1 and 1 <= stride <= context, got {context}, {stride}"
        )
    L = min(context, n - 1)
    starts = list(range(0, n - L, stride))
    if starts[-1] != n - 1 - L:
        starts.append(n - 1 - L)  # the last window ends exactly at the last byte
    plan, scored_up_to = [], 0  # bytes 1..scored_up_to are scored
    for start in starts:
        plan.append((start, scored_up_to + 1))
        scored_up_to = start + L
    return plan


def scored_windows(
    model: DecoderLM,
    data: Tensor,
    context: int | None = None,
    stride: int | None = None,
    batch_size: int = 32,
    progress: bool = False,
) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
    """Run ``model`` over ``data`` (uint8 (n,)) in windows; yield, per batch
    of windows, ``(logits (m, 256), targets (m,), positions (m,))`` of the
    bytes those windows score.

    context defaults to the model's ``max_len``, stride to half the context.
    """
    context = context or model.max_len
    stride = stride or max(context // 2, 1)
    if context > model.max_len:
        raise ValueError(
            f"context={context} exceeds the model's max_len={model.max_len}"
        )
    plan = torch.tensor(window_plan(len(data), context, stride))  # (windows, 2)
    L = min(context, len(data) - 1)
    device = next(model.parameters()).device
    offsets = torch.arange(L + 1)
    with evaluating(model):
        for chunk in tqdm(
            plan.split(batch_size), desc="evaluate", disable=not progress
        ):
            start, first = chunk[:, 0:1], chunk[:, 1:2]  # (b, 1) each
            windows = data[start + offsets].long()  # (b, L + 1)
            positions = (
                start + 1 + offsets[:-1]
            )  # (b, L): the index of each target byte
            scored = positions >= first  # (b, L)
            logits = model(windows[:, :-1].to(device)).float()  # (b, L, 256)
            yield (
                logits[scored.to(device)],
                windows[:, 1:][scored],
                positions[scored],
            )


def evaluate_bits_per_byte(
    model: DecoderLM, data: Tensor, **windows: Any
) -> tuple[float, int]:
    """(bits per byte, bytes scored) of the whole text: mean
    −log₂ p over bytes 1..n-1.

    ``windows`` go to :func:`scored_windows` (context,
    stride, batch_size, progress).
    """
    meter = BitsPerByte()
    for logits, targets, _ in scored_windows(model, data, **windows):
        meter.update(logits, targets.to(logits.device))
    return meter.compute(), meter.count


def evaluate_token_bits_per_byte(
    model: nn.Module, ids: Tensor, token_bytes: Tensor, **windows: Any
) -> tuple[float, int, int]:
    """(bits per byte, bytes scored, tokens scored) of a token stream ``ids`` (n,).

    Σ −log₂ p(tokenₜ | context) over tokens 1..n-1, divided by Σ
    ``token_bytes[tokenₜ]`` over the same tokens (token_bytes (vocab,): the bytes
    each id spells). ``windows`` go to :func:`scored_windows`.
    """
    meter, scored_bytes = BitsPerByte(), 0
    for logits, targets, _ in scored_windows(model, ids, **windows):
        meter.update(logits, targets.to(logits.device))
        scored_bytes += int(token_bytes[targets].sum())
    return meter.nats / scored_bytes / math.log(2), scored_bytes, meter.count


def byte_bits(model: DecoderLM, data: Tensor, **windows: Any) -> Tensor:
    """−log₂ p(xₜ | context) of every byte t = 1..n-1, float64
    (n - 1,); index t - 1."""
    bits = torch.full((len(data) - 1,), math.nan, dtype=torch.float64)
    for logits, targets, positions in scored_windows(model, data, **windows):
        nats = F.cross_entropy(
            logits.double(), targets.to(logits.device), reduction="none"
        )
        bits[positions - 1] = nats.cpu() / math.log(2)
    return bits


def fixed_windows(
    data: Tensor, context: int, batch_size: int
) -> list[tuple[Tensor, Tensor]]:
    """Consecutive, non-overlapping windows of ``data`` in batches (a
    quick validation loss)."""
    n = (len(data) - 1) // context
    if n < 1:
        raise ValueError(f"{len(data)} bytes hold no window of {context} + 1 bytes")
    starts = torch.arange(n) * context
    windows = data[
        starts[:, None] + torch.arange(context + 1)
    ].long()  # (n, context + 1)
    return [(w[:, :-1], w[:, 1:]) for w in windows.split(batch_size)]


def bits_by_position(
    model: nn.Module, data: Tensor, context: int, batch_size: int = 32
) -> Tensor:
    """Mean −log₂ p of the byte at each position of consecutive
    ``context``-byte windows.

    Entry t is the mean over windows of the bits of the window's byte t + 1,
    predicted from the t + 1 bytes before it in the window (each window starts
    afresh): how the loss falls, or rises, with the position in the context. The
    model must accept ``context`` bytes.
    returns float64 (context,)
    """
    device = next(model.parameters()).device
    total, windows = torch.zeros(context, dtype=torch.float64), 0
    with evaluating(model):
        for x, y in fixed_windows(data, context, batch_size):
            logits = model(x.to(device)).float()  # (b, context, 256)
            nats = F.cross_entropy(
                logits.transpose(1, 2), y.to(device), reduction="none"
            )
            total += nats.double().sum(0).cpu()  # (context,)
            windows += len(x)
    return total / windows / math.log(2)


# --- the task
# ---------------------------------------------------------------------------------


class LanguageModel(Task):
    """Next-byte prediction with a decoder-only
    :class:`~annotated_transformer.models.decoder_only.DecoderLM`."""

    name = "lm"
    title = (
        "a byte-level language model on Tiny Shakespeare or enwik8 (decoder-only)"
    )
    Config = LanguageModelConfig
    score = ("val_bpb", "min")

    def __init__(
        self,
        config: LanguageModelConfig,
        *,
        data_dir: str | Path | None = None,
        state: dict | None = None,
    ) -> None:
        super().__init__(config, data_dir=data_dir, state=state)
        self.saved_state = state or {}
        self.xl = self.config.block == "xl"
        self.stream = segments.Memory() if self.xl else None

    @property
    def mem_len(self) -> int:
        """Transformer-XL's memory per layer (its ``mem_len``, else one
        segment, ``max_len``)."""
        c = self.config
        return c.max_len if c.mem_len is None else c.mem_len

    @cached_property
    def splits(self) -> dict[str, Tensor]:
        return load_splits(self.config.dataset, mirror=self.data_dir)

    @cached_property
    def bpe(self) -> ByteBPE | None:
        """tokens=bpe: the byte-level BPE, from the saved state or
        learned on the train split."""
        if self.config.tokens == "bytes":
            return None
        if "bpe" in self.saved_state:
            return ByteBPE.from_dict(self.saved_state["bpe"])
        return ByteBPE.learn(
            bytes(self.splits["train"].numpy()), self.config.bpe_merges
        )

    def state(self) -> dict[str, Any]:
        return {} if self.bpe is None else {"bpe": self.bpe.to_dict()}

    @property
    def vocab(self) -> int:
        return 256 if self.bpe is None else self.bpe.vocab

    @cached_property
    def token_bytes(self) -> Tensor:
        """int64 (vocab,): the bytes each token id spells (1 for every byte)."""
        return (
            torch.ones(256, dtype=torch.long)
            if self.bpe is None
            else self.bpe.token_bytes
        )

    def tokenize(self, data: Tensor) -> Tensor:
        """Bytes uint8 (n,) -> the model's ids (the bytes
        themselves, or BPE ids int64)."""
        if self.bpe is None:
            return data
        return torch.tensor(self.bpe.encode(bytes(data.numpy())), dtype=torch.long)

    @cached_property
    def train_ids(self) -> Tensor:
        return self.tokenize(self.splits["train"])

    def batches(
        self, epoch: int
    ) -> list[tuple[Tensor, Tensor]] | list[segments.Segments]:
        """Random windows of the training ids, the same for the same epoch
        (resumable); Transformer-XL: the text's consecutive segments in
        ``batch_size`` streams, from a seeded offset."""
        c, data = self.config, self.train_ids
        generator = epoch_generator(c.seed, epoch)
        if self.xl:
            if dist.world_size() > 1:
                raise ValueError(
                    "block=xl trains in one process: its streams are not sharded"
                )
            offset = int(torch.randint(c.max_len, (1,), generator=generator))
            return segments.stream_segments(data, c.batch_size, c.max_len, offset)
        n = max(1, len(data) // (c.batch_size * c.max_len))
        return [
            random_windows(data, c.batch_size, c.max_len, generator)
            for _ in range(n)
        ]

    def build_model(self) -> DecoderLM | ModernDecoderLM | TransformerXLLM:
        c = self.config
        if self.xl:
            shape = {
                k: getattr(c, k) for k in ("d_model", "h", "N", "d_ff", "dropout")
            }
            return TransformerXLLM(256, mem_len=self.mem_len, **shape)
        model = self.build_dense_model()
        if c.attention != "dense":
            sparsify_(model, c.attention, c.sparse_stride, c.sparse_summary or 1)
        return model

    def build_dense_model(self) -> DecoderLM | ModernDecoderLM | GPT2LM:
        c = self.config
        if c.block == "2017":
            return DecoderLM(vocab=self.vocab, **c.model)
        if c.block == "gpt2":
            return GPT2LM(
                self.vocab, c.d_model, c.h, c.N, c.max_len, c.d_ff, c.dropout
            )
        # SwiGLU's width keeps the parameter count of the 2017 feed-forward
        width = swiglu_width(c.d_ff) if c.feed_forward == "swiglu" else c.d_ff
        options = {
            "d_ff": width,
            "kv_heads": c.kv_heads or c.h,
            "dropout": c.dropout,
        }
        switches = {
            k: getattr(c, k) for k in ("norm", "positions", "feed_forward", "bias")
        }
        return ModernDecoderLM(
            self.vocab, c.d_model, c.h, c.N, c.max_len, **options, **switches
        )

    def loss(
        self, model: nn.Module, batch: tuple[Tensor, Tensor]
    ) -> tuple[Tensor, int]:
        """Summed next-byte cross-entropy (nats) of a batch of windows ``(x, y)``
        and its size (Transformer-XL: of a batch of segments, after the memory
        the previous batch left)."""
        if self.xl:
            return segments.segment_loss(model, batch, self.stream)
        x, y = batch  # (batch, context) each; y[:, t] = x[:, t + 1]
        device = next(model.parameters()).device
        logits = model(x.to(device))  # (batch, context, 256)
        flat = logits.float().flatten(0, 1)
        return F.cross_entropy(
            flat, y.to(device).flatten(), reduction="sum"
        ), y.numel()

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Loss per token and bits per byte on the first ``eval_bytes`` of the
        validation split (total bits / total bytes of the scored tokens; the same
        with bytes as tokens)."""
        c = self.config
        if self.xl:  # consecutive segments with the training memory
            val = self.splits["val"][: c.eval_bytes + 1]
            bpb, _ = segments.evaluate_bits_per_byte(
                model, val, c.max_len, self.mem_len
            )
            return {"val_loss": bpb * math.log(2), "val_bpb": bpb}
        val = self.tokenize(self.splits["val"][: c.eval_bytes + 1])
        windows = fixed_windows(val, c.max_len, 4 * c.batch_size)
        loss = self.mean_loss(model, windows)
        targets = torch.cat([y.flatten() for _, y in windows])
        scored_bytes = int(self.token_bytes[targets].sum())
        return {
            "val_loss": loss,
            "val_bpb": loss * len(targets) / scored_bytes / math.log(2),
        }

    def bits_per_byte(
        self,
        model: nn.Module,
        split: str,
        max_bytes: int | None = None,
        mem_len: int | None = None,
        **windows: Any,
    ) -> dict[str, Any]:
        """Bits per byte of a whole split (or its first
        ``max_bytes``), overlapping windows.

        Transformer-XL: consecutive ``max_len``-byte segments with ``mem_len``
        states of memory per layer (default: the training ``mem_len``);
        ``windows`` do not apply.
        """
        if self.xl and windows:
            raise ValueError(
                "block=xl reads segments in order: no context, stride, batch size"
            )
        if not self.xl and mem_len is not None:
            raise ValueError(
                f"mem_len={mem_len}: only a block=xl model has a memory"
            )
        data = self.splits.get(split)
        if data is None:
            raise ValueError(
                f"{self.config.dataset} has no {split} split; use one of "
                f"{', '.join(self.splits)}"
            )
        data = data[:max_bytes]
        seg_len = self.config.max_len
        mem_len = self.mem_len if mem_len is None else mem_len
        tokens: dict[str, int] = {}
        if self.xl:
            bpb, scored = segments.evaluate_bits_per_byte(
                model, data, seg_len, mem_len
            )
        elif self.bpe is None:
            bpb, scored = evaluate_bits_per_byte(model, data, **windows)
        else:
            ids = self.tokenize(data)
            bpb, scored, count = evaluate_token_bits_per_byte(
                model, ids, self.token_bytes, **windows
            )
            tokens = {"tokens_scored": count, "bytes": len(data)}
        result = {
            "split": split,
            "bits_per_byte": bpb,
            "bytes_scored": scored,
            **tokens,
        }
        if self.xl:
            result |= {"segment": seg_len, "mem_len": mem_len}
        else:
            context = windows.get("context") or model.max_len
            result |= {
                "context": context,
                "stride": windows.get("stride") or max(context // 2, 1),
            }
        if self.config.dataset == "enwik8_prefix":
            result["note"] = PREFIX_NOTE
        return result

    def test(self, model: nn.Module) -> dict[str, Any]:
        """Bits per byte of the *whole* validation split (the
        published protocol's split)."""
        return self.bits_per_byte(model, "val")

    def predict(
        self,
        model: nn.Module,
        inputs: Sequence[str],
        *,
        length: int = 256,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int = 0,
    ) -> list[str]:
        """Each prompt followed by ``length`` sampled bytes (BPE: tokens),
        decoded as UTF-8 (seeded)."""
        if self.xl:
            raise ValueError(
                "predict does not sample from block=xl models yet: use 2017/modern"
            )
        check_texts(inputs, "continue", "prompt")
        check_sampling(temperature, top_k, length)
        generator = torch.Generator(next(model.parameters()).device).manual_seed(
            seed
        )
        options = {
            "temperature": temperature,
            "top_k": top_k,
            "generator": generator,
        }
        if self.bpe is None:
            return [
                decode(sample(model, encode(p), length, **options)[0])
                for p in inputs
            ]
        out = []
        for p in inputs:
            prompt = torch.tensor([self.bpe.encode(p.encode("utf-8"))])
            ids = sample(model, prompt, length, **options)[0].tolist()
            out.append(self.bpe.decode(ids).decode("utf-8", errors="replace"))
        return out

    @classmethod
    def add_evaluate_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--split", default="val", choices=("train", "val", "test")
        )
        parser.add_argument(
            "--stride", type=int, help="window step (default: half the context)"
        )
        parser.add_argument(
            "--max-bytes", type=int, help="score only the first N bytes"
        )
        parser.add_argument(
            "--batch-size", type=int, default=32, help="windows per forward"
        )
        parser.add_argument(
            "--mem-len", type=int, help="block=xl: memory per layer (states)"
        )

    @classmethod
    def add_predict_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--length",
            type=int,
            default=256,
            help="new bytes (BPE: tokens) to sample",
        )
        parser.add_argument("--temperature", type=float, default=1.0)
        parser.add_argument(
            "--top-k", type=int, help="sample among the k likeliest bytes only"
        )
        parser.add_argument("--seed", type=int, default=0)

    def evaluate_split(
        self, model: nn.Module, args: argparse.Namespace
    ) -> dict[str, Any]:
        least = {"--batch-size": 1, "--max-bytes": 2, "--stride": 1, "--mem-len": 0}
        for option, low in least.items():
            value = getattr(args, option[2:].replace("-", "_"))
            if value is not None and value < low:
                raise ValueError(f"{option} must be >= {low}, got {value}")
        windows = {"stride": args.stride, "batch_size": args.batch_size}
        if (
            self.xl
        ):  # segments in order: a stride is refused, the batch size does not apply
            windows = {} if args.stride is None else {"stride": args.stride}
        return self.bits_per_byte(
            model, args.split, args.max_bytes, args.mem_len, **windows
        )

    def predict_options(self, args: argparse.Namespace) -> dict[str, Any]:
        keys = ("length", "temperature", "top_k", "seed")
        return {k: getattr(args, k) for k in keys}
