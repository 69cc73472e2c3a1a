import builtins
import errno
import random
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pytest
import torch
from torch import nn

from annotated_transformer.files import DiskFullError
from annotated_transformer.training import checkpoints as ckpt
from annotated_transformer.training.checkpoints import (
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from annotated_transformer.training.schedules import make_scheduler


def trained_objects(
    seed: int = 0,
) -> tuple[nn.Module, torch.optim.Optimizer, object]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = make_scheduler(opt, "noam", (8 * 3) ** -0.5, warmup=3, total=3)
    for _ in range(3):
        model(torch.randn(5, 4)).pow(2).sum().backward()
        opt.step()
        sched.step()
    return model, opt, sched


def draws() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3)


def test_round_trip_restores_weights_optimiser_scheduler_and_generators(
    tmp_path: Path,
) -> None:
    model, opt, sched = trained_objects(0)
    path = save_checkpoint(
        tmp_path / "run" / "last.pt", model, opt, sched,
        step=3, config={"d_model": 8, "name": "toy", "sizes": (4, 8, 3)},
        extra={"epoch": 1},
    )  # fmt: skip
    expected = draws()
    assert [p.name for p in path.parent.iterdir()] == [
        "last.pt"
    ]  # no temporary left behind

    other, opt2, sched2 = trained_objects(
        1
    )  # different weights, states and generator positions
    state = load_checkpoint(path, other, opt2, sched2)
    assert state["step"] == 3 and state["extra"] == {"epoch": 1}
    assert state["config"]["sizes"] == (4, 8, 3)
    for a, b in zip(
        model.state_dict().values(), other.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert sched2.state_dict() == sched.state_dict()
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    for s1, s2 in zip(opt.state.values(), opt2.state.values(), strict=True):
        torch.testing.assert_close(
            s1["exp_avg_sq"], s2["exp_avg_sq"], rtol=0, atol=0
        )
    got = draws()
    assert got[:2] == expected[:2]
    torch.testing.assert_close(got[2], expected[2], rtol=0, atol=0)


def test_a_failed_write_leaves_the_previous_checkpoint_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, opt, sched = trained_objects()
    path = save_checkpoint(tmp_path / "last.pt", model, opt, sched, step=1)

    def crash_half_way(obj: object, f: BinaryIO) -> None:
        f.write(b"PK\x03\x04 half a zip file")
        raise KeyboardInterrupt  # e.g. the run is killed while writing

    monkeypatch.setattr(ckpt.torch, "save", crash_half_way)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, model, opt, sched, step=2)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]
    assert load_checkpoint(path, model)["step"] == 1


def test_truncated_or_garbage_files_give_a_clear_error(tmp_path: Path) -> None:
    model, opt, sched = trained_objects()
    path = save_checkpoint(tmp_path / "last.pt", model, opt, sched)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"last\.pt is not a readable"):
        load_checkpoint(path, model)
    path.write_bytes(bytes(range(256)) * 10)
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_checkpoint(path, model)
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.pt", model)


class Payload:
    def __reduce__(self) -> tuple:
        return (exec, ("import builtins; builtins.checkpoint_payload_ran = True",))


def test_loading_never_runs_code_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"format": ckpt.FORMAT, "model": Payload()}, path)
    with pytest.raises(CheckpointError, match=r"evil\.pt"):
        load_checkpoint(path)
    assert not hasattr(builtins, "checkpoint_payload_ran")


def test_other_torch_files_and_other_models_are_refused(tmp_path: Path) -> None:
    torch.save({"weights": torch.zeros(2)}, tmp_path / "plain.pt")
    with pytest.raises(
        CheckpointError, match="not a checkpoint written by save_checkpoint"
    ):
        load_checkpoint(tmp_path / "plain.pt")
    model, _, _ = trained_objects()
    path = save_checkpoint(tmp_path / "a.pt", model, config={"hidden": 8})
    with pytest.raises(CheckpointError, match=r"different model.*'hidden': 8"):
        load_checkpoint(path, nn.Linear(4, 3))


def test_config_must_be_plain_data(tmp_path: Path) -> None:
    model, _, _ = trained_objects()
    with pytest.raises(ValueError, match=r"config\['data'\] is a PosixPath"):
        save_checkpoint(tmp_path / "a.pt", model, config={"data": Path("/tmp")})


def test_wrapped_models_are_saved_unwrapped(tmp_path: Path) -> None:
    class Wrapper(nn.Module):  # stands in for DistributedDataParallel's .module
        def __init__(self, module: nn.Module) -> None:
            super().__init__()
            self.module = module

    model, _, _ = trained_objects()
    path = save_checkpoint(tmp_path / "a.pt", Wrapper(model))
    bare = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    load_checkpoint(path, bare)
    torch.testing.assert_close(bare[0].weight, model[0].weight)


# ------------------------------------------------------- checksums, full disks


def flip_inside(data: bytes, pattern: bytes) -> bytes:
    """``data`` with the 8 bytes after the start of ``pattern`` inverted."""
    at = data.index(pattern) + len(pattern)
    return data[:at] + bytes(b ^ 0xFF for b in data[at : at + 8]) + data[at + 8 :]


def test_a_corrupt_file_that_still_unpickles_is_named_corrupt(tmp_path: Path):
    model = nn.Linear(64, 1)
    with torch.no_grad():
        model.weight.copy_(torch.arange(64.0).reshape(1, 64))
    path = save_checkpoint(tmp_path / "last.pt", model, step=5)
    first_floats = torch.arange(64.0).numpy().tobytes()[:32]
    path.write_bytes(flip_inside(path.read_bytes(), first_floats))
    raw = torch.load(path, weights_only=True)  # torch reads the damaged file ...
    weight = raw["model"]["weight"]
    assert not torch.equal(weight, model.weight.detach())  # ... altered
    corrupt = r"last\.pt is corrupt: its contents do not match"
    with pytest.raises(CheckpointError, match=corrupt):
        load_checkpoint(path, model)
    del raw["checksum"]  # a version-2 file must carry its checksum
    torch.save(raw, path)
    with pytest.raises(CheckpointError, match=corrupt):
        load_checkpoint(path)


def test_checkpoints_without_a_checksum_still_load(tmp_path: Path) -> None:
    """What version 1 wrote: the same dictionary, without the checksum."""
    model, opt, sched = trained_objects()
    path = save_checkpoint(tmp_path / "old.pt", model, opt, sched, step=7)
    state = torch.load(path, weights_only=True)
    del state["checksum"]
    state["version"] = 1
    torch.save(state, path)
    other, opt2, sched2 = trained_objects(1)
    assert load_checkpoint(path, other, opt2, sched2)["step"] == 7
    saved, loaded = model.state_dict(), other.state_dict()
    for a, b in zip(saved.values(), loaded.values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_an_old_checkpoint_with_weights_that_are_not_finite_is_refused(
    tmp_path: Path,
) -> None:
    """Version 1 has no checksum to find damage: NaN or infinite weights (a
    damaged file, or a diverged run) are refused instead."""
    model, _, _ = trained_objects()
    path = save_checkpoint(tmp_path / "old.pt", model, step=7)
    state = torch.load(path, weights_only=True)
    del state["checksum"]
    state["version"] = 1
    for bad in (float("nan"), float("inf")):
        state["model"]["2.bias"][1] = bad
        torch.save(state, path)
        with pytest.raises(CheckpointError, match=r"old\.pt .*NaN or infinite"):
            ckpt.read_checkpoint(path)


def test_a_raw_pickle_is_refused_without_warnings(tmp_path: Path) -> None:
    import pickle
    import warnings

    path = tmp_path / "raw.pt"
    path.write_bytes(pickle.dumps({"format": ckpt.FORMAT}, protocol=4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CheckpointError, match=r"raw\.pt is not a readable"):
            ckpt.read_checkpoint(path)
    assert [str(w.message) for w in caught] == []


def test_the_content_hash_sees_every_value_and_type() -> None:
    base = {"w": torch.zeros(3), "step": 1, "names": ("a", "b"), "lr": 0.1}
    same = {"w": torch.zeros(3), "step": 1, "names": ("a", "b"), "lr": 0.1}
    assert ckpt.content_hash(base) == ckpt.content_hash(same)
    changes = [
        {"w": torch.tensor([0.0, 0.0, 1e-30])},  # one element
        {"w": torch.zeros(3, dtype=torch.float64)},  # the dtype
        {"w": torch.zeros(1, 3)},  # the shape
        {"step": 2},
        {"step": 1.0},  # the type
        {"names": ["a", "b"]},
        {"lr": 0.1 + 2**-55},  # the last bit of a float
    ]
    for change in changes:
        assert ckpt.content_hash(base | change) != ckpt.content_hash(base), change
    bf16 = torch.ones(2, 2, dtype=torch.bfloat16)
    assert ckpt.content_hash(bf16) != ckpt.content_hash(bf16 * 2)


def test_a_full_disk_is_one_clear_error_and_leaves_the_old_checkpoint(
    tmp_path: Path, full_disk
) -> None:
    model, opt, sched = trained_objects()
    path = save_checkpoint(tmp_path / "last.pt", model, opt, sched, step=1)
    with full_disk(room=2000), pytest.raises(DiskFullError) as caught:
        save_checkpoint(path, model, opt, sched, step=2)  # torch wraps the ENOSPC
    assert str(caught.value) == (
        f"no space left on the disk of {tmp_path} to write last.pt (the previous "
        "last.pt, if any, is intact): free some space, then run again (a "
        "training run: with --resume)"
    )
    assert caught.value.errno == errno.ENOSPC
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # nothing else
    assert load_checkpoint(path, model)["step"] == 1


def test_keep_previous_keeps_the_replaced_checkpoint(tmp_path: Path) -> None:
    model, _, _ = trained_objects()
    path = tmp_path / "last.pt"
    ckpt.keep_previous(path)  # nothing to keep yet
    assert not ckpt.previous(path).exists()
    for step in (1, 2, 3):
        ckpt.keep_previous(path)
        save_checkpoint(path, model, step=step)
    assert ckpt.previous(path).name == "last.previous.pt"
    assert load_checkpoint(ckpt.previous(path))["step"] == 2
    assert load_checkpoint(path)["step"] == 3
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["last.previous.pt", "last.pt"]
