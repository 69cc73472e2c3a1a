"""Chapter 19 exercises (Going big): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=19
or  python -m annotated_transformer.exercises 19
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor, nn

LossFn = Callable[[nn.Module, Any], Tensor]


def training_state_bytes(
    n_parameters: int,
    world_size: int = 1,
    sharded: bool = False,
) -> int:
    """Bytes of weights, gradients and Adam's moments per device, all in fp32, for
    a model of ``n_parameters``; ``sharded``: FSDP over ``world_size`` devices."""
    raise NotImplementedError


def accumulate_gradients(
    model: nn.Module,
    loss_fn: LossFn,
    micro_batches: Sequence[Any],
) -> None:
    """Find the bug: leave in .grad the gradient of the whole batch's mean loss."""
    model.zero_grad()
    for batch in micro_batches:
        loss_fn(model, batch).backward()


def train_steps(
    model: nn.Module,
    optimizer: Any,
    scheduler: Any,
    micro_batches: Sequence[Any],
    accumulate: int,
    loss_fn: LossFn,
) -> None:
    """Find the bug: one optimiser step per ``accumulate`` micro-batches."""
    optimizer.zero_grad()
    for i, batch in enumerate(micro_batches, 1):
        (loss_fn(model, batch) / accumulate).backward()
        if i % accumulate == 0:
            optimizer.step()
            optimizer.zero_grad()
        scheduler.step()


def update_scale(
    scale: float, good_steps: int, found_inf: bool, growth_interval: int = 2000
) -> tuple[float, int, bool]:
    """The dynamic loss scaler of fp16 training after one step.

    scale: the current scale; good_steps: steps without overflow since the scale
    last changed; found_inf: this step's gradients overflowed. returns the new
    (scale, good_steps) and whether this step's update is skipped
    """
    raise NotImplementedError
