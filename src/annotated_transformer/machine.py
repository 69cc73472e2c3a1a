"""Where and how a run was trained: the machine, the command, the code's commit.

A run's figures mean little without their provenance: a wall time depends on the
CPU or GPU and the thread count, a score on the commit that trained it. The
runner writes :func:`provenance` into a new run's folder (``provenance.json``)
when training starts; ``record`` (:mod:`annotated_transformer.records`) copies it
into the run's record.
"""

from __future__ import annotations

import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from annotated_transformer.files import read_json, write_json

PROVENANCE = "provenance.json"


def cpu_model() -> str:
    """The CPU's name, with its family and model numbers where Linux gives them
    (a virtual machine often names only the vendor: "AMD EPYC")."""
    info = Path("/proc/cpuinfo")
    if info.is_file():
        fields: dict[str, str] = {}
        for line in info.read_text().splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() not in fields:
                fields[key.strip()] = value.strip()
            if not line.strip() and fields:  # the first processor is enough
                break
        name = fields.get("model name", platform.processor() or "unknown CPU")
        if "cpu family" not in fields:
            return name
        family, model = fields["cpu family"], fields.get("model", "?")
        return f"{name} (family {family}, model {model})"
    return platform.processor() or platform.machine() or "unknown CPU"


def describe(device: torch.device | str = "cpu") -> dict[str, Any]:
    """This machine as a run's record states it: CPU (and GPU on a CUDA ``device``),
    intra-op threads, torch's CPU kernels (e.g. AVX2), torch and Python versions."""
    device = torch.device(device)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "cpu": cpu_model(),
        "gpu": gpu,
        "device": device.type,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "system": platform.system(),
    }


def git_commit(folder: str | Path) -> dict[str, Any] | None:
    """The commit checked out in the repository holding ``folder``, and whether
    tracked files differed from it (``dirty``); None outside a git repository."""

    def git(*args: str) -> str:
        command = ["git", "-C", str(folder), *args]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        return done.stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        dirty = bool(git("status", "--porcelain", "--untracked-files=no").strip())
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"commit": commit, "dirty": dirty}


def command_line(argv: list[str] | None = None) -> str | None:
    """The command that is running, when it is this package's command line (a
    chapter's kernel is not a command anyone would retype: None)."""
    argv = sys.argv if argv is None else argv
    if not argv or not argv[0].endswith("annotated_transformer/__main__.py"):
        return None
    return shlex.join(["python", "-m", "annotated_transformer", *argv[1:]])


def provenance(device: torch.device | str) -> dict[str, Any]:
    """The machine, command and code's commit of a run starting now."""
    return {
        "command": command_line(),
        "git": git_commit(Path(__file__).parent),  # the code that trains
        "machine": describe(device),
    }


def read_provenance(path: str | Path) -> dict[str, Any]:
    """A run's ``provenance.json``; a damaged one is one line that names it."""
    fix = (
        "it is written when the run starts: delete it (the run writes it "
        "again; a record of it then asks for --threads)"
    )
    needs = {"machine": dict, "resumed": (list, type(None))}
    return read_json(path, fix, needs)


def write_provenance(
    folder: str | Path, device: torch.device | str, step: int = 0
) -> None:
    """Write :func:`provenance` into ``folder/provenance.json`` when a run starts.

    A run resumed at ``step`` on another machine, or with another number of
    threads, than its last start adds its step and :func:`provenance` to the
    file's ``resumed`` list: its record then says where each part was trained.
    """
    path = Path(folder) / PROVENANCE
    now = provenance(device)
    if not path.exists():
        write_json(path, now)
        return
    saved = read_provenance(path)
    segments = saved["resumed"] = saved.get("resumed") or []
    if now["machine"] != (segments[-1] if segments else saved)["machine"]:
        segments.append({"step": step} | now)
        write_json(path, saved)
