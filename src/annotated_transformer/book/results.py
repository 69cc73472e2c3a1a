"""The book's Results page, generated from the run records in ``results/``, and
the check of the figures the text cites from them.

``python -m annotated_transformer.book.results`` writes ``book/results.ipynb``:
one table of every record (what it scored, the figure, steps, minutes, machine,
command) and the learning curves (Altair, stored as the page's output: a
Vega-Lite MIME bundle, drawn offline like the chapters' charts, see
:mod:`~annotated_transformer.book.rendering`).
``--check`` only says whether the page is up to date (a unit test does the
same), so a new record cannot leave the page behind.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import altair as alt
import nbformat
import pandas as pd

from annotated_transformer.book.rendering import mimebundle
from annotated_transformer.paths import repository_root
from annotated_transformer.records import (
    HEADLINE,
    all_records,
    headline,
    lookup,
    machine_line,
)
from annotated_transformer.tasks import TASKS

ROOT = repository_root(Path(__file__).parent) or Path.cwd()
PAGE = ROOT / "book" / "results.ipynb"
MODULE = "annotated_transformer.book.results"

INTRO = """\
# Results

Every figure the book cites comes from a **run record** in `results/NAME/`: the
resolved config, the exact command, the git commit, the machine, the training
time, the final metrics, `history.csv` and `train.log`; for runs a chapter
evaluates live, the weights too (`model.safetensors`).
`python -m annotated_transformer record runs/X --name X` makes one from a
finished run, and a chapter loads a record instead of training its run again.
This page is generated from the records
(`python -m annotated_transformer.book.results`); a test fails when it is
stale.

## What the figures are

Each record is scored once, when its run finishes, on the split its name says:

- **test**: data the run never saw while training or choosing its final weights:
  all of IMDb's test reviews (accuracy), Multi30k's test2016 (sacreBLEU, with the
  beam and length penalty in the record's config);
- **validation**: the language models' corpora (Tiny Shakespeare, a prefix of
  enwik8) have no test split of their own here, so their bits per byte are over
  the whole validation split; the masked language model is scored on the hidden
  words of the validation reviews.

*Steps* counts optimiser steps (a run set in epochs says how many); *minutes*
is the time of those steps, validation excluded, on the machine named; where a
run was resumed elsewhere, the machine and the command from that step on follow."""

CURVES = """\
## Learning curves

The validation score of each recorded run, at every step where it was measured, one
chart for the runs of each chapter."""

EMPTY = "No run has been recorded yet."


# A figure in prose checked against a record: the number, then an HTML comment
# naming the record and a dotted path in its record.json (invisible on GitHub and
# on the site), e.g. "88.12 %<!-- record imdb-cpu metrics.test.accuracy % -->";
# a "%" at the comment's end reads the record's fraction as per cent, and names
# joined by "+" cite the mean of those records' values (seeds of one run, e.g.
# "<!-- record ladder-rope-s0+ladder-rope-s1 metrics.test.bits_per_byte -->").
# Spaces, "%" and bold markers may sit between the number and the comment.
CITED = re.compile(
    r"(?P<number>\d[\d,]*(?:\.\d+)?)[\s%*]*"
    r"<!--\s*record\s+(?P<name>[\w.+-]+)\s+(?P<path>[\w.]+)\s*(?P<percent>%)?\s*-->"
)


def cited_figures(text: str) -> list[re.Match[str]]:
    """Every figure in ``text`` that names its record (see ``CITED``)."""
    return list(CITED.finditer(text))


def check_citations(text: str, root: str | Path | None = None) -> list[str]:
    """What disagrees between ``text``'s cited figures and their records, one
    line each (the figure as written, the record's value to the same decimals)."""
    records = {record["name"]: record for _, record in all_records(root)}
    markers = re.finditer(r"<!--\s*record\b[^>]*-->", text)
    cited = {m.end() for m in cited_figures(text)}
    problems = [
        f"{m[0]}: not right after a figure (write the number, then the comment)"
        for m in markers
        if m.end() not in cited
    ]
    for match in cited_figures(text):
        name, path, written = match["name"], match["path"], match["number"]
        names = name.split("+")
        if missing := [n for n in names if n not in records]:
            problems.append(f"{written}: no record {missing[0]!r} in results/")
            continue
        try:
            value = sum(float(lookup(records[n], path)) for n in names) / len(names)
        except (KeyError, TypeError, ValueError):
            problems.append(f"{written}: record {name!r} has no number at {path!r}")
            continue
        value *= 100 if match["percent"] else 1
        decimals = len(written.partition(".")[2])
        expected = f"{value:,.{decimals}f}"
        expected = expected if "," in written else expected.replace(",", "")
        if expected != written:
            problems.append(f"{written}: record {name} {path} is {expected}")
    return problems


METRICS = {
    "accuracy": "accuracy",
    "bleu": "sacreBLEU",
    "bits_per_byte": "bits per byte",
}


def shown(task: str, value: float) -> str:
    """A headline figure as the book writes it: accuracy in per cent, BLEU and
    bits per byte as numbers, to the record's decimals."""
    key, decimals = HEADLINE[task]
    if "accuracy" in key:
        return f"{100 * value:.{decimals - 2}f}\u00a0%"  # no break before %
    return f"{value:.{decimals}f}"


def scored(record: dict[str, Any]) -> str:
    """What a record's headline figure measures, e.g. ``test2016 sacreBLEU``."""
    metric, _ = headline(record)
    section, _, key = metric.partition(".")
    split = record["metrics"][section].get("split", section)
    where = split if split.startswith("test") else "validation"
    return f"{where} {METRICS[key]}"


def steps(record: dict[str, Any]) -> str:
    """Optimiser steps, and the epochs of a run set in epochs, or the budget
    of a run set in minutes (the epochs are then its longest)."""
    config = record["config"]
    if budget := config.get("budget_minutes"):
        return f"{record['steps']:,} (`budget_minutes={budget:g}`)"
    epochs = config.get("epochs") or 0
    return f"{record['steps']:,}" + (f" ({epochs} epochs)" if epochs else "")


def commands(record: dict[str, Any], prefix: str) -> str:
    """The command that started the run, and each that resumed it."""
    started = f"`{record['command'].removeprefix(prefix)}`"
    resumed = [
        f"from step {part['step']:,}: `{part['command'].removeprefix(prefix)}`"
        for part in record.get("resumed") or []
    ]
    return "; ".join([started, *resumed])


def table(records: Sequence[dict[str, Any]]) -> str:
    """A markdown row per record: what it scored, the figure, steps, minutes and
    machine; then a row per record with its commands (without
    ``python -m annotated_transformer``, said once)."""
    from annotated_transformer.book.runs import BY_NAME

    prefix = "python -m annotated_transformer "
    rows = [
        "| Run (chapters) | Scored | Value | Steps | Minutes | Machine |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in records:
        _, value = headline(r)
        listed = BY_NAME.get(r["name"])
        chapters = ", ".join(f"{c:02d}" for c in listed.chapters) if listed else ""
        rows.append(
            f"| `{r['name']}` ({chapters or r['task']}) | {scored(r)} "
            f"| {shown(r['task'], value)} | {steps(r)} | {r['train_minutes']:.1f} "
            f"| {machine_line(r)} |"
        )
    rows += [
        "",
        f"The commands that trained them, each after `{prefix.strip()}`:",
        "",
        "| Run | Command |",
        "|---|---|",
    ]
    rows += [f"| `{r['name']}` | {commands(r, prefix)} |" for r in records]
    return "\n".join(rows)


def curves_data(root: str | Path | None = None) -> pd.DataFrame:
    """Long form: one row per run and validation step (chapter, run, step,
    metric, value); ``chapter``: the first chapter that reads the run."""
    from annotated_transformer.book.runs import BY_NAME

    frames = []
    for folder, record in all_records(root):
        metric = TASKS[record["task"]].score[0]
        history = pd.read_csv(folder / "history.csv").dropna(subset=[metric])
        listed = BY_NAME.get(record["name"])
        chapter = min(listed.chapters) if listed and listed.chapters else 0
        frames.append(
            pd.DataFrame(
                {
                    "chapter": chapter,
                    "run": record["name"],
                    "step": history["step"],
                    "metric": metric,
                    "value": history[metric],
                }
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def learning_curves(root: str | Path | None = None) -> alt.VConcatChart:
    """A chart per chapter and metric: the validation score of each of its
    recorded runs against the optimiser step, a line per run."""
    data = curves_data(root)
    charts = []
    for (chapter, metric), part in data.groupby(["chapter", "metric"], sort=True):
        where = f"chapter {chapter:02d}" if chapter else "other runs"
        legend = alt.Legend(orient="bottom", columns=2, labelLimit=260)
        charts.append(
            alt.Chart(part, title=f"{where}: {metric} during training")
            .mark_line(point=True)
            .encode(
                x=alt.X("step:Q", title="optimiser step"),
                y=alt.Y("value:Q", title=metric, scale=alt.Scale(zero=False)),
                color=alt.Color(
                    "run:N",
                    title=None,
                    legend=legend,
                    scale=alt.Scale(scheme="tableau20"),
                ),
                tooltip=["run", "step", alt.Tooltip("value:Q", format=".4f")],
            )
            .properties(width=460, height=200)
        )
    return alt.vconcat(*charts).resolve_scale(color="independent")


def notebook(root: str | Path | None = None) -> nbformat.NotebookNode:
    """The Results page: intro, table and curves (code and stored output)."""
    root = Path(root) if root is not None else ROOT / "results"
    records = [record for _, record in all_records(root)]
    new = nbformat.v4
    cells = [new.new_markdown_cell(INTRO)]
    cells.append(new.new_markdown_cell(table(records) if records else EMPTY))
    if records:
        source = f"from {MODULE} import learning_curves\n\nlearning_curves()"
        code = new.new_code_cell(source, execution_count=1)
        # what the kernel shows: the spec alone, no script and no CDN
        chart = mimebundle(learning_curves(root).to_dict())
        code.outputs = [
            new.new_output(
                "execute_result",
                chart | {"text/plain": "alt.VConcatChart(...)"},
                execution_count=1,
            )
        ]
        cells += [new.new_markdown_cell(CURVES), code]
    for index, cell in enumerate(cells):
        cell["id"] = f"results-{index}"  # the file changes only with the records
    page = new.new_notebook(cells=cells)
    page.metadata = {
        "kernelspec": {
            "display_name": "Python 3",
            "language": "python",
            "name": "python3",
        },
        "language_info": {"name": "python"},
    }
    return page


def render(root: str | Path | None = None) -> str:
    return nbformat.writes(notebook(root)) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("--check", action="store_true", help="is the page stale?")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(f"{PAGE} is stale: run python -m {MODULE}")
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
