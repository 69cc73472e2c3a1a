"""Reference solutions to chapter 12's exercises (tricks from the paper)."""

from __future__ import annotations

from torch import Tensor


def average_state_dicts(states: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Element-wise mean of state dicts of one model, each tensor in its own dtype.

    Summed in float64, so that half-precision weights cannot overflow on the way;
    the inputs are left untouched.
    """
    if not states or any(s.keys() != states[0].keys() for s in states):
        raise ValueError("give at least one state dict, all with the same names")
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
    """One step of an exponential moving average of the weights:
    decay · average + (1 − decay) · weights, name by name, in a new dict."""
    mixed = {name: decay * average[name] for name in average}
    return {name: mixed[name] + (1 - decay) * weights[name] for name in average}


def ddp_loss(
    loss_sum: Tensor,
    local_tokens: int,
    global_tokens: int,
    world_size: int,
) -> Tensor:
    """What one of ``world_size`` processes backpropagates so that the mean of their
    gradients (DDP's all-reduce) is the gradient of the mean over *all* tokens:
    Σ_local / global_tokens, times world_size to undo the averaging."""
    return loss_sum * world_size / global_tokens
