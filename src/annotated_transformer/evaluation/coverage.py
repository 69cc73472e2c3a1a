"""How much of an input a model knows: the one line that says an input lies beyond
its training data.

A trained model answers every input in the same voice. Its softmax gives some label
or some next token the largest share whatever it was given: emoji read as German, a
review in a language it never saw. Nothing in the output says that the input was
unlike anything it learned from. What the model does know is its vocabulary, so the
check here is the simplest honest one: the share of the input's units (a
translator's pieces, a classifier's words) that are learned units. When most are
not, :func:`beyond_data` returns a line that says so, and the task warns with it
(:class:`BeyondData`).

A learned unit is in the vocabulary and is neither ``<unk>`` nor a byte piece
(``<0xF0>``: how a byte-level BPE spells a character it never met, one byte at a
time).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Container, Sequence

# A byte-fallback piece of a byte-level BPE, e.g. <0xF0>.
BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")
UNKNOWN = "<unk>"


class BeyondData(UserWarning):
    """Most of an input is unknown to the model: its answer is a guess."""


def unknown_units(units: Sequence[str], vocab: Container[str]) -> list[str]:
    """The units of ``units`` (in order, repeats kept) that are not learned:
    missing from ``vocab``, ``<unk>``, or a byte piece."""
    return [
        u
        for u in units
        if u == UNKNOWN or u not in vocab or BYTE_PIECE.fullmatch(u) is not None
    ]


def beyond_data(
    units: Sequence[str], vocab: Container[str], *, unit: str, data: str
) -> str | None:
    """One line when more than half of ``units`` are unknown (see
    :func:`unknown_units`), else None. ``unit`` names a unit in the plural
    ("pieces", "words"); ``data`` what the model learned from."""
    unknown = len(unknown_units(units, vocab))
    if not units or 2 * unknown <= len(units):
        return None
    return (
        f"{unknown} of the {len(units)} {unit} are unknown to the model: this "
        f"input is unlike {data}, so the answer below is a guess"
    )


def warn_beyond_data(
    units: Sequence[str], vocab: Container[str], *, item: str, unit: str, data: str
) -> None:
    """Warn (:class:`BeyondData`) when :func:`beyond_data` has a line for the
    input ``item`` (e.g. "sentence 2")."""
    line = beyond_data(units, vocab, unit=unit, data=data)
    if line is not None:
        warnings.warn(f"{item}: {line}", BeyondData, stacklevel=3)
