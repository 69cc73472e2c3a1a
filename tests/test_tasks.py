"""What the tasks compute, against independent references: the learning-rate
schedules and their formulas, bits per byte over a whole text (brute force), the
language model's loss and batches, the encoder-only classifier, and the tokenizers
that checkpoints carry."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer import runner
from annotated_transformer.blocks.embeddings import check_ids
from annotated_transformer.data import imdb
from annotated_transformer.data.batching import collate
from annotated_transformer.data.bpe import BPE
from annotated_transformer.finished import RunResult
from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM
from annotated_transformer.models.encoder_only import (
    EncoderClassifier,
    EncoderConfig,
)
from annotated_transformer.tasks import PRESETS
from annotated_transformer.tasks.base import with_settings
from annotated_transformer.tasks.classification import ReviewTokenizer
from annotated_transformer.tasks.lm import (
    LanguageModel,
    byte_bits,
    fixed_windows,
    window_plan,
    windowed_bits_per_byte,
)
from annotated_transformer.training.schedules import make_scheduler

ROOT = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------------ schedules


def rates(
    kind: str, peak: float, warmup: int, total: int, steps: int
) -> list[float]:
    """The learning rate of each of ``steps`` optimiser updates
    under ``make_scheduler``."""
    optimizer = torch.optim.SGD(
        [nn.Parameter(torch.zeros(1))], lr=123.0
    )  # replaced by peak
    scheduler = make_scheduler(optimizer, kind, peak, warmup, total)
    out = []
    for _ in range(steps):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return out


def eq3(step: int, d_model: int, factor: float, warmup: int) -> float:
    """Vaswani et al. 2017, eq. 3, with step 0 read as step 1."""
    s = max(step, 1)
    return factor * d_model**-0.5 * min(s**-0.5, s * warmup**-1.5)


def test_noam_is_the_papers_equation_3():
    d_model, factor, warmup = 512, 2.0, 40
    peak = factor * (d_model * warmup) ** -0.5
    got = rates("noam", peak, warmup, 0, 400)
    assert got == pytest.approx(
        [eq3(s, d_model, factor, warmup) for s in range(400)], rel=1e-12
    )
    assert max(range(400), key=got.__getitem__) == warmup and max(
        got
    ) == pytest.approx(peak)


@pytest.mark.parametrize(
    ("kind", "formula"),
    [
        (
            "cosine",
            lambda s, w, t: (
                (s + 1) / w
                if s < w
                else 0.5 * (1 + math.cos(math.pi * min(s - w, t - w) / (t - w)))
            ),
        ),
        (
            "linear",
            lambda s, w, t: (s + 1) / w if s < w else max(t - s, 0) / (t - w),
        ),
        ("inverse_sqrt", lambda s, w, t: 1 / math.sqrt(max(s, w)) * math.sqrt(w)),
    ],
)
def test_every_schedule_follows_its_formula(kind, formula):
    peak, warmup, total = 3e-3, 8, 50
    expected = [peak * formula(s, warmup, total) for s in range(total + 10)]
    assert rates(kind, peak, warmup, total, total + 10) == pytest.approx(
        expected, rel=1e-12
    )


@pytest.mark.parametrize("kind", ["noam", "cosine", "linear", "inverse_sqrt"])
def test_a_scheduler_resumes_from_its_plain_state(kind):
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = make_scheduler(optimizer, kind, 1e-3, 4, 20)
    for _ in range(7):
        optimizer.step()
        scheduler.step()
    state = scheduler.state_dict()
    other = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    resumed = make_scheduler(other, kind, 1e-3, 4, 20)
    resumed.load_state_dict(state)
    other.load_state_dict(optimizer.state_dict())
    assert other.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    assert other.param_groups[0]["lr"] == rates(kind, 1e-3, 4, 20, 8)[7]


def test_make_scheduler_rejects_bad_arguments():
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    cases = [
        (("step", 1e-3, 10, 100), "unknown schedule 'step'"),
        (("noam", 0.0, 10, 100), "must be > 0"),
        (("noam", float("nan"), 10, 100), "must be > 0"),
        (("cosine", 1e-3, 0, 100), "warmup=0"),
        (("cosine", 1e-3, 100, 100), "needs warmup"),
        (("linear", 1e-3, 200, 100), "needs warmup"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError, match=message):
            make_scheduler(optimizer, *args)
    make_scheduler(
        optimizer, "noam", 1e-3, 100, 0
    )  # noam and inverse_sqrt need no total
    make_scheduler(optimizer, "inverse_sqrt", 1e-3, 100, 0)


def test_make_scheduler_is_the_only_place_a_scheduler_is_made():
    files = [*ROOT.glob("src/annotated_transformer/**/*.py")]
    files += [*ROOT.glob("notebooks/*.py"), *ROOT.glob("benchmarks/*.py")]
    assert len(files) > 30
    makers = {
        p.relative_to(ROOT).as_posix()
        for p in files
        if re.search(r"lr_scheduler|LambdaLR\(", p.read_text(encoding="utf-8"))
    }
    assert makers == {"src/annotated_transformer/training/schedules.py"}


# ---------------------------------------------------------- bits per byte of a text


def small_lm(max_len: int = 16) -> DecoderLM:
    torch.manual_seed(0)
    config = DecoderConfig(d_model=32, h=4, N=2, d_ff=64, max_len=max_len)
    return DecoderLM(config)


def random_text(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(
        0, 256, (n,), generator=torch.Generator().manual_seed(seed)
    ).byte()


@pytest.mark.parametrize(
    ("n", "context", "stride"), [(100, 16, 8), (100, 16, 16), (10, 16, 3)]
)
def test_a_uniform_model_scores_exactly_8_bits_per_byte(n, context, stride):
    model = small_lm()
    with (
        torch.no_grad()
    ):  # constant logits: p = 1/256 for every byte, whatever the context
        model.to_logits.weight.zero_()
        model.to_logits.bias.fill_(0.3)
    bpb, scored = windowed_bits_per_byte(
        model, random_text(n), context=context, stride=stride
    )
    assert scored == n - 1
    assert bpb == pytest.approx(8.0, abs=1e-12)


def brute_force_bits(
    model: DecoderLM, text: torch.Tensor, context: int
) -> list[float]:
    """−log₂ p of each byte 1..n-1, from a forward pass over its
    last ``context`` bytes."""
    bits = []
    with torch.no_grad():
        for t in range(1, len(text)):
            x = text[max(0, t - context) : t].long()[None]
            log_p = model(x)[0, -1].double().log_softmax(-1)[int(text[t])]
            bits.append(-log_p.item() / math.log(2))
    return bits


def test_bits_per_byte_equals_brute_force_with_the_whole_prefix():
    model = small_lm(max_len=32).eval()
    text = random_text(
        25, seed=1
    )  # shorter than the context: every byte sees all before it
    bpb, _ = windowed_bits_per_byte(model, text, context=32, stride=5)
    expected = brute_force_bits(model, text, context=32)
    assert bpb == pytest.approx(sum(expected) / len(expected), rel=1e-6)


def test_bits_with_stride_1_equal_brute_force_with_a_sliding_context():
    model = small_lm(max_len=8).eval()
    text = random_text(
        40, seed=2
    )  # stride 1: byte t sees exactly the 8 bytes before it
    expected = brute_force_bits(model, text, context=8)
    bpb, _ = windowed_bits_per_byte(model, text, context=8, stride=1, batch_size=5)
    assert bpb == pytest.approx(sum(expected) / len(expected), rel=1e-6)
    bits = byte_bits(model, text, context=8, stride=1, batch_size=5)
    assert bits.dtype == torch.float64 and bits.tolist() == pytest.approx(
        expected, rel=1e-5
    )


@pytest.mark.parametrize(
    ("n", "context", "stride"), [(2, 4, 2), (50, 8, 3), (57, 8, 8), (9, 8, 1)]
)
def test_window_plan_scores_every_byte_once_with_enough_context(n, context, stride):
    L = min(context, n - 1)
    seen = []
    for start, first in window_plan(n, context, stride):
        for t in range(
            first, start + L + 1
        ):  # targets of this window that it scores
            seen.append(t)
            assert t - start >= min(t, L - stride + 1)  # bytes of context it has
    assert sorted(seen) == list(range(1, n))


def test_window_plan_and_scoring_bad_arguments():
    with pytest.raises(ValueError, match="no byte to predict"):
        window_plan(1, 8, 4)
    with pytest.raises(ValueError, match="1 <= stride <= context"):
        window_plan(10, 8, 9)
    with pytest.raises(ValueError, match="exceeds the model's max_len=16"):
        windowed_bits_per_byte(small_lm(), random_text(100), context=32)


def test_fixed_windows_are_consecutive_slices():
    data = random_text(100)
    batches = fixed_windows(data, context=8, batch_size=5)
    assert [len(x) for x, _ in batches] == [5, 5, 2]  # 99 // 8 = 12 windows
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    for i in range(12):
        assert torch.equal(x[i], data[8 * i : 8 * i + 8].long())
        assert torch.equal(y[i], data[8 * i + 1 : 8 * i + 9].long())
    with pytest.raises(ValueError, match="hold no window"):
        fixed_windows(data[:8], context=8, batch_size=5)


def lm_task(**changes) -> LanguageModel:
    """The tiny language-model task with its data replaced by
    ``random_text`` (no download)."""
    config = with_settings(PRESETS["lm"]["tiny"], changes)
    task = LanguageModel(config)
    task.splits = {"train": random_text(1000), "val": random_text(300, seed=9)}
    return task


def test_lm_loss_is_the_summed_cross_entropy():
    model = small_lm().eval()
    x, y = torch.randint(0, 256, (3, 16)), torch.randint(0, 256, (3, 16))
    loss, n = lm_task().loss(model, (x, y))
    logits = model(x)
    manual = -sum(
        logits[b, t].log_softmax(-1)[y[b, t]] for b in range(3) for t in range(16)
    )
    assert n == 48
    torch.testing.assert_close(loss, manual, rtol=1e-5, atol=1e-4)


def test_lm_batches_are_windows_of_the_text_the_same_every_time_for_an_epoch():
    task = lm_task(batch_size=4, max_len=8)
    data = task.splits["train"]
    first, again, other = (
        list(task.batches(0)),
        list(task.batches(0)),
        list(task.batches(1)),
    )
    assert len(first) == 1000 // (4 * 8) and first[0][0].shape == (4, 8)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0][0], other[0][0])
    reseeded = lm_task(batch_size=4, max_len=8, seed=1)
    assert not torch.equal(first[0][0], next(iter(reseeded.batches(0)))[0])
    slices = data.unfold(0, 9, 1).long()  # every 9-byte slice of the text
    for x, y in first:
        assert torch.equal(x[:, 1:], y[:, :-1])
        for window in torch.cat([x, y[:, -1:]], dim=1):
            assert (slices == window).all(dim=1).any()


def test_lm_validation_is_the_mean_loss_of_consecutive_windows():
    task = lm_task(eval_bytes=200, max_len=16)
    model = small_lm()
    val = task.splits["val"][:201]
    with torch.no_grad():
        x = val[: 12 * 16].view(12, 16).long()  # (201 - 1) // 16 = 12 windows
        y = val[1 : 12 * 16 + 1].view(12, 16).long()
        nats = F.cross_entropy(model.eval()(x).flatten(0, 1), y.flatten()).item()
    metrics = task.evaluate(model.train())
    assert metrics["val_loss"] == pytest.approx(nats, rel=1e-5)
    assert metrics["val_bpb"] == pytest.approx(nats / math.log(2), rel=1e-5)
    assert model.training  # evaluate restores the mode


# ----------------------------------------------------------- the encoder classifier


def small_model(cls: bool = False, **changes) -> EncoderClassifier:
    torch.manual_seed(0)
    options = dict(
        d_model=16, h=2, N=2, d_ff=32, max_len=12, dropout=0.1, pad=0, cls=cls
    )
    return EncoderClassifier(EncoderConfig(50, 3, **{**options, **changes}))


@pytest.mark.parametrize("cls", [False, True])
def test_logits_shape(cls):
    assert small_model(cls)(torch.randint(1, 50, (4, 7))).shape == (4, 3)


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
    """Rebuild the forward pass by hand on the unpadded review and
    compare the pooled vector."""
    model = small_model().eval()
    review = torch.randint(1, 50, (1, 6))
    x = model.position(model.embed(review))
    for block in model.blocks:
        x = block(x)  # no padding, no mask needed
    expected = model.to_classes(x.mean(dim=1))
    torch.testing.assert_close(model(F.pad(review, (0, 5), value=0)), expected)


def test_attention_dropout_is_separate_from_dropout():
    model = small_model(dropout=0.2, attn_dropout=0.0)
    assert all(block.attention.dropout.p == 0.0 for block in model.blocks)
    assert all(block.dropout.p == 0.2 for block in model.blocks)
    assert model.position.dropout.p == 0.2
    model = small_model(dropout=0.0, attn_dropout=0.3)
    assert all(block.attention.dropout.p == 0.3 for block in model.blocks)


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


@pytest.mark.parametrize("window", [1, 2])
def test_a_window_limits_what_the_first_block_sees(window):
    """One block: changing token j changes position i's output exactly
    when |i - j| <= window."""
    model = small_model(N=1, window=window, dropout=0.0).eval()
    tokens = torch.randint(1, 50, (1, 9))
    before, _ = model.encode(tokens)
    for j in range(9):
        changed = tokens.clone()
        changed[0, j] = 1 + changed[0, j] % 49
        after, _ = model.encode(changed)
        moved = (after - before).abs().amax(-1)[0] > 1e-6  # (len,)
        assert moved.tolist() == [abs(i - j) <= window for i in range(9)], j


def test_a_window_wider_than_the_review_changes_nothing():
    tokens = F.pad(torch.randint(1, 50, (2, 7)), (0, 3), value=0)
    wide, plain = (
        small_model(window=10).eval(),
        small_model().eval(),
    )  # the same seed, weights
    torch.testing.assert_close(wide(tokens), plain(tokens))
    with pytest.raises(ValueError, match="window=-2 must be >= 0"):
        small_model(window=-2)


def test_it_learns_a_keyword_task(one_thread):
    """Label = does token 7 occur. 100 steps of a small model must
    get it (nearly) right."""
    torch.manual_seed(1)
    model = EncoderClassifier(
        EncoderConfig(20, 2, d_model=16, h=2, N=1, d_ff=64, max_len=16, dropout=0.0)
    )
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
    with pytest.raises(ValueError, match="integer token ids"):
        model(torch.rand(1, 3))
    with pytest.raises(ValueError, match=r"shape \(batch, len\)"):
        model(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="pad=60"):
        EncoderConfig(50, pad=60)
    # value checks live where batches are built, not in every forward pass
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 50\)"):
        check_ids(torch.tensor([[1, 2, 50]]), 50)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 50\)"):
        check_ids(torch.tensor([[-1, 2]]), 50)
    check_ids(torch.tensor([[0, 49]]), 50)
    with pytest.raises(ValueError, match="sequence 1 of the batch is empty"):
        collate([[4, 5], []], pad=0)


def test_every_classification_preset_turns_attention_dropout_off():
    presets = PRESETS["classify"].values()
    assert all(c.model.attn_dropout == 0 and c.model.dropout > 0 for c in presets)


# ----------------------------------------------------- tokenizers in the checkpoint


def test_review_tokenizer_spells_the_words_in_pieces():
    texts = [
        "A great, great film!<br /><br />Greatly acted.",
        "Not great: a dull film?",
    ] * 5
    tokenizer = ReviewTokenizer.learn("bpe", texts, vocab_size=30)
    for text in [*texts[:2], "Unseen wörds, ungreat!"]:
        assert BPE.decode(tokenizer(text)) == " ".join(imdb.tokenize(text))
    assert "▁great" in tokenizer(texts[1])  # a frequent word became one token
    assert ReviewTokenizer.learn("word", texts, 30)(texts[1]) == imdb.tokenize(
        texts[1]
    )
    with pytest.raises(ValueError, match="tokenizer='chars'"):
        ReviewTokenizer.learn("chars", texts, 30)


def quiet_train(
    task: str, out: Path, mirror: Path, settings: list[str]
) -> RunResult:
    options = {
        "data_dir": mirror,
        "device": "cpu",
        "progress": False,
        "echo": False,
    }
    result = runner.train(task, out, preset="tiny", settings=settings, **options)
    assert result is not None
    return result


def test_the_bpe_tokenizer_survives_a_checkpoint(imdb_mirror, tmp_path, one_thread):
    settings = [
        "tokenizer=bpe",
        "vocab_size=600",
        "train_subset=400",
        "val_size=50",
    ]
    settings += ["test_subset=20", "steps=2", "warmup=1", "eval_every=2"]
    trained = quiet_train("classify", tmp_path / "run", imdb_mirror, settings)
    # loaded from the checkpoint alone: no data folder needed
    task, model = runner.load_model(
        tmp_path / "run" / "final.pt", data_dir=tmp_path / "none"
    )
    assert task.vocab.itos == trained.task.vocab.itos
    reviews = ["A wonderful, moving film.", "Unseen wörds: zyxwvut brilliantness!"]
    for review in reviews:
        tokens = task.tokenizer(review)
        assert tokens == trained.task.tokenizer(review)
        assert BPE.decode(tokens) == " ".join(imdb.tokenize(review))
    assert task.predict(model, reviews) == trained.task.predict(
        trained.model, reviews
    )


def test_bpe_translation_has_no_unknown_words_and_one_tied_matrix(
    multi30k_mirror, tmp_path
):
    settings = [
        "tokens=bpe",
        "tie=true",
        "bpe_merges=300",
        "train_limit=200",
        "eval_limit=5",
    ]
    settings += ["epochs=1", "warmup=1", "keep_last=0", "final=last"]
    quiet_train("translate", tmp_path / "run", multi30k_mirror, settings)
    task, model = runner.load_model(
        tmp_path / "run" / "final.pt", data_dir=tmp_path / "none"
    )
    table = model.tgt_embed.embed.lut.weight
    assert (
        model.src_embed.embed.lut.weight is table
        and model.generator.proj.weight is table
    )
    unseen = ["Xylqvorz brümmelt Qwyzjk.", "Ein Zzyzxbaum."]
    tokens = task.translator(model).tokenize(unseen)
    assert all(t in task.src_vocab.stoi for sentence in tokens for t in sentence)
    unk = task.src_vocab.stoi["<unk>"]
    assert unk not in task.src_vocab.encode(
        [t for sentence in tokens for t in sentence]
    )
    assert all("<unk>" not in line for line in task.predict(model, unseen))
    with pytest.raises(ValueError, match="tie=true needs one shared vocabulary"):
        runner.new_config("translate", "tiny", ["tokens=words", "tie=true"])


def test_translation_pool_size_buckets_within_random_pools(multi30k_mirror):
    from annotated_transformer.tasks.translation import Translation

    def epoch(pool: int) -> tuple[list[int], list]:
        settings = ["train_limit=600", "pack_width=0", f"pool_size={pool}"]
        config = runner.new_config("translate", "tiny", settings)
        task = Translation(config, data_dir=multi30k_mirror)
        return [b.src.size(0) for b in task.batches(0)], task.train_pairs

    (sorted_sizes, pairs), (pooled_sizes, _) = epoch(0), epoch(100)
    assert (
        sum(sorted_sizes) == sum(pooled_sizes) == len(pairs)
    )  # every pair once, both ways
    assert len(pooled_sizes) > len(
        sorted_sizes
    )  # pools of 100 cannot pack as tightly
    with pytest.raises(ValueError, match="pool_size=-1 must be >= 0"):
        runner.new_config("translate", "tiny", ["pack_width=0", "pool_size=-1"])


def test_bits_by_position_is_the_mean_over_windows_of_each_positions_bits():
    from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM
    from annotated_transformer.tasks.lm import bits_by_position

    torch.manual_seed(0)
    model = DecoderLM(DecoderConfig(256, 16, 2, 1, 8, 32))
    data = torch.randint(
        0, 256, (50,), dtype=torch.uint8
    )  # 6 windows of 8 + 1 bytes
    bits = bits_by_position(model, data, 8, batch_size=4)
    expected = torch.zeros(8, dtype=torch.float64)
    model.eval()
    for w in range(6):
        window = data[8 * w : 8 * w + 9].long()
        with torch.no_grad():
            p = model(window[None, :-1])[0].double().softmax(-1)  # (8, 256)
        for t in range(8):
            expected[t] -= math.log2(p[t, window[t + 1]]) / 6
    torch.testing.assert_close(bits, expected)
