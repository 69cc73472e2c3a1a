"""The lock and the environment check: every dependency pinned
exactly, the doctor's verdicts.

The lock is read here with its own small parser (not the doctor's), against
pyproject.toml, the Makefile's TORCH_VERSION and environment.yml.
"""

import os
import re
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from annotated_transformer import doctor

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / ".ci" / "requirements.lock"
CUDA_RUNTIME = re.compile(r"^(nvidia-|cuda-|triton\b)")


def lock_pins() -> dict[str, list[str]]:
    """name -> pinned versions; every requirement line of the lock
    must be `name==version`."""
    pins: dict[str, list[str]] = {}
    for line in LOCK.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        requirement = Requirement(line)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", (
            f"{LOCK.name}: {line!r} is not an exact pin"
        )
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        pins.setdefault(name, []).append(specifier.version)
    return pins


def pyproject_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = [project["dependencies"], *project["optional-dependencies"].values()]
    return [Requirement(r) for group in groups for r in group]


def test_lock_pins_every_dependency_of_pyproject_exactly():
    pins = lock_pins()
    stale = []
    for requirement in pyproject_requirements():
        versions = pins.get(re.sub(r"[-_.]+", "-", requirement.name).lower(), [])
        if not any(
            requirement.specifier.contains(v, prereleases=True) for v in versions
        ):
            stale.append(f"{requirement} (lock: {versions or 'absent'})")
    assert not stale, (
        f"the lock is older than pyproject.toml, run `make lock`: {stale}"
    )


def test_lock_pins_the_makefiles_torch_and_no_cuda_runtime():
    torch_version = re.search(
        r"^TORCH_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.M
    )
    assert lock_pins()["torch"] == [torch_version[1]]
    cuda = [name for name in lock_pins() if CUDA_RUNTIME.match(name)]
    assert not cuda, (
        f"add {cuda} to .ci/lock-excludes.txt (they come with a CUDA build of "
        "torch)"
    )
    conda = (ROOT / "environment.yml").read_text()
    assert (
        f"- torch=={torch_version[1]}" in conda
        and "- -r .ci/requirements.lock" in conda
    )


def run_doctor(tmp_path: Path, **env: str) -> tuple[int, list[str]]:
    environment = {**os.environ, "AT_CACHE_DIR": str(tmp_path / "cache"), **env}
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    )
    done = subprocess.run(
        [sys.executable, "-m", "annotated_transformer.doctor"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout.splitlines()


def stub_browser(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_doctor_passes_here_and_says_how_to_get_missing_datasets(tmp_path):
    (tmp_path / "mirror").mkdir()
    code, lines = run_doctor(
        tmp_path,
        AT_DATA_MIRROR=str(tmp_path / "mirror"),
        AT_BROWSER=str(stub_browser(tmp_path / "chrome")),
    )
    assert code == 0, "\n".join(lines)
    data = [line for line in lines if line.split()[1] == "data"]
    assert data and all(
        line.startswith("note") and "AT_DATA_MIRROR" in line for line in data
    )
    wrong = [line for line in lines[:-1] if not line.startswith("ok ")]
    assert all(" → " in line for line in wrong), (
        "every line that is not ok must say what to do"
    )


def test_doctor_fails_when_make_test_would(tmp_path):
    code, lines = run_doctor(
        tmp_path,
        AT_DATA_MIRROR=str(tmp_path / "no-mirror"),
        AT_BROWSER=str(tmp_path / "no-chrome"),
    )
    assert code == 1, "\n".join(lines)
    failed = {line.split()[1]: line for line in lines if line.startswith("FAIL")}
    assert set(failed) == {"data", "browser"}, "\n".join(lines)
    assert "→ point AT_DATA_MIRROR at a folder" in failed["data"]
    assert "→ point AT_BROWSER at" in failed["browser"]


def test_find_browser_falls_back_to_playwrights_newest(tmp_path, monkeypatch):
    monkeypatch.delenv("AT_BROWSER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(doctor, "BROWSER_DIRS", ())
    monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", str(tmp_path / "pw"))
    if Path("/Applications").is_dir():
        pytest.skip(
            "a macOS machine's own applications come before Playwright's browser"
        )
    assert doctor.find_browser() is None
    stub_browser(tmp_path / "pw/chromium-1100/chrome-linux/chrome")
    newest = stub_browser(tmp_path / "pw/chromium-1200/chrome-linux64/chrome")
    assert doctor.find_browser() == str(newest)
