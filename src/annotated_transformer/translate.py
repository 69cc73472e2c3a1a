"""German→English translation on Multi30k from the command line: train, evaluate, translate.

    python -m annotated_transformer.translate train --preset cpu --out runs/cpu
    python -m annotated_transformer.translate train --preset cpu --out runs/cpu --resume
    torchrun --nproc_per_node=4 -m annotated_transformer.translate train --preset base --out runs/b
    python -m annotated_transformer.translate evaluate --checkpoint runs/cpu/final.pt \
        --split test2016 --beam 4
    python -m annotated_transformer.translate translate --checkpoint runs/cpu/final.pt \
        "Ein Mann fährt Fahrrad."

``train`` writes into ``--out``: ``last.pt`` (everything needed to resume), ``epochNNN.pt``
(weights of the last ``keep_last`` epochs, for averaging), ``best.pt`` (best validation BLEU),
``averaged.pt`` (mean of the kept epochs), ``final.pt`` (the better of those two),
``history.csv`` (one row per epoch), ``steps.csv`` (one row per optimiser step) and
``metrics.json``. Every checkpoint holds the preset and both vocabularies.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from annotated_transformer import distributed as dist
from annotated_transformer.checkpoint import read_checkpoint, save_checkpoint
from annotated_transformer.multi30k import SPLITS, build_vocabs, detokenize
from annotated_transformer.progress import tqdm
from annotated_transformer.schedule import noam_scheduler
from annotated_transformer.training import (
    NonFiniteLossError,
    Trainer,
    make_optimizer,
    seq2seq_loss,
)
from annotated_transformer.translation import (
    EpochBatches,
    Translator,
    average_checkpoints,
    bf16_is_fast,
    build_model,
    encode_pairs,
    load_parallel,
    load_translator,
    make_batch,
    pair_lengths,
    score,
    validation_loss,
    warmup_cosine,
)
from annotated_transformer.vocab import Vocab


@dataclass(frozen=True)
class Preset:
    """One training recipe: data, model size, optimisation, checkpoints. Plain values only."""

    # data
    train_limit: int | None = None  # first N training pairs (None: all 29,000)
    eval_limit: int | None = None  # first N pairs of every evaluation split
    lower: bool = False  # keep case: sacreBLEU scores cased text
    min_freq: int = 2
    max_tokens: int = 4000  # per batch (and per rank): sentences × longest, <s>/</s> included
    # model (make_model)
    layers: int = 6
    d_model: int = 512
    d_ff: int = 2048
    heads: int = 8
    dropout: float = 0.1
    max_positions: int = 256
    # optimisation
    epochs: int = 20
    schedule: str = "noam"  # "noam": lr = factor · rate(step); "cosine": warm-up then cosine
    lr: float = 1.0  # the Noam factor, or the peak rate for "cosine"
    warmup: int = 4000  # optimiser steps
    label_smoothing: float = 0.1
    clip_norm: float | None = None
    accumulate: int = 1
    bf16: bool | None = False  # autocast; None: where it is faster (``bf16_is_fast``)
    # checkpoints and evaluation
    keep_last: int = 5  # epoch checkpoints kept, averaged at the end
    checkpoint_every: int = 200  # steps between mid-epoch saves of last.pt (0: epoch ends only)
    beam: int = 4  # for the final test2016 score
    seed: int = 0


PRESETS: dict[str, Preset] = {
    # CI: a one-layer model on 1,000 pairs; seconds, learns next to nothing.
    "tiny": Preset(
        train_limit=1000, eval_limit=50, max_tokens=1200, layers=1, d_model=64, d_ff=128,
        heads=4, epochs=2, schedule="cosine", lr=3e-3, warmup=10, keep_last=2,
        checkpoint_every=0, beam=1,
    ),
    # A laptop: 57 minutes of training on 2 cores of an AVX2 CPU, fp32 (bf16 autocast only
    # where the CPU does bf16 fast); test2016 tokenized BLEU 39.3 with beam 4.
    "cpu": Preset(
        max_tokens=2500, layers=3, d_model=256, d_ff=1024, heads=8, dropout=0.1, epochs=12,
        schedule="cosine", lr=1e-3, warmup=400, bf16=None, keep_last=5, beam=4,
    ),
    # The paper's base model (Vaswani et al. 2017, table 3): for a GPU.
    "base": Preset(max_tokens=8000, epochs=30, warmup=4000, bf16=None),
    # The paper's big model: d_model 1024, 16 heads, dropout 0.3.
    "big": Preset(
        max_tokens=8000, d_model=1024, d_ff=4096, heads=16, dropout=0.3, epochs=30,
        warmup=4000, bf16=None,
    ),
}  # fmt: skip


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


def say(message: str) -> None:
    """A log line from rank 0 that does not break the progress bar."""
    if dist.is_main():
        tqdm.write(message, file=sys.stderr)


# ---------------------------------------------------------------------------------------- train


class Run:
    """One training run in ``out``: data, model, trainer, and what happens at each epoch's end."""

    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.out = Path(args.out)
        self.last = self.out / "last.pt"
        saved = self._saved_config(args)
        name = saved["preset_name"] if saved else args.preset
        if name is None:
            raise ValueError("give --preset (tiny, cpu, base or big), or --resume a run")
        preset = dataclasses.asdict(get_preset(name)) if not saved else saved["preset"]
        if not saved:
            if args.epochs is not None:
                preset["epochs"] = args.epochs
            if args.bf16 is not None:
                preset["bf16"] = args.bf16
            if preset["bf16"] is None:
                preset["bf16"] = bf16_is_fast(device)
        self.p = preset
        self.device, self.mirror = device, args.data_dir
        self.precision = "bf16" if preset["bf16"] else "fp32"

        train = load_parallel("train", lower=preset["lower"], limit=preset["train_limit"],
                              mirror=self.mirror)  # fmt: skip
        self.val = load_parallel("val", lower=preset["lower"], limit=preset["eval_limit"],
                                 mirror=self.mirror)  # fmt: skip
        if saved:
            self.src_vocab, self.tgt_vocab = Vocab(saved["src_itos"]), Vocab(saved["tgt_itos"])
        else:
            self.src_vocab, self.tgt_vocab = build_vocabs(train.src, train.tgt, preset["min_freq"])
        pairs = encode_pairs(train, self.src_vocab, self.tgt_vocab)
        limit = min(preset["max_positions"], preset["max_tokens"])
        fits = [max(lengths) <= limit for lengths in pair_lengths(pairs)]
        if not all(fits):
            say(f"skipping {fits.count(False)} training pairs longer than {limit} tokens")
            pairs = [pair for pair, ok in zip(pairs, fits, strict=True) if ok]
        self.config = {
            "preset_name": name, "preset": preset,
            "src_itos": self.src_vocab.itos, "tgt_itos": self.tgt_vocab.itos,
        }  # fmt: skip

        self.batches = EpochBatches(
            pairs, self.src_vocab, preset["max_tokens"], seed=preset["seed"],
            rank=dist.rank(), world_size=dist.world_size(), multiple=preset["accumulate"],
        )  # fmt: skip
        self.steps_per_epoch = len(self.batches) // preset["accumulate"]
        if self.steps_per_epoch == 0:
            raise ValueError("no full optimiser step per epoch: lower max_tokens or use more data")
        val_pairs = encode_pairs(self.val, self.src_vocab, self.tgt_vocab)
        val_index = EpochBatches(val_pairs, self.src_vocab, preset["max_tokens"]).indices(0)
        self.val_batches = [make_batch(val_pairs, i, self.src_vocab) for i in val_index]

        torch.manual_seed(preset["seed"])
        self.model = build_model(preset, len(self.src_vocab), len(self.tgt_vocab)).to(device)
        pad = self.tgt_vocab.stoi["<pad>"]
        self.plain_loss = seq2seq_loss(pad, preset["label_smoothing"])
        total = self.steps_per_epoch * preset["epochs"]
        if preset["schedule"] == "cosine":
            optimizer = make_optimizer(self.model, lr=preset["lr"])
            scheduler = warmup_cosine(optimizer, min(preset["warmup"], total - 1), total)
        else:
            optimizer = make_optimizer(self.model, lr=1.0)
            scheduler = noam_scheduler(optimizer, preset["d_model"], preset["lr"], preset["warmup"])
        self.trainer = Trainer(
            dist.wrap(self.model, device), optimizer, dist.global_token_loss(self.plain_loss),
            scheduler, accumulate=preset["accumulate"], clip_norm=preset["clip_norm"],
            precision=self.precision, checkpoint_path=self.last, config=self.config,
        )  # fmt: skip
        if saved:
            self.trainer.resume(self.last)
            if dist.world_size() > 1:  # every rank restored rank 0's generators: re-split them
                torch.manual_seed(preset["seed"] + 1000 * self.trainer.step + dist.rank())
        elif dist.world_size() > 1:
            torch.manual_seed(preset["seed"] + dist.rank())  # different dropout on each rank

    def _saved_config(self, args: argparse.Namespace) -> dict[str, Any] | None:
        if not args.resume:
            if self.last.exists():
                raise ValueError(
                    f"{self.out} already holds a run (last.pt): add --resume to continue it, "
                    "or choose another --out"
                )
            return None
        if not self.last.exists():
            raise FileNotFoundError(f"nothing to resume: {self.last} does not exist")
        config = read_checkpoint(self.last)["config"]
        if args.preset is not None and args.preset != config.get("preset_name"):
            raise ValueError(
                f"{self.out} is a {config.get('preset_name')!r} run; resume it without "
                f"--preset {args.preset} or train anew in another folder"
            )
        if args.epochs is not None and args.epochs != config["preset"]["epochs"]:
            raise ValueError(
                f"{self.out} was set up for {config['preset']['epochs']} epochs (its learning-"
                "rate schedule depends on it): resume without --epochs"
            )
        return config

    def translator(self) -> Translator:
        return Translator(
            self.model, self.src_vocab, self.tgt_vocab, lower=self.p["lower"],
            max_positions=self.p["max_positions"], precision=self.precision,
        )  # fmt: skip

    def train(self, max_steps: int | None) -> bool:
        """Train to the end (or to ``max_steps``); returns True when every epoch is done."""
        rows, spe = self.trainer.rows, self.steps_per_epoch
        step = self.trainer.step
        if step and step % spe == 0 and "val_bleu" not in rows[-1]:
            self.end_of_epoch(step // spe, seconds=float("nan"))  # interrupted during its eval
        for epoch in range(self.trainer.step // spe, self.p["epochs"]):
            stop = (epoch + 1) * spe if max_steps is None else min((epoch + 1) * spe, max_steps)
            start = time.perf_counter()
            self.trainer.fit(self.batches, stop, checkpoint_every=self.p["checkpoint_every"],
                             progress=dist.is_main())  # fmt: skip
            if self.trainer.step < (epoch + 1) * spe:
                return False
            self.end_of_epoch(epoch + 1, time.perf_counter() - start)
        return True

    def end_of_epoch(self, epoch: int, seconds: float) -> None:
        """Validation loss and greedy BLEU; checkpoints and logs (rank 0)."""
        val_loss = validation_loss(self.model, self.val_batches, self.plain_loss, self.precision)
        hyps = self.translator().translate_tokens(self.val.src)
        val_bleu = score(hyps, self.val)["tokenized_bleu"]
        rows = self.trainer.rows
        best = max((r["val_bleu"] for r in rows if "val_bleu" in r), default=-1.0)
        rows[-1].update(epoch_end=epoch, epoch_seconds=seconds, val_loss=val_loss,
                        val_bleu=val_bleu)  # fmt: skip
        say(f"epoch {epoch}/{self.p['epochs']}: val loss {val_loss:.3f}, val BLEU {val_bleu:.2f}"
            f" (greedy, tokenized){'  ← best' if val_bleu > best else ''}")  # fmt: skip
        if not dist.is_main():
            return
        epoch_path = self.out / f"epoch{epoch:03d}.pt"
        extra = {"epoch": epoch, "val_bleu": val_bleu}
        save_checkpoint(epoch_path, self.model, step=self.trainer.step, config=self.config,
                        extra=extra)  # fmt: skip
        if val_bleu > best:
            shutil.copyfile(epoch_path, self.out / "best.pt")
        for old in self.epoch_paths()[: -self.p["keep_last"]]:
            old.unlink()
        self.trainer.save()  # last.pt, with this epoch's metrics in its history
        self.write_logs()

    def epoch_paths(self) -> list[Path]:
        return sorted(self.out.glob("epoch[0-9][0-9][0-9].pt"))

    def write_logs(self) -> None:
        history = self.trainer.history
        history.to_csv(self.out / "steps.csv", index=False)
        if "val_bleu" in history:
            epochs = history.dropna(subset=["val_bleu"])
            epochs = epochs[["epoch_end", "step", "loss", "lr", "val_loss", "val_bleu",
                             "epoch_seconds"]]  # fmt: skip
            epochs.astype({"epoch_end": int}).rename(columns={"epoch_end": "epoch"}).to_csv(
                self.out / "history.csv", index=False
            )

    def finish(self) -> dict[str, Any]:
        """Average the kept epochs, keep the better of best/averaged, score it on test2016."""
        paths = self.epoch_paths()
        config, weights = average_checkpoints(paths)
        self.model.load_state_dict(weights)  # training is over: the model becomes the average
        save_checkpoint(self.out / "averaged.pt", self.model, step=self.trainer.step,
                        config=config)  # fmt: skip
        averaged_bleu = score(self.translator().translate_tokens(self.val.src),
                              self.val)["tokenized_bleu"]  # fmt: skip
        best = read_checkpoint(self.out / "best.pt")["extra"]
        chosen = "averaged.pt" if averaged_bleu >= best["val_bleu"] else "best.pt"
        shutil.copyfile(self.out / chosen, self.out / "final.pt")
        say(f"averaged {', '.join(p.stem for p in paths)}: val BLEU {averaged_bleu:.2f}; best "
            f"epoch {best['epoch']}: {best['val_bleu']:.2f}; final.pt = {chosen}")  # fmt: skip
        translator = load_translator([self.out / "final.pt"], self.device, self.precision)
        test = load_parallel("test2016", lower=self.p["lower"], limit=self.p["eval_limit"],
                             mirror=self.mirror)  # fmt: skip
        hyps = translator.translate_tokens(test.src, beam=self.p["beam"])
        return {
            "preset": self.config["preset_name"],
            "config": self.p,
            "steps": self.trainer.step,
            "train_seconds": float(self.trainer.history["epoch_seconds"].sum()),
            "best": {"epoch": best["epoch"], "val_bleu": best["val_bleu"]},
            "averaged": {"epochs": [p.stem for p in paths], "val_bleu": averaged_bleu},
            "final": chosen,
            "test2016": {"beam": self.p["beam"], **score(hyps, test)},
        }


def cmd_train(args: argparse.Namespace) -> int:
    device = dist.init_distributed(args.device)
    try:
        run = Run(args, device)
        say(
            f"{run.config['preset_name']}: {run.steps_per_epoch} steps per epoch × "
            f"{run.p['epochs']} epochs on {dist.world_size()} process(es), {device}, "
            f"{run.precision}; vocabularies {len(run.src_vocab)} de, {len(run.tgt_vocab)} en"
        )
        if not run.train(args.max_steps):
            say(f"stopped at step {run.trainer.step} (--max-steps); continue with --resume")
            return 0
        if dist.is_main():
            metrics = run.finish()
            (run.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
            print(json.dumps(metrics["test2016"], indent=2))
        return 0
    finally:
        dist.cleanup()


def ensure_run(preset: str, out: str | Path, *, fresh: bool = False) -> Path:
    """A finished ``translate train`` run of ``preset`` in ``out``: reused, resumed or trained.

    What the chapters call. A finished run (``metrics.json`` present, e.g. trained beforehand
    from the command line on all cores) is reused; an interrupted one is resumed; otherwise
    training starts. Training runs the command line in a child process, so its progress bars
    and logs stay out of the notebook. ``fresh`` deletes ``out`` first (CI: the same run every
    time). Returns ``out``.
    """
    out = Path(out)
    if fresh:
        shutil.rmtree(out, ignore_errors=True)
    if (out / "metrics.json").is_file():
        return out
    resume = ["--resume"] if (out / "last.pt").is_file() else ["--preset", preset]
    command = [sys.executable, "-m", "annotated_transformer.translate", "train", "--out", str(out)]
    done = subprocess.run([*command, *resume], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`translate train` failed for {out}:\n{done.stderr[-3000:]}")
    return out


# ----------------------------------------------------------------------- evaluate and translate


def _device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for but PyTorch sees no CUDA GPU; use cpu")
    use_cuda = name == "cuda" or (name == "auto" and torch.cuda.is_available())
    return torch.device("cuda" if use_cuda else "cpu")


def _check_decoding(args: argparse.Namespace) -> None:
    if args.beam < 1:
        raise ValueError(f"--beam {args.beam} must be >= 1 (1 is greedy decoding)")
    if getattr(args, "limit", None) is not None and args.limit < 1:
        raise ValueError(f"--limit {args.limit} must be >= 1 sentence pairs")


def cmd_evaluate(args: argparse.Namespace) -> int:
    _check_decoding(args)
    translator = load_translator(args.checkpoint, _device(args.device), args.precision)
    data = load_parallel(args.split, lower=translator.lower, limit=args.limit,
                         mirror=args.data_dir)  # fmt: skip
    hyps = translator.translate_tokens(data.src, beam=args.beam)
    result = {"checkpoint": [str(p) for p in args.checkpoint], "split": args.split,
              "beam": args.beam, **score(hyps, data)}  # fmt: skip
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


def cmd_translate(args: argparse.Namespace) -> int:
    _check_decoding(args)
    sentences = args.sentences or [line.rstrip("\n") for line in sys.stdin]
    if not sentences:
        raise ValueError("nothing to translate: give sentences as arguments or lines on stdin")
    translator = load_translator(args.checkpoint, _device(args.device), args.precision)
    tokens = translator.tokenize(sentences)
    unknown = translator.unknown(tokens)
    if unknown:
        shown = ", ".join(repr(t) for t in unknown[:10]) + (" ..." if len(unknown) > 10 else "")
        print(f"warning: {len(unknown)} token(s) not in the vocabulary, read as <unk>: {shown}",
              file=sys.stderr)  # fmt: skip
    for tokens_out in translator.translate_tokens(tokens, beam=args.beam):
        print(detokenize(tokens_out))
    return 0


# -------------------------------------------------------------------------------------- the CLI


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m annotated_transformer.translate", description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
        p.add_argument("--data-dir", help="a data mirror folder (default: $AT_DATA_MIRROR)")
        p.add_argument("--threads", type=int, help="CPU threads for torch (default: all cores)")

    train = commands.add_parser("train", help="train a model (resumable)")
    train.add_argument("--preset", help=f"one of {', '.join(PRESETS)}")
    train.add_argument("--out", required=True, help="folder for checkpoints and logs")
    train.add_argument("--resume", action="store_true", help="continue the run in --out")
    train.add_argument("--epochs", type=int, help="override the preset's epochs")
    train.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                       help="bf16 autocast (default: the preset's choice)")  # fmt: skip
    train.add_argument("--max-steps", type=int,
                       help="stop after this many optimiser steps, as if interrupted")  # fmt: skip
    common(train)
    train.set_defaults(func=cmd_train)

    for name, func, text in (
        ("evaluate", cmd_evaluate, "score a checkpoint on a split"),
        ("translate", cmd_translate, "translate German sentences"),
    ):
        p = commands.add_parser(name, help=text)
        p.add_argument("--checkpoint", action="append", type=Path, required=True,
                       help="a checkpoint; repeat the option to average several")  # fmt: skip
        p.add_argument("--beam", type=int, default=1, help="beam size (1: greedy)")
        p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
        common(p)
        p.set_defaults(func=func)
        if name == "evaluate":
            p.add_argument("--split", default="test2016", choices=list(SPLITS))
            p.add_argument("--limit", type=int, help="only the first N sentence pairs")
        else:
            p.add_argument("sentences", nargs="*", help="German sentences (default: stdin)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.threads is not None:
            if args.threads < 1:
                raise ValueError(f"--threads {args.threads} must be >= 1")
            torch.set_num_threads(args.threads)
        return args.func(args)
    except (ValueError, OSError, NonFiniteLossError) as err:  # CheckpointError is a ValueError
        message = " ".join(str(err).split())
        print(f"error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: continue a training run with --resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
