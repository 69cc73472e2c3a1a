"""Reference solutions to chapter 19's exercises (going big)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor, nn

LossFn = Callable[[nn.Module, Any], Tensor]


def training_state_bytes(
    n_parameters: int,
    world_size: int = 1,
    sharded: bool = False,
) -> int:
    """Bytes of weights, gradients and Adam's moments on one device, fp32.

    Unsharded (one device, or DDP): 4 + 4 + 8 = 16 bytes a parameter. Sharded
    (FSDP) over ``world_size`` devices: each keeps ⌈P / W⌉ parameters' worth.
    """
    per_device = n_parameters
    if sharded:
        per_device = math.ceil(n_parameters / world_size)
    return 16 * per_device


def accumulate_gradients(
    model: nn.Module,
    loss_fn: LossFn,
    micro_batches: Sequence[Any],
) -> None:
    """Leave in ``.grad`` the gradient of the mean loss of all micro-batches.

    The micro-batches are of equal size; ``loss_fn`` returns each one's mean.
    """
    model.zero_grad()
    for batch in micro_batches:
        loss = loss_fn(model, batch) / len(micro_batches)  # divided: a mean
        loss.backward()


def train_steps(
    model: nn.Module,
    optimizer: Any,
    scheduler: Any,
    micro_batches: Sequence[Any],
    accumulate: int,
    loss_fn: LossFn,
) -> None:
    """An optimiser step and a scheduler step per ``accumulate`` batches."""
    optimizer.zero_grad()
    for i, batch in enumerate(micro_batches, 1):
        (loss_fn(model, batch) / accumulate).backward()
        if i % accumulate == 0:
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()  # the schedule counts optimiser steps


def update_scale(
    scale: float,
    good_steps: int,
    found_inf: bool,
    growth_interval: int = 2000,
) -> tuple[float, int, bool]:
    """The dynamic loss scaler after one step: (scale, good_steps, skipped).

    An overflow skips the update, halves the scale and restarts the count;
    after ``growth_interval`` good steps in a row, the scale doubles and the
    count starts again.
    """
    if found_inf:
        return scale / 2, 0, True
    good_steps += 1
    if good_steps == growth_interval:
        return scale * 2, 0, False
    return scale, good_steps, False
