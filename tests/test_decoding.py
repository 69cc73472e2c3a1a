import itertools

import pytest
import torch

from annotated_transformer.blocks.masks import padding_mask, subsequent_mask
from annotated_transformer.data.copy_task import copy_task_batches
from annotated_transformer.evaluation.decoding import beam_search, greedy_decode
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
    make_model,
)
from annotated_transformer.training.loss import seq2seq_loss
from annotated_transformer.training.schedules import make_scheduler
from annotated_transformer.training.trainer import Trainer, make_optimizer

PAD, START, END = 0, 1, 2


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models (see conftest.py)


def random_model(vocab: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return Transformer(
        TransformerConfig(vocab, vocab, N=2, d_model=32, d_ff=64, h=4, dropout=0.1)
    )


def ragged_sources(
    vocab: int, n: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (n, 7), generator=gen)
    for i in range(n):
        src[i, 7 - i % 4 :] = PAD
    return src, padding_mask(src, PAD)


@torch.no_grad()
def reference_greedy(
    model: torch.nn.Module, src: torch.Tensor, max_len: int, end: int | None
):
    """One sentence at a time, recomputing the prefix: the
    plainest greedy decoder."""
    results = []
    for row in src:
        s = row[row != PAD].unsqueeze(0)
        mask = padding_mask(s, PAD)
        memory = model.encode(s, mask)
        ys = [START]
        while len(ys) < max_len and (end is None or ys[-1] != end):
            tgt = torch.tensor([ys])
            out = model.decode(memory, mask, tgt, subsequent_mask(len(ys)))
            ys.append(int(model.generator(out[:, -1]).argmax()))
        results.append(ys)
    return results


def strip(ys: torch.Tensor, end: int | None) -> list[int]:
    """Token ids up to and including the first end symbol."""
    out = []
    for y in ys.tolist():
        out.append(y)
        if y == end:
            break
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_cached_equals_recompute_and_one_at_a_time(seed: int) -> None:
    model = random_model(9, seed)
    model.eval()
    src, mask = ragged_sources(9, 5, seed)
    for end in (None, END):
        cached = greedy_decode(model, src, mask, 12, START, end, use_cache=True)
        plain = greedy_decode(model, src, mask, 12, START, end, use_cache=False)
        assert torch.equal(cached, plain)
        assert cached[:, 0].eq(START).all() and cached.size(1) <= 12
        reference = reference_greedy(model, src, 12, end)
        assert [strip(row, end) for row in cached] == reference


def test_greedy_stops_early_and_pads_with_the_end_symbol() -> None:
    model = random_model(9, 0)
    src, mask = ragged_sources(9, 5, 0)
    full = greedy_decode(
        model, src, mask, 30, START
    )  # no end symbol: always max_len
    assert full.shape == (5, 30)
    end = int(full[0, 2])  # sentence 0 "ends" at position 2
    alone = greedy_decode(model, src[:1], mask[:1], 30, START, end)
    assert alone.tolist() == [full[0, :3].tolist()]  # stopped as soon as it ended
    out = greedy_decode(model, src, mask, 30, START, end)
    rows = out.tolist()
    ends = [row.index(end, 1) if end in row[1:] else None for row in rows]
    expected_len = 30 if None in ends else max(ends) + 1
    assert out.size(1) == expected_len
    for row, i in zip(rows, ends, strict=True):
        if i is not None:
            assert row[i:] == [end] * (len(row) - i)


def test_decoding_restores_train_mode_and_rejects_bad_shapes() -> None:
    model = random_model(9, 0)
    src, mask = ragged_sources(9, 3, 0)
    greedy_decode(model, src, mask, 5, START)
    assert model.training
    with pytest.raises(ValueError, match="src_mask"):
        greedy_decode(model, src, mask[:, 0], 5, START)
    with pytest.raises(ValueError, match="max_len"):
        beam_search(model, src, mask, 0, START, END)
    with pytest.raises(ValueError, match="beam=0 must be >= 1"):
        beam_search(model, src, mask, 5, START, END, beam_size=0)
    with pytest.raises(ValueError, match="length penalty"):
        beam_search(model, src, mask, 5, START, END, length_penalty=-0.5)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_of_one_is_greedy(alpha: float) -> None:
    model = random_model(9, 3)
    src, mask = ragged_sources(9, 6, 3)
    greedy = greedy_decode(model, src, mask, 10, START, END)
    beam = beam_search(
        model, src, mask, 10, START, END, beam_size=1, length_penalty=alpha
    )
    assert [strip(r, END) for r in beam] == [strip(r, END) for r in greedy]


def test_beam_cached_equals_recompute() -> None:
    model = random_model(9, 4)
    src, mask = ragged_sources(9, 4, 4)
    a = beam_search(model, src, mask, 9, START, END, beam_size=3, use_cache=True)
    b = beam_search(model, src, mask, 9, START, END, beam_size=3, use_cache=False)
    assert torch.equal(a, b)


def gnmt_score(log_prob: float, n_generated: int, alpha: float) -> float:
    return log_prob / ((5 + n_generated) / 6) ** alpha


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_beam_search_with_a_wide_beam_finds_the_exhaustive_best(
    alpha: float,
) -> None:
    vocab, n_max = 5, 3  # 3 generated tokens: at most 5³ = 125 hypotheses
    model = random_model(vocab, 5).eval()
    src, mask = ragged_sources(vocab, 3, 5)
    found = beam_search(
        model, src, mask, n_max + 1, START, END, beam_size=125, length_penalty=alpha
    )
    tails = torch.tensor(
        list(itertools.product(range(vocab), repeat=n_max))
    )  # (125, 3)
    ys = torch.cat([torch.full((len(tails), 1), START), tails], dim=1)  # (125, 4)
    for row, beam_row in zip(src, found, strict=True):
        # Score all 125 full sequences by teacher forcing in one batch; a shorter
        # hypothesis (ending in END) is a prefix, and its log-probability a prefix
        # sum (the decoder is causal).
        s = row[row != PAD].unsqueeze(0).expand(len(tails), -1)
        s_mask = padding_mask(s, PAD)
        with torch.no_grad():
            out = model.decode(
                model.encode(s, s_mask), s_mask, ys[:, :-1], subsequent_mask(n_max)
            )
            logp = (
                model.generator(out)
                .gather(-1, tails.unsqueeze(-1))
                .squeeze(-1)
                .cumsum(-1)
            )
        candidates = []
        for t, tail in enumerate(tails.tolist()):
            for n in range(
                1, n_max + 1
            ):  # every sequence that ends with END or fills max_len
                if END in tail[: n - 1] or (n < n_max and tail[n - 1] != END):
                    continue
                score = (
                    float(logp[t, n - 1]) / ((5 + n) / 6) ** alpha
                )  # GNMT, written out
                candidates.append((score, [START, *tail[:n]]))
        best_score, best = max(candidates)
        assert strip(beam_row, END) == best, (best_score, sorted(candidates)[-3:])


@pytest.fixture(scope="module")
def copy_model() -> torch.nn.Module:
    """The copy task at CI size: 2 layers, d_model 32, vocabulary
    11, a few hundred steps."""
    torch.manual_seed(0)
    vocab, d_model = 11, 32
    model = Transformer(
        TransformerConfig(
            vocab, vocab, N=2, d_model=d_model, d_ff=64, h=2, dropout=0.0
        )
    )
    opt = make_optimizer(model)
    trainer = Trainer(
        model,
        opt,
        seq2seq_loss(PAD, 0.1),
        make_scheduler(opt, "noam", (d_model * 100) ** -0.5, 100, 0),
        clip_norm=1.0,
    )
    trainer.fit(
        lambda epoch: copy_task_batches(vocab, 128, 20, seed=epoch),
        400,
        progress=False,
    )
    return model.eval()


def fresh_copy_sources(n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(2, 11, (n, 10), generator=gen)
    src[:, 0] = START
    return src


def test_copy_task_model_copies_fresh_sequences_exactly(
    copy_model: torch.nn.Module,
) -> None:
    src = fresh_copy_sources(
        200, seed=12345
    )  # never seen: training used seeds 0, 1, ...
    out = greedy_decode(copy_model, src, padding_mask(src, PAD), 10, START)
    exact = (out == src).all(dim=1).float().mean().item()
    assert exact == 1.0, f"only {exact:.1%} exact copies"


def test_trained_model_cached_equals_recompute(copy_model: torch.nn.Module) -> None:
    src = fresh_copy_sources(50, seed=7)
    src[::3, 6:] = PAD  # some padded sources too
    mask = padding_mask(src, PAD)
    for use_cache in (True, False):
        out = greedy_decode(copy_model, src, mask, 12, START, use_cache=use_cache)
        if use_cache:
            cached = out
    assert torch.equal(cached, out)
    beam = beam_search(
        copy_model, src, mask, 12, START, END, beam_size=4, use_cache=True
    )
    plain = beam_search(
        copy_model, src, mask, 12, START, END, beam_size=4, use_cache=False
    )
    assert torch.equal(beam, plain)


def test_the_2017_model_decodes_without_a_cache_and_says_how_to_get_one():
    torch.manual_seed(0)
    simple = make_model(11, 11, N=1, d_model=16, d_ff=32, h=2).eval()
    src = torch.tensor([[1, 4, 5, 6, 2]])
    src_mask = padding_mask(src, 0)
    with pytest.raises(ValueError, match="use_cache=True needs a Transformer"):
        greedy_decode(simple, src, src_mask, 6, 1)
    full = Transformer(
        TransformerConfig(11, 11, N=1, d_model=16, d_ff=32, h=2)
    ).eval()
    full.load_state_dict(simple.state_dict())
    torch.testing.assert_close(
        greedy_decode(simple, src, src_mask, 6, 1, use_cache=False),
        greedy_decode(full, src, src_mask, 6, 1),
    )
