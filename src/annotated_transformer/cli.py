"""The command line: ``python -m annotated_transformer TASK COMMAND ...``.

    python -m annotated_transformer translate train --preset cpu --out runs/t
    python -m annotated_transformer translate evaluate \\
        --checkpoint runs/t/final.pt --split test2016 --beam 4
    python -m annotated_transformer translate predict \\
        --checkpoint runs/t/final.pt "Ein Mann fährt Fahrrad."
    python -m annotated_transformer classify train --preset cpu \\
        --set tokenizer=bpe --out runs/x
    python -m annotated_transformer classify evaluate \\
        --checkpoint results/a --checkpoint runs/b/final.pt
    python -m annotated_transformer lm predict \\
        --checkpoint runs/y/final.pt "ROMEO:" --top-k 40
    python -m annotated_transformer record runs/imdb-cpu --name imdb-cpu --weights
    python -m annotated_transformer.launch --nproc_per_node=4 translate train \\
        --preset base --out b

TASK is one of those listed below; COMMAND is train, evaluate or predict.
``--preset`` picks a recipe from ``PRESETS[task]``; ``--set KEY=VALUE`` changes one
of its settings (the model's sizes too: ``--set d_model=256``). ``train`` writes
into ``--out``; ``--resume`` continues a killed run where it stopped. ``record``
promotes a finished run into ``results/NAME``; ``evaluate`` and ``predict`` take a
record with weights or a checkpoint (several make a model soup).

Every error is one line on stderr and an exit status: 2 for a bad command line, 1
for bad input or a resource that ran out (memory, disk), 130 when interrupted by
Ctrl-C or SIGTERM. Under torchrun, start it with :mod:`annotated_transformer.launch`
(torchrun's options first), whose failure is this one line too, not the launcher's
traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tarfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from annotated_transformer import records, runner
from annotated_transformer.data import multi30k
from annotated_transformer.files import DiskFullError, disk_full, is_disk_full
from annotated_transformer.finished import run_precision
from annotated_transformer.tasks import PRESETS, TASKS, Task
from annotated_transformer.tasks.base import LARGEST, flat_settings
from annotated_transformer.tasks.classification import Classification
from annotated_transformer.tasks.lm import LanguageModel
from annotated_transformer.tasks.translation import Translation
from annotated_transformer.training.trainer import NonFiniteLossError


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit status 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


SOUP = (
    "a run's checkpoint, or a run record with weights (results/NAME); repeated: "
    "the mean of their weights (fine-tunes of one pretrained run)"
)


def folder(text: str) -> Path:
    """``--out``: a folder, never the empty string (which would be the working
    directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("give a folder for the run, e.g. runs/x")
    return Path(text)


def cpus() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check_options(args: argparse.Namespace) -> None:
    """Refuse, naming the option, a number that nothing can use: an infinite or NaN
    float, an integer beyond :data:`~annotated_transformer.tasks.base.LARGEST`
    (torch's generators and counts take no more), or more ``--threads`` than
    there are CPUs (a record's ``--threads`` are another machine's)."""
    for key, value in vars(args).items():
        option = f"--{key.replace('_', '-')} {value}"
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{option} must be finite (a number)")
        whole = isinstance(value, int) and not isinstance(value, bool)
        if whole and abs(value) > LARGEST:
            raise ValueError(f"{option} must lie in [-{LARGEST}, {LARGEST}]")
    threads = args.threads
    if threads is not None and threads < 1:
        raise ValueError(f"--threads {threads} must be >= 1")
    if threads is not None and args.task != "record" and threads > cpus():
        raise ValueError(
            f"--threads {threads}: this machine runs {cpus()} at once; use "
            f"--threads in [1, {cpus()}]"
        )


def texts(args: argparse.Namespace) -> list[str]:
    """``predict``'s texts: the command line's, or else the lines on stdin; text
    that is not UTF-8 is refused in one line."""
    if args.inputs:
        given, where = args.inputs, "the command line"
    else:
        where = "stdin"
        if sys.stdin is None:  # started with stdin closed (`<&-`)
            raise ValueError(
                "no texts: give them on the command line, or on stdin (it is "
                "closed here)"
            )
        try:
            raw = getattr(sys.stdin, "buffer", None)
            data = raw.read().decode() if raw else sys.stdin.read()
        except UnicodeDecodeError as error:
            raise ValueError(
                f"stdin is not UTF-8 text (byte {error.object[error.start]:#x} at "
                f"{error.start}): save the text as UTF-8"
            ) from None
        given = data.splitlines()
    for i, text in enumerate(given, 1):
        try:
            text.encode()
        except UnicodeEncodeError:  # bytes the terminal could not decode
            raise ValueError(
                f"text {i} on {where} is not UTF-8: save it as UTF-8"
            ) from None
    return given


# ------------------------------------ each task's options of evaluate and predict
# (a split, a beam size, sampling): here, so that a task module holds the task and
# not its command line.

Arguments = Callable[[argparse.ArgumentParser], None]


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """No options of the task's own."""
    del parser


def validation(task: Task, model: nn.Module, args: argparse.Namespace) -> dict:
    """``evaluate`` without options of the task's own: the validation scores."""
    del args
    return task.evaluate(model)


def no_options(args: argparse.Namespace) -> dict[str, Any]:
    """``predict`` without options of the task's own."""
    del args
    return {}


@dataclass(frozen=True)
class TaskOptions:
    """What ``evaluate`` and ``predict`` take for one task beyond a checkpoint
    (and ``predict``'s texts), and what they do with it: ``evaluate_arguments``
    and ``predict_arguments`` add the options to each command's parser,
    ``evaluate`` scores a model under them, ``predict`` turns them into keyword
    options of the task's ``predict``. A task without an entry in
    :data:`OPTIONS` has none: ``evaluate`` gives its validation scores."""

    evaluate_arguments: Arguments = no_arguments
    predict_arguments: Arguments = no_arguments
    evaluate: Callable[[Any, nn.Module, argparse.Namespace], dict] = validation
    predict: Callable[[argparse.Namespace], dict[str, Any]] = no_options


def decoding_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--beam", type=int, default=1, help="beam size (1: greedy)")
    help_alpha = "beam search's length penalty α (default: the run's)"
    parser.add_argument("--alpha", type=float, default=None, help=help_alpha)


def translation_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--split", default="test2016", choices=list(multi30k.SPLITS)
    )
    decoding_arguments(parser)


def translation_scores(
    task: Translation, model: nn.Module, args: argparse.Namespace
) -> dict[str, Any]:
    return {
        "split": args.split,
        **task.scores(model, args.split, args.beam, args.alpha),
    }


def review_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--split", default="test", choices=["val", "test"])


def review_accuracy(
    task: Classification, model: nn.Module, args: argparse.Namespace
) -> dict[str, Any]:
    return {"split": args.split, **task.accuracy(model, args.split)}


def text_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--split", default="val", choices=("train", "val", "test"))
    parser.add_argument(
        "--stride", type=int, help="window step (default: half the context)"
    )
    parser.add_argument(
        "--max-bytes", type=int, help="score only the first N bytes"
    )
    parser.add_argument(
        "--batch-size", type=int, help="windows per forward (default: 32)"
    )
    parser.add_argument(
        "--mem-len", type=int, help="block=xl: memory per layer (states)"
    )


def text_scores(
    task: LanguageModel, model: nn.Module, args: argparse.Namespace
) -> dict[str, Any]:
    least = {"--batch-size": 1, "--max-bytes": 2, "--stride": 1, "--mem-len": 0}
    for option, low in least.items():
        value = getattr(args, option[2:].replace("-", "_"))
        if value is not None and value < low:
            raise ValueError(f"{option} must be >= {low}, got {value}")
    given = {"mem_len": args.mem_len, "stride": args.stride}
    given["batch_size"] = args.batch_size
    chosen = {k: v for k, v in given.items() if v is not None}
    return task.bits_per_byte(model, args.split, args.max_bytes, **chosen)


def sampling_arguments(parser: argparse.ArgumentParser) -> None:
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


def sampling_options(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("length", "temperature", "top_k", "seed")
    return {k: getattr(args, k) for k in keys}


def fill_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--top", type=int, default=3, help="candidates shown per [MASK]"
    )


OPTIONS: dict[str, TaskOptions] = {
    "translate": TaskOptions(
        evaluate_arguments=translation_arguments,
        predict_arguments=decoding_arguments,
        evaluate=translation_scores,
        predict=lambda args: {"beam": args.beam, "alpha": args.alpha},
    ),
    "classify": TaskOptions(
        evaluate_arguments=review_arguments, evaluate=review_accuracy
    ),
    "lm": TaskOptions(
        evaluate_arguments=text_arguments,
        predict_arguments=sampling_arguments,
        evaluate=text_scores,
        predict=sampling_options,
    ),
    "mlm": TaskOptions(
        predict_arguments=fill_arguments, predict=lambda args: {"top": args.top}
    ),
}


def options(task: str) -> TaskOptions:
    """The command-line options of ``task`` (a name in ``TASKS``)."""
    return OPTIONS.get(task, TaskOptions())


def _settings_help(task: str) -> str:
    names = ", ".join(flat_settings(PRESETS[task]["tiny"]))
    return f"settings (the model's sizes by their own names, e.g. d_model): {names}"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m annotated_transformer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tasks = parser.add_subparsers(dest="task", required=True, parser_class=_Parser)
    for name, cls in TASKS.items():
        task = tasks.add_parser(name, help=cls.title)
        commands = task.add_subparsers(
            dest="command", required=True, parser_class=_Parser
        )

        train = commands.add_parser(
            "train", help="train a model (resumable)", epilog=_settings_help(name)
        )
        train.add_argument(
            "--preset", help=f"one of {', '.join(PRESETS[name])} (default tiny)"
        )
        train.add_argument(
            "--set",
            dest="settings",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="change one setting (repeatable)",
        )
        train.add_argument(
            "--out", required=True, type=folder, help="the run's folder"
        )
        train.add_argument(
            "--resume", action="store_true", help="continue the run in --out"
        )
        train.add_argument(
            "--max-steps", type=int, help="stop after N steps, as if killed"
        )
        train.add_argument(
            "--no-progress", action="store_true", help="no progress bars"
        )

        evaluate = commands.add_parser("evaluate", help="score a checkpoint")
        predict = commands.add_parser("predict", help="run a checkpoint on texts")
        for command in (evaluate, predict):
            command.add_argument(
                "--checkpoint", required=True, type=Path, action="append", help=SOUP
            )
        options(name).evaluate_arguments(evaluate)
        predict.add_argument(
            "inputs", nargs="*", help="texts (default: lines on stdin)"
        )
        options(name).predict_arguments(predict)

        for command in (train, evaluate, predict):
            command.add_argument(
                "--device", default="auto", help="auto, cpu, cuda or mps"
            )
            command.add_argument(
                "--threads", type=int, help="CPU threads (default: all)"
            )
            command.add_argument(
                "--data-dir", help="a data mirror (default: $AT_DATA_MIRROR)"
            )
    add_record_parser(tasks)
    return parser


def add_record_parser(commands: argparse._SubParsersAction) -> None:
    """``record RUN --name NAME``: a finished run into ``results/NAME``."""
    record = commands.add_parser("record", help="a finished run into results/NAME")
    record.add_argument(
        "run",
        type=Path,
        help="a finished run's folder, runs/x (or a record, for --half)",
    )
    record.add_argument("--name", required=True, help="the record's name: x")
    flag = {"action": "store_true"}
    record.add_argument("--weights", **flag, help="publish its final weights")
    record.add_argument("--half", **flag, help="in float16, if they score the same")
    record.add_argument("--threads", type=int, help="its threads (older runs)")
    record.add_argument("--command", help="its exact train command")
    record.add_argument("--results", type=Path, help="default: results/")
    record.add_argument("--replace", **flag, help="overwrite a record")
    record.add_argument("--data-dir", help="default: $AT_DATA_MIRROR")


def record(args: argparse.Namespace) -> int:
    out = records.record_run(
        args.run,
        args.name,
        weights=args.weights,
        half=args.half,
        threads=args.threads,
        command=args.command,
        root=args.results,
        replace=args.replace,
        data_dir=args.data_dir,
        say=lambda line: print(line, file=sys.stderr),
    )
    metric, value = records.headline(records.read_record(out))
    print(f"{out}: {metric} {value:.4g}")
    return 0


def run(args: argparse.Namespace) -> int:
    check_options(args)
    if args.task == "record":
        return record(args)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.command == "train":
        if args.max_steps is not None and args.max_steps < 1:
            raise ValueError(f"--max-steps {args.max_steps} must be >= 1")
        result = runner.train(
            args.task,
            args.out,
            preset=args.preset,
            settings=args.settings,
            resume=args.resume,
            max_steps=args.max_steps,
            data_dir=args.data_dir,
            device=args.device,
            progress=not args.no_progress,
        )
        if result is not None and result.metrics:
            scores = result.metrics[records.scored_section(result.metrics)]
            print(json.dumps(scores, indent=2, ensure_ascii=False))
        return 0
    checkpoint = (
        args.checkpoint[0] if len(args.checkpoint) == 1 else args.checkpoint
    )
    data, device = args.data_dir, args.device
    task, model = runner.load_model(checkpoint, data_dir=data, device=device)
    if TASKS[args.task] is not type(task):
        raise ValueError(
            f"{args.checkpoint[0]} is a {task.name} checkpoint, not {args.task}"
        )
    if args.command == "evaluate":
        with run_precision(task, model):
            scores = options(args.task).evaluate(task, model, args)
        print(json.dumps(scores, indent=2, ensure_ascii=False))
    else:
        inputs = texts(args)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            with run_precision(task, model):
                chosen = options(args.task).predict(args)
                lines = task.predict(model, inputs, **chosen)
        for warning in caught:
            print(f"warning: {warning.message}", file=sys.stderr)
        for line in lines:
            print(line)
    return 0


def out_of_memory(error: BaseException) -> str | None:
    """The memory that ran out, when ``error`` says so (PyTorch's messages), else
    None."""
    text = str(error)
    if isinstance(error, torch.OutOfMemoryError) or "CUDA out of memory" in text:
        return "GPU"
    if "MPS backend out of memory" in text:
        return "MPS (GPU)"
    if isinstance(error, MemoryError) or "can't allocate memory" in text:
        return "CPU (RAM)"
    return None


def say(line: str) -> None:
    """An error's one line on stderr; under torchrun, from rank 0 alone (every
    rank meets the same error: one line, not one per process)."""
    if os.environ.get("RANK", "0") == "0":
        print(line, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; errors become one line on stderr and
    a non-zero exit status."""
    try:
        return run(build_parser().parse_args(argv))
    except (ValueError, OSError, NonFiniteLossError, tarfile.TarError) as error:
        if is_disk_full(error) and not isinstance(error, DiskFullError):
            error = disk_full(getattr(error, "filename", None) or "a file")
        message = " ".join(str(error).split()) or type(error).__name__
        say(f"error: {message}")
        return 1
    except (MemoryError, RuntimeError) as error:
        memory = out_of_memory(error)
        if memory is None:
            raise
        print(  # every rank: memory runs out on one device, not all
            f"error: out of {memory} memory: the model or its batches do not "
            "fit; train a smaller one (a smaller preset, or --set smaller d_model, "
            "d_ff, N, max_len, max_tokens or batch_size; or precision=bf16, "
            "activation_checkpointing=true), or evaluate with smaller batches",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt as stop:  # the runner says what a training run left
        say(f"interrupted{f': {stop}' if str(stop) else ''}")
        return 130
