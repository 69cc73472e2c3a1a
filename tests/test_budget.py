"""A run with a time budget (``budget_minutes``, training.trainer.Budget): it plans
its steps from the pace it measures at the end of the warm-up, its schedule ends at
the plan, it stops when the budget is spent, and a resumed run keeps the plan."""

import itertools
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from test_training import PAD, resume_data, tiny_model

from annotated_transformer.book import results as results_page
from annotated_transformer.training import trainer as trainer_module
from annotated_transformer.training.checkpoints import CheckpointError
from annotated_transformer.training.loss import seq2seq_loss
from annotated_transformer.training.schedules import make_scheduler
from annotated_transformer.training.trainer import (
    Budget,
    Trainer,
    check_position,
    make_optimizer,
)

STEP = 0.25  # seconds of every step on the fake clock
WARMUP, MOST = 4, 50


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """perf_counter advances STEP per call: a step (from its first call to its
    second) lasts STEP."""
    ticks = itertools.count()
    fake = SimpleNamespace(perf_counter=lambda: next(ticks) * STEP)
    monkeypatch.setattr(trainer_module, "time", fake)


def budget_run(seconds: float, checkpoint: str | None = None) -> Trainer:
    """A cosine run of MOST steps with a budget of ``seconds``."""
    model = tiny_model(seed=0, dropout=0.2)
    optimizer = make_optimizer(model)
    scheduler = make_scheduler(optimizer, "cosine", 1e-3, WARMUP, MOST)
    return Trainer(
        model,
        optimizer,
        seq2seq_loss(PAD, 0.1),
        scheduler,
        checkpoint_path=checkpoint,
        budget=Budget(seconds, WARMUP, MOST),
    )


def test_the_plan_fills_the_budget_at_the_measured_pace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Budget, "MARGIN", 1.0)
    budget = Budget(seconds=10.0, measure_at=4, most=100)
    # 0.5 s per step for two steps, then 1 s: the pace is the second half's
    rows = [{"seconds": s} for s in (0.5, 1.0, 2.0, 3.0)]
    assert budget.plan(rows) == 4 + 7  # 7 more one-second steps reach 10 s
    assert Budget(10.0, 4, most=6).plan(rows) == 6  # never beyond the run's steps
    assert Budget(2.0, 4, most=100).plan(rows) == 4  # already spent: stop here
    monkeypatch.setattr(Budget, "MARGIN", 0.9)  # plan for 9 s of the 10
    assert budget.plan(rows) == 4 + 6


def test_a_budget_run_stops_at_its_plan_with_its_schedule_at_the_end(
    clock: None,
) -> None:
    trainer = budget_run(seconds=5.0 / Budget.MARGIN)
    history = trainer.fit(resume_data, MOST, progress=False)
    # 5 s at 0.25 s per step: 20 steps, not the 50 the schedule was made for
    assert trainer.planned == 20 and len(history) == 20
    assert history["seconds"].iloc[-1] == pytest.approx(5.0)
    # the rate of the last step is cosine's at step 19 of 20, after a 4-step warm-up
    last = 0.5 * (1 + math.cos(math.pi * (19 - WARMUP) / (20 - WARMUP)))
    assert history["lr"].iloc[-1] == pytest.approx(1e-3 * last)
    assert history["lr"].iloc[WARMUP - 1] == pytest.approx(1e-3)


def test_a_resumed_budget_run_repeats_the_same_steps(
    clock: None, tmp_path: Path
) -> None:
    torch.set_num_threads(1)
    seconds = 5.0 / Budget.MARGIN
    whole = budget_run(seconds).fit(resume_data, MOST, progress=False)

    path = str(tmp_path / "last.pt")
    first = budget_run(seconds, checkpoint=path)
    first.fit(resume_data, 8, progress=False)  # past the plan, then killed
    resumed = budget_run(seconds, checkpoint=path)
    resumed.resume()
    assert resumed.planned == 20
    history = resumed.fit(resume_data, MOST, progress=False)
    assert history["loss"].tolist() == pytest.approx(
        whole["loss"].tolist(), rel=1e-6, abs=1e-7
    )
    assert history["lr"].tolist() == pytest.approx(whole["lr"].tolist())


def test_the_results_page_gives_a_budget_runs_budget_not_its_epoch_cap() -> None:
    run = {"steps": 1574, "config": {"budget_minutes": 30, "epochs": 20}}
    assert results_page.steps(run) == "1,574 (`budget_minutes=30`)"
    assert results_page.steps({"steps": 2460, "config": {"epochs": 12}}) == (
        "2,460 (12 epochs)"
    )


@pytest.mark.parametrize("plan", ["20", -3, 0, 10**12, 2.5, True])
def test_a_checkpoint_whose_plan_is_not_a_count_is_refused_in_one_line(
    plan: object,
) -> None:
    """A checkpoint that passes its checksum (one someone rewrote and signed
    again) still carries a plan that must be a count of the run's steps."""
    rows = [{"step": 1, "seconds": 0.25}]
    extra = {"epoch": 0, "batch_in_epoch": 1, "history": rows}
    check_position({"step": 1, "extra": extra | {"planned": 20}}, "ok", MOST)
    with pytest.raises(CheckpointError, match=f"its budget's plan is {plan!r},"):
        check_position({"step": 1, "extra": extra | {"planned": plan}}, "x", MOST)
