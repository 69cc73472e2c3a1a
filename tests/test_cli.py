"""The one command line, ``python -m annotated_transformer TASK
{train,evaluate,predict}``.

For every task at tiny size: train, then evaluate and predict from the checkpoint
alone; ``--set`` reaches the model and the optimiser; every kind of bad input is one
line on stderr (never a traceback) and a non-zero exit status: 1 for bad input, 2
for a bad command line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import json
import math
import os
import subprocess
import sys
import typing
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pandas as pd
import pytest
import sacrebleu
import torch

from annotated_transformer import cli, records, runner
from annotated_transformer.data import imdb
from annotated_transformer.data.byte_corpora import load_splits
from annotated_transformer.data.multi30k import load_split
from annotated_transformer.evaluation.decoding import beam_search
from annotated_transformer.tasks import PRESETS, TASKS
from annotated_transformer.tasks.base import flat_settings
from annotated_transformer.training import trainer as training
from annotated_transformer.training.checkpoints import (
    read_checkpoint,
    save_checkpoint,
)

# Small runs of the tiny presets (seconds each). N and lr differ from the presets on
# purpose: the tests check that they reach the model and the optimiser.
SETTINGS = {
    "translate": {
        "train_limit": 300,
        "eval_limit": 20,
        "warmup": 2,
        "N": 2,
        "lr": 0.01,
    },
    "classify": {
        "train_subset": 600,
        "val_size": 100,
        "test_subset": 100,
        "steps": 12,
        "eval_every": 6,
        "warmup": 2,
        "N": 2,
        "lr": 0.01,
    },
    "mlm": {
        "train_subset": 600,
        "val_size": 100,
        "steps": 12,
        "eval_every": 6,
        "warmup": 2,
        "N": 2,
        "lr": 0.01,
    },
    "lm": {
        "dataset": "enwik8_prefix",
        "steps": 12,
        "eval_every": 6,
        "eval_bytes": 1024,
        "warmup": 4,
        "N": 3,
        "lr": 0.01,
    },
}


def set_args(settings: dict) -> list[str]:
    return [
        arg
        for key, value in settings.items()
        for arg in ("--set", f"{key}={value}")
    ]


@pytest.fixture(scope="module")
def mirror(multi30k_mirror, imdb_mirror, chars_mirror) -> Path:
    return multi30k_mirror


@pytest.fixture(scope="module")
def trained(mirror, tmp_path_factory, one_thread):
    """``trained(task)``: the folder of a tiny run trained through ``cli.main``
    (once), and what the command printed on stdout."""
    runs: dict[str, tuple[Path, str]] = {}

    def get(task: str) -> tuple[Path, str]:
        if task not in runs:
            out = tmp_path_factory.mktemp(task) / "run"
            argv = [
                task,
                "train",
                "--preset",
                "tiny",
                "--out",
                str(out),
                "--no-progress",
            ]
            argv += [
                "--device",
                "cpu",
                "--data-dir",
                str(mirror),
                *set_args(SETTINGS[task]),
            ]
            stdout, stderr = io.StringIO(), io.StringIO()
            with redirect_stdout(stdout), redirect_stderr(stderr):
                code = cli.main(argv)
            assert code == 0, stderr.getvalue()
            runs[task] = out, stdout.getvalue()
        return runs[task]

    return get


def call(capsys, argv: list[str]) -> tuple[int, str, str]:
    """``cli.main(argv)`` -> (exit status, stdout, stderr); argparse's
    exits become statuses."""
    try:
        status = cli.main(argv)
    except SystemExit as stop:
        status = stop.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def ok(capsys, argv: list[str]) -> str:
    status, out, err = call(capsys, argv)
    assert status == 0, err
    return out


def fails(capsys, argv: list[str], *fragments: str, code: int = 1) -> str:
    """``argv`` exits with ``code`` and exactly one line on stderr
    containing ``fragments``."""
    status, out, err = call(capsys, argv)
    assert status == code, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and out == ""
    for fragment in fragments:
        assert fragment in err, err
    return err


# --------------------------------------------------------- train, evaluate, predict


@pytest.mark.parametrize("task", list(TASKS))
def test_train_prints_the_test_metrics_and_writes_the_run(trained, task):
    out, stdout = trained(task)
    for name in (
        "last.pt",
        "best.pt",
        "final.pt",
        "history.csv",
        "metrics.json",
        "train.log",
    ):
        assert (out / name).is_file(), name
    metrics = json.loads((out / "metrics.json").read_text())
    # the final scores, under the split they scored (a language model's: validation)
    assert json.loads(stdout) == metrics[records.scored_section(metrics)]
    assert metrics["task"] == task and metrics["preset"] == "tiny"


@pytest.mark.parametrize("task", list(TASKS))
def test_set_reaches_the_saved_config_the_model_and_the_optimiser(trained, task):
    out, _ = trained(task)
    expected = flat_settings(PRESETS[task]["tiny"]) | SETTINGS[task]
    for name in ("last.pt", "final.pt"):
        saved = read_checkpoint(out / name)["config"]
        assert (saved["task"], saved["preset"], saved["config"]) == (
            task,
            "tiny",
            expected,
        )
    _, model = runner.load_model(out / "final.pt")
    layers = (
        [model.encoder.layers, model.decoder.layers]
        if task == "translate"
        else [model.blocks]
    )
    assert [len(stack) for stack in layers] == [SETTINGS[task]["N"]] * len(layers)
    # the optimiser's peak: LambdaLR's base rate, and the rate of
    # the step after the warm-up
    optimizer = read_checkpoint(out / "last.pt")["optimizer"]
    assert [g["initial_lr"] for g in optimizer["param_groups"]] == [0.01]
    history = pd.read_csv(out / "history.csv")
    warmup = SETTINGS[task]["warmup"]
    assert history["lr"].iloc[warmup] == pytest.approx(
        0.01, rel=1e-12
    )  # step warmup + 1
    assert history["lr"].max() == pytest.approx(0.01, rel=1e-12)


def test_translate_evaluate_prints_scores_that_sacrebleu_reproduces(
    trained, mirror, capsys
):
    out, _ = trained("translate")
    checkpoint = ["--checkpoint", str(out / "final.pt"), "--device", "cpu"]
    argv = ["translate", "evaluate", *checkpoint, "--split", "val", "--beam", "2"]
    scores = json.loads(ok(capsys, [*argv, "--data-dir", str(mirror)]))
    n = SETTINGS["translate"]["eval_limit"]
    assert (scores["split"], scores["beam"], scores["sentences"]) == ("val", 2, n)
    assert "tok:13a" in scores["bleu_signature"]
    # independently: translate the same sentences, score them
    # with sacreBLEU directly
    de, en = load_split("val", mirror=mirror)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdin", io.StringIO("\n".join(de[:n]) + "\n"))
        hypotheses = ok(
            capsys, ["translate", "predict", *checkpoint, "--beam", "2"]
        ).splitlines()
    assert len(hypotheses) == n
    bleu = sacrebleu.corpus_bleu(hypotheses, [en[:n]]).score
    assert scores["bleu"] == pytest.approx(bleu, abs=0.006)
    assert scores["chrf"] == pytest.approx(
        sacrebleu.corpus_chrf(hypotheses, [en[:n]]).score, abs=0.006
    )


def test_translate_alpha_is_beam_searchs_length_penalty(
    trained, mirror, capsys, monkeypatch
):
    from annotated_transformer.tasks import translation

    out, _ = trained("translate")
    checkpoint = ["--checkpoint", str(out / "final.pt"), "--data-dir", str(mirror)]
    seen = []

    def spy(*args, **kwargs):
        seen.append(
            args[7]
        )  # beam_search(model, src, mask, max_len, bos, eos, beam, alpha)
        return beam_search(*args, **kwargs)

    monkeypatch.setattr(translation, "beam_search", spy)
    argv = ["translate", "evaluate", *checkpoint, "--split", "val", "--beam", "2"]
    scores = json.loads(ok(capsys, [*argv, "--alpha", "1.25"]))
    assert (scores["beam"], scores["alpha"]) == (2, 1.25) and set(seen) == {1.25}
    assert (
        json.loads(ok(capsys, argv))["alpha"] == 0.6 and seen[-1] == 0.6
    )  # the run's α
    fails(
        capsys,
        [*argv, "--alpha", "-1"],
        "alpha=-1.0: the length penalty α must lie in [0, 5]",
    )


def test_translate_predict_arguments_and_stdin_agree(trained, capsys, monkeypatch):
    out, _ = trained("translate")
    argv = ["translate", "predict", "--checkpoint", str(out / "final.pt")]
    sentences = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee."]
    from_args = ok(capsys, [*argv, *sentences]).splitlines()
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(sentences) + "\n"))
    assert ok(capsys, argv).splitlines() == from_args
    assert len(from_args) == 2 and all(from_args)


def test_classify_evaluate_and_predict_from_the_checkpoint_alone(
    trained, mirror, capsys
):
    out, _ = trained("classify")
    metrics = json.loads((out / "metrics.json").read_text())
    argv = [
        "classify",
        "evaluate",
        "--checkpoint",
        str(out / "final.pt"),
        "--split",
        "test",
    ]
    result = json.loads(ok(capsys, [*argv, "--data-dir", str(mirror)]))
    assert result["reviews"] == SETTINGS["classify"]["test_subset"]
    assert (
        result["accuracy"] == metrics["test"]["accuracy"]
    )  # same weights, same reviews
    assert result["loss"] == pytest.approx(metrics["test"]["loss"], rel=1e-6)

    reviews = ["A wonderful, moving film.", "Dull and far too long."]
    argv = ["classify", "predict", "--checkpoint", str(out / "final.pt"), *reviews]
    lines = ok(capsys, argv).splitlines()
    # independently: the model's softmax on the review's word ids
    task, model = runner.load_model(out / "final.pt")
    for review, line in zip(reviews, lines, strict=True):
        ids = torch.tensor([task.vocab.encode(imdb.tokenize(review))])
        with torch.no_grad():
            probs = model(ids)[0].softmax(-1)
        label = int(probs.argmax())
        assert (
            line == f"{('negative', 'positive')[label]}\t{float(probs[label]):.3f}"
        )


def brute_force_bits(model, text: torch.Tensor, context: int) -> float:
    """Mean −log₂ p of bytes 1..n-1, each from a forward pass over its
    ``context`` predecessors."""
    total = 0.0
    with torch.no_grad():
        for t in range(1, len(text)):
            x = text[max(0, t - context) : t].long()[None]
            total -= model(x)[0, -1].double().log_softmax(-1)[
                int(text[t])
            ].item() / math.log(2)
    return total / (len(text) - 1)


def test_lm_evaluate_equals_brute_force_and_predict_is_seeded(
    trained, mirror, capsys
):
    out, _ = trained("lm")
    checkpoint = ["--checkpoint", str(out / "final.pt")]
    argv = [
        "lm",
        "evaluate",
        *checkpoint,
        "--split",
        "val",
        "--max-bytes",
        "100",
        "--stride",
        "1",
    ]
    result = json.loads(ok(capsys, [*argv, "--data-dir", str(mirror)]))
    assert (result["bytes_scored"], result["context"], result["stride"]) == (
        99,
        64,
        1,
    )
    assert "not comparable" in result["note"]  # enwik8_prefix
    _, model = runner.load_model(out / "final.pt")
    text = load_splits("enwik8_prefix", mirror=mirror)["val"][:100]
    assert result["bits_per_byte"] == pytest.approx(
        brute_force_bits(model, text, 64), rel=1e-5
    )
    fails(capsys, [*argv, "--mem-len", "64"], "only a block=xl model has a memory")

    argv = [
        "lm",
        "predict",
        *checkpoint,
        "[[",
        "--length",
        "30",
        "--top-k",
        "20",
        "--seed",
        "3",
    ]
    first, again = ok(capsys, argv), ok(capsys, argv)
    assert first == again and first.startswith("[[")


# ------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("task", list(TASKS))
def test_bad_settings_and_presets_are_one_line(task, tmp_path, capsys):
    train = [task, "train", "--out", str(tmp_path / "run")]
    err = fails(
        capsys, [*train, "--set", "nope=1"], "--set nope: unknown key; valid keys:"
    )
    valid = list(flat_settings(PRESETS[task]["tiny"]))
    assert err.strip().endswith(", ".join(valid))
    fails(capsys, [*train, "--set", "lr=abc"], "lr takes float")
    fails(capsys, [*train, "--set", "N=2.5"], "N takes int")
    fails(capsys, [*train, "--set", "clip_norm=x"], "clip_norm takes float or none")
    fails(capsys, [*train, "--set", "lr"], "write KEY=VALUE")
    fails(
        capsys,
        [*train, "--preset", "huge"],
        "unknown preset 'huge'",
        ", ".join(PRESETS[task]),
    )
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.mark.parametrize("task", list(TASKS))
def test_a_data_folder_that_is_not_there_is_one_line(task, tmp_path, capsys):
    argv = [
        task,
        "train",
        "--out",
        str(tmp_path / "run"),
        "--data-dir",
        str(tmp_path / "none"),
    ]
    fails(capsys, argv, f"the data mirror {tmp_path / 'none'} is not a folder")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("task", list(TASKS))
def test_a_device_that_is_not_there_is_one_line(task, tmp_path, capsys):
    train = [task, "train", "--out", str(tmp_path / "run"), "--device"]
    fails(capsys, [*train, "tpu"], "unknown device 'tpu'")
    if not torch.cuda.is_available():
        fails(capsys, [*train, "cuda"], "no CUDA device")
    if not torch.backends.mps.is_available():
        fails(capsys, [*train, "mps"], "no MPS device")


def test_a_device_that_is_not_there_for_evaluate_and_predict(trained, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    checkpoint = [
        "--checkpoint",
        str(trained("classify")[0] / "final.pt"),
        "--device",
        "cuda",
    ]
    fails(capsys, ["classify", "evaluate", *checkpoint], "no CUDA device")
    fails(capsys, ["classify", "predict", *checkpoint, "Great."], "no CUDA device")


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        ([], "required: task"),
        (["nope"], "invalid choice: 'nope'"),
        (["translate"], "required: command"),
        (["translate", "fly"], "invalid choice: 'fly'"),
        (["lm", "train"], "required: --out"),
        (["lm", "train", "--out", "x", "--max-steps", "two"], "invalid int value"),
        (
            ["translate", "evaluate", "--checkpoint", "x.pt", "--split", "nope"],
            "invalid choice",
        ),
    ],
)
def test_a_bad_command_line_is_one_line_and_exit_status_2(capsys, argv, fragment):
    fails(capsys, argv, fragment, code=2)


def test_resume_mistakes(trained, tmp_path, capsys):
    out, _ = trained("classify")
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    train = ["classify", "train", "--out", str(out)]
    fails(capsys, [*train, "--resume", "--preset", "tiny"], "drop --preset/--set")
    fails(capsys, [*train, "--resume", "--set", "lr=1"], "drop --preset/--set")
    fails(capsys, [*train, "--preset", "tiny"], "already holds a run", "--resume")
    fails(
        capsys,
        ["lm", "train", "--out", str(out), "--resume"],
        "holds a 'classify' run, not lm",
    )
    empty = ["classify", "train", "--out", str(tmp_path / "empty"), "--resume"]
    fails(capsys, empty, "nothing to resume")
    fails(capsys, [*train, "--max-steps", "0"], "--max-steps 0 must be >= 1")
    fails(capsys, [*train, "--threads", "0"], "--threads 0 must be >= 1")
    assert {
        p.name: p.stat().st_mtime_ns for p in out.iterdir()
    } == before  # nothing touched


def test_bad_checkpoints(trained, tmp_path, capsys):
    out, _ = trained("classify")
    garbage, truncated = tmp_path / "garbage.pt", tmp_path / "truncated.pt"
    garbage.write_bytes(b"\x00\xffnot a checkpoint at all\n" * 10)
    truncated.write_bytes((out / "final.pt").read_bytes()[:5000])
    other = save_checkpoint(tmp_path / "linear.pt", torch.nn.Linear(2, 2))
    cases = [
        (tmp_path / "missing.pt", "no checkpoint at"),
        (garbage, "not a readable checkpoint"),
        (truncated, "not a readable checkpoint"),
        (other, "not one a run wrote"),
        (out / "final.pt", "is a classify checkpoint, not translate"),
    ]
    for command in (["evaluate"], ["predict", "Hallo"]):
        for path, fragment in cases:
            fails(
                capsys, ["translate", *command, "--checkpoint", str(path)], fragment
            )


def test_empty_and_impossible_inputs_to_predict(trained, capsys, monkeypatch):
    def predict(task: str, *args: str, stdin: str | None = None) -> list[str]:
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        return [
            task,
            "predict",
            "--checkpoint",
            str(trained(task)[0] / "final.pt"),
            *args,
        ]

    fails(capsys, predict("translate", stdin=""), "nothing to translate")
    fails(
        capsys,
        predict("translate", stdin="Ein Hund.\n\nZwei Katzen.\n"),
        "sentence 2 is empty",
    )
    fails(capsys, predict("translate", ""), "sentence 1 is empty")
    fails(capsys, predict("translate", " ".join(["Hund"] * 300)), "256 positions")
    fails(
        capsys,
        predict("translate", "Hallo", "--beam", "0"),
        "beam=0 must be >= 1",
    )
    fails(capsys, predict("classify", stdin=""), "nothing to classify")
    fails(capsys, predict("classify", "<br /><br />"), "review 1 has no words")
    fails(capsys, predict("lm", stdin=""), "nothing to continue")
    fails(capsys, predict("lm", ""), "prompt 1 is empty")
    fails(capsys, predict("lm", "a", "--temperature", "0"), "temperature")
    fails(capsys, predict("lm", "a", "--temperature", "1e-45"), "temperature")
    fails(capsys, predict("lm", "a", "--top-k", "0"), "top_k")
    monkeypatch.setattr(sys, "stdin", None)  # started with stdin closed: `<&-`
    fails(capsys, predict("lm"), "no texts: give them on the command line")


def test_a_checkpoint_with_fields_of_the_wrong_kind_is_one_line(
    trained, tmp_path, capsys
):
    """Behind a valid checksum (made again after the edit): a model that is a
    string, integer weights."""
    from annotated_transformer.training import checkpoints

    out, _ = trained("lm")
    changes = {
        "its model is a str, not a dict of weights": lambda s: s.update(model="x"),
        "not floating-point": lambda s: s["model"].update(
            {k: v.long() for k, v in s["model"].items()}
        ),
    }
    for said, change in changes.items():
        state = checkpoints.read_checkpoint(out / "final.pt")
        change(state)
        state["checksum"] = checkpoints.content_hash(state)
        torch.save(state, tmp_path / "edited.pt")
        argv = ["lm", "predict", "--checkpoint", str(tmp_path / "edited.pt"), "a"]
        fails(capsys, argv, f"{tmp_path / 'edited.pt'} is damaged: ", said)


def test_an_interrupt_is_one_line_and_exit_status_130(
    capsys, monkeypatch, tmp_path
):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    # before the first checkpoint: the line says there is nothing to resume
    monkeypatch.setattr(runner.Run, "train", interrupted)
    out = tmp_path / "run"
    argv = ["lm", "train", "--out", str(out), "--device", "cpu"]
    said = f"interrupted: no checkpoint was written in {out} yet: start the run"
    fails(capsys, [*argv, "--set", "dataset=enwik8_prefix"], said, code=130)
    assert not (out / "last.pt").exists()
    # evaluate and predict: just interrupted
    monkeypatch.setattr(runner, "load_model", interrupted)
    err = fails(capsys, ["lm", "predict", "--checkpoint", "x.pt", "a"], code=130)
    assert err == "interrupted\n"


def test_errors_in_a_real_process_are_one_line(mirror, tmp_path):
    env = {**os.environ, "AT_DATA_MIRROR": str(mirror), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "annotated_transformer",
        "lm",
        "train",
        "--preset",
        "huge",
    ]
    done = subprocess.run(
        [*command, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert (
        done.stderr
        == "error: unknown preset 'huge' for lm; use one of tiny, cpu, gpu\n"
    )


# ---------------------------------------------------------- every setting, in range

# What each kind of setting may not be: the specification, written here
# independently of the configs' own tables. 0 means something only for these
# settings (no epochs, no validation steps, no kept checkpoints, no pool, no window,
# ...), and these are shares of something dropped or hidden, below 1.
ZERO_MEANS_SOMETHING = {
    *("epochs", "eval_every", "checkpoint_every", "keep_last", "seed"),
    *("pool_size", "pack_width", "bpe_merges", "kv_heads", "tail", "window"),
    *("mem_len", "sparse_stride", "sparse_summary", "alpha", "weight_decay"),
    *("dropout", "attn_dropout", "label_smoothing", "word_dropout"),
}
SHARES = {"dropout", "attn_dropout", "label_smoothing", "word_dropout", "mask_p"}


def invalid_values(name: str, kind, config) -> list[str]:
    """Values of the setting ``name`` (of type ``kind``) that must be refused."""
    kinds = typing.get_args(kind) or (kind,)
    if bool in kinds:
        return ["maybe"]
    if str in kinds:  # init: a run's folder, checked when the run starts (below)
        return [] if name == "init" else ["nonsense"]
    values = ["-1"]
    if int in kinds:  # beyond what torch's generators and counts take
        values.append(str(2**63 - 1))
    if name not in ZERO_MEANS_SOMETHING and not (name == "steps" and config.epochs):
        values.append("0")
    if float in kinds:
        values += ["nan", "inf", "-inf"]
    if name in SHARES:
        values += ["1", "1.5"]
    return values


@pytest.mark.parametrize("task", list(TASKS))
def test_every_setting_of_every_task_is_range_checked(
    task,
    tmp_path,
    capsys,
    monkeypatch,
):
    def accepted(*args, **kwargs):
        raise AssertionError(f"a run started with {kwargs.get('config')}")

    monkeypatch.setattr(runner, "Run", accepted)  # an accepted value fails here
    config = PRESETS[task]["tiny"]
    hints = typing.get_type_hints(type(config))
    untested = []
    for field in dataclasses.fields(config):
        values = invalid_values(field.name, hints[field.name], config)
        for value in values:
            argv = [task, "train", "--out", str(tmp_path / "run"), "--set"]
            fails(capsys, [*argv, f"{field.name}={value}"], field.name)
        untested += [] if values else [field.name]
    assert untested in ([], ["init"])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("task", list(TASKS))
def test_a_model_width_its_heads_do_not_divide_is_refused(task, tmp_path, capsys):
    argv = [task, "train", "--out", str(tmp_path / "run")]
    argv += ["--set", "h=3", "--set", "d_model=64"]
    fails(capsys, argv, "d_model=64 is not divisible by h=3")


def test_an_init_run_that_is_not_there_is_refused(tmp_path, capsys, mirror):
    argv = ["classify", "train", "--out", str(tmp_path / "run")]
    argv += ["--data-dir", str(mirror), "--set", f"init={tmp_path / 'nowhere'}"]
    fails(capsys, argv, "no final.pt there")
    loop = [tmp_path / "loop-a", tmp_path / "loop-b"]
    loop[0].symlink_to(loop[1])
    loop[1].symlink_to(loop[0])
    argv[-1] = f"init={loop[0]}"
    fails(capsys, argv, f"{loop[0]} is a loop of symbolic links")


def test_clip_norm_is_a_positive_bound_or_none():
    assert runner.new_config("lm", "tiny", ["clip_norm=none"]).clip_norm is None
    assert runner.new_config("lm", "tiny", ["clip_norm=0.5"]).clip_norm == 0.5
    for value in ("-1", "0"):
        refused = f"clip_norm={float(value)} must be > 0"
        with pytest.raises(ValueError, match=refused):
            runner.new_config("lm", "tiny", [f"clip_norm={value}"])


def test_settings_that_would_fail_later_are_refused_up_front(
    mirror, tmp_path, capsys
):
    """Values that the type allows but the data or the machine do not: refused
    before training, with the range that works, naming only real settings."""
    out = tmp_path / "run"

    def train(task: str, *argv: str) -> list[str]:
        where = ["--out", str(out), "--data-dir", str(mirror)]
        return [task, "train", *where, *set_args(SETTINGS[task]), *argv]

    lm = ["lm", "--device", "cpu"]
    fails(
        capsys,
        train(*lm, "--set", "eval_bytes=1"),
        "eval_bytes=1 hold no validation window of max_len=",
        "use eval_bytes >= ",
    )
    err = fails(
        capsys,
        train(*lm, "--set", "max_len=5000000"),
        "max_len=5000000 is longer than the training text",
        "use max_len in [1, ",
    )
    assert "block_size" not in err
    fails(
        capsys,
        train("mlm", "--device", "cpu", "--set", "mask_p=1e-12"),
        "mask_p=1e-12 selects no token to predict",
        "use mask_p in [",
    )
    fails(
        capsys,
        train("classify", "--set", "train_subset=1", "--set", "val_size=300"),
        "val_size=300 validation reviews are taken out of train_subset=1",
        "train_subset >= 301",
    )
    fails(capsys, train(*lm, "--set", "sharding=fsdp"), "sharding=fsdp", "torchrun")
    fails(capsys, train(*lm, "--set", f"seed={2**63 - 1}"), "seed=", "at most")
    fails(capsys, train(*lm, "--threads", str(10**20)), f"--threads {10**20} must")
    fails(capsys, train(*lm, "--threads", "100000"), "use --threads in [1, ")
    for device in ("cpu:x", "cpu:0:1", "cuda:-1"):
        err = fails(capsys, train("lm", "--device", device), f"--device {device}")
        assert "Traceback" not in err
    fails(capsys, ["lm", "train", "--out", ""], "--out", code=2)
    assert not out.exists() and not (Path.cwd() / "last.pt").exists()


def test_predict_refuses_text_that_is_not_utf8(trained, capsys, monkeypatch):
    predict = ["lm", "predict", "--checkpoint", str(trained("lm")[0] / "final.pt")]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"caf\xe9\n")))
    fails(capsys, predict, "stdin is not UTF-8 text (byte 0xe9 at 3)")
    # what Python makes of such bytes on the command line: surrogates
    fails(
        capsys, [*predict, "caf\udce9"], "text 1 on the command line is not UTF-8"
    )


def test_a_mistake_under_torchrun_is_one_line_from_rank_0(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node=2", "-m", "annotated_transformer", "lm", "train"]
    command += ["--out", str(tmp_path / "run"), "--device", "cpu", "--set", "lr=-1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert done.stderr.count("error: lr=-1.0 must be > 0") == 1, done.stderr


def test_a_mistake_under_the_launcher_is_the_programs_line_alone(tmp_path):
    """``python -m annotated_transformer.launch``: torchrun, but a failure is the
    program's one line and its exit status, without the launcher's
    ChildFailedError traceback and logs."""
    command = [sys.executable, "-m", "annotated_transformer.launch", "--standalone"]
    command += ["--nproc_per_node=2", "lm", "train", "--out", str(tmp_path / "run")]
    command += ["--device", "cpu", "--set", "lr=-1"]
    env = {key: value for key, value in os.environ.items() if key != "LOGLEVEL"}
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1
    assert done.stderr == "error: lr=-1.0 must be > 0\n"
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------- evaluate and predict options


def test_every_numeric_option_of_evaluate_and_predict_is_checked(trained, capsys):
    def checkpoint(task: str) -> list[str]:
        return ["--checkpoint", str(trained(task)[0] / "final.pt")]

    lm = ["lm", "evaluate", *checkpoint("lm")]
    fails(capsys, [*lm, "--max-bytes", "1"], "--max-bytes must be >= 2, got 1")
    lm += ["--max-bytes", "100"]
    fails(capsys, [*lm, "--stride", "0"], "--stride must be >= 1, got 0")
    fails(capsys, [*lm, "--stride", "-3"], "--stride must be >= 1, got -3")
    fails(capsys, [*lm, "--stride", "65"], "1 <= stride <= context")
    fails(capsys, [*lm, "--batch-size", "0"], "--batch-size must be >= 1, got 0")
    fails(capsys, [*lm, "--mem-len", "-1"], "--mem-len must be >= 0, got -1")
    lm = ["lm", "predict", *checkpoint("lm"), "a"]
    fails(capsys, [*lm, "--length", "-1"], "length must be >= 0")
    fails(capsys, [*lm, "--temperature", "nan"], "--temperature nan must be finite")
    fails(capsys, [*lm, "--temperature", "inf"], "--temperature inf must be finite")
    fails(capsys, [*lm, "--seed", str(2**70)], f"--seed {2**70} must lie in [")
    fails(capsys, [*lm, "--top-k", "-2"], "top_k must be >= 1")
    mlm = ["mlm", "predict", *checkpoint("mlm"), "a [MASK] film", "--top"]
    fails(capsys, [*mlm, "0"], "--top 0: show from 1 to")
    fails(capsys, [*mlm, "100000"], "--top 100000: show from 1 to")
    translate = ["translate", "predict", *checkpoint("translate"), "Hallo"]
    fails(capsys, [*translate, "--beam", "-1"], "beam=-1 must be >= 1")
    fails(capsys, [*translate, "--alpha", "nan"], "--alpha nan must be finite")
    threads = ["translate", "train", "--out", "x", "--threads", "-1"]
    fails(capsys, threads, "--threads -1 must be >= 1")


BLANK = [("translate", "sentence"), ("classify", "review"), ("mlm", "text")]


@pytest.mark.parametrize(("task", "what"), [*BLANK, ("lm", "prompt")])
def test_blank_input_is_refused_by_every_predict(
    task,
    what,
    trained,
    capsys,
    monkeypatch,
):
    argv = [task, "predict", "--checkpoint", str(trained(task)[0] / "final.pt")]
    fails(capsys, [*argv, "   "], f"{what} 1 is empty or blank")
    fails(capsys, [*argv, "Gut [MASK].", " \t "], f"{what} 2 is empty or blank")
    monkeypatch.setattr(sys, "stdin", io.StringIO("  \n"))
    fails(capsys, argv, f"{what} 1 is empty")


# ----------------------------------------------------------- resources that run out


def test_out_of_memory_is_one_line(mirror, tmp_path, capsys, monkeypatch):
    argv = ["lm", "train", "--out", str(tmp_path / "run"), "--device", "cpu"]
    argv += ["--data-dir", str(mirror), "--set", "dataset=enwik8_prefix"]
    # the largest d_ff a setting takes: 2 × 64 × 2^31 weights a layer, no machine
    huge = [*argv, "--set", f"d_ff={2**31 - 1}"]
    said = "error: out of CPU (RAM) memory: the model or its batches do not fit"
    fails(capsys, huge, said)
    assert not (tmp_path / "run" / "last.pt").exists()

    def cuda_oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9 GiB")

    monkeypatch.setattr(runner, "train", cuda_oom)
    fails(capsys, argv, "out of GPU memory", "train a smaller one")


def test_a_full_disk_while_saving_is_one_line(
    mirror,
    tmp_path,
    capsys,
    monkeypatch,
    full_disk,
):
    """The disk fills while last.pt is written the second time: one line, and the
    folder holds the first last.pt, intact, and no half-written file."""
    save, writes = training.save_checkpoint, []

    def save_checkpoint(path, *args, **kwargs):  # the 2nd last.pt finds it full
        writes.append(path)
        with full_disk() if len(writes) == 2 else contextlib.nullcontext():
            return save(path, *args, **kwargs)

    monkeypatch.setattr(training, "save_checkpoint", save_checkpoint)
    out = tmp_path / "run"
    argv = ["lm", "train", "--out", str(out), "--device", "cpu", "--no-progress"]
    argv += ["--data-dir", str(mirror), *set_args(SETTINGS["lm"])]
    status, _, err = call(capsys, [*argv, "--set", "checkpoint_every=3"])
    assert status == 1 and "Traceback" not in err
    assert err.splitlines()[-1] == (  # the lines before: the run's log
        f"error: no space left on the disk of {out} to write last.pt (the previous "
        "last.pt, if any, is intact): free some space, then run again (a training "
        "run: with --resume)"
    )
    assert read_checkpoint(out / "last.pt")["step"] == 3
    assert not list(out.glob(".*"))  # no temporary file left

    def log_on_a_full_disk(*args, **kwargs):  # a write outside atomic_write
        log = str(out / "train.log")
        raise OSError(errno.ENOSPC, "No space left on device", log)

    monkeypatch.setattr(runner, "train", log_on_a_full_disk)
    said = f"no space left on the disk of {out} to write train.log"
    fails(capsys, argv, said, "free some space")
