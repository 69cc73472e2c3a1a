"""Character-level generation: bits per byte over a whole text, training, and the CLI."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

import annotated_transformer
from annotated_transformer.generate import (
    PRESETS,
    evaluate_bits_per_byte,
    lm_loss,
    main,
    train,
    training_batches,
    window_plan,
)
from annotated_transformer.model import DecoderLM

ROOT = Path(__file__).resolve().parents[1]
MIRROR = Path(os.environ.get("AT_DATA_MIRROR") or ROOT.parent / "shared" / "data")
needs_mirror = pytest.mark.skipif(
    not (MIRROR / "chars" / "enwik8_prefix_1000000.gz").is_file(),
    reason=f"the data mirror {MIRROR} (chars/) is absent; set AT_DATA_MIRROR to run this test",
)


def small_lm(max_len: int = 16) -> DecoderLM:
    torch.manual_seed(0)
    return DecoderLM(d_model=32, h=4, N=2, max_len=max_len, dropout=0.1)


def random_text(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed)).byte()


# --- bits per byte over a whole text ---------------------------------------------------------


@pytest.mark.parametrize(("n", "context", "stride"), [(100, 16, 8), (100, 16, 16), (10, 16, 3)])
def test_a_uniform_model_scores_exactly_8_bits_per_byte(n, context, stride):
    model = small_lm()
    with torch.no_grad():  # constant logits: p = 1/256 for every byte, whatever the context
        model.to_logits.weight.zero_()
        model.to_logits.bias.fill_(0.3)
    bpb, scored = evaluate_bits_per_byte(model, random_text(n), context=context, stride=stride)
    assert scored == n - 1
    assert bpb == pytest.approx(8.0, abs=1e-12)


def brute_force_bits(model: DecoderLM, text: torch.Tensor, context: int) -> float:
    """Score byte t from a forward pass over its last ``context`` preceding bytes, one at a time."""
    total = 0.0
    with torch.no_grad():
        for t in range(1, len(text)):
            x = text[max(0, t - context) : t].long()[None]
            log_p = model(x)[0, -1].double().log_softmax(-1)[int(text[t])]
            total -= log_p.item() / math.log(2)
    return total / (len(text) - 1)


def test_bits_per_byte_equals_brute_force_with_the_whole_prefix():
    model = small_lm(max_len=32).eval()
    text = random_text(25, seed=1)  # shorter than the context: every byte sees all before it
    bpb, _ = evaluate_bits_per_byte(model, text, context=32, stride=5)
    assert bpb == pytest.approx(brute_force_bits(model, text, context=32), rel=1e-9, abs=1e-6)


def test_bits_per_byte_with_stride_1_equals_brute_force_with_a_sliding_context():
    model = small_lm(max_len=8).eval()
    text = random_text(40, seed=2)  # stride 1: byte t sees exactly the 8 bytes before it
    bpb, _ = evaluate_bits_per_byte(model, text, context=8, stride=1, batch_size=5)
    assert bpb == pytest.approx(brute_force_bits(model, text, context=8), rel=1e-9, abs=1e-6)


@pytest.mark.parametrize(("n", "context", "stride"), [(2, 4, 2), (50, 8, 3), (57, 8, 8), (9, 8, 1)])
def test_window_plan_scores_every_byte_once_with_enough_context(n, context, stride):
    L = min(context, n - 1)
    seen = []
    for start, first in window_plan(n, context, stride):
        for t in range(first, start + L + 1):  # targets of this window that it scores
            seen.append(t)
            assert t - start >= min(t, L - stride + 1)  # bytes of context it has
    assert sorted(seen) == list(range(1, n))


def test_window_plan_bad_arguments():
    with pytest.raises(ValueError, match="no byte to predict"):
        window_plan(1, 8, 4)
    with pytest.raises(ValueError, match="1 <= stride <= context"):
        window_plan(10, 8, 9)


def test_lm_loss_is_the_summed_cross_entropy():
    model = small_lm().eval()
    x, y = torch.randint(0, 256, (3, 16)), torch.randint(0, 256, (3, 16))
    loss, n = lm_loss(model, (x, y))
    logits = model(x)
    manual = -sum(logits[b, t].log_softmax(-1)[y[b, t]] for b in range(3) for t in range(16))
    assert n == 48
    torch.testing.assert_close(loss, manual, rtol=1e-5, atol=1e-4)
    assert F.cross_entropy(logits.flatten(0, 1), y.flatten()).item() == pytest.approx(
        loss.item() / n, rel=1e-5
    )


def test_training_batches_repeat_per_epoch():
    data = random_text(5000)
    batches = training_batches(data, PRESETS["tiny"])
    first, again, other = list(batches(0)), list(batches(0)), list(batches(1))
    assert len(first) == 5000 // (16 * 64) and first[0][0].shape == (16, 64)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0][0], other[0][0])
    x, y = first[0]
    assert torch.equal(x[:, 1:], y[:, :-1])


# --- the command line ------------------------------------------------------------------------


def run_main(argv, capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def check_one_line_error(code, err, *fragments):
    assert code != 0
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    for fragment in fragments:
        assert fragment in err, err


def test_cli_bad_input(tmp_path, capsys):
    code, _, err = run_main(["train", "--preset", "huge", "--out", str(tmp_path)], capsys)
    check_one_line_error(code, err, "unknown preset 'huge'", "tiny")
    missing = str(tmp_path / "missing.pt")
    code, _, err = run_main(["sample", "--checkpoint", missing, "--prompt", "a"], capsys)
    check_one_line_error(code, err, "no checkpoint at")
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint at all")
    code, _, err = run_main(["evaluate", "--checkpoint", str(corrupt)], capsys)
    check_one_line_error(code, err, "not a readable checkpoint")
    for extra, fragment in [
        (["--prompt", ""], "the prompt is empty"),
        (["--prompt", "a", "--temperature", "0"], "temperature must be > 0"),
        (["--prompt", "a", "--temperature", "-2"], "temperature must be > 0"),
        (["--prompt", "a", "--top-k", "0"], "top_k must be >= 1"),
        (["--prompt", "a", "--length", "x"], "invalid int value"),
    ]:
        code, _, err = run_main(["sample", "--checkpoint", str(corrupt), *extra], capsys)
        check_one_line_error(code, err, fragment)


def test_cli_bad_input_in_a_real_process(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(annotated_transformer.__file__).parents[1])}
    command = [sys.executable, "-m", "annotated_transformer.generate", "sample"]
    command += ["--checkpoint", str(tmp_path / "none.pt"), "--prompt", "hi"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    check_one_line_error(done.returncode, done.stderr, "error: no checkpoint at")


@needs_mirror
def test_train_resume_evaluate_sample_end_to_end(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AT_DATA_MIRROR", str(MIRROR))
    common = ["--preset", "tiny", "--dataset", "enwik8_prefix", "--no-progress", "--device", "cpu"]
    # 12 steps in one go, and 6 + 6 resumed from the checkpoint: the same run.
    straight, _ = train("tiny", "enwik8_prefix", tmp_path / "a", steps=12, progress=False)
    code, out, err = run_main(["train", *common, "--steps", "6", "--out", str(tmp_path)], capsys)
    assert code == 0, err
    code, _, err = run_main(["train", *common, "--steps", "6", "--out", str(tmp_path)], capsys)
    check_one_line_error(code, err, "exists: pass --resume")
    argv = ["train", *common, "--steps", "12", "--resume", "--out", str(tmp_path)]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    metrics = json.loads(out)
    assert metrics["steps"] == 12 and metrics["val_bytes_scored"] == 50_000 - 1
    assert "not comparable" in metrics["note"]
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    history = pd.read_csv(tmp_path / "history.csv")
    assert list(history["step"]) == list(range(1, 13))
    torch.testing.assert_close(
        torch.tensor(history["loss"].to_numpy()), torch.tensor(straight["loss"].to_numpy())
    )
    # The tiny preset evaluates every 50 steps and at the end of each run: steps 6 and 12.
    assert list(history.dropna(subset=["val_bpb"])["step"]) == [6, 12]
    assert metrics["val_bits_per_byte"] < 8.0

    checkpoint = str(tmp_path / "checkpoint.pt")
    argv = ["evaluate", "--checkpoint", checkpoint, "--max-bytes", "3000", "--no-progress"]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["bytes_scored"] == 2999 and 0 < result["bits_per_byte"] < 8.0

    argv = ["sample", "--checkpoint", checkpoint, "--prompt", "[[", "--length", "40"]
    argv += ["--temperature", "0.8", "--top-k", "20", "--seed", "3"]
    first = run_main(argv, capsys)
    second = run_main(argv, capsys)
    assert first[0] == 0 and first == second
    assert first[1].startswith("[[")
