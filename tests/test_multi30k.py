"""Multi30k loading, tokenization and English detokenization, on the shared data."""

from __future__ import annotations

from pathlib import Path

import pytest
import sacrebleu

from annotated_transformer.data import multi30k


@pytest.fixture(scope="module")
def mirror(multi30k_mirror: Path) -> Path:
    return multi30k_mirror


@pytest.mark.parametrize(
    ("split", "count"),
    [
        ("train", 29_000),
        ("val", 1_014),
        ("test2016", 1_000),
        ("test2017", 1_000),
        ("test2018", 1_071),
        ("mscoco2017", 461),
    ],
)
def test_split_sizes(mirror, split, count):
    de, en = multi30k.load_split(split, mirror=mirror)
    assert len(de) == len(en) == count
    assert all(s.strip() for s in de) and all(s.strip() for s in en)
    assert not any("\n" in s for s in de + en)


def test_first_validation_pair(mirror):
    de, en = multi30k.load_split("val", mirror=mirror)
    assert de[0].startswith("Eine Gruppe von Männern")
    assert en[0].startswith("A group of men")


def test_unknown_split():
    with pytest.raises(ValueError, match="test2016"):
        multi30k.load_split("test")


def test_tokenize_matches_spacy_rules():
    (tokens,) = multi30k.tokenize(["Zwei Frauen in pinkfarbenen T-Shirts."], "de")
    assert tokens == ["Zwei", "Frauen", "in", "pinkfarbenen", "T-Shirts", "."]
    (tokens,) = multi30k.tokenize(["Dogs aren't  cats."], "en", lower=True)
    assert tokens == ["dogs", "are", "n't", "cats", "."]
    with pytest.raises(ValueError, match="language"):
        multi30k.tokenize(["x"], "fr")


def test_detokenize_rules():
    tokens = [
        "A",
        "brown",
        "-",
        "haired",
        "dog",
        "'s",
        "toy",
        "(",
        "red",
        ")",
        "is",
        "n't",
        "!",
    ]
    assert multi30k.detokenize(tokens) == "A brown-haired dog's toy (red) isn't!"
    quoted = ["a", "sign", "says", '"', "stop", '"', ",", "ok", "."]
    assert multi30k.detokenize(quoted) == 'a sign says "stop", ok.'
    assert multi30k.detokenize([]) == ""


def test_detokenize_restores_real_references(mirror):
    # Independent reference: the raw sentences themselves (with
    # doubled spaces collapsed).
    _, en = multi30k.load_split("test2016", mirror=mirror)
    restored = [multi30k.detokenize(t) for t in multi30k.tokenize(en, "en")]
    originals = [" ".join(s.split()) for s in en]
    exact = sum(a == b for a, b in zip(originals, restored, strict=True)) / len(en)
    assert exact > 0.99
    assert sacrebleu.corpus_bleu(restored, [originals]).score > 99.5


def test_vocabularies_come_from_train_with_min_freq_two():
    train_de = [["ein", "Hund", "läuft"], ["ein", "Hund"], ["Katze"]]
    train_en = [["a", "dog", "runs"], ["a", "dog"], ["cat"]]
    src, tgt = multi30k.build_vocabs(train_de, train_en)
    assert src.itos[4:] == ["Hund", "ein"] and tgt.itos[4:] == [
        "a",
        "dog",
    ]  # seen twice
    assert src.encode(["Katze", "Hund"]) == [src["<unk>"], src["Hund"]]
    assert len(multi30k.build_vocabs(train_de, train_en, min_freq=1)[0]) == 4 + 4
