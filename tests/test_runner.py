"""The runner: a run killed with SIGKILL and resumed ends exactly like an
uninterrupted one, for every task; a finished run is reused, an interrupted one
resumed, another one refused; the files of a run folder (checkpoints, history,
metrics, log) and what they say."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from annotated_transformer import records, runner
from annotated_transformer.finished import RunResult
from annotated_transformer.tasks import TASKS
from annotated_transformer.training import checkpoints
from annotated_transformer.training.checkpoints import (
    CheckpointError,
    average_checkpoints,
    read_checkpoint,
)

# Tiny presets that save last.pt every 3 steps. translate: 2 epochs of 8 steps,
# validated at the end of each; classify: 40 steps (38 per epoch), validated
# every 20; lm: 30 steps.
SETTINGS = {
    "translate": ["train_limit=500", "eval_limit=10", "checkpoint_every=3"],
    "classify": ["test_subset=200", "checkpoint_every=3"],
    "mlm": ["checkpoint_every=3"],
    "lm": [
        "dataset=enwik8_prefix",
        "steps=30",
        "eval_every=10",
        "eval_bytes=2048",
        "checkpoint_every=3",
    ],
}
# what must be equal, bit for bit, between a resumed and an uninterrupted run
SAME = ["step", "epoch", "loss", "lr", "tokens", "grad_norm"]


@pytest.fixture(scope="module")
def mirror(multi30k_mirror, imdb_mirror, chars_mirror) -> Path:
    return multi30k_mirror


def train(task: str, out: Path, mirror: Path, **options) -> RunResult | None:
    """``runner.train`` in this process, quietly, on the CPU."""
    quiet = {"data_dir": mirror, "device": "cpu", "progress": False, "echo": False}
    return runner.train(task, out, **quiet, **options)


def same_history(out: Path, whole_dir: Path, task: str) -> None:
    """The history of the run in ``out`` is, bit for bit, ``whole_dir``'s."""
    got = pd.read_csv(out / "history.csv")
    expected = pd.read_csv(whole_dir / "history.csv")
    assert list(got.columns) == list(expected.columns)
    for column in [*SAME, "val_loss", TASKS[task].score[0]]:
        exact = {"check_exact": True}
        pd.testing.assert_series_equal(got[column], expected[column], **exact)


@pytest.fixture(scope="module")
def uninterrupted(mirror, tmp_path_factory, one_thread):
    """``uninterrupted(task)``: the folder and result of one whole
    run of SETTINGS[task]."""
    runs: dict[str, tuple[Path, RunResult]] = {}

    def get(task: str) -> tuple[Path, RunResult]:
        if task not in runs:
            out = tmp_path_factory.mktemp(task) / "whole"
            runs[task] = (
                out,
                train(task, out, mirror, preset="tiny", settings=SETTINGS[task]),
            )
        return runs[task]

    return get


def kill_after_first_checkpoint(task: str, out: Path, mirror: Path) -> int:
    """Start ``python -m annotated_transformer TASK train`` and SIGKILL it as soon
    as its first last.pt exists; returns the step of the last.pt it left behind."""
    env = {**os.environ, "AT_DATA_MIRROR": str(mirror), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "annotated_transformer",
        task,
        "train",
        "--preset",
        "tiny",
    ]
    command += ["--out", str(out), "--no-progress", "--device", "cpu"]
    command += [arg for setting in SETTINGS[task] for arg in ("--set", setting)]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "last.pt").exists():
            assert process.poll() is None, (
                "the run ended before its first checkpoint"
            )
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.005)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL  # killed, not finished
    return read_checkpoint(out / "last.pt")["step"]


@pytest.mark.parametrize("task", list(TASKS))
def test_a_run_killed_mid_epoch_resumes_to_exactly_the_uninterrupted_run(
    task, mirror, tmp_path, uninterrupted
):
    whole_dir, whole = uninterrupted(task)
    out = tmp_path / "killed"
    step = kill_after_first_checkpoint(task, out, mirror)
    epochs = whole.history[
        "epoch"
    ]  # the step after the checkpoint is in the same epoch
    assert 0 < step < len(whole.history) and epochs[step - 1] == epochs[step]
    assert not (out / "metrics.json").exists()

    resumed = train(task, out, mirror, resume=True)
    assert (
        f"resumed at step {step} of {len(whole.history)}"
        in (out / "train.log").read_text()
    )
    same_history(out, whole_dir, task)
    final, final_whole = (
        read_checkpoint(d / "final.pt")["model"] for d in (out, whole_dir)
    )
    assert all(torch.equal(final[k], final_whole[k]) for k in final_whole)
    for section in ("test", "validation"):  # test: where a test split is scored
        assert resumed.metrics.get(section) == whole.metrics.get(section)


# ----------------------------------------------------------------------- ensure_run

SMALL = [
    "train_subset=600",
    "val_size=100",
    "test_subset=100",
    "steps=8",
    "eval_every=4",
]


def test_ensure_run_trains_reuses_resumes_and_refuses(mirror, tmp_path, one_thread):
    first = runner.ensure_run(
        "classify", "tiny", tmp_path / "a", settings=SMALL, data_dir=mirror
    )
    assert (
        not first.model.training
    )  # trained here, handed over as a loaded run is: eval mode
    files = ("metrics.json", "last.pt", "final.pt", "history.csv")
    written = {name: (tmp_path / "a" / name).stat().st_mtime_ns for name in files}

    again = runner.ensure_run(
        "classify", "tiny", tmp_path / "a", settings=SMALL, data_dir=mirror
    )
    assert {
        name: (tmp_path / "a" / name).stat().st_mtime_ns for name in files
    } == written
    assert again.metrics == first.metrics
    pd.testing.assert_frame_equal(
        again.history, pd.read_csv(tmp_path / "a" / "history.csv")
    )
    final = read_checkpoint(tmp_path / "a" / "final.pt")["model"]
    assert all(
        torch.equal(v, final[k]) for k, v in again.model.state_dict().items()
    )
    assert not again.model.training

    # an interrupted run is resumed, to the same end
    stopped = train(
        "classify",
        tmp_path / "b",
        mirror,
        preset="tiny",
        settings=SMALL,
        max_steps=3,
    )
    assert stopped is None
    assert read_checkpoint(tmp_path / "b" / "last.pt")["step"] == 3
    resumed = runner.ensure_run(
        "classify", "tiny", tmp_path / "b", settings=SMALL, data_dir=mirror
    )
    assert "resumed at step 3 of 8" in (tmp_path / "b" / "train.log").read_text()
    for column in SAME:
        pd.testing.assert_series_equal(
            resumed.history[column], first.history[column], check_exact=True
        )

    # a folder holding another configuration is refused, not passed off as this one
    for preset, settings in [("tiny", [*SMALL, "lr=0.01"]), ("cpu", SMALL)]:
        with pytest.raises(
            ValueError, match="holds a run of another configuration"
        ):
            runner.ensure_run(
                "classify",
                preset,
                tmp_path / "a",
                settings=settings,
                data_dir=mirror,
            )
    with pytest.raises(ValueError, match="holds a run of another configuration"):
        runner.ensure_run("lm", "tiny", tmp_path / "a", data_dir=mirror)
    assert {
        name: (tmp_path / "a" / name).stat().st_mtime_ns for name in files
    } == written


def test_a_finished_run_is_retested_when_only_its_test_settings_differ(
    uninterrupted, mirror, tmp_path
):
    import shutil

    whole, _ = uninterrupted("translate")
    out = shutil.copytree(whole, tmp_path / "copy")
    weights = {p.name: p.stat().st_mtime_ns for p in out.glob("*.pt")}
    settings = [*SETTINGS["translate"], "beam=2", "alpha=1.5"]
    result = runner.ensure_run(
        "translate", "tiny", out, settings=settings, data_dir=mirror
    )
    assert {
        p.name: p.stat().st_mtime_ns for p in out.glob("*.pt")
    } == weights  # no training
    # the test of the reused weights, scored again by the task with beam 2 and α 1.5
    expected = result.task.scores(result.model, "test2016", beam=2, alpha=1.5)
    assert result.metrics["test"] == {"split": "test2016", **expected}
    saved = json.loads((out / "metrics.json").read_text())
    assert saved == result.metrics
    assert (saved["config"]["beam"], saved["config"]["alpha"]) == (2, 1.5)
    with pytest.raises(ValueError, match="holds a run of another configuration"):
        runner.ensure_run("translate", "tiny", out, settings=[*settings, "lr=0.01"])


def test_a_finished_classifier_is_retested_on_more_test_reviews(
    uninterrupted, mirror, tmp_path
):
    import shutil

    whole, _ = uninterrupted("classify")  # tested on 200 reviews
    out = shutil.copytree(whole, tmp_path / "copy")
    weights = {p.name: p.stat().st_mtime_ns for p in out.glob("*.pt")}
    settings = [*SETTINGS["classify"][1:], "test_subset=300"]
    result = runner.ensure_run(
        "classify", "tiny", out, settings=settings, data_dir=mirror
    )
    assert {
        p.name: p.stat().st_mtime_ns for p in out.glob("*.pt")
    } == weights  # no training
    # the same 300 reviews a fresh task would test on, scored here from their labels
    task = result.task
    config = dataclasses.replace(task.config, test_subset=300)
    fresh = type(task)(config, data_dir=mirror, state=task.state())
    reviews = fresh.reviews("test")
    predicted = task.probabilities(result.model, reviews).argmax(-1)
    labels = torch.as_tensor(reviews.labels)
    assert result.metrics["test"]["reviews"] == 300
    assert result.metrics["test"]["accuracy"] == pytest.approx(
        (predicted == labels).float().mean()
    )


# ---------------------------------------------------------- what a run folder holds


def test_final_pt_is_the_better_of_best_and_averaged_on_validation(uninterrupted):
    out, result = uninterrupted("translate")  # final="best", keep_last=2
    metrics = json.loads((out / "metrics.json").read_text())
    history = pd.read_csv(out / "history.csv")
    validated = history.dropna(subset=["val_bleu"])
    best = read_checkpoint(out / "best.pt")
    # best.pt: the first validation with the highest score
    first_best = validated.loc[validated["val_bleu"].idxmax()]
    assert (best["step"], best["extra"]["val_bleu"]) == (
        first_best["step"],
        first_best["val_bleu"],
    )
    assert metrics["validation"]["best"] == first_best["val_bleu"]
    # averaged.pt: scored again here, independently of the run's own choice
    model = result.task.build_model()
    model.load_state_dict(read_checkpoint(out / "averaged.pt")["model"])
    assert (
        metrics["validation"]["averaged"] == result.task.evaluate(model)["val_bleu"]
    )
    scores = metrics["validation"]
    pick = (
        "averaged" if scores["averaged"] > scores["best"] else "best"
    )  # a tie keeps best
    assert metrics["final"] == pick
    source = out / ("best.pt" if pick == "best" else "averaged.pt")
    assert (out / "final.pt").read_bytes() == source.read_bytes()


def test_average_checkpoints_is_the_elementwise_mean(uninterrupted):
    out, _ = uninterrupted("translate")  # keep_last=2
    kept = sorted(out.glob("keep-*.pt"))
    validated = pd.read_csv(out / "history.csv").dropna(subset=["val_bleu"])["step"]
    assert [p.name for p in kept] == [
        f"keep-{s:06d}.pt" for s in validated.iloc[-2:]
    ]
    _, averaged = average_checkpoints(kept)
    loaded = [torch.load(p, weights_only=True)["model"] for p in kept]
    on_disk = torch.load(out / "averaged.pt", weights_only=True)["model"]
    assert averaged.keys() == loaded[0].keys() == on_disk.keys()
    for name, value in averaged.items():
        mean = (loaded[0][name].double() + loaded[1][name].double()) / 2
        torch.testing.assert_close(value, mean.to(value.dtype), rtol=0, atol=0)
        torch.testing.assert_close(on_disk[name], value, rtol=0, atol=0)
    classify_dir, _ = uninterrupted("classify")
    with pytest.raises(CheckpointError, match="different run"):
        average_checkpoints([kept[0], classify_dir / "final.pt"])
    with pytest.raises(ValueError, match="at least one"):
        average_checkpoints([])


def validation_steps(history: pd.DataFrame, every: int) -> list[int]:
    """Where a run validates: every ``every`` steps (0: at each epoch's last step)
    and at the end, computed from the history's step and epoch columns."""
    steps, epochs = list(history["step"]), list(history["epoch"])
    if every:
        due = [s for s in steps if s % every == 0]
    else:
        due = [
            s
            for s, e, following in zip(steps, epochs, epochs[1:], strict=False)
            if following != e
        ]
    return sorted({*due, steps[-1]})


@pytest.mark.parametrize(
    ("task", "every"), [("translate", 0), ("classify", 20), ("lm", 10)]
)
def test_history_metrics_and_log_agree(task, every, uninterrupted):
    out, result = uninterrupted(task)
    metric = TASKS[task].score[0]
    metrics = json.loads((out / "metrics.json").read_text())
    history = pd.read_csv(out / "history.csv")
    total = metrics["steps"]
    assert list(history["step"]) == list(
        range(1, total + 1)
    )  # one row per optimiser step
    validated = history.dropna(subset=[metric])
    assert list(validated["step"]) == validation_steps(history, every)
    assert history["val_loss"].notna().tolist() == history[metric].notna().tolist()
    # last.pt: the end of the run, with the same history
    last = read_checkpoint(out / "last.pt")
    assert last["step"] == total
    assert [row["loss"] for row in last["extra"]["history"]] == list(
        history["loss"]
    )
    # train.log: a line per validation with its numbers, then the
    # final choice and the test
    log = [
        line.split("  ", 1)[1]
        for line in (out / "train.log").read_text().splitlines()
    ]
    assert log[0].startswith(f"{task} tiny: {total} steps")
    shown = [line for line in log if line.startswith("step ")]
    assert [line.split()[1] for line in shown] == [
        f"{s}/{total}:" for s in validated["step"]
    ]
    for line, value in zip(shown, validated[metric], strict=True):
        assert f"{metric} {value:.4g}" in line
    assert log[-2].startswith(f"final.pt = {metrics['final']} ")
    assert log[-1].startswith("test: ")
    if metrics["final"] == "last":
        assert metrics["validation"]["last"] == validated[metric].iloc[-1]
    # a language model scores its validation split: filed as validation
    scored = "validation" if task == "lm" else "test"
    assert records.scored_section(metrics) == scored
    assert metrics[scored]["split"] == {"lm": "val", "translate": "test2016"}.get(
        task, "test"
    )
    assert metrics[scored] == result.metrics[scored]
    assert (
        metrics["config"] == read_checkpoint(out / "final.pt")["config"]["config"]
    )


# ------------------------------------------------------ runs that survive anything

# ``python -m annotated_transformer ARGS``, but the second write of last.pt (the
# file with an optimiser) stops half-way: half its bytes reach the temporary file,
# and the process is killed (SIGKILL) there.
KILLED_MID_WRITE = """
import io, os, signal, sys, torch
from annotated_transformer import cli
from annotated_transformer.training import checkpoints as checkpoint
save, last_pt = torch.save, []
def save_half(state, file):
    last_pt.extend([1] if state["optimizer"] is not None else [])
    if len(last_pt) < 2:
        return save(state, file)
    data = io.BytesIO()
    save(state, data)
    file.write(data.getvalue()[: len(data.getvalue()) // 2])
    file.flush()
    os.kill(os.getpid(), signal.SIGKILL)
checkpoint.torch.save = save_half
sys.exit(cli.main(sys.argv[1:]))
"""


def command(task: str, out: Path, *extra: str) -> list[str]:
    """The training command line of ``task``'s SETTINGS into ``out``."""
    argv = [task, "train", "--preset", "tiny", "--out", str(out), "--no-progress"]
    settings = [arg for setting in SETTINGS[task] for arg in ("--set", setting)]
    return [*argv, "--device", "cpu", *settings, *extra]


def terminal_signals() -> None:
    """Run in a started process before its program: SIGINT and SIGTERM do what
    they do to a terminal's foreground job (the default), however this test run
    was started (a background job, ``nohup``, starts its children with SIGINT
    ignored), so that a signal a test sends is the one a user's would be."""
    for each in (signal.SIGINT, signal.SIGTERM):
        signal.signal(each, signal.SIG_DFL)


def environment(mirror: Path) -> dict[str, str]:
    return {**os.environ, "AT_DATA_MIRROR": str(mirror), "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("task", list(TASKS))
def test_a_run_killed_inside_a_checkpoint_write_resumes_exactly(
    task, mirror, tmp_path, uninterrupted
):
    whole_dir, whole = uninterrupted(task)
    out = tmp_path / "killed"
    argv = [sys.executable, "-c", KILLED_MID_WRITE, *command(task, out)]
    env = environment(mirror)
    done = subprocess.run(argv, env=env, capture_output=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    (half,) = out.glob(".last.pt.*.at-tmp")  # the write that was cut
    assert read_checkpoint(out / "last.pt")["step"] == 3  # the first write, intact
    assert half.stat().st_size < (out / "last.pt").stat().st_size

    resumed = train(task, out, mirror, resume=True)
    log = (out / "train.log").read_text()
    assert f"removed what a killed write left unfinished: {half.name}" in log
    assert "resumed at step 3 of" in log
    assert not list(out.glob(".*.at-tmp"))
    same_history(out, whole_dir, task)
    scored = records.scored_section(whole.metrics)
    assert resumed.metrics[scored] == whole.metrics[scored]


def flip_middle(path: Path) -> None:
    """Invert 20 bytes in the middle of ``path`` (in a checkpoint: tensor data)."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 20] = bytes(b ^ 0xFF for b in data[middle : middle + 20])
    path.write_bytes(bytes(data))


def test_a_corrupt_last_pt_resumes_from_the_one_before(
    mirror,
    tmp_path,
    uninterrupted,
):
    whole_dir, whole = uninterrupted("lm")
    out = tmp_path / "run"
    settings = {"preset": "tiny", "settings": SETTINGS["lm"]}
    assert train("lm", out, mirror, **settings, max_steps=7) is None
    flip_middle(out / "last.pt")  # step 7; last.previous.pt: step 6
    torch.load(out / "last.pt", weights_only=True)  # unpickles: a checksum knows
    resumed = train("lm", out, mirror, resume=True)
    log = (out / "train.log").read_text()
    assert "resuming from last.previous.pt; last.pt.damaged set aside:" in log
    said = f"{out / 'last.pt'} is corrupt: its contents do not match the checksum"
    assert said in log
    assert "resumed at step 6 of 30" in log
    same_history(out, whole_dir, "lm")
    scored = records.scored_section(whole.metrics)
    assert resumed.metrics[scored] == whole.metrics[scored]


@pytest.mark.parametrize("damage", ["damaged", "missing", "last.pt"])
def test_a_final_best_run_whose_best_pt_is_damaged_still_finishes(
    damage, mirror, tmp_path, uninterrupted
):
    """A best.pt that is damaged, missing, or a copy of last.pt (intact, but
    without the validation score the run ranks by) is chosen again."""
    import shutil

    whole_dir, _ = uninterrupted("translate")  # final=best, keep_last=2
    out = shutil.copytree(whole_dir, tmp_path / "copy")
    for name in ("metrics.json", "final.pt", "averaged.pt"):  # trained, unfinished
        (out / name).unlink()
    if damage == "damaged":
        flip_middle(out / "best.pt")
    elif damage == "missing":
        (out / "best.pt").unlink()
    else:
        shutil.copy(out / "last.pt", out / "best.pt")
    result = train("translate", out, mirror, resume=True)
    # the best intact candidate, by the validation scores that the history recorded
    history = pd.read_csv(out / "history.csv").dropna(subset=["val_bleu"])
    steps, scores = history["step"], history["val_bleu"]
    kept = {f"keep-{int(s):06d}.pt": b for s, b in zip(steps, scores, strict=True)}
    kept = {name: kept[name] for name in sorted(kept)[-2:]}
    best = max(kept, key=kept.get)
    assert (out / "best.pt").read_bytes() == (out / best).read_bytes()
    log = (out / "train.log").read_text()
    said = "missing" if damage == "missing" else "damaged"
    assert f"best.pt was {said}: written again from {best}, the best" in log
    assert result.metrics["validation"]["best"] == kept[best]
    assert (out / "metrics.json").is_file()
    (out / "metrics.json").unlink()  # finished again: the same figures
    again = train("translate", out, mirror, resume=True)
    assert again.metrics == result.metrics


def test_a_folder_that_mixes_two_runs_is_refused(mirror, tmp_path, uninterrupted):
    import shutil

    whole_dir, _ = uninterrupted("lm")
    out = shutil.copytree(whole_dir, tmp_path / "copy")
    other = tmp_path / "other"
    settings = [*SETTINGS["lm"], "lr=0.01"]
    train("lm", other, mirror, preset="tiny", settings=settings, max_steps=3)
    shutil.copy(other / "last.pt", out / "last.pt")  # beside this run's files
    mixed = r"mixes two runs: its metrics\.json comes from another"
    with pytest.raises(ValueError, match=mixed):
        train("lm", out, mirror, resume=True)
    (out / "metrics.json").unlink()
    with pytest.raises(ValueError, match=r"mixes two runs: its best\.pt comes"):
        train("lm", out, mirror, resume=True)


def test_two_trainers_on_one_folder_one_refuses_and_sigterm_stops_the_other(
    mirror,
    tmp_path,
):
    """Both start together; the one that loses the lock refuses in one line. The
    other trains on until SIGTERM stops it: one line that names its checkpoint, exit
    status 130."""
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "annotated_transformer", *command("lm", out)]
    argv += ["--set", "steps=100000"]  # longer than any wait below
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    env = environment(mirror)
    pipes["preexec_fn"] = terminal_signals
    both = [subprocess.Popen(argv, env=env, **pipes) for _ in range(2)]
    try:
        deadline = time.monotonic() + 180
        while all(p.poll() is None for p in both) or not (out / "last.pt").exists():
            assert time.monotonic() < deadline, "no refusal and no checkpoint"
            time.sleep(0.05)
        (refused,) = [p for p in both if p.poll() is not None]
        (running,) = [p for p in both if p is not refused]
        assert running.poll() is None
        _, err = refused.communicate()
        assert refused.returncode == 1 and err == (
            f"error: {out} is in use by another training run: wait for it to end, "
            "or train into another --out\n"
        )
        running.send_signal(signal.SIGTERM)
        _, err = running.communicate(timeout=60)
    finally:
        for process in both:
            process.kill() if process.poll() is None else None
    assert running.returncode == 130
    last = out / "last.pt"
    said = f"the last checkpoint, {last}, is intact: continue with --resume"
    assert err.splitlines()[-1] == f"interrupted: {said}"
    assert "Traceback" not in err
    log = (out / "train.log").read_text().splitlines()
    assert sum("lm tiny:" in line for line in log) == 1  # one run wrote here
    step = read_checkpoint(out / "last.pt")["step"]
    resumed = train("lm", out, mirror, resume=True, max_steps=step + 1)
    assert resumed is None and read_checkpoint(out / "last.pt")["step"] == step + 1


def test_ctrl_c_while_the_command_starts_is_one_line(mirror, tmp_path):
    argv = [sys.executable, "-m", "annotated_transformer"]
    argv += command("lm", tmp_path / "run")
    env, pipe = environment(mirror), subprocess.PIPE
    process = subprocess.Popen(
        argv, env=env, stderr=pipe, text=True, preexec_fn=terminal_signals
    )
    wait_for_handlers(process.pid)  # then the libraries load, for seconds
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert len(err.splitlines()) == 1 and err.startswith("interrupted"), err


def wait_for_handlers(pid: int) -> None:
    """Until the command has installed its signal handlers, the first thing it
    does. Before that a signal meets Python's own start-up (as any program's
    would), which the command cannot answer; a fixed sleep raced with a slow
    start (a fresh clone compiles every module). Linux shows the handlers in
    /proc (SIGTERM caught); elsewhere, half a second."""
    status = Path(f"/proc/{pid}/status")
    if not status.is_file():
        time.sleep(0.5)
        return
    bit = 1 << (signal.SIGTERM - 1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        fields = dict(
            line.split(":", 1) for line in status.read_text().splitlines()
        )
        if int(fields["SigCgt"], 16) & bit:
            return
        time.sleep(0.005)
    raise AssertionError("the command never installed its signal handlers")


# ------------------------------------------ damaged files, moved folders, signals


def saved_again(path: Path, change) -> None:
    """Rewrite the checkpoint ``path`` with ``change(state)`` applied, its checksum
    made anew: a file that passes the checksum but does not fit this version."""
    state = read_checkpoint(path)
    change(state)
    state.pop("checksum", None)
    state["checksum"] = checkpoints.content_hash(state)
    torch.save(state, path)


CHANGES = {
    "unknown key": (
        lambda s: s["config"]["config"].update(future_setting=1),
        "unknown settings (future_setting)",
    ),
    "no state": (lambda s: s["config"].pop("state"), "lacks its run's state"),
    "a list as config": (
        lambda s: s["config"].update(config=[1, 2]),
        "lacks its run's config",
    ),
    "a wrong type": (
        lambda s: s["config"]["config"].update(d_model="big"),
        "settings of the wrong type (d_model='big')",
    ),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_checkpoints_that_do_not_fit_this_version_are_one_line(
    change, mirror, tmp_path, uninterrupted
):
    import shutil

    whole_dir, _ = uninterrupted("lm")
    out = shutil.copytree(whole_dir, tmp_path / "copy")
    apply, said = CHANGES[change]
    for name in ("final.pt", "last.pt"):
        saved_again(out / name, apply)
        (out / "last.previous.pt").unlink(missing_ok=True)
    with pytest.raises(ValueError, match=f"{out / 'final.pt'}.*") as refused:
        runner.load_model(out / "final.pt")
    assert said in str(refused.value) and "\n" not in str(refused.value)
    (out / "metrics.json").unlink()
    with pytest.raises(ValueError, match=f"{out / 'last.pt'}.*") as refused:
        train("lm", out, mirror, resume=True)
    assert said in str(refused.value)


def integer_weights(state: dict) -> None:
    state["model"] = {
        k: v.round().to(torch.int64) for k, v in state["model"].items()
    }


def moments_of_another_shape(state: dict) -> None:
    moments = state["optimizer"]["state"][0]
    moments["exp_avg"] = torch.zeros(3, 3)


# Damage behind a valid checksum (recomputed after the edit, ``saved_again``).
DAMAGE = {
    "step -5": lambda s: s.update(step=-5),
    "step 10**9": lambda s: s.update(step=10**9),
    "step past the run": lambda s: s.update(step=31),
    "a string as model": lambda s: s.update(model="weights"),
    "integer weights": integer_weights,
    "python generator": lambda s: s["rng"].update(python=(3, (1, 2), None)),
    "torch generator": lambda s: s["rng"].update(torch=torch.zeros(3)),
    "optimizer a string": lambda s: s.update(optimizer="adam"),
    "optimizer moments": moments_of_another_shape,
    "optimizer lr": lambda s: s["optimizer"]["param_groups"][0].update(lr="x"),
    "data position": lambda s: s["extra"].update(epoch=-1),
    "history row": lambda s: s["extra"]["history"][-1].update(seconds="x"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_last_pt_behind_a_valid_checksum_resumes_from_the_one_before(
    damage, mirror, tmp_path, uninterrupted
):
    """Checked field by field, not only by its checksum: a last.pt with an
    impossible step, non-float weights, generator or optimiser states that do not
    restore is set aside in one line, and the run resumes from last.previous.pt
    exactly as the uninterrupted run went."""
    whole_dir, _ = uninterrupted("lm")
    out = tmp_path / "run"
    settings = {"preset": "tiny", "settings": SETTINGS["lm"]}
    assert train("lm", out, mirror, **settings, max_steps=7) is None
    saved_again(out / "last.pt", DAMAGE[damage])  # step 7; last.previous.pt: 6
    assert train("lm", out, mirror, resume=True, max_steps=8) is None
    log = (out / "train.log").read_text().splitlines()
    (aside,) = [line for line in log if "last.pt.damaged set aside" in line]
    assert (
        f"resuming from last.previous.pt; last.pt.damaged set aside: {out}" in aside
    )
    assert log[-2].endswith("resumed at step 6 of 30")
    got = pd.read_csv(out / "history.csv")
    expected = pd.read_csv(whole_dir / "history.csv").iloc[:8]
    pd.testing.assert_frame_equal(got[SAME], expected[SAME], check_exact=True)
    assert read_checkpoint(out / "last.pt")["step"] == 8


def test_damaged_checkpoints_without_an_intact_one_are_one_line(mirror, tmp_path):
    """Both last.pt and last.previous.pt damaged behind valid checksums: one line
    that names the damage (of the last one tried) and exit status 1, nothing set
    aside."""
    out = tmp_path / "run"
    settings = {"preset": "tiny", "settings": SETTINGS["lm"]}
    assert train("lm", out, mirror, **settings, max_steps=7) is None
    for name in ("last.pt", "last.previous.pt"):
        saved_again(out / name, DAMAGE["optimizer moments"])
    argv = ["-m", "annotated_transformer", "lm", "train", "--out", str(out)]
    argv += ["--resume", "--no-progress", "--device", "cpu"]
    done = subprocess.run(
        [sys.executable, *argv], env=environment(mirror), capture_output=True
    )
    assert done.returncode == 1
    assert done.stderr.decode() == (
        f"error: {out / 'last.previous.pt'} is damaged: its optimiser state does "
        "not fit "
        "the model's parameters; use an earlier checkpoint, or train again\n"
    )
    assert {p.name for p in out.glob("last*")} == {"last.pt", "last.previous.pt"}


@pytest.mark.parametrize("kind", ["symlink out", "fifo"])
def test_a_train_log_that_is_not_a_plain_file_is_refused(kind, mirror, tmp_path):
    """A train.log that is a symbolic link out of the folder, or a FIFO, is refused
    in one line when the run resumes: nothing is written outside the folder, and
    nothing hangs on a FIFO."""
    out, outside = tmp_path / "run", tmp_path / "outside.log"
    settings = {"preset": "tiny", "settings": SETTINGS["lm"]}
    assert train("lm", out, mirror, **settings, max_steps=3) is None
    (out / "train.log").unlink()
    outside.write_text("someone else's file\n")
    if kind == "fifo":
        os.mkfifo(out / "train.log")
    else:
        (out / "train.log").symlink_to(outside)
    argv = ["-m", "annotated_transformer", "lm", "train", "--out", str(out)]
    argv += ["--resume", "--max-steps", "4", "--no-progress", "--device", "cpu"]
    done = subprocess.run(
        [sys.executable, *argv],
        env=environment(mirror),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.decode() == (
        f"error: {out / 'train.log'} is not a plain file (a symbolic link, a FIFO, "
        "a device or a folder): remove or rename it, then run again\n"
    )
    assert outside.read_text() == "someone else's file\n"
    assert read_checkpoint(out / "last.pt")["step"] == 3


@pytest.mark.parametrize("name", ["provenance.json", "metrics.json"])
@pytest.mark.parametrize("content", ["{}", "[]", "not json"])
def test_damaged_run_folder_json_is_named_on_resume(
    name, content, mirror, tmp_path
):
    out = tmp_path / "run"
    settings = {"preset": "tiny", "settings": SETTINGS["lm"]}
    assert train("lm", out, mirror, **settings, max_steps=3) is None
    (out / name).write_text(content)
    with pytest.raises(ValueError) as refused:
        train("lm", out, mirror, resume=True, max_steps=4)
    message = str(refused.value)
    assert "\n" not in message and (str(out / name) in message or name in message)
    (out / name).unlink()  # what the message says to do
    assert train("lm", out, mirror, resume=True, max_steps=4) is None


def start_training(
    out: Path, mirror: Path, *, progress: bool = False
) -> subprocess.Popen:
    """``lm train`` into ``out`` for longer than any test waits, in another
    process (``progress``: with its progress bar), returned once its first
    last.pt is written."""
    argv = [sys.executable, "-m", "annotated_transformer", *command("lm", out)]
    argv += ["--set", "steps=100000"]
    if progress:
        argv.remove("--no-progress")
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    process = subprocess.Popen(
        argv, env=environment(mirror), preexec_fn=terminal_signals, **pipes
    )
    deadline = time.monotonic() + 180
    while not (out / "last.pt").exists():
        assert process.poll() is None, process.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "no checkpoint in 180 s"
        time.sleep(0.01)
    return process


def test_a_folder_moved_while_training_stops_the_run(mirror, tmp_path):
    """The trainer writes into its folder, not its path: moved, the run stops with
    one line that says where the folder went, and nothing appears at the old
    path, not even when a second trainer tries to resume there at once; the run
    continues in its new place."""
    out, moved = tmp_path / "run", tmp_path / "moved"
    process = start_training(out, mirror)
    try:
        out.rename(moved)
        argv = [sys.executable, "-m", "annotated_transformer", "lm", "train"]
        argv += ["--out", str(out), "--resume", "--no-progress", "--device", "cpu"]
        second = subprocess.run(argv, env=environment(mirror), capture_output=True)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill() if process.poll() is None else None
    assert process.returncode == 1, err
    assert err.splitlines()[-1] == (
        f"error: the run's folder {out} was moved to {moved} while it trained: it "
        "stops here, its checkpoints intact there; continue it there with "
        "--resume (--out the new place)"
    )
    assert second.returncode == 1
    assert second.stderr.decode().startswith("error: nothing to resume")
    assert not out.exists()
    step = read_checkpoint(moved / "last.pt")["step"]
    resumed = train("lm", moved, mirror, resume=True, max_steps=step + 1)
    assert (
        resumed is None and read_checkpoint(moved / "last.pt")["step"] == step + 1
    )


def test_a_folder_moved_inside_a_checkpoint_write_is_not_split(
    mirror, tmp_path, monkeypatch
):
    """Moved after the check before a write, while the checkpoint is being
    hashed: the checkpoint still lands in the moved folder (written through the
    open folder, not its path), the old path is never made again, and the run
    stops at its next write with one line. Only the moved folder resumes."""
    out, moved = tmp_path / "run", tmp_path / "moved"
    content_hash = checkpoints.content_hash

    def move_then_hash(state):
        if state.get("step") == 6 and state.get("optimizer") and out.exists():
            out.rename(moved)
        return content_hash(state)

    monkeypatch.setattr(checkpoints, "content_hash", move_then_hash)
    settings = {"preset": "tiny", "settings": SETTINGS["lm"]}
    with pytest.raises(ValueError, match=f"^the run's folder {out} was moved to"):
        train("lm", out, mirror, **settings)
    monkeypatch.undo()
    assert not out.exists()
    assert read_checkpoint(moved / "last.pt")["step"] == 6
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        train("lm", out, mirror, resume=True)
    assert not out.exists()
    assert train("lm", moved, mirror, resume=True, max_steps=7) is None
    assert read_checkpoint(moved / "last.pt")["step"] == 7


def test_a_trainer_removes_only_what_its_killed_writers_left(mirror, tmp_path):
    """What a killed writer of this package left is removed when a run starts in
    the folder; what a live process is writing (its id in the name) is not, nor
    is any file whose name the package does not make: a user's hidden ``.tmp``
    files stay."""
    out = tmp_path / "run"
    out.mkdir()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    live = out / f".last.pt.{alive.pid}.0a1b2c3d.at-tmp"
    dead = out / f".last.pt.{gone.pid}.0a1b2c3d.at-tmp"
    users = [".notes.tmp", ".draft.v2.tmp", f".last.pt.{gone.pid}.abc.tmp"]
    try:
        for path in (live, dead, *(out / name for name in users)):
            path.write_bytes(b"half a checkpoint, or a user's notes")
        settings = {"preset": "tiny", "settings": SETTINGS["lm"]}
        assert train("lm", out, mirror, **settings, max_steps=1) is None
        assert live.exists() and not dead.exists()
    finally:
        alive.kill()
        alive.wait()
    for name in users:
        assert (out / name).read_bytes() == b"half a checkpoint, or a user's notes"
    log = (out / "train.log").read_text()
    assert f"removed what a killed write left unfinished: {dead.name}\n" in log


@pytest.mark.parametrize(
    ("signals", "gap"),
    [
        ((signal.SIGINT, signal.SIGINT), 0.005),
        ((signal.SIGINT, signal.SIGINT), 0.06),
        ((signal.SIGTERM, signal.SIGTERM), 0.005),
        ((signal.SIGINT, signal.SIGTERM, signal.SIGINT), 0.02),
    ],
)
def test_signals_in_quick_succession_are_one_line_and_130(
    signals, gap, mirror, tmp_path
):
    """However soon a signal follows the first, the same line and exit status:
    not a traceback of the progress bar, not a death by the second signal."""
    out = tmp_path / "run"
    process = start_training(out, mirror, progress=True)
    try:
        for sent in signals:
            process.send_signal(sent)
            time.sleep(gap)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill() if process.poll() is None else None
    assert process.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    last = out / "last.pt"
    said = f"the last checkpoint, {last}, is intact: continue with --resume"
    assert err.splitlines()[-1] == f"interrupted: {said}"
    assert sum(line.startswith("interrupted") for line in err.splitlines()) == 1


def test_a_finished_run_whose_history_is_a_fifo_or_a_link_out_is_refused(
    tmp_path, uninterrupted
):
    """load_run reads history.csv as a regular file inside the run's folder: a FIFO
    (whose reading would wait for a writer for ever) or a link out of the folder is
    one DamagedFileError, at once."""
    import shutil

    from annotated_transformer.files import DamagedFileError

    whole_dir, _ = uninterrupted("lm")
    fifo = shutil.copytree(whole_dir, tmp_path / "fifo")
    (fifo / "history.csv").unlink()
    os.mkfifo(fifo / "history.csv")
    with pytest.raises(DamagedFileError, match="is a FIFO, not a regular file"):
        runner.load_run(fifo)
    linked = shutil.copytree(whole_dir, tmp_path / "linked")
    (linked / "history.csv").rename(tmp_path / "elsewhere.csv")
    (linked / "history.csv").symlink_to(tmp_path / "elsewhere.csv")
    with pytest.raises(DamagedFileError, match="is a link that leads out of"):
        runner.load_run(linked)
