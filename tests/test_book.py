"""The book's structure: every chapter is a synced Jupytext pair with
stored outputs, in the TOC."""

import json
from pathlib import Path

import jupytext
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
CHAPTERS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))


def cells(path: Path) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in jupytext.read(path).cells]


def test_there_are_chapters():
    assert CHAPTERS, f"no chapters found in {NOTEBOOKS}"


@pytest.mark.parametrize("py", CHAPTERS, ids=lambda p: p.stem)
def test_pair_is_in_sync(py: Path):
    ipynb = py.with_suffix(".ipynb")
    assert ipynb.exists(), (
        f"{py.name} has no paired {ipynb.name}: run `jupytext --sync {py}`"
    )
    py_cells, nb_cells = cells(py), cells(ipynb)
    for index, (a, b) in enumerate(zip(py_cells, nb_cells, strict=False)):
        assert a == b, (
            f"{py.name} and {ipynb.name} differ at cell {index}: run `jupytext "
            f"--sync {py}` (or `make sync`)\n--- py:\n{a[1][:300]}\n--- "
            f"ipynb:\n{b[1][:300]}"
        )
    assert len(py_cells) == len(nb_cells), (
        f"{py.name} has {len(py_cells)} cells but {ipynb.name} has "
        f"{len(nb_cells)}: run `jupytext --sync {py}`"
    )


def test_every_ipynb_has_its_py():
    orphans = [
        nb.name
        for nb in NOTEBOOKS.glob("*.ipynb")
        if not nb.with_suffix(".py").exists()
    ]
    assert not orphans, f"notebooks without a paired .py: {orphans}"


@pytest.mark.parametrize("py", CHAPTERS, ids=lambda p: p.stem)
def test_stored_outputs_exist(py: Path):
    notebook = jupytext.read(py.with_suffix(".ipynb"))
    code = [c for c in notebook.cells if c.cell_type == "code"]
    unexecuted = [i for i, c in enumerate(code) if c.get("execution_count") is None]
    assert not unexecuted, (
        f"{py.with_suffix('.ipynb').name}: code cells {unexecuted} have no stored "
        "outputs; the site renders stored outputs (run `make book EXECUTE=1`)"
    )


def test_toc_lists_every_chapter():
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    listed = {
        Path(chapter["file"]).name
        for part in toc["parts"]
        for chapter in part["chapters"]
    }
    missing = sorted(py.stem for py in CHAPTERS if py.stem not in listed)
    assert not missing, f"chapters missing from book/_toc.yml: {missing}"


@pytest.mark.parametrize("py", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_opens_and_ends_as_a_lesson(py: Path):
    markdown = [text for kind, text in cells(py) if kind == "markdown"]
    opening = markdown[0]
    for item in ("**You will learn**", "**It assumes**", "**Time:**"):
        assert f"\n- {item}" in opening, f"{py.name}: its opening lacks {item}"
    # The summary runs from its heading to the exercises (a chart may sit inside).
    text = "\n\n".join(markdown)
    start = text.find("\n## Summary")
    assert start > 0, f"{py.name}: no ## Summary"
    ending = text[start:].split("\n## Exercises")[0]
    assert "You can now" in ending, f"{py.name}: its summary says no 'You can now'"
    if py != CHAPTERS[-1]:
        assert "**Next:**" in ending, f"{py.name}: its summary has no **Next:**"


@pytest.mark.parametrize("py", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_code_fits_the_page(py: Path):
    # The page's code column holds 84 characters at 1280 px; ruff leaves the
    # chapters' line length alone (their prose comments are laid out by hand).
    wide = [
        f"{py.name}:{number}: {len(line)} columns"
        for number, line in enumerate(py.read_text().splitlines(), 1)
        if not line.startswith("#") and len(line) > 84
    ]
    assert not wide, "\n".join(wide)


def printed_lines(notebook: dict) -> list[tuple[int, str]]:
    """(cell, line) of every stored text output a reader sees as plain text."""
    lines = []
    for index, cell in enumerate(notebook["cells"]):
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", ""))
            data = output.get("data", {})
            if "text/plain" in data and len(data) == 1:  # not a table or chart
                text += "".join(data["text/plain"])
            lines += [(index, line) for line in text.splitlines()]
    return lines


@pytest.mark.parametrize("py", CHAPTERS, ids=lambda p: p.stem)
def test_stored_outputs_fit_the_page(py: Path):
    notebook = json.loads(py.with_suffix(".ipynb").read_text())
    wide = [
        f"cell {index}: {len(line)} columns: {line[:60]}…"
        for index, line in printed_lines(notebook)
        if len(line) > 84
    ]
    assert not wide, "\n".join(wide)
