"""The book's runs (``annotated_transformer.book.runs``): the list agrees with the
committed records, names one config once, and builds every config it names."""

from __future__ import annotations

import dataclasses
import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from annotated_transformer import records
from annotated_transformer.book import runs as book_runs
from annotated_transformer.runner import new_config

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
            dataclasses.asdict(new_config(run.task, run.preset, run.settings)),
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


def test_an_unknown_name_is_one_line():
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = book_runs.main(["no-such-run"])
    assert code == 2
    assert err.getvalue().count("\n") == 1 and "no-such-run" in err.getvalue()
