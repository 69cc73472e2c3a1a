"""The book's runs: every run a chapter executes at full size, by the name of its
record in ``results/``, with the settings that train it.

A chapter asks the runner for a run by its config (``ensure_run``), and a
record of that config is loaded instead of training it. This list names those
configs once more, as commands, so that the runs can be trained and recorded
ahead of the chapters, on any machine:

    python -m annotated_transformer.book.runs              # each run: recorded?
    python -m annotated_transformer.book.runs --missing --jobs 2   # train + record
    python -m annotated_transformer.book.runs ladder-gqa-s0 --threads 2

Each is trained into ``runs/NAME`` with the command printed (an interrupted one
is resumed), then promoted into ``results/NAME`` with its weights where a
chapter evaluates the model live. They start in the order listed, ``--jobs``
at a time (two runs on one thread each use a 2-core machine best); a fine-tune
waits for the pretraining it starts from. A unit test checks that every record
in ``results/`` is listed here with the config it was trained with.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

from annotated_transformer.records import matching_record, results_dir
from annotated_transformer.runner import LAST, METRICS, new_config
from annotated_transformer.tasks import PRESETS
from annotated_transformer.tasks.classification import SHAPES
from annotated_transformer.tasks.translation import TranslationConfig

MODULE = "annotated_transformer.book.runs"


@dataclass(frozen=True)
class BookRun:
    """One run: ``settings`` over ``preset``; ``weights``: what its record
    publishes ("": figures only, "half": float16, "full": float32)."""

    name: str
    task: str
    preset: str = "cpu"
    settings: tuple[str, ...] = ()
    weights: str = ""
    chapters: tuple[int, ...] = ()
    threads: int | None = None  # a timed run's own threads, whatever --threads says

    def train_words(self, threads: int) -> list[str]:
        sets = [word for s in self.settings for word in ("--set", s)]
        threads = self.threads or threads
        return [
            self.task,
            "train",
            "--preset",
            self.preset,
            *sets,
            "--threads",
            str(threads),
            "--out",
            f"runs/{self.name}",
        ]

    def record_words(self) -> list[str]:
        publish = {"": [], "half": ["--weights", "--half"], "full": ["--weights"]}
        return [
            "record",
            f"runs/{self.name}",
            "--name",
            self.name,
            *publish[self.weights],
        ]

    def record(self) -> Path | None:
        """Its record in ``results/``, if one of this config is there."""
        wanted = new_config(self.task, self.preset, list(self.settings))
        return matching_record(
            self.task, self.preset, wanted, weights=bool(self.weights)
        )


# Chapter 15's ladder: each rung adds one of today's changes to the rung before
# (by the name of its runs, ``ladder-RUNG-sSEED``); every rung has one budget.
LADDER: dict[str, tuple[str, ...]] = {
    "2017": ("block=2017",),
    "pre-norm": (
        "block=modern",
        "norm=layer",
        "positions=learned",
        "feed_forward=relu",
        "bias=true",
    ),
    "rmsnorm": (
        "block=modern",
        "positions=learned",
        "feed_forward=relu",
        "bias=true",
    ),
    "rope": ("block=modern", "feed_forward=relu", "bias=true"),
    "swiglu": ("block=modern", "bias=true"),
    "no-bias": ("block=modern",),
    "gqa": ("block=modern", "kv_heads=2"),
}
LADDER_BUDGET = ("steps=1000", "eval_every=100")


def _ladder() -> list[BookRun]:
    """Chapter 15: today's changes one at a time, two seeds; the length test's
    positions, seed 0 (RoPE is the ladder's "no biases" rung)."""
    runs = [
        BookRun(
            f"ladder-{rung}-s{seed}",
            "lm",
            settings=(*LADDER_BUDGET, f"seed={seed}", *settings),
            weights="half" if (rung, seed) == ("no-bias", 0) else "",
            chapters=(15,),
        )
        for seed in (0, 1)
        for rung, settings in LADDER.items()
    ]
    runs += [
        BookRun(
            f"ladder-{positions}-s0",
            "lm",
            settings=(
                *LADDER_BUDGET,
                "seed=0",
                "block=modern",
                f"positions={positions}",
            ),
            weights="half",
            chapters=(15,),
        )
        for positions in ("alibi", "sinusoidal", "none", "learned")
    ]
    return runs


def translation_levers(config: TranslationConfig) -> dict[str, tuple[str, ...]]:
    """Chapter 12's levers: the translation ``config`` for 3 epochs, one change
    at a time, by the name of the run (``translate-PRESET-NAME``)."""
    changes = {
        "3ep": (),
        "3ep-attn0": ("attn_dropout=0",),
        "3ep-tied": ("tie=true",),
        "3ep-half-merges": (f"bpe_merges={config.bpe_merges // 2}",),
        "3ep-ls0": ("label_smoothing=0",),
        "3ep-double-tokens": (
            f"max_tokens={2 * config.max_tokens}",
            f"warmup={config.warmup // 2}",
        ),
        "3ep-half-warmup": (f"warmup={config.warmup // 2}",),
        "3ep-lr2": (f"lr={2 * config.lr}",),
        "3ep-buckets": ("pack_width=0",),
    }
    return {name: ("epochs=3", *change) for name, change in changes.items()}


def _levers() -> list[BookRun]:
    """Chapter 12: the translation preset for 3 epochs, one change at a time."""
    levers = translation_levers(PRESETS["translate"]["cpu"])
    return [
        BookRun(f"translate-cpu-{name}", "translate", settings=s, chapters=(12,))
        for name, s in levers.items()
    ]


# The speedrun's ladder: the budget every rung trains for, on 2 threads.
SPEEDRUN_BUDGET = (
    *("budget_minutes=30", "epochs=20"),
    *("precision=fp32", "keep_last=3"),
)
# The steps that seed 0's budget planned for the first rung and the last, on its
# machine (where the cosine in its history.csv ends): their second seeds take them.
SPEEDRUN_PLANS = {"cpu": 1_324, "attn0": 1_613}


def override(settings: tuple[str, ...], **values: float) -> tuple[str, ...]:
    """``settings`` with ``values`` in place of what they set."""
    kept = tuple(s for s in settings if s.split("=")[0] not in values)
    return (*kept, *(f"{key}={value:g}" for key, value in values.items()))


def replay(settings: tuple[str, ...], steps: int, seed: int) -> tuple[str, ...]:
    """``settings`` with ``seed``, and ``steps`` in place of a budget: a budgeted
    run's steps taken again on any machine, so that a run differs from it in the
    seed or in its changes alone."""
    return override(settings, seed=seed, budget_minutes=0, epochs=0, steps=steps)


def speedrun_ladder(config: TranslationConfig) -> dict[str, tuple[str, ...]]:
    """The ladder from the translation ``config`` to the speedrun: each
    rung adds one change to the rung before, by its name."""
    changes = {
        "cpu": (),
        "lr2": (f"lr={2 * config.lr:g}", f"warmup={config.warmup * 5 // 8}"),
        "merges": (f"bpe_merges={config.bpe_merges // 2}",),
        "attn0": ("attn_dropout=0",),
    }
    ladder, settings = {}, ()
    for name, change in changes.items():
        settings = (*settings, *change)
        ladder[name] = settings
    return ladder


def speedrun_tried(config: TranslationConfig) -> dict[str, tuple[str, ...]]:
    """Changes to the speedrun measured at its budget that did not help, by the
    name of their run (``config``: the ladder's base; the speedrun keeps its
    batch size)."""
    return {"small-batches": (f"max_tokens={config.max_tokens * 3 // 5}",)}


def speedrun_rungs(
    base: str, budget: tuple[str, ...]
) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each rung's (preset, settings) over the ``base`` preset at ``budget``,
    then each change tried over the last rung; over the ``cpu`` preset the last
    rung is the ``speedrun`` preset itself."""
    config = PRESETS["translate"][base]
    ladder = speedrun_ladder(config).items()
    rungs = {name: (base, (*budget, *s)) for name, s in ladder}
    if base == "cpu":
        rungs["attn0"] = ("speedrun", ())
    last, top = rungs["attn0"]
    tried = speedrun_tried(config).items()
    return rungs | {name: (last, (*top, *s)) for name, s in tried}


def speedrun_replays(
    rungs: dict[str, tuple[str, tuple[str, ...]]], plans: dict[str, int]
) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Runs that take the steps seed 0's budget planned (``plans``, by rung) in
    place of a budget, each run's (preset, settings) by name: the second seed of
    each rung planned, and the speedrun with 1.5 times its peak rate."""
    replays = {}
    for name, steps in plans.items():
        preset, settings = rungs[name]
        seed = "s1" if name == "attn0" else f"{name}-s1"
        replays[seed] = (preset, replay(settings, steps, seed=1))
    preset, settings = rungs["attn0"]
    lr = 1.5 * new_config("translate", preset, list(settings)).lr
    faster = replay(override(settings, lr=lr), plans["attn0"], seed=0)
    return replays | {"higher-rate": (preset, faster)}


def speedrun_name(rung: str) -> str:
    """The run of a rung: the last is ``translate-speedrun`` (the preset)."""
    return "translate-speedrun" + ("" if rung == "attn0" else f"-{rung}")


def _speedrun() -> list[BookRun]:
    """Chapter 12: the speedrun's ladder at its budget and the changes tried
    that did not help; a second seed of the first rung and the last."""
    rungs = speedrun_rungs("cpu", SPEEDRUN_BUDGET)
    rungs |= speedrun_replays(rungs, SPEEDRUN_PLANS)
    return [
        BookRun(
            speedrun_name(name),
            "translate",
            preset,
            settings,
            threads=2,
            chapters=(12,),
        )
        for name, (preset, settings) in rungs.items()
    ]


def _bert() -> list[BookRun]:
    """Chapter 16: masked-LM pretraining, its fine-tune, and the from-scratch
    classifiers it is compared with (chapter 13's with four times its steps)."""
    mlm, imdb = PRESETS["mlm"]["cpu"], PRESETS["classify"]["cpu"]
    shape = tuple(f"{key}={getattr(mlm.model, key)}" for key in SHAPES)
    return [
        BookRun("mlm-cpu", "mlm", weights="half", chapters=(16,)),
        BookRun(
            "imdb-bert-cpu",
            "classify",
            settings=("init=results/mlm-cpu", *shape, "lr=1e-3"),
            chapters=(16,),
        ),
        BookRun(
            "imdb-big-scratch-cpu",
            "classify",
            settings=(*shape, "lr=1e-3"),
            chapters=(16,),
        ),
        BookRun(
            "imdb-long-cpu",
            "classify",
            settings=(f"steps={4 * imdb.steps}", "eval_every=400", "final=best"),
            chapters=(16,),
        ),
    ]


def _sparse() -> list[BookRun]:
    """Chapter 18: dense against fixed sparse attention at 2,048-byte windows."""
    base = (
        "dataset=enwik8_prefix",
        "block=modern",
        "N=2",
        "d_model=64",
        "h=4",
        "d_ff=256",
        "max_len=2048",
        "batch_size=2",
        "steps=400",
        "warmup=40",
        "eval_every=100",
        "eval_bytes=32768",
    )
    fixed = ("attention=fixed", "sparse_stride=64", "sparse_summary=4")
    return [
        BookRun(
            "e8-dense-cpu", "lm", settings=base, weights="full", chapters=(18,)
        ),
        BookRun(
            "e8-fixed-cpu",
            "lm",
            settings=(*base, *fixed),
            weights="full",
            chapters=(18,),
        ),
    ]


RUNS: list[BookRun] = [
    BookRun("translate-cpu", "translate", weights="half", chapters=(10, 11, 12)),
    BookRun(
        "translate-cpu-words",
        "translate",
        settings=("tokens=words",),
        chapters=(12,),
    ),
    *_levers(),
    *_speedrun(),
    BookRun("imdb-cpu", "classify", weights="full", chapters=(13, 16)),
    BookRun(
        "imdb-cpu-bpe",
        "classify",
        settings=("tokenizer=bpe",),
        weights="full",
        chapters=(13,),
    ),
    # chapter 18's vanilla model too
    BookRun(
        "e6-cpu",
        "lm",
        settings=("dataset=enwik8_prefix",),
        weights="full",
        chapters=(14, 18),
    ),
    *_ladder(),
    *_bert(),
    BookRun("ts-cpu", "lm", weights="full", chapters=(17,)),
    BookRun(
        "ts-gpt2-cpu",
        "lm",
        settings=("block=gpt2", "tokens=bpe", "bpe_merges=512", "steps=2480"),
        weights="half",
        chapters=(17,),
    ),
    BookRun(
        "xl-cpu",
        "lm",
        settings=(
            "dataset=enwik8_prefix",
            "block=xl",
            "steps=1400",
            "eval_every=350",
        ),
        weights="full",
        chapters=(18,),
    ),
    *_sparse(),
]
BY_NAME = {run.name: run for run in RUNS}


def needs(run: BookRun) -> list[str]:
    """The book runs whose records ``run`` starts from (``init=results/X``)."""
    return [
        setting.removeprefix("init=results/")
        for setting in run.settings
        if setting.startswith("init=results/")
    ]


def train_and_record(run: BookRun, threads: int, log: Path | None = None) -> None:
    """Train ``run`` into ``runs/NAME`` (resuming an interrupted one), then record
    it, with the command line's commands, each printed first (into ``log``, if
    given, with their output)."""
    out = Path("runs") / run.name
    steps = [run.record_words()]
    if not (out / METRICS).is_file():
        if (out / LAST).is_file():
            train = [run.task, "train", "--resume", "--out", str(out)]
            train += ["--threads", str(run.threads or threads)]
        else:
            train = run.train_words(threads)
        steps.insert(0, train + (["--no-progress"] if log else []))
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") if log else contextlib.nullcontext() as sink:
        for step in steps:
            line = "$ python -m annotated_transformer " + " ".join(step)
            print(line, file=sink or sys.stdout, flush=True)
            command = [sys.executable, "-m", "annotated_transformer", *step]
            subprocess.run(command, check=True, stdout=sink, stderr=sink)


def train_all(chosen: list[BookRun], threads: int, jobs: int) -> list[str]:
    """Train and record ``chosen``, ``jobs`` at a time, in the order listed; a run
    that starts from another waits for it without holding a place (a failed one
    skips it). Returns the names that failed or were skipped. With more than one
    job, each run's output goes to ``runs/NAME.log``."""
    pending, failed = list(chosen), []
    running: dict[futures.Future, BookRun] = {}
    with futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        while pending or running:
            unfinished = {run.name for run in pending} | {
                run.name for run in running.values()
            }
            for run in list(pending):
                if set(needs(run)) & set(failed):
                    pending.remove(run)
                    failed.append(run.name)
                    print(f"{run.name}: skipped, its start failed", file=sys.stderr)
                elif len(running) < jobs and not set(needs(run)) & unfinished:
                    pending.remove(run)
                    log = Path("runs") / f"{run.name}.log" if jobs > 1 else None
                    if log:
                        say(f"{run.name}: started (log: {log})")
                    running[pool.submit(train_and_record, run, threads, log)] = run
            if not running:
                continue
            finished, _ = futures.wait(running, return_when=futures.FIRST_COMPLETED)
            for future in finished:
                run = running.pop(future)
                try:
                    future.result()
                    say(f"{run.name}: recorded")
                except (subprocess.CalledProcessError, OSError) as error:
                    print(
                        f"{run.name}: stopped ({error}); runs/{run.name} resumes "
                        "on the next call",
                        file=sys.stderr,
                    )
                    failed.append(run.name)
    return failed


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("names", nargs="*", help="runs to train and record")
    parser.add_argument(
        "--missing",
        action="store_true",
        help="train and record every run without a record",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="threads per run (default: 1)"
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="runs at a time (default: 1)"
    )
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BY_NAME]
    if unknown:
        print(
            f"no book run named {', '.join(unknown)}: run without arguments "
            "for the list",
            file=sys.stderr,
        )
        return 2
    if not args.names and not args.missing:
        missing = 0
        for run in RUNS:
            recorded = run.record() is not None
            missing += not recorded
            chapters = ", ".join(f"{c:02d}" for c in run.chapters)
            status = "recorded" if recorded else "missing"
            print(f"{run.name:32} {status:9} chapter {chapters}")
        print(
            f"{len(RUNS) - missing} of {len(RUNS)} recorded; --missing trains "
            "and records the others"
        )
        return 0
    chosen = [BY_NAME[name] for name in args.names] or [
        run for run in RUNS if run.record() is None
    ]
    threads = sorted({run.threads or args.threads for run in chosen})
    print(
        f"{len(chosen)} run(s) to train and record into {results_dir()}, "
        f"{args.jobs} at a time on {'/'.join(map(str, threads))} thread(s) each"
    )
    return 1 if train_all(chosen, args.threads, args.jobs) else 0


if __name__ == "__main__":
    sys.exit(main())
