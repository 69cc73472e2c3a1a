"""Character-level generation: a decoder-only byte model on Tiny Shakespeare or enwik8.

    python -m annotated_transformer.generate train --preset tiny --dataset tinyshakespeare \\
        --out runs/ts
    python -m annotated_transformer.generate evaluate --checkpoint runs/ts/checkpoint.pt
    python -m annotated_transformer.generate sample --checkpoint runs/ts/checkpoint.pt \\
        --prompt "ROMEO:" --temperature 0.8 --top-k 40 --length 300 --seed 0

``train`` writes ``checkpoint.pt`` (atomic, resumable with ``--resume``), ``history.csv`` (one
row per step: loss in nats and bits per byte, learning rate, validation bits per byte) and
``metrics.json`` (bits per byte of the whole validation split) into ``--out``.

Bits per byte, computed over the whole text (:func:`evaluate_bits_per_byte`): the mean of
−log₂ p(xₜ | context) over every byte xₜ after the first. The model reads at most ``context``
bytes, so the text is scored in overlapping windows of ``context`` bytes that advance by
``stride``: the first window scores all its positions, each later one only the positions no
window scored before (its last ``stride``), the last window is aligned with the end of the
text. Every byte after the first is scored exactly once, with at least
``context − stride + 1`` bytes of context (all the bytes before it near the start).
``stride = context`` would be the cheapest and the worst (some bytes with one byte of context),
``stride = 1`` the best and ``context`` times dearer. The default is ``context // 2``.
(Bloem's ``former`` printed the *total* bits of a batch and called it bits per byte,
issue #38; published enwik8 numbers are means, like this one.)

Scores on ``enwik8_prefix`` (the first 10⁶ bytes) are not comparable with published enwik8
results, which train on 90M bytes and score the last 5M.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.chars import DATASETS, load_splits, random_windows
from annotated_transformer.checkpoint import CheckpointError, read_checkpoint
from annotated_transformer.download import atomic_write
from annotated_transformer.metrics import BitsPerByte
from annotated_transformer.model import DecoderLM
from annotated_transformer.progress import tqdm
from annotated_transformer.sampling import check_sampling, decode, encode, sample
from annotated_transformer.schedule import noam_scheduler
from annotated_transformer.training import NonFiniteLossError, Trainer, make_optimizer

PREFIX_NOTE = (
    "enwik8_prefix is the first 10^6 bytes of enwik8: its scores are not comparable with "
    "published enwik8 bits per byte (90M train / 5M test)"
)


@dataclass(frozen=True)
class Preset:
    """A model size and a training budget. ``lr`` is the peak of the Noam schedule (at step
    ``warmup``); ``eval_bytes`` of the validation split are scored every ``eval_every`` steps
    for the learning curve, and the whole split at the end."""

    d_model: int
    h: int
    N: int
    context: int
    batch_size: int
    steps: int
    warmup: int
    lr: float
    dropout: float
    eval_every: int
    eval_bytes: int
    checkpoint_every: int
    seed: int = 0

    def model_config(self) -> dict[str, Any]:
        return {
            "vocab": 256, "d_model": self.d_model, "h": self.h, "N": self.N,
            "max_len": self.context, "ff_mult": 4, "dropout": self.dropout,
        }  # fmt: skip


PRESETS = {
    # CI: 137k parameters, 150 steps; well under a minute on 2 CPU cores. Learns spaces,
    # frequent letters and the XML skeleton, not words.
    "tiny": Preset(64, 4, 2, 64, 16, 150, 30, 3e-3, 0.0, 50, 8_192, 50),
    # A laptop: 0.9M parameters, 3,000 steps of 4,096 bytes (~12 passes over Tiny Shakespeare's
    # training bytes); about 15-20 minutes on 2 cores, estimated from measured step times.
    # Dropout 0 keeps the fused attention kernel on (attention dropout leaves it): a short run
    # gains more from speed than from regularisation; add dropout for much longer runs.
    "cpu": Preset(128, 4, 4, 128, 32, 3_000, 200, 2e-3, 0.0, 250, 65_536, 250),
    # One GPU, with --bf16: 38M parameters, 12 layers on 512-byte contexts, the shape of the
    # 12-layer character model of Al-Rfou et al. (2018); 100k steps of 16k bytes (~18 passes
    # over enwik8's 90M training bytes). Not run in this project's CI.
    "gpu": Preset(512, 8, 12, 512, 32, 100_000, 4_000, 6e-4, 0.1, 2_000, 1_000_000, 2_000),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; use one of {', '.join(PRESETS)}")
    return PRESETS[name]


# --- the loss and the data -------------------------------------------------------------------


def lm_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, int]:
    """Summed next-byte cross-entropy (nats) of a batch of windows ``(x, y)`` and its size."""
    x, y = batch  # (batch, context) each; y[:, t] = x[:, t + 1]
    device = next(model.parameters()).device
    logits = model(x.to(device))  # (batch, context, 256)
    loss = F.cross_entropy(logits.float().flatten(0, 1), y.to(device).flatten(), reduction="sum")
    return loss, y.numel()


def training_batches(data: Tensor, preset: Preset):
    """``epoch -> batches`` of random windows, the same for the same epoch (resumable).

    An epoch is as many windows as cover the training bytes once on average.
    """
    per_epoch = max(1, len(data) // (preset.batch_size * preset.context))

    def batches(epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
        generator = torch.Generator().manual_seed(preset.seed * 1_000_003 + epoch)
        for _ in range(per_epoch):
            yield random_windows(data, preset.batch_size, preset.context, generator)

    return batches


def fixed_windows(data: Tensor, context: int, batch_size: int) -> list[tuple[Tensor, Tensor]]:
    """Consecutive, non-overlapping windows of ``data`` in batches (a quick validation loss)."""
    n = (len(data) - 1) // context
    if n < 1:
        raise ValueError(f"{len(data)} bytes hold no window of {context} + 1 bytes")
    starts = torch.arange(n) * context
    windows = data[starts[:, None] + torch.arange(context + 1)].long()  # (n, context + 1)
    return [(w[:, :-1], w[:, 1:]) for w in windows.split(batch_size)]


# --- bits per byte over a whole text ---------------------------------------------------------


def window_plan(n: int, context: int, stride: int) -> list[tuple[int, int]]:
    """Windows ``(start, first)`` that score each byte 1..n-1 of an n-byte text once.

    A window reads bytes ``start .. start + L - 1`` (L = min(context, n - 1)) and predicts
    bytes ``start + 1 .. start + L``; it scores those from ``first`` on.
    """
    if n < 2:
        raise ValueError(f"a text of {n} byte(s) has no byte to predict; give at least 2")
    if context < 1 or not 1 <= stride <= context:
        raise ValueError(f"need context >= 1 and 1 <= stride <= context, got {context}, {stride}")
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
    """Run ``model`` over ``data`` (uint8 (n,)) in windows; yield, per batch of windows,
    ``(logits (m, 256), targets (m,), positions (m,))`` of the bytes those windows score.

    context defaults to the model's ``max_len``, stride to half the context.
    """
    context = context or model.max_len
    stride = stride or max(context // 2, 1)
    if context > model.max_len:
        raise ValueError(f"context={context} exceeds the model's max_len={model.max_len}")
    plan = torch.tensor(window_plan(len(data), context, stride))  # (windows, 2)
    L = min(context, len(data) - 1)
    device = next(model.parameters()).device
    offsets = torch.arange(L + 1)
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for chunk in tqdm(plan.split(batch_size), desc="evaluate", disable=not progress):
            start, first = chunk[:, 0:1], chunk[:, 1:2]  # (b, 1) each
            windows = data[start + offsets].long()  # (b, L + 1)
            positions = start + 1 + offsets[:-1]  # (b, L): the index of each target byte
            scored = positions >= first  # (b, L)
            logits = model(windows[:, :-1].to(device)).float()  # (b, L, 256)
            yield logits[scored.to(device)], windows[:, 1:][scored], positions[scored]
    model.train(was_training)


def evaluate_bits_per_byte(model: DecoderLM, data: Tensor, **windows: Any) -> tuple[float, int]:
    """(bits per byte, bytes scored) of the whole text: mean −log₂ p over bytes 1..n-1.

    ``windows`` go to :func:`scored_windows` (context, stride, batch_size, progress).
    """
    meter = BitsPerByte()
    for logits, targets, _ in scored_windows(model, data, **windows):
        meter.update(logits, targets.to(logits.device))
    return meter.compute(), meter.count


def byte_bits(model: DecoderLM, data: Tensor, **windows: Any) -> Tensor:
    """−log₂ p(xₜ | context) of every byte t = 1..n-1, float64 (n - 1,); index t - 1."""
    bits = torch.full((len(data) - 1,), math.nan, dtype=torch.float64)
    for logits, targets, positions in scored_windows(model, data, **windows):
        nats = F.cross_entropy(logits.double(), targets.to(logits.device), reduction="none")
        bits[positions - 1] = nats.cpu() / math.log(2)
    return bits


# --- train, evaluate, sample -----------------------------------------------------------------


def pick_device(device: str) -> torch.device:
    """``auto`` is CUDA when available, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: CUDA is not available here; use cpu or auto")
    return torch.device(device)


def train(
    preset: str | Preset,
    dataset: str,
    out: str | Path,
    *,
    resume: bool = False,
    data_dir: str | Path | None = None,
    device: str = "auto",
    bf16: bool = False,
    steps: int | None = None,
    progress: bool = True,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Train a :class:`DecoderLM` on ``dataset``; return (history, metrics).

    Writes ``checkpoint.pt``, ``history.csv`` and ``metrics.json`` into ``out``.
    ``steps`` overrides the preset's number of optimiser steps (counted from the start).
    """
    name = preset if isinstance(preset, str) else "custom"
    preset = get_preset(preset) if isinstance(preset, str) else preset
    if steps is not None:
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        preset = replace(preset, steps=steps)
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; use one of {', '.join(DATASETS)}")
    out = Path(out)
    checkpoint = out / "checkpoint.pt"
    if checkpoint.exists() and not resume:
        raise ValueError(f"{checkpoint} exists: pass --resume to continue it, or another --out")
    if resume and not checkpoint.exists():
        raise ValueError(f"--resume: there is no {checkpoint} to resume; drop --resume")
    splits = load_splits(dataset, mirror=data_dir)
    target = pick_device(device)
    torch.manual_seed(preset.seed)
    model = DecoderLM(**preset.model_config()).to(target)
    optimizer = make_optimizer(model)
    # Noam's d_model^-0.5 · min(...) scaled so that the peak, at step `warmup`, is `lr`.
    factor = preset.lr * math.sqrt(preset.d_model * preset.warmup)
    scheduler = noam_scheduler(optimizer, preset.d_model, factor, preset.warmup)
    config = {"preset": name, "dataset": dataset, **asdict(preset)}
    config["model"] = preset.model_config()
    trainer = Trainer(
        model, optimizer, lm_loss, scheduler, clip_norm=1.0,
        precision="bf16" if bf16 else "fp32", checkpoint_path=checkpoint, config=config,
    )  # fmt: skip
    if resume:
        saved = read_checkpoint(checkpoint)["config"]
        if saved.get("model") != config["model"] or saved.get("dataset") != dataset:
            raise ValueError(
                f"{checkpoint} was trained with dataset={saved.get('dataset')!r} and model "
                f"{saved.get('model')}; resume it with the same --preset and --dataset"
            )
        trainer.resume()
        trainer.config = config  # a resumed run may extend the number of steps
    val = splits["val"][: preset.eval_bytes + 1]
    history = trainer.fit(
        training_batches(splits["train"], preset), preset.steps,
        eval_batches=lambda: fixed_windows(val, preset.context, 4 * preset.batch_size),
        eval_every=preset.eval_every, checkpoint_every=preset.checkpoint_every,
        progress=progress,
    )  # fmt: skip
    history = with_bits(history)
    val_bpb, scored = evaluate_bits_per_byte(model, splits["val"], progress=progress)
    metrics = {
        "dataset": dataset, "preset": name, "steps": trainer.step,
        "parameters": sum(p.numel() for p in model.parameters()),
        "val_bits_per_byte": val_bpb, "val_bytes_scored": scored,
        "context": preset.context, "stride": max(preset.context // 2, 1),
        "train_bits_per_byte_last_100_steps": float(history["train_bpb"].tail(100).mean()),
    }  # fmt: skip
    if dataset == "enwik8_prefix":
        metrics["note"] = PREFIX_NOTE
    atomic_write(out / "history.csv", history.to_csv(index=False).encode())
    atomic_write(out / "metrics.json", (json.dumps(metrics, indent=2) + "\n").encode())
    return history, metrics


def with_bits(history: pd.DataFrame) -> pd.DataFrame:
    """Add bits-per-byte columns (nats / ln 2): ``train_bpb`` and, if present, ``val_bpb``."""
    history = history.copy()
    history["train_bpb"] = history["loss"] / math.log(2)
    if "eval_loss" in history:
        history["val_bpb"] = history["eval_loss"] / math.log(2)
    return history


def load_model(checkpoint: str | Path, device: str = "cpu") -> tuple[DecoderLM, dict[str, Any]]:
    """The trained model of a ``train`` checkpoint (eval mode) and its run config."""
    state = read_checkpoint(checkpoint)
    config = state["config"]
    if not isinstance(config.get("model"), dict):
        raise CheckpointError(
            f"{checkpoint} is a checkpoint, but not of a generate model (its config has no "
            "'model' entry); pass the checkpoint.pt that `generate train` wrote"
        )
    model = DecoderLM(**config["model"])
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as error:
        raise CheckpointError(
            f"{checkpoint}: the weights do not fit a DecoderLM{config['model']} "
            f"({str(error).splitlines()[0]})"
        ) from error
    return model.to(pick_device(device)).eval(), config


def generate_text(
    checkpoint: str | Path,
    prompt: str,
    *,
    length: int = 256,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    device: str = "cpu",
) -> str:
    """The prompt and ``length`` sampled bytes after it, decoded as UTF-8 (seeded)."""
    if not prompt:
        raise ValueError("the prompt is empty: give at least one character to continue")
    check_sampling(temperature, top_k, length)
    model, _ = load_model(checkpoint, device)
    generator = torch.Generator(next(model.parameters()).device).manual_seed(seed)
    ids = sample(
        model, encode(prompt), length, temperature=temperature, top_k=top_k, generator=generator
    )
    return decode(ids[0])


# --- the command line ------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m annotated_transformer.generate", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 or auto (default)")
        p.add_argument("--data-dir", help="a mirror folder laid out like shared/data (chars/)")

    t = commands.add_parser("train", help="train a model, resumable")
    t.add_argument("--preset", default="tiny", help=f"one of {', '.join(PRESETS)}")
    t.add_argument("--dataset", default="tinyshakespeare", choices=DATASETS)
    t.add_argument("--out", required=True, help="folder for checkpoint, history and metrics")
    t.add_argument("--resume", action="store_true", help="continue the checkpoint in --out")
    t.add_argument("--steps", type=int, help="override the preset's number of steps")
    t.add_argument("--bf16", action="store_true", help="bf16 autocast (weights stay fp32)")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    common(t)

    e = commands.add_parser("evaluate", help="bits per byte of a whole split")
    e.add_argument("--checkpoint", required=True)
    e.add_argument("--dataset", choices=DATASETS, help="default: the one it was trained on")
    e.add_argument("--split", default="val", choices=("train", "val", "test"))
    e.add_argument("--stride", type=int, help="window step (default: half the context)")
    e.add_argument("--max-bytes", type=int, help="score only the first N bytes of the split")
    e.add_argument("--batch-size", type=int, default=32, help="windows per forward pass")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    common(e)

    s = commands.add_parser("sample", help="continue a prompt")
    s.add_argument("--checkpoint", required=True)
    s.add_argument("--prompt", required=True)
    s.add_argument("--length", type=int, default=256, help="new bytes to sample")
    s.add_argument("--temperature", type=float, default=1.0)
    s.add_argument("--top-k", type=int, help="sample among the k likeliest bytes only")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    return parser


def run_evaluate(args: argparse.Namespace) -> dict[str, Any]:
    model, config = load_model(args.checkpoint, args.device)
    dataset = args.dataset or config["dataset"]
    splits = load_splits(dataset, mirror=args.data_dir)
    if args.split not in splits:
        raise ValueError(f"{dataset} has no {args.split} split; use one of {', '.join(splits)}")
    data = splits[args.split]
    if args.max_bytes is not None:
        if args.max_bytes < 2:
            raise ValueError(f"--max-bytes must be >= 2, got {args.max_bytes}")
        data = data[: args.max_bytes]
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    bpb, scored = evaluate_bits_per_byte(
        model, data, stride=args.stride, batch_size=args.batch_size,
        progress=not args.no_progress,
    )  # fmt: skip
    result = {
        "dataset": dataset, "split": args.split, "bits_per_byte": bpb, "bytes_scored": scored,
        "context": model.max_len, "stride": args.stride or max(model.max_len // 2, 1),
    }  # fmt: skip
    if dataset == "enwik8_prefix":
        result["note"] = PREFIX_NOTE
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "train":
            _, metrics = train(
                args.preset, args.dataset, args.out, resume=args.resume,
                data_dir=args.data_dir, device=args.device, bf16=args.bf16, steps=args.steps,
                progress=not args.no_progress,
            )  # fmt: skip
            print(json.dumps(metrics, indent=2))
        elif args.command == "evaluate":
            print(json.dumps(run_evaluate(args), indent=2))
        else:
            text = generate_text(
                args.checkpoint, args.prompt, length=args.length, temperature=args.temperature,
                top_k=args.top_k, seed=args.seed, device=args.device,
            )  # fmt: skip
            print(text)
    except (ValueError, OSError, NonFiniteLossError) as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: the last checkpoint is intact; continue with --resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
