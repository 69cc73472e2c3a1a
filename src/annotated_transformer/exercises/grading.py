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
force), with :func:`assert_close` and :func:`assert_equal` for tensors. Their
inputs are fresh on every run: :func:`rng` and :func:`seed` derive them from the
run's seed (:func:`set_seed`; the grader prints it, ``--seed`` repeats a run), so
an answer that returns literals or looks its inputs up in a table fails.

:func:`run` trusts nothing the graded function does: an exception of any kind
(``SystemExit`` included) is a FAIL, and so is a change to the grader's own code
(:class:`Guard`). Running each answer file in a process of its own, with a time
limit per exercise, is :mod:`exercises.isolation`'s job.
"""

from __future__ import annotations

import builtins
import enum
import importlib
import importlib.util
import inspect
import math
import pkgutil
import sys
import textwrap
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

Check = Callable[[ModuleType], None]


@dataclass(frozen=True)
class Exercise:
    """One exercise: the function ``name`` that the reader writes, and its check.

    bug: a "find the bug" exercise, whose starter holds a broken version of the
    function (so the untouched starter FAILs instead of being TODO).
    question: for a "find the bug" exercise, what the report asks while the
    function is still the starter's; the hint, which names the bug, is shown only
    once the reader has changed it and it still fails.
    """

    chapter: str
    number: int
    name: str
    title: str
    hint: str
    check: Check
    bug: bool = False
    question: str = ""

    @property
    def label(self) -> str:
        """The exercise's number as the book prints it, e.g. ``6.2``."""
        return f"{int(self.chapter)}.{self.number}"


REGISTRY: dict[str, dict[str, Exercise]] = {}
"""chapter ("06") -> function name -> exercise, in the order of definition."""


def exercise(
    *, chapter: str, name: str, title: str, hint: str, question: str = ""
) -> Callable[[Check], Check]:
    """Register the decorated check: chapter ``chapter``'s exercise ``name``; a
    ``question`` makes it a "find the bug" exercise."""

    def register(check: Check) -> Check:
        exercises = REGISTRY.setdefault(chapter, {})
        if name in exercises:
            raise ValueError(f"chapter {chapter} registers exercise {name!r} twice")
        number = len(exercises) + 1
        bug = bool(question)
        exercises[name] = Exercise(
            chapter, number, name, title, hint, check, bug, question
        )
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


def _roots(root: Path | None) -> list[Path]:
    """Where notebooks/exercises/ is looked for: ``root``, or the working
    directory and the repository this package was installed from."""
    return [root] if root else [Path.cwd(), Path(__file__).resolve().parents[3]]


def solutions_path(chapter: str, root: Path | None = None) -> Path:
    """notebooks/exercises/solutions/chNN.py: the reference solutions, kept beside
    the starters and never inside the package (a student copy leaves them out).
    A one-line ValueError when this copy of the book has none."""
    chapter = normalise(chapter)
    for folder in _roots(root):
        path = folder / "notebooks" / "exercises" / "solutions" / f"ch{chapter}.py"
        if path.is_file():
            return path
    raise ValueError(
        f"the solutions of chapter {chapter} are not part of this copy of the book "
        "(notebooks/exercises/solutions/ is the teacher's edition's)"
    )


def solutions(chapter: str, root: Path | None = None) -> ModuleType:
    """The reference solutions of a chapter; a one-line error if they are gone."""
    return load(solutions_path(chapter, root))


def starter_path(chapter: str, root: Path | None = None) -> Path:
    """notebooks/exercises/NN_<chapter>.py under ``root`` (default: the working
    directory or, failing that, the repository this package was installed from)."""
    chapter = normalise(chapter)
    for folder in _roots(root):
        found = sorted((folder / "notebooks" / "exercises").glob(f"{chapter}_*.py"))
        if found:
            return found[0]
    raise ValueError(
        f"no starter notebooks/exercises/{chapter}_*.py found; run this from the "
        "repository's root or pass --file PATH"
    )


LOADED = "exercises_"
"""The prefix of the module names :func:`load` gives the files it imports."""


def load(path: Path) -> ModuleType:
    """Import a reader's file as a module; a one-line ValueError if it fails."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} is not a file; pass the path of your answers")
    name = f"{LOADED}{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look classes up here
    try:
        spec.loader.exec_module(module)
    except BaseException as error:  # SystemExit too: the file decides nothing
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
    """An exercise's outcome; ``attempted``: a "find the bug" function that is no
    longer the starter's (its failure may show the hint, not only the question)."""

    exercise: Exercise
    outcome: Outcome
    message: str = ""
    attempted: bool = True


# The run's seed: every check draws its inputs from it (see rng and seed).
_SEED = [0]


def set_seed(value: int) -> None:
    """Make the checks' inputs those of run ``value``."""
    _SEED[0] = value


def seed(k: int) -> int:
    """The seed of a check's k-th stream of inputs in this run."""
    return (_SEED[0] * 1_000_003 + k) % 2**63


def rng(k: int) -> torch.Generator:
    """A generator for a check's k-th stream of inputs in this run."""
    return torch.Generator().manual_seed(seed(k))


def integers(k: int, low: int, high: int, n: int) -> list[int]:
    """``n`` integers in [low, high] from the check's k-th stream: sizes and
    counts that an answer cannot know in advance."""
    return torch.randint(low, high + 1, (n,), generator=rng(k)).tolist()


class Guard:
    """What the grader's verdict rests on: this module's helpers, the checks, and
    the parts of torch and Python that they call. :meth:`changed` names what an
    answer replaced since the guard was made, and puts the originals back."""

    def __init__(self, *owners: object) -> None:
        self.strict = (*owners, sys.modules[__name__])  # the grader's own code
        owners = (*self.strict, torch, F, Tensor, nn.Module, builtins, math)
        self.saved = [(owner, dict(vars(owner))) for owner in owners]
        self.modules = dict(sys.modules)

    def changed(self) -> list[str]:
        names = []
        for owner, saved in self.saved:
            current = vars(owner)
            for name, value in saved.items():
                now = current.get(name, _MISSING)
                # torch wraps some of its own functions the first time an
                # optimiser is made (for torch.compile): the same function still
                same = now is value or (
                    owner not in self.strict
                    and getattr(now, "__wrapped__", None) is value
                )
                if not same:
                    where = getattr(owner, "__name__", str(owner)).split(".")[-1]
                    names.append(f"{where}.{name}")
                    setattr(owner, name, value)
        for name, module in self.modules.items():
            if name.startswith(LOADED):  # a reader's file, imported by load()
                continue
            if sys.modules.get(name, module) is not module:
                names.append(name)
                sys.modules[name] = module
        return names


_MISSING = object()


def patched(names: list[str]) -> str:
    """The one line that says an answer changed the grader."""
    shown = ", ".join(names[:3]) + (" …" if len(names) > 3 else "")
    return f"it replaced {shown}, which the grader relies on: answers may not"


class _Forbid(TorchFunctionMode):
    def __init__(self, functions: dict[Callable, str]) -> None:
        super().__init__()
        self.functions = functions

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.functions:
            raise AssertionError(self.functions[func])
        return func(*args, **(kwargs or {}))


@contextmanager
def forbidden(*functions: Callable, why: str) -> Iterator[None]:
    """Run the answer with torch ``functions`` (however it reached them, e.g.
    ``F.scaled_dot_product_attention``) raising: the statement rules them out."""
    said = "which the statement rules out"
    names = {f: f"it calls {f.__name__}, {said} ({why})" for f in functions}
    with _Forbid(names):
        yield


@contextmanager
def not_called(module: nn.Module, why: str) -> Iterator[None]:
    """Run the answer with ``module``'s own forward raising, however it is called
    (the statement asks for it assembled by hand from its parts)."""

    def refuse(*_: object, **__: object) -> None:
        name = type(module).__name__
        raise AssertionError(f"it calls the {name} it was given ({why})")

    module.forward = refuse
    try:
        yield
    finally:
        del module.forward


def run(
    exercise: Exercise, module: ModuleType, starter: ModuleType | None = None
) -> Result:
    """Run one exercise's check on the reader's module (``starter``: the
    untouched starter, which tells whether a "find the bug" function was
    attempted)."""
    function = getattr(module, exercise.name, None)
    if not callable(function):
        return Result(exercise, Outcome.FAIL, f"no function named {exercise.name}")
    attempted = _attempted(function, getattr(starter, exercise.name, None))
    copied = _from_solutions(function, module)
    if copied:
        return Result(exercise, Outcome.FAIL, copied, attempted)
    guard = Guard(sys.modules[exercise.check.__module__])
    try:
        exercise.check(module)
    except NotImplementedError:
        result = Result(exercise, Outcome.TODO, "not attempted yet", attempted)
    except AssertionError as error:
        message = str(error) or "a check failed"
        result = Result(exercise, Outcome.FAIL, message, attempted)
    except BaseException as error:  # a crash, SystemExit, KeyboardInterrupt, …
        result = Result(exercise, Outcome.FAIL, _crash(error, module), attempted)
    else:
        result = Result(exercise, Outcome.PASS, "", attempted)
    changed = guard.changed()
    if changed:
        return Result(exercise, Outcome.FAIL, patched(changed), attempted)
    return result


def _attempted(function: Callable, original: Callable | None) -> bool:
    """Whether ``function`` differs from the starter's ``original``."""
    if original is None:
        return True
    try:
        return inspect.getsource(function) != inspect.getsource(original)
    except (OSError, TypeError):
        return True


def _from_solutions(function: Callable, module: ModuleType) -> str:
    """A reason to fail ``function``, graded as ``module``'s, when it is code from
    a reference solutions file (other than ``module`` itself)."""
    code = getattr(function, "__code__", None)
    file = Path(code.co_filename).resolve() if code else None
    own = Path(getattr(module, "__file__", None) or ".").resolve()
    where = (file.parent.name, file.parent.parent.name) if file else ()
    if file != own and where == ("solutions", "exercises"):
        return f"it is the reference solution's code ({file.name}): write your own"
    return ""


def report(result: Result, write: Callable[[str], None] = print) -> None:
    """Print one exercise's outcome: a line, and for a FAIL what went wrong and
    the hint (for an untouched "find the bug" function, the question instead)."""
    ex = result.exercise
    write(f"  {result.outcome.value}  {ex.label:<5} {ex.title} ({ex.name})")
    if result.outcome is Outcome.FAIL:
        write(_wrap("what went wrong: ", result.message))
        if ex.bug and not result.attempted:
            write(_wrap("question: ", ex.question))
        else:
            write(_wrap("hint: ", ex.hint))
    elif result.outcome is Outcome.TODO:
        write("        not attempted yet: replace `raise NotImplementedError`")


def summary(results: list[Result], total: int) -> str:
    """The report's last line."""
    passed = sum(r.outcome is Outcome.PASS for r in results)
    return f"{passed} of {total} passed."


def grade(
    chapter: str,
    module: ModuleType,
    *,
    starter: ModuleType | None = None,
    write: Callable[[str], None] = print,
) -> list[Result]:
    """Run every exercise of ``chapter`` on ``module`` in this process, printing
    a report (the command line grades in a separate process: see isolation)."""
    results = []
    for ex in exercises(chapter):
        results.append(run(ex, module, starter))
        report(results[-1], write)
    write(summary(results, len(results)))
    return results


def _crash(error: BaseException, module: ModuleType) -> str:
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
