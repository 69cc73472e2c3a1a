"""Reference solutions to chapter 12's exercises (tricks from the paper)."""

from __future__ import annotations

from torch import Tensor


def average_state_dicts(states: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Element-wise mean of state dicts of one model, in each tensor's dtype.

    Summed in float64, so that half-precision weights cannot overflow on the
    way; the inputs are left untouched.
    """
    if not states or any(s.keys() != states[0].keys() for s in states):
        raise ValueError("give state dicts (one or more) with the same names")
    average = {}
    for name, first in states[0].items():
        total = sum(state[name].double() for state in states)
        average[name] = (total / len(states)).to(first.dtype)
    return average


def ema_update(
    average: dict[str, Tensor],
    weights: dict[str, Tensor],
    decay: float,
) -> dict[str, Tensor]:
    """One step of an exponential moving average of the weights.

    returns a new dict: decay · average + (1 − decay) · weights, name by name
    """
    new = {}
    for name, value in average.items():
        new[name] = decay * value + (1 - decay) * weights[name]
    return new


def ddp_loss(
    loss_sum: Tensor,
    local_tokens: int,
    global_tokens: int,
    world_size: int,
) -> Tensor:
    """The loss one of ``world_size`` processes backpropagates.

    DDP averages the processes' gradients; for that average to be the gradient
    of the mean over *all* tokens, each process divides its sum by the global
    token count and multiplies by world_size to undo the averaging.
    """
    return loss_sum * world_size / global_tokens
