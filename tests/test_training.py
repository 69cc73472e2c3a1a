import copy
import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import annotated_transformer
from annotated_transformer.data.batching import Batch
from annotated_transformer.data.copy_task import copy_task_batches
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
)
from annotated_transformer.models.eval_mode import evaluating
from annotated_transformer.training.checkpoints import load_checkpoint
from annotated_transformer.training.loss import seq2seq_loss
from annotated_transformer.training.schedules import make_scheduler, rate
from annotated_transformer.training.trainer import (
    NonFiniteLossError,
    Trainer,
    make_optimizer,
)

PAD = 0
V = 11


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models (see conftest.py)


def ragged_batch(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n source/target pairs of different lengths, padded with PAD
    (so token counts differ)."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(2, V, (n, 9), generator=gen)
    tgt = torch.randint(2, V, (n, 8), generator=gen)
    tgt[:, 0] = 1
    for i in range(n):
        src[i, 3 + (i * 5) % 6 :] = PAD
        tgt[i, 2 + (i * 3) % 6 :] = PAD
    return src, tgt


def test_batch_shifts_the_target_and_counts_tokens() -> None:
    src, tgt = ragged_batch(4, 0)
    b = Batch(src, tgt, pad=PAD)
    assert torch.equal(b.tgt, tgt[:, :-1]) and torch.equal(b.tgt_y, tgt[:, 1:])
    assert b.ntokens == sum(int(t != PAD) for t in tgt[:, 1:].flatten())
    assert b.src_mask.shape == (4, 1, 9) and b.tgt_mask.shape == (4, 7, 7)
    for i in range(4):
        for q in range(7):
            if b.tgt[i, q] == PAD:
                continue
            for k in range(7):
                assert bool(b.tgt_mask[i, q, k]) == (
                    k <= q and bool(b.tgt[i, k] != PAD)
                )
    assert len(b) == 4 and Batch(src).tgt is None
    with pytest.raises(ValueError, match="tgt_len >= 2"):
        Batch(src, tgt[:, :1], pad=PAD)


def tiny_model(seed: int = 0, dropout: float = 0.0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return Transformer(
        TransformerConfig(V, V, N=1, d_model=16, d_ff=32, h=2, dropout=dropout)
    )


def test_one_step_equals_a_hand_written_pytorch_step() -> None:
    src, tgt = ragged_batch(6, 1)
    model = tiny_model()
    reference = copy.deepcopy(model)

    # SGD, so that the update is the gradient itself. (Adam would amplify float
    # noise: some gradients, e.g. of the key biases, are zero in exact
    # arithmetic, ±1e-9 in floats.)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    trainer = Trainer(model, opt, seq2seq_loss(PAD, 0.1))
    row = trainer.train_step([Batch(src, tgt, pad=PAD)])

    # The same step written out: the mean over the non-padding tokens.
    opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    b = Batch(src, tgt, pad=PAD)
    logits = reference.generator.proj(
        reference(b.src, b.tgt, b.src_mask, b.tgt_mask)
    )
    loss = F.cross_entropy(
        logits.reshape(-1, V),
        b.tgt_y.reshape(-1),
        ignore_index=PAD,
        label_smoothing=0.1,
    )
    loss.backward()
    opt.step()

    assert row["loss"] == pytest.approx(loss.item(), rel=1e-6)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7)


def test_make_optimizer_uses_the_papers_adam_settings() -> None:
    group = make_optimizer(tiny_model()).param_groups[0]
    assert isinstance(make_optimizer(tiny_model()), torch.optim.Adam)
    assert (group["lr"], group["betas"], group["eps"]) == (1.0, (0.9, 0.98), 1e-9)


def test_four_micro_batches_give_the_update_of_one_big_batch() -> None:
    src, tgt = ragged_batch(
        8, 2
    )  # micro-batches hold different numbers of target tokens
    big, small = tiny_model(), tiny_model()
    runs = {}
    quarters = [
        Batch(src[i : i + 2], tgt[i : i + 2], pad=PAD) for i in range(0, 8, 2)
    ]
    for name, model, batches, accumulate in [
        ("big", big, [Batch(src, tgt, pad=PAD)], 1),
        ("small", small, quarters, 4),
    ]:
        opt = torch.optim.SGD(
            model.parameters(), lr=1.0
        )  # update = gradient (see above)
        scheduler = make_scheduler(opt, "noam", 100.0 * (16 * 4) ** -0.5, 4, 3)
        loss = seq2seq_loss(PAD, 0.1)
        trainer = Trainer(
            model, opt, loss, scheduler, accumulate=accumulate, clip_norm=0.5
        )
        runs[name] = trainer.fit(
            lambda epoch, b=batches: b, max_steps=3, progress=False
        )
    assert len(runs["small"]) == len(runs["big"]) == 3
    # The scheduler stepped once per optimiser step, not once per micro-batch.
    assert runs["small"]["lr"].tolist() == pytest.approx(
        [rate(s, 16, 100.0, 4) for s in range(3)]
    )
    assert (runs["small"]["tokens"] == runs["big"]["tokens"]).all()
    torch.testing.assert_close(
        torch.tensor(runs["small"]["loss"].values),
        torch.tensor(runs["big"]["loss"].values),
    )
    for p, q in zip(big.parameters(), small.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


def test_bf16_autocast_keeps_fp32_weights_and_a_close_loss() -> None:
    src, tgt = ragged_batch(6, 3)
    losses = {}
    for precision in ("fp32", "bf16"):
        model = tiny_model()
        trainer = Trainer(
            model,
            make_optimizer(model, 1e-3),
            seq2seq_loss(PAD),
            precision=precision,
        )
        losses[precision] = trainer.train_step([Batch(src, tgt, pad=PAD)])["loss"]
        assert all(p.dtype == torch.float32 for p in model.parameters())
    assert math.isfinite(losses["bf16"])
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.03)
    trainer = Trainer(
        model, make_optimizer(model), seq2seq_loss(PAD), precision="fp8"
    )
    with pytest.raises(ValueError, match="precision='fp8': use one of fp32"):
        trainer.train_step([Batch(src, tgt, pad=PAD)])


def mean_loss(model: torch.nn.Module, data: list[Batch]) -> float:
    loss = seq2seq_loss(PAD, 0.0)
    with evaluating(model):
        assert not model.training and torch.is_inference_mode_enabled()
        sums = [loss(model, b) for b in data]
    return sum(s.item() for s, _ in sums) / sum(int(n) for _, n in sums)


def test_evaluating_runs_without_dropout_or_autograd_and_restores_train_mode() -> (
    None
):
    model = tiny_model(dropout=0.5)
    data = list(copy_task_batches(V, 4, 3, seed=0))
    before = [p.clone() for p in model.parameters()]
    first, second = mean_loss(model, data), mean_loss(model, data)
    assert first == second and model.training
    # Reference: the mean token loss written out in eval mode.
    model.eval()
    total = sum(
        F.cross_entropy(
            model.generator.proj(
                model(b.src, b.tgt, b.src_mask, b.tgt_mask)
            ).reshape(-1, V),
            b.tgt_y.reshape(-1), reduction="sum",
        ).item()
        for b in data
    )  # fmt: skip
    assert first == pytest.approx(total / sum(b.ntokens for b in data), rel=1e-5)
    assert all(
        torch.equal(p, q) for p, q in zip(before, model.parameters(), strict=True)
    )


def test_history_has_one_row_per_step_with_eval_loss(tmp_path: Path) -> None:
    model = tiny_model()
    opt = make_optimizer(model)
    trainer = Trainer(
        model, opt, seq2seq_loss(PAD), make_scheduler(opt, "noam", 0.01, 10, 5)
    )
    val = list(copy_task_batches(V, 4, 2, seed=99))
    history = trainer.fit(
        lambda epoch: copy_task_batches(V, 4, 3, seed=epoch),
        5,
        evaluate=lambda: {"eval_loss": mean_loss(model, val)},
        every=2,
        progress=False,
    )
    assert history["step"].tolist() == [1, 2, 3, 4, 5]
    assert history["epoch"].tolist() == [0, 0, 0, 1, 1]
    assert {"loss", "lr", "tokens", "tokens_per_s", "grad_norm", "seconds"} <= set(
        history.columns
    )
    assert history["eval_loss"].notna().tolist() == [
        False,
        True,
        False,
        True,
        False,
    ]
    assert history["seconds"].is_monotonic_increasing
    assert (history["tokens"] == 4 * 9).all() and (
        history["tokens_per_s"] > 0
    ).all()


def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_checkpoint(
    tmp_path: Path,
) -> None:
    base = seq2seq_loss(PAD)
    calls = []

    def poisoned(model: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, int]:
        calls.append(1)
        loss_sum, n = base(model, batch)
        return (loss_sum * math.nan if len(calls) == 4 else loss_sum), n

    model = tiny_model()
    path = tmp_path / "ckpt" / "last.pt"
    trainer = Trainer(
        model, make_optimizer(model, 1e-3), poisoned, checkpoint_path=path
    )
    with pytest.raises(
        NonFiniteLossError, match=r"loss is nan at step 4.*last\.pt \(step 3\)"
    ):
        trainer.fit(
            lambda e: copy_task_batches(V, 4, 5, seed=e),
            10,
            checkpoint_every=1,
            progress=False,
        )
    assert trainer.step == 3
    restored = tiny_model(seed=1)
    assert load_checkpoint(path, restored)["step"] == 3
    for p, q in zip(model.parameters(), restored.parameters(), strict=True):
        assert torch.equal(p, q)  # the weights were not touched by the bad step


def resume_setup(checkpoint: str | None) -> Trainer:
    """The run the resume test interrupts (also imported by the fresh process)."""
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(V, V, N=1, d_model=16, d_ff=32, h=2, dropout=0.2)
    )  # dropout draws RNG
    opt = make_optimizer(model)
    scheduler = make_scheduler(opt, "noam", (16 * 4) ** -0.5, 4, 0)
    loss = seq2seq_loss(PAD, 0.1)
    return Trainer(
        model,
        opt,
        loss,
        scheduler,
        accumulate=2,
        clip_norm=1.0,
        checkpoint_path=checkpoint,
    )


def resume_data(epoch: int) -> Iterator[Batch]:
    return copy_task_batches(
        V, 4, 5, seed=epoch
    )  # 5 micro-batches: steps straddle epochs


RESUME_SCRIPT = """
import json, sys
import torch
# as in the test process: same reduction order, same floats
torch.set_num_threads(1)
sys.path.insert(0, {tests!r})
from test_training import resume_data, resume_setup
trainer = resume_setup({path!r})
trainer.resume()
history = trainer.fit(resume_data, {total}, progress=False)
print(json.dumps(history["loss"].tolist()))
"""


def test_a_run_resumed_in_a_fresh_process_continues_exactly(tmp_path: Path) -> None:
    k, m = 3, 4
    uninterrupted = (
        resume_setup(None).fit(resume_data, k + m, progress=False)["loss"].tolist()
    )

    path = str(tmp_path / "last.pt")
    first = resume_setup(path)
    first.fit(resume_data, k, progress=False)  # saves at the end

    script = RESUME_SCRIPT.format(
        tests=str(Path(__file__).parent), path=path, total=k + m
    )
    src_dir = str(Path(annotated_transformer.__file__).parents[1])
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": src_dir, "PATH": "/usr/bin:/bin",
             "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    resumed = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(resumed) == k + m  # the history came back with the checkpoint
    assert resumed[:k] == pytest.approx(uninterrupted[:k], abs=0)
    assert resumed[k:] == pytest.approx(uninterrupted[k:], rel=1e-6, abs=1e-7)


def test_variable_copy_batches_follow_their_spec():
    """1..seq_len symbols from 3..vocab-1, then </s> (2), then
    padding; tgt = <s> (1) + src."""
    batches = list(copy_task_batches(9, 50, 3, 6, seed=4, variable=True))
    again = list(copy_task_batches(9, 50, 3, 6, seed=4, variable=True))
    lengths = set()
    for batch, same in zip(batches, again, strict=True):
        torch.testing.assert_close(
            batch.src, same.src
        )  # seeded: the same epoch again
        assert batch.src.shape == (50, 7)
        for row in batch.src.tolist():
            k = row.index(2)
            lengths.add(k)
            assert (
                1 <= k <= 6
                and all(3 <= t < 9 for t in row[:k])
                and set(row[k + 1 :]) <= {0}
            )
        # Batch shifts the target: the decoder reads
        # <s> + src[:-1] and predicts src.
        torch.testing.assert_close(
            batch.tgt[:, 0], torch.ones(50, dtype=torch.long)
        )
        torch.testing.assert_close(batch.tgt[:, 1:], batch.src[:, :-1])
        torch.testing.assert_close(batch.tgt_y, batch.src)
    assert lengths == set(range(1, 7))
    with pytest.raises(ValueError, match="vocab >= 4"):
        next(copy_task_batches(3, 2, 1, variable=True))
