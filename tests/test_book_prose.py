"""Sentences of the chapters read against the output or the run beside them.

``test_book_figures`` holds every figure in the prose to a record or a cell that
prints it. These hold the prose's other claims about an output to that output: a
command line names the recorded run it describes and that run's settings, a
quotation from an output is in it, and the words a chapter puts on a measured
table ("far less than", "more than a year") fit the stored table.
"""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import jupytext
import nbformat
import pytest

from annotated_transformer.book import runs as book_runs
from annotated_transformer.runner import new_config
from annotated_transformer.tasks.base import flat_settings

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
COMMAND = re.compile(r"python -m annotated_transformer (\w+) train ([^`\n]*)")
INLINE = re.compile(r"(?<!`)`(?!`)[^`]*`")  # inline code, not a fence


def prose_commands(py: Path) -> list[tuple[str, list[str]]]:
    """(task, words) of every ``train`` command line in ``py``'s markdown."""
    found = []
    for cell in jupytext.read(py).cells:
        if cell.cell_type == "markdown":
            joined = re.sub(r"\\\n[#\s]*", " ", cell.source)  # continued lines
            # an inline command may wrap in the prose
            joined = INLINE.sub(lambda m: m[0].replace("\n", " "), joined)
            found += [(m[1], shlex.split(m[2])) for m in COMMAND.finditer(joined)]
    return found


def config_of(task: str, preset: str, settings: list[str]) -> dict:
    # a fine-tune names its pretraining's run; the book's is its record
    settings = [s.replace("init=runs/", "init=results/") for s in settings]
    return flat_settings(new_config(task, preset, settings))


def described(task: str, words: list[str]) -> tuple[str | None, dict]:
    """The run a command line trains (its ``--out`` name) and its config."""
    options = dict(zip(words[::2], words[1::2], strict=False))
    settings = [v for k, v in itertools.pairwise(words) if k == "--set"]
    out = options.get("--out")
    name = Path(out).name if out else None
    return name, config_of(task, options.get("--preset", "tiny"), settings)


COMMANDS = [
    (py.stem, task, words)
    for py in CHAPTERS
    for task, words in prose_commands(py)
    if not any(w.startswith("$") for w in words)  # a shell variable: spelt out
]


@pytest.mark.parametrize(
    "chapter, task, words", COMMANDS, ids=[" ".join(c[2]) for c in COMMANDS]
)
def test_a_command_names_the_recorded_run_it_describes(chapter, task, words):
    name, config = described(task, words)
    run = book_runs.BY_NAME.get(name)
    if run is not None:
        assert run.task == task, f"{chapter}: runs/{name} is a {run.task} run"
        wanted = config_of(run.task, run.preset, list(run.settings))
        assert config == wanted, f"{chapter}: runs/{name}'s settings differ"
    else:  # a run of the book's, trained into a folder of another name
        same = [
            r.name
            for r in book_runs.RUNS
            if r.task == task
            and config_of(r.task, r.preset, list(r.settings)) == config
        ]
        assert not same, f"{chapter}: --out runs/{name} trains the run {same}"


def test_the_command_check_refuses_a_run_under_another_name():
    e6 = ["--preset", "cpu", "--out", "runs/xl-vanilla-cpu"]
    e6 += ["--set", "dataset=enwik8_prefix"]
    with pytest.raises(AssertionError, match="e6-cpu"):
        test_a_command_names_the_recorded_run_it_describes("18", "lm", e6)
    alibi = ["--preset", "cpu", "--out", "runs/ladder-alibi-s0"]
    for setting in ("steps=1000", "eval_every=100", "seed=0", "block=modern"):
        alibi += ["--set", setting]
    alibi += ["--set", "positions=alibi"]
    test_a_command_names_the_recorded_run_it_describes("15", "lm", alibi)
    with pytest.raises(AssertionError, match="settings differ"):
        test_a_command_names_the_recorded_run_it_describes(
            "15", "lm", [*alibi, "--set", "kv_heads=1"]
        )


def stored(chapter: str) -> list[nbformat.NotebookNode]:
    path = ROOT / "notebooks" / f"{chapter}.ipynb"
    return nbformat.read(path, as_version=4).cells


def output_text(cell: nbformat.NotebookNode) -> str:
    """A code cell's stored text: its streams and its outputs' plain text."""
    parts = [
        out.get("text") or out.get("data", {}).get("text/plain", "")
        for out in cell.get("outputs", [])
    ]
    return " ".join(" ".join(parts).split())


def text_below(chapter: str, marker: str) -> tuple[str, str]:
    """The markdown cell holding ``marker`` and the stored output of the code cell
    after it."""
    cells = stored(chapter)
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown" and marker in cell.source:
            code = next(c for c in cells[i + 1 :] if c.cell_type == "code")
            return " ".join(cell.source.split()), output_text(code)
    raise AssertionError(f"{chapter} has no cell with {marker!r}")


def table_below(chapter: str, marker: str) -> list[list[str]]:
    """The rows (words) of the plain-text table printed before ``marker``'s cell."""
    cells = stored(chapter)
    at = next(
        i
        for i, c in enumerate(cells)
        if c.cell_type == "markdown" and marker in c.source
    )
    code = next(c for c in reversed(cells[:at]) if c.cell_type == "code")
    out = code.outputs[-1]
    text = out.get("data", {}).get("text/plain") or out.get("text", "")
    return [line.split() for line in text.splitlines() if line.strip()]


def test_the_reviews_quoted_are_among_those_shown():
    """Chapter 13's reading of the four worst-classified reviews quotes them."""
    prose, shown = text_below("13_classification_imdb", "## Where it goes wrong")
    quoted = re.findall(r'"([^"]+)"', prose)
    assert len(quoted) >= 3
    missing = [q for q in quoted if q not in shown]
    assert not missing, f"quoted but not among the reviews shown: {missing}"


def test_grouped_query_speed_grows_far_less_than_the_cache_shrinks():
    """Chapter 15: 'faster decoding, though by far less than the cache shrinks'."""
    marker = "though by far less than the cache"
    rows = table_below("15_the_transformer_today", marker)
    # pandas wraps the wide frame: the first block holds the cache, the second
    # the speed; each row starts with its index
    cache = {r[0]: int(r[-1]) for r in rows if r[0] in "012" and len(r) == 4}
    speed = {r[0]: int(r[-1]) for r in rows if r[0] in "012" and len(r) == 3}
    assert len(cache) == len(speed) == 3, rows
    cache_ratio, speed_ratio = cache["0"] / cache["2"], speed["2"] / speed["0"]
    assert speed_ratio > 1, "decoding is not faster with fewer key/value heads"
    assert speed_ratio < cache_ratio / 2, (speed_ratio, cache_ratio)


def test_the_training_times_read_as_the_table_says():
    """Chapter 19: on one CPU core the base model trains for weeks to months and
    the big one for more than a year; the gap to one GPU is more than three
    orders of magnitude."""
    marker = "the base model would train for weeks to months"
    rows = table_below("19_going_big", marker)
    hours = {
        " ".join(r[:-3]): [float(x) for x in r[-3:]]
        for r in rows
        if "this" in r or "H100" in r
    }
    week, year = 24 * 7, 24 * 365
    cpu = [v for k, v in hours.items() if k.startswith("this CPU")]
    gpu = [v for k, v in hours.items() if "40 % of peak" in k]
    assert len(cpu) == 2 and len(gpu) == 1, hours
    for rate, base, big in cpu:
        assert 2 * week <= base < year, base
        assert big > year, big
        assert gpu[0][0] / rate > 1000, (rate, gpu[0][0])


def chart_rows(chapter: str, marker: str) -> list[dict]:
    """The data of the chart stored by the code cell before ``marker``'s cell."""
    cells = stored(chapter)
    at = next(
        i
        for i, c in enumerate(cells)
        if c.cell_type == "markdown" and marker in c.source
    )
    code = next(c for c in reversed(cells[:at]) if c.cell_type == "code")
    specs = [
        spec
        for out in code.outputs
        for mime, spec in out.get("data", {}).items()
        if mime.startswith("application/vnd.vegalite")
    ]
    assert len(specs) == 1, f"{chapter}: no chart before {marker!r}"
    return [row for rows in specs[0]["datasets"].values() for row in rows]


def test_the_residual_stream_reads_as_its_chart_draws_it():
    """Chapter 17: both lines climb; the unscaled projections add roughly 2N = 24
    times the variance of the scaled initialisation."""
    rows = chart_rows("17_gpt2", "twelve blocks add roughly 2N = 24")
    lines: dict[str, list[float]] = {}
    for row in sorted(rows, key=lambda r: r["after block"]):
        lines.setdefault(row["init"], []).append(row["variance"])
    scaled, flat = lines["0.02 / √(2N)"], lines["0.02 everywhere"]
    assert len(scaled) == len(flat) == 13  # the embeddings, then 12 blocks
    for line in (scaled, flat):
        assert all(b > a for a, b in itertools.pairwise(line)), "a line falls"
    ratio = (flat[-1] - flat[0]) / (scaled[-1] - scaled[0])
    assert 24 / 2 < ratio < 24 * 2, ratio


def test_attention_costs_read_as_the_benchmark_measured_them():
    """Chapter 18's reading of the attention benchmark (time in ms, memory in
    MiB; explicit, fixed, sdpa, strided at n = 512 ... 8192, doubling)."""
    prose = next(
        c.source
        for c in stored("18_long_context")
        if c.cell_type == "markdown" and "Read the slopes" in c.source
    )
    assert "under a quarter of the fused kernel's time" in prose
    table = next(
        out.get("data", {}).get("text/plain", "")
        for c in stored("18_long_context")
        if c.cell_type == "code"
        for out in c.get("outputs", [])
        if "explicit  fixed" in out.get("data", {}).get("text/plain", "")
    )
    rows = [line.split() for line in table.splitlines() if line[:1].isdigit()]
    kernels = ("explicit", "fixed", "sdpa", "strided")
    time = {k: [float(r[1 + i]) for r in rows] for i, k in enumerate(kernels)}
    memory = {k: [float(r[5 + i]) for r in rows] for i, k in enumerate(kernels)}
    n = [int(r[0]) for r in rows]
    assert n == [512 * 2**i for i in range(len(n))] and n[-1] == 8192

    def per_doubling(values: list[float]) -> float:
        return (values[-1] / values[0]) ** (1 / (len(values) - 1))

    assert 3.5 < per_doubling(memory["explicit"]) < 4.5  # about 4
    assert per_doubling(time["explicit"]) > per_doubling(memory["explicit"])
    assert 1.5 < per_doubling(memory["sdpa"]) < 2.5  # linear
    assert per_doubling(time["sdpa"]) > 2  # faster than linear
    for kernel in ("fixed", "strided"):  # memory about n√n: 2√2 per doubling
        assert 2.4 < per_doubling(memory[kernel]) < 3.3, (kernel, memory)
        assert per_doubling(time[kernel]) < per_doubling(time["sdpa"]), time
        assert time[kernel][-1] < time["sdpa"][-1] / 4
        assert memory[kernel][-1] < memory["explicit"][-1] / 10
    smallest = [min(memory[k][i] for k in kernels) for i in range(len(n))]
    assert memory["sdpa"] == smallest, "the fused kernel's memory is not the least"
