"""Learning-rate schedules: the paper's ("Noam") and the
three that later work prefers.

The paper's, Vaswani et al. 2017, section 5.3, eq. 3:

    lrate = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)

The rate grows linearly for the first ``warmup`` steps and then decays as 1/√step;
the two branches meet at ``step == warmup``, where the rate peaks at
factor · (d_model · warmup)^-0.5.

Every task makes its scheduler with :func:`make_scheduler`, which takes the *peak*
rate, so that one number means the same thing whatever the shape. Each shape is a
factor f(step) in [0, 1] that multiplies the peak; ``step`` counts optimiser updates
from 0:

- ``noam``: min(step / warmup, √(warmup / step)), step 0 read as
  1 — eq. 3 divided by its peak;
- ``cosine``: linear warm-up, (step + 1) / warmup, then ½(1 + cos(π · progress))
  down to 0 at ``total``, progress = (step − warmup) / (total − warmup);
- ``linear``: the same warm-up, then (total − step) / (total −
  warmup) down to 0 at ``total``;
- ``inverse_sqrt``: T5's (Raffel et al. 2020): constant for ``warmup`` steps, then
  √(warmup / step), i.e. 1/√max(step, warmup) scaled to start at the peak.

A schedule that ends at 0 (cosine, linear) anneals the weights into a
minimum when the step budget is fixed in advance; noam and inverse_sqrt
never end, so a run can be extended.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from torch.optim.lr_scheduler import LambdaLR


def rate(step: int, model_size: int, factor: float, warmup: int) -> float:
    """The learning rate at optimiser step ``step`` (eq. 3 above).

    Step 0 is read as step 1 (as in the Annotated Transformer), so that 0^-0.5 is
    never taken: ``LambdaLR`` asks for step 0 when it is built, before the first
    update.
    """
    if min(model_size, warmup) <= 0 or step < 0:
        raise ValueError(
            "rate needs step >= 0 (optimiser updates from 0), model_size > 0 and "
            f"warmup > 0, got step={step}, model_size={model_size}, warmup={warmup}"
        )
    step = max(step, 1)
    return factor * model_size**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam(step: int, warmup: int) -> float:
    """The paper's shape over its peak: min(step / warmup,
    √(warmup / step)), step 0 as 1."""
    step = max(step, 1)
    return min(step / warmup, math.sqrt(warmup / step))


def cosine(step: int, warmup: int, total: int) -> float:
    """Linear warm-up to 1, then half a cosine down to 0 at
    ``total`` (and 0 after it)."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min((step - warmup) / (total - warmup), 1.0)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def linear(step: int, warmup: int, total: int) -> float:
    """Linear warm-up to 1, then a straight line down to 0 at
    ``total`` (and 0 after it)."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / (total - warmup))


def inverse_sqrt(step: int, warmup: int) -> float:
    """T5's: 1 for the first ``warmup`` steps, then √(warmup / step)."""
    return math.sqrt(warmup / max(step, warmup))


SCHEDULES: dict[str, Callable[..., float]] = {
    "noam": noam,
    "cosine": cosine,
    "linear": linear,
    "inverse_sqrt": inverse_sqrt,
}
# the shapes that need the total number of steps
ENDS_AT_TOTAL = ("cosine", "linear")


def make_scheduler(
    optimizer: torch.optim.Optimizer,
    kind: str,
    peak_lr: float,
    warmup: int,
    total: int,
) -> LambdaLR:
    """A scheduler whose rate at update ``step`` is
    ``peak_lr · SCHEDULES[kind](step, ...)``.

    Sets every parameter group's rate to ``peak_lr``; call ``scheduler.step()`` once
    per optimiser step (not per micro-batch). ``total``: the run's optimiser steps
    (the decay of cosine and linear ends there). The paper's eq. 3 is
    ``kind="noam"`` with ``peak_lr = factor · (d_model · warmup)^-0.5``.
    """
    if kind not in SCHEDULES:
        raise ValueError(
            f"unknown schedule {kind!r}; use one of {', '.join(SCHEDULES)}"
        )
    if not peak_lr > 0:
        raise ValueError(f"the peak learning rate must be > 0, got {peak_lr}")
    if warmup < 1:
        raise ValueError(f"warmup={warmup} must be at least 1 optimiser step")
    if kind in ENDS_AT_TOTAL and not warmup < total:
        raise ValueError(
            f"the {kind} schedule needs warmup ({warmup}) < total steps ({total}): "
            "shorten the warm-up or train longer"
        )
    for group in optimizer.param_groups:
        group["lr"] = peak_lr
        group.pop("initial_lr", None)  # LambdaLR takes its base rate from "lr"
    # A partial (not a lambda) so that the scheduler's state_dict stays plain data.
    extra = {"total": total} if kind in ENDS_AT_TOTAL else {}
    return LambdaLR(
        optimizer, functools.partial(SCHEDULES[kind], warmup=warmup, **extra)
    )


def retarget(scheduler: LambdaLR, total: int) -> None:
    """Make a cosine or linear ``scheduler`` end at ``total`` steps from now on.

    A run with a time budget knows its number of steps only once it has measured
    its pace (:class:`~annotated_transformer.training.trainer.Budget`); the
    warm-up does not depend on ``total``, so it is set at the end of the warm-up.
    """
    scheduler.lr_lambdas = [
        functools.partial(f.func, *f.args, **{**f.keywords, "total": total})
        if "total" in f.keywords
        else f
        for f in scheduler.lr_lambdas
    ]
