"""The exercises' graders: each fails the untouched starter, a wrong answer and (for
"find the bug") the broken version, and passes the reference solution, on inputs
from a fresh seed; answers that try to fool the grader fail with one line each; the
hand-outs (the student's holds no solution) and the Otter-Grader export; the CLI
and the book's Exercises sections."""

import ast
import importlib.util
import inspect
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import jupytext
import pytest
import torch

from annotated_transformer.exercises import grading, isolation, toggles
from annotated_transformer.exercises.cli import main
from annotated_transformer.exercises.grading import Outcome

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "notebooks" / "exercises" / "solutions"
# A teacher may hand out a copy without the solutions (book/teachers.md).
needs_solutions = pytest.mark.skipif(
    not SOLUTIONS.is_dir(), reason="the solutions are not part of this copy"
)
EXERCISES = [ex for ch in grading.chapters() for ex in grading.exercises(ch)]
SEED = secrets.randbelow(10**6)  # in every failure message: pass it to --seed


@pytest.fixture(autouse=True)
def fresh_inputs():
    grading.set_seed(SEED)


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
    module = starter(ex.chapter)
    result = grading.run(ex, module, module)
    # A find-the-bug starter holds the broken function: the check must catch it.
    expected = Outcome.FAIL if ex.bug else Outcome.TODO
    assert result.outcome is expected, f"{result.message} (seed {SEED})"
    assert not result.attempted or not ex.bug


@needs_solutions
@pytest.mark.parametrize("ex", EXERCISES, ids=label)
def test_the_reference_solution_passes(ex: grading.Exercise):
    result = grading.run(ex, grading.solutions(ex.chapter))
    assert result.outcome is Outcome.PASS, f"{result.message} (seed {SEED})"


@needs_solutions
@pytest.mark.parametrize("ex", EXERCISES, ids=label)
def test_a_wrong_answer_fails(ex: grading.Exercise):
    solutions = grading.solutions(ex.chapter)
    right = getattr(solutions, ex.name)

    def wrong(*args, **kwargs):
        return perturbed(right(*args, **kwargs))

    result = grading.run(ex, SimpleNamespace(**{ex.name: wrong}))
    assert result.outcome is Outcome.FAIL, f"seed {SEED}"


@needs_solutions
@pytest.mark.parametrize("chapter", grading.chapters())
def test_the_report_gives_hints_never_the_solution(chapter: str, capsys):
    module = starter(chapter)
    grading.grade(chapter, module, starter=module)
    report = " ".join(capsys.readouterr().out.split())
    solutions = grading.solutions(chapter)
    for ex in grading.exercises(chapter):
        if ex.bug:  # untouched: the question, not yet the hint that names the bug
            assert f"question: {ex.question}" in report
            assert ex.hint not in report
        code = inspect.getsource(getattr(solutions, ex.name)).splitlines()
        body = [line.strip() for line in code if len(line.strip()) > 24]
        leaked = [line for line in body[3:] if line in report]
        assert not leaked, f"the report shows solution code: {leaked}"
    total = len(grading.exercises(chapter))
    assert report.rstrip().endswith(f"0 of {total} passed.")


@pytest.mark.parametrize("chapter", grading.chapters())
def test_the_chapter_states_every_exercise(chapter: str):
    (py,) = (ROOT / "notebooks").glob(f"{chapter}_*.py")
    cells = jupytext.read(py).cells
    text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    section = text[text.index("## Exercises") :]
    for ex in grading.exercises(chapter):
        assert f"Exercise {ex.label}" in section, f"{py.name} lacks {ex.label}"
    assert f"make exercises CHAPTER={chapter}" in section


SHOWN = re.compile(
    r"^:::\{dropdown\} Solution\n```python\n(def (\w+)\(.*?)^```\n:::$",
    re.MULTILINE | re.DOTALL,
)


@needs_solutions
@pytest.mark.parametrize("chapter", grading.chapters())
def test_every_toggle_shows_the_code_of_its_solution_file(chapter: str):
    """Inline, as code that JupyterLab's MyST renders too; in the .py and the
    .ipynb; the solution file is the one source (make listings writes them)."""
    source = (SOLUTIONS / f"ch{chapter}.py").read_text()
    functions = {
        node.name: ast.get_source_segment(source, node) + "\n"
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef)
    }
    for path in sorted((ROOT / "notebooks").glob(f"{chapter}_*.*")):
        if path.suffix not in {".py", ".ipynb"}:
            continue
        cells = jupytext.read(path).cells
        text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
        shown = SHOWN.findall(text)
        names = [ex.name for ex in grading.exercises(chapter)]
        assert [name for _, name in shown] == names, f"{path.name}'s toggles"
        for code, name in shown:
            stale = f"{path.name} shows another {name} than ch{chapter}.py"
            assert code == functions[name], f"{stale}: run make listings"


@needs_solutions
def test_make_listings_writes_a_stale_toggle_again(tmp_path):
    (py,) = (ROOT / "notebooks").glob("06_*.py")
    copy = tmp_path / "notebooks" / py.name
    shutil.copytree(SOLUTIONS, tmp_path / SOLUTIONS.relative_to(ROOT))
    stale = py.read_text().replace("#     return in_prefix | causal\n", "")
    assert stale != py.read_text()
    copy.write_text(stale)
    assert toggles.main(["--root", str(tmp_path)]) == 0
    assert copy.read_text() == py.read_text()


def test_a_failed_attempt_at_a_bug_gets_the_hint(tmp_path, capsys):
    (ex,) = [e for e in grading.exercises("06") if e.name == "masked_softmax"]
    source = grading.starter_path("06", ROOT).read_text()
    answers = tmp_path / "answers.py"
    answers.write_text(source.replace("masked_fill(~mask, ", "masked_fill(mask, "))
    result = grading.run(ex, grading.load(answers), starter("06"))
    assert result.outcome is Outcome.FAIL and result.attempted
    grading.report(result)
    assert "hint: " in capsys.readouterr().out


@needs_solutions
def test_the_cli_grades_the_solutions_and_the_starter(capsys):
    assert main(["1", "--solutions", "--seed", str(SEED)]) == 0
    path = grading.starter_path("01", ROOT)
    assert main(["01", "--file", str(path)]) == 1
    out = capsys.readouterr().out
    assert "TODO" in out and "(seed " in out


CHEATS = """\
import torch


def context_vectors(s, h):
    raise SystemExit(0)


def additive_scores(s, h, W, U, v):
    while True:
        pass


def multi_head_self_attention(X, W_q, W_k, W_v, W_o, h):
    from annotated_transformer.exercises import grading

    grading.assert_close = lambda *args, **kwargs: None
    return X


def attention_pool(X, q):
    import os

    os._exit(0)
"""


def grade_cli(path: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "annotated_transformer.exercises", "01"]
    command += ["--file", str(path), "--seed", str(SEED), *extra]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT)


def refused_import() -> str:
    """How an answer's import of the grader fails: in the sandbox its files are
    not there; without one, the worker refuses to open them."""
    return "ImportError" if isolation.sandboxed() else "PermissionError"


def test_answers_that_try_to_fool_the_grader_fail_one_line_each(tmp_path):
    answers = tmp_path / "answers.py"
    answers.write_text(CHEATS)
    done = grade_cli(answers, "--timeout", "5")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    report = " ".join(done.stdout.split())  # the report wraps at 84 columns
    said = {
        "context_vectors": "it raised SystemExit at line 5 of answers.py",
        "additive_scores": "it ran for more than 5 s (an endless loop?)",
        "multi_head_self_attention": f"it raised {refused_import()}",
        "attention_pool": "the answer ended the grading process (exit code 0)",
    }
    for name, message in said.items():
        assert f"({name}) what went wrong: {message}" in report, report
    assert report.count("FAIL") == 4 and report.endswith("0 of 4 passed.")


def test_an_answer_cannot_import_the_grader(tmp_path):
    """The checks stay in the grader's process, out of the answer's reach."""
    answers = tmp_path / "answers.py"
    answers.write_text(
        "from annotated_transformer.exercises import grading\n"
        "grading.run = lambda *args, **kwargs: None\n"
    )
    done = grade_cli(answers)
    assert done.returncode == 2
    assert f"does not import: {refused_import()}" in done.stdout, done.stdout


@needs_solutions
def test_importing_or_hard_coding_the_solution_fails(tmp_path):
    answers = tmp_path / "answers.py"
    answers.write_text("from ch01 import *  # noqa\nimport sys\n")
    sys.path.insert(0, str(SOLUTIONS))
    try:
        copied = grading.load(answers)
    finally:
        sys.path.remove(str(SOLUTIONS))
    for ex in grading.exercises("01"):
        result = grading.run(ex, copied)
        assert result.outcome is Outcome.FAIL
        assert "reference solution's code" in result.message
    (ex,) = [e for e in grading.exercises("01") if e.name == "context_vectors"]
    s, h = torch.randn(4, 6, generator=grading.rng(0)), torch.randn(5, 6)
    answer = grading.solutions("01").context_vectors(s, h)  # the outputs of one run
    grading.set_seed(SEED + 1)
    literal = SimpleNamespace(context_vectors=lambda s, h: answer)
    assert grading.run(ex, literal).outcome is Outcome.FAIL


def test_the_solutions_are_not_in_the_package():
    assert (
        importlib.util.find_spec("annotated_transformer.exercises.solutions")
        is None
    )
    package = ROOT / "src" / "annotated_transformer"
    assert not list(package.rglob("solutions")), "solutions in the package"


@pytest.mark.skipif(os.name != "posix", reason="sends SIGINT")
def test_ctrl_c_prints_a_summary_not_a_traceback(tmp_path):
    answers = tmp_path / "answers.py"
    answers.write_text(
        "def context_vectors(s, h):\n"
        "    print('looping', flush=True)\n"
        "    while True:\n"
        "        pass\n"
    )
    command = [sys.executable, "-m", "annotated_transformer.exercises", "01"]

    def as_in_a_terminal() -> None:  # a background shell starts us ignoring it
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    process = subprocess.Popen(
        [*command, "--file", str(answers)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_in_a_terminal,
    )
    first = process.stdout.readline()  # the grader has started
    assert first.startswith("Chapter 01"), first
    for line in process.stderr:  # the answer's output: the loop has begun
        if line.strip() == "looping":
            break
    process.send_signal(signal.SIGINT)
    out = first + process.communicate(timeout=60)[0]
    assert process.returncode == 130, out
    assert "Traceback" not in out and "interrupted after 0 of 4 exercises" in out


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
    (tmp_path / "exits.py").write_text("raise SystemExit(0)\n")
    assert main(["01", "--file", str(tmp_path / "exits.py")]) == 2
    assert "does not import: SystemExit" in capsys.readouterr().out
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


def test_missing_solutions_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="not part of this copy"):
        grading.solutions("06", root=tmp_path)


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
