"""Chapter 12 exercises (Tricks from the paper): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=12
or  python -m annotated_transformer.exercises 12
"""

from __future__ import annotations

from torch import Tensor


def average_state_dicts(states: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Element-wise mean of the state dicts of one model (same names and shapes).

    returns a new dict, each tensor in its input dtype; the inputs stay unchanged
    """
    raise NotImplementedError


def ema_update(
    average: dict[str, Tensor],
    weights: dict[str, Tensor],
    decay: float,
) -> dict[str, Tensor]:
    """One step of an exponential moving average of the weights, name by name.

    returns a new dict: decay · average + (1 − decay) · weights
    """
    raise NotImplementedError


def ddp_loss(
    loss_sum: Tensor,
    local_tokens: int,
    global_tokens: int,
    world_size: int,
) -> Tensor:
    """The loss one of ``world_size`` processes backpropagates.

    loss_sum: its loss summed over its local_tokens; global_tokens: the tokens of
    all processes together. DDP averages the processes' gradients; the average
    must be the gradient of the mean loss over all global_tokens.
    """
    raise NotImplementedError

