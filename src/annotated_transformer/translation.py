"""German→English translation on Multi30k: the glue between data, model, training and decoding.

- :func:`load_parallel` / :func:`encode_pairs`: token lists of a split, then id pairs;
- :class:`EpochBatches`: epoch → this rank's length-bucketed batches, shuffled per epoch, seeded;
- :func:`build_model`, :class:`Translator` (sentences in, sentences out, greedy or beam);
- :func:`score`: sacreBLEU (detokenized, cased), tokenized lower-cased BLEU and chrF;
- :func:`warmup_cosine`: linear warm-up, then cosine decay of the learning rate;
- :func:`average_checkpoints`: the mean of several checkpoints' weights (Vaswani et al. 2017,
  section 6.1: "averaging the last 5 checkpoints").
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from annotated_transformer import metrics, multi30k
from annotated_transformer.batching import bucket_batches, collate, shard_batches
from annotated_transformer.checkpoint import CheckpointError, read_checkpoint
from annotated_transformer.decoding import beam_search, greedy_decode
from annotated_transformer.masks import padding_mask
from annotated_transformer.model import EncoderDecoder, make_model
from annotated_transformer.training import Batch, LossFn
from annotated_transformer.vocab import Vocab

Pair = tuple[list[int], list[int]]  # (source ids, target ids), without <s> and </s>


@dataclass
class Parallel:
    """A tokenized split: ``src``/``tgt`` token lists and the raw English references."""

    src: list[list[str]]
    tgt: list[list[str]]
    tgt_raw: list[str]


def load_parallel(
    split: str, *, lower: bool = False, limit: int | None = None, mirror: str | Path | None = None
) -> Parallel:
    """The first ``limit`` pairs (all when None) of a Multi30k split, spaCy-tokenized."""
    de, en = multi30k.load_split(split, mirror=mirror)
    de, en = de[:limit], en[:limit]
    src, tgt = multi30k.tokenize(de, "de", lower=lower), multi30k.tokenize(en, "en", lower=lower)
    return Parallel(src, tgt, en)


def encode_pairs(data: Parallel, src_vocab: Vocab, tgt_vocab: Vocab) -> list[Pair]:
    """Token lists → id lists (unknown tokens → ``<unk>``), one pair per sentence."""
    return [
        (src_vocab.encode(s), tgt_vocab.encode(t)) for s, t in zip(data.src, data.tgt, strict=True)
    ]


def make_batch(
    pairs: Sequence[Pair], index: Sequence[int], vocab: Vocab, pad_to: int | None = None
) -> Batch:
    """The pairs ``index`` as a padded ``Batch``: ``<s> ids </s>`` on both sides.

    pad_to: pad (and cut) every sentence to this length, as the original did; None pads to
    the batch's longest sentence. Both vocabularies share the special ids (``vocab.SPECIALS``).
    """
    pad, bos, eos = vocab.stoi["<pad>"], vocab.stoi["<s>"], vocab.stoi["</s>"]
    src = collate([pairs[i][0] for i in index], pad, bos, eos, pad_to)
    tgt = collate([pairs[i][1] for i in index], pad, bos, eos, pad_to)
    return Batch(src, tgt, pad)


def pair_lengths(pairs: Sequence[Pair]) -> list[tuple[int, int]]:
    """(source, target) lengths as padded: with ``<s>`` and ``</s>``."""
    return [(len(s) + 2, len(t) + 2) for s, t in pairs]


class EpochBatches:
    """``epoch -> Batch iterator``: this rank's length-bucketed batches of that epoch.

    The batches of an epoch depend only on (seed, epoch): every run and every rank computes
    the same global list; rank r of R takes every R-th batch (``shard_batches``), and the list
    is cut to a multiple of ``R × multiple`` so that optimiser steps (``multiple``
    micro-batches each) never straddle two epochs.
    """

    def __init__(
        self,
        pairs: Sequence[Pair],
        vocab: Vocab,
        max_tokens: int,
        *,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        multiple: int = 1,
    ) -> None:
        self.pairs, self.vocab, self.max_tokens = pairs, vocab, max_tokens
        self.lengths = pair_lengths(pairs)
        self.seed, self.rank, self.world_size, self.multiple = seed, rank, world_size, multiple

    def indices(self, epoch: int) -> list[list[int]]:
        batches = bucket_batches(self.lengths, self.max_tokens, seed=self.seed, epoch=epoch)
        keep = len(batches) - len(batches) % (self.world_size * self.multiple)
        return shard_batches(batches[:keep], self.rank, self.world_size)

    def __len__(self) -> int:
        """Batches per epoch for this rank (the same every epoch: the sort fixes the cuts)."""
        return len(self.indices(0))

    def __call__(self, epoch: int) -> Iterator[Batch]:
        for index in self.indices(epoch):
            yield make_batch(self.pairs, index, self.vocab)


def build_model(config: dict[str, Any], src_vocab: int, tgt_vocab: int) -> EncoderDecoder:
    """``make_model`` with the architecture fields of a preset (layers, d_model, d_ff, ...)."""
    return make_model(
        src_vocab, tgt_vocab, N=config["layers"], d_model=config["d_model"],
        d_ff=config["d_ff"], h=config["heads"], dropout=config["dropout"],
        max_len=config["max_positions"],
    )  # fmt: skip


def validation_loss(
    model: nn.Module, batches: Sequence[Batch], loss_fn: LossFn, precision: str = "fp32"
) -> float:
    """Loss per target token over ``batches`` in eval mode, without autograd."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total, tokens = 0.0, 0
    with torch.inference_mode(), _autocast(device, precision):
        for batch in batches:
            loss_sum, n = loss_fn(model, batch.to(device))
            total, tokens = total + loss_sum.item(), tokens + int(n)
    model.train(was_training)
    return total / max(tokens, 1)


def bf16_is_fast(device: torch.device) -> bool:
    """Does bf16 autocast pay off here? On CUDA: bf16 support. On a CPU: a quick race of a
    (256 × 512) @ (512 × 512) matmul in bf16 against fp32 (CPUs without AVX-512-BF16/AMX
    emulate bf16 matmuls, tens of times slower than fp32)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    a, b = torch.randn(256, 512), torch.randn(512, 512)
    times = {}
    for dtype in (torch.float32, torch.bfloat16):
        x, y = a.to(dtype), b.to(dtype)
        x @ y  # warm-up
        start = time.perf_counter()
        for _ in range(3):
            x @ y
        times[dtype] = time.perf_counter() - start
    return times[torch.bfloat16] < times[torch.float32]


def _autocast(device: torch.device, precision: str) -> torch.autocast:
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


class Translator:
    """Sentences in, sentences out: tokenize, encode, decode (greedy or beam), detokenize.

    Decodes in batches of similar-length sentences; the output order is the input order.
    ``max_positions``: the model's positional table; sources and outputs must fit in it.
    """

    def __init__(
        self,
        model: EncoderDecoder,
        src_vocab: Vocab,
        tgt_vocab: Vocab,
        *,
        lower: bool = False,
        max_positions: int = 5000,
        precision: str = "fp32",
    ) -> None:
        self.model, self.src_vocab, self.tgt_vocab = model, src_vocab, tgt_vocab
        self.lower, self.max_positions, self.precision = lower, max_positions, precision

    def tokenize(self, sentences: Sequence[str]) -> list[list[str]]:
        """German token lists; raises ValueError for an empty or too long sentence."""
        tokens = multi30k.tokenize(sentences, "de", lower=self.lower)
        for i, sentence in enumerate(tokens, 1):
            if not sentence:
                raise ValueError(f"sentence {i} is empty: give one German sentence per line")
            if len(sentence) + 2 > self.max_positions:
                raise ValueError(
                    f"sentence {i} has {len(sentence)} tokens but the model has only "
                    f"{self.max_positions} positions (<s> and </s> included): split it"
                )
        return tokens

    def unknown(self, tokens: Sequence[Sequence[str]]) -> list[str]:
        """The distinct tokens the source vocabulary lacks (they are read as ``<unk>``)."""
        return sorted({t for sentence in tokens for t in sentence if t not in self.src_vocab})

    def translate_tokens(
        self, tokens: Sequence[Sequence[str]], beam: int = 1, batch_size: int = 100
    ) -> list[list[str]]:
        """German token lists → English token lists (``beam`` 1: greedy decoding)."""
        v = self.src_vocab
        pad, bos, eos = v.stoi["<pad>"], v.stoi["<s>"], v.stoi["</s>"]
        device = next(self.model.parameters()).device
        order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]))
        out: list[list[str]] = [[] for _ in tokens]
        for begin in range(0, len(order), batch_size):
            index = order[begin : begin + batch_size]
            src = collate([v.encode(tokens[i]) for i in index], pad, bos, eos).to(device)
            src_mask = padding_mask(src, pad)  # (batch, 1, src_len)
            max_len = min(self.max_positions, src.size(1) + 50)  # room for <s> + the output
            with _autocast(device, self.precision):
                if beam > 1:
                    ys = beam_search(self.model, src, src_mask, max_len, bos, eos, beam)
                else:
                    ys = greedy_decode(self.model, src, src_mask, max_len, bos, eos)
            for i, row in zip(index, ys.tolist(), strict=True):
                row = row[1:]  # drop <s>
                out[i] = self.tgt_vocab.decode(row[: row.index(eos)] if eos in row else row)
        return out

    def translate(self, sentences: Sequence[str], beam: int = 1) -> list[str]:
        """German sentences → detokenized English sentences."""
        tokens = self.translate_tokens(self.tokenize(sentences), beam)
        return [multi30k.detokenize(t) for t in tokens]


def score(hypotheses: Sequence[Sequence[str]], data: Parallel) -> dict[str, Any]:
    """Scores of English token lists against a split's references, as plain data.

    ``bleu``: sacreBLEU on detokenized, cased text (with its signature); ``tokenized_bleu``:
    lower-cased BLEU of spaCy tokens, as Multi30k tutorials report; ``chrf``.
    """
    detok = [multi30k.detokenize(h) for h in hypotheses]
    # sacreBLEU warns that tokenized input "may hurt your score": tokenized_bleu means it.
    logging.getLogger("sacrebleu").setLevel(logging.ERROR)
    results = {
        "bleu": metrics.bleu(detok, data.tgt_raw),
        "tokenized_bleu": metrics.tokenized_bleu(hypotheses, data.tgt),
        "chrf": metrics.chrf(detok, data.tgt_raw),
    }
    out: dict[str, Any] = {"sentences": len(hypotheses)}
    for name, s in results.items():
        out[name] = round(s.score, 2)
        out[f"{name}_signature"] = s.signature
    return out


def warmup_cosine(optimizer: torch.optim.Optimizer, warmup: int, total: int) -> LambdaLR:
    """Rate × (step / warmup) for ``warmup`` steps, then a cosine down to 0 at ``total``.

    Build the optimiser with ``lr`` = the peak rate; call ``step()`` once per optimiser step.
    """
    if not 0 < warmup < total:
        raise ValueError(f"need 0 < warmup ({warmup}) < total steps ({total})")

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min((step - warmup) / (total - warmup), 1.0)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)


def average_checkpoints(paths: Sequence[str | Path]) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Element-wise mean of the model weights in ``paths``; returns (config, state_dict).

    The checkpoints must come from one run (same config, hence the same vocabularies and
    shapes); the mean is taken in float64 and cast back to each tensor's dtype.
    """
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint path")
    first = read_checkpoint(paths[0])
    config, total = first["config"], {k: v.double() for k, v in first["model"].items()}
    for path in paths[1:]:
        state = read_checkpoint(path)
        if state["config"] != config or state["model"].keys() != total.keys():
            raise CheckpointError(
                f"{path} comes from a different run than {paths[0]} (config or weights "
                "differ): average only checkpoints of one training run"
            )
        for key, value in state["model"].items():
            total[key] += value.double()
    dtypes = {k: v.dtype for k, v in first["model"].items()}
    return config, {k: (v / len(paths)).to(dtypes[k]) for k, v in total.items()}


def load_translator(
    paths: Sequence[str | Path], device: torch.device | str = "cpu", precision: str = "fp32"
) -> Translator:
    """A ``Translator`` from one checkpoint written by ``translate train``, or the average of
    several (``average_checkpoints``). The checkpoint's config holds the preset and both
    vocabularies, so nothing else is needed."""
    if len(paths) == 1:
        state = read_checkpoint(paths[0])
        config, weights = state["config"], state["model"]
    else:
        config, weights = average_checkpoints(paths)
    if not {"preset", "src_itos", "tgt_itos"} <= config.keys():
        raise CheckpointError(
            f"{paths[0]} is a checkpoint but not of a translation model (its config lacks the "
            "preset and vocabularies): pass one written by `translate train`"
        )
    src_vocab, tgt_vocab = Vocab(config["src_itos"]), Vocab(config["tgt_itos"])
    preset = config["preset"]
    model = build_model(preset, len(src_vocab), len(tgt_vocab))
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise CheckpointError(
            f"{paths[0]}: its weights do not fit its own config ({str(err)[:200]})"
        ) from err
    model.to(device).eval()
    return Translator(
        model, src_vocab, tgt_vocab, lower=preset["lower"],
        max_positions=preset["max_positions"], precision=precision,
    )  # fmt: skip
