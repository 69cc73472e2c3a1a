"""Checks of chapter 10's exercises: the vocabulary, BLEU by hand, token budgets.

BLEU is checked against sacreBLEU, the scorer the chapter reports.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from types import ModuleType

from sacrebleu.metrics import BLEU

from annotated_transformer.data.vocab import SPECIALS
from annotated_transformer.exercises.grading import exercise, seed

CHAPTER = "10"


@exercise(
    chapter=CHAPTER,
    name="train_vocab",
    title="Find the bug: a vocabulary that has seen the test set",
    question="Which split may a model learn anything from, its vocabulary "
    "included?",
    hint="learn the vocabulary from the training split alone; the test sentences' "
    "words are unknown (UNK) to the model, as they would be to a deployed one.",
)
def check_train_vocab(module: ModuleType) -> None:
    train = [["a", "dog", "runs"], ["a", "dog", "sleeps"], ["a", "cat", "runs"]]
    val = [["a", "zebra", "runs"], ["a", "zebra", "sleeps"]]
    test = [["the", "zebra", "jumps"], ["the", "zebra", "jumps"]]
    _check_vocab(module, {"train": train, "val": val, "test2016": test}, 2)
    rng = random.Random(seed(13))  # made-up words; some only in val or test
    spelt = (
        "".join(rng.choices("abcdefgh", k=rng.randint(2, 5))) for _ in range(16)
    )
    words = sorted(set(spelt))
    seen, unseen = words[: len(words) // 2], words[len(words) // 2 :]
    train = [rng.choices(seen, k=rng.randint(2, 6)) for _ in range(8)]
    train.append([unseen.pop()])  # a word seen once in training
    splits = {
        name: [rng.choices(seen + unseen, k=rng.randint(2, 6)) for _ in range(5)]
        for name in ("val", "test2016")
    }
    splits["test2016"].append([unseen[0]])  # a word never seen in training
    for min_freq in (1, rng.randint(3, 5)):
        _check_vocab(module, {"train": train, **splits}, min_freq)


def _check_vocab(module: ModuleType, splits: dict, min_freq: int) -> None:
    """The vocabulary: the specials, then the training words seen min_freq times;
    a word of val or test alone is <unk>."""
    vocab = module.train_vocab(splits, min_freq)
    assert list(vocab.itos[: len(SPECIALS)]) == list(SPECIALS), (
        f"the vocabulary must start with the special tokens {SPECIALS}"
    )
    counts = Counter(t for sentence in splits["train"] for t in sentence)
    wanted = {t for t, n in counts.items() if n >= min_freq}
    words = set(vocab.itos[len(SPECIALS) :])
    leaked = sorted(words - set(counts))
    assert not leaked, (
        f"{leaked} never occur in the training split but got their own ids: "
        "a model cannot learn an embedding for them, and test words must be <unk>"
    )
    expected = sorted(wanted)
    message = f"expected the words seen {min_freq}+ times in training, {expected}"
    assert words == wanted, f"{message}: {sorted(words)}"
    test = {t for sentence in splits["test2016"] for t in sentence}
    for word in sorted(test - set(counts)):
        assert vocab[word] == vocab["<unk>"], (
            f"{word!r}, unseen in training, must map to <unk>"
        )


def _sacrebleu(hypotheses: list[list[str]], references: list[list[str]]):
    metric = BLEU(tokenize="none", smooth_method="none", force=True)
    hyps = [" ".join(h) for h in hypotheses]
    return metric.corpus_score(hyps, [[" ".join(r) for r in references]])


def _corpus(rng: random.Random, sentences: int) -> tuple[list, list]:
    words = [
        "a",
        "the",
        "dog",
        "cat",
        "runs",
        "on",
        "grass",
        "in",
        "park",
        "red",
        "ball",
    ]
    hyps, refs = [], []
    for _ in range(sentences):
        ref = [rng.choice(words) for _ in range(rng.randint(4, 12))]
        hyp = [w if rng.random() < 0.7 else rng.choice(words) for w in ref]
        hyps.append(hyp[: rng.randint(2, len(hyp))] if rng.random() < 0.5 else hyp)
        refs.append(ref)
    return hyps, refs


@exercise(
    chapter=CHAPTER,
    name="brevity_penalty",
    title="BLEU's brevity penalty",
    hint="Papineni et al. 2002, section 2.2.2: c output tokens against r "
    "reference tokens; there is no penalty when c > r, and an empty output scores "
    "nothing.",
)
def check_brevity_penalty(module: ModuleType) -> None:
    rng = random.Random(seed(10))
    for _ in range(20):
        result = _sacrebleu(*_corpus(rng, 5))
        ours = module.brevity_penalty(result.sys_len, result.ref_len)
        assert math.isclose(ours, result.bp, rel_tol=1e-9), (
            f"for {result.sys_len} output tokens against {result.ref_len} "
            "reference "
            f"tokens sacreBLEU's penalty is {result.bp:.6f}, yours {ours:.6f}"
        )
    assert module.brevity_penalty(12, 10) == 1.0, "a longer output is not penalised"
    assert module.brevity_penalty(0, 10) == 0.0, "an empty output has penalty 0"


@exercise(
    chapter=CHAPTER,
    name="corpus_bleu",
    title="Corpus BLEU by hand",
    hint="Count clipped n-gram matches and hypothesis n-grams for n = 1..4, "
    "summed over the whole corpus before any division; then the geometric mean of "
    "the four precisions times the brevity penalty of the corpus lengths, times "
    "100.",
)
def check_corpus_bleu(module: ModuleType) -> None:
    repeated = (["the", "the", "the", "the"], ["the", "cat", "is", "here"])
    score = module.corpus_bleu([repeated[0]], [repeated[1]])
    assert score == 0.0, (
        f"'the the the the' against 'the cat is here' scores {score}: clip each "
        "n-gram's "
        "count at its count in the reference (and no 2-gram matches: BLEU is 0)"
    )
    rng = random.Random(seed(11))
    for size in (1, 3, 10, 30):
        hyps, refs = _corpus(rng, size)
        expected = _sacrebleu(hyps, refs).score
        ours = module.corpus_bleu(hyps, refs)
        assert math.isclose(ours, expected, rel_tol=1e-9, abs_tol=1e-9), (
            f"on a corpus of {size} sentence(s) sacreBLEU (tokenize='none', no "
            "smoothing) "
            f"gives {expected:.4f}, yours {ours:.4f}"
        )


@exercise(
    chapter=CHAPTER,
    name="token_budget_batches",
    title="Batches under a token budget",
    hint="Visit the indices in order of length and start a new batch when one "
    "more sequence would make len(batch) × longest exceed the budget.",
)
def check_token_budget_batches(module: ModuleType) -> None:
    rng = random.Random(seed(12))
    for max_tokens in (40, 100, 333):
        lengths = [rng.randint(1, 50) for _ in range(200)]
        batches = module.token_budget_batches(lengths, max_tokens)
        flat = sorted(i for batch in batches for i in batch)
        every = list(range(len(lengths)))
        assert flat == every, "every index must be in exactly one batch"
        for batch in batches:
            cost = len(batch) * max(lengths[i] for i in batch)
            assert cost <= max_tokens or len(batch) == 1, (
                f"a batch of {len(batch)} with longest "
                f"{max(lengths[i] for i in batch)} "
                f"costs {cost} > max_tokens={max_tokens}"
            )
        for before, after in itertools.pairwise(batches):
            longest = max(lengths[i] for i in before)
            shortest = min(lengths[i] for i in after)
            assert longest <= shortest, "batches must come out in order of length"
            assert (len(before) + 1) * shortest > max_tokens, (
                f"a batch of {len(before)} could also have held the next sequence "
                f"(length {shortest}) within max_tokens={max_tokens}: fill batches "
                "up"
            )
