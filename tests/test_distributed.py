"""Data-parallel training (2 CPU processes, Gloo) equals one process on the same
global batches: the loss function and the sharding by hand (plain SGD), and the
runner under torchrun."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.multiprocessing as mp

from annotated_transformer import runner
from annotated_transformer.data.batching import bucket_batches, shard_batches
from annotated_transformer.data.vocab import SPECIALS, Vocab
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
)
from annotated_transformer.tasks.translation import make_batch, pair_lengths
from annotated_transformer.training import distributed
from annotated_transformer.training.checkpoints import read_checkpoint
from annotated_transformer.training.loss import seq2seq_loss
from annotated_transformer.training.trainer import Trainer

WORLD = 2
STEPS = 3
VOCAB = Vocab([*SPECIALS, *"abcdefghijklmnop"])


def _pairs() -> list[tuple[list[int], list[int]]]:
    """Sentence pairs of very different lengths, so the
    ranks' token counts differ."""
    gen = torch.Generator().manual_seed(0)
    pairs = []
    for _ in range(64):
        n, m = torch.randint(1, 14, (2,), generator=gen).tolist()
        src = torch.randint(4, len(VOCAB), (n,), generator=gen).tolist()
        tgt = torch.randint(4, len(VOCAB), (m,), generator=gen).tolist()
        pairs.append((src, tgt))
    return pairs


def _batches(rank: int, world: int, accumulate: int):
    """``epoch -> batches`` of this rank: every rank computes the same global list
    of an epoch and takes its share of whole steps (``shard_batches``)."""
    pairs = _pairs()

    def epoch_batches(epoch: int):
        batches = bucket_batches(pair_lengths(pairs), 80, seed=1, epoch=epoch)
        for index in shard_batches(batches, rank, world, accumulate):
            yield make_batch(pairs, index, VOCAB)

    return epoch_batches


def _train(rank: int, world: int, accumulate: int, global_tokens: bool):
    """STEPS optimiser steps of a tiny model; returns (weights, per-step losses)."""
    torch.manual_seed(0)
    model = Transformer(
        TransformerConfig(
            len(VOCAB), len(VOCAB), N=1, d_model=16, d_ff=32, h=2, dropout=0.0
        )
    )
    loss_fn = seq2seq_loss(VOCAB.stoi["<pad>"], smoothing=0.1)
    if global_tokens:
        loss_fn = distributed.global_token_loss(loss_fn)
    # Plain SGD: Adam's per-parameter normalisation would hide a
    # wrongly scaled gradient.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    wrapped = distributed.wrap(model, torch.device("cpu"))
    trainer = Trainer(wrapped, optimizer, loss_fn, accumulate=accumulate)
    history = trainer.fit(_batches(rank, world, accumulate), STEPS, progress=False)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, list(
        history["loss"]
    )


def _worker(rank: int, port: int, out: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(WORLD),
    )
    torch.set_num_threads(1)
    distributed.init_distributed(torch.device("cpu"))
    try:
        results = {
            mode: _train(rank, WORLD, 1, mode == "global")
            for mode in ("global", "naive")
        }
        if distributed.is_main():
            torch.save(results, Path(out) / "ddp.pt")
    finally:
        distributed.cleanup()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(_free_port(), str(out)), nprocs=WORLD, join=True)
    return torch.load(out / "ddp.pt")


def test_two_ranks_equal_one_process_on_the_same_global_batches(ddp_results):
    # one process, accumulating the two batches the two ranks see at each step
    weights, losses = _train(0, 1, accumulate=WORLD, global_tokens=False)
    ddp_weights, ddp_losses = ddp_results["global"]
    for name, value in weights.items():
        torch.testing.assert_close(ddp_weights[name], value, atol=1e-6, rtol=1e-5)
    # the logged loss is the global loss per token, not rank 0's share
    assert ddp_losses == pytest.approx(losses, rel=1e-6)


def test_the_test_can_fail_averaging_per_rank_losses_differs(ddp_results):
    """Plain DDP (each rank normalised by its own tokens) is a different update."""
    weights, _ = _train(0, 1, accumulate=WORLD, global_tokens=False)
    naive, _ = ddp_results["naive"]
    largest = max((naive[k] - v).abs().max().item() for k, v in weights.items())
    assert largest > 1e-4


def test_without_torchrun_everything_is_single_process():
    assert (
        distributed.rank(),
        distributed.world_size(),
        distributed.is_main(),
    ) == (0, 1, True)
    assert distributed.init_distributed(torch.device("cpu")) == torch.device("cpu")
    assert not distributed.is_distributed()
    model = torch.nn.Linear(2, 2)
    assert distributed.wrap(model, torch.device("cpu")) is model
    loss_fn = seq2seq_loss(0)
    assert distributed.global_token_loss(loss_fn) is loss_fn


def test_bad_device_is_a_clear_error():
    with pytest.raises(
        ValueError, match="unknown device 'tpu'; use one of auto, cpu, cuda, mps"
    ):
        runner.pick_device("tpu")
    assert runner.pick_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            runner.pick_device("cuda:0")


# -------------------------------------------------------- the runner under torchrun

# dropout 0: each rank draws its own dropout masks, one process draws others
SETTINGS = ["train_limit=600", "eval_limit=5", "epochs=1", "warmup=2", "dropout=0"]
SETTINGS += ["keep_last=0", "final=last"]


def test_torchrun_two_processes_equal_one_process_accumulating_two_batches(
    multi30k_mirror, tmp_path, one_thread, torchrun
):
    mirror = {"AT_DATA_MIRROR": str(multi30k_mirror)}
    torchrun("translate", tmp_path / "ddp", SETTINGS, nproc=WORLD, env=mirror)

    one = runner.train(
        "translate",
        tmp_path / "one",
        preset="tiny",
        settings=[*SETTINGS, f"accumulate={WORLD}"],
        data_dir=multi30k_mirror,
        device="cpu",
        progress=False,
        echo=False,
    )
    ddp = pd.read_csv(tmp_path / "ddp" / "history.csv")
    assert len(ddp) == len(one.history) > 2
    assert list(ddp["tokens"]) == list(
        one.history["tokens"]
    )  # the global count of each step
    assert list(ddp["lr"]) == list(one.history["lr"])
    for column in ("loss", "grad_norm", "val_loss"):
        assert ddp[column].tolist() == pytest.approx(
            one.history[column].tolist(), rel=1e-5, nan_ok=True
        )
    weights = read_checkpoint(tmp_path / "ddp" / "final.pt")["model"]
    for name, value in one.model.state_dict().items():
        torch.testing.assert_close(weights[name], value, atol=1e-5, rtol=1e-4)
    metrics = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    assert metrics["config"]["accumulate"] == 1 and metrics["steps"] == len(ddp)
