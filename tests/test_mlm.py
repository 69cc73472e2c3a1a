"""BERT's masking: selection rate, the 80/10/10 split, special ids,
labels, determinism, errors.

The rates are checked on ~170 000 ordinary tokens with a tolerance of 5 binomial
standard deviations, sqrt(q (1 - q) / n): a correct implementation fails with
probability < 1e-6 for any seed, while a wrong share (e.g. 0.15 -> 0.2, or
80/10/10 -> 70/15/15) lies far outside it.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from annotated_transformer.data.masking import mask_tokens

VOCAB, PAD, CLS, SEP, MASK = 30, 0, 1, 2, 3
SPECIAL = [PAD, CLS, SEP]  # MASK is special without being listed
ALL_SPECIAL = torch.tensor([*SPECIAL, MASK])
ORDINARY = sorted(set(range(VOCAB)) - {PAD, CLS, SEP, MASK})


def corpus(shape=(400, 500), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, shape, generator=g)


def run(tokens, p=0.15, seed=1):
    g = torch.Generator().manual_seed(seed)
    return mask_tokens(
        tokens,
        mask_id=MASK,
        vocab_size=VOCAB,
        special_ids=SPECIAL,
        p=p,
        generator=g,
    )


def assert_rate(count, n, q):
    sigma = math.sqrt(q * (1 - q) / n)
    assert abs(count / n - q) < 5 * sigma, (
        f"rate {count / n:.4f} vs {q} (5σ = {5 * sigma:.4f})"
    )


def test_selection_rate_and_80_10_10_split():
    tokens = corpus()
    inputs, labels = run(tokens)
    ordinary = ~torch.isin(tokens, ALL_SPECIAL)
    selected = labels != -100
    assert_rate(int(selected.sum()), int(ordinary.sum()), 0.15)

    n = int(selected.sum())
    masked = selected & (inputs == MASK)
    changed = selected & (inputs != MASK) & (inputs != tokens)
    kept = selected & (inputs == tokens)
    assert int(masked.sum() + changed.sum() + kept.sum()) == n
    # A random replacement equals the original with probability
    # 1/|ordinary|, then looks kept.
    same = 1 / len(ORDINARY)
    assert_rate(int(masked.sum()), n, 0.8)
    assert_rate(int(changed.sum()), n, 0.1 * (1 - same))
    assert_rate(int(kept.sum()), n, 0.1 + 0.1 * same)
    # Random replacements are ordinary ids, and every ordinary id gets drawn.
    assert sorted(inputs[changed].unique().tolist()) == ORDINARY


def test_specials_never_selected_labels_and_unselected_positions():
    tokens = corpus((50, 60), seed=3)
    before = tokens.clone()
    inputs, labels = run(tokens, p=0.5)
    special = torch.isin(tokens, ALL_SPECIAL)
    selected = labels != -100
    assert torch.equal(tokens, before)  # no in-place edits
    assert not (selected & special).any()
    assert torch.equal(labels[selected], tokens[selected])
    assert (labels[~selected] == -100).all()
    assert torch.equal(inputs[~selected], tokens[~selected])
    # A special id only appears in the inputs where it was in
    # the tokens, or as [MASK].
    is_special_input = torch.isin(inputs, torch.tensor(SPECIAL))
    assert torch.equal(is_special_input, torch.isin(tokens, torch.tensor(SPECIAL)))
    assert labels.dtype == torch.int64 and inputs.dtype == tokens.dtype


def test_p_zero_selects_nothing_and_p_one_every_ordinary_token():
    tokens = corpus((20, 30), seed=4)
    ordinary = ~torch.isin(tokens, ALL_SPECIAL)
    inputs, labels = run(tokens, p=0.0)
    assert torch.equal(inputs, tokens) and (labels == -100).all()
    _, labels = run(tokens, p=1.0)
    assert torch.equal(labels != -100, ordinary)


def test_same_seed_same_output_other_seed_differs():
    tokens = corpus((20, 30), seed=5)
    first, second, other = (
        run(tokens, seed=7),
        run(tokens, seed=7),
        run(tokens, seed=8),
    )
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert not torch.equal(first[1], other[1])


def test_labels_make_cross_entropy_average_over_selected_positions():
    tokens = corpus((4, 25), seed=6)
    _, labels = run(tokens, p=0.3)
    logits = torch.randn(4, 25, VOCAB, generator=torch.Generator().manual_seed(0))
    loss = F.cross_entropy(logits.transpose(1, 2), labels)
    selected = labels != -100
    log_p = logits.log_softmax(-1)[selected]  # (n_selected, vocab)
    expected = -log_p.gather(1, tokens[selected][:, None]).mean()
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"p": -0.1}, "p is a probability"),
        ({"p": 1.5}, "p is a probability"),
        ({"mask_id": VOCAB}, "mask_id"),
        ({"special_ids": [0, -1]}, "special_ids"),
        ({"vocab_size": 0}, "vocab_size must be"),
        (
            {"vocab_size": 4, "special_ids": [0, 1, 2]},
            "every id in the vocabulary is special",
        ),
        ({"tokens": torch.tensor([[1.0, 2.0]])}, "integer token ids"),
        ({"tokens": torch.tensor([[1, VOCAB]])}, "token ids must lie in"),
    ],
)
def test_errors(kwargs, message):
    args = {
        "tokens": torch.tensor([[1, 2]]),
        "mask_id": MASK,
        "vocab_size": VOCAB,
        "special_ids": SPECIAL,
    }
    args.update(kwargs)
    tokens = args.pop("tokens")
    with pytest.raises(ValueError, match=message):
        mask_tokens(tokens, **args)
