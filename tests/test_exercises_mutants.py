"""Tests that quote the solutions, left out of the student edition: realistic
wrong answers (mutants of the reference solutions: a sign, an axis, a missing
scale, eps in the wrong place, an off-by-one, a forbidden shortcut) each fail
their exercise's check, on inputs from a fresh seed; marking a class of them;
the Otter export; the student edition holds no solution expression."""

import ast
import csv
import json
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from annotated_transformer.exercises import grading, handout, otter
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
    (
        "16",
        "mask_exactly",
        "torch.where(action < 0.8,",
        "torch.where(action < 0.5,",
    ),
    ("16", "masked_accuracy", "[hidden] == labels[hidden]", " == labels"),
    ("17", "gpt2_parameters", " + max_len * d_model", ""),
    ("17", "gelu", "0.044715 * x**3", "0.044715 * x**2"),
    (
        "17",
        "token_bits_per_byte",
        "token_bytes[targets].sum().item()",
        "targets.numel()",
    ),
    ("18", "strided_mask", "back % stride == 0", "back % stride == 1"),
    ("18", "update_memory", "states[:, -mem_len:]", "states[:, :mem_len]"),
    ("19", "accumulate_gradients", "    model.zero_grad()\n", ""),
    (
        "19",
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
        "18",
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


def test_the_otter_export_grades_the_solutions_and_a_wrong_answer(
    tmp_path, monkeypatch
):
    execute = pytest.importorskip("otter.execute")
    folder = otter.export(tmp_path, ["05"], ROOT) / "ch05"
    tests = sorted(str(p) for p in (folder / "tests").glob("q*.py"))
    assert len(tests) == 4
    right = tmp_path / "right.py"
    shutil.copy(SOLUTIONS / "ch05.py", right)
    wrong = tmp_path / "wrong.py"  # eps added to the std, the original's mistake
    wrong.write_text(
        right.read_text().replace(
            "/ torch.sqrt(var + eps) + beta", "/ (torch.sqrt(var) + eps) + beta"
        )
    )
    loops = tmp_path / "loops.py"  # one endless loop: Otter's limit stops it
    loops.write_text(
        right.read_text().replace(
            '    """Layer norm', '    while True:\n        pass\n    """Layer norm'
        )
    )
    monkeypatch.setattr(otter, "LIMIT", 2)
    assert (folder / "requirements.txt").read_text().count("==") > 50  # pinned
    scores = {}
    for path in (right, wrong, loops):
        results = execute.grade_notebook(
            str(path), tests_glob=tests, test_dir=str(folder / "tests"), script=True
        )
        scores[path.name] = (results.total, results.possible)
    assert scores == {"right.py": (4, 4), "wrong.py": (3, 4), "loops.py": (3, 4)}, (
        scores
    )


def mark(folder: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "annotated_transformer.exercises", "mark"]
    command += [str(folder), "--out", str(out), "--seed", str(SEED), *extra]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT)


def test_marking_a_class_of_thirty_writes_the_right_marks(tmp_path):
    """Solutions, starters, mutants and cheats, as files and as folders: each
    student's row per exercise says what an independent reading expects."""
    source = (SOLUTIONS / "ch01.py").read_text()
    starter = grading.starter_path("01", ROOT)
    names = [ex.name for ex in grading.exercises("01")]
    folder, expected = tmp_path / "class", {}
    folder.mkdir()

    def submit(
        student: str, text: str, outcomes: dict[str, str], own: bool
    ) -> None:
        if own:  # a folder per student, the file named after the chapter
            (folder / student).mkdir()
            (folder / student / starter.name).write_text(text)
        else:
            (folder / f"{student}.py").write_text(text)
        for name in names:
            expected[student, name] = outcomes.get(name, outcomes.get("*", "PASS"))

    loop = "def attention_pool(X, q):\n    while True:\n        pass\n"
    for k in range(8):
        submit(f"right{k}", source, {}, own=k % 2 == 0)
    for k in range(6):
        submit(f"starter{k}", starter.read_text(), {"*": "TODO"}, own=k % 2 == 0)
    mutants = [m for m in MUTANTS if m[0] == "01"]
    for k, (_, name, old, new) in enumerate(mutants * 2):
        submit(f"mutant{k}", mutate(source, name, old, new), {name: "FAIL"}, k < 3)
    for k in range(2):
        submit(
            f"exits{k}", "raise SystemExit(0)\n", {"*": "FAIL:does not import"}, k
        )
        submit(f"syntax{k}", "def f(:\n", {"*": "FAIL:SyntaxError"}, own=k == 0)
        printed = "def additive_scores(*a):\n    print('4 of 4 passed.')\n"
        wrong = {"*": "FAIL:no function", "additive_scores": "FAIL:be a tensor"}
        submit(f"prints{k}", printed, wrong, own=k == 0)
        ends = (
            source
            + "\ndef context_vectors(s, h):\n    import os\n    os._exit(0)\n"
        )
        submit(f"ends{k}", ends, {"context_vectors": "FAIL:ended"}, own=k == 1)
        submit(
            f"loops{k}", source + "\n" + loop, {"attention_pool": "FAIL:ran for"}, k
        )
    assert len({student for student, _ in expected}) == 30
    done = mark(folder, tmp_path / "marks", "--chapter", "01", "--timeout", "10")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("] ") == 30  # progress, a line per student
    rows = json.loads((tmp_path / "marks" / "marks.json").read_text())
    with open(tmp_path / "marks" / "marks.csv", newline="") as file:
        assert list(csv.DictReader(file)) == [
            {k: str(v) for k, v in row.items()} for row in rows
        ]
    got = {(r["student"], r["exercise"].split()[1]): r for r in rows}
    assert set(got) == set(expected)
    for key, want in expected.items():
        result, _, says = want.partition(":")
        row = got[key]
        assert row["result"] == result and says in row["reason"], (key, row)
        assert row["seed"] == SEED and "\n" not in row["reason"]
    feedback = tmp_path / "marks" / "feedback"
    assert len(list(feedback.glob("*.txt"))) == 30
    printed = (tmp_path / "marks" / "output" / "prints0-01.txt").read_text()
    assert "4 of 4 passed." in printed
    assert "4 of 4 passed." not in (feedback / "prints0-01.txt").read_text()


def test_a_submission_that_cannot_be_graded_says_so(tmp_path):
    folder = tmp_path / "class"
    (folder / "alice").mkdir(parents=True)  # a folder without a chapter's file
    (folder / "bob.py").write_text("x = 1\n")  # no chapter named anywhere
    done = mark(folder, tmp_path / "marks")
    assert done.returncode == 3, done.stdout + done.stderr
    rows = json.loads((tmp_path / "marks" / "marks.json").read_text())
    assert [(r["student"], r["result"]) for r in rows] == [
        ("alice", "NOT GRADED"),
        ("bob", "NOT GRADED"),
    ]
    assert mark(tmp_path / "missing", tmp_path / "marks").returncode == 2


def test_the_student_edition_holds_no_solution_expression(tmp_path):
    """Compared as tokens: an expression of a solution split over lines, spaced
    otherwise or commented is found as well as a copied line."""
    names = handout.files(ROOT)
    handout.build(ROOT, tmp_path)  # refuses to write a student edition that leaks
    hidden = handout.secrets(ROOT, names)
    named = {  # key expressions a leaked test once quoted
        "loss_sum * world_size / global_tokens",
        "states[:, -mem_len:].detach()",
    }
    assert named <= set(hidden.values())
    assert len(hidden) > 100 and handout.leaks(tmp_path / "teacher", hidden)
    student = tmp_path / "student"
    assert handout.leaks(student, hidden) == []
    assert handout.leaks(tmp_path / "otter", hidden) == []
    for name in [*handout.TEACHERS, handout.SOLUTIONS]:
        assert (tmp_path / "teacher" / name).exists()
        assert not (student / name).exists(), name
    chapters = list((student / "notebooks").glob("[0-9][0-9]_*.*"))
    assert len(chapters) == len(list((ROOT / "notebooks").glob("[0-9][0-9]_*.*")))
    for path in chapters:
        text = path.read_text(encoding="utf-8")
        assert (
            "{dropdown} Solution" not in text and "exercises/solutions" not in text
        )
        assert "## Exercises" in text  # the statements stay
    planted = student / "tests" / "test_planted.py"
    planted.write_text(
        "x = (states[:,\n   -mem_len :]  # the memory\n .detach())\n"
    )
    found = handout.leaks(student, hidden)
    assert "test_planted.py: states[:, -mem_len:].detach()" in found
    assert all(leak.startswith("test_planted.py: ") for leak in found)
