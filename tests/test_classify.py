"""The encoder-only classifier and the IMDb command line (train, evaluate, predict, resume)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from annotated_transformer import classify, imdb
from annotated_transformer.bpe import BPE
from annotated_transformer.model import EncoderClassifier
from annotated_transformer.vocab import Vocab

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mirror(imdb_mirror: Path) -> Path:
    return imdb_mirror


def small_model(cls: bool = False, **kwargs) -> EncoderClassifier:
    torch.manual_seed(0)
    options = dict(d_model=16, h=2, depth=2, max_len=12, dropout=0.1, pad=0, cls=cls)
    return EncoderClassifier(50, 3, **{**options, **kwargs})


# ----------------------------------------------------------------------------- the model


@pytest.mark.parametrize("cls", [False, True])
def test_logits_shape(cls):
    model = small_model(cls)
    tokens = torch.randint(1, 50, (4, 7))
    assert model(tokens).shape == (4, 3)


@pytest.mark.parametrize("cls", [False, True])
def test_padding_does_not_change_the_prediction(cls):
    """A review scored alone equals the same review padded next to a longer one."""
    model = small_model(cls).eval()
    short, long = torch.randint(1, 50, (1, 5)), torch.randint(1, 50, (1, 11))
    padded = torch.cat([F.pad(short, (0, 6), value=0), long])  # (2, 11)
    together = model(padded)
    torch.testing.assert_close(together[0], model(short)[0])
    torch.testing.assert_close(together[1], model(long)[0])


def test_mean_pooling_is_over_real_tokens_only():
    """Rebuild the forward pass by hand on the unpadded review and compare the pooled vector."""
    model = small_model().eval()
    review = torch.randint(1, 50, (1, 6))
    x = model.position(model.embed(review))
    for block in model.blocks:
        x = block(x)  # no padding, no mask needed
    expected = model.to_classes(x.mean(dim=1))
    padded = F.pad(review, (0, 5), value=0)
    torch.testing.assert_close(model(padded), expected)


def test_attention_dropout_is_separate_from_dropout():
    model = small_model(dropout=0.2, attn_dropout=0.0)
    assert all(block.attention.dropout.p == 0.0 for block in model.blocks)
    assert all(block.dropout.p == 0.2 for block in model.blocks)
    assert model.position.dropout.p == 0.2


def test_kept_attention_matches_the_fused_path_and_skips_padding():
    model = small_model().eval()
    tokens = F.pad(torch.randint(1, 50, (2, 5)), (0, 3), value=0)
    fused = model(tokens)
    last = model.blocks[-1].attention
    last.keep_attention = True
    torch.testing.assert_close(model(tokens), fused)
    weights = last.attn  # (batch, h, len, len)
    assert weights.shape == (2, 2, 8, 8)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 8))
    assert weights[..., 5:].abs().max() == 0  # padded keys get no weight


def test_it_learns_a_keyword_task(one_thread):
    """Label = does token 7 occur. 100 steps of a small model must get it (nearly) right."""
    torch.manual_seed(1)
    model = EncoderClassifier(20, 2, d_model=16, h=2, depth=1, max_len=16, dropout=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)

    def batch(n=32):
        tokens = torch.randint(8, 20, (n, 16), generator=gen)
        labels = torch.randint(0, 2, (n,), generator=gen)
        where = torch.randint(0, 16, (n,), generator=gen)
        tokens[labels == 1, where[labels == 1]] = 7
        return tokens, labels

    for _ in range(100):
        tokens, labels = batch()
        loss = F.cross_entropy(model(tokens), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    tokens, labels = batch(512)
    accuracy = (model.eval()(tokens).argmax(-1) == labels).float().mean().item()
    assert accuracy > 0.95, accuracy


def test_bad_inputs_raise_clear_errors():
    model = small_model()
    with pytest.raises(ValueError, match="longer than max_len=12"):
        model(torch.randint(1, 50, (1, 13)))
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 50\)"):
        model(torch.tensor([[1, 2, 50]]))
    with pytest.raises(ValueError, match="all padding"):
        model(torch.tensor([[1, 2], [0, 0]]))
    with pytest.raises(ValueError, match="integer token ids"):
        model(torch.rand(1, 3))
    with pytest.raises(ValueError, match="pad=60"):
        EncoderClassifier(50, pad=60)


def test_warmup_then_decay_schedule():
    factors = [classify.warmup_then_decay(s, warmup=4, total=12) for s in range(13)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert factors[4] == 1.0 and factors[8] == 0.5 and factors[12] == 0.0
    assert all(a >= b for a, b in itertools.pairwise(factors[4:]))


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown preset 'huge'; choose one of tiny, cpu, gpu"):
        classify.get_preset("huge")


def test_every_preset_turns_attention_dropout_off():
    assert all(c.attn_dropout == 0 and c.dropout > 0 for c in classify.PRESETS.values())


# ----------------------------------------------------------------------------- real data


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "annotated_transformer.classify", *args],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("tokenizer", ["word", "bpe"])
def test_cli_train_evaluate_predict(mirror, tmp_path, tokenizer):
    out = tmp_path / "run"
    trained = run_cli("train", "--preset", "tiny", "--out", str(out), "--data-dir", str(mirror),
                      "--steps", "10", "--tokenizer", tokenizer, "--no-progress")  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    history = (out / "history.csv").read_text().splitlines()
    assert metrics["steps"] == 10 == len(history) - 1
    assert history[0].startswith("step,") and "val_accuracy" in history[0]
    assert metrics["test_reviews"] == 500 and 0 <= metrics["test_accuracy"] <= 1

    evaluated = run_cli("evaluate", "--checkpoint", str(out / "checkpoint.pt"),
                        "--split", "test", "--data-dir", str(mirror))  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr
    # A fresh process rebuilds model and data from the checkpoint alone: same accuracy.
    assert f"test accuracy {metrics['test_accuracy']:.4f} on 500 reviews" in evaluated.stdout

    predicted = run_cli("predict", "--checkpoint", str(out / "checkpoint.pt"),
                        "A wonderful, moving film.", "Dull and far too long.")  # fmt: skip
    assert predicted.returncode == 0, predicted.stderr
    lines = predicted.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        label, probability = line.split("\t")
        assert label in ("positive", "negative") and 0.5 <= float(probability) <= 1.0


def test_ensure_run_reuses_a_finished_run_and_refuses_another_config(mirror, tmp_path):
    tiny = classify.PRESETS["tiny"]
    first = classify.ensure_run(tiny, tmp_path / "run", data_dir=mirror)
    checkpoint = tmp_path / "run" / classify.CHECKPOINT
    written = checkpoint.stat().st_mtime_ns
    again = classify.ensure_run(tiny, tmp_path / "run", data_dir=mirror)
    assert checkpoint.stat().st_mtime_ns == written  # loaded, not trained again
    for (name, a), b in zip(first.model.state_dict().items(), again.model.state_dict().values(),
                            strict=True):  # fmt: skip
        torch.testing.assert_close(a, b, msg=name)
    assert again.metrics == first.metrics and len(again.history) == len(first.history)
    # The loaded weights are the final ones: they score the test set as the run reported.
    accuracy = classify.evaluate(again.model, again.corpus.splits["test"])["accuracy"]
    assert accuracy == pytest.approx(first.metrics["test_accuracy"])

    other = dataclasses.replace(tiny, steps=2, eval_every=2, test_subset=20)
    classify.train(other, tmp_path / "other", data_dir=mirror, progress=False, log=lambda _: None)
    with pytest.raises(ValueError, match="holds a run of another configuration"):
        classify.ensure_run(tiny, tmp_path / "other", data_dir=mirror)


def test_bpe_tokenizer_spells_the_same_words_and_survives_a_checkpoint():
    texts = ["A great, great film!<br /><br />Greatly acted.", "Not great: a dull film?"] * 5
    tokenizer = classify.ReviewTokenizer.learn("bpe", texts, vocab_size=30)
    rebuilt = classify.ReviewTokenizer.from_dict(tokenizer.to_dict())
    for text in [*texts[:2], "Unseen wörds, ungreat!"]:
        tokens = tokenizer(text)
        assert BPE.decode(tokens) == " ".join(imdb.tokenize(text))  # the words, in pieces
        assert rebuilt(text) == tokens
    assert "▁great" in tokenizer(texts[1])  # a frequent word became one token
    assert classify.ReviewTokenizer.learn("word", texts, 30)(texts[1]) == imdb.tokenize(texts[1])
    with pytest.raises(ValueError, match="unknown tokenizer 'chars'"):
        classify.ReviewTokenizer.learn("chars", texts, 30)


class StopTrainingError(Exception):
    pass


def test_resume_continues_exactly(mirror, tmp_path):
    """Stopped after its first checkpoint and resumed, a run ends with the same weights."""
    config = dataclasses.replace(classify.PRESETS["tiny"], steps=8, eval_every=4, test_subset=50)
    quiet = {"data_dir": mirror, "progress": False}
    whole = classify.train(config, tmp_path / "whole", log=lambda _: None, **quiet)

    def stop_at_first_checkpoint(message: str) -> None:
        raise StopTrainingError(message)

    with pytest.raises(StopTrainingError, match="step 4"):
        classify.train(config, tmp_path / "cut", log=stop_at_first_checkpoint, **quiet)
    resumed = classify.train(config, tmp_path / "cut", resume=True, log=lambda _: None, **quiet)
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values(),
                            strict=True):  # fmt: skip
        torch.testing.assert_close(a, b, msg=name)
    assert len(resumed.history) == 8
    assert resumed.metrics["test_accuracy"] == whole.metrics["test_accuracy"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--preset", "huge", "--out", "{tmp}/x"], "unknown preset 'huge'"),
        (["train", "--preset", "tiny", "--out", "{tmp}/x", "--data-dir", "{tmp}/none.tar.gz"],
         "IMDb data not found"),
        (["train", "--preset", "tiny", "--out", "{tmp}/x", "--resume"], "no checkpoint"),
        (["train", "--preset", "tiny", "--out", "{tmp}/old"], "pass --resume to continue"),
        (["evaluate", "--checkpoint", "{tmp}/missing.pt"], "no checkpoint at"),
        (["evaluate", "--checkpoint", "{tmp}/corrupt.pt"], "not a readable checkpoint"),
        (["evaluate", "--checkpoint", "{tmp}/corrupt.pt", "--split", "dev"], "unknown split"),
        (["predict", "--checkpoint", "{tmp}/corrupt.pt", "hi"], "not a readable checkpoint"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_a_nonzero_exit(tmp_path, capsys, args, message):
    (tmp_path / "corrupt.pt").write_bytes(b"not a checkpoint")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "checkpoint.pt").write_bytes(b"an earlier run")
    status = classify.main([arg.replace("{tmp}", str(tmp_path)) for arg in args])
    err = capsys.readouterr().err
    assert status != 0
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert "Traceback" not in err


def test_cli_errors_in_a_real_process(tmp_path):
    """No traceback reaches the user: an unknown preset and an empty review."""
    result = run_cli("train", "--preset", "huge", "--out", str(tmp_path))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip() == "error: unknown preset 'huge'; choose one of tiny, cpu, gpu"
    path = tmp_path / "ckpt.pt"
    vocab = Vocab(["<pad>", "<unk>", "<s>", "</s>", *"abcdefghij"])
    config = dataclasses.replace(classify.PRESETS["tiny"], d_model=16, h=2, depth=2, max_len=12)
    model = classify.build_model(config, vocab)
    trainer = classify.make_trainer(model, config, vocab, path)
    trainer.save()
    result = run_cli("predict", "--checkpoint", str(path), "<br /><br />")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip() == "error: the review is empty: give some words to classify"
