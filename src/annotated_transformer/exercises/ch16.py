"""Checks of chapter 16's exercises: BERT's masking, fine-tuning, GPT-2."""

from __future__ import annotations

import math
from types import ModuleType

import torch

from annotated_transformer.exercises.grading import (
    assert_equal,
    exercise,
    integers,
    rng,
    seed,
)
from annotated_transformer.exercises.protocol import build
from annotated_transformer.models.encoder_decoder import count_parameters
from annotated_transformer.models.encoder_only import (
    EncoderClassifier,
    EncoderConfig,
    MaskedLanguageModel,
)
from annotated_transformer.models.gpt2 import GPT2LM, GPTConfig

CHAPTER = "16"


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _within(count: int, total: int, share: float, what: str) -> None:
    """AssertionError unless count / total is within 5 standard errors of share."""
    sigma = math.sqrt(share * (1 - share) / total)
    got = count / total
    assert abs(got - share) < 5 * sigma, (
        f"{what}: {got:.2%} of {total:,}, expected {share:.0%} (± {5 * sigma:.2%})"
    )


@exercise(
    chapter=CHAPTER,
    name="mask_exactly",
    title="BERT's masking, 80/10/10, checked statistically",
    hint="Per row: list the positions of ordinary tokens, draw max(1, round(p · "
    "count)) of them without replacement (torch.randperm), then one uniform "
    "number each decides [MASK] (< 0.8), a random ordinary id (< 0.9) or "
    "unchanged. Use the generator.",
)
def check_mask_exactly(m: ModuleType) -> None:
    vocab, mask_id, specials = 60, 4, [0, 1, 2, 3]
    gen = rng(0)
    tokens = torch.randint(5, vocab, (1500, 40), generator=gen)
    tokens[:, 0] = 2  # [CLS]-like
    tokens[::3, 30:] = 0  # padding in every third row
    args = dict(mask_id=mask_id, vocab_size=vocab, special_ids=specials, p=0.15)
    inputs, labels = m.mask_exactly(tokens, generator=_seeded(1), **args)
    again = m.mask_exactly(tokens, generator=_seeded(1), **args)
    assert_equal(again[0], inputs, "the inputs drawn again with the same seed")
    other = m.mask_exactly(tokens, generator=_seeded(2), **args)[0]
    assert not torch.equal(other, inputs), "another generator must draw other masks"
    selected = labels != -100
    assert not selected[tokens < 4].any(), "a special token (id < 4) was selected"
    assert_equal(labels[selected], tokens[selected], "labels where selected")
    assert_equal(inputs[~selected], tokens[~selected], "the unselected positions")
    ordinary = (tokens >= 5).sum(1)
    wanted = torch.clamp((0.15 * ordinary.double()).round().long(), min=1)
    assert_equal(selected.sum(1), wanted, "tokens selected per row")
    chosen, original = inputs[selected], tokens[selected]
    masked = int((chosen == mask_id).sum())
    random_ids = chosen[(chosen != mask_id) & (chosen != original)]
    assert (random_ids >= 5).all(), "a random replacement must be an ordinary id"
    total = int(selected.sum())
    _within(masked, total, 0.8, "selected tokens replaced by [MASK]")
    # 10 % are drawn at random; one draw in 55 gives back the original id by chance
    _within(len(random_ids), total, 0.1 * 54 / 55, "tokens drawn at random")


@exercise(
    chapter=CHAPTER,
    name="load_matching",
    title="Fine-tuning starts from the pretrained encoder",
    hint="Compare the two state dicts name by name and shape by shape; "
    "model.load_state_dict(..., strict=False) copies a partial one.",
)
def check_load_matching(m: ModuleType) -> None:
    sizes = {"d_model": 16, "h": 2, "N": 2, "max_len": 20, "d_ff": 32}
    torch.manual_seed(seed(0))
    pretrained = MaskedLanguageModel(EncoderConfig(50, **sizes))
    classifier = build(EncoderClassifier, build(EncoderConfig, 50, 2, **sizes))
    head = {k: v.clone() for k, v in classifier.to_classes.state_dict().items()}
    state = pretrained.state_dict()
    skipped = m.load_matching(classifier, state)
    expected = ["to_classes.bias", "to_classes.weight"]
    assert skipped == expected, f"expected {expected} left out, got {skipped}"
    for name, value in classifier.state_dict().items():
        if name.startswith("to_classes."):
            before = head[name.removeprefix("to_classes.")]
            assert_equal(value, before, f"{name} (the new head, left alone)")
        else:
            assert_equal(value, state[name], f"{name} (copied from the encoder)")


@exercise(
    chapter=CHAPTER,
    name="token_bits_per_byte",
    title="Bits per byte from nats per token",
    hint="Add up −ln p of the target tokens, turn nats into bits (÷ ln 2), and "
    "divide by the bytes those target tokens spell, not by the number of tokens.",
)
def check_token_bits_per_byte(m: ModuleType) -> None:
    gen = rng(3)
    log_probs = torch.randn(12, 10, generator=gen).double().log_softmax(-1)
    targets = torch.randint(0, 10, (12,), generator=gen)
    token_bytes = torch.randint(1, 6, (10,), generator=gen)
    nats = [-log_probs[t, int(target)].item() for t, target in enumerate(targets)]
    bits = sum(nats) / math.log(2)
    n_bytes = sum(int(token_bytes[int(target)]) for target in targets)
    got = m.token_bits_per_byte(log_probs, targets, token_bytes)
    assert math.isclose(got, bits / n_bytes, rel_tol=1e-9), (
        f"expected {bits / n_bytes:.6f} bits per byte, got {got:.6f}"
    )
    ones = torch.ones(10, dtype=torch.long)  # tokens of one byte: bits per token
    per_token = m.token_bits_per_byte(log_probs, targets, ones)
    assert math.isclose(per_token, bits / 12, rel_tol=1e-9), (
        "when every token is one byte, bits per byte = bits per token"
    )


def _drawn_gpt2() -> tuple[int, ...]:
    """This run's (vocab, d_model, N, max_len, d_ff); d_model even (2 heads)."""
    vocab, half_d, N, max_len, d_ff = integers(0, 2, 40, 5)
    return vocab, 2 * half_d, N % 4 + 1, max_len, d_ff


@exercise(
    chapter=CHAPTER,
    name="gpt2_parameters",
    title="Count GPT-2's parameters",
    hint="Count matrix by matrix: the (tied) token table, the position table, "
    "then per block two LayerNorms (gain and bias), four d×d projections with "
    "biases and the two-layer MLP with biases; one more LayerNorm at the end. No "
    "output matrix.",
)
def check_gpt2_parameters(m: ModuleType) -> None:
    for vocab, d_model, N, max_len, d_ff in (
        (256, 16, 2, 8, 64),
        (768, 32, 3, 20, 48),
        _drawn_gpt2(),
    ):
        model = GPT2LM(GPTConfig(vocab, d_model, 2, N, max_len, d_ff))
        expected = count_parameters(model)
        got = m.gpt2_parameters(vocab, d_model, N, max_len, d_ff)
        assert got == expected, (
            f"GPT2LM(vocab={vocab}, d_model={d_model}, N={N}, max_len={max_len}, "
            f"d_ff={d_ff}) has {expected:,} parameters, you count {got:,}"
        )
