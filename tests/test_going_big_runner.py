"""Going big through the runner (issue 12): gradient accumulation, fp16 with
loss scaling, and FSDP on two CPU processes (Gloo) equal to one process on
the same global batch."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from annotated_transformer import runner
from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM
from annotated_transformer.training.checkpoints import read_checkpoint
from annotated_transformer.training.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_lm(dropout: float = 0.0) -> DecoderLM:
    torch.manual_seed(0)
    return DecoderLM(
        DecoderConfig(
            vocab=30, d_model=16, h=2, N=2, max_len=12, d_ff=32, dropout=dropout
        )
    )


def lm_loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]):
    x, y = batch
    logits = model(x).float().flatten(0, 1)
    return F.cross_entropy(logits, y.flatten(), reduction="sum"), y.numel()


def windows(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    data = torch.randint(
        0, 30, (n, 13), generator=torch.Generator().manual_seed(seed)
    )
    return data[:, :-1], data[:, 1:]


def sgd_with_warmup(model: torch.nn.Module):
    """Plain SGD: Adam's first step is lr · sign(gradient), which would turn
    rounding noise in a gradient that is zero in exact arithmetic (the key
    projection's bias) into ±lr."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: (step + 1) / 10
    )
    return optimizer, scheduler


def test_k_micro_batches_make_the_update_of_one_batch_k_times_larger():
    k = 4
    micro = [windows(3, seed) for seed in range(k)]
    whole = (torch.cat([x for x, _ in micro]), torch.cat([y for _, y in micro]))

    big = tiny_lm()
    optimizer, scheduler = sgd_with_warmup(big)
    Trainer(big, optimizer, lm_loss, scheduler).train_step([whole])

    small = tiny_lm()
    optimizer, scheduler = sgd_with_warmup(small)
    trainer = Trainer(small, optimizer, lm_loss, scheduler, accumulate=k)
    row = trainer.train_step(micro)

    assert row["tokens"] == 4 * 3 * 12 and trainer.step == 1
    assert (
        scheduler.last_epoch == 1
    )  # one scheduler step per optimiser step, not per micro-batch
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-2 * 2 / 10)
    for a, b in zip(big.parameters(), small.parameters(), strict=True):
        torch.testing.assert_close(b, a)
    # The test can fail: averaging the micro-batches' mean losses is a different
    # update when their token counts differ.
    unequal = [windows(1, 0), windows(5, 1)]
    whole = (torch.cat([x for x, _ in unequal]), torch.cat([y for _, y in unequal]))
    one, two = tiny_lm(), tiny_lm()
    sgd = torch.optim.SGD(one.parameters(), lr=1.0)
    Trainer(one, sgd, lm_loss).train_step([whole])
    for x, y in unequal:  # mean of the two micro-batches' means, by hand
        (F.cross_entropy(two(x).flatten(0, 1), y.flatten()) / 2).backward()
    with torch.no_grad():
        for p in two.parameters():
            p -= p.grad
    pairs = zip(one.parameters(), two.parameters(), strict=True)
    largest = max((a - b).abs().max().item() for a, b in pairs)
    assert largest > 1e-4


def test_a_gradient_that_underflows_in_fp16_survives_loss_scaling():
    """d(a·b)/da = b: with a, b = 1e-4 in fp16, b·(upstream
    1e-4) = 1e-8 < 2⁻²⁴ ≈ 6e-8."""
    assert (
        torch.finfo(torch.float16).tiny == 2.0**-14
    )  # smallest normal; subnormals to 2⁻²⁴
    a = torch.full((3,), 1e-4, dtype=torch.float16, requires_grad=True)
    b = torch.full((3,), 1e-4, dtype=torch.float16)
    (
        (a * b).float().sum() * 1e-4
    ).backward()  # an fp32 loss, as autocast's losses are
    assert a.grad.abs().max().item() == 0  # flushed to zero: the update is lost

    a.grad = None
    scale = 2.0**16
    (
        (a * b).float().sum() * 1e-4 * scale
    ).backward()  # the GradScaler's trick: scale the loss
    unscaled = a.grad.float() / scale  # divide in fp32
    torch.testing.assert_close(unscaled, torch.full((3,), 1e-8), rtol=2e-3, atol=0)


def test_fp16_trainer_uses_a_grad_scaler_and_skips_a_step_that_overflows():
    model = tiny_lm()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def huge_loss(
        model, batch
    ):  # finite in fp32, its gradient overflows fp16 (max 65504)
        loss, n = lm_loss(model, batch)
        return loss * 1e30, n

    trainer = Trainer(model, optimizer, huge_loss, precision="fp16")
    assert trainer.scaler.is_enabled() and trainer.scaler.get_scale() == 2.0**16
    row = trainer.train_step(
        [windows(2, 0)]
    )  # no NonFiniteLossError: fp16 skips the step
    assert not math.isfinite(row["grad_norm"]) and row["loss_scale"] == 2.0**16
    assert trainer.scaler.get_scale() == 2.0**15
    for a, b in zip(before, model.parameters(), strict=True):
        assert torch.equal(a, b)
    fp32 = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), lm_loss)
    assert not fp32.scaler.is_enabled()


def test_fp16_runs_learn_and_resume_with_their_loss_scale(tmp_path):
    settings = ["precision=fp16", "steps=6", "eval_every=3", "warmup=2"]
    whole = runner.train(
        "lm",
        tmp_path / "a",
        preset="tiny",
        settings=settings,
        progress=False,
        echo=False,
    )
    history = whole.history
    assert (history["loss_scale"] == 2.0**16).all() and history[
        "grad_norm"
    ].notna().all()
    assert history["loss"].iloc[-1] < history["loss"].iloc[0]
    kwargs = dict(preset="tiny", settings=settings, progress=False, echo=False)
    assert runner.train("lm", tmp_path / "b", max_steps=3, **kwargs) is None
    scaler = read_checkpoint(tmp_path / "b" / "last.pt")["extra"]["scaler"]
    assert scaler["scale"] == 2.0**16 and scaler["_growth_tracker"] == 3
    resumed = runner.train(
        "lm", tmp_path / "b", resume=True, progress=False, echo=False
    )
    assert resumed.history["loss"].tolist() == pytest.approx(
        history["loss"].tolist(), rel=1e-6
    )


def test_bad_combinations_are_refused_at_set_time():
    with pytest.raises(
        ValueError, match="precision=fp16 with sharding=fsdp is not supported"
    ):
        runner.new_config("lm", "tiny", ["precision=fp16", "sharding=fsdp"])
    with pytest.raises(ValueError, match="sharding='zero3': use one of none, fsdp"):
        runner.new_config("lm", "tiny", ["sharding=zero3"])
    with pytest.raises(
        ValueError, match="precision='fp8': use one of auto, fp32, bf16, fp16"
    ):
        runner.new_config("lm", "tiny", ["precision=fp8"])


# dropout 0: each rank draws its own dropout masks, one process draws others
FSDP_SETTINGS = ["steps=4", "eval_every=2", "warmup=2", "dropout=0", "batch_size=8"]


def test_torchrun_fsdp_on_two_processes_equals_one_process_accumulating_two_batches(
    tmp_path, torchrun
):
    torchrun("lm", tmp_path / "fsdp", [*FSDP_SETTINGS, "sharding=fsdp"])

    one = runner.train(
        "lm",
        tmp_path / "one",
        preset="tiny",
        settings=[*FSDP_SETTINGS, "accumulate=2"],
        device="cpu",
        progress=False,
        echo=False,
    )
    fsdp = pd.read_csv(tmp_path / "fsdp" / "history.csv")
    assert len(fsdp) == len(one.history) == 4
    assert list(fsdp["tokens"]) == list(
        one.history["tokens"]
    )  # the global count of each step
    for column in ("loss", "grad_norm", "val_loss"):
        assert fsdp[column].tolist() == pytest.approx(
            one.history[column].tolist(), rel=1e-5, nan_ok=True
        )
    # The checkpoint holds full tensors (gathered from both ranks) in the unsharded
    # format. Left out: the key projections' biases, whose gradient is zero in exact
    # arithmetic (a softmax does not change when a constant is added to every score
    # of a row): Adam turns the rounding noise there into steps of about the
    # learning rate, different in each run.
    last = read_checkpoint(tmp_path / "fsdp" / "last.pt")
    for name, value in one.model.state_dict().items():
        if not name.endswith("attention.linears.1.bias"):
            torch.testing.assert_close(
                last["model"][name], value, atol=1e-5, rtol=1e-4
            )
    moments = read_checkpoint(tmp_path / "one" / "last.pt")["optimizer"]["state"]
    assert last["optimizer"]["state"].keys() == moments.keys()
    for i, state in moments.items():
        got = last["optimizer"]["state"][i]["exp_avg"]
        torch.testing.assert_close(got, state["exp_avg"], atol=1e-6, rtol=1e-4)
