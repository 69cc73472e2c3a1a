"""Transformer-XL in the language-model task: consecutive segments in parallel
streams, the memory carried from batch to batch without gradient and saved for
resuming, bits per byte with a memory against whole-text and segment-by-segment
references, and the refused settings."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from annotated_transformer import runner
from annotated_transformer.evaluation.segments import (
    Segments,
    segment_bits_per_byte,
    stream_segments,
)
from annotated_transformer.models.transformer_xl import TransformerXLLM, XLConfig
from annotated_transformer.tasks import PRESETS
from annotated_transformer.tasks.base import from_settings, with_settings
from annotated_transformer.tasks.lm import LanguageModel, LanguageModelConfig
from annotated_transformer.training.checkpoints import read_checkpoint


def random_text(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(
        0, 256, (n,), generator=torch.Generator().manual_seed(seed)
    ).byte()


def xl_task(**changes) -> LanguageModel:
    """The tiny XL task on random bytes (no download): 2 layers,
    d_model 16, segments of 8."""
    small = {
        "N": 2,
        "d_model": 16,
        "d_ff": 32,
        "h": 2,
        "max_len": 8,
        "batch_size": 3,
    }
    config = with_settings(
        PRESETS["lm"]["tiny"], {"block": "xl", **small, **changes}
    )
    task = LanguageModel(config)
    task.splits = {"train": random_text(400), "val": random_text(90, seed=9)}
    return task


def summed_nats(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(
        logits.flatten(0, 1).double(), targets.flatten(), reduction="sum"
    )


# ------------------------------------------------------------------------- the data


def test_streams_continue_from_one_batch_to_the_next():
    data = random_text(103)
    batches = stream_segments(data, batch_size=3, seg_len=4, offset=2)
    per_stream = (103 - 2) // 3  # 33 bytes a stream: (33 - 1) // 4 = 8 segments
    assert len(batches) == 8 and [b.fresh for b in batches] == [True] + [False] * 7
    for row in range(3):
        stream = data[2 + row * per_stream : 2 + (row + 1) * per_stream].long()
        x = torch.cat(
            [b.x[row] for b in batches]
        )  # the row's segments, one after another
        y = torch.cat([b.y[row] for b in batches])
        assert torch.equal(x, stream[:32]) and torch.equal(y, stream[1:33])
    with pytest.raises(ValueError, match="hold no segment"):
        stream_segments(data[:10], batch_size=3, seg_len=4)


def test_xl_batches_are_the_same_for_an_epoch_and_shift_between_epochs():
    task = xl_task()
    first, again, other = task.batches(0), task.batches(0), task.batches(1)
    assert all(torch.equal(a.x, b.x) for a, b in zip(first, again, strict=True))
    data = task.splits["train"].long()
    starts = [
        int((data.unfold(0, 8, 1) == b[0].x[0]).all(1).nonzero()[0])
        for b in (first, other)
    ]
    assert (
        all(0 <= s < 8 for s in starts) and starts[0] != starts[1]
    )  # the seeded offsets


# ------------------------------------------------------------------ loss and memory


def test_second_batch_loss_equals_the_whole_text_read_at_once():
    """With mem_len ≥ the segment, batch 2 after batch 1 sees exactly what
    one causal pass over both segments sees: its summed loss is that pass's
    loss on the second half."""
    task = xl_task(mem_len=8)
    model = task.build_model().eval()
    first, second = task.batches(0)[:2]
    with torch.no_grad():
        task.loss(model, first)
        loss, n = task.loss(model, second)
        logits, _ = model(torch.cat([first.x, second.x], 1))
    assert n == 3 * 8
    torch.testing.assert_close(loss, summed_nats(logits[:, 8:], second.y).float())


def test_a_fresh_batch_starts_without_memory():
    task = xl_task()
    model = task.build_model().eval()
    batches = task.batches(0)
    with torch.no_grad():
        task.loss(model, batches[0])
        task.loss(model, batches[1])
        again = Segments(batches[1].x, batches[1].y, fresh=True)
        loss, _ = task.loss(
            model, again
        )  # as if an epoch began: the memory is dropped
        alone = summed_nats(model(batches[1].x)[0], batches[1].y)
    torch.testing.assert_close(
        loss, alone.float()
    )  # float32 sums, float32 tolerance


def test_the_memory_carries_no_gradient():
    task = xl_task()
    model = task.build_model().train()
    first, second = task.batches(0)[:2]
    task.loss(model, first)
    memories = task.stream.tensors
    assert all(m.grad_fn is None and not m.requires_grad for m in memories)
    loss, _ = task.loss(model, second)
    loss.backward()
    # Only this batch's graph: the gradient equals that of a run
    # whose memory is a constant.
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    constant = [m.clone() for m in memories]
    logits, _ = model(second.x, constant)
    summed_nats(logits, second.y).float().backward()
    for got, want in zip(grads, [p.grad for p in model.parameters()], strict=True):
        torch.testing.assert_close(got, want)


# -------------------------------------------------------------------- bits per byte


def tiny_xl(mem_len: int = 4) -> TransformerXLLM:
    torch.manual_seed(0)
    return TransformerXLLM(
        XLConfig(256, d_model=16, h=2, N=2, d_ff=32, mem_len=mem_len)
    ).eval()


def test_bits_per_byte_with_all_the_memory_equals_one_pass_over_the_text():
    data, model = random_text(23), tiny_xl()
    with torch.no_grad():
        logits, _ = model(data[:-1].long()[None])
    expected = summed_nats(logits, data[1:].long()[None]).item() / 22 / math.log(2)
    bpb, scored = segment_bits_per_byte(model, data, seg_len=5, mem_len=100)
    assert scored == 22 and bpb == pytest.approx(expected, rel=1e-5)


def test_bits_per_byte_without_memory_scores_each_segment_alone():
    data, model = random_text(23), tiny_xl()
    nats = 0.0
    with torch.no_grad():
        for start in range(0, 22, 5):
            chunk = data[start : start + 6].long()[None]
            nats += summed_nats(model(chunk[:, :-1])[0], chunk[:, 1:]).item()
    bpb, scored = segment_bits_per_byte(model, data, seg_len=5, mem_len=0)
    assert scored == 22 and bpb == pytest.approx(nats / 22 / math.log(2), rel=1e-5)


def test_task_reports_the_memory_it_scored_with():
    task = xl_task()
    model = task.build_model()
    result = task.bits_per_byte(model, "val", mem_len=16)
    assert (result["segment"], result["mem_len"], result["bytes_scored"]) == (
        8,
        16,
        89,
    )
    assert (
        task.bits_per_byte(model, "val")["mem_len"] == 8
    )  # default: the training memory
    assert set(task.evaluate(model)) == {"val_loss", "val_bpb"}


# ------------------------------------------------------------------------- resuming


def test_a_resumed_xl_run_continues_with_its_memory(
    chars_mirror, tmp_path, one_thread
):
    """Stopped at step 3 and resumed, the run's losses equal an uninterrupted run's:
    last.pt holds the memory the third batch left for the fourth."""
    settings = ["dataset=enwik8_prefix", "block=xl", "N=1", "d_model=16", "d_ff=32"]
    settings += [
        "max_len=16",
        "batch_size=4",
        "steps=50",
        "eval_every=3",
        "eval_bytes=256",
    ]
    quiet = {
        "data_dir": chars_mirror,
        "device": "cpu",
        "progress": False,
        "echo": False,
    }

    def run(out: Path, max_steps: int, resume: bool = False) -> None:
        given = (
            {"resume": True} if resume else {"preset": "tiny", "settings": settings}
        )
        assert (
            runner.train("lm", out, max_steps=max_steps, **given, **quiet) is None
        )

    run(tmp_path / "whole", 6)
    run(tmp_path / "cut", 3)
    saved = read_checkpoint(tmp_path / "cut" / "last.pt")["extra"]["stream"][
        "memories"
    ]
    assert [m.shape for m in saved] == [(4, 16, 16)]
    run(tmp_path / "cut", 6, resume=True)
    got, want = (
        pd.read_csv(tmp_path / d / "history.csv") for d in ("cut", "whole")
    )
    for column in ["step", "epoch", "loss", "grad_norm", "val_bpb"]:
        pd.testing.assert_series_equal(got[column], want[column], check_exact=True)


# ------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mem_len": 64}, "block=2017 has no mem_len: use block=xl"),
        ({"block": "xl", "mem_len": -1}, r"mem_len=-1 must be >= 0"),
        (
            {"block": "xl", "kv_heads": 1},
            "block=xl has no kv_heads: use block=modern",
        ),
        ({"block": "xl", "activation_checkpointing": True}, "supports neither"),
        ({"block": "gpt"}, "use one of 2017, modern, gpt2, xl"),
        ({"block": "xl", "tokens": "bpe", "bpe_merges": 8}, "block=xl reads bytes"),
        (
            {
                "block": "xl",
                "attention": "fixed",
                "sparse_stride": 4,
                "sparse_summary": 1,
            },
            "needs",
        ),
    ],
)
def test_bad_xl_settings_are_refused_in_one_line(changes, message):
    with pytest.raises(ValueError, match=message):
        from_settings(LanguageModelConfig, changes)


def test_xl_only_options_are_refused_elsewhere():
    xl, vanilla = xl_task(), xl_task(block="2017")
    with pytest.raises(ValueError, match="only a block=xl model has a memory"):
        vanilla.bits_per_byte(vanilla.build_model(), "val", mem_len=8)
    with pytest.raises(ValueError, match="block=xl reads segments in order"):
        xl.bits_per_byte(xl.build_model(), "val", stride=4)
    with pytest.raises(ValueError, match="predict does not sample"):
        xl.predict(xl.build_model(), ["a"])
