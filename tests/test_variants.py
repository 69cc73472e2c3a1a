"""Variants by class, not by string (issue 46): the model code has no branch on a
variant's name, and a new part is one class plus one table entry (the ReLU²
feed-forward of book/contributing.md, "Adding a model")."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest
import torch

from annotated_transformer.blocks.feed_forward import (
    GELUFeedForward,
    ReLU2FeedForward,
)
from annotated_transformer.models.gpt2 import GPT2LM, GPTConfig
from annotated_transformer.tasks.base import from_settings
from annotated_transformer.tasks.lm import LanguageModel, LanguageModelConfig
from annotated_transformer.tasks.variants import (
    FEED_FORWARDS,
    NORMS,
    PATTERNS,
    POSITIONS,
)

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "annotated_transformer"
TINY = {"N": 2, "d_model": 16, "d_ff": 32, "h": 2, "max_len": 8, "batch_size": 3}
NAMES = sorted({*NORMS, *POSITIONS, *FEED_FORWARDS, *PATTERNS, "rotary"})
# A comparison with a variant's name, either way round: x == "rope",
# "swiglu" != y, name in ("rms", "layer"); or a test of a flag named after one:
# if self.rope:, rope and alibi, not self.alibi (but not rope is None: an
# argument given or not).
QUOTED = "|".join(re.escape(name) for name in NAMES)
BRANCH = re.compile(
    rf"""(==|!=|\bin)\s*[(\[{{]?\s*["']({QUOTED})["']"""
    rf"""|["']({QUOTED})["']\s*(==|!=)"""
    rf"""|\b(if|elif|and|or|not)\s+(self\.)?({QUOTED})\b(?!\s+is\b)"""
)


def code(path: Path) -> list[tuple[int, str]]:
    """The numbered lines of a module outside its docstrings, comments cut."""
    source = path.read_text()
    firsts = (getattr(node, "body", None) for node in ast.walk(ast.parse(source)))
    docstrings = [
        body[0]
        for body in firsts
        if isinstance(body, list)
        and body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    ]
    prose = {n for d in docstrings for n in range(d.lineno, d.end_lineno + 1)}
    return [
        (number, line.split("#")[0])
        for number, line in enumerate(source.splitlines(), 1)
        if number not in prose
    ]


def test_no_string_branch_on_a_variant_name_in_blocks_or_models():
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for folder in ("blocks", "models")
        for path in sorted((PACKAGE / folder).glob("*.py"))
        for number, line in code(path)
        if BRANCH.search(line)
    ]
    assert not found, "branches on variant names:\n" + "\n".join(found)


def test_the_pattern_finds_the_branches_it_is_meant_to():
    for line in (
        'ff = SwiGLU if feed_forward == "swiglu" else Relu',
        "if self.positions == 'learned':",
        'if "rms" == norm:',
        'elif norm in ("rms", "layer"):',
        'if pattern == "strided"',
        "if self.rope:",
        "if rope and alibi:",
        "is_causal=past == 0 and not self.alibi and mask is None,",
    ):
        assert BRANCH.search(line), line
    for line in (
        'FEED_FORWARDS = {"swiglu": SwiGLU}',
        "if rope is None:",
        "if terms is not None:",
    ):
        assert not BRANCH.search(line), line


def test_gpt2_names_its_gelu_feed_forward_instead_of_swapping_one_in():
    model = GPT2LM(GPTConfig(vocab=20, d_model=16, h=2, N=2, max_len=8))
    assert model.config.feed_forward is GELUFeedForward is FEED_FORWARDS["gelu"]
    assert all(
        type(block.feed_forward) is GELUFeedForward for block in model.blocks
    )


def test_an_unknown_name_is_one_clear_error():
    with pytest.raises(ValueError, match="feed_forward='relu3': use one of swiglu"):
        from_settings(
            LanguageModelConfig, dict(block="modern", feed_forward="relu3", **TINY)
        )


def test_relu2_is_max_0_squared():
    """Against the formula written with torch.where, not the class's F.relu."""
    torch.manual_seed(0)
    ff = ReLU2FeedForward(8, 16, dropout=0.0)
    x = torch.randn(3, 5, 8)
    hidden = x @ ff.w_1.weight.T + ff.w_1.bias
    hidden = torch.where(hidden > 0, hidden * hidden, torch.zeros_like(hidden))
    expected = hidden @ ff.w_2.weight.T + ff.w_2.bias
    torch.testing.assert_close(ff(x), expected)


def tiny_model_task(feed_forward: str) -> LanguageModel:
    config = from_settings(
        LanguageModelConfig, dict(block="modern", feed_forward=feed_forward, **TINY)
    )
    task = LanguageModel(config)
    g = torch.Generator().manual_seed(0)
    train, val = (
        torch.randint(0, 256, (n,), generator=g).byte() for n in (400, 90)
    )
    task.splits = {"train": train, "val": val}
    return task


@pytest.mark.parametrize("feed_forward", list(FEED_FORWARDS))
def test_each_feed_forward_builds_trains_a_step_and_decodes_with_its_cache(
    feed_forward,
):
    task = tiny_model_task(feed_forward)
    torch.manual_seed(0)
    model = task.build_model()
    assert all(
        type(block.feed_forward) is FEED_FORWARDS[feed_forward]
        for block in model.blocks
    )
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss, n = task.loss(model, task.batches(0)[0])
    (loss / n).backward()
    optimizer.step()
    assert math.isfinite(loss.item())
    assert all(
        not torch.equal(a, b)
        for a, b in zip(before, model.parameters(), strict=True)
    )
    model.eval()
    x = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        whole, cache = model(x), model.new_cache()
        parts = [model(piece, cache) for piece in (x[:, :3], x[:, 3:4], x[:, 4:])]
    torch.testing.assert_close(torch.cat(parts, 1), whole, atol=1e-5, rtol=1e-5)
