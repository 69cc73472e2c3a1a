"""The exercise registry and the grader: checks that test a reader's functions.

A check is a function that receives the reader's module (their filled-in starter,
or the reference solutions) and raises ``AssertionError`` with a short message when
the answer is wrong. :func:`exercise` registers it under its chapter and the name of
the function it grades; :func:`grade` runs a chapter's checks in order and prints,
per exercise,

- ``PASS``;
- ``FAIL``, what went wrong and the exercise's hint (never the solution);
- ``TODO``: not attempted yet (the starter's ``raise NotImplementedError`` is
  still there).

Checks compare with independent references (PyTorch modules, formulas, brute
force), with :func:`assert_close` and :func:`assert_equal` for tensors.
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
import pkgutil
import sys
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

Check = Callable[[ModuleType], None]


@dataclass(frozen=True)
class Exercise:
    """One exercise: the function ``name`` that the reader writes, and its check.

    bug: a "find the bug" exercise, whose starter holds a broken version of the
    function (so the untouched starter FAILs instead of being TODO).
    """

    chapter: str
    number: int
    name: str
    title: str
    hint: str
    check: Check
    bug: bool = False

    @property
    def label(self) -> str:
        """The exercise's number as the book prints it, e.g. ``6.2``."""
        return f"{int(self.chapter)}.{self.number}"


REGISTRY: dict[str, dict[str, Exercise]] = {}
"""chapter ("06") -> function name -> exercise, in the order of definition."""


def exercise(
    *, chapter: str, name: str, title: str, hint: str, bug: bool = False
) -> Callable[[Check], Check]:
    """Register the decorated check: chapter ``chapter``'s exercise ``name``."""

    def register(check: Check) -> Check:
        exercises = REGISTRY.setdefault(chapter, {})
        if name in exercises:
            raise ValueError(f"chapter {chapter} registers exercise {name!r} twice")
        number = len(exercises) + 1
        exercises[name] = Exercise(chapter, number, name, title, hint, check, bug)
        return check

    return register


def chapters() -> list[str]:
    """The chapters that have exercises: "01", "02", ... (a checks module each)."""
    folder = Path(__file__).parent
    names = (m.name for m in pkgutil.iter_modules([str(folder)]))
    return sorted(n[2:] for n in names if n.startswith("ch") and n[2:].isdigit())


def normalise(chapter: str) -> str:
    """ "6", "06" -> "06"; a one-line ValueError for a chapter without exercises."""
    known = chapters()
    number = chapter.strip()
    if number.isdigit() and f"{int(number):02d}" in known:
        return f"{int(number):02d}"
    known = ", ".join(known)
    raise ValueError(f"no exercises for chapter {chapter!r}; these have: {known}")


def exercises(chapter: str) -> list[Exercise]:
    """The exercises of a chapter, in order (imports its checks module)."""
    chapter = normalise(chapter)
    importlib.import_module(f"{__package__}.ch{chapter}")
    return list(REGISTRY[chapter].values())


def solutions(chapter: str) -> ModuleType:
    """The reference solutions of a chapter; a one-line error if they are gone."""
    chapter = normalise(chapter)
    try:
        return importlib.import_module(f"{__package__}.solutions.ch{chapter}")
    except ModuleNotFoundError:
        raise ValueError(
            f"the solutions of chapter {chapter} are not part of this copy of the "
            "book (src/annotated_transformer/exercises/solutions/ was removed)"
        ) from None


def starter_path(chapter: str, root: Path | None = None) -> Path:
    """notebooks/exercises/NN_<chapter>.py under ``root`` (default: the working
    directory or, failing that, the repository this package was installed from)."""
    chapter = normalise(chapter)
    roots = [root] if root else [Path.cwd(), Path(__file__).resolve().parents[3]]
    for folder in roots:
        found = sorted((folder / "notebooks" / "exercises").glob(f"{chapter}_*.py"))
        if found:
            return found[0]
    raise ValueError(
        f"no starter notebooks/exercises/{chapter}_*.py found; run this from the "
        "repository's root or pass --file PATH"
    )


def load(path: Path) -> ModuleType:
    """Import a reader's file as a module; a one-line ValueError if it fails."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} is not a file; pass the path of your answers")
    name = f"exercises_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look classes up here
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        where = f" (line {error.lineno})" if isinstance(error, SyntaxError) else ""
        what = f"{type(error).__name__}{where}: {error}"
        raise ValueError(f"{path} does not import: {what}; fix it first") from None
    return module


class Outcome(enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    TODO = "TODO"


@dataclass(frozen=True)
class Result:
    exercise: Exercise
    outcome: Outcome
    message: str = ""


def run(exercise: Exercise, module: ModuleType) -> Result:
    """Run one exercise's check on the reader's module."""
    if not callable(getattr(module, exercise.name, None)):
        return Result(exercise, Outcome.FAIL, f"no function named {exercise.name}")
    try:
        exercise.check(module)
    except NotImplementedError:
        return Result(exercise, Outcome.TODO, "not attempted yet")
    except AssertionError as error:
        return Result(exercise, Outcome.FAIL, str(error) or "a check failed")
    except Exception as error:  # the reader's code crashed: say how and where
        return Result(exercise, Outcome.FAIL, _crash(error, module))
    return Result(exercise, Outcome.PASS)


def grade(
    chapter: str, module: ModuleType, *, write: Callable[[str], None] = print
) -> list[Result]:
    """Run every exercise of ``chapter`` on ``module``, printing a report."""
    results = [run(ex, module) for ex in exercises(chapter)]
    for result in results:
        ex = result.exercise
        write(f"  {result.outcome.value}  {ex.label:<5} {ex.title} ({ex.name})")
        if result.outcome is Outcome.FAIL:
            write(_wrap("what went wrong: ", result.message))
            write(_wrap("hint: ", ex.hint))
        elif result.outcome is Outcome.TODO:
            write("        not attempted yet: replace `raise NotImplementedError`")
    passed = sum(r.outcome is Outcome.PASS for r in results)
    write(f"{passed} of {len(results)} passed.")
    return results


def _crash(error: Exception, module: ModuleType) -> str:
    """One line: the exception, and the last line of the reader's file it passed."""
    first = (str(error).strip().splitlines() or [""])[0]
    file = getattr(module, "__file__", None)
    frames = traceback.extract_tb(error.__traceback__)
    lines = [f.lineno for f in frames if file and f.filename == file]
    where = f" at line {lines[-1]} of {Path(file).name}" if lines else ""
    return f"it raised {type(error).__name__}{where}: {first}"


def _wrap(label: str, text: str) -> str:
    """An indented paragraph of at most 84 columns, ``label`` on its first line."""
    indent = " " * 8
    first, rest = indent + label, indent + "  "
    return textwrap.fill(text, 84, initial_indent=first, subsequent_indent=rest)


def assert_equal(actual: object, expected: Tensor, what: str) -> None:
    """AssertionError unless ``actual`` is a tensor equal to ``expected``."""
    _check_tensor(actual, expected, what)
    if not torch.equal(actual.to(expected.dtype), expected):
        wrong = (actual.to(expected.dtype) != expected).nonzero()[0].tolist()
        raise AssertionError(
            f"{what}: wrong value at index {tuple(wrong)}: "
            f"{actual[tuple(wrong)].item()} where {expected[tuple(wrong)].item()} "
            "was expected"
        )


def assert_close(
    actual: object,
    expected: Tensor,
    what: str,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """AssertionError unless ``actual`` is a tensor close to ``expected``."""
    _check_tensor(actual, expected, what)
    actual = actual.detach().to(torch.float64)
    expected = expected.detach().to(torch.float64)
    if not torch.isfinite(actual).all():
        raise AssertionError(f"{what} contains NaN or inf")
    error = (actual - expected).abs() - rtol * expected.abs()
    if (error > atol).any():
        index = torch.unravel_index(error.argmax(), error.shape)
        worst = tuple(i.item() for i in index)
        raise AssertionError(
            f"{what} is off: {actual[worst].item():.6g} at index {worst} where "
            f"{expected[worst].item():.6g} was expected"
        )


def _check_tensor(actual: object, expected: Tensor, what: str) -> None:
    if not isinstance(actual, Tensor):
        kind = type(actual).__name__
        raise AssertionError(f"{what} should be a tensor, got a {kind}")
    if actual.shape != expected.shape:
        shapes = f"{tuple(actual.shape)}, expected {tuple(expected.shape)}"
        raise AssertionError(f"{what} has shape {shapes}")
