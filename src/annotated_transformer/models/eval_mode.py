"""The mode a model is scored and generates in: no dropout, no autograd.

Every evaluation in the package (the trainer's validation loss, decoding,
sampling, a task's scores) runs inside :func:`evaluating`, so that it neither
drops activations at random nor builds a graph it will never differentiate, and
leaves the model in the mode it found it: training can go on after.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """Eval mode (no dropout) and no autograd inside; the model's
    mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield model
    finally:
        model.train(was_training)
