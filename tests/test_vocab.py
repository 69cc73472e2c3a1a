"""Vocab: deterministic order, thresholds, unknowns, JSON round trip."""

from collections import Counter

import pytest

from annotated_transformer.data.vocab import SPECIALS, Vocab

SENTENCES = [
    ["a", "dog", "runs", "."],
    ["a", "cat", "sleeps", "."],
    ["the", "dog", "and", "the", "cat", "."],
    ["zebra"],
]


def test_order_is_specials_then_frequency_then_alphabetical():
    vocab = Vocab.build(SENTENCES)
    counts = Counter(t for s in SENTENCES for t in s)
    expected = sorted(counts, key=lambda t: (-counts[t], t))
    assert vocab.itos == [*SPECIALS, *expected]
    assert vocab.itos[len(SPECIALS) :][:4] == [
        ".",
        "a",
        "cat",
        "dog",
    ]  # 3, then 2, 2, 2
    assert all(vocab.stoi[t] == i for i, t in enumerate(vocab.itos))
    assert len(vocab) == len(SPECIALS) + len(counts)


def test_same_data_any_order_gives_same_ids():
    assert Vocab.build(SENTENCES).itos == Vocab.build(SENTENCES[::-1]).itos


def test_min_freq_and_max_size():
    vocab = Vocab.build(SENTENCES, min_freq=2)
    assert set(vocab.itos[len(SPECIALS) :]) == {".", "a", "cat", "dog", "the"}
    small = Vocab.build(SENTENCES, max_size=6)
    assert small.itos == [*SPECIALS, ".", "a"]
    assert len(Vocab.build(SENTENCES, max_size=len(SPECIALS))) == len(SPECIALS)


def test_encode_decode_and_unknowns():
    vocab = Vocab.build(SENTENCES)
    tokens = ["the", "cat", "runs", "."]
    assert vocab.decode(vocab.encode(tokens)) == tokens
    assert vocab.encode(["the", "unicorn"]) == [vocab["the"], vocab.stoi["<unk>"]]
    assert vocab.default_index == vocab.stoi["<unk>"] == 1
    assert "unicorn" not in vocab and "cat" in vocab


def test_specials_seen_in_data_are_not_repeated():
    vocab = Vocab.build([["<unk>", "x"]])
    assert vocab.itos == [*SPECIALS, "x"]


def test_save_load_round_trip(tmp_path):
    vocab = Vocab.build([*SENTENCES, ["Zwölf", "Männer", "🚀"]])
    vocab.save(tmp_path / "vocab.json")
    loaded = Vocab.load(tmp_path / "vocab.json")
    assert loaded.itos == vocab.itos and loaded.stoi == vocab.stoi
    assert loaded.default == vocab.default


def test_errors():
    vocab = Vocab.build(SENTENCES)
    assert len(vocab) == 13
    with pytest.raises(
        ValueError, match="id 13 is outside the vocabulary of size 13"
    ):
        vocab.decode([5, 13])
    with pytest.raises(ValueError, match="no default"):
        Vocab(["a", "b"], default=None).encode(["c"])
    with pytest.raises(
        ValueError, match="max_size=2 leaves no room for the 4 special"
    ):
        Vocab.build(SENTENCES, max_size=2)
    with pytest.raises(ValueError, match="repeated"):
        Vocab(["a", "a"], default=None)
    with pytest.raises(ValueError, match="min_freq"):
        Vocab.build(SENTENCES, min_freq=0)
