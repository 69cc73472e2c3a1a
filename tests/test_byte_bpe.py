"""Byte-level BPE against GPT-2's file format and Hugging Face ``tokenizers``.

The reference vocabularies are trained here by ``tokenizers`` itself (its ByteLevel
pre-tokenizer, GPT-2's setup) and saved in GPT-2's published format, vocab.json +
merges.txt: no network is needed, and the book's tokenizer only reads the files.
"""

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from annotated_transformer.data.byte_bpe import ByteBPE, byte_pieces, byte_stand_ins

EOT = "<|endoftext|>"
CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's what they'd said.",
    "Der schnelle braune Fuchs springt über den faulen Hund. Größe, Maß, Übung.",
    "Les élèves ont répondu: « déjà vu », naïve café, façade. Ça coûte 12,50 €.",
    "Tiếng Việt có dấu. Ελληνικά γράμματα. Русский текст. 日本語のテキスト。",
    "Emoji 🙂👍🏽, a family 👨‍👩‍👧, a flag 🇩🇪!   Spaces,\ttabs\n\nand lines 2024.",
]
TEXTS = [
    "Hello world! It's a test, isn't it? We've 3 dogs and 1,234 cats.",
    "Schöne Grüße aus München: Straße, Bäcker, Öl — 100 % sicher.",
    "Crème brûlée à la française; señor Muñoz; Dvořák; Ångström.",
    "Party 🎉🎉 with 👩🏾‍💻 coders 🇯🇵 and ❤️ plus\n\n  indented   text  ",
    f"one document{EOT}the next one{EOT}",
]


def byte_level() -> Tokenizer:
    """An empty BPE with GPT-2's byte-level pre-tokenizer."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return tokenizer


def trainer(vocab_size: int, special: list[str]) -> trainers.BpeTrainer:
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    return trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=alphabet,
        show_progress=False,
    )


def reference(folder, vocab: str) -> Tokenizer:
    files = (str(folder / vocab), str(folder / "merges.txt"))
    tokenizer = byte_level()
    tokenizer.model = models.BPE.from_file(*files)
    tokenizer.add_special_tokens([EOT])
    return tokenizer


@pytest.fixture(scope="module")
def gpt2_files(tmp_path_factory):
    """vocab.json + merges.txt trained by tokenizers; vocab_last.json numbers the
    tokens as GPT-2 does (bytes, merges, then <|endoftext|> last) instead of the
    trainer's specials first."""
    folder = tmp_path_factory.mktemp("byte_bpe")
    tokenizer = byte_level()
    tokenizer.train_from_iterator(CORPUS * 20, trainer(700, [EOT]))
    tokenizer.model.save(str(folder))
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    assert vocab[EOT] == 0
    last = {t: i - 1 for t, i in vocab.items() if t != EOT} | {EOT: len(vocab) - 1}
    (folder / "vocab_last.json").write_text(json.dumps(last), encoding="utf-8")
    return folder


@pytest.mark.parametrize("vocab", ["vocab.json", "vocab_last.json"])
def test_gpt2_files_give_the_ids_of_tokenizers(gpt2_files, vocab):
    bpe = ByteBPE.from_files(gpt2_files / vocab, gpt2_files / "merges.txt")
    ref = reference(gpt2_files, vocab)
    assert bpe.special == [EOT] and bpe.vocab == ref.get_vocab_size()
    for text in TEXTS + CORPUS:
        ids = bpe.encode(text.encode())
        assert ids == ref.encode(text).ids, text
        assert bpe.decode(ids) == text.encode()
    assert bpe.encode(EOT.encode()) == [ref.token_to_id(EOT)]
    restored = ByteBPE.from_dict(bpe.to_dict())
    assert restored.encode(TEXTS[3].encode()) == ref.encode(TEXTS[3]).ids


def test_stand_ins_are_gpt2s_printable_bytes():
    stand_in = byte_stand_ins()
    assert len(set(stand_in)) == 256 and stand_in[ord(" ")] == "Ġ"
    assert stand_in[10] == "Ċ" and stand_in[0] == "Ā" and stand_in[0xAD] == "Ń"
    assert stand_in[ord("a")] == "a"
    assert set(stand_in) == set(pre_tokenizers.ByteLevel.alphabet())


def test_hand_written_files_encode_as_their_merges_say(tmp_path):
    merges = ["Ġ t", "h e", "Ġt he"]
    vocab = {s: i for i, s in enumerate(sorted(byte_stand_ins()))}  # "!" is id 0
    vocab |= {"Ġt": 256, "he": 257, "Ġthe": 258, EOT: 259}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    lines = ["#version: 0.2", *merges, ""]
    (tmp_path / "merges.txt").write_text("\n".join(lines), encoding="utf-8")
    bpe = ByteBPE.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    assert bpe.encode(b" the") == [258] and bpe.encode(b"he") == [257]
    assert bpe.encode(b"the" + EOT.encode()) == [ord("t") - ord("!"), 257, 259]
    assert bpe.token_bytes[[256, 258, 259]].tolist() == [2, 4, len(EOT)]


def latin1(text: str) -> str:
    return text.encode().decode("latin-1")


def test_pieces_cut_the_text_not_its_bytes():
    assert byte_pieces("café".encode()) == [latin1("café")]
    assert byte_pieces("a\u00a0b".encode()) == ["a", latin1("\u00a0"), "b"]
    assert byte_pieces(b"it's  ok", "gpt2") == ["it", "'s", " ", " ok"]
    assert byte_pieces(b"x\xff\xfe y", "gpt2") == ["x", "\xff\xfe", " y"]
    bpe = ByteBPE.learn("café ".encode() * 1000, num_merges=10)
    assert bpe.encode(" café".encode()) == [bpe.vocab - 1]  # the last merge
    with pytest.raises(ValueError, match="pattern='bytes'"):
        ByteBPE([], pattern="bytes")


def test_ties_go_to_older_symbols_bytes_by_value_unlike_tokenizers():
    # pieces "xa", " xa", " ab", " ab": (" ", "a"), ("a", "b"), ("x", "a") tie at
    # 2, and the space (0x20) is the oldest byte. Then ("x", "a") and (" a", "b")
    # tie: "x" is older than the merged " a".
    data = b"xa xa ab ab"
    assert ByteBPE.learn(data, 10).merges == [(" ", "a"), ("x", "a"), (" a", "b")]
    tokenizer = byte_level()
    tokenizer.train_from_iterator([data.decode()], trainer(259, []))
    # tokenizers orders bytes by their stand-ins: "a" (U+0061) before "Ġ" (U+0120)
    assert tokenizer.id_to_token(256) == "ab"  # its first merge


def test_special_tokens_are_reserved_in_training_and_kept_whole():
    data = f"ab{EOT}ab{EOT}".encode() * 5
    bpe = ByteBPE.learn(data, 50, special=[EOT])
    assert all("|" not in a + b and "<" not in a + b for a, b in bpe.merges)
    eot = bpe.vocab - 1
    assert bpe.encode(f"x{EOT}{EOT}y".encode()) == [ord("x"), eot, eot, ord("y")]
    assert bpe.decode(bpe.encode(data)) == data
    restored = ByteBPE.from_dict(bpe.to_dict())
    assert restored.encode(data) == bpe.encode(data) and restored.special == [EOT]
