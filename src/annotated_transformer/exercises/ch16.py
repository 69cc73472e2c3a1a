"""Checks of chapter 16's exercises: BERT's masking, fine-tuning, and the
masked LM's accuracy."""

from __future__ import annotations

import math
from types import ModuleType

import torch

from annotated_transformer.exercises.grading import (
    assert_equal,
    exercise,
    rng,
    seed,
)
from annotated_transformer.exercises.protocol import build
from annotated_transformer.models.encoder_only import (
    EncoderClassifier,
    EncoderConfig,
    MaskedLanguageModel,
)

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
    name="masked_accuracy",
    title="The masked LM's accuracy counts the hidden words only",
    hint="Keep the positions whose label is not -100, compare the argmax of their "
    "logits with the label, and divide by the number kept, not by every position.",
)
def check_masked_accuracy(m: ModuleType) -> None:
    gen = rng(4)
    logits = torch.randn(6, 30, 11, generator=gen)
    labels = torch.randint(0, 11, (6, 30), generator=gen)
    hidden = torch.rand(6, 30, generator=gen) < 0.2
    # at least one hidden word predicted right and one word visible: an answer
    # that divides by every position must then score lower
    hidden[0, 0], hidden[0, 1] = True, False
    labels[0, 0] = logits[0, 0].argmax()
    labels[~hidden] = -100
    right = total = 0
    for row in range(6):
        for place in range(30):
            label = int(labels[row, place])
            if label != -100:
                total += 1
                right += int(logits[row, place].argmax()) == label
    got = m.masked_accuracy(logits, labels)
    assert math.isclose(got, right / total, rel_tol=1e-9), (
        f"{right} of {total} hidden words are predicted: expected "
        f"{right / total:.6f}, got {got:.6f}"
    )
    logits[~hidden] = 0.0  # the visible words' predictions must not count
    again = m.masked_accuracy(logits, labels)
    assert math.isclose(again, right / total, rel_tol=1e-9), (
        "the score changed with the predictions at positions labelled -100"
    )
