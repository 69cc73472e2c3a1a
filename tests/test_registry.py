"""The language-model variants of tasks/variants.py, each built from the lm task's
config: one optimiser step, and decoding with its key/value cache (or memory)
against recomputation; a variant added by one registry entry alone is built,
trained and checkpointed by the task and the runner."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from annotated_transformer import runner
from annotated_transformer.evaluation.sampling import sample
from annotated_transformer.tasks.base import from_settings
from annotated_transformer.tasks.lm import LanguageModel, LanguageModelConfig
from annotated_transformer.tasks.variants import VARIANTS, Variant
from annotated_transformer.training.trainer import checkpoint_blocks

TINY = {"N": 2, "d_model": 16, "d_ff": 32, "h": 2, "max_len": 8, "batch_size": 3}


def random_bytes(n: int, seed: int = 0) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), generator=generator).byte()


def tiny_task(block: str, **changes) -> LanguageModel:
    """The lm task with ``block`` at a tiny size, on random bytes (no download)."""
    task = LanguageModel(
        from_settings(LanguageModelConfig, dict(block=block, **TINY, **changes))
    )
    task.splits = {"train": random_bytes(400), "val": random_bytes(90, seed=1)}
    return task


@pytest.mark.parametrize("block", list(VARIANTS))
def test_every_variant_trains_one_step_from_its_config(block):
    task = tiny_task(block)
    torch.manual_seed(0)
    model = task.build_model()
    layers = [m for m in model.modules() if isinstance(m, VARIANTS[block].block)]
    assert len(layers) == TINY["N"]  # the registry names the layer it stacks
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss, n = task.loss(model, task.batches(0)[0])
    assert math.isfinite(loss.item()) and n == 3 * 8
    (loss / n).backward()
    optimizer.step()
    for old, new in zip(before, model.parameters(), strict=True):
        assert not torch.equal(old, new)
    assert math.isfinite(task.evaluate(model)["val_bpb"])


@pytest.mark.parametrize("block", list(VARIANTS))
def test_every_variant_decodes_with_its_cache_as_without(block):
    """Logits of a sequence fed in pieces, through the key/value cache (or the
    memory, kept whole), equal those of one pass over the whole sequence."""
    torch.manual_seed(0)
    model = tiny_task(block).build_model().eval()
    x = random_bytes(16, seed=2).long().view(2, 8)  # (batch, len)
    pieces = (x[:, :3], x[:, 3:4], x[:, 4:])
    with torch.no_grad():
        if VARIANTS[block].memory:
            whole, _ = model(x)
            memories, parts = None, []
            for piece in pieces:
                logits, memories = model(piece, memories, mem_len=8)
                parts.append(logits)
        else:
            whole, cache = model(x), model.new_cache()
            parts = [model(piece, cache) for piece in pieces]
    torch.testing.assert_close(torch.cat(parts, 1), whole)
    if VARIANTS[block].samples:
        cached, recomputed = (
            sample(
                model,
                x[:, :3],
                12,  # past max_len: the context is cropped
                generator=torch.Generator().manual_seed(0),
                use_cache=use_cache,
            )
            for use_cache in (True, False)
        )
        assert torch.equal(cached, recomputed)


# ------------------------------------------------------- a variant in one entry


class ToyBlock(nn.Module):
    """A residual feed-forward layer: each position on its own (no attention)."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.linear = nn.Linear(d_model, d_model)

    def forward(self, h: Tensor) -> Tensor:
        return h + torch.relu(self.linear(h))


@dataclass(frozen=True)
class ToyConfig:
    """The toy's sizes: the lm task's settings of these names."""

    vocab: int = 256
    d_model: int = 16
    N: int = 2
    max_len: int = 64


class ToyLM(nn.Module):
    """Each next byte from the current byte alone: embed, N toy blocks, logits."""

    def __init__(self, config: ToyConfig) -> None:
        super().__init__()
        self.max_len = config.max_len
        self.embed = nn.Embedding(config.vocab, config.d_model)
        self.blocks = nn.Sequential(
            *(ToyBlock(config.d_model) for _ in range(config.N))
        )
        self.to_logits = nn.Linear(config.d_model, config.vocab)

    def forward(self, x: Tensor) -> Tensor:
        return self.to_logits(self.blocks(self.embed(x)))


@pytest.fixture
def toy_variant(monkeypatch):
    """block=toy, registered for one test (no sampling: the toy has no cache)."""
    with monkeypatch.context() as patch:
        patch.setitem(
            VARIANTS, "toy", Variant(ToyConfig, ToyLM, ToyBlock, samples=False)
        )
        yield
    assert "toy" not in VARIANTS


def test_a_new_variant_needs_one_registry_entry(toy_variant):
    config = runner.new_config("lm", "tiny", ["block=toy", "N=3", "d_model=8"])
    task = LanguageModel(config)
    task.splits = {"train": random_bytes(400), "val": random_bytes(90, seed=1)}
    model = task.build_model()
    assert isinstance(model, ToyLM) and len(model.blocks) == 3
    loss, _ = task.loss(model, task.batches(0)[0])
    assert math.isfinite(loss.item())
    assert ToyBlock in runner.stack_layers()
    assert checkpoint_blocks(model, runner.stack_layers()) == 3
    with pytest.raises(ValueError, match="predict does not sample from block=toy"):
        task.predict(model, ["a"])
    with pytest.raises(ValueError, match="block=toy has no kv_heads"):
        from_settings(LanguageModelConfig, dict(block="toy", kv_heads=1))


def test_the_runner_trains_a_new_variant_end_to_end(
    toy_variant, chars_mirror: Path, tmp_path: Path, one_thread
):
    settings = ["dataset=enwik8_prefix", "block=toy", "N=2", "d_model=8"]
    settings += ["steps=2", "eval_every=2", "eval_bytes=256"]
    settings += ["activation_checkpointing=true"]
    result = runner.train(
        "lm",
        tmp_path / "toy",
        preset="tiny",
        settings=settings,
        data_dir=chars_mirror,
        device="cpu",
        progress=False,
        echo=False,
    )
    assert result is not None and isinstance(result.model, ToyLM)
    assert math.isfinite(result.metrics["validation"]["bits_per_byte"])
    _, loaded = runner.load_model(tmp_path / "toy" / "final.pt")
    assert isinstance(loaded, ToyLM)
