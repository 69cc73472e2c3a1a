"""Sentiment classification of IMDb reviews with an
encoder-only Transformer (Part V).

- Tokens: lower-cased words (``imdb.tokenize``), or with ``tokenizer="bpe"`` byte
  pairs learned from those words (chapter 03's
  :class:`~annotated_transformer.data.bpe.BPE`): a rare word is then spelled in
  pieces instead of becoming ``<unk>``. Reviews are cut to ``max_len`` tokens: their
  first ones, or with ``tail`` their first and last ones.
- Splits: ``val_size`` validation reviews are a seeded draw from the 25,000
  training reviews; tokenizer and vocabulary see the remaining training reviews
  only; the test set is IMDb's.
- Model: :class:`~annotated_transformer.models.encoder_only.EncoderClassifier`
  (embed, N post-norm blocks, mean over the real tokens, a linear layer).
  ``attn_dropout`` is separate from ``dropout`` because any value > 0 takes
  ``scaled_dot_product_attention`` off its fused CPU kernel (a training step at
  length 256 was about 2.9× slower).
- Loss: cross-entropy summed over the batch's reviews; metric: accuracy.
- Pretrained start (``init``): a finished ``mlm`` run
  (:mod:`~annotated_transformer.tasks.mlm`) of the same sizes, tokenizer and
  validation split gives its vocabulary (with ``<mask>``), embeddings, positions and
  blocks; only the output layer starts from random weights. ``init`` names the
  run's folder (``runs/NAME``) or its record with weights (``results/NAME``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.data import imdb
from annotated_transformer.data.batching import bucket_batches, collate
from annotated_transformer.data.bpe import BPE
from annotated_transformer.data.vocab import MASK, SPECIALS, Vocab
from annotated_transformer.evaluation import metrics
from annotated_transformer.evaluation.coverage import warn_beyond_data
from annotated_transformer.models.encoder_only import (
    EncoderClassifier,
    EncoderConfig,
    load_encoder,
)
from annotated_transformer.models.eval_mode import evaluating
from annotated_transformer.tasks.base import (
    Task,
    TrainConfig,
    check_texts,
    epoch_generator,
    flat_settings,
    run_folder,
    run_path,
)
from annotated_transformer.training.checkpoints import read_checkpoint
from annotated_transformer.training.published import (
    RecordError,
    is_record,
    read_weights,
)

LABELS = ("negative", "positive")  # label 0, label 1 (imdb.load_imdb)


@dataclass(frozen=True)
class ReviewsConfig(TrainConfig):
    """The IMDb reviews and the encoder: data and tokens, the model
    (``make_model``'s names).

    Shared by classification and masked-LM pretraining
    (:mod:`~annotated_transformer.tasks.mlm`): the same fields give the same split,
    tokens and encoder in both.
    """

    # "word": lower-cased words; "bpe": byte pairs of those words
    tokenizer: str = "word"
    vocab_size: int = 20_000  # most frequent training tokens, specials included
    # > 0: a longer review keeps its first max_len - tail and last tail tokens
    tail: int = 0
    # validation reviews carved out of the 25,000 training reviews
    val_size: int = 2_500
    # use only this many training reviews (tiny runs)
    train_subset: int | None = None
    # evaluate on this many test reviews (None: all 25,000)
    test_subset: int | None = None
    max_tokens: int = 8_192  # padded tokens per batch (batch size × longest review)
    # the encoder: its sizes, set flat (--set d_model=256); the vocabulary, the
    # classes and the padding id come from the data; reviews are cut to its
    # max_len tokens; cls: pool at a [CLS] vector; window > 0: the first block
    # attends within ±window tokens (chapter 16)
    model: EncoderConfig = field(default_factory=EncoderConfig)
    # a finished mlm run's folder, or its record with weights, that starts this run
    init: str = ""

    positive = (
        *TrainConfig.positive,
        *("vocab_size", "max_len", "val_size", "train_subset", "test_subset"),
        *("max_tokens",),
        *("N", "d_model", "d_ff", "h"),
    )
    shares = ("dropout", "attn_dropout")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tokenizer not in ("word", "bpe"):
            raise ValueError(f"tokenizer={self.tokenizer!r}: use word or bpe")
        max_len = self.model.max_len
        if not 0 <= self.tail < max_len:
            raise ValueError(f"tail={self.tail} must lie in [0, max_len={max_len})")
        if self.train_subset is not None and self.val_size >= self.train_subset:
            raise ValueError(
                f"val_size={self.val_size} validation reviews are taken out of "
                f"train_subset={self.train_subset}, leaving none to train on: use "
                f"train_subset >= {self.val_size + 1}, or val_size in [1, "
                f"{max(self.train_subset - 1, 1)}]"
            )
        if self.init:  # one name for the run, at the command line and in a chapter
            object.__setattr__(self, "init", run_path(self.init))


# What must agree between a pretrained mlm run and the classifier that starts
# from it: the encoder's shapes, and the data fields that make the same
# vocabulary and validation reviews.
SHARED = ("tokenizer", "vocab_size", "val_size", "train_subset", "seed")
SHAPES = ("N", "d_model", "d_ff", "h", "max_len", "cls", "window")


@dataclass(frozen=True)
class ClassificationConfig(ReviewsConfig):
    """A classification run; ``init``: a finished ``mlm`` run's folder, or its
    record with weights, to start from (its vocabulary, embeddings and encoder
    blocks; the output layer starts afresh); ``word_dropout``: the share of
    training tokens hidden (``<mask>`` after pretraining, else ``<unk>``), drawn
    anew each epoch, so that no single word decides a review."""

    word_dropout: float = 0.0

    # How many test reviews score the finished model: another value
    # re-tests a finished run.
    test_only: ClassVar[tuple[str, ...]] = ("test_subset",)
    shares = (*ReviewsConfig.shares, "word_dropout")


PRESETS = {
    # 1,200 reviews cut to 64 tokens, a one-block model: a check in seconds.
    "tiny": ClassificationConfig(
        vocab_size=5_000,
        val_size=300,
        train_subset=1_500,
        test_subset=500,
        model=EncoderConfig(N=1, d_model=32, d_ff=128, h=2, max_len=64),
        steps=40,
        max_tokens=2_048,
        optimizer="adamw",
        schedule="linear",
        lr=5e-3,
        weight_decay=0.01,
        warmup=5,
        clip_norm=1.0,
        eval_every=20,
    ),
    # A laptop: 8.5 minutes of training on one thread; test accuracy 88%. Narrow and
    # shallow, whole reviews (max_len 512 cuts only the longest ~8%), about two
    # epochs, then the learning rate is 0: at max_len 256 and four epochs the model
    # memorised the training reviews. precision auto: bf16 where the CPU runs it
    # faster (e.g. AVX-512 with bf16), else fp32 (on an AVX2 CPU, bf16 was
    # slower).
    "cpu": ClassificationConfig(
        vocab_size=20_000,
        model=EncoderConfig(
            N=2, d_model=64, d_ff=256, h=4, dropout=0.2, max_len=512
        ),
        steps=1_300,
        max_tokens=8_192,
        optimizer="adamw",
        schedule="linear",
        lr=2e-3,
        weight_decay=0.05,
        warmup=100,
        clip_norm=1.0,
        eval_every=325,
        precision="auto",
    ),
    # One GPU: Bloem's depth-6 model at full length, ~10 epochs (an
    # epoch is ~4.8M tokens).
    "gpu": ClassificationConfig(
        vocab_size=30_000,
        model=EncoderConfig(N=6, d_model=256, d_ff=1_024, h=8, max_len=512),
        steps=1_500,
        max_tokens=32_768,
        optimizer="adamw",
        schedule="linear",
        lr=5e-4,
        weight_decay=0.01,
        warmup=150,
        clip_norm=1.0,
        eval_every=250,
        precision="bf16",
    ),
}


def check_pretrained(saved: dict[str, Any], config: ReviewsConfig) -> None:
    """Refuse, in one line, a pretrained run (a checkpoint's config) that
    ``config`` cannot start from: another task, other encoder shapes, or another
    vocabulary or validation split."""
    if saved.get("task") != "mlm":
        raise ValueError(
            f"init={config.init}: a {saved.get('task')!r} run, not mlm; pretrain "
            "one"
        )
    # a run saved before a field existed had that field's default
    here = flat_settings(config)
    have = flat_settings(ReviewsConfig()) | saved["config"]
    differ = [
        f"{k}={have[k]} there, {here[k]} here"
        for k in (*SHAPES, *SHARED)
        if have[k] != here[k]
    ]
    if differ:
        raise ValueError(
            f"init={config.init} does not fit: {'; '.join(differ)}; set them equal"
        )


def pretrained_run(init: str) -> dict[str, Any]:
    """The weights and config (with its vocabulary) that ``init`` names: a
    finished run's folder (its ``final.pt``) or the run's record with weights
    (``results/NAME``), read as a checkpoint is (``config``, ``model``)."""
    folder = run_folder(init)
    if is_record(folder):
        try:
            return read_weights(folder)
        except RecordError as error:
            raise ValueError(f"init={init}: {error}") from None
    final = folder / "final.pt"
    if not final.is_file():
        raise ValueError(
            f"init={init}: no final.pt there; give a finished mlm run's folder "
            "(runs/NAME) or its record with weights (results/NAME)"
        )
    return read_checkpoint(final)


class ReviewTokenizer:
    """Review text -> tokens: lower-cased words
    (``imdb.tokenize``), or byte pairs of them.

    Byte pairs are learned from the training reviews' words joined by single spaces,
    so both tokenizers see the same text and differ only in their units.
    """

    def __init__(self, bpe: BPE | None = None) -> None:
        self.bpe = bpe

    @classmethod
    def learn(
        cls, kind: str, train_texts: Sequence[str], vocab_size: int
    ) -> ReviewTokenizer:
        """``kind`` "word", or "bpe" with up to ``vocab_size`` merges (the
        vocabulary then keeps the ``vocab_size`` most frequent tokens, as it does
        for words)."""
        if kind == "word":
            return cls()
        if kind != "bpe":
            raise ValueError(f"tokenizer={kind!r}: use word or bpe")
        words = (" ".join(imdb.tokenize(text)) for text in train_texts)
        return cls(BPE.learn(words, num_merges=vocab_size))

    def __call__(self, text: str) -> list[str]:
        words = imdb.tokenize(text)
        return (
            self.bpe.encode(" ".join(words))
            if self.bpe is not None and words
            else words
        )


@dataclass
class Reviews:
    """One split, tokenized: raw ``texts``, token ``ids`` (cut
    to max_len), ``labels``."""

    texts: list[str]
    ids: list[list[int]]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class ReviewBatch:
    """tokens: (batch, len) ids padded with <pad>; labels: (batch,) 0 or 1."""

    tokens: Tensor
    labels: Tensor

    def to(self, device: torch.device | str) -> ReviewBatch:
        return ReviewBatch(self.tokens.to(device), self.labels.to(device))

    def __len__(self) -> int:
        return self.labels.numel()

    def hide(
        self, p: float, hidden: int, pad: int, generator: torch.Generator
    ) -> ReviewBatch:
        """The batch with each real token replaced by ``hidden``
        with probability ``p``."""
        chosen = (torch.rand(self.tokens.shape, generator=generator) < p) & (
            self.tokens != pad
        )
        return ReviewBatch(self.tokens.masked_fill(chosen, hidden), self.labels)


def review_batches(
    data: Reviews, max_tokens: int, pad: int, *, seed: int = 0, epoch: int = 0
) -> Iterator[ReviewBatch]:
    """Batches of similar-length reviews
    (``batching.bucket_batches``), in a seeded order."""
    for index in bucket_batches(
        [len(ids) for ids in data.ids], max_tokens, seed=seed, epoch=epoch
    ):
        tokens = collate([data.ids[i] for i in index], pad=pad)
        yield ReviewBatch(tokens, torch.tensor([data.labels[i] for i in index]))


def _subset(
    texts: list[str], labels: list[int], n: int | None, seed: int
) -> imdb.Reviews:
    """A seeded random ``n`` of the reviews (all of them for None),
    in their original order."""
    if n is None or n >= len(texts):
        return texts, labels
    keep = sorted(
        torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed))[
            :n
        ]
    )
    return [texts[i] for i in keep], [labels[i] for i in keep]


class ReviewsTask(Task):
    """What every IMDb task shares: the splits, the tokenizer and vocabulary learned
    from the training reviews (or restored from ``state``, or from the ``init``
    run's), and the encoded reviews. A new run with ``init`` keeps that run's
    weights in ``pretrained``."""

    specials = SPECIALS  # the vocabulary's reserved tokens

    def __init__(
        self,
        config: ReviewsConfig,
        *,
        data_dir: str | Path | None = None,
        state: dict | None = None,
    ) -> None:
        # the init run's weights, new runs only
        self.pretrained: dict[str, Tensor] | None = None
        if state is None and config.init:  # the pretrained run's vocabulary
            saved = pretrained_run(config.init)
            check_pretrained(saved["config"], config)
            state, self.pretrained = saved["config"]["state"], saved["model"]
        super().__init__(config, data_dir=data_dir, state=state)
        if state is None:  # tokenizer and vocabulary from the training reviews only
            texts = self.raw["train"][0]
            self.tokenizer = ReviewTokenizer.learn(
                config.tokenizer, texts, config.vocab_size
            )
            tokens = [self.tokenizer(text) for text in texts]
            self.vocab = imdb.build_vocab(tokens, config.vocab_size, self.specials)
            self._encoded = {
                "train": self._encode(texts, self.raw["train"][1], tokens)
            }
        else:
            bpe = BPE.from_dict(state["bpe"]) if state["bpe"] else None
            self.tokenizer, self.vocab, self._encoded = (
                ReviewTokenizer(bpe),
                Vocab(state["vocab"]),
                {},
            )

    def state(self) -> dict[str, Any]:
        bpe = self.tokenizer.bpe
        return {
            "vocab": self.vocab.itos,
            "bpe": None if bpe is None else bpe.to_dict(),
        }

    # --- data
    @cached_property
    def raw(self) -> dict[str, imdb.Reviews]:
        """Texts and labels of train, val (drawn from train) and test."""
        c = self.config
        texts, labels = _subset(
            *imdb.load_imdb("train", mirror=self.data_dir), c.train_subset, c.seed
        )
        train, val = imdb.train_val_split(texts, labels, c.val_size, c.seed)
        test = _subset(
            *imdb.load_imdb("test", mirror=self.data_dir), c.test_subset, c.seed
        )
        return {"train": train, "val": val, "test": test}

    def _encode(
        self, texts: list[str], labels: list[int], tokens: list[list[str]]
    ) -> Reviews:
        """A review with no words at all becomes a single <unk>."""
        c = self.config
        ids = imdb.encode(
            [t or ["<unk>"] for t in tokens], self.vocab, c.model.max_len, c.tail
        )
        return Reviews(texts, ids, labels)

    def reviews(self, split: str) -> Reviews:
        """A split, tokenized and encoded (once)."""
        if split not in self._encoded:
            texts, labels = self.raw[split]
            self._encoded[split] = self._encode(
                texts, labels, [self.tokenizer(t) for t in texts]
            )
        return self._encoded[split]


class Classification(ReviewsTask):
    """IMDb sentiment with an
    :class:`~annotated_transformer.models.encoder_only.EncoderClassifier`."""

    name = "classify"
    title = "IMDb sentiment classification (an encoder-only classifier)"
    Config = ClassificationConfig
    score = ("val_accuracy", "max")

    def batches(self, epoch: int) -> Iterator[ReviewBatch]:
        c, pad = self.config, self.vocab["<pad>"]
        batches = review_batches(
            self.reviews("train"), c.max_tokens, pad, seed=c.seed, epoch=epoch
        )
        if not c.word_dropout:
            return batches
        hidden = self.vocab[MASK if MASK in self.vocab else "<unk>"]
        draws = epoch_generator(c.seed, epoch)
        return (b.hide(c.word_dropout, hidden, pad, draws) for b in batches)

    # --- model and loss
    def build_model(self) -> EncoderClassifier:
        """The classifier; a new run with ``init`` starts from
        the pretrained encoder."""
        vocab, pad = len(self.vocab), self.vocab["<pad>"]
        config = replace(
            self.config.model, vocab=vocab, n_classes=len(LABELS), pad=pad
        )
        model = EncoderClassifier(config)
        if self.pretrained is not None:
            load_encoder(model, self.pretrained)
        return model

    def loss(self, model: nn.Module, batch: ReviewBatch) -> tuple[Tensor, int]:
        """Cross-entropy summed over the batch's reviews, and their count."""
        logits = model(batch.tokens).float()  # fp32 logits under bf16
        return F.cross_entropy(logits, batch.labels, reduction="sum"), len(batch)

    # --- metrics
    def probabilities(
        self, model: nn.Module, data: Reviews, max_tokens: int = 16_384
    ) -> Tensor:
        """Class probabilities (n, classes) of every review, in ``data``'s order."""
        device = next(model.parameters()).device
        probs = torch.empty(len(data), len(LABELS))
        lengths = [len(ids) for ids in data.ids]
        with evaluating(model):
            for index in bucket_batches(lengths, max(max_tokens, max(lengths))):
                tokens = collate(
                    [data.ids[i] for i in index], pad=self.vocab["<pad>"]
                )
                probs[index] = (
                    model(tokens.to(device)).float().softmax(dim=-1).cpu()
                )
        return probs

    def accuracy(self, model: nn.Module, split: str) -> dict[str, float]:
        """Accuracy and mean cross-entropy (nats per review) on a split."""
        data = self.reviews(split)
        probs = self.probabilities(model, data)
        labels = torch.tensor(data.labels)
        nll = -probs[torch.arange(len(labels)), labels].clamp_min(1e-12).log()
        return {
            "accuracy": metrics.accuracy(probs.argmax(dim=-1), labels),
            "loss": nll.mean().item(),
            "reviews": len(labels),
        }

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        result = self.accuracy(model, "val")
        return {"val_loss": result["loss"], "val_accuracy": result["accuracy"]}

    def test(self, model: nn.Module) -> dict[str, Any]:
        result = self.accuracy(model, "test")
        return {"split": "test", **result}

    def predict(self, model: nn.Module, inputs: Sequence[str]) -> list[str]:
        """``label<TAB>probability`` of each review."""
        check_texts(inputs, "classify", "review")
        out = []
        for i, text in enumerate(inputs, 1):
            tokens = self.tokenizer(text)
            if not tokens:
                raise ValueError(
                    f"review {i} has no words (the model reads letters, ! and ?): "
                    "give some words to classify"
                )
            warn_beyond_data(
                tokens,
                self.vocab,
                item=f"review {i}",
                unit="words",
                data="the English film reviews it learned from",
            )
            ids = imdb.encode(
                [tokens], self.vocab, self.config.model.max_len, self.config.tail
            )
            probs = self.probabilities(model, Reviews([text], ids, [0]))[0]
            label = int(probs.argmax())
            out.append(f"{LABELS[label]}\t{float(probs[label]):.3f}")
        return out
