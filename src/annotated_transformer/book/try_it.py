"""Try it: the chapters' cells where a reader types their own input and a published
model answers.

Each function loads the model it needs by itself: the published weights of a
run record in ``results/`` (seconds, once per kernel), so a try-it cell runs on
its own, straight after the chapter opens, with no cell above it run. It answers
with the model's output; input the model knows little of gets one warning line
first (:mod:`annotated_transformer.evaluation.coverage`), and bad input one line
that says what was wrong instead of a traceback.

Saving a chapter keeps its try-it cells (tagged ``try-it``) as stored
(:mod:`annotated_transformer.book.jupyter`): what a reader types and what the model
answers stay in the open notebook.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import altair as alt
from torch import nn

from annotated_transformer import records
from annotated_transformer.book.explore import (
    attention_explorer,
    translate_with_attention,
)
from annotated_transformer.book.page import wrap
from annotated_transformer.paths import results_dir
from annotated_transformer.tasks.base import Task


@functools.cache
def published(record: str) -> tuple[Task, nn.Module]:
    """The task and the model (eval mode) of the run record ``results/<record>``,
    loaded once per kernel."""
    return records.load_model(results_dir() / record)


def answered(answer: Callable[[], Any]) -> Any:
    """``answer()``, each warning it gave printed first as one line; when the
    reader's input is wrong, one line that says so (and None): a try-it cell never
    shows a traceback for bad input."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            result = answer()
    except ValueError as error:
        print(f"error: {' '.join(str(error).split())}")
        return None
    for warning in caught:
        print(wrap(f"warning: {warning.message}", indent=" " * 9))
    return result


def translate(
    sentence: str, beam: int | None = None, record: str = "translate-cpu"
) -> alt.Chart | None:
    """A reader's German ``sentence`` → the published translator's beam
    translation (printed; ``beam`` by default the record's) and an explorable map
    of its attention (returned; cross-attention first)."""
    task, model = published(record)
    beam = task.config.beam if beam is None else beam

    def answer() -> tuple[str, alt.Chart]:
        english, *kept = translate_with_attention(task, model, sentence, beam)
        return english, attention_explorer([(sentence.strip()[:40], *kept)])

    result = answered(answer)
    if result is None:
        return None
    english, chart = result
    print(wrap(f"German:  {sentence.strip()}\nEnglish: {english}", indent=" " * 9))
    return chart


def classify(review: str, record: str = "imdb-cpu") -> None:
    """A reader's ``review`` → the published classifier's label and its
    probability, as ``classify predict`` prints them."""
    task, model = published(record)
    result = answered(lambda: task.predict(model, [review])[0])
    if result is not None:
        label, probability = result.split("\t")
        print(f"{label} (probability {float(probability):.2f})")


def continue_text(prompt: str, record: str, **options: Any) -> None:
    """A reader's ``prompt`` and the published language model's continuation,
    sampled as ``lm predict`` samples (``options``: length, temperature, top_k,
    seed), wrapped to the page."""
    task, model = published(record)
    result = answered(lambda: task.predict(model, [prompt], **options)[0])
    if result is not None:
        print(wrap(result))
