"""A run record's published weights, read as a checkpoint is.

A record (``results/NAME``, written by :mod:`annotated_transformer.records`)
publishes a run's final weights as ``model.safetensors`` and what its task learned
before training (vocabularies, merges) as ``state.json``, beside ``record.json``.
Wherever a run's checkpoint is read (``--checkpoint``, a model soup, a fine-tune's
``init``), a record with weights is read the same way, by :func:`read_weights`;
this module is that reading, kept in the training layer so that a task can use it
(the records module, above the tasks, writes records and scores them).

Every part is checked as it is read: ``record.json`` must hold what a record holds
(:func:`read_record`), and ``model.safetensors`` must have the sha256 that
``record.json`` stores for it (:func:`tensors`), so that a damaged or truncated
file is one line that names it, never a model that predicts garbage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from annotated_transformer.data.download import sha256_of
from annotated_transformer.files import read_json
from annotated_transformer.training.checkpoints import read_checkpoint

RECORD, WEIGHTS, STATE = "record.json", "model.safetensors", "state.json"
# What every record.json holds, and of what type (``weights``: None when the
# record publishes none).
RECORD_KEYS = {
    "task": str,
    "preset": str,
    "config": dict,
    "command": str,
    "metrics": dict,
    "weights": (dict, type(None)),
}
RESTORE = "restore the record (git checkout results/NAME) or record its run again"


class RecordError(ValueError):
    """A run that cannot be recorded, or a record that cannot be read."""


def is_record(path: str | Path) -> bool:
    return (Path(path) / RECORD).is_file()


def read_record(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / RECORD
    if not path.is_file():
        raise RecordError(f"{folder} is no record (no {RECORD}): give results/NAME")
    return read_json(path, RESTORE, RECORD_KEYS)


def no_weights(folder: str | Path, record: dict[str, Any]) -> RecordError:
    """The one-line error for a record without weights where weights are
    needed: what to do instead."""
    return RecordError(
        f"{folder} publishes no weights, only the run's figures (history, "
        f"metrics): train the run with {record['command']!r}, or use a record "
        "made with --weights"
    )


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    """The state dict in ``folder/model.safetensors``: every name of a shared
    tensor restored, float16 (``--half``) back to the float32 it was. In a record
    (a ``record.json`` beside it; not while a record is being written) the file
    must have the sha256 that the record stores for it."""
    path = folder / WEIGHTS
    if is_record(folder):
        stored = (read_record(folder)["weights"] or {}).get("sha256")
        if path.is_file() and sha256_of(path) != stored:
            raise RecordError(
                f"{path} is damaged: its sha256 is not the one {RECORD} stores "
                f"(a truncated or altered copy); {RESTORE}"
            )
    try:
        tensors = load_file(str(path))
        with safe_open(str(path), "pt") as f:
            aliases = json.loads((f.metadata() or {}).get("aliases", "{}"))
    except (OSError, SafetensorError, json.JSONDecodeError) as error:
        raise RecordError(
            f"{path} is not readable weights ({error}); {RESTORE}"
        ) from error
    tensors |= {alias: tensors[source] for alias, source in aliases.items()}
    half = torch.float16
    return {k: v.float() if v.dtype == half else v for k, v in tensors.items()}


def read_weights(path: str | Path) -> dict[str, Any]:
    """The weights and config of a run as :func:`read_checkpoint` returns them
    (``config``: task, preset, settings and state; ``model``: the state dict),
    from the record in the folder ``path`` (its published weights, float32), or
    else from the checkpoint file ``path``. Wherever a run's checkpoint is read
    (the command line's ``--checkpoint``, a model soup, ``init``), a record with
    weights is read the same; one without is refused in one line."""
    folder = Path(path)
    if not is_record(folder):
        return read_checkpoint(folder)
    record = read_record(folder)
    if record.get("weights") is None:
        raise no_weights(folder, record)
    state = read_json(folder / STATE, RESTORE)
    run = {k: record[k] for k in ("task", "preset", "config")}
    return {"config": run | {"state": state}, "model": tensors(folder)}
