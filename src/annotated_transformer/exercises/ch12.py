"""Checks of chapter 12's exercises: averaging, a moving average, the DDP loss."""

from __future__ import annotations

from types import ModuleType

import torch

from annotated_transformer.exercises.grading import (
    assert_close,
    backward,
    exercise,
    rng,
    seed,
)

CHAPTER = "12"


@exercise(
    chapter=CHAPTER,
    name="average_state_dicts",
    title="Averaging checkpoints",
    hint="Average name by name; add up in a wider dtype than float16 (its largest "
    "number is 65504), give each tensor back its own dtype, and do not add into "
    "the first checkpoint's tensors in place.",
)
def check_average_state_dicts(m: ModuleType) -> None:
    gen = rng(0)
    states = [
        {"w": torch.randn(3, 4, generator=gen), "b": torch.randn(4, generator=gen)}
        for _ in range(5)
    ]
    copies = [{k: v.clone() for k, v in s.items()} for s in states]
    average = m.average_state_dicts(states)
    names = sorted(average)
    assert names == ["b", "w"], f"expected the names w and b, got {names}"
    for name in ("w", "b"):
        expected = torch.stack([s[name] for s in copies]).mean(0)
        assert_close(average[name], expected, f"the mean of {name!r}")
    for state, copy in zip(states, copies, strict=True):
        for name in state:
            assert torch.equal(state[name], copy[name]), "a checkpoint was modified"
    half = [{"w": torch.full((2,), 60000.0, dtype=torch.float16)} for _ in range(3)]
    mean = m.average_state_dicts(half)["w"]
    assert mean.dtype == torch.float16, f"float16 in, float16 out; got {mean.dtype}"
    assert torch.isfinite(mean).all() and (mean == 60000).all(), (
        f"three float16 tensors of 60000 average to 60000, yours {mean.tolist()}"
    )


@exercise(
    chapter=CHAPTER,
    name="ema_update",
    title="From averaging checkpoints to a moving average",
    hint="decay · average + (1 − decay) · weights for every name, in a new dict; "
    "after T steps it weighs the weights of step s by (1 − decay) · decay^(T − "
    "s).",
)
def check_ema_update(m: ModuleType) -> None:
    gen = rng(1)
    snapshots = [{"w": torch.randn(3, 2, generator=gen)} for _ in range(8)]
    decay = 0.7
    average = snapshots[0]
    for snapshot in snapshots[1:]:
        average = m.ema_update(average, snapshot, decay)
    steps = len(snapshots) - 1  # the closed form of the same recursion
    expected = decay**steps * snapshots[0]["w"]
    for s in range(1, steps + 1):
        expected = expected + (1 - decay) * decay ** (steps - s) * snapshots[s]["w"]
    assert_close(average["w"], expected, "the average after 7 updates")
    last = m.ema_update(snapshots[0], snapshots[1], 0.0)["w"]
    assert_close(last, snapshots[1]["w"], "decay 0 (the newest weights)")


def _rank_data(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 3, generator=gen), torch.randn(rows, 1, generator=gen)


@exercise(
    chapter=CHAPTER,
    name="ddp_loss",
    title="The loss each GPU backpropagates",
    hint="DDP divides the sum of the processes' gradients by world_size. Which "
    "loss, summed over the processes and divided by world_size, is the sum over "
    "all tokens divided by their number?",
)
def check_ddp_loss(m: ModuleType) -> None:
    shares = [_rank_data(rows, seed) for seed, rows in enumerate((2, 5, 9))]
    tokens = sum(len(x) for x, _ in shares)
    torch.manual_seed(seed(0))
    model = torch.nn.Linear(3, 1)
    gradients, losses = [], []  # per process, as DDP sees them before averaging
    for x, y in shares:
        model.zero_grad()
        loss_sum = ((model(x) - y) ** 2).sum()
        sent = loss_sum.detach().requires_grad_(True)
        with backward(torch.tensor(1.0)):  # the answer's loss, backpropagated
            loss = m.ddp_loss(sent, len(x), tokens, len(shares))
        loss_sum.backward(sent.grad)
        gradients.append(model.weight.grad.clone())
        losses.append(loss.detach())
    averaged = torch.stack(gradients).mean(0)  # DDP's all-reduce
    model.zero_grad()
    x, y = (torch.cat(parts) for parts in zip(*shares, strict=True))
    mean = ((model(x) - y) ** 2).mean()  # one process, every token
    mean.backward()
    assert_close(averaged, model.weight.grad, "the averaged gradient of the weight")
    logged = torch.stack(losses).mean()  # what the processes' logs average to
    assert_close(logged, mean.detach(), "the losses averaged over the processes")
