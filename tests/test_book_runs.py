"""The book's runs (``annotated_transformer.book.runs``): the list agrees with the
committed records, names one config once, and builds every config it names."""

from __future__ import annotations

import csv
import io
import itertools
import math
import shutil
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path

import pytest

from annotated_transformer import records
from annotated_transformer.book import runs as book_runs
from annotated_transformer.runner import new_config
from annotated_transformer.tasks.base import flat_settings, run_folder, run_path

RESULTS = Path(__file__).resolve().parents[1] / "results"
RECORDED = records.all_records(RESULTS)


@pytest.mark.parametrize(
    "folder, record", RECORDED, ids=[f.name for f, _ in RECORDED]
)
def test_every_record_is_a_book_run_of_its_config(folder, record, monkeypatch):
    monkeypatch.setenv("AT_RESULTS", str(RESULTS))
    run = book_runs.BY_NAME.get(folder.name)
    assert run is not None, f"{folder.name} is not in book.runs.RUNS"
    assert (run.task, run.preset) == (record["task"], record["preset"])
    # the record of the run's config is this one, with the weights it lists
    assert run.record() == folder
    assert bool(record.get("weights")) == bool(run.weights)
    half = (record.get("weights") or {}).get("dtype") == "float16"
    assert half == (run.weights == "half")


def test_each_config_is_listed_once():
    assert len(book_runs.BY_NAME) == len(book_runs.RUNS)
    configs = [
        (
            run.task,
            flat_settings(new_config(run.task, run.preset, run.settings)),
        )
        for run in book_runs.RUNS
    ]
    repeated = [
        run.name
        for i, run in enumerate(book_runs.RUNS)
        if configs[i] in configs[:i]
    ]
    assert not repeated, f"the same config as an earlier run: {repeated}"


def test_commands_name_the_run_and_its_settings():
    run = book_runs.BY_NAME["ladder-gqa-s1"]
    assert run.train_words(2) == [
        "lm", "train", "--preset", "cpu",
        "--set", "steps=1000", "--set", "eval_every=100", "--set", "seed=1",
        "--set", "block=modern", "--set", "kv_heads=2",
        "--threads", "2", "--out", "runs/ladder-gqa-s1",
    ]  # fmt: skip
    assert book_runs.BY_NAME["translate-cpu"].record_words() == [
        "record", "runs/translate-cpu", "--name", "translate-cpu",
        "--weights", "--half",
    ]  # fmt: skip
    # a fine-tune starts from its pretraining's record, listed before it
    names = [run.name for run in book_runs.RUNS]
    assert names.index("mlm-cpu") < names.index("imdb-bert-cpu")
    bert = book_runs.BY_NAME["imdb-bert-cpu"]
    assert "init=results/mlm-cpu" in bert.settings


def test_the_speedrun_ladder_climbs_from_the_cpu_preset_to_the_speedrun_preset():
    """Each rung adds its own change; the last, over the cpu preset at the
    budget, is the speedrun preset as written in tasks/translation.py."""
    budget = book_runs.SPEEDRUN_BUDGET
    ladder = book_runs.speedrun_ladder(new_config("translate", "cpu"))
    assert list(ladder.values())[-1] == (
        "lr=0.002", "warmup=250", "bpe_merges=4000", "attn_dropout=0",
    )  # fmt: skip
    climbed = new_config("translate", "cpu", [*budget, *ladder["attn0"]])
    assert climbed == new_config("translate", "speedrun")
    assert climbed.budget_minutes == 30 and climbed.precision == "fp32"
    tried = book_runs.BY_NAME["translate-speedrun-small-batches"]
    assert new_config("translate", "speedrun", tried.settings).max_tokens == 1500
    # every rung is the rung before plus one change, and runs on 2 threads
    rungs = list(ladder.values())
    assert all(b[: len(a)] == a and b != a for a, b in itertools.pairwise(rungs))
    run = book_runs.BY_NAME["translate-speedrun-cpu-s1"]
    assert run.train_words(1)[-4:] == [
        "--threads", "2", "--out", "runs/translate-speedrun-cpu-s1",
    ]  # fmt: skip


@pytest.mark.parametrize("rung", ["cpu", "attn0"])
def test_a_second_seed_replays_the_steps_its_first_seed_planned(rung):
    """Seed 1 trains, in place of a budget, the steps where seed 0's cosine ends:
    each learning rate of seed 0's history after the warm-up, solved for the end
    of ½·peak·(1 + cos π(t − warmup)/(end − warmup)), gives the same end."""
    seed0 = book_runs.speedrun_name(rung)
    seed1 = book_runs.BY_NAME[seed0 + "-s1"]
    first = new_config(
        "translate",
        *book_runs.speedrun_rungs("cpu", book_runs.SPEEDRUN_BUDGET)[rung],
    )
    second = new_config("translate", seed1.preset, seed1.settings)
    assert second.budget_minutes == 0 and second.epochs == 0 and second.seed == 1
    assert second == replace(
        first, seed=1, budget_minutes=0, epochs=0, steps=second.steps
    )
    with open(RESULTS / seed0 / "history.csv", newline="") as f:
        rows = [(int(r["step"]), float(r["lr"])) for r in csv.DictReader(f)]
    peak, warmup = first.lr, first.warmup
    ends = [
        warmup + (t - 1 - warmup) * math.pi / math.acos(2 * lr / peak - 1)
        for t, lr in rows
        if t - 1 > warmup and lr > peak / 100
    ]
    assert len(ends) > 500
    assert max(ends) - min(ends) < 1e-3
    assert round(ends[0]) == second.steps


def test_the_higher_rate_is_the_speedrun_at_its_steps_with_one_change():
    """The rate tried over the speedrun takes the speedrun's own planned steps
    and seed: it differs from translate-speedrun in the peak rate alone."""
    run = book_runs.BY_NAME["translate-speedrun-higher-rate"]
    tried = new_config("translate", run.preset, run.settings)
    speedrun = new_config("translate", "speedrun")
    assert tried == replace(
        speedrun, lr=0.003, budget_minutes=0, epochs=0, steps=1613
    )


def test_a_record_is_named_results_name_wherever_the_records_are(
    tmp_path, monkeypatch
):
    """With the records kept outside the repository ($AT_RESULTS), a fine-tune's
    ``init=results/mlm-cpu`` reads them there and is stored as written, so its
    record matches its config in any clone, and a run's folder is still absolute."""
    bert = book_runs.BY_NAME["imdb-bert-cpu"]
    assert "init=results/mlm-cpu" in bert.train_words(1)
    elsewhere = tmp_path / "records"
    shutil.copytree(RESULTS / "mlm-cpu", elsewhere / "mlm-cpu")
    shutil.copytree(RESULTS / "imdb-bert-cpu", elsewhere / "imdb-bert-cpu")
    monkeypatch.setenv("AT_RESULTS", str(elsewhere))
    monkeypatch.chdir(tmp_path)  # outside the repository
    assert run_folder("results/mlm-cpu") == elsewhere / "mlm-cpu"
    assert run_path(elsewhere / "mlm-cpu") == "results/mlm-cpu"
    config = new_config("classify", "cpu", ["init=results/mlm-cpu"])
    assert config.init == "results/mlm-cpu"
    assert run_path("runs/x") == str(tmp_path / "runs" / "x")
    assert bert.record() == elsewhere / "imdb-bert-cpu"


def test_an_unknown_name_is_one_line():
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = book_runs.main(["no-such-run"])
    assert code == 2
    assert err.getvalue().count("\n") == 1 and "no-such-run" in err.getvalue()


def test_runs_wait_for_the_run_they_start_from(monkeypatch):
    """Two at a time, a fine-tune starts only when its pretraining is recorded,
    and a failed pretraining stops its fine-tune, not the others."""
    import threading
    import time

    events, lock = [], threading.Lock()

    def fake(run, threads, log=None):
        with lock:
            events.append(("start", run.name))
        time.sleep(0.2 if run.name == "mlm-cpu" else 0.05)
        if run.name == "mlm-cpu" and fail:
            raise OSError("killed")
        with lock:
            events.append(("end", run.name))

    monkeypatch.setattr(book_runs, "train_and_record", fake)
    chosen = [book_runs.BY_NAME[n] for n in ("mlm-cpu", "imdb-bert-cpu", "ts-cpu")]
    assert book_runs.needs(chosen[1]) == ["mlm-cpu"]
    fail = False
    with redirect_stdout(io.StringIO()):
        assert book_runs.train_all(chosen, threads=1, jobs=2) == []
    assert events.index(("end", "mlm-cpu")) < events.index(
        ("start", "imdb-bert-cpu")
    )
    # the third run did not wait for the pretraining
    assert events.index(("end", "ts-cpu")) < events.index(("end", "mlm-cpu"))
    events.clear()
    fail = True
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        failed = book_runs.train_all(chosen, threads=1, jobs=2)
    assert failed == ["mlm-cpu", "imdb-bert-cpu"]
    assert ("start", "imdb-bert-cpu") not in events and ("end", "ts-cpu") in events


def test_a_run_is_trained_and_recorded(tmp_path, monkeypatch):
    """The commands themselves, on a tiny run: trained into runs/NAME, recorded
    into results/NAME, and then found as the record of its config."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AT_RESULTS", str(tmp_path / "results"))
    run = book_runs.BookRun(
        "tiny-lm",
        "lm",
        "tiny",
        settings=("steps=6", "eval_every=3"),
        weights="full",
    )
    assert run.record() is None
    with redirect_stdout(io.StringIO()):
        assert book_runs.train_all([run], threads=1, jobs=2) == []
    log = (tmp_path / "runs" / "tiny-lm.log").read_text()
    assert "$ python -m annotated_transformer lm train --preset tiny" in log
    assert run.record() == tmp_path / "results" / "tiny-lm"
    assert (tmp_path / "results" / "tiny-lm" / "model.safetensors").is_file()
