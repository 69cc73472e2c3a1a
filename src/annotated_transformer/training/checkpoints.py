"""Checkpoints that survive a crash and cannot run code when loaded.

A checkpoint is one ``torch.save`` file holding plain data only: the model's,
optimiser's and scheduler's state dicts, every random number generator's state
(Python, NumPy, torch CPU and CUDA), the step, the run's config and any extra plain
data (e.g. the data position and the loss history). That is everything needed for a
resumed run to continue exactly where it stopped.

- Written atomically (:func:`~annotated_transformer.files.atomic_write`, which
  every file a run writes goes through): to a temporary file in the same folder,
  flushed to disk (fsync), then renamed over the old one with ``os.replace``, so a
  kill mid-write leaves the previous checkpoint intact, never a half-written file;
  :func:`keep_previous` keeps the one before as well.
- Loaded with ``torch.load(weights_only=True)``: only tensors and plain Python data
  are unpickled, so a tampered file cannot execute code.
- Checked when loaded: every checkpoint holds a SHA-256 of its own contents
  (:func:`content_hash`: every tensor's bytes and every plain value, in order),
  computed again on load, so a damaged file that still unpickles is named corrupt
  instead of trained on. Files written before the checksum (version 1) load
  when every weight in them is finite (a damaged file rarely stays so).
- A full disk is one clear error
  (:class:`~annotated_transformer.files.DiskFullError`); the temporary file is
  removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import stat
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from annotated_transformer.files import atomic_copy, atomic_write, temporary_name

FORMAT = "annotated_transformer.training.checkpoints"
VERSION = 2  # 2: with a checksum of the contents; 1: without
PLAIN = (str, int, float, bool, type(None), torch.Tensor)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read or does not fit the
    model it is loaded into."""


def content_hash(value: Any) -> str:
    """SHA-256 (hex) of plain data and tensors: each leaf's type and value, in
    order.

    A tensor counts with its dtype, shape and bytes; a str, int, float, bool or None
    with its ``repr`` (exact for floats); dicts, lists and tuples by their items in
    order. The same contents give the same hash after a ``torch.save`` and
    ``torch.load`` round trip.
    """
    digest = hashlib.sha256()

    def walk(item: Any) -> None:
        digest.update(type(item).__name__.encode())
        if isinstance(item, torch.Tensor):
            data = item.detach().cpu().contiguous().reshape(-1)
            digest.update(f"{item.dtype}{tuple(item.shape)}".encode())
            digest.update(data.view(torch.uint8).numpy().tobytes())
        elif isinstance(item, dict):
            for key, inner in item.items():
                walk(key)
                walk(inner)
        elif isinstance(item, list | tuple):
            digest.update(str(len(item)).encode())
            for inner in item:
                walk(inner)
        else:
            digest.update(repr(item).encode())

    walk(value)
    return digest.hexdigest()


def _check_plain(value: Any, where: str) -> None:
    """Refuse values that ``torch.load(weights_only=True)`` would not load back."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_plain(key, where)
            _check_plain(item, f"{where}[{key!r}]")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
    elif not isinstance(value, PLAIN):
        raise ValueError(
            f"{where} is a {type(value).__name__}; checkpoints hold only plain "
            "data (str, int, float, bool, None, tensors, lists, tuples, dicts): "
            "convert it (e.g. str(path))"
        )


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a ``DistributedDataParallel`` (or
    similar ``.module``) wrapper."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, nn.Module) else model


def is_sharded(model: nn.Module) -> bool:
    """Is ``model`` sharded by FSDP (``torch.distributed.fsdp.fully_shard``)?
    (Without importing FSDP, a second to load, when nothing has.)"""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(model, fsdp.FSDPModule)


def full_state_dicts(
    model: nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The state dicts of ``model`` and ``optimizer``, whole, in the
    format of an unsharded run.

    A plain or DDP model: its (and the optimiser's) own state dicts. An FSDP model
    holds 1/W of every tensor on each of W ranks: this gathers them (a collective:
    call it on every rank) into full tensors on rank 0's CPU (the other ranks get
    empty dicts) and renames the optimiser's per-parameter state from parameter
    names to the indices ``optimizer.state_dict()`` uses, so that one process can
    load the checkpoint.
    """
    if not is_sharded(model):
        optimizer_state = optimizer.state_dict() if optimizer else None
        return unwrap(model).state_dict(), optimizer_state
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights = get_model_state_dict(model, options=options)
    if optimizer is None:
        return weights, None
    state = get_optimizer_state_dict(model, optimizer, options=options)
    if not state:  # not rank 0
        return weights, {}
    index = {name: i for i, (name, _) in enumerate(model.named_parameters())}
    groups = [
        {**g, "params": [index[n] for n in g["params"]]}
        for g in state["param_groups"]
    ]
    return weights, {
        "state": {index[name]: value for name, value in state["state"].items()},
        "param_groups": groups,
    }


def rng_state() -> dict[str, Any]:
    """The state of every global generator, as plain data
    (NumPy's array as a tensor)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return {
        "python": random.getstate(),
        "numpy": (
            name,
            torch.from_numpy(keys.astype(np.int64)),
            pos,
            has_gauss,
            gauss,
        ),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the generators saved by ``rng_state``."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state(
        (name, keys.numpy().astype(np.uint32), pos, has_gauss, cached)
    )
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module | dict[str, Any],
    optimizer: torch.optim.Optimizer | dict[str, Any] | None = None,
    scheduler: Any = None,
    *,
    step: int = 0,
    config: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    folder: int | None = None,
) -> Path:
    """Write a checkpoint atomically and return its path.

    model, optimizer: the objects, or their state dicts (e.g. from
        :func:`full_state_dicts`);
    config: the run's settings (plain data: enough to rebuild the model);
        extra: any other plain data to restore (data position, history).
    folder: an open descriptor of ``path``'s folder, written through (see
        :func:`~annotated_transformer.files.atomic_write`); without it, folders
        are created as needed.
    """
    path = Path(path)
    if hasattr(optimizer, "state_dict"):
        optimizer = optimizer.state_dict()
    state = {
        "format": FORMAT,
        "version": VERSION,
        "step": step,
        "config": config or {},
        "extra": extra or {},
        "rng": rng_state(),
        "model": model if isinstance(model, dict) else unwrap(model).state_dict(),
        "optimizer": optimizer,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
    }
    _check_plain(state["config"], "config")
    _check_plain(state["extra"], "extra")
    state["checksum"] = content_hash(state)
    return atomic_write(path, lambda f: torch.save(state, f), folder=folder)


def previous(path: str | os.PathLike) -> Path:
    """Where :func:`keep_previous` keeps the file that ``path`` replaces
    (``last.previous.pt``)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.previous{path.suffix}")


def keep_previous(path: str | os.PathLike, *, folder: int | None = None) -> None:
    """Keep the file at ``path`` (if any) as :func:`previous` of it, atomically,
    before a new one replaces it: a checkpoint damaged later still has an intact
    predecessor. A hard link (no copy, no space) where the file system has them,
    else a copy. ``folder``: an open descriptor of ``path``'s folder, which the
    link is made in (see :func:`~annotated_transformer.files.atomic_write`)."""
    path = Path(path)
    local = Path(path.name) if folder is not None else path
    try:
        kept = os.stat(local, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return
    with contextlib.suppress(FileNotFoundError):
        if os.path.samestat(kept, os.stat(previous(local), dir_fd=folder)):
            return  # already kept (a write that failed after keeping it)
    if not stat.S_ISREG(kept.st_mode):
        return
    link = temporary_name(previous(local))
    try:
        os.link(local, link, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:  # no hard links here
        atomic_copy(path, previous(path), folder=folder)
        return
    os.replace(link, previous(local), src_dir_fd=folder, dst_dir_fd=folder)


def read_checkpoint(
    path: str | os.PathLike, map_location: Any = "cpu"
) -> dict[str, Any]:
    """Load a checkpoint's contents (plain data and tensors only)
    without applying them."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no checkpoint at {path}: check the path, or train from scratch"
        )
    try:
        with warnings.catch_warnings():  # a raw pickle: refused below, no warnings
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:
        # Only the first sentence of torch's message: the rest suggests
        # weights_only=False, which would let a malicious file run code.
        reason = str(err).split(". ")[0].splitlines()[0][:160] if str(err) else ""
        raise CheckpointError(
            f"{path} is not a readable checkpoint ({type(err).__name__}: "
            f"{reason}). It is truncated or corrupt (an interrupted copy, a full "
            "disk) or not a checkpoint at all: use an earlier checkpoint, or train "
            "again."
        ) from err
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(
            f"{path} is a torch file but not a checkpoint written by "
            "save_checkpoint (no 'format' marker): pass a file that "
            "save_checkpoint wrote"
        )
    if "checksum" in state or state.get("version", 1) >= 2:
        stored = state.pop("checksum", None)
        if stored != content_hash(state):
            raise CheckpointError(
                f"{path} is corrupt: its contents do not match the checksum stored "
                "in it (a damaged disk or an altered copy); use an earlier "
                "checkpoint, or train again"
            )
    # version 1, without a checksum: NaN or infinite weights (damage) are refused
    check_contents(state, path)
    return state


def check_contents(state: dict[str, Any], path: str | os.PathLike) -> None:
    """Refuse (:class:`CheckpointError`, one line that names ``path``) contents
    that a checkpoint written by :func:`save_checkpoint` cannot hold, field by
    field, even behind a valid checksum (one computed again after an edit): a
    step that is not a count (an int >= 0), a config or extra that is not a dict,
    weights that are not a dict of floating-point tensors, generator states that
    do not restore a generator, an optimiser or scheduler state of the wrong form.
    """

    def damaged(what: str) -> CheckpointError:
        return CheckpointError(
            f"{path} is damaged: {what}; use an earlier checkpoint, or train again"
        )

    step = state.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise damaged(
            f"its step is {step!r}, not a count of steps (an integer >= 0)"
        )
    for key in ("config", "extra"):
        if not isinstance(state.get(key), dict):
            raise damaged(
                f"its {key} is a {type(state.get(key)).__name__}, not a dict"
            )
    weights = state.get("model")
    if not isinstance(weights, dict) or not weights:
        raise damaged(
            f"its model is a {type(weights).__name__}, not a dict of weights"
        )
    for name, tensor in weights.items():
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            kind = getattr(tensor, "dtype", type(tensor).__name__)
            raise damaged(f"its weight {name!r} is {kind}, not floating-point")
    if not all_finite(weights):
        raise damaged("its weights are NaN or infinite")
    if not isinstance(state.get("rng"), dict) or not restores(state["rng"]):
        raise damaged("its random generators' state does not restore them")
    optimizer = state.get("optimizer")
    if optimizer is not None and not optimizer_form(optimizer):
        raise damaged("its optimiser state is not one an optimiser saved")
    scheduler = state.get("scheduler")
    if scheduler is not None and not isinstance(scheduler, dict):
        raise damaged(f"its scheduler state is a {type(scheduler).__name__}")


def restores(rng: dict[str, Any]) -> bool:
    """Does ``rng`` (from :func:`rng_state`) restore each generator? Tried on new
    generators of each kind, not the global ones."""
    try:
        version, internal, gauss = rng["python"]
        random.Random().setstate((version, tuple(internal), gauss))
        name, keys, pos, has_gauss, cached = rng["numpy"]
        numpy_keys = keys.numpy().astype(np.uint32)
        np.random.RandomState().set_state(
            (name, numpy_keys, pos, has_gauss, cached)
        )
        torch.Generator().set_state(rng["torch"])
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError):
        return False
    cuda = rng.get("cuda")
    return isinstance(cuda, list) and all(
        isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in cuda
    )


def optimizer_form(state: Any) -> bool:
    """Is ``state`` in the form of a torch optimiser's ``state_dict()``: groups
    (dicts) that list parameter indices, and per listed index a dict of tensors and
    numbers (Adam: ``step``, ``exp_avg``, ``exp_avg_sq``)?"""
    groups = state.get("param_groups") if isinstance(state, dict) else None
    per_param = state.get("state") if isinstance(state, dict) else None
    if not (isinstance(groups, list) and groups and isinstance(per_param, dict)):
        return False
    if not all(
        isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups
    ):
        return False
    indices = [i for g in groups for i in g["params"]]
    if not all(type(i) is int for i in indices) or not set(per_param) <= set(
        indices
    ):
        return False
    return all(
        isinstance(inner, dict) and all(map(_number_or_tensor, inner.values()))
        for inner in per_param.values()
    )


def _number_or_tensor(value: Any) -> bool:
    return isinstance(value, int | float | torch.Tensor) and not isinstance(
        value, bool
    )


def _kind(value: Any) -> str:
    """A hyperparameter's kind, for comparing a saved one with the optimiser's."""
    return "number" if _number_or_tensor(value) else type(value).__name__


def check_fits(
    state: dict[str, Any],
    path: str | os.PathLike,
    model: nn.Module | None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
) -> None:
    """Refuse, before anything is loaded, a checkpoint that does not fit ``model``,
    ``optimizer`` and ``scheduler``: a missing, unexpected or mis-shaped weight;
    an optimiser state for other parameters (another number of them, moments of
    other shapes) or with hyperparameters of another kind (a string for a
    learning rate); a scheduler state with other fields."""
    if model is not None:
        own, saved = unwrap(model).state_dict(), state["model"]
        shapes = {
            k for k in own.keys() & saved.keys() if own[k].shape != saved[k].shape
        }
        wrong = sorted((own.keys() ^ saved.keys()) | shapes)
        if wrong:
            raise CheckpointError(
                f"{path} holds weights for a different model (its config: "
                f"{state['config']}); build the model with that config (it differs "
                f"at {', '.join(wrong[:5])})"
            )
    if optimizer is not None and not optimizer_fits(state["optimizer"], optimizer):
        raise CheckpointError(
            f"{path} is damaged: its optimiser state does not fit the model's "
            "parameters; use an earlier checkpoint, or train again"
        )
    if scheduler is not None and (
        state["scheduler"].keys() != scheduler.state_dict().keys()
    ):
        raise CheckpointError(
            f"{path} is damaged: its scheduler state is not this run's "
            "scheduler's; use an earlier checkpoint, or train again"
        )


def optimizer_fits(saved: dict[str, Any], optimizer: torch.optim.Optimizer) -> bool:
    """Does the optimiser state ``saved`` (of :func:`optimizer_form`) fit
    ``optimizer``: as many groups of as many parameters, hyperparameters of the
    same kinds, and each parameter's state tensors scalars or of its shape?"""
    groups = optimizer.param_groups
    if [len(g["params"]) for g in saved["param_groups"]] != [
        len(g["params"]) for g in groups
    ]:
        return False
    for mine, theirs in zip(groups, saved["param_groups"], strict=True):
        if any(
            _kind(theirs.get(k)) != _kind(v)
            for k, v in mine.items()
            if k != "params"
        ):
            return False
    params = [p for g in groups for p in g["params"]]
    order = [i for g in saved["param_groups"] for i in g["params"]]
    return all(
        not isinstance(value, torch.Tensor)
        or value.ndim == 0
        or (
            value.shape == params[order.index(i)].shape
            and value.is_floating_point()
        )
        for i, inner in saved["state"].items()
        for value in inner.values()
    )


def all_finite(weights: Any) -> bool:
    """Is every floating-point tensor of the state dict ``weights`` finite?"""
    tensors = weights.values() if isinstance(weights, dict) else ()
    return all(
        bool(torch.isfinite(t).all())
        for t in tensors
        if isinstance(t, torch.Tensor) and t.is_floating_point()
    )


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    *,
    restore_rng: bool = True,
    map_location: Any = "cpu",
    check: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Load a checkpoint into the given objects and return its
    contents (step, config, extra).

    The model's tensors are copied into ``model`` (moved to its device by
    ``load_state_dict``); restore_rng=True also restores every random generator, so
    a resumed run draws the same dropout masks as an uninterrupted one. Nothing is
    loaded from a checkpoint that does not fit the objects (:func:`check_fits`) or
    that ``check(contents)`` refuses by raising.
    """
    state = read_checkpoint(path, map_location)
    for obj, key in ((optimizer, "optimizer"), (scheduler, "scheduler")):
        if obj is not None and state[key] is None:
            raise CheckpointError(f"{path} was saved without a {key} state")
    check_fits(state, path, model, optimizer, scheduler)
    if check is not None:
        check(state)
    if model is not None:
        unwrap(model).load_state_dict(state["model"])
    for obj, key in ((optimizer, "optimizer"), (scheduler, "scheduler")):
        if obj is not None:
            obj.load_state_dict(state[key])
    if restore_rng:
        set_rng_state(state["rng"])
    return state


def average_checkpoints(
    paths: Sequence[str | os.PathLike],
) -> tuple[dict[str, Any], dict]:
    """Element-wise mean of the model weights in ``paths``;
    returns (config, state_dict).

    Vaswani et al. 2017, section 6.1: "averaging the last 5 checkpoints". The
    checkpoints must come from one run (same config, hence the same shapes); the
    mean is taken in float64 and cast back to each tensor's dtype.
    """
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint path")
    first = read_checkpoint(paths[0])
    config, total = (
        first["config"],
        {k: v.double() for k, v in first["model"].items()},
    )
    for path in paths[1:]:
        state = read_checkpoint(path)
        if state["config"] != config or state["model"].keys() != total.keys():
            raise CheckpointError(
                f"{path} comes from a different run than {paths[0]} (config or "
                "weights differ): average only checkpoints of one training run"
            )
        for key, value in state["model"].items():
            total[key] += value.double()
    dtypes = {k: v.dtype for k, v in first["model"].items()}
    return config, {k: (v / len(paths)).to(dtypes[k]) for k, v in total.items()}


def model_soup(
    paths: Sequence[str | os.PathLike],
    *,
    read: Callable[[Any], dict[str, Any]] = read_checkpoint,
) -> tuple[dict[str, Any], dict]:
    """Element-wise mean of the weights of several runs; returns (the
    first's config, weights). ``read``: what reads one of ``paths`` into a
    checkpoint's contents (``config`` and ``model``): :func:`read_checkpoint`, or
    :func:`~annotated_transformer.training.published.read_weights`, which reads
    run records' published weights as well.

    A "uniform model soup" (Wortsman et al. 2022): models fine-tuned from one
    pretrained start, with different settings, tend to lie in one basin of the loss,
    so their mean is a model too, often better than each, at the cost of one. From
    different random starts it is not. The runs must be of one task and vocabulary
    (``state``) and have weights of the same names and shapes; the mean is taken in
    float64 and cast back to each tensor's dtype.
    """
    if len(paths) < 2:
        raise ValueError("a model soup needs two or more checkpoints")
    states = [read(path) for path in paths]
    # what must agree: the task, its vocabulary, every weight's name and shape
    kinds = [
        (
            s["config"].get("task"),
            s["config"].get("state"),
            {k: v.shape for k, v in s["model"].items()},
        )
        for s in states
    ]
    for path, kind in zip(paths[1:], kinds[1:], strict=True):
        if kind != kinds[0]:
            raise CheckpointError(
                f"{path} does not fit {paths[0]} (another task, vocabulary or "
                "model shape): average runs fine-tuned from one pretrained run "
                "with the same sizes"
            )
    first = states[0]["model"]
    weights = {
        k: torch.stack([s["model"][k].double() for s in states])
        .mean(dim=0)
        .to(v.dtype)
        for k, v in first.items()
    }
    return states[0]["config"], weights
