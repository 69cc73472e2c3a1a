"""A byte-level language model: predict each next byte of Tiny Shakespeare or
enwik8, one of 256 byte values (or a token of a byte-level BPE, ``tokens="bpe"``).

- Model: the decoder-only family named by ``block``, whose model config the
  task's config holds (:mod:`~annotated_transformer.tasks.variants`): ``"2017"``
  (:class:`~annotated_transformer.models.decoder_only.DecoderLM`), ``"modern"``
  (:class:`~annotated_transformer.models.modern_decoder.ModernDecoderLM`: RMSNorm,
  rotary positions, grouped-query attention, SwiGLU, no biases), ``"gpt2"``
  (:class:`~annotated_transformer.models.gpt2.GPT2LM`) or ``"xl"``
  (:class:`~annotated_transformer.models.transformer_xl.TransformerXLLM`, with a
  memory of ``mem_len`` states per layer). ``attention="strided"`` or ``"fixed"``
  makes every block's attention block-sparse.
- Data: a model without memory reads seeded random windows of ``max_len`` + 1
  bytes (:class:`RandomWindows`); Transformer-XL reads the text in order
  (:class:`~annotated_transformer.tasks.lm_segments.ConsecutiveSegments`).
- Loss: next-byte cross-entropy summed over the batch's positions.
- Validation: the loss on the first ``eval_bytes`` of the validation split. Test:
  bits per byte of the whole split, the mean of −log₂ p(xₜ | context) over every
  byte after the first (a mean, as published enwik8 numbers are). The model reads
  at most ``max_len`` bytes, so the text is scored in overlapping windows that
  advance by ``stride`` (half the context by default): every byte is scored once,
  with at least ``context − stride + 1`` bytes of context (:func:`window_plan`);
  Transformer-XL reads consecutive segments with its memory instead. A BPE
  model's bits are divided by the bytes its scored tokens spell, so the figure
  compares with a byte model's (an upper bound: it scores only the one
  tokenization BPE produces).

Scores on ``enwik8_prefix`` (the first 10⁶ bytes) are not comparable with
published enwik8 results, which train on 90M bytes and score the last 5M.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.data.byte_bpe import ByteBPE
from annotated_transformer.data.byte_corpora import (
    DATASETS,
    load_splits,
    random_windows,
)
from annotated_transformer.evaluation.metrics import BitsPerByte, bits_per_byte
from annotated_transformer.evaluation.sampling import (
    check_sampling,
    decode,
    encode,
    sample,
)
from annotated_transformer.evaluation.segments import Segments
from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM
from annotated_transformer.models.eval_mode import evaluating
from annotated_transformer.models.gpt2 import GPTConfig
from annotated_transformer.models.modern_decoder import ModernConfig
from annotated_transformer.models.transformer_xl import XLConfig
from annotated_transformer.tasks import variants
from annotated_transformer.tasks.base import (
    Task,
    TrainConfig,
    check_texts,
    epoch_generator,
)
from annotated_transformer.tasks.lm_segments import ConsecutiveSegments
from annotated_transformer.tasks.variants import (
    SIZES,
    VARIANTS,
    Options,
    variant_of,
    variants_with,
)
from annotated_transformer.training.progress import tqdm

PREFIX_NOTE = (
    "enwik8_prefix is the first 10^6 bytes of enwik8: its scores are not "
    "comparable with published enwik8 bits per byte (90M train / 5M test)"
)


@dataclass(frozen=True)
class LanguageModelConfig(TrainConfig):
    """A language-model run: the text, the window, and the model's config, whose
    class is the variant's (``block``, :mod:`annotated_transformer.tasks.variants`);
    set flat, by the names of :func:`~.tasks.variants.model_settings`
    (``--set block=modern --set d_model=256``)."""

    dataset: str = "tinyshakespeare"  # tinyshakespeare, enwik8 or enwik8_prefix
    batch_size: int = 32  # windows per batch
    eval_bytes: int = 65_536  # validation bytes scored at every validation
    # the model; max_len: the context, bytes (or tokens) per window (xl: per
    # segment); the vocabulary comes from the tokens
    model: DecoderConfig | ModernConfig | GPTConfig | XLConfig = field(
        default_factory=partial(DecoderConfig, max_len=128, dropout=0.0)
    )
    # "bytes" (256 ids) or "bpe" (GPT-2's byte-level BPE, learned on train)
    tokens: str = "bytes"
    bpe_merges: int = 0  # tokens=bpe: merges learned (vocabulary 256 + merges)

    positive = (
        *TrainConfig.positive,
        *("batch_size", "eval_bytes", "N", "d_model", "d_ff", "h", "max_len"),
    )
    shares = ("dropout",)

    @classmethod
    def model_types(cls) -> dict[str, Any]:
        """The variant's name, the sizes every variant has, and the options."""
        sizes = typing.get_type_hints(DecoderConfig)
        return typing.get_type_hints(Options) | {k: sizes[k] for k in SIZES}

    @staticmethod
    def model_settings(model: Any) -> dict[str, Any]:
        return variants.model_settings(model)

    @classmethod
    def model_named(cls, sizes: dict[str, Any]) -> Any:
        return variants.model_named(sizes, cls().model)

    @property
    def block(self) -> str:
        """The variant's name (tasks/variants.py's VARIANTS)."""
        return variant_of(self.model)

    @property
    def max_len(self) -> int:
        """The context: bytes (or tokens) per window (xl: per segment)."""
        return self.model.max_len

    def __post_init__(self) -> None:
        """Refuse, in one line, a setting the chosen variant cannot take."""
        super().__post_init__()
        if self.dataset not in DATASETS:
            raise ValueError(
                f"dataset={self.dataset!r}: use one of {', '.join(DATASETS)}"
            )
        if self.tokens not in ("bytes", "bpe"):
            raise ValueError(f"tokens={self.tokens!r}: use bytes or bpe")
        if (self.tokens == "bpe") != (self.bpe_merges > 0):
            raise ValueError(
                f"tokens={self.tokens} with bpe_merges={self.bpe_merges}: BPE "
                "needs bpe_merges >= 1, bytes need bpe_merges=0"
            )
        if VARIANTS[self.block].memory:
            self._check_memory()

    def _check_memory(self) -> None:
        """A model with a memory (Transformer-XL) reads bytes in order, and its
        blocks take the memory: no BPE, no activation checkpointing or FSDP."""
        if self.tokens != "bytes":
            raise ValueError(
                f"block={self.block} reads bytes in segments: drop tokens=bpe"
            )
        if self.activation_checkpointing or self.sharding != "none":
            raise ValueError(
                f"block={self.block} supports neither activation_checkpointing nor "
                "sharding=fsdp (its blocks take a memory): turn them off"
            )


PRESETS = {
    # 137k parameters, 150 steps: a check in under a minute. Learns spaces,
    # frequent letters and the XML skeleton, not words.
    "tiny": LanguageModelConfig(
        model=DecoderConfig(
            N=2, d_model=64, d_ff=256, h=4, max_len=64, dropout=0.0
        ),
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
        model=DecoderConfig(
            N=4, d_model=128, d_ff=512, h=4, max_len=128, dropout=0.0
        ),
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
        model=DecoderConfig(
            N=12, d_model=512, d_ff=2_048, h=8, max_len=512, dropout=0.1
        ),
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
            # (b, L): the index of each target byte
            positions = start + 1 + offsets[:-1]
            scored = positions >= first  # (b, L)
            logits = model(windows[:, :-1].to(device)).float()  # (b, L, 256)
            yield (
                logits[scored.to(device)],
                windows[:, 1:][scored],
                positions[scored],
            )


def windowed_bits_per_byte(
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


def windowed_token_bits_per_byte(
    model: nn.Module, ids: Tensor, token_bytes: Tensor, **windows: Any
) -> tuple[float, int, int]:
    """(bits per byte, bytes scored, tokens scored) of a token stream ``ids`` (n,).

    Σ −log₂ p(tokenₜ | context) over tokens 1..n-1, divided by Σ
    ``token_bytes[tokenₜ]`` over the same tokens (token_bytes (vocab,): the bytes
    each id spells). ``windows`` go to :func:`scored_windows`.
    """
    meter = BitsPerByte()
    for logits, targets, _ in scored_windows(model, ids, **windows):
        spelled = int(token_bytes[targets].sum())
        meter.update(logits, targets.to(logits.device), spelled)
    return meter.compute(), meter.bytes, meter.count


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
    # (n, context + 1)
    windows = data[starts[:, None] + torch.arange(context + 1)].long()
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


# --- how a model without memory reads the text
# ---------------------------------------------------------------


class RandomWindows:
    """The ``lm`` task's batches, loss and scores for a model without memory:
    each window of at most ``max_len`` tokens is read on its own.

    (A model with a memory reads consecutive segments instead:
    :class:`~annotated_transformer.tasks.lm_segments.ConsecutiveSegments`.)
    """

    stream = None  # nothing is carried from one batch to the next

    def __init__(self, task: LanguageModel) -> None:
        self.task = task

    def batches(self, epoch: int) -> list[tuple[Tensor, Tensor]]:
        """Random windows of the training ids, the same for the same epoch
        (resumable)."""
        c, data = self.task.config, self.task.train_ids
        generator = epoch_generator(c.seed, epoch)
        n = max(1, len(data) // (c.batch_size * c.max_len))
        return [
            random_windows(data, c.batch_size, c.max_len, generator)
            for _ in range(n)
        ]

    def loss(
        self, model: nn.Module, batch: tuple[Tensor, Tensor]
    ) -> tuple[Tensor, int]:
        """Summed next-byte cross-entropy (nats) of a batch of windows
        ``(x, y)``, and its size."""
        x, y = batch  # (batch, context) each; y[:, t] = x[:, t + 1]
        device = next(model.parameters()).device
        logits = model(x.to(device))  # (batch, context, 256)
        flat = logits.float().flatten(0, 1)
        return F.cross_entropy(
            flat, y.to(device).flatten(), reduction="sum"
        ), y.numel()

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Loss per token and bits per byte on the first ``eval_bytes`` of the
        validation split in consecutive windows (total bits / total bytes of the
        scored tokens; the same with bytes as tokens)."""
        task, c = self.task, self.task.config
        val = task.tokenize(task.splits["val"][: c.eval_bytes + 1])
        windows = fixed_windows(val, c.max_len, 4 * c.batch_size)
        loss = task.mean_loss(model, windows)
        targets = torch.cat([y.flatten() for _, y in windows])
        scored_bytes = int(task.token_bytes[targets].sum())
        return {
            "val_loss": loss,
            "val_bpb": bits_per_byte(loss * len(targets), scored_bytes),
        }

    def score(
        self,
        model: nn.Module,
        data: Tensor,
        mem_len: int | None = None,
        **windows: Any,
    ) -> dict[str, Any]:
        """Bits per byte of a whole text (uint8 (n,)) in overlapping windows
        (``windows``: context, stride, batch_size, as :func:`scored_windows`);
        BPE: of its token stream. A model without memory takes no ``mem_len``."""
        if mem_len is not None:
            raise ValueError(
                f"mem_len={mem_len}: only a block={variants_with('memory')} "
                "model has a memory"
            )
        task = self.task
        if task.bpe is None:
            bpb, scored = windowed_bits_per_byte(model, data, **windows)
            result = {"bits_per_byte": bpb, "bytes_scored": scored}
        else:
            bpb, scored, count = windowed_token_bits_per_byte(
                model, task.tokenize(data), task.token_bytes, **windows
            )
            result = {"bits_per_byte": bpb, "bytes_scored": scored}
            result |= {"tokens_scored": count, "bytes": len(data)}
        context = windows.get("context") or model.max_len
        stride = windows.get("stride") or max(context // 2, 1)
        return result | {"context": context, "stride": stride}


# --- the task
# ---------------------------------------------------------------------------------


class LanguageModel(Task):
    """Next-byte prediction with one of the decoder-only variants of
    :mod:`annotated_transformer.tasks.variants` (``block``).

    What depends on how the variant reads a text (batches, loss, validation, bits
    per byte) is its ``reader``'s: :class:`RandomWindows`, or
    :class:`~annotated_transformer.tasks.lm_segments.ConsecutiveSegments` for a
    model with a memory. The rest (the data, the tokens, the model, sampling) is
    the task's.
    """

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
        self.variant = VARIANTS[self.config.block]
        reader = ConsecutiveSegments if self.variant.memory else RandomWindows
        self.reader = reader(self)
        self.stream = self.reader.stream

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

    def check_data(self) -> None:
        """A window (``max_len`` tokens and the one after) must fit in the
        training text and in the validation's first ``eval_bytes``."""
        c, train = self.config, len(self.train_ids)
        if c.max_len >= train:
            raise ValueError(
                f"max_len={c.max_len} is longer than the training text ({train:,} "
                f"tokens): use max_len in [1, {train - 1}]"
            )
        scored = self.tokenize(self.splits["val"][: c.eval_bytes + 1])
        if len(scored) <= c.max_len:
            size = len(self.splits["val"])
            raise ValueError(
                f"eval_bytes={c.eval_bytes} hold no validation window of "
                f"max_len={c.max_len} tokens: use eval_bytes >= {c.max_len} "
                f"(more with tokens=bpe; the split has {size:,} bytes), or a "
                "smaller max_len"
            )

    def build_model(self) -> nn.Module:
        """The variant's model, from the config's model config and the
        vocabulary of the tokens."""
        return self.variant.model(replace(self.config.model, vocab=self.vocab))

    def batches(self, epoch: int) -> list[tuple[Tensor, Tensor]] | list[Segments]:
        """The epoch's training batches, the same for the same epoch (the
        reader's: random windows, or consecutive segments)."""
        return self.reader.batches(epoch)

    def loss(self, model: nn.Module, batch: Any) -> tuple[Tensor, int]:
        """Summed next-token cross-entropy (nats) of a batch, and its size."""
        return self.reader.loss(model, batch)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """``val_loss`` (nats per token) and ``val_bpb`` on the first
        ``eval_bytes`` of the validation split."""
        return self.reader.evaluate(model)

    def bits_per_byte(
        self,
        model: nn.Module,
        split: str,
        max_bytes: int | None = None,
        mem_len: int | None = None,
        **windows: Any,
    ) -> dict[str, Any]:
        """Bits per byte of a whole split (or its first ``max_bytes``).

        Overlapping windows (``windows``: context, stride, batch_size); a model
        with a memory: consecutive ``max_len``-byte segments with ``mem_len``
        states of memory per layer (default: the training ``mem_len``).
        """
        data = self.splits.get(split)
        if data is None:
            raise ValueError(
                f"{self.config.dataset} has no {split} split; use one of "
                f"{', '.join(self.splits)}"
            )
        scores = self.reader.score(model, data[:max_bytes], mem_len, **windows)
        result = {"split": split, **scores}
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
        if not self.variant.samples:
            raise ValueError(
                f"predict does not sample from block={self.config.block} models "
                f"yet: use block={variants_with('samples')}"
            )
        check_texts(inputs, "continue", "prompt")
        check_sampling(temperature, top_k, length)
        device = next(model.parameters()).device
        generator = torch.Generator(device).manual_seed(seed)
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
