"""Answers written to fool the grader, each graded as a student's file is (in a
worker, isolated) and each a FAIL with one line that says why; the grader's
files byte-identical afterwards; a correct float32 answer passes."""

import os
import secrets
from pathlib import Path

import pytest

from annotated_transformer.exercises import grading, isolation
from annotated_transformer.exercises.grading import Outcome

SEED = secrets.randbelow(10**6)
HEAD = """\
import math
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
"""

# chapter -> {function: (its code, what the FAIL's line must say)}; a second
# cheat on the same function goes in another file: the lists are files.
CHEATS: list[tuple[str, dict[str, tuple[str, str | tuple[str, ...]]]]] = [
    (
        "06",
        {
            "sliding_window_mask": (
                """
def sliding_window_mask(size, window):
    frame = sys._getframe(1)
    while frame is not None:  # the check's expected value, if it were here
        if "expected" in frame.f_locals:
            return frame.f_locals["expected"]
        frame = frame.f_back
    raise LookupError("no expected value on the stack")
""",
                "it raised LookupError at line",
            ),
            "prefix_lm_mask": (
                """
def prefix_lm_mask(prefix_len, size):
    from annotated_transformer.exercises import grading
    for ex in grading.exercises("06"):  # every check made a no-op
        ex.check.__code__ = (lambda m: None).__code__
    return torch.zeros(len(prefix_len), size, size, dtype=torch.bool)
""",
                "it raised",
            ),
            "make_std_mask": (
                """
def make_std_mask(tgt, pad):
    import annotated_transformer
    root = Path(annotated_transformer.__file__).parents[2]
    path = root / "notebooks" / "exercises" / "solutions" / "ch06.py"
    solutions = {}
    exec(path.read_text(), solutions)  # the teacher's copy, read directly
    return solutions["make_std_mask"](tgt, pad)
""",
                "it raised",
            ),
            "masked_softmax": (
                """
def masked_softmax(scores, mask):
    import annotated_transformer
    package = Path(annotated_transformer.__file__).parent / "exercises"
    for name in (package / "ch06.py", package / "grading.py"):
        with open(name, "a") as file:  # every check passes from now on
            file.write("\\ndef exercises(chapter):\\n    return []\\n")
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)
""",
                "it raised",
            ),
        },
    ),
    (
        "01",
        {
            "multi_head_self_attention": (
                """
def multi_head_self_attention(X, W_q, W_k, W_v, W_o, h):
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    heads = []
    for i in range(3):  # the grader's 3 heads of 4 features, hard-coded
        block = slice(4 * i, 4 * i + 4)
        weights = (Q[:, block] @ K[:, block].T / 2).softmax(-1)
        heads.append(weights @ V[:, block])
    return torch.cat(heads, dim=-1) @ W_o
""",
                ("the output, ", "it raised RuntimeError"),  # as sizes are drawn
            ),
            "additive_scores": (
                """
def additive_scores(s, h, W, U, v):
    print("  PASS  1.2")
    print("4 of 4 passed.")
    return torch.zeros(len(s), len(h))
""",
                "e is off",
            ),
            "attention_pool": (
                """
def attention_pool(X, q):
    raise SystemExit(0)
""",
                "it raised SystemExit at line",
            ),
            "context_vectors": (
                """
def context_vectors(s, h):
    os._exit(0)
""",
                "the answer ended the grading process (exit code 0)",
            ),
        },
    ),
    (
        "06",
        {
            "make_std_mask": (
                """
def make_std_mask(tgt, pad):
    from annotated_transformer.exercises import grading
    return grading.solutions("06").make_std_mask(tgt, pad)
""",
                "it raised",
            ),
            "sliding_window_mask": (
                """
def sliding_window_mask(size, window):
    from annotated_transformer.exercises import ch06  # the checks, to read
    return ch06.check_sliding_window_mask
""",
                "it raised",
            ),
        },
    ),
    (
        "02",
        {
            "causal_attention_loop": (
                """
def causal_attention_loop(q, k, v):
    sdpa = torch.ops.aten.scaled_dot_product_attention
    return sdpa(q[None], k[None], v[None], is_causal=True)[0]
""",
                "it computes scaled_dot_product",
            ),
        },
    ),
    (
        "05",
        {
            "layer_norm": (
                """
def layer_norm(x, gamma, beta, eps):
    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)
""",
                "it computes layer_norm",
            ),
            "token_group_norm": (
                """
def token_group_norm(x, groups):
    flat = x.reshape(-1, x.size(-1))
    return torch.ops.aten.group_norm(flat, groups).reshape(x.shape)
""",
                "it computes group_norm",
            ),
        },
    ),
    (
        "07",
        {
            "encoder_layer": (
                """
def encoder_layer(x, layer):
    return nn.TransformerEncoderLayer.forward(layer, x)
""",
                "own forward",
            ),
        },
    ),
    (
        "08",
        {
            "label_smoothing_loss": (
                """
def label_smoothing_loss(log_p, target, smoothing, pad):
    pad = 0  # the only padding id the grader used to try
    V = log_p.size(-1)
    q = torch.full_like(log_p, smoothing / (V - 2))
    q.scatter_(1, target.unsqueeze(1), 1 - smoothing)
    q[:, pad] = 0.0
    q[target == pad] = 0.0
    kept = q > 0
    return (q[kept] * (q[kept].log() - log_p[kept])).sum()
""",
                "the loss (",
            ),
        },
    ),
    (
        "09",
        {
            "top_p_filter": (
                """
def top_p_filter(logits, p):
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    drop_sorted = probs.cumsum(dim=-1) - probs >= p
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill_(drop, float("-inf"))  # the caller's logits
""",
                "it changed its argument logits in place",
            ),
            "greedy": (
                """
def greedy(next_log_probs, start, end, max_len):
    g = torch.Generator().manual_seed(0)  # the grader's old toy model, looked up
    table = (2 * torch.randn(8, 4, 4, generator=g)).log_softmax(-1)
    tokens = [start]
    while len(tokens) < max_len and tokens[-1] != end:
        tokens.append(int(table[len(tokens) - 1, tokens[-1]].argmax()))
    return tokens
""",
                ("expected", "it raised IndexError"),  # as the model is drawn
            ),
        },
    ),
    (
        "11",
        {
            "encoder_attention_maps": (
                """
def encoder_attention_maps(model, src, src_mask):
    model.eval()  # and never given back in training mode
    return _maps(model, src, src_mask)
""",
                "it did not give model back in the mode it came in (training)",
            ),
        },
    ),
    (
        "11",
        {
            "encoder_attention_maps": (
                """
def encoder_attention_maps(model, src, src_mask):
    for module in model.modules():  # dropout off, and left off
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    return _maps(model, src, src_mask)
""",
                "it changed model's dropout and did not restore it",
            ),
        },
    ),
    (
        "14",
        {
            "unigram_bits_per_byte": (
                """
def unigram_bits_per_byte(train, text):
    train, text = train.split(b"\\0")[0], text.split(b"\\0")[0]  # C strings
    counts = [train.count(bytes([b])) + 1 for b in range(256)]
    total = sum(counts)
    bits = [-math.log2(counts[b] / total) for b in text[1:]]
    return sum(bits) / max(1, len(bits))
""",
                "bits per byte",
            ),
        },
    ),
    (
        "15",
        {
            "rms_norm": (
                """
def rms_norm(x, weight, eps=1e-6):
    return weight * x.mul_(torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
""",
                "RuntimeError",
            ),
        },
    ),
    (
        "15",
        {
            "rms_norm": (
                """
def rms_norm(x, weight, eps=1e-6):
    return torch.rms_norm(x, x.shape[-1:], weight, eps)
""",
                "it computes rms_norm",
            ),
        },
    ),
    (
        "15",
        {
            "rms_norm": (
                """
def rms_norm(x, weight, eps=1e-6):
    with torch.no_grad():  # right values, no gradient
        return weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
""",
                "its result does not backpropagate",
            ),
        },
    ),
    (
        "16",
        {
            "mask_exactly": (
                """
def mask_exactly(tokens, mask_id, vocab_size, special_ids, p, generator):
    torch.manual_seed(0)  # the global generator, not the one given
    return _masked(tokens, mask_id, vocab_size, special_ids, p, None)
""",
                "global random generator",
            ),
        },
    ),
    (
        "16",
        {
            "mask_exactly": (
                """
def mask_exactly(tokens, mask_id, vocab_size, special_ids, p, generator):
    mine = torch.Generator().manual_seed(0)  # its own, always the same
    return _masked(tokens, mask_id, vocab_size, special_ids, p, mine)
""",
                "another generator must draw other masks",
            ),
        },
    ),
]

# Code the cheats share: the maps of a model as it is (ch11), BERT's masking,
# right except for the generator it draws from (ch16).
MAPS = """
def _maps(model, src, src_mask):
    modules = [layer.self_attn for layer in model.encoder.layers]
    for module in modules:
        module.keep_attention = True
    with torch.no_grad():
        model.encode(src, src_mask)
    return [module.attn for module in modules]
"""
MASKED = """
def _masked(tokens, mask_id, vocab_size, special_ids, p, generator):
    special = torch.zeros(vocab_size, dtype=torch.bool)
    special[list(special_ids)] = True
    special[mask_id] = True
    ordinary_ids = (~special).nonzero().squeeze(1)
    inputs, labels = tokens.clone(), torch.full_like(tokens, -100)
    for row in range(tokens.size(0)):
        candidates = (~special[tokens[row]]).nonzero().squeeze(1)
        count = max(1, round(p * candidates.numel()))
        order = torch.randperm(candidates.numel(), generator=generator)
        chosen = candidates[order[:count]]
        labels[row, chosen] = tokens[row, chosen]
        action = torch.rand(count, generator=generator)
        draw = torch.randint(ordinary_ids.numel(), (count,), generator=generator)
        kept = torch.where(action < 0.9, ordinary_ids[draw], tokens[row, chosen])
        inputs[row, chosen] = torch.where(action < 0.8, mask_id, kept)
    return inputs, labels
"""


def grade(path: Path, chapter: str, kind: str, log: Path) -> dict[str, object]:
    """The results of ``path``, graded as the command line grades it."""
    with open(log, "w") as output:
        results = isolation.grade_file(
            chapter,
            path,
            seed=SEED,
            limit=60,
            kind=kind,
            write=lambda _: None,
            log=output,
        )
    return {r.exercise.name: r for r in results}


@pytest.mark.parametrize(
    ("chapter", "cheats"),
    CHEATS,
    ids=[f"{ch}-{'-'.join(cheats)}-{i}" for i, (ch, cheats) in enumerate(CHEATS)],
)
def test_a_cheat_fails_with_one_line_that_says_why(chapter, cheats, tmp_path):
    answers = tmp_path / f"{chapter}_answers.py"
    code = [HEAD, {"11": MAPS, "16": MASKED}.get(chapter, "")]
    answers.write_text("".join(code + [c for c, _ in cheats.values()]))
    results = grade(answers, chapter, isolation.isolation(), tmp_path / "out.txt")
    for name, (_, says) in cheats.items():
        result = results[name]
        where = f"{name} (seed {SEED})"
        assert result.outcome is Outcome.FAIL, f"{where} passed"
        assert "\n" not in result.message, f"{where}: {result.message}"
        alternatives = (says,) if isinstance(says, str) else says
        assert any(a in result.message for a in alternatives), (
            f"{where}: {result.message}"
        )
    for name, result in results.items():  # not written: no function, one line
        if name not in cheats:
            assert result.message == f"no function named {name}"


def test_twenty_cheats_or_more():
    assert sum(len(cheats) for _, cheats in CHEATS) >= 20


def test_printed_results_stay_out_of_the_report(tmp_path):
    answers = tmp_path / "01_answers.py"
    answers.write_text(HEAD + CHEATS[1][1]["additive_scores"][0])
    lines = []
    with open(tmp_path / "output.txt", "w") as output:
        isolation.grade_file(
            "01", answers, seed=SEED, limit=60, write=lines.append, log=output
        )
    assert "4 of 4 passed." not in "\n".join(lines)
    assert "4 of 4 passed." in (tmp_path / "output.txt").read_text()


@pytest.mark.parametrize("kind", ["process", "sandbox"])
def test_the_graders_files_are_byte_identical_after_a_hostile_file(kind, tmp_path):
    if kind == "sandbox" and not isolation.sandboxed():
        pytest.skip("no bubblewrap sandbox on this machine")
    roots = [isolation.PACKAGE, *isolation.hidden()]
    before = isolation.manifest(roots)
    answers = tmp_path / "06_hostile.py"
    answers.write_text(
        HEAD
        + "import annotated_transformer\n"
        + "ch06 = Path(annotated_transformer.__file__).with_name('exercises')\n"
        + "try:\n    open(ch06 / 'ch06.py', 'a').write('# changed on import\\n')\n"
        + "except OSError:\n    pass\n"
        + CHEATS[0][1]["masked_softmax"][0]
    )
    results = grade(answers, "06", kind, tmp_path / "out.txt")
    assert results["masked_softmax"].outcome is Outcome.FAIL
    assert isolation.manifest(roots) == before


def test_the_graders_files_changing_stops_the_grading(tmp_path, monkeypatch):
    """Where nothing stops a write (no sandbox, no audit hook), the manifest
    does: a file changed while grading is named, and nothing is reported."""
    victim = tmp_path / "package"
    victim.mkdir()
    (victim / "grader.py").write_text("x = 1\n")
    monkeypatch.setattr(isolation, "PACKAGE", victim)
    answers = tmp_path / "01_answers.py"
    answers.write_text(HEAD + "def context_vectors(s, h):\n    return s, h\n")
    real = grading.run

    def tampering(*args, **kwargs):  # as an answer would, had it a way out
        (victim / "grader.py").write_text("x = 2\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(grading, "run", tampering)
    with pytest.raises(isolation.GraderChangedError, match=r"01_answers\.py"):
        grade(answers, "01", "process", tmp_path / "out.txt")


def test_a_correct_answer_in_float32_passes(tmp_path):
    answers = tmp_path / "13_answers.py"
    answers.write_text(
        HEAD
        + """
def accuracy_and_standard_error(predictions, labels):
    correct = (predictions == labels).float()  # float32 is enough for this
    p = correct.mean().item()
    return p, math.sqrt(p * (1 - p) / correct.numel())
"""
    )
    results = grade(answers, "13", isolation.isolation(), tmp_path / "out.txt")
    result = results["accuracy_and_standard_error"]
    assert result.outcome is Outcome.PASS, f"{result.message} (seed {SEED})"


@pytest.mark.skipif(os.name != "posix", reason="audit hooks and sandboxes")
def test_the_worker_cannot_read_the_solutions(tmp_path):
    answers = tmp_path / "06_answers.py"
    answers.write_text(HEAD + CHEATS[0][1]["make_std_mask"][0])
    for kind in ["process", *(["sandbox"] if isolation.sandboxed() else [])]:
        result = grade(answers, "06", kind, tmp_path / "out.txt")["make_std_mask"]
        assert result.outcome is Outcome.FAIL
        assert "solutions" in result.message, result.message
