"""A finished run as the runner and the records read it back: what its
checkpoint (or record) says about its run, the precision its model runs in, and
the result a chapter gets.

A run's ``final.pt``, ``last.pt`` and a record's ``record.json`` all save the
run's task, preset, config and state. :func:`saved_run` reads them, checked
against this version of the package; :func:`same_run` says whether they are the
run a chapter asks for (:func:`test_settings`, how a finished model is tested,
do not count). :func:`run_precision` is the precision every evaluation, test
and prediction of a run's model runs in, and :class:`RunResult` what
:func:`~annotated_transformer.runner.ensure_run` returns, from a run's folder
(:mod:`annotated_transformer.runner`) or a record
(:mod:`annotated_transformer.records`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from torch import nn

from annotated_transformer.machine import PROVENANCE, read_provenance
from annotated_transformer.tasks import TASKS, Task
from annotated_transformer.tasks.base import saved_config
from annotated_transformer.training.checkpoints import CheckpointError
from annotated_transformer.training.precision import precision_context
from annotated_transformer.training.published import (
    STATE,
    is_record,
    no_weights,
    read_record,
)


def saved_run(
    saved: Any, source: str | Path
) -> tuple[type[Task], str, Any, dict[str, Any]]:
    """What a run's checkpoint (or a record) in the file ``source`` says about its
    run, checked against this version of the package: its task's class, preset,
    config and state (what the task learned before training). One line names the
    file when it does not fit (:func:`~.tasks.base.saved_config`)."""
    if not isinstance(saved, dict) or saved.get("task") not in TASKS:
        raise CheckpointError(
            f"{source} is a checkpoint, but not one a run wrote (its config "
            "names no task): pass the final.pt, best.pt or last.pt of a run's "
            "folder"
        )
    parts = {"preset": str, "config": dict, "state": dict}
    missing = [k for k, kind in parts.items() if not isinstance(saved.get(k), kind)]
    if missing:
        raise CheckpointError(
            f"{source} lacks its run's {' and '.join(missing)} (damaged, or "
            "written by another version of this package): use another "
            "checkpoint, or train again"
        )
    cls = TASKS[saved["task"]]
    config = saved_config(cls.Config, saved["config"], source)
    return cls, saved["preset"], config, saved["state"]


def restored_task(
    cls: type[Task],
    config: Any,
    state: Any,
    source: str | Path,
    *,
    data_dir: str | Path | None = None,
) -> Task:
    """The task ``cls`` with ``config``, restored from the ``state`` it learned
    before training (read from ``source``: a checkpoint, a record's
    ``state.json``); None: learned from the data again. A state that the task
    cannot take, or that does not give itself back (``task.state()``), is one
    line that names ``source``."""
    if is_record(source):  # a record's state is its state.json
        source = Path(source) / STATE
    wrong = f"{source} does not hold what a {cls.name} task learned"
    fix = "(damaged, or written by another version): use another, or train again"
    if state is None:
        return cls(config, data_dir=data_dir)
    try:
        task = cls(config, data_dir=data_dir, state=state)
        again = json.loads(json.dumps(task.state()))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        raise CheckpointError(
            f"{wrong} ({type(error).__name__}: {error}) {fix}"
        ) from None
    if again != state:
        raise CheckpointError(f"{wrong} {fix}")
    return task


def same_run(
    saved: dict[str, Any],
    task: str,
    preset: str,
    wanted: Any,
    *,
    source: str | Path,
) -> bool:
    """Is ``saved`` (the config of a checkpoint, ``metrics.json`` or record: the
    file ``source``) a run of ``task``/``preset`` with config ``wanted``?

    Settings added to the config after the run was saved count as their defaults,
    ``precision="auto"`` matches whatever it became on the machine that trained the
    run, and the config's ``test_only`` settings (how the finished model is tested)
    do not count. Saved settings that this version does not know are refused.
    """
    if not isinstance(saved, dict):
        return False
    if saved.get("task") != task or saved.get("preset") != preset:
        return False
    have = saved_config(TASKS[task].Config, saved.get("config"), source)
    if wanted.precision == "auto":
        wanted = dataclasses.replace(wanted, precision=have.precision)
    return dataclasses.replace(have, **test_settings(wanted)) == wanted


def test_settings(config: Any) -> dict[str, Any]:
    """The settings of ``config`` that change only how a finished run is tested."""
    return {k: getattr(config, k) for k in config.test_only}


def run_precision(
    task: Task, model: nn.Module
) -> contextlib.AbstractContextManager:
    """The precision of ``task``'s run around ``model``'s forward passes: what the
    runner puts around every evaluation, test and prediction. The task's config
    holds the resolved name (a run resolves ``auto`` when it is built, and saves
    the result); the device is the model's."""
    device = next(model.parameters()).device
    return precision_context(device, task.config.precision)


@dataclass
class RunResult:
    """A finished run: its folder, task (with its data), model (final weights),
    history and metrics (``metrics["parameters"]``: the model's parameter count).

    A run record read without weights (``ensure_run(..., weights=False)``, a
    record that publishes none) holds ``None`` as its model: reading ``model``
    then raises a one-line
    :class:`~annotated_transformer.training.published.RecordError` that says so
    and what to do, instead of failing later on ``None``.
    """

    out: Path
    task: Task
    _model: nn.Module | None
    history: pd.DataFrame
    metrics: dict[str, Any]

    @property
    def model(self) -> nn.Module:
        if self._model is None:
            raise no_weights(self.out, read_record(self.out))
        return self._model

    @property
    def machine(self) -> dict[str, Any]:
        """Where the run trained (CPU or GPU, threads): its record's machine, or
        its folder's provenance."""
        if (self.out / "record.json").is_file():
            return read_record(self.out)["machine"]
        return read_provenance(self.out / PROVENANCE)["machine"]

    @property
    def has_model(self) -> bool:
        """Are the run's weights here (False: a record's figures only)?"""
        return self._model is not None
