"""Where and how a run was trained: the machine, the command, the code's commit.

A run's figures mean little without their provenance: a wall time depends on the
CPU or GPU and the thread count, a score on the commit that trained it. The
runner writes :func:`provenance` into a new run's folder (``provenance.json``)
when training starts; ``record`` (:mod:`annotated_transformer.records`) copies it
into the run's record.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from annotated_transformer.files import DamagedFileError, read_json, write_json

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


def short_cpu(name: str) -> str:
    """A CPU's name in a few words, for a table: no trademarks, clock or
    family numbers ("Intel Xeon", "AMD EPYC", "Apple M2")."""
    for mark in ("(R)", "(TM)"):
        name = name.replace(mark, "")
    for tail in (" (family", " @", " Processor", " CPU"):
        name = name.split(tail)[0]
    return " ".join(name.split())


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


# git, told to run no program that a repository's configuration names: no file
# system monitor, no hooks, no external diff, no system-wide configuration, and no
# index refresh written back (which would call the post-index-change hook).
GIT = (
    "git",
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "diff.external=",
    "--no-optional-locks",
)  # fmt: skip
CODE = Path(__file__).parent  # the checkout this program runs from


def git_commit(folder: str | Path = CODE) -> dict[str, Any] | None:
    """The commit checked out in the repository holding ``folder`` (default: this
    program's own code), and whether tracked files differed from it (``dirty``);
    None outside a git repository. Read with :data:`GIT`: a repository that
    configures a program to run runs nothing."""

    def git(*args: str) -> str:
        command = [*GIT, "-C", str(folder), *args]
        env = os.environ | {"GIT_CONFIG_NOSYSTEM": "1"}
        done = subprocess.run(
            command, capture_output=True, text=True, check=True, env=env
        )
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
        "git": git_commit(),  # the code that trains
        "machine": describe(device),
    }


def read_provenance(path: str | Path) -> dict[str, Any]:
    """A run's ``provenance.json``, read as data (inside its run's folder); a
    damaged one, or one whose parts are not what :func:`write_provenance` writes,
    is one line that names it."""
    path = Path(path)
    fix = (
        "it is written when the run starts: delete it (the run writes it "
        "again; a record of it then asks for --threads)"
    )
    needs = {"machine": dict, "resumed": (list, type(None))}
    saved = read_json(path, fix, needs, inside=path.parent)
    git = saved.get("git")
    if not (git is None or _is_commit(git)):
        raise DamagedFileError(f"{path} has a wrong 'git': {fix}")
    if not machine_fits(saved["machine"]):
        raise DamagedFileError(f"{path} has a wrong 'machine': {fix}")
    if not resumed_fits(saved.get("resumed")):
        raise DamagedFileError(f"{path} has a wrong 'resumed' entry: {fix}")
    if not isinstance(saved.get("command"), str | type(None)):
        raise DamagedFileError(f"{path} has a wrong 'command': {fix}")
    return saved


def resumed_fits(resumed: Any) -> bool:
    """Is ``resumed`` what :func:`write_provenance` writes as a run's
    ``resumed`` (and a record copies): None, or a list of parts, each with the
    step it started at and its machine?"""
    return resumed is None or (
        isinstance(resumed, list)
        and all(
            isinstance(part, dict)
            and isinstance(part.get("step"), int)
            and machine_fits(part.get("machine"))
            and (part.get("git") is None or _is_commit(part["git"]))
            for part in resumed
        )
    )


def machine_fits(machine: Any) -> bool:
    """Is ``machine`` what :func:`describe` gives, as far as a record reads it:
    the CPU's name, the GPU's (or None), the thread count?"""
    return (
        isinstance(machine, dict)
        and isinstance(machine.get("cpu"), str)
        and isinstance(machine.get("gpu"), str | type(None))
        and isinstance(machine.get("threads"), int)
    )


def _is_commit(git: Any) -> bool:
    """Is ``git`` what :func:`git_commit` gives for a repository?"""
    return (
        isinstance(git, dict)
        and isinstance(git.get("commit"), str)
        and isinstance(git.get("dirty"), bool)
    )


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
