"""Checks of chapter 19's exercises: training memory, accumulation, the loss scaler.

The references: a measurement, full-batch steps and torch.amp.GradScaler.
"""

from __future__ import annotations

import random
import warnings
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.exercises.grading import (
    assert_close,
    exercise,
    rng,
    seed,
)
from annotated_transformer.exercises.inputs import MeanSquaredError, sgd
from annotated_transformer.exercises.protocol import build
from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM
from annotated_transformer.training.schedules import make_scheduler

CHAPTER = "19"


@exercise(
    chapter=CHAPTER,
    name="training_state_bytes",
    title="The memory of Adam's training state",
    hint="Per parameter: the weight, its gradient, and Adam's m and v, each a "
    "4-byte float. Sharding divides the parameters over the devices (round up).",
)
def check_training_state_bytes(m: ModuleType) -> None:
    torch.manual_seed(seed(0))
    model = DecoderLM(DecoderConfig(64, 16, 2, 2, 8, 32))
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randint(0, 64, (2, 8))
    F.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
    optimizer.step()  # Adam's moments exist from the first step on
    tensors = [p for p in model.parameters()] + [p.grad for p in model.parameters()]
    for state in optimizer.state.values():
        tensors += [state["exp_avg"], state["exp_avg_sq"]]
    measured = sum(t.numel() * t.element_size() for t in tensors)
    n = sum(p.numel() for p in model.parameters())
    got = m.training_state_bytes(n)
    assert got == measured, (
        f"{n:,} parameters after an Adam step hold {measured:,} bytes of weights, "
        f"gradients and moments; you say {got:,}"
    )
    for world in (2, 3, 8):
        got = m.training_state_bytes(n, world, sharded=True)
        expected = 16 * -(-n // world)
        assert got == expected, f"over {world} devices: {expected:,} bytes, {got:,}"
        assert m.training_state_bytes(n, world) == measured, "DDP keeps a full copy"


def _data(seed: int, batches: int, size: int) -> list[tuple[Tensor, Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(size, 3, generator=gen), torch.randn(size, 1, generator=gen))
        for _ in range(batches)
    ]


_mse = MeanSquaredError()  # the mean over the micro-batch


def _linear() -> nn.Linear:
    torch.manual_seed(seed(0))
    return build(nn.Linear, 3, 1)


@exercise(
    chapter=CHAPTER,
    name="accumulate_gradients",
    title="Find the bug: the loss not divided for accumulation",
    question="Split one batch in 4 and accumulate: should the gradient be 4 times "
    "as large as the whole batch's? Each micro-batch's loss is a mean over its "
    "examples.",
    hint="divide each micro-batch's loss by the number of micro-batches, so that "
    "the summed gradients are the mean's.",
)
def check_accumulate_gradients(m: ModuleType) -> None:
    micro = _data(0, 4, 5)
    whole = (torch.cat([x for x, _ in micro]), torch.cat([y for _, y in micro]))
    reference = _linear()
    _mse(reference, whole).backward()
    model = _linear()
    for p in model.parameters():  # left over from an earlier step
        p.grad = torch.randn(p.shape, generator=rng(1))
    m.accumulate_gradients(model, build(MeanSquaredError), micro)
    for name, p in model.named_parameters():
        expected = dict(reference.named_parameters())[name].grad
        assert_close(p.grad, expected, f"the gradient of {name} (one batch of 20)")


@exercise(
    chapter=CHAPTER,
    name="train_steps",
    title="Find the bug: the scheduler stepped per micro-batch",
    question="Count the optimiser steps, then ask the scheduler how many steps it "
    "has seen (scheduler.last_epoch). What does the schedule's warm-up count?",
    hint="step the scheduler once per optimiser step, after optimizer.step(), not "
    "once per micro-batch.",
)
def check_train_steps(m: ModuleType) -> None:
    def warmup(step: int) -> float:  # the schedule's rate during its warm-up
        return (step + 1) / 10

    micro = _data(1, 8, 4)
    model = _linear()
    optimizer = build(sgd, model, lr=1.0)
    scheduler = build(
        make_scheduler, optimizer, "linear", 1.0, warmup=10, total=100
    )
    with warnings.catch_warnings():  # PyTorch's own warning would give it away
        warnings.simplefilter("ignore", UserWarning)
        m.train_steps(
            model, optimizer, scheduler, micro, 4, build(MeanSquaredError)
        )
    assert scheduler.last_epoch == 2, (
        f"8 micro-batches, 4 a step: 2 optimiser steps, but the scheduler counted "
        f"{scheduler.last_epoch}"
    )
    reference = _linear()  # two full-batch SGD steps at the schedule's rates
    for step in range(2):
        group = micro[4 * step : 4 * step + 4]
        x, y = torch.cat([b[0] for b in group]), torch.cat([b[1] for b in group])
        reference.zero_grad()
        _mse(reference, (x, y)).backward()
        with torch.no_grad():
            for p in reference.parameters():
                p -= warmup(step) * p.grad
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert_close(p, q.detach(), "the weights after two steps")


@exercise(
    chapter=CHAPTER,
    name="update_scale",
    title="The dynamic loss scale of fp16",
    hint="After an overflow: skip, halve the scale, restart the count of good "
    "steps. After a good step: count it; when the count reaches growth_interval, "
    "double the scale and restart the count.",
)
def check_update_scale(m: ModuleType) -> None:
    rng = random.Random(seed(10))
    flags = [rng.random() < 0.3 for _ in range(40)] + [False] * 7
    weight = nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3)
    scale, good = 1024.0, 0
    for step, overflow in enumerate(flags):
        optimizer.zero_grad()
        x = torch.tensor([float("inf") if overflow else 1.0, 1.0])
        scaler.scale((weight * x).sum()).backward()
        before = weight.detach().clone()
        scaler.step(optimizer)
        scaler.update()
        skipped = torch.equal(before, weight.detach())
        scale, good, said_skip = m.update_scale(scale, good, overflow, 3)
        assert said_skip == skipped, f"step {step}: GradScaler skipped={skipped}"
        assert scale == scaler.get_scale(), (
            f"step {step} (overflow={overflow}): GradScaler's scale is "
            f"{scaler.get_scale()}, yours {scale}"
        )
