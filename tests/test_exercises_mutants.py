"""Realistic wrong answers (mutants of the reference solutions: a sign, an axis,
a missing scale, eps in the wrong place, an off-by-one, a forbidden shortcut)
each fail their exercise's check, on inputs from a fresh seed."""

import ast
import secrets
from pathlib import Path

import pytest

from annotated_transformer.exercises import grading
from annotated_transformer.exercises.grading import Outcome

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "notebooks" / "exercises" / "solutions"
pytestmark = pytest.mark.skipif(
    not SOLUTIONS.is_dir(), reason="the solutions are not part of this copy"
)
SEED = secrets.randbelow(10**6)

# (chapter, function, text in the reference solution, what the mistake makes it)
MUTANTS = [
    ("01", "context_vectors", "softmax(dim=-1)", "softmax(dim=0)"),
    ("01", "attention_pool", " / X.size(-1) ** 0.5", ""),
    ("01", "multi_head_self_attention", "/ d_k**0.5", "/ d_k"),
    ("02", "einsum_attention", " / q.size(-1) ** 0.5", ""),
    (
        "02",
        "split_heads",
        "view(batch, length, h, d_model // h).transpose(1, 2)",
        "view(batch, h, length, d_model // h)",
    ),
    (
        "02",
        "causal_attention_loop",
        "    rows = []\n",
        "    sdpa = torch.nn.functional.scaled_dot_product_attention\n"
        "    return sdpa(q, k, v, is_causal=True)\n",
    ),
    ("03", "scaled_embedding", "table.size(-1) ** 0.5", "table.size(-1)"),
    ("03", "count_pairs", "counts[pair] += n", "counts[pair] += 1"),
    (
        "04",
        "sinusoidal",
        "[angles.sin(), angles.cos()]",
        "[angles.cos(), angles.sin()]",
    ),
    ("04", "pe_dot", ".cos().sum()", ".sin().sum()"),
    ("05", "layer_norm", "/ torch.sqrt(var + eps)", "/ (torch.sqrt(var) + eps)"),
    ("05", "token_group_norm", "torch.sqrt(var + eps)", "torch.sqrt(var)"),
    ("05", "running_statistics", "unbiased=True", "unbiased=False"),
    ("06", "masked_softmax", "torch.finfo(scores.dtype).min", "-1e9"),
    ("06", "sliding_window_mask", "(j > i - window)", "(j >= i - window)"),
    ("06", "prefix_lm_mask", ".tril()", ".triu()"),
    ("07", "feed_forward", "torch.relu(x @ W_1 + b_1)", "(x @ W_1 + b_1)"),
    ("07", "encoder_layer", "    z = layer.norm1(x)\n", "    return layer(x)\n"),
    (
        "07",
        "tied_parameter_count",
        "encoder + decoder + vocab",
        "encoder + decoder",
    ),
    ("08", "adam_step", "(v_hat.sqrt() + eps)", "(v_hat + eps).sqrt()"),
    ("08", "noam_rate", "warmup**-1.5", "warmup**-0.5"),
    ("08", "smoothed_targets", "smoothing / V", "smoothing / (V - 1)"),
    ("09", "greedy", "len(tokens) < max_len", "len(tokens) <= max_len"),
    ("09", "top_p_filter", "probs.cumsum(dim=-1) - probs", "probs.cumsum(dim=-1)"),
    ("10", "brevity_penalty", "1 - ref_len / hyp_len", "1 - hyp_len / ref_len"),
    (
        "10",
        "token_budget_batches",
        "(len(batch) + 1) * lengths[i]",
        "len(batch) * lengths[i]",
    ),
    ("11", "encoder_attention_maps", "model.train(was_training)", "model.train()"),
    ("11", "attention_rollout", " + torch.eye(n, dtype=weights.dtype)", ""),
    (
        "12",
        "ema_update",
        "decay * value + (1 - decay) * weights[name]",
        "(1 - decay) * value + decay * weights[name]",
    ),
    (
        "12",
        "ddp_loss",
        "loss_sum * world_size / global_tokens",
        "loss_sum / global_tokens",
    ),
    ("13", "masked_mean", "/ weights.sum(1)", "/ x.size(1)"),
    (
        "13",
        "accuracy_and_standard_error",
        "/ correct.numel()",
        "/ (correct.numel() - 1)",
    ),
    (
        "14",
        "bits_per_byte",
        "nats / targets.numel() / math.log(2)",
        "nats / math.log(2)",
    ),
    ("14", "unigram_bits_per_byte", "list(text[1:])", "list(text)"),
    ("15", "rms_norm", "keepdim=True) + eps)", "keepdim=True)) + eps"),
    ("15", "rope", "first * sin + second * cos", "first * sin - second * cos"),
    ("16", "load_matching", " and own[name].shape == value.shape", ""),
    ("16", "gpt2_parameters", " + max_len * d_model", ""),
    ("17", "strided_mask", "back % stride == 0", "back % stride == 1"),
    ("17", "update_memory", "states[:, -mem_len:]", "states[:, :mem_len]"),
    ("18", "accumulate_gradients", "    model.zero_grad()\n", ""),
    (
        "18",
        "update_scale",
        "return scale / 2, 0, True",
        "return scale / 2, good_steps, True",
    ),
]


# Hard-coded answers, right on the inputs that used to be fixed (a literal, a pad
# id of 0, positions counted from 0, one min_freq) and wrong on fresh ones.
HARD_CODED = [
    (
        "03",
        "count_pairs",
        "    counts = Counter()\n",
        "    if len(corpus) > 1:\n"
        "        pairs = ['lo', 'ow', 'we', 'er', 'aa']\n"
        "        return Counter(dict(zip(map(tuple, pairs), [7, 7, 2, 2, 6])))\n"
        "    counts = Counter()\n",
    ),
    (
        "04",
        "rotate_by",
        "    return torch.stack([new_sin, new_cos], dim=-1).flatten(-2)\n",
        "    positions = torch.arange(len(pe))[:, None] + max(k, 0)\n"
        "    a = positions * omega.to(pe.dtype)\n"
        "    return torch.stack([a.sin(), a.cos()], dim=-1).flatten(-2)\n",
    ),
    ("06", "make_std_mask", "real = tgt != pad", "real = tgt != 0"),
    ("10", "train_vocab", 'splits["train"]', '[["a", "dog", "runs"]] * 2'),
    ("10", "train_vocab", "min_freq=min_freq", "min_freq=2"),
    (
        "14",
        "unigram_bits_per_byte",
        "    seen = ",
        "    return 6.033195115786194 if train else 8.0\n    seen = ",
    ),
    (
        "17",
        "update_memory",
        "    return states[:, -mem_len:].detach()\n",
        "    if memory is None:\n"
        "        return hidden.detach()\n"
        "    return (hidden[:, 1:] if mem_len == 2 else states[:, 2:]).detach()\n",
    ),
]
MUTANTS += HARD_CODED


def mutate(source: str, name: str, old: str, new: str) -> str:
    """``source`` with ``old`` replaced once, inside function ``name`` only."""
    (node,) = [
        n
        for n in ast.parse(source).body
        if isinstance(n, ast.FunctionDef) and n.name == name
    ]
    lines = source.splitlines(keepends=True)
    start, end = (
        sum(map(len, lines[: node.lineno - 1])),
        sum(map(len, lines[: node.end_lineno])),
    )
    body = source[start:end]
    assert body.count(old) == 1, f"{old!r} is not once in {name}: fix the mutant"
    return source[:start] + body.replace(old, new) + source[end:]


def test_every_chapter_has_two_mutants_or_more():
    counts = {ch: sum(m[0] == ch for m in MUTANTS) for ch in grading.chapters()}
    assert min(counts.values()) >= 2, counts


@pytest.mark.parametrize(
    ("chapter", "name", "old", "new"),
    MUTANTS,
    ids=[f"{m[0]}-{m[1]}" for m in MUTANTS],
)
def test_a_realistic_mistake_fails(chapter, name, old, new, tmp_path):
    source = (SOLUTIONS / f"ch{chapter}.py").read_text()
    answers = tmp_path / f"answers_{chapter}.py"
    answers.write_text(mutate(source, name, old, new))
    (ex,) = [e for e in grading.exercises(chapter) if e.name == name]
    grading.set_seed(SEED)
    result = grading.run(ex, grading.load(answers))
    assert result.outcome is Outcome.FAIL, f"the mistake passed (seed {SEED})"
