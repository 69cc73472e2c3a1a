"""The learning-rate schedule of the paper ("Noam"), Vaswani et al. 2017, section 5.3, eq. 3:

    lrate = factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)

The rate grows linearly for the first ``warmup`` steps and then decays as 1/√step; the two
branches meet at ``step == warmup``, where the rate peaks at factor · (d_model · warmup)^-0.5.
"""

from __future__ import annotations

import functools

import torch
from torch.optim.lr_scheduler import LambdaLR


def rate(step: int, model_size: int, factor: float, warmup: int) -> float:
    """The learning rate at optimiser step ``step`` (eq. 3 above).

    Step 0 is read as step 1 (as in the Annotated Transformer), so that 0^-0.5 is never taken:
    ``LambdaLR`` asks for step 0 when it is built, before the first update.
    """
    if model_size <= 0 or warmup <= 0:
        raise ValueError(
            f"rate needs model_size > 0 and warmup > 0, got model_size={model_size}, "
            f"warmup={warmup}"
        )
    if step < 0:
        raise ValueError(f"step={step} is negative; steps count optimiser updates from 0")
    step = max(step, 1)
    return factor * model_size**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam_scheduler(
    optimizer: torch.optim.Optimizer, model_size: int, factor: float = 1.0, warmup: int = 4000
) -> LambdaLR:
    """A ``LambdaLR`` that sets every parameter group's rate to ``base_lr · rate(step, ...)``.

    Build the optimiser with ``lr=1.0`` so that the learning rate *is* ``rate(step)``; call
    ``scheduler.step()`` once per optimiser step (not per micro-batch).
    """
    rate(1, model_size, factor, warmup)  # validate the arguments now, not at the first step
    # A partial (not a lambda) so that the scheduler's state_dict stays plain data.
    schedule = functools.partial(rate, model_size=model_size, factor=factor, warmup=warmup)
    return LambdaLR(optimizer, lr_lambda=schedule)
