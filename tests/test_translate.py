"""The translation command line end to end at tiny size: train → evaluate → translate, resume,
checkpoint averaging, and a one-line message (never a traceback) for every kind of bad input."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import sacrebleu
import torch

from annotated_transformer import translate
from annotated_transformer.checkpoint import read_checkpoint, save_checkpoint
from annotated_transformer.multi30k import load_split
from annotated_transformer.translation import average_checkpoints, warmup_cosine

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / ".." / "shared" / "data"


@pytest.fixture(scope="module")
def mirror() -> Path:
    path = Path(os.environ.get("AT_DATA_MIRROR", SHARED)).resolve()
    if not (path / "multi30k").is_dir():
        pytest.skip(f"no Multi30k in data mirror {path}; set AT_DATA_MIRROR to shared/data")
    return path


def cli(mirror: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``python -m annotated_transformer.translate ARGS`` in a fresh process."""
    env = {**os.environ, "AT_DATA_MIRROR": str(mirror), "PYTHONPATH": str(ROOT / "src"),
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    command = [sys.executable, "-m", "annotated_transformer.translate", *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, env=env,
                          timeout=300, check=False)  # fmt: skip


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    return result


@pytest.fixture(scope="module")
def run(mirror, tmp_path_factory) -> Path:
    """One uninterrupted tiny training run."""
    out = tmp_path_factory.mktemp("tiny") / "run"
    ok(cli(mirror, "train", "--preset", "tiny", "--out", str(out), "--device", "cpu"))
    return out


def test_train_writes_checkpoints_logs_and_metrics(run):
    preset = translate.PRESETS["tiny"]
    for name in ("last.pt", "best.pt", "averaged.pt", "final.pt", "steps.csv", "history.csv"):
        assert (run / name).is_file(), name
    kept = sorted(p.name for p in run.glob("epoch*.pt"))
    assert kept == [f"epoch{e:03d}.pt" for e in range(preset.epochs - preset.keep_last + 1,
                                                         preset.epochs + 1)]  # fmt: skip
    history = pd.read_csv(run / "history.csv")
    assert list(history["epoch"]) == list(range(1, preset.epochs + 1))
    assert history["val_loss"].notna().all() and history["val_bleu"].between(0, 100).all()
    assert history["val_bleu"].max() == pytest.approx(
        read_checkpoint(run / "best.pt")["extra"]["val_bleu"]
    )
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["final"] in ("best.pt", "averaged.pt")
    assert metrics["test2016"]["sentences"] == preset.eval_limit
    assert "tok:13a" in metrics["test2016"]["bleu_signature"]
    # a checkpoint is self-contained: preset and both vocabularies
    config = read_checkpoint(run / "final.pt")["config"]
    assert config["preset"]["d_model"] == preset.d_model
    assert config["src_itos"][:4] == ["<pad>", "<unk>", "<s>", "</s>"]


def test_evaluate_prints_scores_that_sacrebleu_reproduces(run, mirror):
    result = ok(cli(mirror, "evaluate", "--checkpoint", str(run / "final.pt"), "--split", "val",
                    "--limit", "30", "--beam", "2", "--device", "cpu"))  # fmt: skip
    scores = json.loads(result.stdout)
    assert scores["split"] == "val" and scores["sentences"] == 30
    assert {"bleu_signature", "tokenized_bleu", "chrf"} <= scores.keys()
    # independent check: translate the same sentences, score them with sacreBLEU directly
    de, en = load_split("val", mirror=mirror)
    out = ok(cli(mirror, "translate", "--checkpoint", str(run / "final.pt"), "--beam", "2",
                 stdin="\n".join(de[:30])))  # fmt: skip
    hyps = out.stdout.splitlines()
    assert len(hyps) == 30
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [en[:30]]).score, abs=0.01)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [en[:30]]).score, abs=0.01)


def test_translate_arguments_and_stdin_agree(run, capsys, monkeypatch):
    ckpt = str(run / "final.pt")
    assert translate.main(["translate", "--checkpoint", ckpt, "Ein Mann fährt Fahrrad.",
                           "Zwei Hunde spielen im Schnee."]) == 0  # fmt: skip
    from_args = capsys.readouterr().out.splitlines()
    monkeypatch.setattr(
        sys, "stdin", io.StringIO("Ein Mann fährt Fahrrad.\nZwei Hunde spielen im Schnee.\n")
    )
    assert translate.main(["translate", "--checkpoint", ckpt]) == 0
    assert capsys.readouterr().out.splitlines() == from_args
    assert len(from_args) == 2 and all(from_args)


def test_resume_continues_exactly_like_an_uninterrupted_run(run, mirror, tmp_path):
    out = tmp_path / "resumed"
    first = ok(cli(mirror, "train", "--preset", "tiny", "--out", str(out), "--max-steps", "9"))
    assert "continue with --resume" in first.stderr
    assert read_checkpoint(out / "last.pt")["step"] == 9  # stopped mid-epoch 1
    ok(cli(mirror, "train", "--out", str(out), "--resume"))
    expected, got = pd.read_csv(run / "steps.csv"), pd.read_csv(out / "steps.csv")
    assert list(got["step"]) == list(expected["step"])
    for column in ("loss", "lr", "grad_norm", "val_loss", "val_bleu"):
        pd.testing.assert_series_equal(got[column], expected[column], rtol=1e-6)


def test_average_checkpoints_is_the_elementwise_mean(run):
    paths = sorted(run.glob("epoch*.pt"))
    _, averaged = average_checkpoints(paths)
    loaded = [torch.load(p, weights_only=True)["model"] for p in paths]
    for name, value in averaged.items():
        mean = sum(state[name].double() for state in loaded) / len(loaded)
        torch.testing.assert_close(value, mean.to(value.dtype))


def test_warmup_cosine_follows_its_formula():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = warmup_cosine(opt, warmup=4, total=12)
    rates = []
    for _ in range(12):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    expected = [2.0 * (s + 1) / 4 for s in range(4)]
    expected += [2.0 * 0.5 * (1 + math.cos(math.pi * (s - 4) / 8)) for s in range(4, 12)]
    assert rates == pytest.approx(expected)


# ------------------------------------------------------------------------------- bad input


def fails(capsys, argv: list[str], message: str, code: int = 1) -> None:
    """main(argv) exits with ``code`` and one line on stderr that contains ``message``."""
    try:
        status = translate.main(argv)
    except SystemExit as exit_:  # argparse's usage errors
        status = exit_.code
    err = capsys.readouterr().err
    assert status == code
    assert message in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_missing_checkpoint(capsys, tmp_path):
    fails(
        capsys, ["translate", "--checkpoint", str(tmp_path / "no.pt"), "Hallo"], "no checkpoint at"
    )


def test_corrupt_checkpoint(run, capsys, tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes((run / "final.pt").read_bytes()[:5000])
    fails(capsys, ["translate", "--checkpoint", str(bad), "Hallo"], "not a readable checkpoint")


def test_checkpoint_of_another_model(capsys, tmp_path):
    path = save_checkpoint(tmp_path / "other.pt", torch.nn.Linear(2, 2))
    fails(capsys, ["translate", "--checkpoint", str(path), "Hallo"], "not of a translation model")


def test_empty_line_and_empty_argument(run, capsys, monkeypatch):
    ckpt = str(run / "final.pt")
    monkeypatch.setattr(sys, "stdin", io.StringIO("Ein Hund.\n\nZwei Katzen.\n"))
    fails(capsys, ["translate", "--checkpoint", ckpt], "sentence 2 is empty")
    fails(capsys, ["translate", "--checkpoint", ckpt, ""], "sentence 1 is empty")


def test_sentence_longer_than_the_positions(run, capsys):
    long = " ".join(["Hund"] * 300)
    fails(capsys, ["translate", "--checkpoint", str(run / "final.pt"), long], "positions")


def test_unknown_characters_become_unk_with_a_warning(run, capsys):
    assert translate.main(["translate", "--checkpoint", str(run / "final.pt"), "Жжж ☃ läuft."]) == 0
    captured = capsys.readouterr()
    assert "warning:" in captured.err and "'Жжж'" in captured.err and "<unk>" in captured.err
    assert len(captured.out.splitlines()) == 1


def test_unknown_preset_and_other_usage_errors(capsys, tmp_path):
    fails(capsys, ["train", "--preset", "huge", "--out", str(tmp_path)], "unknown preset 'huge'")
    fails(capsys, ["train", "--out", str(tmp_path)], "give --preset")
    fails(capsys, ["evaluate", "--checkpoint", "x.pt", "--split", "nope"], "invalid choice", code=2)
    fails(capsys, ["translate", "--checkpoint", "x.pt", "--beam", "0", "Hallo"], "--beam 0")


def test_resume_mistakes(run, capsys, tmp_path):
    fails(capsys, ["train", "--out", str(tmp_path), "--resume"], "nothing to resume")
    fails(capsys, ["train", "--preset", "tiny", "--out", str(run)], "add --resume")
    fails(capsys, ["train", "--preset", "cpu", "--out", str(run), "--resume"], "'tiny' run")
    fails(
        capsys, ["train", "--out", str(run), "--resume", "--epochs", "7"], "resume without --epochs"
    )


def test_ensure_run_reuses_a_finished_run_and_reports_a_failed_one(tmp_path):
    finished = tmp_path / "finished"
    finished.mkdir()
    (finished / "metrics.json").write_text("{}")
    # A finished run is returned as it is: nothing is trained (an unknown preset would fail).
    assert translate.ensure_run("no-such-preset", finished) == finished
    with pytest.raises(RuntimeError, match="unknown preset 'no-such-preset'"):
        translate.ensure_run("no-such-preset", tmp_path / "new")
    # fresh=True throws the old run away first, so the failing training is attempted.
    with pytest.raises(RuntimeError, match="translate train` failed"):
        translate.ensure_run("no-such-preset", finished, fresh=True)
    assert not finished.exists()
