"""The ``mlm`` task and fine-tuning from it: the loss against ``F.cross_entropy``
with ``ignore_index`` over every position, the masking of the batches, the
pretrained weights in the classifier (compared with the checkpoint's tensors), and
the one-line refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from annotated_transformer import cli, records, runner
from annotated_transformer.data import imdb
from annotated_transformer.data.vocab import MASK, SPECIALS
from annotated_transformer.tasks.classification import Classification
from annotated_transformer.tasks.mlm import MaskedBatch, MaskedLM
from annotated_transformer.training.checkpoints import model_soup, read_checkpoint

WORDS = ["the", "film", "was", "good", "bad", "not", "a", "great", "plot", "acting"]
STATE = {"vocab": [*SPECIALS, MASK, *WORDS], "bpe": None}


def small_task(**changes) -> MaskedLM:
    config = runner.new_config(
        "mlm", "tiny", [f"{k}={v}" for k, v in changes.items()]
    )
    return MaskedLM(config, state=STATE)  # the vocabulary given: no data read


def test_the_loss_is_cross_entropy_at_the_selected_positions_only():
    torch.manual_seed(0)
    task = small_task(dropout=0.0)
    model = task.build_model().eval()
    tokens = torch.randint(5, len(STATE["vocab"]), (3, 7))
    labels = torch.full_like(tokens, -100)
    chosen = torch.rand(tokens.shape) < 0.4
    labels[chosen] = tokens[chosen]
    inputs = torch.where(chosen, torch.full_like(tokens, task.vocab[MASK]), tokens)
    got, count = task.loss(model, MaskedBatch(inputs, labels))
    logits = model(inputs)  # (batch, len, vocab): every position
    want = F.cross_entropy(
        logits.transpose(1, 2), labels, ignore_index=-100, reduction="sum"
    )
    assert count == chosen.sum() and got.item() == pytest.approx(
        want.item(), rel=1e-5
    )
    assert model.to_classes.weight is model.embed.lut.weight  # tied output matrix


def test_fill_gives_words_for_each_mask_and_refuses_text_without_one():
    task = small_task()
    model = task.build_model()
    fills = task.fill(model, "The film was [MASK], not [MASK]!", top=4)
    assert len(fills) == 2 and all(len(f) == 4 for f in fills)
    assert all(word in WORDS for f in fills for word, _ in f)
    assert all(sum(p for _, p in f) <= 1 + 1e-6 for f in fills)
    shown = task.predict(model, ["the [MASK] plot"], top=2)[0].split()
    assert shown[0] == "the" and shown[2] == "plot" and shown[1].count("|") == 1
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        task.fill(model, "no blank here")


@pytest.fixture(scope="module")
def pretrained(imdb_mirror, tmp_path_factory, one_thread) -> Path:
    out = tmp_path_factory.mktemp("mlm") / "run"
    options = {
        "data_dir": imdb_mirror,
        "device": "cpu",
        "progress": False,
        "echo": False,
    }
    settings = ["steps=3", "eval_every=3", "warmup=1"]
    assert (
        runner.train("mlm", out, preset="tiny", settings=settings, **options)
        is not None
    )
    return out


def test_batches_mask_only_ordinary_tokens_with_a_new_draw_each_epoch(
    pretrained, imdb_mirror
):
    task, _ = runner.load_model(pretrained / "final.pt", data_dir=imdb_mirror)
    reserved = torch.tensor([task.vocab[t] for t in task.specials])
    first, again, second = (list(task.batches(e)) for e in (0, 0, 1))
    selected = torch.cat([(b.labels >= 0).flatten() for b in first])
    labels = torch.cat([b.labels.flatten() for b in first])
    assert (
        0.13 < selected.double().mean() < 0.17
    )  # of the tokens; padding is rare here
    assert not torch.isin(labels[selected], reserved).any()
    assert all(
        torch.equal(a.inputs, b.inputs) for a, b in zip(first, again, strict=True)
    )
    assert not all(
        torch.equal(a.labels, b.labels) for a, b in zip(first, second, strict=True)
    )
    model = task.build_model()
    want = task.mean_loss(model, list(task.masked(task.reviews("val"), 12_345, 0)))
    assert task.evaluate(model)["val_loss"] == pytest.approx(
        want, rel=1e-5
    )  # a fixed masking


def test_fine_tuning_starts_from_the_pretrained_encoder(pretrained, imdb_mirror):
    config = runner.new_config(
        "classify", "tiny", [f"init={pretrained}", "window=2"]
    )
    task = Classification(config, data_dir=imdb_mirror)
    saved = read_checkpoint(pretrained / "final.pt")
    assert (
        task.vocab.itos == saved["config"]["state"]["vocab"] and MASK in task.vocab
    )
    model = task.build_model()
    copied = [k for k in model.state_dict() if not k.startswith("to_classes")]
    assert len(copied) > 10
    for key in copied:
        assert torch.equal(model.state_dict()[key], saved["model"][key]), key
    assert model.to_classes.weight.shape == (2, 32)


def test_further_pretraining_starts_from_every_weight_of_the_run(
    pretrained, imdb_mirror
):
    config = runner.new_config("mlm", "tiny", [f"init={pretrained}", "lr=1e-4"])
    task = MaskedLM(config, data_dir=imdb_mirror)
    saved = read_checkpoint(pretrained / "final.pt")
    assert task.vocab.itos == saved["config"]["state"]["vocab"]
    weights = task.build_model().state_dict()
    assert weights.keys() == saved["model"].keys()
    assert all(torch.equal(weights[k], saved["model"][k]) for k in weights)
    with pytest.raises(ValueError, match="d_ff=128 there, 64 here; set them equal"):
        MaskedLM(
            runner.new_config("mlm", "tiny", [f"init={pretrained}", "d_ff=64"])
        )


def test_fine_tuning_from_a_record_is_fine_tuning_from_the_run(
    pretrained, imdb_mirror, tmp_path
):
    """``init=results/NAME`` starts from the published weights and vocabulary:
    the same seed gives the same losses as ``init=runs/NAME``; the config keeps
    ``init`` as given; a record without weights is refused in one line."""
    root = tmp_path / "results"
    record = records.record_run(
        pretrained, "mlm", weights=True, root=root, data_dir=imdb_mirror
    )
    figures = records.record_run(pretrained, "figures", root=root, threads=1)
    options = {
        "data_dir": imdb_mirror,
        "device": "cpu",
        "progress": False,
        "echo": False,
    }
    settings = ["window=2", "steps=4", "eval_every=2", "warmup=1", "test_subset=40"]
    runs = {}
    for name, start in (("from-run", pretrained), ("from-record", record)):
        out = tmp_path / name
        runs[name] = runner.train(
            "classify",
            out,
            preset="tiny",
            settings=[f"init={start}", *settings],
            **options,
        )
        assert runs[name].metrics["config"]["init"] == str(start)
    losses = [r.history["loss"].tolist() for r in runs.values()]
    assert len(losses[0]) == 4 and losses[0] == losses[1]
    scored = [run.metrics["validation"] for run in runs.values()]
    assert scored[0] == scored[1]
    config = runner.new_config("classify", "tiny", [f"init={figures}", "window=2"])
    with pytest.raises(ValueError, match="publishes no weights") as error:
        Classification(config, data_dir=imdb_mirror)
    message = str(error.value)
    assert message.startswith(f"init={figures}: ") and "\n" not in message
    assert "--weights" in message


def test_word_dropout_hides_real_tokens_behind_mask_anew_each_epoch(
    pretrained, imdb_mirror
):
    def task(p: float) -> Classification:
        settings = [f"init={pretrained}", "window=2", f"word_dropout={p}"]
        return Classification(
            runner.new_config("classify", "tiny", settings), data_dir=imdb_mirror
        )

    def rows(p: float, epoch: int) -> dict[bytes, Tensor]:
        """Each training review's batched row of ids, keyed by its
        row without word dropout."""
        pairs = zip(plain.batches(epoch), task(p).batches(epoch), strict=True)
        rows = (zip(a.tokens, b.tokens, strict=True) for a, b in pairs)
        return {was.numpy().tobytes(): now for row in rows for was, now in row}

    plain = task(0.0)
    first, again, second = rows(0.3, 0), rows(0.3, 0), rows(0.3, 1)
    was = torch.cat(
        [torch.frombuffer(bytearray(k), dtype=torch.int64) for k in first]
    )
    now = torch.cat(list(first.values()))
    real, changed = was != plain.vocab["<pad>"], was != now
    assert torch.equal(
        changed, real & (now == plain.vocab[MASK])
    )  # real tokens, to <mask>
    assert 0.28 < changed[real].double().mean() < 0.32
    assert all(torch.equal(first[k], again[k]) for k in first)  # seeded
    assert sum(not torch.equal(first[k], second[k]) for k in first) > 0.9 * len(
        first
    )
    with pytest.raises(ValueError, match=r"word_dropout=1\.0 must lie in \[0, 1\)"):
        runner.new_config("classify", "tiny", ["word_dropout=1"])


def test_a_pretrained_run_of_other_sizes_is_refused_in_one_line(
    pretrained, tmp_path
):
    config = runner.new_config(
        "classify", "tiny", [f"init={pretrained}", "d_model=64", "window=2"]
    )
    with pytest.raises(
        ValueError, match="d_model=32 there, 64 here; set them equal"
    ) as error:
        Classification(config)
    assert "\n" not in str(error.value)
    config = runner.new_config(
        "classify", "tiny", [f"init={pretrained}", "window=0"]
    )
    with pytest.raises(ValueError, match="window=2 there, 0 here; set them equal"):
        Classification(config)
    with pytest.raises(ValueError, match=r"no final\.pt there"):
        Classification(runner.new_config("classify", "tiny", [f"init={tmp_path}"]))
    with pytest.raises(ValueError, match=r"mask_p=1\.5 must lie in \[0, 1\)"):
        runner.new_config("mlm", "tiny", ["mask_p=1.5"])


def test_tail_keeps_the_first_and_last_words_of_long_reviews(
    pretrained, imdb_mirror
):
    def task(tail: int) -> Classification:
        settings = [f"init={pretrained}", "window=2", f"tail={tail}"]
        return Classification(
            runner.new_config("classify", "tiny", settings), data_dir=imdb_mirror
        )

    head_only, head_tail = task(0).reviews("val"), task(48).reviews("val")
    vocab, max_len = task(0).vocab, 64
    long = 0
    for text, ids in zip(head_tail.texts, head_tail.ids, strict=True):
        words = vocab.encode(imdb.tokenize(text))
        if len(words) > max_len:  # 16 first words, then the last 48
            long += 1
            assert ids == words[:16] + words[-48:]
        else:
            assert ids == words
    assert long > 50 and head_only.ids != head_tail.ids
    with pytest.raises(ValueError, match=r"tail=64 must lie in \[0, max_len=64\)"):
        runner.new_config("classify", "tiny", ["tail=64"])


def test_a_model_soup_is_the_mean_of_fine_tunes_of_one_pretrained_run(
    pretrained, imdb_mirror, tmp_path, capsys
):
    options = {
        "data_dir": imdb_mirror,
        "device": "cpu",
        "progress": False,
        "echo": False,
    }
    paths = []
    for name, lr in (("a", "5e-3"), ("b", "1e-3"), ("c", "2e-3")):
        settings = [
            f"init={pretrained}",
            "window=2",
            f"lr={lr}",
            "steps=3",
            "eval_every=3",
            "warmup=1",
        ]
        settings += ["test_subset=40"]
        assert runner.train(
            "classify", tmp_path / name, preset="tiny", settings=settings, **options
        )
        paths.append(tmp_path / name / "final.pt")
    saved = [torch.load(p, weights_only=True)["model"] for p in paths]
    config, weights = model_soup(paths)
    assert config == read_checkpoint(paths[0])["config"]
    for key, value in weights.items():
        want = (
            saved[0][key].double() + saved[1][key].double() + saved[2][key].double()
        ) / 3
        torch.testing.assert_close(value, want.to(value.dtype), rtol=0, atol=0)
    assert not torch.equal(
        weights["to_classes.weight"], saved[0]["to_classes.weight"]
    )
    # the command line scores the soup: the same accuracy as the
    # averaged weights loaded here
    task, _ = runner.load_model(paths[0], data_dir=imdb_mirror)
    model = task.build_model().eval()
    model.load_state_dict(weights)
    want = task.accuracy(model, "test")
    argv = ["classify", "evaluate", "--data-dir", str(imdb_mirror)]
    argv += [arg for path in paths for arg in ("--checkpoint", str(path))]
    assert cli.main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["accuracy"], got["reviews"]) == (want["accuracy"], 40)
    assert cli.main([*argv, "--checkpoint", str(pretrained / "final.pt")]) == 1
    error = capsys.readouterr().err
    assert (
        error.startswith("error: ")
        and "does not fit" in error
        and error.count("\n") == 1
    )
    # another task (the mlm run itself) or a single
    # checkpoint: one line, no traceback
    for wrong, message in (
        ([paths[0], pretrained / "final.pt"], "does not fit"),
        ([paths[0]], "two or more"),
    ):
        with pytest.raises(ValueError, match=message) as error:
            model_soup(wrong)
        assert "\n" not in str(error.value)


def test_a_pretrained_run_has_one_name_at_the_top_and_in_a_chapter(
    pretrained, imdb_mirror, tmp_path, monkeypatch
):
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    (repo / "pyproject.toml").write_text("")
    shutil.copytree(pretrained, repo / "runs" / "mlm")

    def init_of(cwd: Path, path: str) -> str:
        monkeypatch.chdir(cwd)
        config = runner.new_config("classify", "tiny", ["window=2", f"init={path}"])
        Classification(
            config, data_dir=imdb_mirror
        )  # finds and reads the run's final.pt
        return config.init

    at_top = init_of(repo, "runs/mlm")
    assert at_top == "runs/mlm"
    assert (
        init_of(repo / "notebooks", "../runs/mlm") == at_top
    )  # a chapter's relative path
    assert (
        init_of(repo / "notebooks", "runs/mlm") == at_top
    )  # a saved config, read there
    assert init_of(repo / "notebooks", str(repo / "runs" / "mlm")) == at_top
    monkeypatch.chdir(repo)
    missing = runner.new_config("classify", "tiny", ["window=2", "init=runs/none"])
    with pytest.raises(ValueError, match=r"init=runs/none: no final\.pt there"):
        Classification(missing, data_dir=imdb_mirror)
