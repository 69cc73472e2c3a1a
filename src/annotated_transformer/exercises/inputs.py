"""Objects that checks hand to answers, made on both sides of the grader.

A check sends a module, an optimiser or a loss function as a recipe
(:func:`protocol.build`): the worker imports the factory by its dotted name and
makes its own copy. The factories that torch and the book do not already have
live here, where the worker may import them: they hold no check and no expected
value.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM


def decoder_lm(
    vocab: int, d_model: int, h: int, N: int, max_len: int, d_ff: int, causal: bool
) -> DecoderLM:
    """chapter 14's byte-level model, its blocks causal or not, in eval mode."""
    model = DecoderLM(DecoderConfig(vocab, d_model, h, N, max_len, d_ff)).eval()
    for block in model.blocks:
        block.causal = causal
    return model


class Peeking(nn.Module):
    """A language model that cheats: position i reads byte i + 1."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        return self.model(torch.cat([x[:, 1:], x[:, -1:]], dim=1))


class MeanSquaredError:
    """loss(model, (x, y)): the mean squared error of model(x) over a batch."""

    def __call__(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
        x, y = batch
        return F.mse_loss(model(x), y)


def sgd(model: nn.Module, lr: float) -> torch.optim.SGD:
    """Plain SGD over ``model``'s parameters."""
    return torch.optim.SGD(model.parameters(), lr=lr)
