"""A run record's published weights, read as a checkpoint is.

A record (``results/NAME``, written by :mod:`annotated_transformer.records`)
publishes a run's final weights as ``model.safetensors`` and what its task learned
before training (vocabularies, merges) as ``state.json``, beside ``record.json``.
Wherever a run's checkpoint is read (``--checkpoint``, a model soup, a fine-tune's
``init``), a record with weights is read the same way, by :func:`read_weights`;
this module is that reading, kept in the training layer so that a task can use it
(the records module, above the tasks, writes records and scores them).

Every part is checked as it is read: ``record.json`` must hold what a record holds
(:func:`read_record`), and every other file must be a regular file inside the
record's folder with the sha256 that ``record.json`` stores for it in its
``checksums`` (:func:`read_checked`): the weights, and as much the vocabularies
and merges of ``state.json`` that turn the weights' numbers into words. A damaged,
truncated, swapped or shuffled file is one line that names it, never a model that
predicts garbage.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load

from annotated_transformer.files import open_regular, parse_json, read_json
from annotated_transformer.training.checkpoints import read_checkpoint

RECORD, WEIGHTS, STATE = "record.json", "model.safetensors", "state.json"
# record.json's {file name: sha256} of every other file in the record
CHECKSUMS = "checksums"
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
    return read_json(path, RESTORE, RECORD_KEYS, inside=folder)


def checksums(folder: Path) -> dict[str, str]:
    """The sha256 of every file in the record being written in ``folder`` but
    its ``record.json``: what the record stores as its ``checksums``."""
    return {
        path.name: sha256(read_inside(folder, path.name))
        for path in sorted(folder.iterdir())
        if path.name != RECORD
    }


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_inside(folder: Path, name: str) -> bytes:
    """The bytes of the regular file ``name`` in ``folder`` (no FIFO, no link
    out of it)."""
    with open_regular(folder / name, folder, RESTORE) as f:
        return f.read()


def read_checked(folder: Path, name: str, record: dict[str, Any]) -> bytes:
    """The bytes of the file ``name`` of the record in ``folder`` (``record``: its
    record.json), a regular file inside it whose sha256 is the one the record
    stores for it; anything else is one line that names the file."""
    path = folder / name
    stored = record.get(CHECKSUMS)
    if not isinstance(stored, dict) or not isinstance(stored.get(name), str):
        raise RecordError(
            f"{path}: {folder / RECORD} stores no sha256 for it (a record from "
            f"before every file was checked, or an edited one); {RESTORE}"
        )
    data = read_inside(folder, name)
    if sha256(data) != stored[name]:
        raise RecordError(
            f"{path} is damaged: its sha256 is not the one {RECORD} stores "
            f"(a truncated, altered or swapped copy); {RESTORE}"
        )
    return data


def read_state(folder: Path, record: dict[str, Any]) -> dict[str, Any] | None:
    """What the record's task learned before training (its ``state.json``,
    checked), or None for a record from before records kept it."""
    path = folder / STATE
    if STATE not in (record.get(CHECKSUMS) or {}) and not path.exists():
        return None
    return parse_json(read_checked(folder, STATE, record), path, RESTORE)


def no_weights(folder: str | Path, record: dict[str, Any]) -> RecordError:
    """The one-line error for a record without weights where weights are
    needed: what to do instead."""
    return RecordError(
        f"{folder} publishes no weights, only the run's figures (history, "
        f"metrics): train the run with {record['command']!r}, or use a record "
        "made with --weights"
    )


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    """The state dict in ``folder/model.safetensors`` (float32 or float16
    tensors): every name of a shared tensor restored, float16 (``--half``)
    back to the float32 it was. In a record (a ``record.json`` beside it; not
    while a record is being written) the file is :func:`read_checked`."""
    path = folder / WEIGHTS
    if is_record(folder):
        data = read_checked(folder, WEIGHTS, read_record(folder))
    else:
        data = read_inside(folder, WEIGHTS)
    try:
        tensors = load(data)
        aliases = json.loads(_metadata(data).get("aliases", "{}"))
    except (SafetensorError, ValueError) as error:  # JSON's errors too
        raise RecordError(
            f"{path} is not readable weights ({error}); {RESTORE}"
        ) from error
    names = isinstance(aliases, dict) and all(
        isinstance(alias, str) and isinstance(source, str) and source in tensors
        for alias, source in aliases.items()
    )
    if not names:
        raise RecordError(
            f"{path}'s aliases are not names of its tensors (a damaged or "
            f"hand-made file); {RESTORE}"
        )
    for name, tensor in tensors.items():
        if tensor.dtype not in (torch.float32, torch.float16):
            raise RecordError(
                f"{path} holds {name} as {tensor.dtype}: a record's weights are "
                f"float32 or float16; {RESTORE}"
            )
    tensors |= {alias: tensors[source] for alias, source in aliases.items()}
    half = torch.float16
    return {k: v.float() if v.dtype == half else v for k, v in tensors.items()}


def _metadata(data: bytes) -> dict[str, Any]:
    """The ``__metadata__`` of a safetensors file's bytes: its header is the JSON
    object after the header's length (8 bytes, little-endian)."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    metadata = header.get("__metadata__") if isinstance(header, dict) else None
    return metadata if isinstance(metadata, dict) else {}


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
    state = parse_json(read_checked(folder, STATE, record), folder / STATE, RESTORE)
    run = {k: record[k] for k in ("task", "preset", "config")}
    return {"config": run | {"state": state}, "model": tensors(folder)}
