"""Sentiment classification of IMDb reviews with an encoder-only Transformer (Part V).

    python -m annotated_transformer.classify train --preset cpu --out runs/imdb
    python -m annotated_transformer.classify evaluate --checkpoint runs/imdb/checkpoint.pt
    python -m annotated_transformer.classify predict --checkpoint runs/imdb/checkpoint.pt "..."

``train`` builds the vocabulary from the training reviews (minus a validation set carved out
of them), trains an :class:`~annotated_transformer.model.EncoderClassifier` with the book's
:class:`~annotated_transformer.training.Trainer`, evaluates on the validation set every
``eval_every`` steps and on the test set at the end, and writes to ``--out``:
``checkpoint.pt`` (atomic; model, optimiser, data position, config and vocabulary),
``history.csv`` (one row per step) and ``metrics.json``. ``--resume`` continues an
interrupted run exactly where its last checkpoint stopped.

Presets are :class:`ClassifierConfig` values in :data:`PRESETS`: ``tiny`` (CI, a minute),
``cpu`` (minutes on a laptop's CPU) and ``gpu``. All of them set ``attn_dropout=0``: with
dropout on the attention weights, ``scaled_dot_product_attention`` leaves its fused CPU
kernel and a training step at length 256 is about 2.9× slower; dropout stays on everywhere
else (embeddings, residual branches, feed-forward).

Tokens are lower-cased words (``imdb.tokenize``), or, with ``tokenizer="bpe"``, byte pairs
learned from those words (chapter 06's :class:`~annotated_transformer.bpe.BPE`): a rare word
is then spelled in pieces instead of becoming ``<unk>``. ``ensure_run`` is what chapter 13
calls: it reuses a finished command-line run instead of training again.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import shutil
import sys
import tarfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from annotated_transformer import imdb
from annotated_transformer.batching import bucket_batches, collate
from annotated_transformer.bpe import BPE
from annotated_transformer.checkpoint import load_checkpoint, read_checkpoint
from annotated_transformer.model import EncoderClassifier
from annotated_transformer.training import Trainer
from annotated_transformer.vocab import Vocab

LABELS = ("negative", "positive")  # label 0, label 1 (imdb.load_imdb)
CHECKPOINT = "checkpoint.pt"


@dataclass(frozen=True)
class ClassifierConfig:
    """Everything a run needs: data, model, optimisation. Saved in every checkpoint."""

    # data
    tokenizer: str = "word"  # "word": lower-cased words; "bpe": byte pairs of those words
    vocab_size: int = 20_000  # most frequent training tokens, specials included
    max_len: int = 512  # reviews are cut to their first max_len tokens
    val_size: int = 2_500  # validation reviews carved out of the 25,000 training reviews
    train_subset: int | None = None  # use only this many training reviews (tiny runs)
    test_subset: int | None = None  # evaluate on this many test reviews (None: all 25,000)
    # model
    d_model: int = 128
    h: int = 8
    depth: int = 6
    ff_mult: int = 4
    dropout: float = 0.1
    attn_dropout: float = 0.0  # > 0 takes SDPA off its fast kernel (see the module docstring)
    cls: bool = False  # pool at a [CLS] vector instead of the mean over tokens
    # optimisation
    steps: int = 1_000
    max_tokens: int = 8_192  # padded tokens per batch (batch size × longest review)
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: int = 100
    clip_norm: float = 1.0
    eval_every: int = 500
    bf16: bool = False
    seed: int = 0


PRESETS: dict[str, ClassifierConfig] = {
    # CI: 1,200 reviews cut to 64 tokens, a one-block model; well under a minute.
    "tiny": ClassifierConfig(
        vocab_size=5_000, max_len=64, val_size=300, train_subset=1_500, test_subset=500,
        d_model=32, h=2, depth=1, steps=40, max_tokens=2_048, lr=5e-3, warmup=5,
        eval_every=20,
    ),
    # A laptop: 8.5 minutes of training on one thread. Narrow and shallow, whole reviews
    # (max_len 512 cuts only the longest ~8%), about two epochs, then the learning rate is 0:
    # at max_len 256 and four epochs the model memorised the training reviews (validation
    # loss rose after epoch two). fp32: at d_model=64, bf16 autocast was slower here.
    "cpu": ClassifierConfig(
        vocab_size=20_000, max_len=512, d_model=64, h=4, depth=2, dropout=0.2,
        steps=1_300, max_tokens=8_192, lr=2e-3, weight_decay=0.05, warmup=100,
        eval_every=325, bf16=False,
    ),
    # One GPU: Bloem's depth-6 model at full length, ~10 epochs (an epoch is ~4.8M tokens).
    "gpu": ClassifierConfig(
        vocab_size=30_000, max_len=512, d_model=256, h=8, depth=6, steps=1_500,
        max_tokens=32_768, lr=5e-4, warmup=150, eval_every=250, bf16=True,
    ),
}  # fmt: skip


def get_preset(name: str) -> ClassifierConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


# ----------------------------------------------------------------------------- data


@dataclass
class Reviews:
    """One split, tokenized: raw ``texts``, token ``ids`` (cut to max_len), ``labels``."""

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


def _subset(texts: list[str], labels: list[int], n: int | None, seed: int) -> imdb.Reviews:
    """A seeded random ``n`` of the reviews (all of them for None), in their original order."""
    if n is None or n >= len(texts):
        return texts, labels
    keep = sorted(torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed))[:n])
    return [texts[i] for i in keep], [labels[i] for i in keep]


def _imdb(split: str, data_dir: str | Path | None) -> imdb.Reviews:
    """``--data-dir`` is a mirror folder (holding ``imdb/``), an archive or an aclImdb folder."""
    if data_dir is None:
        return imdb.load_imdb(split)
    data_dir = Path(data_dir)
    if (data_dir / "imdb").is_dir():
        return imdb.load_imdb(split, mirror=data_dir)
    return imdb.load_imdb(split, path=data_dir)


class ReviewTokenizer:
    """Review text -> tokens: lower-cased words (``imdb.tokenize``), or byte pairs of them.

    Byte pairs are learned from the training reviews' words joined by single spaces, so both
    tokenizers see the same text and differ only in their units.
    """

    def __init__(self, bpe: BPE | None = None) -> None:
        self.bpe = bpe

    @classmethod
    def learn(cls, kind: str, train_texts: Sequence[str], vocab_size: int) -> ReviewTokenizer:
        """``kind`` "word", or "bpe" with up to ``vocab_size`` merges (the vocabulary then keeps
        the ``vocab_size`` most frequent tokens, as it does for words)."""
        if kind == "word":
            return cls()
        if kind != "bpe":
            raise ValueError(f"unknown tokenizer {kind!r}; use word or bpe")
        words = (" ".join(imdb.tokenize(text)) for text in train_texts)
        return cls(BPE.learn(words, num_merges=vocab_size))

    def __call__(self, text: str) -> list[str]:
        words = imdb.tokenize(text)
        return self.bpe.encode(" ".join(words)) if self.bpe is not None and words else words

    def to_dict(self) -> dict[str, list] | None:
        """What a checkpoint stores to rebuild this tokenizer (None for words)."""
        return None if self.bpe is None else self.bpe.to_dict()

    @classmethod
    def from_dict(cls, data: dict[str, list] | None) -> ReviewTokenizer:
        return cls(None if data is None else BPE.from_dict(data))


def encode_reviews(
    texts: list[str], labels: list[int], tokens: list[list[str]], vocab: Vocab, max_len: int
) -> Reviews:
    """Encode tokenized reviews; a review with no words at all becomes a single <unk>."""
    return Reviews(texts, imdb.encode([t or ["<unk>"] for t in tokens], vocab, max_len), labels)


@dataclass
class Corpus:
    """The encoded splits ("train", "val", "test") with the tokenizer and vocabulary."""

    tokenizer: ReviewTokenizer
    vocab: Vocab
    splits: dict[str, Reviews]


def load_data(
    config: ClassifierConfig,
    data_dir: str | Path | None = None,
    vocab: Vocab | None = None,
    tokenizer: ReviewTokenizer | None = None,
) -> Corpus:
    """The train/val/test splits, encoded; tokenizer and vocabulary learned from train if not
    given (both or neither).

    The validation set is a seeded draw from the training split; tokenizer and vocabulary see
    the remaining training reviews only, so nothing is learned from validation or test data.
    """
    texts, labels = _imdb("train", data_dir)
    texts, labels = _subset(texts, labels, config.train_subset, config.seed)
    (train_x, train_y), (val_x, val_y) = imdb.train_val_split(
        texts, labels, config.val_size, config.seed
    )
    test_x, test_y = _subset(*_imdb("test", data_dir), config.test_subset, config.seed)
    if vocab is None or tokenizer is None:  # learn both from the training reviews
        tokenizer = ReviewTokenizer.learn(config.tokenizer, train_x, config.vocab_size)
        vocab = None
    splits = {}
    for name, x, y in (
        ("train", train_x, train_y),
        ("val", val_x, val_y),
        ("test", test_x, test_y),
    ):
        tokens = [tokenizer(text) for text in x]
        if vocab is None:  # train comes first
            vocab = imdb.build_vocab(tokens, max_size=config.vocab_size)
        splits[name] = encode_reviews(x, y, tokens, vocab, config.max_len)
    return Corpus(tokenizer, vocab, splits)


def review_batches(
    data: Reviews, max_tokens: int, pad: int, *, seed: int = 0, epoch: int = 0
) -> Iterator[ReviewBatch]:
    """Batches of similar-length reviews (``batching.bucket_batches``), in a seeded order."""
    for index in bucket_batches([len(ids) for ids in data.ids], max_tokens, seed=seed, epoch=epoch):
        tokens = collate([data.ids[i] for i in index], pad=pad)
        yield ReviewBatch(tokens, torch.tensor([data.labels[i] for i in index]))


# ----------------------------------------------------------------------------- model, training


def build_model(config: ClassifierConfig, vocab: Vocab) -> EncoderClassifier:
    torch.manual_seed(config.seed)
    return EncoderClassifier(
        len(vocab), len(LABELS), d_model=config.d_model, h=config.h, depth=config.depth,
        max_len=config.max_len, ff_mult=config.ff_mult, dropout=config.dropout,
        attn_dropout=config.attn_dropout, pad=vocab["<pad>"], cls=config.cls,
    )  # fmt: skip


def classification_loss(model: nn.Module, batch: ReviewBatch) -> tuple[Tensor, int]:
    """Cross-entropy summed over the batch's reviews, and their count (``Trainer``'s contract)."""
    logits = model(batch.tokens).float()  # fp32 logits under bf16 autocast
    return F.cross_entropy(logits, batch.labels, reduction="sum"), len(batch)


def warmup_then_decay(step: int, warmup: int, total: int) -> float:
    """Learning-rate factor: linear from 0 to 1 over ``warmup`` steps, then linear to 0 at
    ``total``. With a fixed step budget, ending at 0 anneals the weights into a good minimum."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def make_trainer(
    model: nn.Module,
    config: ClassifierConfig,
    vocab: Vocab,
    checkpoint: Path | None,
    tokenizer: ReviewTokenizer | None = None,
) -> Trainer:
    """AdamW with a warm-up-then-linear-decay schedule, in the shared ``Trainer``; the
    checkpoint's config holds what ``load_classifier`` needs (config, vocabulary, byte pairs)."""
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    # A partial (not a lambda) keeps the scheduler's state dict plain data for the checkpoint.
    schedule = functools.partial(warmup_then_decay, warmup=config.warmup, total=config.steps)
    return Trainer(
        model, optimizer, classification_loss, LambdaLR(optimizer, schedule),
        clip_norm=config.clip_norm, precision="bf16" if config.bf16 else "fp32",
        checkpoint_path=checkpoint,
        config={
            "classifier": dataclasses.asdict(config), "vocab": vocab.itos,
            "bpe": (tokenizer or ReviewTokenizer()).to_dict(),
        },
    )  # fmt: skip


@torch.inference_mode()
def predict_proba(
    model: nn.Module, data: Reviews, max_tokens: int = 16_384, bf16: bool = False
) -> Tensor:
    """Class probabilities (n, classes) of every review, in ``data``'s order (eval mode)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    probs = torch.empty(len(data), len(LABELS))
    lengths = [len(ids) for ids in data.ids]
    for index in bucket_batches(lengths, max(max_tokens, max(lengths))):
        tokens = collate([data.ids[i] for i in index], pad=model.pad).to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(tokens)
        probs[index] = logits.float().softmax(dim=-1).cpu()
    model.train(was_training)
    return probs


def evaluate(model: nn.Module, data: Reviews, bf16: bool = False) -> dict[str, float]:
    """Accuracy and mean cross-entropy (nats per review) of ``model`` on ``data``."""
    probs = predict_proba(model, data, bf16=bf16)
    labels = torch.tensor(data.labels)
    nll = -probs[torch.arange(len(labels)), labels].clamp_min(1e-12).log()
    accuracy = (probs.argmax(dim=-1) == labels).double().mean().item()
    return {"accuracy": accuracy, "loss": nll.mean().item(), "reviews": len(labels)}


@dataclass
class TrainResult:
    model: EncoderClassifier
    corpus: Corpus
    history: pd.DataFrame  # one row per optimiser step
    metrics: dict[str, Any]


def train(
    config: ClassifierConfig,
    out: str | Path,
    *,
    data_dir: str | Path | None = None,
    device: str | None = None,
    resume: bool = False,
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> TrainResult:
    """Train (or resume) a classifier into the folder ``out``; return it with its metrics."""
    out = Path(out)
    path = out / CHECKPOINT
    vocab = tokenizer = None
    if resume:
        if not path.is_file():
            raise FileNotFoundError(f"--resume: there is no checkpoint {path} to continue")
        config, vocab, tokenizer = _saved(path)
    elif path.exists():
        raise FileExistsError(
            f"{path} exists: pass --resume to continue that run, or choose another --out"
        )
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    corpus = load_data(config, data_dir, vocab, tokenizer)
    vocab, data, pad = corpus.vocab, corpus.splits, corpus.vocab["<pad>"]
    model = build_model(config, vocab).to(device)
    trainer = make_trainer(model, config, vocab, path, corpus.tokenizer)
    if resume:
        trainer.resume(path)
        log(f"resumed {path} at step {trainer.step} of {config.steps}")

    def train_batches(epoch: int) -> Iterator[ReviewBatch]:
        return review_batches(data["train"], config.max_tokens, pad, seed=config.seed, epoch=epoch)

    start = time.perf_counter()
    while trainer.step < config.steps:
        # Train up to the next evaluation, then score the validation set and checkpoint.
        target = min((trainer.step // config.eval_every + 1) * config.eval_every, config.steps)
        trainer.fit(train_batches, target, progress=progress)
        val = evaluate(model, data["val"], config.bf16)
        trainer.rows[-1].update(val_loss=val["loss"], val_accuracy=val["accuracy"])
        trainer.save()
        log(f"step {trainer.step}: val accuracy {val['accuracy']:.4f}, loss {val['loss']:.4f}")
    seconds = time.perf_counter() - start

    history = trainer.history
    val, test = (
        evaluate(model, data["val"], config.bf16),
        evaluate(model, data["test"], config.bf16),
    )
    metrics = {
        "steps": trainer.step,
        "epochs": round(float(history["tokens"].sum()) / len(data["train"]), 2),  # reviews seen
        "train_seconds_this_run": round(seconds, 1),
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(vocab),
        "val_accuracy": val["accuracy"],
        "val_loss": val["loss"],
        "test_accuracy": test["accuracy"],
        "test_loss": test["loss"],
        "test_reviews": test["reviews"],
        "config": dataclasses.asdict(config),
    }
    out.mkdir(parents=True, exist_ok=True)
    history.to_csv(out / "history.csv", index=False)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    log(f"test accuracy {test['accuracy']:.4f} on {test['reviews']:,} reviews; wrote {out}")
    return TrainResult(model, corpus, history, metrics)


def ensure_run(
    config: ClassifierConfig,
    out: str | Path,
    *,
    data_dir: str | Path | None = None,
    fresh: bool = False,
) -> TrainResult:
    """A finished ``classify train`` run of ``config`` in ``out``: reused, resumed or trained.

    What chapter 13 calls. A finished run (``metrics.json`` present, e.g. trained beforehand
    with ``classify train --out``) is loaded with its history and metrics; an interrupted one
    is resumed; otherwise training starts. ``fresh`` deletes ``out`` first (CI: the same run
    every time). A run of another configuration is refused rather than passed off as this one.
    """
    out = Path(out)
    if fresh:
        shutil.rmtree(out, ignore_errors=True)
    path = out / CHECKPOINT
    if path.is_file() and _saved(path)[0] != config:
        raise ValueError(
            f"{out} holds a run of another configuration: delete it, or train into another folder"
        )
    if not (out / "metrics.json").is_file():
        quiet = {"progress": False, "log": lambda _: None}
        return train(config, out, data_dir=data_dir, resume=path.is_file(), **quiet)
    model, tokenizer, vocab, config = load_classifier(path)
    return TrainResult(
        model.train(), load_data(config, data_dir, vocab, tokenizer),
        pd.read_csv(out / "history.csv"), json.loads((out / "metrics.json").read_text()),
    )  # fmt: skip


def _saved(checkpoint: str | Path) -> tuple[ClassifierConfig, Vocab, ReviewTokenizer]:
    """Config, vocabulary and tokenizer stored in a classifier's checkpoint."""
    saved = read_checkpoint(checkpoint)["config"]
    if "classifier" not in saved or "vocab" not in saved:
        raise ValueError(f"{checkpoint} is a checkpoint, but not of a classifier (no vocabulary)")
    tokenizer = ReviewTokenizer.from_dict(saved.get("bpe"))
    return ClassifierConfig(**saved["classifier"]), Vocab(saved["vocab"]), tokenizer


def load_classifier(
    checkpoint: str | Path, device: str = "cpu"
) -> tuple[EncoderClassifier, ReviewTokenizer, Vocab, ClassifierConfig]:
    """The trained model (eval mode), its tokenizer, vocabulary and config, from a checkpoint."""
    config, vocab, tokenizer = _saved(checkpoint)
    model = build_model(config, vocab)
    load_checkpoint(checkpoint, model, restore_rng=False)
    return model.to(device).eval(), tokenizer, vocab, config


def classify_text(
    model: EncoderClassifier, tokenizer: ReviewTokenizer, vocab: Vocab, text: str, max_len: int
) -> tuple[str, float]:
    """The label of one review and the model's probability for it."""
    tokens = tokenizer(text)
    if not tokens:
        raise ValueError("the review is empty: give some words to classify")
    ids = torch.tensor([imdb.encode([tokens], vocab, max_len)[0]])
    with torch.inference_mode():
        probs = model.eval()(ids.to(next(model.parameters()).device)).softmax(dim=-1)[0]
    label = int(probs.argmax())
    return LABELS[label], float(probs[label])


# ----------------------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m annotated_transformer.classify",
        description="IMDb sentiment classification with an encoder-only Transformer.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    t = commands.add_parser("train", help="train (or --resume) a classifier into --out")
    t.add_argument("--preset", default="cpu", help=f"one of {', '.join(PRESETS)} (default cpu)")
    t.add_argument("--out", required=True, help="folder for checkpoint, history and metrics")
    t.add_argument("--resume", action="store_true", help="continue the run in --out")
    t.add_argument("--steps", type=int, help="override the preset's number of optimiser steps")
    t.add_argument("--tokenizer", choices=["word", "bpe"], help="override the preset's tokens")
    t.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                   help="bf16 autocast (default: the preset's choice)")  # fmt: skip
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    e = commands.add_parser("evaluate", help="accuracy of a checkpoint on a split")
    e.add_argument("--checkpoint", required=True)
    e.add_argument("--split", default="test", help="val or test (default test)")
    p = commands.add_parser("predict", help="label and probability of one or more reviews")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("reviews", nargs="+", help="review texts")
    for command in (t, e, p):
        command.add_argument("--device", help="cpu, cuda, ... (default: cuda if available)")
    for command in (t, e):
        command.add_argument("--data-dir", help="data mirror (with imdb/), archive or aclImdb")
    return parser


def _train(args: argparse.Namespace) -> None:
    config = get_preset(args.preset)
    changes = {"steps": args.steps, "bf16": args.bf16, "tokenizer": args.tokenizer}
    config = dataclasses.replace(config, **{k: v for k, v in changes.items() if v is not None})
    if config.steps < 1:
        raise ValueError(f"--steps={config.steps} must be at least 1")
    train(
        config, args.out, data_dir=args.data_dir, device=args.device, resume=args.resume,
        progress=not args.no_progress,
    )  # fmt: skip


def _evaluate(args: argparse.Namespace) -> None:
    if args.split not in ("val", "test"):
        raise ValueError(f"unknown split {args.split!r}; use val or test")
    model, tokenizer, vocab, config = load_classifier(args.checkpoint, args.device or "cpu")
    data = load_data(config, args.data_dir, vocab, tokenizer).splits
    result = evaluate(model, data[args.split], config.bf16)
    print(
        f"{args.split} accuracy {result['accuracy']:.4f} on {result['reviews']:,} reviews "
        f"(cross-entropy {result['loss']:.4f} nats per review)"
    )


def _predict(args: argparse.Namespace) -> None:
    model, tokenizer, vocab, config = load_classifier(args.checkpoint, args.device or "cpu")
    for review in args.reviews:
        label, probability = classify_text(model, tokenizer, vocab, review, config.max_len)
        print(f"{label}\t{probability:.3f}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; errors become one line on stderr and a non-zero exit status."""
    args = _parser().parse_args(argv)
    command = {"train": _train, "evaluate": _evaluate, "predict": _predict}[args.command]
    try:
        command(args)
    except KeyboardInterrupt:
        print("interrupted: continue with `train --resume --out DIR`", file=sys.stderr)
        return 130
    except (ValueError, OSError, ArithmeticError, tarfile.TarError) as error:
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"error: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
