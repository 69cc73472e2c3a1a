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

The check never touches the reader's code: it receives an :class:`Answer`, whose
``m.name(*args)`` is a request to the process that runs the answer (a worker,
:mod:`exercises.isolation`; for the book's own trusted files, this process:
:class:`InProcess`), answered in plain data (:mod:`protocol`). Whatever the answer
does, a crash, ``SystemExit``, an in-place change or a banned kernel (see
:mod:`worker`), comes back as one line, a FAIL.
"""

from __future__ import annotations

import ast
import contextvars
import enum
import importlib
import io
import pkgutil
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

from annotated_transformer.exercises import protocol, worker

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


class AnswerError(Exception):
    """The worker's one line about a call: a crash, a side effect, a ban."""


class StoppedError(Exception):
    """The worker stopped answering (a time limit) or ended: the one line."""


class Answers:
    """A reader's answers, seen from the grader: requests go out, plain data
    comes back (see :mod:`protocol`). :class:`InProcess` serves them here, for
    trusted files (the book's solutions, the tests' mutants);
    :class:`isolation.Worker` from a process of their own."""

    def __init__(self) -> None:
        self.callbacks: list[Callable] = []
        self.functions: set[str] = set()  # the answer's functions
        self.copied: set[str] = set()  # those that are a solution file's code
        self.sources: dict[str, str] = {}  # their source, read as text

    def exchange(self, message: dict, tensors: dict) -> tuple[dict, dict]:
        """Send one request, return the reply (callbacks served meanwhile)."""
        raise NotImplementedError

    def callback(self, message: dict, tensors: dict) -> tuple[dict, dict]:
        """Run one of the grader's functions for the worker, on plain data."""
        function = self.callbacks[message["callback"]]
        decode = protocol.Decoder(tensors)
        encoder = protocol.Encoder()
        try:
            value = function(*decode(message["args"]), **decode(message["kwargs"]))
            return {"value": encoder(value)}, encoder.tensors
        except Exception as error:
            return {"error": f"{type(error).__name__}: {error}"}, {}

    def encoder(self) -> protocol.Encoder:
        def other(value: object) -> dict:
            if not callable(value):
                kind = type(value).__name__
                raise TypeError(f"a {kind} cannot be sent to the worker")
            self.callbacks.append(value)
            return {"callback": len(self.callbacks) - 1}

        return protocol.Encoder(other)

    def decoder(self, tensors: dict) -> protocol.Decoder:
        def other(value: dict) -> Remote:
            if "handle" not in value:
                raise ValueError(f"unexpected {sorted(value)} in a reply")
            return Remote(self, value["handle"])

        return protocol.Decoder(tensors, other)

    def ask(self, message: dict, encoder: protocol.Encoder) -> tuple[dict, Any]:
        reply, tensors = self.exchange(message, encoder.tensors)
        if "error" in reply:
            if reply.get("todo"):
                raise NotImplementedError
            raise AnswerError(reply["error"])
        return reply, self.decoder(tensors)


class InProcess(Answers):
    """Answers served in this process, through the same plain-data messages:
    for files the grader trusts (``module`` may be any namespace)."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.server = worker.Server(module, self._through(self.callback))
        ready = self.server.ready()
        self.functions, self.copied = set(ready["functions"]), set(ready["copied"])
        self.sources = _functions(getattr(module, "__file__", None))

    @staticmethod
    def _through(serve: Callable) -> Callable:
        """``serve``, with its message and reply written as bytes and read back."""

        def call(message: dict, tensors: dict) -> tuple[dict, dict]:
            buffer = io.BytesIO()
            protocol.send(buffer, message, tensors)
            reply = serve(*protocol.receive(io.BytesIO(buffer.getvalue())))
            buffer = io.BytesIO()
            protocol.send(buffer, *reply)
            return protocol.receive(io.BytesIO(buffer.getvalue()))

        return call

    def exchange(self, message: dict, tensors: dict) -> tuple[dict, dict]:
        return self._through(self.server.handle)(message, tensors)


class Remote:
    """An object the answer returned that is not plain data (a vocabulary):
    it stays in the worker; attributes, items, len and iteration are requests."""

    def __init__(self, answers: Answers, handle: int) -> None:
        self._answers, self._handle = answers, handle

    def _ask(self, op: str, **fields: object) -> Any:
        encoder = self._answers.encoder()
        message = {"op": op, "handle": self._handle}
        message |= {k: encoder(v) if k == "key" else v for k, v in fields.items()}
        reply, decode = self._answers.ask(message, encoder)
        return decode(reply["value"])

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._ask("attr", name=name)

    def __getitem__(self, key: object) -> Any:
        return self._ask("item", key=key)

    def __len__(self) -> int:
        return self._ask("len")

    def __iter__(self) -> Iterator:
        return iter(self._ask("list"))


_BANS: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "bans", default=None
)
_COTANGENT: contextvars.ContextVar[Tensor | None] = contextvars.ContextVar(
    "cotangent", default=None
)


class Answer:
    """The reader's module as a check sees it: ``m.name(*args)`` calls the
    answer's function ``name`` in the worker and returns its outputs; objects
    made with :func:`protocol.build` come back as the call left them."""

    def __init__(self, answers: Answers) -> None:
        self._answers = answers

    def __getattr__(self, name: str) -> Callable:
        if name.startswith("_"):
            raise AttributeError(name)
        answers = self._answers

        def call(*args: object, **kwargs: object) -> Any:
            encoder = answers.encoder()
            message = {
                "op": "call",
                "name": name,
                "args": encoder(list(args)),
                "kwargs": encoder(kwargs),
                "bans": _BANS.get(),
            }
            cotangent = _COTANGENT.get()
            if cotangent is not None:
                message["cotangent"] = encoder(cotangent)
            reply, decode = answers.ask(message, encoder)
            for made, saved in zip(encoder.built, reply["after"], strict=True):
                protocol.restore(made, decode(saved))
            for leaf, grad in zip(
                encoder.leaves, decode(reply["grads"]), strict=False
            ):
                leaf.grad = grad
            return decode(reply["value"])

        return call


@contextmanager
def forbidden(
    *names: str, why: str, methods: tuple[str, ...] = ()
) -> Iterator[None]:
    """While the answer runs, every torch function and aten operator whose
    name contains one of ``names`` raises, and so do the class ``methods``
    ("torch.nn.TransformerEncoderLayer.forward"): banned by what they compute,
    however the answer reaches them."""
    token = _BANS.set({"names": list(names), "methods": list(methods), "why": why})
    try:
        yield
    finally:
        _BANS.reset(token)


@contextmanager
def backward(cotangent: Tensor) -> Iterator[None]:
    """Ask for gradients: the worker backpropagates ``cotangent`` through the
    answer's result (a FAIL when it cannot) and the tensors sent with
    ``requires_grad`` come back with their ``.grad``."""
    token = _COTANGENT.set(cotangent)
    try:
        yield
    finally:
        _COTANGENT.reset(token)


def load(path: Path) -> ModuleType:
    """Import a trusted file (the solutions, a test's mutant) in this process;
    answers are imported by the worker only. A one-line ValueError if it fails."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} is not a file; pass the path of your answers")
    return worker.load(path, f"{LOADED}{path.parent.name}_{path.stem}")


def _functions(file: str | None) -> dict[str, str]:
    """The source of every top-level function of ``file``, read without
    running it ({} when there is no file)."""
    if not file or not Path(file).is_file():
        return {}
    source = Path(file).read_text(encoding="utf-8", errors="replace")
    try:
        nodes = ast.parse(source).body
    except SyntaxError:
        return {}
    return {
        n.name: ast.get_source_segment(source, n) or ""
        for n in nodes
        if isinstance(n, ast.FunctionDef)
    }


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
    seconds: float = 0.0


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


def run(
    exercise: Exercise, answers: Answers | Any, starter: dict[str, str] | Any = None
) -> Result:
    """Run one exercise's check on the reader's ``answers`` (a module or
    namespace is served in this process: :class:`InProcess`); ``starter``: the
    starter's function sources (or module), which tell whether a "find the bug"
    function was attempted."""
    if not isinstance(answers, Answers):
        answers = InProcess(answers)
    if not isinstance(starter, dict):
        starter = _functions(getattr(starter, "__file__", None))
    name = exercise.name
    original, mine = starter.get(name), answers.sources.get(name)
    attempted = original is None or mine is None or original != mine

    def result(outcome: Outcome, message: str = "") -> Result:
        return Result(exercise, outcome, message, attempted)

    if name not in answers.functions:
        return result(Outcome.FAIL, f"no function named {name}")
    if name in answers.copied:
        return result(
            Outcome.FAIL, "it is the reference solution's code: write your own"
        )
    try:
        exercise.check(Answer(answers))
    except NotImplementedError:
        return result(Outcome.TODO, "not attempted yet")
    except (AnswerError, StoppedError) as error:
        return result(Outcome.FAIL, str(error))
    except AssertionError as error:
        return result(Outcome.FAIL, str(error) or "a check failed")
    except Exception as error:
        first = (str(error).strip().splitlines() or [""])[0]
        what = f"{type(error).__name__}: {first}"
        return result(
            Outcome.FAIL, f"its result is not what was asked for ({what})"
        )
    return result(Outcome.PASS)


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
    module: Any,
    *,
    starter: Any = None,
    write: Callable[[str], None] = print,
) -> list[Result]:
    """Run every exercise of ``chapter`` on a trusted ``module`` in this
    process, printing a report (answers are graded by :mod:`isolation`)."""
    answers = module if isinstance(module, Answers) else InProcess(module)
    results = []
    for ex in exercises(chapter):
        results.append(run(ex, answers, starter))
        report(results[-1], write)
    write(summary(results, len(results)))
    return results


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
