"""Run records: finished runs promoted into ``results/NAME``, the book's figures.

A run's folder (``runs/X``) holds pickled checkpoints of a few hundred MB and is
not kept; its record, plain text plus safetensors, is small enough to commit and
enough to cite, check and reuse the run:

- ``record.json``: the resolved config, the exact command, the git commit, the
  machine (CPU or GPU, threads, torch's kernels, precision, torch version), the
  training wall time, the run's ``metrics.json`` as it was, the headline figure,
  with published weights a score they give on a small fixed subset, and the
  sha256 of every other file (``checksums``), checked whenever one is read;
- ``history.csv`` and ``train.log``, copied;
- ``state.json``: what the task learned before training (vocabularies, merges);
- with ``--weights``: ``model.safetensors`` (``--half``: float16 parameters,
  accepted only when the full test scored from them gives the run's figure).

``python -m annotated_transformer record runs/X --name X [--weights]`` writes
one (``record results/X --name X --weights --half --replace`` stores a record's
float32 weights in float16, on the same condition). :func:`matching_record` lets
``ensure_run`` load a record instead of training a run of the same config (one
without weights too, where a chapter needs only the history and metrics);
:func:`read_weights` gives a record's weights wherever a run's checkpoint is read
(``predict``, ``evaluate --checkpoint results/X``, several for a model soup, and
``classify --set init=results/X``).

A run's folder is read as data: no program runs in it (the commit comes from its
provenance or this program's checkout) and only its regular files are opened. A
record is written whole and alone: under a lock on its name, into a folder only
that command names, put in place once complete.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from safetensors.torch import save
from torch import nn

from annotated_transformer.data.download import sha256_of
from annotated_transformer.files import (
    atomic_copy,
    atomic_write,
    open_regular,
    read_json,
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
from annotated_transformer.machine import (
    PROVENANCE,
    describe,
    git_commit,
    machine_fits,
    read_provenance,
    resumed_fits,
)
from annotated_transformer.paths import results_dir
from annotated_transformer.tasks import PRESETS, TASKS, Task
from annotated_transformer.tasks.base import flat_settings, saved_config
from annotated_transformer.training.checkpoints import read_checkpoint
from annotated_transformer.training.published import (
    CHECKSUMS,
    RECORD,
    RESTORE,
    STATE,
    WEIGHTS,
    RecordError,
    checksums,
    is_record,
    no_weights,
    read_checked,
    read_record,
    read_state,
    read_weights,
    tensors,
)

try:
    import fcntl  # POSIX: the lock that keeps one record command per name
except ImportError:  # Windows: a lock file made with O_EXCL
    fcntl = None

COPIED = ("history.csv", "train.log")
FINAL = "final.pt"

# The figure a run is cited by: (key of its final scores, decimals shown).
HEADLINE = {
    "classify": ("accuracy", 4),
    "translate": ("bleu", 2),
    "lm": ("bits_per_byte", 3),
    "mlm": ("accuracy", 4),
}

# The splits whose final scores are filed as ``validation``: a language model or a
# masked LM without a test split of its own is scored on its validation split.
VALIDATION_SPLITS = ("val",)

# The subset a published model is scored on, fast enough for a unit test: the
# settings applied to its config, the task's method that scores, the figure's key.
SUBSETS: dict[str, tuple[dict[str, Any], str, str]] = {
    "classify": ({"test_subset": 200}, "test", "accuracy"),
    "translate": ({"eval_limit": 100, "beam": 1}, "test", "bleu"),
    "lm": ({"eval_bytes": 16_384}, "evaluate", "val_bpb"),
    "mlm": ({}, "evaluate", "val_accuracy"),
}


def all_records(root: str | Path | None = None) -> list[tuple[Path, dict]]:
    """Every record under ``root`` (default :func:`results_dir`), by name."""
    root = Path(root) if root is not None else results_dir()
    found = sorted(root.glob(f"*/{RECORD}"))
    return [(path.parent, _read(path.parent)) for path in found]


def _read(folder: Path) -> dict[str, Any]:
    """A record, its final scores named by their split (:func:`current`)."""
    record = read_record(folder)
    record["metrics"] = current(record["metrics"])
    fits = "machine" not in record or machine_fits(record["machine"])
    if not fits or not resumed_fits(record.get("resumed")):
        raise RecordError(
            f"{folder / RECORD} has a wrong machine or resumed; {RESTORE}"
        )
    if "headline" in record:
        check_metrics(record["metrics"], folder / RECORD, RESTORE)
        metric, value = headline(record)
        record["headline"] = {"metric": metric, "value": value}
    return record


# ------------------------------------------------------------- recording a run


def scored_section(metrics: dict[str, Any]) -> str:
    """The section of a run's metrics that holds its final scores, named by the
    split they scored: ``test``, or ``validation`` (``VALIDATION_SPLITS``)."""
    return "test" if "test" in metrics else "validation"


def file_scores(metrics: dict[str, Any], scores: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` with the final ``scores`` filed under the split they scored:
    ``test``, or beside the validation scores that chose the final weights.

    The one place that knows the old name too: metrics written before the split
    named its section filed every final score as ``test``; ``current`` refiles
    them through here."""
    kept = {k: v for k, v in metrics.items() if k != "test"}
    if scores.get("split") in VALIDATION_SPLITS:
        renamed = {k.removeprefix("val_"): v for k, v in scores.items()}
        return kept | {"validation": kept.get("validation", {}) | renamed}
    return kept | {"test": scores}


def current(metrics: dict[str, Any]) -> dict[str, Any]:
    """A run's metrics with its final scores under the name of the split they
    scored (:func:`file_scores`), whichever way they were written."""
    scores = metrics.get("test")
    if isinstance(scores, dict) and scores.get("split") in VALIDATION_SPLITS:
        return file_scores(metrics, scores)
    return metrics


def headline(record: dict[str, Any]) -> tuple[str, float]:
    """The figure a record is cited by: its name (``test.accuracy``,
    ``validation.bits_per_byte``), value."""
    key, _ = HEADLINE[record["task"]]
    metrics = current(record["metrics"])
    section = scored_section(metrics)
    return f"{section}.{key}", float(metrics[section][key])


def lookup(record: dict[str, Any], path: str) -> Any:
    """A value of ``record`` by a dotted path, e.g. ``metrics.test.bleu``."""
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(f"record {record.get('name')!r} has no {path!r}")
        value = value[part]
    return value


def train_command(saved: dict[str, Any], name: str, threads: int | None) -> str:
    """The ``train`` command that writes this run: its preset and the settings
    that differ from it (``precision=auto`` counts as whatever it became)."""
    task, preset, config = saved["task"], saved["preset"], saved["config"]
    if preset not in PRESETS[task]:
        raise RecordError(
            f"the run's preset {preset!r} is none of {task}'s "
            f"({', '.join(PRESETS[task])}): give its train command with --command"
        )
    base = flat_settings(PRESETS[task][preset])
    words = ["python -m annotated_transformer", task, "train", "--preset", preset]
    for key, value in config.items():
        resolved = key == "precision" and base[key] == "auto"
        if base.get(key) != value and not resolved:
            words += ["--set", f"{key}={'none' if value is None else value}"]
    words += ["--out", f"runs/{name}"]
    return " ".join(words + ([f"--threads {threads}"] if threads else []))


def _start_line(log: Path) -> dict[str, Any]:
    """Processes, device and precision from a run's first train.log line."""
    if not log.is_file():
        return {}
    with open_regular(log, log.parent) as f:
        text = f.read().decode(errors="replace")
    found = re.search(r"on (\d+) process\(es\), (\w+)\S*, (\w+);", text)
    if not found:
        return {}
    return {"processes": int(found[1]), "device": found[2], "precision": found[3]}


def _weights(model: nn.Module, half: bool) -> tuple[dict[str, torch.Tensor], dict]:
    """The model's state dict for safetensors: a tensor shared by two names
    (tied embeddings) stored once, the other name kept as an alias; ``half``:
    float parameters in float16 (buffers keep their type)."""
    params = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    tensors, aliases, seen = {}, {}, {}
    for name, value in model.state_dict().items():
        storage = value.untyped_storage().data_ptr()
        key = (storage, value.storage_offset(), value.shape)
        if key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        if half and name in params and value.is_floating_point():
            value = value.half()
        tensors[name] = value.detach().cpu().contiguous()
    return tensors, aliases


# What a finished run's metrics hold, and of what type.
METRICS_KEYS = {
    "task": str,
    "preset": str,
    "config": dict,
    "train_seconds": (int, float),
    "steps": int,
    "parameters": int,
}


def check_metrics(metrics: dict[str, Any], path: Path, fix: str) -> None:
    """Refuse in one line naming ``path`` (ending with ``fix``) metrics that are
    not a finished run's: a part of :data:`METRICS_KEYS` missing or of another
    type, no known task, or final scores without their split and figure."""
    for key, kind in METRICS_KEYS.items():
        value = metrics.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            what = "lacks" if key not in metrics else "has a wrong"
            raise RecordError(f"{path} {what} {key!r}: {fix}")
    if metrics["task"] not in HEADLINE:
        raise RecordError(f"{path} names no task ({metrics['task']!r}): {fix}")
    key, _ = HEADLINE[metrics["task"]]
    section = scored_section(metrics)
    final = metrics.get(section)
    scored = isinstance(final, dict) and "split" in final
    if not scored or not isinstance(final.get(key), int | float):
        raise RecordError(f"{path} has no final {section} {key}: {fix}")


def read_metrics(path: str | Path) -> dict[str, Any]:
    """A run's ``metrics.json``, its scores filed under the split they scored
    (:func:`current`); a damaged one is one line that names it."""
    fix = (
        "the run writes it when it finishes: delete it, then finish the run "
        "again with train --resume"
    )
    return current(read_json(path, fix, inside=Path(path).parent))


def _finished_metrics(run: Path) -> dict[str, Any]:
    """The metrics of the finished run in ``run``; a RecordError for anything
    else (a run still training, stopped, failed, or no run at all)."""
    metrics_file = run / "metrics.json"
    if not run.is_dir():
        raise RecordError(f"{run} is not a run's folder: give runs/X (see train)")
    if not metrics_file.is_file() or not (run / FINAL).is_file():
        raise RecordError(
            f"{run} is not a finished run (no metrics.json or final.pt): it is "
            "still training, was stopped or failed; finish it with --resume first"
        )
    metrics = read_metrics(metrics_file)
    check_metrics(metrics, metrics_file, "not a finished run's metrics")
    return metrics


def _machine(run: Path, provenance: dict, threads: int | None) -> dict[str, Any]:
    """The machine that trained ``run``: from its provenance, or else this one
    (a run from before provenance files is recorded where it was trained)."""
    started = _start_line(run / "train.log")
    machine = provenance.get("machine")
    if machine is None:
        if threads is None:
            raise RecordError(
                f"{run} has no {PROVENANCE} (an older run): on the machine that "
                "trained it, say how many threads it used with --threads N"
            )
        device = started.get("device", "cpu")
        try:
            machine = describe(device) | {"threads": threads}
        except (RuntimeError, AssertionError) as error:  # torch's, for a device
            raise RecordError(
                f"{run / 'train.log'} says the run trained on {device!r}, which "
                f"this machine lacks ({error}): record it where it was trained"
            ) from None
    return machine | {"processes": started.get("processes", 1)}


def record_run(
    run: str | Path,
    name: str,
    *,
    weights: bool = False,
    half: bool = False,
    threads: int | None = None,
    command: str | None = None,
    root: str | Path | None = None,
    replace: bool = False,
    data_dir: str | Path | None = None,
    say: Callable[[str], None] = print,
) -> Path:
    """Promote the finished run in ``run`` into ``root/name`` (module doc).

    The machine, command, commit and threads come from the run's
    ``provenance.json`` (written when it started); a run trained before there
    was one is recorded on the machine that trained it, with ``threads`` given
    and the commit of the code that records it. Refuses an unfinished or failed
    run, ``half`` weights that do not reproduce the run's test figure, a name in
    use (unless ``replace``; even then anything but a record, and the run being
    recorded), and a name another command is recording at the same time.
    """
    run = Path(run)
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
        raise RecordError(f"--name {name!r}: use a-z, 0-9, '.', '_' and '-'")
    if half and not weights:
        raise RecordError("--half stores the weights in float16: add --weights")
    out = (Path(root) if root is not None else results_dir()) / name
    with _exclusive(out):
        if out.exists() or out.is_symlink():
            _replaceable(out, run, replace)
        if is_record(run):
            if not half:
                raise RecordError(
                    f"{run} is a record: a record is recorded again only to store "
                    "its weights in float16 (--weights --half)"
                )
            return _halved(run, out, data_dir=data_dir, say=say)
        options = {"weights": weights, "half": half, "threads": threads}
        return _recorded(run, out, command, data_dir, say, **options)


def _recorded(
    run: Path,
    out: Path,
    command: str | None,
    data_dir: str | Path | None,
    say: Callable[[str], None],
    *,
    weights: bool,
    half: bool,
    threads: int | None,
) -> Path:
    """:func:`record_run` of the finished run in ``run``, ``out`` free to write."""
    metrics = _finished_metrics(run)
    cls = TASKS[metrics["task"]]
    settings = saved_config(cls.Config, metrics["config"], run / "metrics.json")
    saved = read_checkpoint(run / FINAL)
    saved_run(saved["config"], run / FINAL)  # fits this version
    origin = run / PROVENANCE
    provenance = read_provenance(origin) if origin.is_file() else {}
    machine = _machine(run, provenance, threads)
    rebuilt = train_command(saved["config"], out.name, machine["threads"])
    record: dict[str, Any] = {
        "name": out.name,
        "task": metrics["task"],
        "preset": metrics["preset"],
        "config": metrics["config"],
        "command": command or provenance.get("command") or rebuilt,
        # the run's own provenance, else the code that records it: a run's
        # folder is data, no program runs in it
        "git": provenance["git"] if "git" in provenance else git_commit(),
        "machine": machine,
        "resumed": provenance.get("resumed") or None,
        "precision": settings.precision,
        "train_seconds": metrics["train_seconds"],
        "train_minutes": round(metrics["train_seconds"] / 60, 1),
        "steps": metrics["steps"],
        "parameters": metrics["parameters"],
        "metrics": metrics,
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    figure, value = headline(record)
    record |= {"headline": {"metric": figure, "value": value}, "weights": None}

    def write(tmp: Path) -> None:
        for file in COPIED:
            if (run / file).exists() or (run / file).is_symlink():
                atomic_copy(run / file, tmp / file, inside=run)
        # plain text, with or without weights: a record read for its figures
        # alone rebuilds its task from it, without the data
        state_text = json.dumps(saved["config"]["state"], ensure_ascii=False)
        atomic_write(tmp / STATE, f"{state_text}\n".encode())
        if weights:
            options = {"half": half, "data_dir": data_dir, "say": say}
            published = _publish(saved, metrics, tmp, run / FINAL, **options)
            record["weights"], record["subset"] = published
        write_json(tmp / RECORD, record | {CHECKSUMS: checksums(tmp)})

    return _swap_in(out, write)


@contextmanager
def _exclusive(out: Path) -> Iterator[None]:
    """Hold the lock on the record ``out`` (the file ``.NAME.lock`` beside it,
    removed when done): a second command recording the same name meanwhile is
    refused in one line. POSIX: an OS lock (``flock``), which a kill releases;
    elsewhere the file's exclusive creation."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = out.with_name(f".{out.name}.lock")
    busy = RecordError(
        f"{out} is being recorded by another command right now: let it finish, "
        "then run this one again"
    )
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(lock, flags | (0 if fcntl else os.O_EXCL), 0o666)
    except FileExistsError:
        raise busy from None
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise busy from None
            # still the file there: a command that held it removes it first
            there = os.stat(lock, follow_symlinks=False)
            if not os.path.samestat(os.fstat(fd), there):
                raise busy
        try:
            yield
        finally:
            lock.unlink()
    finally:
        os.close(fd)


def _replaceable(out: Path, run: Path, replace: bool) -> None:
    """Refuse, in one line, to replace ``out``: without ``replace``; when it is
    the run being recorded or holds it (not a record halved in its place); when
    it is not a record."""
    if not replace:
        raise RecordError(f"{out} exists: choose another --name, or --replace")
    source = run.resolve()
    if source.is_relative_to(out.resolve()) and not (
        source == out.resolve() and is_record(run)
    ):
        raise RecordError(
            f"{out} is the run being recorded (or holds it): --replace would "
            "delete it; record it under another --name or --results"
        )
    try:
        if out.is_symlink() or not out.is_dir():
            raise RecordError("not a folder")
        read_record(out)
    except ValueError as error:  # a RecordError, or a damaged record.json
        raise RecordError(
            f"{out} is not a record ({error}): --replace replaces only a record; "
            "choose another --name"
        ) from None


def _swap_in(out: Path, write: Callable[[Path], None]) -> Path:
    """Write a record into a new folder beside ``out``, then put it in ``out``'s
    place: a failure or a kill leaves ``out`` as it was.

    The work happens in a folder whose name only this call makes
    (``.NAME.XXXXXXXX.record``): the record is written in it as ``new``; once
    complete, the old record is moved into it as ``old``, ``new`` takes ``out``'s
    place, and the work folder (the old record with it) is removed."""
    work = Path(
        tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".record", dir=out.parent)
    )
    new, old = work / "new", work / "old"
    new.mkdir(mode=0o777)
    try:
        write(new)
        if out.exists() or out.is_symlink():
            out.rename(old)
        try:
            new.rename(out)
        except BaseException:
            if old.exists():
                old.rename(out)
            raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _halved(
    folder: Path,
    out: Path,
    *,
    data_dir: str | Path | None,
    say: Callable[[str], None],
) -> Path:
    """The record in ``folder`` with its float32 weights stored in float16 instead,
    into ``out`` (``folder`` itself, with ``--replace``): refused, as for a run,
    unless the full test from the float16 weights gives the record's figure."""
    record = _read(folder)
    if (record.get("weights") or {}).get("dtype") != "float32":
        raise RecordError(f"{folder} has no float32 weights to store in float16")
    # read (and checked) before ``out`` (maybe ``folder``) is replaced
    saved = read_weights(folder)
    copied = {
        file: read_checked(folder, file, record)
        for file in (*COPIED, STATE)
        if file in record.get(CHECKSUMS, {})
    }

    def write(tmp: Path) -> None:
        for file, data in copied.items():
            atomic_write(tmp / file, data)
        options = {"half": True, "data_dir": data_dir, "say": say}
        published = _publish(saved, record["metrics"], tmp, folder, **options)
        record["weights"], record["subset"] = published
        sums = {CHECKSUMS: checksums(tmp)}
        write_json(tmp / RECORD, record | {"name": out.name} | sums)

    return _swap_in(out, write)


def _publish(
    saved: dict[str, Any],
    metrics: dict[str, Any],
    folder: Path,
    source: Path,
    *,
    half: bool,
    data_dir: str | Path | None,
    say: Callable[[str], None],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write the weights read from ``source`` into ``folder`` (which holds the
    task's state); returns the record's ``weights`` and ``subset`` entries."""
    config = saved["config"]
    task_name, settings = config["task"], config["config"]
    cls, _, checked, state = saved_run(config, source)
    model = restored_task(cls, checked, state, source).build_model()
    try:
        model.load_state_dict(saved["model"])
    except RuntimeError as error:  # names missing, or shapes of another model
        raise RecordError(
            f"{source}: its weights do not fit its own config "
            f"({str(error).splitlines()[0]})"
        ) from None
    tensors, aliases = _weights(model, half)
    path = folder / WEIGHTS
    data = save(tensors, metadata={"aliases": json.dumps(aliases)})
    atomic_write(path, data)  # as every file: a full disk is one line
    entry = {
        "file": WEIGHTS,
        "dtype": "float16" if half else "float32",
        "bytes": path.stat().st_size,
        "sha256": sha256_of(path),
    }
    if half:  # the final scores from the stored weights must give the run's figure
        key, decimals = HEADLINE[task_name]
        section = scored_section(metrics)
        say(f"scoring the full {section} from the float16 weights ...")
        task, published = _load(folder, task_name, settings, data_dir)
        with run_precision(task, published):
            again = file_scores({}, task.test(published))[section][key]
        reported = metrics[section][key]
        if round(again, decimals) != round(reported, decimals):
            raise RecordError(
                f"the float16 weights score {key} {again:.{decimals + 2}f}, the "
                f"run {reported:.{decimals + 2}f}: publish float32 (drop --half)"
            )
        entry["test_rescored"] = {key: again}
    changes, method, key = SUBSETS[task_name]
    say(f"scoring the published weights on a subset ({changes or 'validation'})")
    task, published = _load(folder, task_name, settings, data_dir, changes=changes)
    with run_precision(task, published):
        value = float(getattr(task, method)(published)[key])
    subset = {"settings": changes, "method": method, "metric": key, "value": value}
    return entry, subset


# ------------------------------------------------------------- reading records


def load_model(
    folder: str | Path,
    *,
    data_dir: str | Path | None = None,
    device: str = "cpu",
    settings: dict[str, Any] | None = None,
) -> tuple[Task, nn.Module]:
    """The task (with the record's vocabularies) and the published model (eval
    mode) of the record in ``folder``; ``settings`` change the task's config
    (e.g. a subset)."""
    folder = Path(folder)
    record = read_record(folder)
    if record.get("weights") is None:
        raise no_weights(folder, record)
    task, config = record["task"], record["config"]
    return _load(folder, task, config, data_dir, device, settings)


def _task(
    folder: Path,
    task_name: str,
    config: dict[str, Any],
    data_dir: str | Path | None = None,
    changes: dict[str, Any] | None = None,
) -> Task:
    """The task of a record's run, with the vocabularies of its ``state.json``
    (a record without one, from before every record kept it: learned from the
    data again, as the run did)."""
    if task_name not in TASKS:
        named = f"names no task ({task_name!r})"
        raise RecordError(f"{folder / RECORD} {named}: {RESTORE}")
    cls = TASKS[task_name]
    saved = saved_config(cls.Config, config, folder / RECORD)
    config = dataclasses.replace(saved, **(changes or {}))
    state = read_state(folder, read_record(folder)) if is_record(folder) else None
    if state is None and (folder / STATE).exists():  # a record being written
        state = read_json(folder / STATE, RESTORE, inside=folder)
    return restored_task(cls, config, state, folder / STATE, data_dir=data_dir)


def _load(
    folder: Path,
    task_name: str,
    config: dict[str, Any],
    data_dir: str | Path | None = None,
    device: str = "cpu",
    changes: dict[str, Any] | None = None,
) -> tuple[Task, nn.Module]:
    """:func:`load_model` from a record's parts (also while it is written)."""
    task = _task(folder, task_name, config, data_dir, changes)
    model = task.build_model()
    try:
        model.load_state_dict(tensors(folder))
    except RuntimeError as error:  # names missing, or shapes of another model
        raise RecordError(
            f"{folder / WEIGHTS}: the weights do not fit the record's config "
            f"({str(error).splitlines()[0]}); {RESTORE}"
        ) from None
    return task, model.to(device).eval()


def matching_record(
    task: str,
    preset: str,
    wanted: Any,
    root: str | Path | None = None,
    *,
    weights: bool = True,
) -> Path | None:
    """The record of a run of ``task``/``preset`` whose config is ``wanted``
    (test settings included; ``precision=auto`` matches what it became), or
    None: what ``ensure_run`` loads instead of training. ``weights``: only a
    record that publishes them; False: one without counts too (its history and
    metrics are all that is asked for)."""
    tests = test_settings(wanted)
    for folder, record in all_records(root):
        if weights and record.get("weights") is None:
            continue
        saved = {k: record[k] for k in ("task", "preset", "config")}
        same_tests = all(record["config"].get(k) == v for k, v in tests.items())
        source = folder / RECORD
        if same_tests and same_run(saved, task, preset, wanted, source=source):
            return folder
    return None


def load_result(
    folder: str | Path,
    *,
    data_dir: str | Path | None = None,
    weights: bool = True,
) -> RunResult:
    """A record as the ``RunResult`` a chapter gets from ``ensure_run``: the
    published model, the run's history and metrics (``metrics["parameters"]``:
    its parameter count); ``out`` is the record. ``weights=False`` reads a
    record without weights too: its result has no model (reading ``model``
    raises :func:`no_weights`'s error), its task is rebuilt from ``state.json``.
    A record with weights always gives its model."""
    folder = Path(folder)
    record = _read(folder)
    model: nn.Module | None = None
    if record.get("weights") is not None or weights:
        task, model = load_model(folder, data_dir=data_dir)
    else:
        task = _task(folder, record["task"], record["config"], data_dir)
    history = _history(folder, record)
    return RunResult(folder, task, model, history, record["metrics"])


def _history(folder: Path, record: dict[str, Any]) -> pd.DataFrame:
    """The record's ``history.csv`` (checked), one line when it is not a table."""
    data = read_checked(folder, "history.csv", record)
    try:
        return pd.read_csv(io.BytesIO(data))
    except ValueError as error:  # pandas' parser errors are ValueErrors
        problem = " ".join(str(error).split())
        raise RecordError(
            f"{folder / 'history.csv'}: {problem}; {RESTORE}"
        ) from None


def _where(machine: dict[str, Any]) -> str:
    """GPU or CPU and threads, e.g. ``AMD EPYC (family 25, model 17), 1 thread``."""
    threads = machine.get("threads")
    counted = f", {threads} thread{'s' if threads != 1 else ''}" if threads else ""
    return f"{machine.get('gpu') or machine['cpu']}{counted}"


def machine_line(record: dict[str, Any]) -> str:
    """The machine in a few words: GPU or CPU, threads, precision; and where a
    run resumed elsewhere, from which step on what."""
    later = "".join(
        f"; from step {part['step']:,}: {_where(part['machine'])}"
        for part in record.get("resumed") or []
    )
    return f"{_where(record['machine'])}, {record['precision']}{later}"
