"""One runner for every task: what happens around the training loop, written once.

A task (:mod:`annotated_transformer.tasks`) says what to train on and how to score
it; :class:`Run` does the rest, in a folder that holds one run and is trained by
one process at a time (an OS lock on the folder, :func:`holding`):

- builds the model on its device (``auto``: CUDA, then Apple's MPS, then the CPU)
  in the run's precision, with the optimiser and the learning-rate schedule;
- trains, validates every so often and writes every file atomically: ``last.pt``
  (to resume), ``best.pt``, ``keep-NNNNNN.pt`` (averaged at the end), ``final.pt``
  (the weights tested), ``history.csv``, ``metrics.json`` and ``train.log``;
- resumes a killed run exactly where its last intact checkpoint stopped, and
  reuses a finished run instead of training it again (:func:`ensure_run`);
- under ``torchrun``, gives every rank its share of the batches and replicates
  the model (DDP) or shards it layer by layer (FSDP, :func:`stack_layers`).

Chapters call :func:`ensure_run`, the command line :mod:`annotated_transformer.cli`;
a finished run is read back by :mod:`annotated_transformer.finished`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

from annotated_transformer import records
from annotated_transformer.blocks.layers import (
    DecoderLayer,
    EncoderLayer,
    TransformerBlock,
)
from annotated_transformer.data.batching import shard_batches
from annotated_transformer.files import (
    TEMPORARY,
    atomic_copy,
    atomic_write,
    is_stale,
    open_at,
    open_regular,
    write_json,
)
from annotated_transformer.finished import (
    RunResult,
    restored_task,
    run_precision,
    same_run,
    saved_run,
    test_settings,
)
from annotated_transformer.machine import write_provenance
from annotated_transformer.models.encoder_decoder import count_parameters
from annotated_transformer.tasks import PRESETS, TASKS, Task
from annotated_transformer.tasks.base import apply_settings, flat_settings
from annotated_transformer.tasks.variants import VARIANTS
from annotated_transformer.training import distributed as dist
from annotated_transformer.training.checkpoints import (
    CheckpointError,
    average_checkpoints,
    full_state_dicts,
    is_sharded,
    model_soup,
    previous,
    read_checkpoint,
    save_checkpoint,
)
from annotated_transformer.training.precision import resolve_precision
from annotated_transformer.training.progress import tqdm
from annotated_transformer.training.published import read_weights
from annotated_transformer.training.schedules import make_scheduler
from annotated_transformer.training.trainer import (
    Budget,
    Trainer,
    checkpoint_blocks,
    make_optimizer,
)

try:
    import fcntl  # POSIX: the lock that keeps one run per folder
except ImportError:  # Windows: runs are not locked
    fcntl = None

DEVICES = ("auto", "cpu", "cuda", "mps")
LAST, BEST, FINAL, AVERAGED = "last.pt", "best.pt", "final.pt", "averaged.pt"
METRICS = "metrics.json"  # a finished run's numbers: written last, by write_json


def stack_layers() -> tuple[type[nn.Module], ...]:
    """The layer classes of every model the runner trains: what activation
    checkpointing recomputes, and FSDP shards, one at a time. The encoder-decoder's
    and the encoder-only models' layers, and each language-model variant's block
    (:data:`~annotated_transformer.tasks.variants.VARIANTS`)."""
    layers = (EncoderLayer, DecoderLayer, TransformerBlock)
    variants = (variant.block for variant in VARIANTS.values())
    return tuple(dict.fromkeys((*layers, *variants)))  # each class once, in order


# ------------------------------------------------------------- device and precision


def pick_device(name: str = "auto") -> torch.device:
    """``auto``: CUDA, then Apple's MPS, then the CPU; a
    named device must be there."""
    kind = name.split(":")[0]
    if kind not in DEVICES:
        raise ValueError(
            f"unknown device {name!r}; use one of {', '.join(DEVICES)}"
        )
    try:
        index = None if kind == "auto" else torch.device(name).index
    except RuntimeError:  # torch's own parse: "cpu:x", "cuda:-1", "cuda:0:1"
        raise ValueError(
            f"--device {name} is not a device name: use auto, cpu, mps, cuda or "
            "cuda:N (N counts from 0)"
        ) from None
    has = {
        "cuda": torch.cuda.is_available(),
        "mps": torch.backends.mps.is_available(),
    }
    if kind == "auto":
        return torch.device(next((d for d in ("cuda", "mps") if has[d]), "cpu"))
    if kind != "cpu" and not has[kind]:
        raise ValueError(
            f"--device {name}: PyTorch sees no {kind.upper()} device here; use cpu"
        )
    count = torch.cuda.device_count() if kind == "cuda" else 1
    if index is not None and index >= count:
        raise ValueError(
            f"--device {name}: there is no such device here; use {kind}:N with N "
            f"in [0, {count - 1}]"
        )
    return torch.device(name)


def make_optimizer_for(model: nn.Module, config: Any) -> torch.optim.Optimizer:
    """The config's optimiser: the paper's Adam, or AdamW with ``weight_decay``."""
    if config.optimizer == "adam":
        return make_optimizer(model, lr=config.lr)
    if config.optimizer == "adamw":
        params = model.parameters()
        return torch.optim.AdamW(
            params, lr=config.lr, weight_decay=config.weight_decay
        )
    raise ValueError(f"optimizer={config.optimizer!r}: use adam or adamw")


# -------------------------------------------------------------------------- the run


def new_config(
    task: str, preset: str, settings: list[str] | tuple[str, ...] = ()
) -> Any:
    """A preset of ``PRESETS[task]`` with ``KEY=VALUE``
    settings applied (``--set``)."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; use one of {', '.join(TASKS)}")
    if preset not in PRESETS[task]:
        raise ValueError(
            f"unknown preset {preset!r} for {task}; use one of "
            f"{', '.join(PRESETS[task])}"
        )
    return apply_settings(PRESETS[task][preset], settings)


def run_config(task: str, preset: str, config: Any) -> dict[str, Any]:
    """What a checkpoint says about its run: task, preset name and every setting."""
    return {"task": task, "preset": preset, "config": flat_settings(config)}


class Run:
    """One training run of ``task`` in the folder ``out``.

    Build it with a config (a new run) or with ``resume=True`` (the config is read
    from ``out/last.pt``). :meth:`train` trains to the end (or ``max_steps``),
    :meth:`finish` picks the final weights, tests them and writes ``metrics.json``.
    """

    def __init__(
        self,
        task: str,
        out: str | Path,
        *,
        preset: str | None = None,
        config: Any = None,
        resume: bool = False,
        data_dir: str | Path | None = None,
        device: str = "auto",
        progress: bool = True,
        echo: bool = True,
        folder: Folder | None = None,
    ) -> None:
        self.out, self.progress, self.echo = Path(out), progress, echo
        # held by :func:`holding`: checked before each write, written through
        self.folder = folder
        self.fd = folder.fd if folder and os.open in os.supports_dir_fd else None
        last = self.out / LAST
        if resume:
            candidates, saved = self.resumable()
            if isinstance(saved, dict) and saved.get("task") != task:
                raise ValueError(
                    f"{self.out} holds a {saved.get('task')!r} run, not {task}"
                )
            _, preset, config, state = saved_run(saved, candidates[0])
            self.check_one_run(task, preset, config)
        else:
            if last.exists() or previous(last).exists():
                raise ValueError(
                    f"{self.out} already holds a run (last.pt): add --resume to "
                    "continue it, or choose another --out"
                )
            state = None
        sharded = config.sharding == "fsdp" and not resume  # resumed: unsharded
        if sharded and not dist.launched_by_torchrun():
            raise ValueError(
                "sharding=fsdp shards the model over the processes that torchrun "
                "starts: run under torchrun --nproc_per_node=N, or drop it "
                "(sharding=none)"
            )
        self.device = dist.init_distributed(pick_device(device))
        if not resume:
            precision = resolve_precision(config.precision, self.device)
            config = dataclasses.replace(config, precision=precision)
        self.task_name, self.preset, self.config = task, preset, config
        self.task: Task = TASKS[task](config, data_dir=data_dir, state=state)
        self.task.check_data()
        self.steps_per_epoch = len(self.shard(0)) // config.accumulate
        if self.steps_per_epoch == 0:
            raise ValueError(
                "no full optimiser step per epoch: use smaller batches or more data"
            )
        self.total = (
            config.epochs * self.steps_per_epoch if config.epochs else config.steps
        )
        self.every = config.eval_every or self.steps_per_epoch
        self.saved = run_config(task, preset, config) | {"state": self.task.state()}

        torch.manual_seed(config.seed)
        self.model = self.task.build_model().to(self.device)
        layers = stack_layers()
        if config.activation_checkpointing:
            checkpoint_blocks(self.model, layers)
        # FSDP replaces the weights by shards: the optimiser must
        # see the wrapped model's.
        wrapped = dist.wrap(self.model, self.device, config.sharding, layers)
        optimizer = make_optimizer_for(wrapped, config)
        scheduler = make_scheduler(
            optimizer, config.schedule, config.lr, config.warmup, self.total
        )
        self.trainer = Trainer(
            wrapped,
            optimizer,
            dist.global_token_loss(self.task.loss),
            scheduler,
            accumulate=config.accumulate,
            clip_norm=config.clip_norm,
            precision=config.precision,
            checkpoint_path=last,
            config=self.saved,
            stream=self.task.stream,
            before_save=self.check_folder,
            folder=self.fd,
            budget=Budget(60 * config.budget_minutes, config.warmup, self.total)
            if config.budget_minutes
            else None,
        )
        if resume:
            self.resume_from(candidates)
            # Every rank restored rank 0's generators: split them again.
            if dist.world_size() > 1:
                step = self.trainer.step
                torch.manual_seed(config.seed + 1000 * step + dist.rank())
        elif dist.world_size() > 1:  # a different dropout on each rank
            torch.manual_seed(config.seed + dist.rank())

    # --- resuming
    def resumable(self) -> tuple[list[Path], dict[str, Any]]:
        """The checkpoints to resume from, newest first, and the run's config from
        the first of them: ``last.pt`` and ``last.previous.pt``, or the latter
        alone when last.pt is damaged (it is then set aside, and said)."""
        last = self.out / LAST
        found = [path for path in (last, previous(last)) if path.is_file()]
        if not found:
            raise FileNotFoundError(f"nothing to resume: {last} does not exist")
        try:
            return found, read_checkpoint(found[0])["config"]
        except CheckpointError as damaged:
            if len(found) == 1:
                raise
            saved = read_checkpoint(found[1])["config"]  # both damaged: this error
            self.set_aside(damaged)
            return found[1:], saved

    def resume_from(self, candidates: list[Path]) -> None:
        """Resume from the first of ``candidates`` that fits the run
        (:meth:`Trainer.resume`: its weights, optimiser, generators, position and
        a step within the run's); last.pt, when it does not, is set aside."""
        try:
            self.trainer.resume(candidates[0], max_steps=self.total)
        except CheckpointError as damaged:
            if len(candidates) == 1:
                raise
            self.trainer.resume(candidates[1], max_steps=self.total)
            self.set_aside(damaged)

    def set_aside(self, damaged: CheckpointError) -> None:
        """Rename the damaged last.pt to ``last.pt.damaged`` and say why: the run
        resumes from last.previous.pt."""
        aside = f"{LAST}.damaged"
        os.replace(*self.here(LAST, aside), src_dir_fd=self.fd, dst_dir_fd=self.fd)
        shown = f"{previous(Path(LAST))}; {aside} set aside"
        self.say(f"resuming from {shown}: {damaged}")

    def here(self, *names: str) -> list[Path]:
        """``names`` as paths for ``os`` calls with ``dir_fd=self.fd``: relative to
        the held folder, or (no folder held) under ``out``."""
        return [Path(n) if self.fd is not None else self.out / n for n in names]

    def check_one_run(self, task: str, preset: str, config: Any) -> None:
        """Refuse to resume a last.pt into a folder whose metrics.json or best.pt
        belong to another run (another preset or settings): two runs would mix."""
        others, metrics = {}, self.out / METRICS
        if metrics.is_file():
            others[metrics] = records.read_metrics(metrics)
        damaged = (CheckpointError, FileNotFoundError)  # chosen again at the end
        with contextlib.suppress(*damaged):
            others[self.out / BEST] = read_checkpoint(self.out / BEST)["config"]
        for path, saved in others.items():
            if not same_run(saved, task, preset, config, source=path):
                raise ValueError(
                    f"{self.out} mixes two runs: its {path.name} comes from "
                    "another preset or settings than its last.pt; move one "
                    "run's files to another folder"
                )

    # --- data
    def shard(self, epoch: int) -> list[Any]:
        """This rank's batches of ``epoch`` (every process
        computes the same list)."""
        batches = list(self.task.batches(epoch))
        return shard_batches(
            batches, dist.rank(), dist.world_size(), self.config.accumulate
        )

    # --- logs
    def check_folder(self) -> None:
        """Before a write: is the run's folder still at ``out``
        (:meth:`Folder.check`)?"""
        if self.folder is not None:
            self.folder.check()

    def say(self, message: str) -> None:
        """A line for people: printed (rank 0, above the progress bar)
        and kept in train.log."""
        if not dist.is_main():
            return
        self.check_folder()
        append = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        fd = open_at(self.out / "train.log", append, folder=self.fd)
        with open(fd, "a", encoding="utf-8") as log:
            if self.echo:
                tqdm.write(message, file=sys.stderr)
            log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')}  {message}\n")

    def write_history(self) -> None:
        if dist.is_main():
            self.check_folder()
            csv = self.trainer.history.to_csv(index=False).encode()
            atomic_write(self.out / "history.csv", csv, folder=self.fd)

    # --- training
    def best_of(self, scores: dict[str, float]) -> str:
        """The key of the best score, by the task's metric
        (higher or lower is better)."""
        sign = 1 if self.task.score[1] == "max" else -1
        return max(scores, key=lambda key: sign * scores[key])

    def save_weights(
        self, name: str, extra: dict[str, Any], weights: Any = None
    ) -> None:
        """The model's weights (no optimiser state) with the run's config, as
        ``out/name``; ``weights``: a state dict already gathered from the ranks
        (default: the model's)."""
        weights = self.model if weights is None else weights
        step = self.trainer.step
        self.check_folder()
        save_checkpoint(
            self.out / name,
            weights,
            step=step,
            config=self.saved,
            extra=extra,
            folder=self.fd,
        )

    def validate(self) -> dict[str, float]:
        """Validation metrics; best.pt and the kept checkpoints
        (the evaluation hook)."""
        with run_precision(self.task, self.model):
            metrics = self.task.evaluate(self.model)
        weights, _ = full_state_dicts(self.model)  # FSDP: gathered from every rank
        metric = self.task.score[0]
        earlier = {
            f"{r['step']}": r[metric] for r in self.trainer.rows if metric in r
        }
        improved = self.best_of({**earlier, "now": metrics[metric]}) == "now"
        shown = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items())
        self.say(
            f"step {self.trainer.step}/{self.total}: "
            f"{shown}{'  <- best' if improved else ''}"
        )
        if dist.is_main():
            extra = {"step": self.trainer.step, **metrics}
            if improved:
                self.save_weights(BEST, extra, weights)
            if self.config.keep_last:
                self.save_weights(
                    f"keep-{self.trainer.step:06d}.pt", extra, weights
                )
                for old in self.kept()[: -self.config.keep_last]:
                    os.unlink(*self.here(old.name), dir_fd=self.fd)
        return metrics

    def kept(self) -> list[Path]:
        return sorted(self.out.glob("keep-[0-9][0-9][0-9][0-9][0-9][0-9].pt"))

    def intact(self, paths: list[Path]) -> list[Path]:
        """The checkpoints of ``paths`` that read back intact, with their score
        (:meth:`score_of`); the others are named."""
        good = []
        for path in paths:
            try:
                self.score_of(path)
                good.append(path)
            except CheckpointError as damaged:
                self.say(f"left out of the final choice: {damaged}")
        return good

    def score_of(self, path: Path) -> float:
        """The validation score that a checkpoint the run chose (best.pt, a kept
        one) was saved with; a :class:`CheckpointError` when it is damaged or
        holds none (such as a copy of last.pt)."""
        metric = self.task.score[0]
        score = read_checkpoint(path)["extra"].get(metric)
        if not isinstance(score, int | float) or isinstance(score, bool):
            raise CheckpointError(
                f"{path} holds no validation {metric}: it is not a checkpoint "
                "that the run chose (a copy of another?)"
            )
        return score

    def best_score(self, kept: list[Path]) -> float:
        """best.pt's validation score. A missing or damaged best.pt (or one
        without the score, :meth:`score_of`) is written again from the best intact
        candidate (the ``kept`` checkpoints and the last weights), and said."""
        metric = self.task.score[0]
        try:
            return self.score_of(self.out / BEST)
        except (CheckpointError, FileNotFoundError) as error:
            missing = isinstance(error, FileNotFoundError)
        scores = {p.name: self.score_of(p) for p in kept}
        scores["the last weights"] = self.trainer.rows[-1][metric]  # validated
        pick = self.best_of(scores)
        if pick in {p.name for p in kept}:
            self.check_folder()
            atomic_copy(self.out / pick, self.out / BEST, folder=self.fd)
        else:
            extra = {"step": self.trainer.step, metric: scores[pick]}
            self.save_weights(BEST, extra)
        self.say(
            f"best.pt was {'missing' if missing else 'damaged'}: written again "
            f"from {pick}, the best intact checkpoint ({metric} "
            f"{scores[pick]:.4g}); an earlier best's weights are lost"
        )
        return scores[pick]

    def train(self, max_steps: int | None = None) -> bool:
        """Train to the end of the run (or to ``max_steps``); True
        when the run is complete."""
        stop = self.total if max_steps is None else min(max_steps, self.total)
        if dist.is_main() and self.trainer.step < stop:
            write_provenance(self.out, self.device, self.trainer.step)
        if self.trainer.step == 0:
            c = self.config
            budget = f" or {c.budget_minutes:g} minutes" if c.budget_minutes else ""
            self.say(
                f"{self.task_name} {self.preset}: {self.total} steps{budget} "
                f"({self.steps_per_epoch} per epoch) on {dist.world_size()} "
                f"process(es), {self.device}, {c.precision}; "
                f"{count_parameters(self.model):,} parameters"
            )
        elif self.trainer.step < stop:
            self.say(f"resumed at step {self.trainer.step} of {self.total}")
        self.trainer.fit(
            self.shard,
            stop,
            evaluate=self.validate,
            every=self.every,
            checkpoint_every=self.config.checkpoint_every or self.every,
            progress=self.progress and dist.is_main(),
        )
        self.write_history()
        if not self.trainer.done(self.total):
            self.say(
                f"stopped at step {self.trainer.step} (--max-steps); continue with "
                "--resume"
            )
            return False
        last_row = self.trainer.rows[-1]
        if self.task.score[0] not in last_row:  # the end was not a validation step
            last_row.update(self.validate())
            self.trainer.save()
            self.write_history()
        # finish() runs on rank 0 alone: give it the whole model
        if is_sharded(self.model):
            weights, _ = full_state_dicts(self.model)
            self.model = self.task.build_model().to(self.device)
            if dist.is_main():
                self.model.load_state_dict(weights)
        return True

    def finish(self) -> dict[str, Any]:
        """Choose final.pt, test it, write metrics.json
        (rank 0); returns the metrics.

        ``final="last"``: the weights as training left them.
        ``final="best"``: the better, on the validation score, of best.pt and
        the average of the kept checkpoints.
        """
        metric = self.task.score[0]
        if self.config.final == "last":
            choice = {"last": self.trainer.rows[-1][metric]}
            self.save_weights(FINAL, {"step": self.trainer.step})
        else:  # "best"
            kept = self.intact(self.kept())
            choice = {"best": self.best_score(kept)}
            if len(kept) > 1:
                self.model.load_state_dict(average_checkpoints(kept)[1])
                self.save_weights(AVERAGED, {"averaged": [p.name for p in kept]})
                with run_precision(self.task, self.model):
                    choice["averaged"] = self.task.evaluate(self.model)[metric]
            source = BEST if self.best_of(choice) == "best" else AVERAGED
            self.check_folder()
            atomic_copy(self.out / source, self.out / FINAL, folder=self.fd)
            self.model.load_state_dict(read_checkpoint(self.out / FINAL)["model"])
        pick = self.best_of(choice)
        shown = ", ".join(f"{k} {v:.4g}" for k, v in choice.items())
        self.say(f"final.pt = {pick} (validation {metric}: {shown})")
        with run_precision(self.task, self.model):
            test = self.task.test(self.model)
        numbers = {k: v for k, v in test.items() if isinstance(v, int | float)}
        self.say("test: " + ", ".join(f"{k} {v:.4g}" for k, v in numbers.items()))
        metrics = {
            **run_config(self.task_name, self.preset, self.config),
            "steps": self.trainer.step,
            "train_seconds": round(float(self.trainer.rows[-1]["seconds"]), 1),
            "parameters": count_parameters(self.model),
            "final": pick,
            "validation": {k: float(v) for k, v in choice.items()},
        }
        metrics = records.file_scores(metrics, test)
        self.check_folder()
        write_json(self.out / METRICS, metrics, folder=self.fd)
        return metrics


def train(
    task: str,
    out: str | Path,
    *,
    preset: str | None = None,
    settings: list[str] | tuple[str, ...] = (),
    resume: bool = False,
    max_steps: int | None = None,
    data_dir: str | Path | None = None,
    device: str = "auto",
    progress: bool = True,
    echo: bool = True,
) -> RunResult | None:
    """Train (or resume) a run; returns it when finished, None when
    stopped by ``max_steps``."""
    if resume and (preset is not None or settings):
        raise ValueError(
            "--resume continues the run with its saved settings: drop "
            "--preset/--set"
        )
    config = None if resume else new_config(task, preset or "tiny", settings)
    out = Path(out)
    try:
        with holding(out) as folder:
            run = Run(
                task,
                out,
                preset=preset or "tiny",
                config=config,
                resume=resume,
                data_dir=data_dir,
                device=device,
                progress=progress,
                echo=echo,
                folder=folder,
            )
            if folder.stale:
                names = ", ".join(path.name for path in folder.stale)
                run.say(f"removed what a killed write left unfinished: {names}")
            if not run.train(max_steps):
                return None
            metrics = run.finish() if dist.is_main() else {}
            # leave together: a rank that tears down early can abort gloo's threads
            dist.barrier()
            history = run.trainer.history
            # in eval mode, as a loaded run is: no dropout in what a chapter draws
            return RunResult(run.out, run.task, run.model.eval(), history, metrics)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(resume_hint(out)) from None
    finally:
        dist.cleanup()


@dataclass
class Folder:
    """The folder a run trains in, held open (and locked) by :func:`holding`:
    ``path`` where it was, ``fd`` the folder itself, ``stale`` the temporary files
    that killed writers left there (removed)."""

    path: Path
    fd: int
    stale: list[Path]

    def check(self) -> None:
        """Refuse in one line to write on when the folder is no longer at
        ``path`` (moved or deleted while the run trained): the run would write
        into a new folder at the old path, unlocked, and end split across two."""
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(self.fd), os.stat(self.path)):
                return
        where = Path(f"/proc/self/fd/{self.fd}")  # Linux: the folder's path now
        now = os.readlink(where) if where.is_symlink() else "elsewhere"
        raise ValueError(
            f"the run's folder {self.path} was moved to {now} while it trained: "
            "it stops here, its checkpoints intact there; continue it there with "
            "--resume (--out the new place)"
        )


@contextlib.contextmanager
def holding(out: Path) -> Iterator[Folder]:
    """Train in the folder ``out`` alone: an exclusive OS lock on it (``flock``) for
    the run's life, refused in one line while another process holds it; the OS
    releases it however the process ends, so a killed run leaves nothing stale.
    The lock is on the folder, not its path: what it yields, a :class:`Folder`,
    says (:meth:`Folder.check`) when the folder has moved.

    Removes the temporary files of writes that a killed process left
    (``.NAME.PID.RANDOM.at-tmp``, a name only this package makes;
    :func:`~annotated_transformer.files.is_stale`): no writer is left to finish
    them; a live writer's, and every other file, are left alone. Under torchrun,
    rank 0 locks; without ``fcntl`` (Windows) nothing is locked. A folder created
    here and still empty at the end (a run refused at its start) is removed
    again."""
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    folder = os.open(out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    locked = False
    try:
        stale: list[Path] = []
        if fcntl is not None and os.environ.get("RANK", "0") == "0":
            try:
                fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
                # the folder locked is still the one at ``out`` (not removed since)
                locked = os.path.samestat(os.fstat(folder), os.stat(out))
            except (BlockingIOError, FileNotFoundError):
                pass
            if not locked:
                raise ValueError(
                    f"{out} is in use by another training run: wait for it to end, "
                    "or train into another --out"
                )
            stale = sorted(p for p in out.glob(f".*{TEMPORARY}") if is_stale(p))
            for path in stale:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path.name, dir_fd=folder)
        yield Folder(out, folder, stale)
    finally:
        if created and locked:
            with contextlib.suppress(OSError):
                if os.path.samestat(os.fstat(folder), os.stat(out)):  # not moved
                    out.rmdir()  # only when empty: nothing was written
        os.close(folder)


def resume_hint(out: Path) -> str:
    """What an interrupted run in ``out`` leaves: the checkpoint to resume from, if
    there is one."""
    found = [path for path in (out / LAST, previous(out / LAST)) if path.is_file()]
    if found:
        return f"the last checkpoint, {found[0]}, is intact: continue with --resume"
    again = "start the run again (without --resume)"
    return f"no checkpoint was written in {out} yet: {again}"


def ensure_run(
    task: str,
    preset: str,
    out: str | Path,
    *,
    settings: list[str] | tuple[str, ...] = (),
    data_dir: str | Path | None = None,
    fresh: bool = False,
    weights: bool = True,
) -> RunResult:
    """A finished run of ``preset`` (with ``settings``) in ``out``:
    reused, resumed or trained.

    What the chapters call. A record of this config with published weights
    (``results/``, :mod:`annotated_transformer.records`) is loaded first, untrained.
    ``weights=False`` says that the caller needs only the run's history and
    metrics (curves, a table of final figures, ``metrics["parameters"]``): a
    record without weights is then loaded too, as a result with no model
    (:class:`RunResult`). A finished run (``metrics.json``; e.g. trained
    beforehand with ``python -m annotated_transformer TASK train --out``, on all
    cores) is loaded; an interrupted one is resumed; otherwise it is trained here,
    quietly (its log is in ``out/train.log``). A folder that holds a run of
    another configuration is refused rather than passed off as this one.
    ``fresh`` deletes ``out`` first (CI: the same run every time).
    """
    out = Path(out)
    if fresh:
        shutil.rmtree(out, ignore_errors=True)
    wanted = new_config(task, preset, settings)
    record = None
    if not fresh:
        record = records.matching_record(task, preset, wanted, weights=weights)
    if record is not None:  # a recorded run of this config: never retrained
        return records.load_result(record, data_dir=data_dir, weights=weights)
    last = out / LAST
    if last.is_file() and not same_run(
        read_checkpoint(last)["config"], task, preset, wanted, source=last
    ):
        raise ValueError(
            f"{out} holds a run of another configuration: delete it, or train into "
            "another folder"
        )
    if not (out / METRICS).is_file():
        result = train(
            task,
            out,
            preset=None if last.is_file() else preset,
            settings=() if last.is_file() else settings,
            resume=last.is_file(),
            data_dir=data_dir,
            progress=False,
            echo=False,
        )
        assert result is not None
        return result
    return retest(load_run(out, data_dir=data_dir), wanted)


def retest(result: RunResult, wanted: Any) -> RunResult:
    """``result`` tested again under ``wanted``'s test-only settings when they
    differ from the run's (e.g. another beam size): its metrics.json gets the new
    settings and test scores."""
    changes = test_settings(wanted)
    saved = result.metrics["config"]
    if all(saved.get(k) == v for k, v in changes.items()):
        return result
    result.task.config = dataclasses.replace(result.task.config, **changes)
    metrics = {**result.metrics, "config": {**saved, **changes}}
    with run_precision(result.task, result.model):
        metrics = records.file_scores(metrics, result.task.test(result.model))
    write_json(result.out / METRICS, metrics)
    return dataclasses.replace(result, metrics=metrics)


def load_run(out: str | Path, *, data_dir: str | Path | None = None) -> RunResult:
    """A finished run's folder as a :class:`RunResult` (final
    weights, in eval mode)."""
    out = Path(out)
    task, model = load_model(out / FINAL, data_dir=data_dir)
    metrics = records.read_metrics(out / METRICS)
    with open_regular(out / "history.csv", out) as f:  # never a FIFO or a link out
        history = pd.read_csv(f)
    return RunResult(out, task, model, history, metrics)


def load_model(
    checkpoint: str | Path | Sequence[str | Path],
    *,
    data_dir: str | Path | None = None,
    device: str = "cpu",
) -> tuple[Task, nn.Module]:
    """The task (with its saved vocabulary) and the model (eval mode) of a run's
    checkpoint or a run record with weights (``results/NAME``,
    :func:`~annotated_transformer.training.published.read_weights`); given
    several, their :func:`~annotated_transformer.training.checkpoints.model_soup`
    with the first one's task and settings."""
    if isinstance(checkpoint, str | Path):
        state = read_weights(checkpoint)
    else:
        config, weights = model_soup(checkpoint, read=read_weights)
        state, checkpoint = {"config": config, "model": weights}, checkpoint[0]
    cls, _, config, saved_state = saved_run(state["config"], checkpoint)
    task = restored_task(cls, config, saved_state, checkpoint, data_dir=data_dir)
    model = task.build_model()
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as error:
        raise CheckpointError(
            f"{checkpoint}: its weights do not fit its own config "
            f"({str(error).splitlines()[0]})"
        ) from error
    return task, model.to(pick_device(device)).eval()


def rows_with(history: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows of a run's history where ``column`` was
    measured (e.g. validations)."""
    return history.dropna(subset=[column]).reset_index(drop=True)
