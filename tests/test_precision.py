"""Precision is decided in one place: ``training.precision`` names the precisions,
resolves ``auto`` and opens the one autocast; the runner applies it around every
forward pass of a run, training, validation and test alike, and no task or model
opens an autocast of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from annotated_transformer import runner
from annotated_transformer.training.precision import (
    PRECISIONS,
    bf16_is_fast,
    precision_context,
    resolve_precision,
)

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


def test_autocast_is_opened_in_one_module_only():
    files = [*ROOT.glob("src/annotated_transformer/**/*.py")]
    assert len(files) > 30
    found = {
        p.relative_to(ROOT).as_posix()
        for p in files
        if re.search("autocast", p.read_text(encoding="utf-8"), re.IGNORECASE)
    }
    assert found == {"src/annotated_transformer/training/precision.py"}


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_named_precision_is_kept(precision):
    assert resolve_precision(precision, CPU) == precision


def test_auto_is_bf16_exactly_where_bf16_is_fast():
    expected = "bf16" if bf16_is_fast(CPU) else "fp32"
    assert resolve_precision("auto", CPU) == expected


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: resolve_precision("fp8", CPU),
            "precision='fp8': use one of auto, fp32, bf16, fp16",
        ),
        (
            lambda: precision_context(CPU, "fp8"),
            "precision='fp8': use one of fp32, bf16, fp16",
        ),
        (  # auto is a request that the runner resolves first
            lambda: precision_context(CPU, "auto"),
            "precision='auto': use one of fp32, bf16, fp16",
        ),
    ],
)
def test_a_bad_precision_is_one_line(call, message):
    with pytest.raises(ValueError) as error:
        call()
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("precision", "dtype"), [("fp32", torch.float32), ("bf16", torch.bfloat16)]
)
def test_the_runner_evaluates_and_tests_in_the_runs_precision(
    precision, dtype, tmp_path, chars_mirror, one_thread
):
    """A linear layer's outputs, in training steps and in evaluation (inference
    mode: validation and test), are in the run's precision; the same task called
    outside the runner evaluates in the weights' fp32."""
    settings = [
        "steps=2",
        "eval_every=2",
        "eval_bytes=256",
        f"precision={precision}",
    ]
    run = runner.Run(
        "lm",
        tmp_path,
        preset="tiny",
        config=runner.new_config("lm", "tiny", settings),
        data_dir=chars_mirror,
        device="cpu",
        progress=False,
        echo=False,
    )
    linear = next(m for m in run.model.modules() if isinstance(m, nn.Linear))
    seen: set[tuple[bool, torch.dtype]] = set()
    linear.register_forward_hook(
        lambda m, i, out: seen.add((torch.is_inference_mode_enabled(), out.dtype))
    )
    assert run.train()
    run.finish()
    assert seen == {(False, dtype), (True, dtype)}  # trained, then evaluated
    seen.clear()
    run.task.evaluate(run.model)
    assert seen == {(True, torch.float32)}
