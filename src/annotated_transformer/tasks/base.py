"""What a task is: the few things that differ between translation, classification
and a language model. Everything else — devices, precision, the optimiser and its
schedule, checkpoints, logs, resuming — is the runner's
(:mod:`annotated_transformer.runner`).

A task is a config dataclass and a class with six methods:

- ``build_model()``: the model, from the model config the task's config holds
  (``model``) and what the data gives (the vocabularies);
- ``loss(model, batch) -> (loss_sum, n)``: the loss *summed* over the batch's tokens
  (or examples) and their count, the
  :class:`~annotated_transformer.training.trainer.Trainer`'s contract;
- ``batches(epoch)``: that epoch's training batches, the same ones every time for
  the same epoch (so a killed run resumes at the exact batch it stopped at);
- ``evaluate(model) -> dict``: validation metrics, including
  the task's ``score`` metric;
- ``test(model) -> dict``: the final, held-out metrics of a finished run;
- ``predict(model, inputs) -> list[str]``: text in, text out.

A task's ``state()`` is what it learned from the data before training (a vocabulary,
byte pairs); it is saved in every checkpoint, so a model can be loaded without the
training data. Its ``stream`` (None for most tasks) is what one training batch hands
to the next, e.g. Transformer-XL's memory: an object with
``state_dict``/``load_state_dict`` that ``last.pt`` saves, so that a resumed run
continues with it.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from annotated_transformer.paths import repository_root, results_dir
from annotated_transformer.training.distributed import SHARDINGS
from annotated_transformer.training.precision import PRECISION_SETTINGS
from annotated_transformer.training.schedules import SCHEDULES
from annotated_transformer.training.trainer import mean_loss


@dataclass(frozen=True)
class TrainConfig:
    """The optimisation half of every task's config; a task's
    dataclass adds its own fields.

    Steps count optimiser updates (each of ``accumulate`` micro-batches).
    ``epochs`` > 0 overrides ``steps`` with ``epochs`` × the task's steps per epoch.
    ``lr`` is the *peak* learning rate of ``schedule`` (see
    :func:`~annotated_transformer.training.schedules.make_scheduler`).
    """

    steps: int = 1_000
    epochs: int = 0
    # "adam": the paper's β=(0.9, 0.98), ε=1e-9; "adamw": PyTorch's
    optimizer: str = "adam"
    lr: float = 1e-3
    schedule: str = "cosine"  # noam, cosine, linear, inverse_sqrt
    warmup: int = 100
    weight_decay: float = 0.0
    clip_norm: float | None = None
    accumulate: int = 1
    # fp32, bf16, fp16 (loss scaling), auto (bf16 where faster)
    precision: str = "fp32"
    # recompute each block's activations in backward
    activation_checkpointing: bool = False
    # under torchrun: "none" (DDP) or "fsdp" (sharded weights, Adam)
    sharding: str = "none"
    eval_every: int = 0  # steps between validations (0: at the end of every epoch)
    # steps between saves of last.pt (0: at validations only)
    checkpoint_every: int = 0
    # checkpoints of the last validations kept, and averaged at the end
    keep_last: int = 0
    # final.pt: "last" weights, or the "best" validated (or averaged)
    final: str = "last"
    seed: int = 0
    # >0: stop after this many minutes of training steps, planned at the end of the
    # warm-up to fill them (training.trainer.Budget); steps/epochs cap the run.
    budget_minutes: float = 0.0

    # Settings that change only how the finished model is tested (a beam size), not
    # training: a finished run is reused under other values of them, and re-tested.
    test_only: ClassVar[tuple[str, ...]] = ()
    # The ranges of the numbers (check_numbers): every number is finite and >= 0;
    # these must be > 0 (an int: >= 1), and these are shares of tokens or units to
    # drop, in [0, 1).
    positive: ClassVar = ("lr", "warmup", "clip_norm", "accumulate")
    shares: ClassVar = ()

    def __post_init__(self) -> None:
        """Refuse a setting that cannot work now, not after hours of training."""
        check_numbers(self)
        choices = {
            "optimizer": ("adam", "adamw"),
            "schedule": tuple(SCHEDULES),
            "precision": PRECISION_SETTINGS,
            "sharding": SHARDINGS,
            "final": ("last", "best"),
        }
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                raise ValueError(
                    f"{key}={getattr(self, key)!r}: use one of {', '.join(allowed)}"
                )
        if self.budget_minutes and self.warmup < 2:
            raise ValueError(
                f"budget_minutes={self.budget_minutes} measures the pace over the "
                f"warm-up: set warmup to 2 steps or more (it is {self.warmup})"
            )
        if self.steps < 1 and not self.epochs:
            raise ValueError(f"steps={self.steps} must be >= 1 (or give epochs)")
        if self.sharding == "fsdp" and self.precision == "fp16":
            raise ValueError(
                "precision=fp16 with sharding=fsdp is not supported (the loss "
                "scaler would see only this rank's shard of the gradients): use "
                "bf16"
            )


# The largest integer setting: torch's generators take seeds below 2**64 and its
# counts are 64-bit, and a seed is multiplied (epoch_generator); 2**31 - 1 (the
# largest 32-bit int) leaves room and is more than any count a run has.
LARGEST = 2**31 - 1


def check_numbers(config: Any) -> None:
    """Refuse, naming the setting, a number of ``config`` out of its range
    (:func:`check_ranges`); the model's sizes count by their flat names
    (:func:`flat_settings`)."""
    check_ranges(flat_settings(config), config)


def check_ranges(values: dict[str, Any], rules: Any) -> None:
    """Refuse, naming the setting, a number of the flat settings ``values`` out of
    its range: NaN or infinite, negative, an integer above :data:`LARGEST`, 0
    where ``rules.positive`` (a config or its class) needs more, or a share
    outside [0, 1) (``rules.shares``)."""
    for key, value in values.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number:  # None, a bool or a string
            continue
        if not math.isfinite(value):
            raise ValueError(f"{key}={value} must be a finite number")
        positive = key in rules.positive
        if value < 0 or (positive and value == 0):
            raise ValueError(f"{key}={value} must be {'>' if positive else '>='} 0")
        if key in rules.shares and value >= 1:
            raise ValueError(f"{key}={value} must lie in [0, 1): a share it drops")
        if isinstance(value, int) and value > LARGEST:
            raise ValueError(f"{key}={value} must be at most {LARGEST} (2**31 - 1)")


# A task config that holds its model's config (a field ``model``) names that
# config's settings flat: by default, the model config's fields but those the data
# gives (its ``from_data``), with their own names and types. A task config class
# may name them its own way with classmethods of the same names (the ``lm`` task:
# by its variant, tasks/variants.py).


def model_types(cls: type) -> dict[str, Any]:
    """The flat settings of the model config that ``cls`` holds, and their
    types."""
    if hasattr(cls, "model_types"):
        return cls.model_types()
    inner = typing.get_type_hints(cls)["model"]
    sizes = typing.get_type_hints(inner)
    return {
        f.name: sizes[f.name]
        for f in fields(inner)
        if f.name not in inner.from_data
    }


def model_settings(cls: type, model: Any) -> dict[str, Any]:
    """``model``, the model config a ``cls`` holds, as flat settings."""
    if hasattr(cls, "model_settings"):
        return cls.model_settings(model)
    return {
        f.name: getattr(model, f.name)
        for f in fields(model)
        if f.name not in model.from_data
    }


def model_named(cls: type, sizes: dict[str, Any]) -> Any:
    """The model config of ``cls`` that the flat ``sizes`` name (the others: the
    default's)."""
    if hasattr(cls, "model_named"):
        return cls.model_named(sizes)
    model = next(f for f in fields(cls) if f.name == "model")
    return dataclasses.replace(model.default_factory(), **sizes)


def setting_types(cls: type) -> dict[str, Any]:
    """The settings of the task config class ``cls`` and their types: its own
    fields and, in place of ``model``, the flat settings of the model config it
    holds (:func:`model_types`). These flat names (``d_model``, not
    ``model.d_model``) are what ``--set`` takes and what checkpoints and records
    save."""
    hints, flat = typing.get_type_hints(cls), {}
    for field in fields(cls):
        if field.name == "model":
            flat |= model_types(cls)
        else:
            flat[field.name] = hints[field.name]
    return flat


def flat_settings(config: Any) -> dict[str, Any]:
    """``config`` as its flat settings (:func:`setting_types`' names)."""
    flat = {}
    for field in fields(config):
        value = getattr(config, field.name)
        if field.name == "model":
            flat |= model_settings(type(config), value)
        else:
            flat[field.name] = value
    return flat


def from_settings(cls: type, values: dict[str, Any]) -> Any:
    """The config of class ``cls`` from flat settings (any of
    :func:`setting_types`' names; the others keep their defaults): the one place
    where a size given flat, by ``--set`` or in a saved config, goes into the
    model config that the task config holds (:func:`model_named`)."""
    own = {f.name for f in fields(cls)}
    if "model" not in own:
        return cls(**values)
    check_ranges(values, cls)  # named flat, before the model's config sees them
    task = {k: v for k, v in values.items() if k in own}
    sizes = {k: v for k, v in values.items() if k not in own}
    return cls(**task, model=model_named(cls, sizes))


def parse_value(text: str, kind: Any, key: str) -> Any:
    """``text`` as a value of the field type ``kind`` (int, float,
    bool, str, or X | None)."""
    options = (
        typing.get_args(kind) if isinstance(kind, types.UnionType) else (kind,)
    )
    if type(None) in options and text.strip().lower() in ("none", "null"):
        return None
    for option in (o for o in options if o is not type(None)):
        if option is bool:
            words = {
                "true": True,
                "1": True,
                "yes": True,
                "false": False,
                "0": False,
                "no": False,
            }
            if text.strip().lower() in words:
                return words[text.strip().lower()]
        elif option in (int, float, str):
            try:
                return option(text)
            except ValueError:
                pass
    names = " or ".join("none" if o is type(None) else o.__name__ for o in options)
    raise ValueError(f"--set {key}={text}: {key} takes {names}")


def fits(value: Any, kind: Any) -> bool:
    """Is ``value`` (read from a file) of the field type ``kind`` (int, float,
    bool, str, or X | None)? An int is a float too; a bool is no number."""
    options = (
        typing.get_args(kind) if isinstance(kind, types.UnionType) else (kind,)
    )
    if isinstance(value, bool):
        return bool in options
    accepted = {int: (int,), float: (int, float)}
    return any(
        isinstance(value, accepted.get(option, option)) for option in options
    )


def saved_config(cls: type, values: Any, source: str | Path) -> Any:
    """The config of class ``cls`` from its saved settings ``values`` (a
    checkpoint's or a record's); a setting saved before it existed counts as its
    default. Settings that do not fit this version of the package (not a dict of
    settings, an unknown key, a value of another type or out of range) are one
    line that names ``source``."""
    if not isinstance(values, dict):
        kind = type(values).__name__
        raise ValueError(
            f"{source} holds a {kind} as its config, not settings: it is "
            "damaged or not a run's; use another, or train again"
        )
    hints = setting_types(cls)
    known = set(hints)
    unknown = sorted(set(values) - known)
    wrong = sorted(k for k in known & set(values) if not fits(values[k], hints[k]))
    if unknown or wrong:
        named = unknown or [f"{k}={values[k]!r}" for k in wrong]
        what = "unknown settings" if unknown else "settings of the wrong type"
        raise ValueError(
            f"{source} has {what} ({', '.join(map(str, named))}): it was written "
            "by another version of this package (or altered); use that version, "
            "or train again"
        )
    try:
        return from_settings(cls, values)
    except ValueError as error:
        raise ValueError(f"{source}: {error}; train again") from None


def apply_settings(config: Any, settings: Sequence[str]) -> Any:
    """``config`` with ``KEY=VALUE`` settings applied, each
    parsed to its field's type."""
    hints = setting_types(type(config))
    valid = list(hints)
    changes = {}
    for setting in settings:
        key, sep, text = setting.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(
                f"--set {setting}: write KEY=VALUE, e.g. --set lr=3e-4"
            )
        if key not in valid:
            raise ValueError(
                f"--set {key}: unknown key; valid keys: {', '.join(valid)}"
            )
        changes[key] = parse_value(text, hints[key], key)
    return with_settings(config, changes)


def with_settings(config: Any, changes: dict[str, Any]) -> Any:
    """``config`` with the flat settings ``changes`` (values, not text)."""
    return from_settings(type(config), flat_settings(config) | changes)


def check_texts(inputs: Sequence[str], what: str, item: str) -> None:
    """Refuse no texts at all, and a text that is empty or only whitespace (what
    every task's ``predict`` is given): ``what`` the task does with them, ``item``
    what one text is."""
    if not inputs:
        raise ValueError(f"nothing to {what}: give one or more {item}s")
    blank = next((i for i, text in enumerate(inputs, 1) if not text.strip()), None)
    if blank is not None:
        raise ValueError(f"{item} {blank} is empty or blank: give some text")


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The random draws of one training epoch (windows, maskings, hidden words): the
    same for the same ``seed`` and ``epoch``, so that a resumed run draws what the
    killed one would have, and different for every other epoch."""
    return torch.Generator().manual_seed(seed * 1_000_003 + epoch)


def run_folder(name: str | Path) -> Path:
    """The folder of the run ``name``: absolute, or found from the working
    directory, or else from the repository's root; so ``runs/mlm-cpu`` names one run
    at the top and in a chapter. ``results/NAME`` is the record NAME wherever the
    records are (:func:`~annotated_transformer.paths.results_dir`)."""
    path, root = Path(name).expanduser(), repository_root()
    if not path.is_absolute() and path.parts[:1] == ("results",):
        path = results_dir().joinpath(*path.parts[1:])
    elif not (path.is_absolute() or path.exists() or root is None):
        path = root / path
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # a loop of symbolic links (3.13: OSError)
        raise ValueError(
            f"{name} is a loop of symbolic links, not a run: name a run's folder"
        ) from None


def run_path(name: str | Path) -> str:
    """``name`` written the same wherever it was given: a record as
    ``results/NAME``, wherever the records are kept; a run as its folder relative
    to the repository's root (``../runs/x`` in a chapter and ``runs/x`` at the top
    are both ``runs/x``), or absolute outside the repository. A setting that names
    a run (``init``) is stored this way, so that a record's config matches in every
    clone."""
    folder, root = run_folder(name), repository_root()
    records = results_dir().resolve()
    if folder.is_relative_to(records):
        return Path("results", folder.relative_to(records)).as_posix()
    return (
        folder.relative_to(root).as_posix()
        if root and folder.is_relative_to(root)
        else str(folder)
    )


class Task(ABC):
    """One job: its data, model, loss, batches, metrics and
    predictions (see the module doc).

    ``name``: the command line's TASK; ``Config``: its dataclass; ``score``: the
    validation metric that picks the best checkpoint, and whether higher is better.
    """

    name: ClassVar[str]
    title: ClassVar[str]  # a line for --help
    Config: ClassVar[type]
    score: ClassVar[tuple[str, str]]  # (metric, "max" or "min")
    # carried from one training batch to the next, saved in last.pt
    stream: Any = None

    def __init__(
        self,
        config: Any,
        *,
        data_dir: str | Path | None = None,
        state: dict | None = None,
    ) -> None:
        self.config, self.data_dir = config, data_dir

    def state(self) -> dict[str, Any]:
        """Plain data learned from the training data
        (vocabularies), saved in checkpoints."""
        return {}

    def check_data(self) -> None:
        """Refuse, in one line with the range that works, a setting that does not
        fit the data (a window longer than the text, a share that selects
        nothing): what the runner calls before training. Nothing here."""
        return None

    def mean_loss(self, model: nn.Module, batches: Iterable[Any]) -> float:
        """The task's loss per token (or example) over ``batches``, in eval mode."""
        return mean_loss(model, self.loss, batches)

    @abstractmethod
    def build_model(self) -> nn.Module: ...

    @abstractmethod
    def loss(self, model: nn.Module, batch: Any) -> tuple[Tensor, Tensor | int]: ...

    @abstractmethod
    def batches(self, epoch: int) -> Iterable[Any]: ...

    @abstractmethod
    def evaluate(self, model: nn.Module) -> dict[str, float]: ...

    @abstractmethod
    def test(self, model: nn.Module) -> dict[str, Any]: ...

    @abstractmethod
    def predict(
        self, model: nn.Module, inputs: Sequence[str], **options: Any
    ) -> list[str]: ...
