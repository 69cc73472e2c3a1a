"""Check this machine against what the book needs.

Run ``python -m annotated_transformer.doctor``.

Every check prints one line: a status, what it found and, when something is wrong,
what to do about it (after ``→``). The statuses:

- ``ok``   as the book expects;
- ``note`` worth knowing; ``make test`` does not depend on it;
- ``warn`` ``make test`` can still run, but results or speed
  may differ from the book's;
- ``FAIL`` something ``make test`` needs is missing or broken: the exit status is 1.

``make test`` needs Python 3.11 or newer, the pinned torch, every package of the
lock (``.ci/requirements.lock``) and this package installed, a usable
``AT_DATA_MIRROR`` when it is set, and a Chromium-family browser for the site check.
A dataset that is in neither the mirror nor the cache is only a note: it is
downloaded, checksum-verified, the first time it is used.

Only the standard library (and :mod:`~annotated_transformer.paths`, which needs no
more) is imported at the top: torch and packaging are imported inside the checks,
so a broken install is reported instead of crashing the doctor.

    python -m annotated_transformer.doctor
        every check
    python -m annotated_transformer.doctor --browser
        the site check's browser, or how to get one
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from annotated_transformer.paths import repository_root

if TYPE_CHECKING:
    from annotated_transformer.data.download import Resource

# The checkout that holds this package (an editable install), else the one the
# doctor runs in.
ROOT = repository_root(Path(__file__).parent) or Path.cwd()
LOCK = ROOT / ".ci" / "requirements.lock"
PYPROJECT = ROOT / "pyproject.toml"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
REINSTALL = "rm -f .venv/.installed && make setup"
BF16_FLAGS = ("avx512_bf16", "amx_bf16")

BROWSER_NAMES = (
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
    "microsoft-edge",
    "microsoft-edge-stable",
)
BROWSER_DIRS = ("/opt/homebrew/bin", "/usr/local/bin", "/snap/bin", "/usr/bin")
MACOS_APPS = (
    "Google Chrome.app/Contents/MacOS/Google Chrome",
    "Chromium.app/Contents/MacOS/Chromium",
    "Microsoft Edge.app/Contents/MacOS/Microsoft Edge",
)
PLAYWRIGHT_GLOBS = (
    "chromium-*/chrome-*/chrome",
    "chromium-*/chrome-*/chrome.exe",
    "chromium-*/chrome-*/*.app/Contents/MacOS/*",
)
BROWSER_HINT = (
    "no Chromium-family browser for the site check → install one (Debian/Ubuntu: "
    "sudo apt-get install chromium; macOS: brew install --cask chromium, or Google "
    "Chrome), or run `.venv/bin/playwright install chromium`, or set "
    "AT_BROWSER=/path/to/the/browser"
)


@dataclass(frozen=True)
class Check:
    """One line of the report: ``status`` is ``ok``,
    ``note``, ``warn`` or ``FAIL``."""

    name: str
    status: str
    found: str
    fix: str = ""

    def line(self) -> str:
        """The printed line: status, name, what was found, then
        ``→ fix`` when there is one."""
        fix = f" → {self.fix}" if self.fix else ""
        return f"{self.status:<4}  {self.name:<9} {self.found}{fix}"


def normalize(name: str) -> str:
    """A distribution name in PEP 503 form: ``Jinja2`` and
    ``typing_extensions`` → lower, dashes."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> list[tuple[str, str, str]]:
    """The pins of a requirements lock: (normalized name, version,
    marker or "") per line."""
    pins = []
    for line in path.read_text().splitlines():
        match = re.match(
            r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)\s*(?:;\s*(.*))?$", line
        )
        if match:
            pins.append((normalize(match[1]), match[2], (match[3] or "").strip()))
    return pins


def find_browser() -> str | None:
    """Path of a Chromium-family browser for the site check, or None.

    ``AT_BROWSER`` wins when set (and is then the only candidate); else the usual
    command names on PATH and in Homebrew's and snap's folders, the macOS
    applications, and the browser that ``playwright install chromium`` downloads.
    """
    chosen = os.environ.get("AT_BROWSER")
    if chosen:
        path = Path(chosen).expanduser()
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    search = os.pathsep.join([os.environ.get("PATH", ""), *BROWSER_DIRS])
    for name in BROWSER_NAMES:
        if found := shutil.which(name, path=search):
            return found
    for apps in (Path("/Applications"), Path.home() / "Applications"):
        for app in MACOS_APPS:
            if (apps / app).is_file():
                return str(apps / app)
    for folder in _playwright_folders():
        found = sorted(
            p for pattern in PLAYWRIGHT_GLOBS for p in folder.glob(pattern)
        )
        if found:
            return str(found[-1])  # the newest revision
    return None


def _playwright_folders() -> list[Path]:
    if chosen := os.environ.get("PLAYWRIGHT_BROWSERS_PATH"):
        return [Path(chosen).expanduser()]
    home = Path.home()
    local = Path(os.environ.get("LOCALAPPDATA", home / "AppData" / "Local"))
    return [
        home / ".cache/ms-playwright",
        home / "Library/Caches/ms-playwright",
        local / "ms-playwright",
    ]


def check_python() -> list[Check]:
    """Python 3.11 or newer (the lock is resolved for 3.11 and tested there)."""
    version = platform.python_version()
    where = f"{version} ({sys.executable})"
    # the doctor also runs on an older Python, to say so
    major_minor = sys.version_info[:2]
    if major_minor < (3, 11):
        fix = (
            "install Python 3.11 (python.org, `brew install python@3.11` or "
            "`uv python install 3.11`), then make setup PYTHON=/path/to/python3.11"
        )
        return [Check("python", "FAIL", where, fix)]
    if major_minor != (3, 11):
        fix = (
            "the book is tested on 3.11: if an install or an output differs, use it"
        )
        return [Check("python", "note", where, fix)]
    return [Check("python", "ok", where)]


def check_torch(expected: str | None) -> list[Check]:
    """torch: its version against the lock's pin, its build,
    bf16 speed and threads."""
    try:
        import torch
    except ImportError as error:
        return [Check("torch", "FAIL", f"cannot be imported ({error})", REINSTALL)]
    checks = [_torch_version(torch.__version__, expected), _torch_build(torch)]
    return [*checks, _bf16(torch), _threads(torch)]


def _torch_version(installed: str, expected: str | None) -> Check:
    if expected is None:
        return Check(
            "torch",
            "warn",
            installed,
            "no torch pin found in the lock: run from a checkout",
        )
    if installed.split("+")[0] != expected:
        fix = f"the stored outputs were made with torch {expected}: {REINSTALL}"
        return Check(
            "torch", "FAIL", f"{installed}, but the book pins {expected}", fix
        )
    return Check("torch", "ok", installed)


def _torch_build(torch) -> Check:
    mps = torch.backends.mps.is_available()
    if mps:
        found = "standard build, Apple GPU (MPS) available"
        fix = (
            "`--device auto` trains on MPS in float32; the book's numbers were "
            "measured on a CPU and MPS numbers can differ in the last digits (make "
            "test checks CPU results)"
        )
        return Check("build", "note", found, fix)
    if torch.version.cuda is None:
        return Check("build", "ok", "CPU build")
    if torch.cuda.is_available():
        found = (
            f"CUDA {torch.version.cuda} build, GPU: {torch.cuda.get_device_name(0)}"
        )
        return Check("build", "ok", found)
    fix = (
        "a CUDA build brings GBs of CUDA libraries that a CPU-only machine never "
        "uses; for the CPU build: rm -rf .venv && make setup "
        f"TORCH_INDEX={CPU_INDEX}"
    )
    return Check(
        "build", "warn", f"CUDA {torch.version.cuda} build, but no usable GPU", fix
    )


def _bf16(torch) -> Check:
    """Race a bf16 matrix product against fp32, as
    ``precision="auto"`` does to pick one."""
    from annotated_transformer.training.precision import cpu_bf16_speedup

    speed = cpu_bf16_speedup()
    found = f"bf16 matrix products run at {speed:.2g}× the fp32 speed on this CPU"
    flags = _cpu_flags()
    if flags is not None:
        found += (
            " (/proc/cpuinfo: "
            f"{', '.join(flags) or 'neither ' + ' nor '.join(BF16_FLAGS)})"
        )
    if speed > 1:
        fix = (
            "presets with precision=auto (translation) train in bf16 here; the "
            "book's Results page says which CPU and precision each result was "
            "measured with"
        )
        return Check("bf16", "note", found, fix)
    return Check(
        "bf16", "ok", f"{found}: the presets train in fp32, as in the book"
    )


def _cpu_flags() -> list[str] | None:
    """The bf16 flags of /proc/cpuinfo (Linux), or None where
    there is no such file."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        return None
    words = set(cpuinfo.read_text(errors="replace").split())
    return [flag for flag in BF16_FLAGS if flag in words]


def _threads(torch) -> Check:
    omp = os.environ.get("OMP_NUM_THREADS")
    found = (
        f"torch uses {torch.get_num_threads()} intra-op thread(s) of "
        f"{os.cpu_count()} CPUs "
        f"(OMP_NUM_THREADS={omp if omp is not None else 'unset'})"
    )
    if omp == "1":
        return Check("threads", "ok", found)
    fix = (
        "chapters are stored and checked on one thread (make test and make execute "
        "set OMP_NUM_THREADS=1); start Jupyter with OMP_NUM_THREADS=1 or last "
        "digits can differ"
    )
    return Check("threads", "note", found, fix)


def check_package() -> list[Check]:
    """This package installed (editable, from the checkout) so that
    the chapters import it."""
    try:
        version = importlib.metadata.version("annotated-transformer")
    except importlib.metadata.PackageNotFoundError:
        return [
            Check(
                "package",
                "FAIL",
                "annotated-transformer is not installed",
                "make setup",
            )
        ]
    return [
        Check(
            "package",
            "ok",
            f"annotated-transformer {version} ({Path(__file__).parent})",
        )
    ]


def check_lock(lock: Path = LOCK, pyproject: Path = PYPROJECT) -> list[Check]:
    """Installed versions against the lock, and the lock against
    pyproject.toml's dependencies."""
    if not lock.is_file():
        return [
            Check(
                "lock",
                "warn",
                f"no lock at {lock}",
                "run the doctor from a checkout",
            )
        ]
    try:
        from packaging.markers import Marker
        from packaging.version import Version
    except ImportError:
        return [Check("lock", "FAIL", "packaging is not installed", REINSTALL)]
    every_pin = read_lock(lock)
    pins = [
        (n, v)
        for n, v, marker in every_pin
        if not marker or Marker(marker).evaluate()
    ]
    missing, different = [], []
    for name, version in pins:
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
            continue
        if Version(installed).public != Version(version).public:
            different.append(f"{name} {installed} (lock {version})")
    where = lock.relative_to(ROOT) if lock.is_relative_to(ROOT) else lock
    checks = []
    if missing:
        found = (
            f"{len(missing)} of {len(pins)} locked packages are missing: "
            f"{', '.join(missing)}"
        )
        checks.append(Check("lock", "FAIL", found, REINSTALL))
    elif different:
        found = (
            f"{len(different)} of {len(pins)} packages differ from {where}: "
            f"{', '.join(different)}"
        )
        fix = f"the stored outputs were made with the locked versions: {REINSTALL}"
        checks.append(Check("lock", "warn", found, fix))
    else:
        checks.append(
            Check(
                "lock",
                "ok",
                f"all {len(pins)} packages of {where} at their versions",
            )
        )
    if pyproject.is_file():
        checks.append(_lock_covers(pyproject, every_pin))
    return checks


def _lock_covers(pyproject: Path, pins: list[tuple[str, str, str]]) -> Check:
    """Does every dependency of pyproject.toml (all extras) have a lock
    pin that satisfies it?"""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads(pyproject.read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        wanted += extra
    locked: dict[str, list[str]] = {}
    for name, version, _ in pins:
        locked.setdefault(name, []).append(version)
    stale = []
    for requirement in map(Requirement, wanted):
        versions = locked.get(normalize(requirement.name), [])
        if not any(
            requirement.specifier.contains(v, prereleases=True) for v in versions
        ):
            stale.append(f"{requirement} (lock: {', '.join(versions) or 'absent'})")
    if stale:
        fix = (
            "make lock, then make setup, and re-execute the chapters (make book "
            "EXECUTE=1)"
        )
        return Check(
            "lock", "warn", f"older than pyproject.toml: {'; '.join(stale)}", fix
        )
    return Check(
        "lock", "ok", f"pins every dependency of {pyproject.name}, extras included"
    )


def check_datasets() -> list[Check]:
    """Each dataset: in the mirror (``AT_DATA_MIRROR``), in the cache,
    or where it comes from."""
    from annotated_transformer import paths as settings
    from annotated_transformer.data.download import REGISTRY

    mirror, cache = settings.data_mirror(), settings.cache_dir()
    checks = []
    if mirror is not None and not mirror.is_dir():
        fix = (
            "point AT_DATA_MIRROR at a folder laid out like shared/data "
            "(multi30k/, imdb/, chars/), or unset it to download into the cache"
        )
        checks.append(
            Check("data", "FAIL", f"AT_DATA_MIRROR={mirror} is not a folder", fix)
        )
        mirror = None
    groups: dict[str, list[str]] = {}
    for name in REGISTRY:
        groups.setdefault(name.split("/")[0], []).append(name)
    for group, names in groups.items():
        checks.append(_dataset(group, [REGISTRY[n] for n in names], mirror, cache))
    return checks


def _dataset(
    group: str,
    entries: list[tuple[Resource, ...]],
    mirror: Path | None,
    cache: Path,
) -> Check:
    total = len(entries)
    for place, folder in (("the mirror", mirror), ("the cache", cache)):
        held = folder is not None and all(
            any((folder / r.path).is_file() for r in e) for e in entries
        )
        if held:
            return Check(
                "data", "ok", f"{group}: {total} file(s) in {place} {folder}"
            )
    places = f"the mirror {mirror} nor " if mirror is not None else ""
    found = f"{group}: not in {places}the cache {cache}"
    urls = [r.url for entry in entries for r in entry if r.url]
    if not urls:
        fix = "set AT_DATA_MIRROR to a folder that has it (shared/data does)"
        return Check("data", "note", f"{found}, and it has no public URL", fix)
    source = urls[0] if len(urls) == 1 else urls[0].rsplit("/", 1)[0] + "/…"
    fix = (
        "offline? copy it into a folder laid out like shared/data and set "
        "AT_DATA_MIRROR to it"
    )
    return Check(
        "data", "note", f"{found}; downloaded on first use from {source}", fix
    )


def check_browser() -> list[Check]:
    """A Chromium-family browser for the site check (``make test``;
    ``make book`` needs none)."""
    found = find_browser()
    if found:
        return [Check("browser", "ok", found)]
    chosen = os.environ.get("AT_BROWSER")
    if chosen:
        fix = (
            "point AT_BROWSER at a Chromium, Chrome or Edge executable, or unset it"
        )
        return [
            Check(
                "browser",
                "FAIL",
                f"AT_BROWSER={chosen} is not an executable file",
                fix,
            )
        ]
    found, fix = BROWSER_HINT.split(" → ")
    return [Check("browser", "FAIL", found, fix)]


def locked_torch(lock: Path = LOCK) -> str | None:
    """The torch version pinned in the lock (the Makefile's
    TORCH_VERSION), or None."""
    if not lock.is_file():
        return None
    return next(
        (version for name, version, _ in read_lock(lock) if name == "torch"), None
    )


def run_checks() -> list[Check]:
    """Every check, in the order they are printed."""
    steps: list[Callable[[], list[Check]]] = [
        check_python,
        lambda: check_torch(locked_torch()),
        check_package,
        check_lock,
        check_datasets,
        check_browser,
    ]
    return [check for step in steps for check in step()]


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report; the exit status is 1 when a check FAILs, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--browser",
        action="store_true",
        help="print the site check's browser, or how to get one",
    )
    args = parser.parse_args(argv)
    if args.browser:
        found = find_browser()
        print(found or BROWSER_HINT)
        return 0 if found else 1
    checks = run_checks()
    for check in checks:
        print(check.line())
    failed = sum(check.status == "FAIL" for check in checks)
    warned = sum(check.status == "warn" for check in checks)
    print(f"doctor: {failed} problem(s) that stop make test, {warned} warning(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
