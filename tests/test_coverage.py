"""The out-of-data warning: counted by hand, and as the tasks give it."""

from __future__ import annotations

import warnings

import pytest

from annotated_transformer.book import try_it
from annotated_transformer.data.vocab import Vocab
from annotated_transformer.evaluation.coverage import (
    BeyondData,
    beyond_data,
    unknown_units,
)

VOCAB = Vocab(["<unk>", "<0xF0>", "▁Hund", "▁spielt", "."])


def test_unknown_units_are_missing_unk_or_byte_pieces() -> None:
    pieces = ["▁Hund", "<0xF0>", "▁Katze", "<unk>", ".", "<0xF0>"]
    # by hand: <0xF0> twice (bytes), ▁Katze (missing), <unk>
    assert unknown_units(pieces, VOCAB) == ["<0xF0>", "▁Katze", "<unk>", "<0xF0>"]


@pytest.mark.parametrize(
    ("pieces", "warned"),
    [
        (["▁Hund", "▁spielt", "."], False),  # all known
        (["▁Hund", "<0xF0>"], False),  # half unknown: not most
        (["▁Hund", "<0xF0>", "<0x9F>"], True),  # 2 of 3
        ([], False),
    ],
)
def test_a_line_only_when_most_units_are_unknown(
    pieces: list[str], warned: bool
) -> None:
    line = beyond_data(pieces, VOCAB, unit="pieces", data="captions")
    assert (line is not None) == warned
    if warned:
        assert line.startswith(f"2 of the {len(pieces)} pieces are unknown")
        assert "\n" not in line


def test_emoji_german_is_flagged_and_german_is_not() -> None:
    task, model = try_it.published("translate-cpu")
    emoji = "🐶🎾🌳🌞"  # four characters the German captions never hold
    with pytest.warns(BeyondData, match="sentence 1: 16 of the 16 pieces"):
        task.predict(model, [emoji])  # 4 emoji x 4 UTF-8 bytes each
    with warnings.catch_warnings():
        warnings.simplefilter("error", BeyondData)
        task.predict(model, ["Ein Hund spielt im Schnee."])


def test_a_review_of_few_known_words_is_flagged(capsys) -> None:
    task, model = try_it.published("imdb-cpu")
    with pytest.warns(BeyondData, match="review 1: "):
        task.predict(
            model, ["Zwei Hunde spielen im Schnee und sind sehr glücklich"]
        )
    try_it.classify("🐶🎾🌳🌞")  # no words at all: one line, not "empty"
    out = capsys.readouterr().out
    assert out.startswith("error: review 1 has no words") and out.count("\n") == 1


def test_try_it_prints_the_warning_before_the_answer(capsys) -> None:
    try_it.translate("🐶🎾🌳🌞")
    out = capsys.readouterr().out
    assert out.startswith("warning: sentence 1: 16 of the 16 pieces")
    assert out.index("warning:") < out.index("English:")


def test_try_it_turns_bad_input_into_one_line(capsys) -> None:
    def bad() -> None:
        raise ValueError("review 1 is empty or blank:\n give some text")

    assert try_it.answered(bad) is None
    assert (
        capsys.readouterr().out
        == "error: review 1 is empty or blank: give some text\n"
    )
    assert try_it.answered(lambda: 42) == 42
