"""The exercises' graders: each fails the untouched starter, a wrong answer and (for
"find the bug") the broken version, and passes the reference solution; the CLI and
the book's Exercises sections."""

import importlib
import inspect
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import jupytext
import pytest
import torch

from annotated_transformer.exercises import grading
from annotated_transformer.exercises.cli import main
from annotated_transformer.exercises.grading import Outcome

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "src" / "annotated_transformer" / "exercises" / "solutions"
# A teacher may hand out a copy without the solutions (book/teachers.md).
needs_solutions = pytest.mark.skipif(
    not SOLUTIONS.is_dir(), reason="the solutions are not part of this copy"
)
EXERCISES = [ex for ch in grading.chapters() for ex in grading.exercises(ch)]


def label(ex: grading.Exercise) -> str:
    return f"{ex.chapter}-{ex.name}"


def starter(chapter: str) -> ModuleType:
    return grading.load(grading.starter_path(chapter, ROOT))


def perturbed(value: object) -> object:
    """A wrong answer of the same type: every tensor, number and string changed."""
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool:
            return ~value
        return value + (1 if not value.is_floating_point() else 0.5)
    if isinstance(value, tuple | list):
        return type(value)(perturbed(v) for v in value)
    if isinstance(value, dict):
        return type(value)({key: perturbed(v) for key, v in value.items()})
    if isinstance(value, str):
        return value + "?"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    raise TypeError(f"no wrong answer for a {type(value).__name__}")


def test_every_chapter_has_three_to_five_exercises():
    pages = (ROOT / "notebooks").glob("[0-9][0-9]_*.py")
    chapters = sorted(page.name[:2] for page in pages)
    assert grading.chapters() == chapters
    counts = {chapter: len(grading.exercises(chapter)) for chapter in chapters}
    assert all(3 <= n <= 5 for n in counts.values()), counts


@pytest.mark.parametrize("ex", EXERCISES, ids=label)
def test_the_untouched_starter_does_not_pass(ex: grading.Exercise):
    result = grading.run(ex, starter(ex.chapter))
    # A find-the-bug starter holds the broken function: the check must catch it.
    expected = Outcome.FAIL if ex.bug else Outcome.TODO
    assert result.outcome is expected, result.message


@needs_solutions
@pytest.mark.parametrize("ex", EXERCISES, ids=label)
def test_the_reference_solution_passes(ex: grading.Exercise):
    result = grading.run(ex, grading.solutions(ex.chapter))
    assert result.outcome is Outcome.PASS, result.message


@needs_solutions
@pytest.mark.parametrize("ex", EXERCISES, ids=label)
def test_a_wrong_answer_fails(ex: grading.Exercise):
    solutions = grading.solutions(ex.chapter)
    right = getattr(solutions, ex.name)

    def wrong(*args, **kwargs):
        return perturbed(right(*args, **kwargs))

    result = grading.run(ex, SimpleNamespace(**{ex.name: wrong}))
    assert result.outcome is Outcome.FAIL


@needs_solutions
@pytest.mark.parametrize("chapter", grading.chapters())
def test_the_report_gives_hints_never_the_solution(chapter: str, capsys):
    grading.grade(chapter, starter(chapter))
    report = capsys.readouterr().out
    solutions = grading.solutions(chapter)
    for ex in grading.exercises(chapter):
        if ex.bug:
            assert ex.hint.split()[0] in report
        code = inspect.getsource(getattr(solutions, ex.name)).splitlines()
        body = [line.strip() for line in code if len(line.strip()) > 24]
        leaked = [line for line in body[3:] if line in report]
        assert not leaked, f"the report shows solution code: {leaked}"
    total = len(grading.exercises(chapter))
    assert report.rstrip().endswith(f"0 of {total} passed.")


@pytest.mark.parametrize("chapter", grading.chapters())
def test_the_chapter_states_every_exercise_and_includes_its_solution(chapter: str):
    (py,) = (ROOT / "notebooks").glob(f"{chapter}_*.py")
    cells = jupytext.read(py).cells
    text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    section = text[text.index("## Exercises") :]
    for ex in grading.exercises(chapter):
        assert f"Exercise {ex.label}" in section, f"{py.name} lacks {ex.label}"
        assert f":pyobject: {ex.name}" in section, f"{py.name} lacks {ex.name}"
    assert f"make exercises CHAPTER={chapter}" in section


@needs_solutions
def test_the_cli_grades_the_solutions_and_the_starter(capsys):
    assert main(["1", "--solutions"]) == 0
    path = grading.starter_path("01", ROOT)
    assert main(["01", "--file", str(path)]) == 1
    assert "TODO" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["99"], "no exercises for chapter '99'"),
        (["01", "--file", "missing.py"], "missing.py is not a file"),
    ],
)
def test_the_cli_explains_bad_input_in_one_line(argv, says, capsys):
    assert main(argv) == 2
    out = capsys.readouterr().out
    assert says in out and len(out.strip().splitlines()) == 1


def test_a_file_that_does_not_import_is_one_line(tmp_path, capsys):
    bad = tmp_path / "answers.py"
    bad.write_text("def f(:\n")
    assert main(["01", "--file", str(bad)]) == 2
    assert "does not import: SyntaxError (line 1)" in capsys.readouterr().out


def test_a_crash_in_the_readers_code_names_its_line(tmp_path):
    answers = tmp_path / "answers.py"
    answers.write_text("def context_vectors(s, h):\n    return s @ h\n")
    (ex,) = [e for e in grading.exercises("01") if e.name == "context_vectors"]
    result = grading.run(ex, grading.load(answers))
    assert result.outcome is Outcome.FAIL
    assert "RuntimeError at line 2 of answers.py" in result.message


def test_missing_solutions_are_one_line(monkeypatch, capsys):
    real = importlib.import_module

    def without_solutions(name: str, package: str | None = None) -> ModuleType:
        if ".solutions" in name:
            raise ModuleNotFoundError(name)
        return real(name, package)

    monkeypatch.setattr(grading.importlib, "import_module", without_solutions)
    assert main(["06", "--solutions"]) == 2
    assert "not part of this copy" in capsys.readouterr().out


@needs_solutions
@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_exercises_grades_without_installing_anything():
    command = ["make", "-s", "exercises", "CHAPTER=01", "SOLUTIONS=1"]
    command.append(f"PY={sys.executable}")
    dry = subprocess.run([*command, "-n"], cwd=ROOT, capture_output=True, text=True)
    assert "pip" not in dry.stdout, "make exercises must not (re)install the venv"
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("4 of 4 passed.")
