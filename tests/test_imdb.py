"""IMDb loading from archives and folders, tokenization and the validation split."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from annotated_transformer.data import imdb


@pytest.fixture(autouse=True)
def own_cache(request, tmp_path, monkeypatch):
    """Synthetic archives keep their parsed JSON in a temporary
    cache, not the user's."""
    if "mirror" not in request.fixturenames:
        monkeypatch.setenv("AT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def mirror(imdb_mirror: Path) -> Path:
    return imdb_mirror


def test_real_splits_are_complete_and_balanced(mirror):
    for split in imdb.SPLITS:
        texts, labels = imdb.load_imdb(split, mirror=mirror)
        assert len(texts) == len(labels) == 25_000
        assert labels.count(1) == labels.count(0) == 12_500
        assert labels == sorted(labels)  # negatives first, then positives
    texts, _ = imdb.load_imdb("train", mirror=mirror)
    # aclImdb/train/neg/0_3.txt, the first file in (label, id) order
    assert texts[0].startswith(
        "Story of a man who has unnatural feelings for a pig."
    )


def make_copy(root: Path, canonical: bool) -> Path:
    """A tiny aclImdb folder: 2 reviews per label and split (+ what
    the canonical tar adds)."""
    for split in imdb.SPLITS:
        for sentiment, rating in (("pos", 9), ("neg", 2)):
            folder = root / "aclImdb" / split / sentiment
            folder.mkdir(parents=True)
            for review_id in (10, 2):  # ids sort numerically, not as text
                text = f"{split} {sentiment} {review_id}<br />Ünïcode, don't!"
                (folder / f"{review_id}_{rating}.txt").write_text(
                    text, encoding="utf-8"
                )
        (root / "aclImdb" / split / "urls_pos.txt").write_text(
            "http://example.org\n"
        )
    if canonical:
        (root / "aclImdb" / "train" / "unsup").mkdir()
        (root / "aclImdb" / "train" / "unsup" / "7_0.txt").write_text("unlabelled")
        (root / "aclImdb" / "train" / "labeledBow.feat").write_text("0:1")
    return root


@pytest.mark.parametrize("canonical", [False, True])
def test_archive_and_folder_agree(tmp_path, monkeypatch, canonical):
    monkeypatch.setattr(imdb, "PER_CLASS", 2)
    folder = make_copy(tmp_path / "copy", canonical)
    archive = tmp_path / "reviews.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder / "aclImdb", arcname="aclImdb")
    from_folder = imdb.load_imdb("train", path=folder)
    from_archive = imdb.load_imdb("train", path=archive)
    assert from_folder == from_archive
    texts, labels = from_archive
    assert labels == [0, 0, 1, 1]
    assert texts[0] == "train neg 2<br />Ünïcode, don't!"
    # the mirror's extracted folder is found too
    (tmp_path / "mirror" / "imdb").mkdir(parents=True)
    (folder / "aclImdb").rename(tmp_path / "mirror" / "imdb" / "aclImdb")
    assert imdb.load_imdb("test", mirror=tmp_path / "mirror")[1] == [0, 0, 1, 1]


def test_parsed_archive_is_cached_as_json(tmp_path, monkeypatch):
    monkeypatch.setattr(imdb, "PER_CLASS", 2)
    archive = tmp_path / "reviews.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(make_copy(tmp_path / "copy", False) / "aclImdb", arcname="aclImdb")
    first = imdb.load_imdb("test", path=archive)
    (parsed,) = (tmp_path / "cache" / "imdb").glob("parsed-*.json")
    imdb._load_all.cache_clear()
    read_reviews = imdb._read_reviews

    def no_parsing(source):
        raise AssertionError("the archive was parsed again")

    monkeypatch.setattr(imdb, "_read_reviews", no_parsing)
    assert imdb.load_imdb("test", path=archive) == first
    imdb._load_all.cache_clear()
    monkeypatch.setattr(imdb, "_read_reviews", read_reviews)
    # a damaged or malformed cache file is ignored and rewritten
    bad = ['{"train": [', "{}", '{"train": [[], []]}', '{"train": 1, "test": 2}']
    for text in bad:
        parsed.write_text(text)
        imdb._load_all.cache_clear()
        assert imdb.load_imdb("test", path=archive) == first
        assert parsed.read_text().startswith('{"train": [[')


def test_incomplete_copy_is_rejected(tmp_path, monkeypatch):
    monkeypatch.setattr(imdb, "PER_CLASS", 2)
    folder = make_copy(tmp_path, canonical=False)
    (folder / "aclImdb" / "test" / "pos" / "2_9.txt").unlink()
    with pytest.raises(ValueError, match="1 positive"):
        imdb.load_imdb("test", path=folder)


def test_missing_data_says_what_to_pass(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"aclImdb_v1\.tar\.gz"):
        imdb.load_imdb("train", path=tmp_path / "nowhere.tar.gz")
    with pytest.raises(ValueError, match="'train' or 'test'"):
        imdb.load_imdb("unsup")


def test_tokenize():
    text = "A GREAT film!<br /><br />I didn't expect it...<BR/>Naïve? 10/10_"
    assert imdb.tokenize(text) == [
        "a", "great", "film", "!", "i", "didn't", "expect", "it", "naïve", "?",
        "10", "10",
    ]  # fmt: skip


def test_train_val_split_is_seeded_and_disjoint():
    texts = [f"review {i}" for i in range(100)]
    labels = [i % 2 for i in range(100)]
    (train, train_labels), (val, val_labels) = imdb.train_val_split(
        texts, labels, 20, seed=1
    )
    assert len(val) == 20 and len(train) == 80
    assert sorted(train + val) == sorted(texts)
    for part, part_labels in ((train, train_labels), (val, val_labels)):
        assert [labels[texts.index(t)] for t in part] == part_labels
    assert imdb.train_val_split(texts, labels, 20, seed=1)[1][0] == val
    assert imdb.train_val_split(texts, labels, 20, seed=2)[1][0] != val
    with pytest.raises(ValueError, match="val_size"):
        imdb.train_val_split(texts, labels, 100)


def test_vocabulary_and_truncated_encoding():
    train = [["great", "film", "!"], ["bad", "film"], ["film", "great"]]
    vocab = imdb.build_vocab(train, max_size=6)  # 4 specials + the 2 most frequent
    assert vocab.itos[4:] == ["film", "great"]
    ids = imdb.encode([["great", "film", "bad", "film"]], vocab, max_len=3)
    assert ids == [[vocab["great"], vocab["film"], vocab["<unk>"]]]
    with pytest.raises(ValueError, match="max_len"):
        imdb.encode(train, vocab, max_len=0)


def test_head_and_tail_encoding():
    words = [f"w{i}" for i in range(10)]
    vocab = imdb.build_vocab([words], max_size=14)
    long_review, short_review = words, words[:4]
    ids = imdb.encode([long_review, short_review], vocab, max_len=5, tail=3)
    assert ids[0] == vocab.encode(["w0", "w1", "w7", "w8", "w9"])  # first 2, last 3
    assert ids[1] == vocab.encode(short_review)  # fits: whole, nothing repeated
    assert imdb.encode([words[:5]], vocab, max_len=5, tail=3) == [
        vocab.encode(words[:5])
    ]
    assert imdb.encode([words[:6]], vocab, max_len=5, tail=3)[0] == vocab.encode(
        ["w0", "w1", "w3", "w4", "w5"]
    )
    assert imdb.encode([long_review], vocab, max_len=5, tail=0) == [
        vocab.encode(words[:5])
    ]
    for bad in (-1, 5):
        with pytest.raises(ValueError, match="tail"):
            imdb.encode([long_review], vocab, max_len=5, tail=bad)
