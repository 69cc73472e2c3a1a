"""A folder ``record`` reads (a run's) or a record it loads (``results/NAME``) is
data someone may have sent: it runs no program, is written whole and alone, is
replaced only when it is a record, and every file a result depends on is a
regular file inside it with the sha256 its record.json stores. Anything else is
one line and a non-zero exit, never a traceback, a hang or a mixed record.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_records import CLASSIFY, classify_run, command, one_line, train_classifier

from annotated_transformer import machine, records

__all__ = ["classify_run"]  # the fixture, shared with test_records

ROOT = Path(__file__).resolve().parents[1]
LOOK = 0.001  # seconds between two looks at another process's state


def git(folder: Path, *args: str) -> str:
    """git in a repository the test made (its config is the test's own)."""
    done = subprocess.run(
        ["git", "-C", str(folder), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def hostile_repository(folder: Path, marker: Path) -> Path:
    """A repository whose config and hooks run ``touch marker`` whenever git looks
    at its files or writes its index."""
    folder.mkdir()
    git(folder, "init", "-q")
    (folder / "a.txt").write_text("a\n")
    git(folder, "add", "a.txt")
    git(folder, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    git(folder, "config", "core.fsmonitor", f"touch {marker}")
    hook = folder / ".git" / "hooks" / "post-index-change"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    (folder / "a.txt").write_text("changed\n")  # dirty: git must look
    return folder


@pytest.mark.parametrize("provenance", ["none", "without git"])
def test_record_runs_no_program_the_run_folders_repository_configures(
    provenance, classify_run, tmp_path
):
    marker = tmp_path / "PWNED"
    repository = hostile_repository(tmp_path / "received", marker)
    run = shutil.copytree(classify_run, repository / "run")
    if provenance == "none":
        (run / "provenance.json").unlink()
    else:
        saved = json.loads((run / "provenance.json").read_text())
        (run / "provenance.json").write_text(json.dumps(saved | {"git": None}))
    argv = ["record", run, "--name", "x", "--results", tmp_path / "res"]
    code, _, err = command(*argv, "--threads", "1")
    assert code == 0, err
    assert not marker.exists(), "record ran a program the run's repository names"
    commit = records.read_record(tmp_path / "res" / "x")["git"]
    if provenance == "none":  # the code that records, not the folder's repository
        assert commit["commit"] == git(ROOT, "rev-parse", "HEAD")
    else:
        assert commit is None


def test_the_commit_is_read_without_running_what_a_repository_configures(
    tmp_path,
):
    marker = tmp_path / "PWNED"
    repository = hostile_repository(tmp_path / "repo", marker)
    head = (repository / ".git" / "HEAD").read_text().split()[-1]
    commit = (repository / ".git" / head).read_text().strip()
    assert machine.git_commit(repository) == {"commit": commit, "dirty": True}
    assert not marker.exists()


# ------------------------------------------------------------ one record at once


def record_process(run: Path, res: Path, mirror: Path) -> subprocess.Popen:
    """``record run --name cls --replace --weights`` in a process of its own."""
    argv = [sys.executable, "-m", "annotated_transformer", "record", str(run)]
    argv += ["--name", "cls", "--results", str(res), "--replace", "--weights"]
    argv += ["--data-dir", str(mirror)]
    env = os.environ | {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def assert_whole(folder: Path, run: Path) -> None:
    """The record in ``folder`` is ``run``'s, every file of it: its weights'
    sha256, its steps and its history are the run's."""
    record = json.loads((folder / "record.json").read_text())
    weights = hashlib.sha256((folder / "model.safetensors").read_bytes())
    assert record["weights"]["sha256"] == weights.hexdigest()
    metrics = json.loads((run / "metrics.json").read_text())
    assert record["steps"] == metrics["steps"]
    assert (folder / "history.csv").read_bytes() == (
        run / "history.csv"
    ).read_bytes()
    for name, digest in record["checksums"].items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in folder.parent.iterdir()) == ["cls"]


@pytest.fixture(scope="module")
def short_run(tmp_path_factory, imdb_mirror, one_thread) -> Path:
    """A run of another length than ``classify_run``: a mixed record shows."""
    out = tmp_path_factory.mktemp("runs") / "short"
    settings = [*CLASSIFY, "steps=8", "eval_every=4"]
    train_classifier(out, imdb_mirror, settings=settings)
    return out


def test_two_records_of_one_name_at_once_one_wins_the_other_says_so(
    classify_run, short_run, tmp_path, imdb_mirror
):
    res = tmp_path / "res"
    records.record_run(classify_run, "cls", weights=True, root=res)

    def writing() -> bool:
        """Is a record command writing a new record, in a folder beside the old?"""
        return any(p.is_dir() and p.name != "cls" for p in res.iterdir())

    for _ in range(3):  # a round where the first finished before it was seen: again
        first = record_process(short_run, res, imdb_mirror)
        while first.poll() is None and not writing():
            time.sleep(LOOK)  # a look at its state
        first.send_signal(signal.SIGSTOP)
        if first.poll() is None and writing():
            break
        first.send_signal(signal.SIGCONT)
        first.communicate()
    else:
        pytest.fail("the first record command never was seen writing")
    try:
        second = record_process(classify_run, res, imdb_mirror)
        _, err = second.communicate()
        assert second.returncode == 1 and err.count("\n") == 1, err
        assert "is being recorded by another command" in err
    finally:
        first.send_signal(signal.SIGCONT)
    _, err = first.communicate()
    assert first.returncode == 0, err
    assert_whole(res / "cls", short_run)
    # Both started at once: whichever order they take, the record is one run's.
    both = [
        record_process(run, res, imdb_mirror) for run in (classify_run, short_run)
    ]
    done = [(p.communicate()[1], p.returncode) for p in both]
    assert any(code == 0 for _, code in done), done
    for err, code in done:
        assert code == 0 or (code == 1 and "being recorded" in err), err
    last = json.loads((res / "cls" / "record.json").read_text())["steps"]
    assert_whole(res / "cls", short_run if last == 8 else classify_run)


def test_replace_refuses_what_is_not_a_record(classify_run, tmp_path):
    own = tmp_path / "ownres"
    run = shutil.copytree(classify_run, own / "runx")
    for name in ("last.pt", "best.pt"):
        shutil.copy(run / "final.pt", run / name)
    kept = {p.name: p.read_bytes() for p in run.iterdir()}
    argv = ["record", run, "--name", "runx", "--results", own, "--replace"]
    one_line([*argv, "--threads", "1"], "is the run being recorded")
    assert {p.name: p.read_bytes() for p in run.iterdir()} == kept
    mine = tmp_path / "res" / "mine"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    argv = ["record", classify_run, "--name", "mine", "--results", mine.parent]
    one_line([*argv, "--replace"], f"{mine} is not a record")
    (mine / "record.json").write_text("{}")  # a record.json, but not a record's
    one_line([*argv, "--replace"], f"{mine} is not a record", "lacks 'task'")
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt", "record.json"]
    assert sorted(p.name for p in mine.parent.iterdir()) == ["mine"]


# --------------------------------------------- every file a result depends on


@pytest.fixture
def published(classify_run, tmp_path, imdb_mirror) -> Path:
    return records.record_run(
        classify_run,
        "cls",
        weights=True,
        root=tmp_path / "res",
        data_dir=imdb_mirror,
    )


def predict(folder: Path) -> list:
    return ["classify", "predict", "--checkpoint", folder, "A fine film."]


def test_a_shuffled_vocabulary_of_the_same_size_is_refused(published):
    path = published / "state.json"
    state = json.loads(path.read_text())
    vocab = state["vocab"][4:]  # the special tokens first, then the words
    random.Random(0).shuffle(vocab)
    path.write_text(json.dumps(state | {"vocab": state["vocab"][:4] + vocab}))
    one_line(predict(published), f"{path} is damaged", "sha256")
    with pytest.raises(records.RecordError, match=r"state\.json is damaged"):
        records.load_result(published, weights=False)
    path.unlink()  # gone: the record says it had one
    one_line(predict(published), str(path))


def test_an_edited_history_is_refused(published):
    path = published / "history.csv"
    path.write_text(path.read_text().replace("\n1,", "\n2,", 1))
    with pytest.raises(records.RecordError, match=r"history\.csv is damaged"):
        records.load_result(published)


def run_briefly(argv: list) -> subprocess.CompletedProcess:
    """``argv`` on the command line in a process of its own; a hang is a failure
    (its time-out is a guard, not a wait)."""
    env = os.environ | {"PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-m", "annotated_transformer", *map(str, argv)]
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300
    )


def test_weights_that_are_a_fifo_are_refused_at_once(published):
    path = published / "model.safetensors"
    path.unlink()
    os.mkfifo(path)
    done = run_briefly(predict(published))
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert f"{path} is a FIFO, not a regular file" in done.stderr


@pytest.mark.parametrize("name", ["model.safetensors", "state.json"])
def test_a_link_out_of_the_record_is_refused(name, published, tmp_path):
    path = published / name
    outside = tmp_path / name
    shutil.move(path, outside)  # the very file, checksum and all, but elsewhere
    path.symlink_to(outside)
    one_line(predict(published), f"{path} is a link that leads out of")
    path.unlink()
    path.symlink_to(Path("..") / ".." / name)
    one_line(predict(published), "leads out of")


def test_a_run_whose_log_leads_out_of_its_folder_is_refused(classify_run, tmp_path):
    run = shutil.copytree(classify_run, tmp_path / "run")
    secret = tmp_path / "secret.txt"
    secret.write_text("not the run's")
    (run / "train.log").unlink()
    (run / "train.log").symlink_to(secret)
    argv = ["record", run, "--name", "x", "--results", tmp_path / "res"]
    one_line(argv, f"{run / 'train.log'} is a link that leads out of")
    assert not (tmp_path / "res" / "x").exists()


# ------------------------------------------- damaged parts: one line, no traceback


def rewrite(folder: Path, name: str, data: bytes) -> None:
    """Replace a record's file and store its new sha256 in record.json, as a
    forger would: the file's content itself must be refused."""
    (folder / name).write_bytes(data)
    record = json.loads((folder / "record.json").read_text())
    digest = hashlib.sha256(data).hexdigest()
    record.setdefault("checksums", {})[name] = digest
    if name == "model.safetensors":
        record["weights"]["sha256"] = digest
    (folder / "record.json").write_text(json.dumps(record))


@pytest.mark.parametrize(
    "state",
    [
        {},
        {"vocab": ["<unk>"], "bpe": {"merges": "garbage"}},
        {"vocab": 5, "bpe": None},
    ],
    ids=["empty", "garbage-bpe", "vocab-not-a-list"],
)
def test_a_state_that_the_task_cannot_take_is_one_line(state, published):
    rewrite(published, "state.json", json.dumps(state).encode())
    one_line(predict(published), str(published / "state.json"), "classify task")
    with pytest.raises(ValueError, match=r"state\.json"):
        records.load_result(published, weights=False)


@pytest.mark.parametrize("aliases", ['{"x": "missing"}', '["a", "b"]'])
def test_weights_whose_aliases_are_not_their_tensors_are_one_line(
    aliases, published
):
    path = published / "model.safetensors"
    other = published.parent / "other.safetensors"
    save_file(load_file(str(path)), str(other), metadata={"aliases": aliases})
    rewrite(published, "model.safetensors", other.read_bytes())
    one_line(predict(published), str(path))


@pytest.mark.parametrize(
    "metrics",
    [
        {"task": "lm", "test": 5},
        {"task": "lm", "validation": {"split": "val"}},
        {
            "task": "lm",
            "preset": "tiny",
            "config": {},
            "validation": {"split": "val"},
        },
        {"task": "classify", "preset": "tiny", "test": {"split": "test"}},
    ],
)
def test_run_metrics_that_are_not_a_finished_runs_are_one_line(
    metrics, classify_run, tmp_path
):
    run = shutil.copytree(classify_run, tmp_path / "run")
    (run / "metrics.json").write_text(json.dumps(metrics))
    argv = ["record", run, "--name", "x", "--results", tmp_path / "res"]
    one_line(argv, str(run / "metrics.json"))
    assert not (tmp_path / "res").exists() or not any((tmp_path / "res").iterdir())


@pytest.mark.parametrize(
    "change",
    [
        {"resumed": ["x"]},
        {"resumed": [{}]},
        {"resumed": [{"step": 3, "machine": 1}]},
        {"machine": {}},
    ],
)
def test_a_damaged_provenance_is_one_line(change, classify_run, tmp_path):
    run = shutil.copytree(classify_run, tmp_path / "run")
    saved = json.loads((run / "provenance.json").read_text())
    (run / "provenance.json").write_text(json.dumps(saved | change))
    argv = ["record", run, "--name", "x", "--results", tmp_path / "res"]
    one_line(argv, str(run / "provenance.json"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with CUDA")
def test_a_log_naming_a_device_this_machine_lacks_is_one_line(
    classify_run, tmp_path
):
    run = shutil.copytree(classify_run, tmp_path / "run")
    (run / "provenance.json").unlink()  # an older run: its log names the device
    log = (run / "train.log").read_text()
    assert ", cpu, " in log
    (run / "train.log").write_text(log.replace(", cpu, ", ", cuda, ", 1))
    argv = ["record", run, "--name", "x", "--results", tmp_path / "res"]
    one_line([*argv, "--threads", "1"], str(run / "train.log"), "'cuda'")


def test_a_record_without_metrics_is_not_halved(published):
    record = json.loads((published / "record.json").read_text())
    (published / "record.json").write_text(json.dumps(record | {"metrics": {}}))
    argv = ["record", published, "--name", "cls", "--results", published.parent]
    one_line(
        [*argv, "--weights", "--half", "--replace"], "record.json lacks 'task'"
    )


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda t: torch.zeros(3), "do not fit"),
        (lambda t: torch.ones_like(t, dtype=torch.int32), "torch.int32"),
    ],
    ids=["shape", "integers"],
)
def test_weights_that_do_not_fit_the_config_are_one_line(change, said, published):
    weights = load_file(str(published / "model.safetensors"))
    name = next(iter(weights))
    other = published.parent / "other.safetensors"
    save_file(weights | {name: change(weights[name])}, str(other))
    rewrite(published, "model.safetensors", other.read_bytes())
    one_line(predict(published), said)
    with pytest.raises(ValueError, match=said):
        records.load_model(published)
