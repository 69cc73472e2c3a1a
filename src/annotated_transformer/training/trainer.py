"""Training: the paper's optimiser and one loop for every task.

A task gives the loop two functions:

- ``batches(epoch)``: the training batches of one epoch, the *same* batches in the
  same order every time (seeded from the epoch, never from the global generators),
  so that a resumed run continues at the exact batch where it stopped;
- ``loss_fn(model, batch) -> (loss_sum, n_tokens)``: the loss *summed* over the
  batch's tokens, and their count. The loop divides the gradients once by the
  tokens of the whole optimiser step, so 4 micro-batches of b sentences make the
  same update as one batch of 4b.

:meth:`Trainer.train_step` is one optimiser step: forward and backward over the
micro-batches, gradient clipping, one update, one scheduler step.
:meth:`Trainer.fit` repeats it, evaluates, writes checkpoints and keeps the
history. Under fp16 a ``GradScaler`` multiplies the loss by a scale S, divides the
gradients by S before clipping, and skips a step whose gradients overflowed
(halving S): a skipped step is part of fp16 training, not an error. Under DDP or
FSDP only rank 0 shows progress and writes checkpoints.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import torch
import torch.utils.checkpoint
from torch import Tensor, nn

from annotated_transformer.models.eval_mode import evaluating
from annotated_transformer.training import distributed
from annotated_transformer.training.checkpoints import (
    CheckpointError,
    full_state_dicts,
    is_sharded,
    keep_previous,
    load_checkpoint,
    save_checkpoint,
)
from annotated_transformer.training.loss import LossFn
from annotated_transformer.training.precision import precision_context
from annotated_transformer.training.progress import tqdm
from annotated_transformer.training.schedules import retarget


def make_optimizer(model: nn.Module, lr: float = 1.0) -> torch.optim.Adam:
    """Adam with the paper's β₁=0.9, β₂=0.98, ε=1e-9 (section 5.3).

    ``schedule.make_scheduler`` then sets the rate at every step.
    """
    return torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)


def mean_loss(model: nn.Module, loss_fn: LossFn, batches: Iterable[Any]) -> float:
    """The loss per token over ``batches`` (a validation loss), in eval mode and
    without autograd.

    The sums of ``loss_fn`` are added up and divided once by the total token count,
    so every token weighs the same whatever batch it sits in.
    """
    device = next(model.parameters()).device
    total, count = 0.0, 0
    with evaluating(model):
        for batch in batches:
            if hasattr(batch, "to"):
                batch = batch.to(device)
            loss_sum, n = loss_fn(model, batch)
            total, count = total + loss_sum.item(), count + int(n)
    return total / max(count, 1)


def checkpointed(forward: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``forward`` that keeps no activations for the backward pass but its inputs:
    backward runs it again (``torch.utils.checkpoint``, non-reentrant). The random
    generators are replayed, so dropout draws the same masks twice and the gradients
    equal the plain ones. Only while training with autograd on; evaluation and
    decoding run ``forward`` as it is.
    """

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Tensor:
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        return torch.utils.checkpoint.checkpoint(
            forward, *args, use_reentrant=False, **kwargs
        )

    return run


def checkpoint_blocks(model: nn.Module, blocks: tuple[type, ...]) -> int:
    """Activation checkpointing: every submodule of a type in ``blocks`` (a layer of
    the stack) recomputes its activations in the backward pass; returns how many.
    Peak memory then holds each block's input and one block's activations at a time,
    for about one more forward pass of compute. The weights and their names are
    untouched (checkpoints load as before)."""
    found = [m for m in model.modules() if isinstance(m, blocks)]
    for module in found:
        module.forward = checkpointed(module.forward)
    return len(found)


class NonFiniteLossError(FloatingPointError):
    """The loss or gradient norm became inf/NaN; the weights were not updated."""


def _every(step: int, period: int) -> bool:
    return period > 0 and step % period == 0


@dataclass(frozen=True)
class Budget:
    """A limit on training time: ``seconds`` of training steps (evaluations and
    checkpoints not counted, as in ``train_minutes``).

    At step ``measure_at`` (the end of the warm-up) the run measures its pace over
    the second half of the steps so far and plans the steps that fill ``MARGIN`` of
    the budget (the pace drifts by a few per cent over a run); the schedule then
    ends there. The plan is saved with the checkpoints, so a resumed run keeps it
    and repeats the same steps. A run also stops at the first step that reaches
    ``seconds``, should the pace drop further.
    """

    MARGIN: ClassVar[float] = 0.97

    seconds: float
    measure_at: int
    most: int  # the run's steps without a budget

    def plan(self, rows: Sequence[dict[str, float]]) -> int:
        """The steps that fill the budget at the pace of ``rows``."""
        done, half = len(rows), len(rows) // 2
        pace = (rows[-1]["seconds"] - rows[half - 1]["seconds"]) / (done - half)
        left = int((self.MARGIN * self.seconds - rows[-1]["seconds"]) / pace)
        return min(self.most, done + max(left, 0))

    def spent(self, rows: Sequence[dict[str, float]]) -> bool:
        return bool(rows) and rows[-1]["seconds"] >= self.seconds


class Trainer:
    """Runs optimiser steps of ``loss_fn`` on ``model`` and keeps the state needed
    to resume.

    accumulate: micro-batches per optimiser step; clip_norm: max gradient norm
        (None: no clipping, as in the paper); precision: "fp32", "bf16" or "fp16",
        already resolved (every forward runs in
        :func:`~annotated_transformer.training.precision.precision_context`; weights
        stay fp32; fp16 with a ``GradScaler``, ``scaler``);
    checkpoint_path: where ``save``/``fit`` write; config: plain data saved with it;
    stream: what the batches carry from one to the next (Transformer-XL's memory),
        an object with ``state_dict``/``load_state_dict`` saved in the checkpoint
        and restored by ``resume``; before_save: called before every checkpoint is
        written, to refuse it by raising (the runner: the run's folder was moved);
    folder: an open descriptor of ``checkpoint_path``'s folder, which checkpoints
        are then written through (the runner's run folder, wherever it moves).
    State: ``step`` (optimiser steps done), ``epoch`` and ``batch_in_epoch`` (data
    position), ``history`` (a DataFrame, one row per step: loss, lr, tokens,
    tokens_per_s, grad_norm, ...).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: LossFn,
        scheduler: Any = None,
        *,
        accumulate: int = 1,
        clip_norm: float | None = None,
        precision: str = "fp32",
        checkpoint_path: str | Path | None = None,
        config: dict[str, Any] | None = None,
        stream: Any = None,
        before_save: Callable[[], None] | None = None,
        folder: int | None = None,
        budget: Budget | None = None,
    ) -> None:
        if accumulate < 1:
            raise ValueError(
                f"accumulate={accumulate} must be >= 1 micro-batches per step"
            )
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.scheduler = scheduler
        self.accumulate, self.clip_norm = accumulate, clip_norm
        self.precision = precision
        self.checkpoint_path = Path(checkpoint_path) if checkpoint_path else None
        self.config, self.stream = config or {}, stream
        self.before_save, self.folder = before_save, folder
        self.budget, self.planned = budget, None
        self.device = next(model.parameters()).device
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=precision == "fp16"
        )
        self.step = self.epoch = self.batch_in_epoch = 0
        self.saved_step: int | None = None
        self.rows: list[dict[str, float]] = []

    @property
    def history(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)

    def _forward(self, batch: Any) -> tuple[Tensor, int]:
        if hasattr(batch, "to"):
            batch = batch.to(self.device)
        with precision_context(self.device, self.precision):
            loss_sum, n_tokens = self.loss_fn(self.model, batch)
        if not torch.isfinite(loss_sum):
            raise NonFiniteLossError(
                self._stop_message(f"the loss is {loss_sum.item()}")
            )
        return loss_sum, int(n_tokens)

    def _stop_message(self, what: str) -> str:
        where = (
            f"{what} at step {self.step + 1} (epoch {self.epoch}, batch "
            f"{self.batch_in_epoch})"
        )
        if self.saved_step is None:
            kept = "No checkpoint was written in this run."
        else:
            kept = (
                f"The last good checkpoint, {self.checkpoint_path} (step "
                f"{self.saved_step}), "
            )
            kept += "is intact: resume from it."
        return (
            f"{where}; stopped before updating the weights. {kept} Try a lower "
            "learning rate, gradient clipping (clip_norm) or fp32, and check the "
            "batch for bad values."
        )

    def train_step(self, micro_batches: Sequence[Any]) -> dict[str, float]:
        """One optimiser step over ``micro_batches``; returns the step's row of the
        history (loss per token, lr, tokens, grad_norm, ...)."""
        start = time.perf_counter()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total_loss, total_tokens = 0.0, 0
        # fp16 backpropagates the sums divided by the first micro-batch's token
        # count, lest they overflow; the gradients are multiplied back below.
        divisor = 1
        for i, batch in enumerate(micro_batches):
            last = i == len(micro_batches) - 1
            # DDP, FSDP: reduce the gradients once, after the last backward.
            if hasattr(self.model, "set_requires_gradient_sync"):
                self.model.set_requires_gradient_sync(last)
            no_sync = getattr(self.model, "no_sync", None)
            with contextlib.nullcontext() if last or no_sync is None else no_sync():
                loss_sum, n_tokens = self._forward(batch)
                if i == 0 and self.scaler.is_enabled():
                    divisor = max(n_tokens, 1)
                # the gradients of the micro-batches' sums add up
                self.scaler.scale(loss_sum / divisor).backward()
            total_loss += loss_sum.item()
            total_tokens += n_tokens
        # fp16: divide by the loss scale before clipping
        self.scaler.unscale_(self.optimizer)
        params = [p for p in self.model.parameters() if p.grad is not None]
        for p in params:  # the gradient of the mean loss over the step's tokens
            p.grad.div_(max(total_tokens, 1) / divisor)
        norm = nn.utils.clip_grad_norm_(params, self.clip_norm or math.inf)
        if hasattr(norm, "full_tensor"):  # FSDP: a norm sharded across ranks
            norm = norm.full_tensor()
        grad_norm = float(norm)
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else None
        if not math.isfinite(grad_norm) and scale is None:
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError(
                self._stop_message(f"the gradient norm is {grad_norm}")
            )
        lr = self.optimizer.param_groups[0]["lr"]
        # fp16: skipped when a gradient is inf or NaN
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.scheduler is not None:
            self.scheduler.step()
        self.step += 1
        seconds = time.perf_counter() - start
        # the training time so far, evaluation not included
        elapsed = (self.rows[-1]["seconds"] if self.rows else 0.0) + seconds
        row = {
            "step": self.step,
            "epoch": self.epoch,
            "loss": total_loss / max(total_tokens, 1),
            "lr": lr,
            "tokens": total_tokens,
            "tokens_per_s": total_tokens / seconds,
            "grad_norm": grad_norm,
            "seconds": elapsed,
        }
        if scale is not None:  # fp16: the scale this step's loss was multiplied by
            row["loss_scale"] = scale
        self.rows.append(row)
        return row

    def _stream(self, batches: Callable[[int], Iterable[Any]]) -> Iterator[Any]:
        """Micro-batches from the saved position on, epoch after epoch."""
        while True:
            seen = 0
            for i, batch in enumerate(batches(self.epoch)):
                seen += 1
                if i < self.batch_in_epoch:
                    continue  # consumed before the checkpoint this run resumed from
                self.batch_in_epoch = i + 1
                yield batch
            if seen == 0:
                raise ValueError(
                    f"batches({self.epoch}) yielded no batches; give it data"
                )
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0

    def fit(
        self,
        batches: Callable[[int], Iterable[Any]],
        max_steps: int,
        *,
        evaluate: Callable[[], dict[str, float]] | None = None,
        every: int = 0,
        checkpoint_every: int = 0,
        progress: bool = True,
    ) -> pd.DataFrame:
        """Train until ``step == max_steps`` (counting steps
        of earlier, resumed runs).

        batches: epoch -> that epoch's batches (deterministic,
            see the module docstring);
        evaluate: () -> metrics, called after every ``every``-th step; its metrics
            join that step's row (e.g. ``{"val_loss": 2.1}``) before the
            checkpoint of that step is written.
        checkpoint_every: save every so many steps, after every evaluation and at
            the end (needs ``checkpoint_path``).
        Returns ``history``.
        """
        if checkpoint_every and self.checkpoint_path is None:
            raise ValueError(
                "checkpoint_every needs a Trainer(checkpoint_path=...)"
            )
        main = distributed.rank() == 0
        stream = self._stream(batches)
        bar = tqdm(
            total=max_steps,
            initial=self.step,
            desc="train",
            disable=not (progress and main),
        )
        with bar:
            while not self.done(max_steps):
                row = self.train_step(
                    [next(stream) for _ in range(self.accumulate)]
                )
                if self.budget and self.step == self.budget.measure_at:
                    self.planned = self.budget.plan(self.rows)
                    retarget(self.scheduler, self.planned)
                    bar.total = self.end(max_steps)
                bar.update(1)
                loss, lr, tok_s = row["loss"], row["lr"], row["tokens_per_s"]
                bar.set_postfix(
                    loss=f"{loss:.3f}",
                    lr=f"{lr:.2e}",
                    tok_s=f"{tok_s:.0f}",
                    refresh=False,
                )
                done = self.done(max_steps)
                evaluated = evaluate is not None and _every(self.step, every)
                if evaluated:
                    row.update(evaluate())
                due = done or evaluated or _every(self.step, checkpoint_every)
                if self.checkpoint_path and due:
                    self.save()
        return self.history

    def end(self, max_steps: int) -> int:
        """The last step: ``max_steps``, or the budget's plan when sooner."""
        return min(max_steps, self.planned or max_steps)

    def done(self, max_steps: int) -> bool:
        """Has training reached its last step, or spent its budget?"""
        spent = self.budget is not None and self.budget.spent(self.rows)
        return self.step >= self.end(max_steps) or spent

    def save(self, path: str | Path | None = None) -> Path | None:
        """Write a checkpoint (rank 0 only) with everything ``resume`` needs; the
        one it replaces is kept as ``checkpoint.previous(path)``
        (``last.previous.pt``).

        An FSDP model's full weights and optimiser state are gathered first: call it
        on every rank then (``fit`` does).
        """
        path = Path(path) if path else self.checkpoint_path
        if path is None:
            raise ValueError(
                "no checkpoint path: pass one or set Trainer(checkpoint_path=...)"
            )
        if distributed.rank() != 0 and not is_sharded(self.model):
            return None
        # FSDP: every rank takes part in gathering the full weights
        model, optimizer = full_state_dicts(self.model, self.optimizer)
        if distributed.rank() != 0:
            return None
        if self.before_save is not None:
            self.before_save()
        extra = {
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "history": self.rows,
        }
        if self.planned is not None:
            extra["planned"] = self.planned
        if self.scaler.is_enabled():
            extra["scaler"] = self.scaler.state_dict()
        if self.stream is not None:
            extra["stream"] = self.stream.state_dict()
        keep_previous(path, folder=self.folder)
        save_checkpoint(
            path,
            model,
            optimizer,
            self.scheduler,
            step=self.step,
            config=self.config,
            extra=extra,
            folder=self.folder,
        )
        self.saved_step = self.step
        return path

    def resume(
        self, path: str | Path | None = None, *, max_steps: int | None = None
    ) -> dict[str, Any]:
        """Restore model, optimiser, scheduler, random generators, data position,
        history, (fp16) the loss scale and the stream's state. A checkpoint that
        does not fit (:func:`check_position`; a step beyond ``max_steps``) is
        refused before anything is restored."""
        path = Path(path) if path else self.checkpoint_path
        if path is None:
            raise ValueError(
                "no checkpoint path: pass one or set Trainer(checkpoint_path=...)"
            )
        if is_sharded(self.model):
            raise ValueError(
                "resuming a sharded (FSDP) run on several processes is not "
                "supported: resume it in one process, or with sharding=none"
            )
        state = load_checkpoint(
            path,
            self.model,
            self.optimizer,
            self.scheduler,
            check=functools.partial(check_position, path=path, max_steps=max_steps),
        )
        extra = state["extra"]
        if self.scaler.is_enabled() and "scaler" in extra:
            self.scaler.load_state_dict(extra["scaler"])
        if self.stream is not None:
            self.stream.load_state_dict(extra.get("stream", {}))
        self.step, self.saved_step = state["step"], state["step"]
        self.epoch, self.batch_in_epoch = extra["epoch"], extra["batch_in_epoch"]
        self.rows = list(extra["history"])
        self.planned = extra.get("planned")
        if self.planned is not None:
            retarget(self.scheduler, self.planned)
        self.config = state["config"] or self.config
        return state


def check_position(
    state: dict[str, Any], path: str | Path, max_steps: int | None = None
) -> None:
    """Refuse (:class:`CheckpointError`) a checkpoint that :meth:`Trainer.resume`
    cannot continue from: no data position (``epoch``, ``batch_in_epoch``: counts),
    a history that is not one row per step done (a dict of numbers with its step
    and the seconds trained), or a step beyond ``max_steps`` (the run's length)."""
    extra = state["extra"]
    position = [extra.get("epoch"), extra.get("batch_in_epoch")]
    history = extra.get("history")
    if not all(type(n) is int and n >= 0 for n in position):
        what = f"its data position (epoch, batch) is {position}, not two counts"
    elif not isinstance(history, list) or not all(
        _row(r, i) for i, r in enumerate(history, 1)
    ):
        what = "its history is not one row of numbers per step"
    elif len(history) != state["step"]:
        what = f"its step {state['step']} is not its history's {len(history)} rows"
    elif max_steps is not None and state["step"] > max_steps:
        what = f"its step {state['step']} lies beyond the run's {max_steps} steps"
    elif "planned" in extra and not (
        type(extra["planned"]) is int
        and 1 <= extra["planned"] <= (max_steps or 2**31)
    ):
        what = f"its budget's plan is {extra['planned']!r}, not a count of steps"
    else:
        return
    raise CheckpointError(
        f"{path} is damaged: {what}; use an earlier checkpoint, or train again"
    )


def _count(value: Any, most: int | None) -> bool:
    """Is ``value`` a number of steps, 1 to ``most``?"""
    return type(value) is int and 1 <= value <= (most or value)


def _row(row: Any, step: int) -> bool:
    """Is ``row`` the history row of ``step`` that :meth:`Trainer.train_step` makes
    (and an evaluation adds numbers to)?"""
    return (
        isinstance(row, dict)
        and row.get("step") == step
        and isinstance(row.get("seconds"), int | float)
        and all(
            isinstance(v, int | float) and not isinstance(v, bool)
            for v in row.values()
        )
    )
