"""The book's diagrams: committed files are current, readable, placed in their
chapters, and every shape, count and class name they state is what the package
does."""

from __future__ import annotations

import inspect
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from annotated_transformer.blocks.attention import MultiHeadedAttention
from annotated_transformer.blocks.kv_cache import DecoderCache
from annotated_transformer.blocks.layers import TransformerBlock
from annotated_transformer.blocks.masks import padding_mask
from annotated_transformer.book import figures
from annotated_transformer.data.masking import mask_tokens
from annotated_transformer.models.decoder_only import DecoderLM
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
    make_model,
)
from annotated_transformer.models.encoder_only import EncoderConfig
from annotated_transformer.models.modern_decoder import ModernBlock, ModernConfig
from annotated_transformer.training.memory import per_device_bytes, training_memory

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "notebooks" / "figures"
NS = "{http://www.w3.org/2000/svg}"


def tree(name: str) -> ET.Element:
    return ET.fromstring(figures.FIGURES[name]())


def texts(root: ET.Element) -> list[ET.Element]:
    return list(root.iter(f"{NS}text"))


def cells(root: ET.Element, mask: str) -> list[bool]:
    return [
        e.get("data-on") == "1" for e in root.iter() if e.get("data-mask") == mask
    ]


def test_committed_figures_are_what_the_source_draws() -> None:
    assert figures.stale(FOLDER) == [], "figures are out of date: run make figures"
    extra = {p.stem for p in FOLDER.glob("*.svg")} - set(figures.FIGURES)
    assert not extra, f"files no figure function draws: {sorted(extra)}"


@pytest.mark.parametrize("name", sorted(figures.FIGURES))
def test_figure_is_readable_on_a_phone(name: str) -> None:
    """Same width for all, a light card of its own, no label under 13 units
    (about 12 px at 360 px), and no unsqueezed line wider than the card
    (generous glyph widths)."""
    root = tree(name)
    width, height = map(float, root.get("viewBox").split()[2:])
    assert width == figures.WIDTH
    assert root.find(f"{NS}title").text
    card = root.find(f"{NS}rect")
    assert (
        card.get("fill") == figures.CARD and float(card.get("height")) == height - 2
    )
    for t in texts(root):
        size, x = float(t.get("font-size")), float(t.get("x"))
        assert size >= figures.MIN_FONT, (t.text, size)
        assert 0 <= x <= width and 0 <= float(t.get("y")) <= height, t.text
        if t.get("textLength"):
            continue
        per_char = (
            0.6 if t.get("class") == "m" else 0.58 if t.get("font-weight") else 0.5
        )
        span = len(t.text) * size * per_char
        left = {"start": x, "end": x - span}.get(t.get("text-anchor"), x - span / 2)
        assert left >= 3 and left + span <= width - 3, (t.text, left, left + span)


def test_every_figure_is_in_a_chapter_with_alt_text() -> None:
    used: dict[str, str] = {}
    for chapter in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")):
        source = chapter.read_text(encoding="utf-8")
        markdown = re.sub(r"\n# ?", "\n", source)
        for alt, name in re.findall(
            r"!\[([^\]]*(?:\[[^\]]*\][^\]]*)*)\]\(figures/(\w+)\.svg\)", markdown
        ):
            assert len(alt.split()) >= 10, (
                f"{chapter.name}: {name} needs an alt text"
            )
            # MyST joins the lines of an alt text without a
            # space: keep it on one line
            assert "\n" not in alt, f"{chapter.name}: {name}'s image on one line"
            assert name.startswith(chapter.name[:2]), f"{name} is in {chapter.name}"
            used[name] = chapter.name
    assert sorted(used) == sorted(figures.FIGURES)


def test_full_model_boxes_name_the_classes_that_implement_them() -> None:
    """Each labelled box's class is the class at that attribute of a
    make_model model, N is make_model's default, and every class of the
    model's structure is drawn."""
    n_default = inspect.signature(make_model).parameters["N"].default
    model = make_model(11, 11, d_model=8, d_ff=16, h=2)  # N left at its default
    assert len(model.encoder.layers) == len(model.decoder.layers) == n_default
    root = tree("07_full_model")
    drawn = set()
    for e in root.iter():
        if e.get("data-class") is not None:
            module = model.get_submodule(e.get("data-module"))
            assert type(module).__name__ == e.get("data-class"), e.get(
                "data-module"
            )
            drawn.add(e.get("data-class"))
    counts = {t.text for t in texts(root) if t.get("data-count") == "N"}
    assert counts == {f"N = {n_default} ×"}
    structural = {type(m).__name__ for m in model.modules()} - {
        "ModuleList",
        "Linear",
        "Dropout",
        "Embedding",
    }
    assert structural == drawn


def test_block_today_boxes_name_the_classes_that_implement_them() -> None:
    blocks = {
        "TransformerBlock": TransformerBlock(
            EncoderConfig(d_model=8, h=2, d_ff=16)
        ),
        "ModernBlock": ModernBlock(
            ModernConfig(d_model=8, h=2, kv_heads=1, d_ff=16)
        ),
    }
    seen = set()
    for e in tree("15_block_today").iter():
        if e.get("data-root") is not None:
            module = blocks[e.get("data-root")].get_submodule(e.get("data-module"))
            assert type(module).__name__ == e.get("data-class")
            seen.add(e.get("data-root"))
    assert seen == set(blocks)


def test_multihead_shapes_are_the_package_shapes() -> None:
    sizes = figures.MULTIHEAD
    chapter = (ROOT / "notebooks" / "02_self_attention.py").read_text(
        encoding="utf-8"
    )
    stated = "batch, t, d_model, h = {batch}, {t}, {d_model}, {h}".format(**sizes)
    assert stated in chapter, "the figure uses chapter 02's example sizes"
    batch, t, d_model, h = sizes["batch"], sizes["t"], sizes["d_model"], sizes["h"]
    mha = MultiHeadedAttention(h, d_model, dropout=0.0).eval()
    split = []
    original = mha.split
    mha.split = lambda x: split.append(original(x)) or split[-1]  # type: ignore
    x = torch.randn(batch, t, d_model)
    out = mha(x, x, x)
    projected = mha.linears[0](x)
    d_k = d_model // h
    expected = [
        x.shape,
        projected.shape,
        projected.view(batch, t, h, d_k).shape,
        split[0].shape,
        split[0].shape,  # attention keeps each head's (t, d_k)
        out.shape,
        out.shape,
    ]
    root = tree("02_multihead_shapes")
    found = {
        int(e.get("data-shape")): e.text for e in texts(root) if e.get("data-shape")
    }
    assert found == {i: str(tuple(s)) for i, s in enumerate(expected)}
    assert f"weights {tuple(mha.attn.shape)}" in [e.text for e in texts(root)]


def test_mask_figure_is_the_rule_of_chapter_06() -> None:
    """Hand-written rules: real keys only; j ≤ i; and both, a
    padded query seeing itself."""
    root = tree("06_masks")
    words = figures.MASK_PAIR
    for side in ("src", "tgt"):
        assert cells(root, f"padding_{side}") == [w != "<pad>" for w in words[side]]
    real, n = [w != "<pad>" for w in words["tgt"]], len(words["tgt"])
    future = [j <= i for i in range(n) for j in range(n)]
    target = [
        (j <= i and real[j]) if real[i] else i == j
        for i in range(n)
        for j in range(n)
    ]
    assert cells(root, "future") == future
    assert cells(root, "target") == target
    src, _, pad = figures.mask_pair_ids()
    assert padding_mask(src, pad).shape == (
        1,
        1,
        len(words["src"]),
    )  # the stated shape


def test_packing_figure_keeps_each_pair_apart() -> None:
    src_seg = [
        k + 1 for k, (s, _) in enumerate(figures.PACK_PAIRS) for _ in range(s)
    ]
    tgt_seg = [
        k + 1 for k, (_, t) in enumerate(figures.PACK_PAIRS) for _ in range(t - 1)
    ]
    src_seg += [0] * (figures.PACK_LONGEST[0] - len(src_seg))
    tgt_seg += [0] * (figures.PACK_LONGEST[1] - 1 - len(tgt_seg))

    def rule(q: list[int], k: list[int], causal: bool) -> list[bool]:
        return [
            (q[i] == k[j] and (j <= i or not causal)) if q[i] else True
            for i in range(len(q))
            for j in range(len(k))
        ]

    root = tree("10_packing")
    assert cells(root, "encoder") == rule(src_seg, src_seg, False)
    assert cells(root, "decoder") == rule(tgt_seg, tgt_seg, True)
    assert cells(root, "cross") == rule(tgt_seg, src_seg, False)


def test_kv_cache_figure_counts_what_the_cache_holds() -> None:
    model = Transformer(
        TransformerConfig(11, 11, N=2, d_model=8, d_ff=16, h=2)
    ).eval()
    src = torch.randint(3, 11, (1, figures.KV_SRC_LEN))
    src_mask = padding_mask(src, 0)
    memory = model.encode(src, src_mask)
    cache = DecoderCache(2)
    root = tree("09_kv_cache")
    shown = [e.text for e in texts(root)]
    for t in range(1, len(figures.KV_STEPS) + 1):
        model.decode(memory, src_mask, torch.tensor([[1]]), None, cache)
        self_kv, src_kv = cache.layers[0]
        batch, h, length, d_k = self_kv.key.shape
        assert (
            length
            == t
            == sum(e.get("data-cache") == f"self{t}" for e in root.iter())
        )
        src_len = src_kv.key.size(2)
        assert src_len == sum(e.get("data-cache") == f"src{t}" for e in root.iter())
        assert (batch, h, d_k) == (1, 2, 4)  # stated symbolically as (1, h, t, d_k)
        assert f"(1, h, {t}, d_k)" in shown and f"(1, h, {src_len}, d_k)" in shown


def test_beam_figure_keeps_the_best_hypotheses() -> None:
    """Brute force: the kept boxes are the beam_size best totals of each step."""
    kept_drawn = [
        e.get("data-kept") == "1"
        for e in texts(tree("09_beam_search"))
        if e.get("data-kept")
    ]
    score, expected = {(): 0.0}, []
    for level in figures.BEAM_STEPS:
        totals = [score[p] + lp for p, _, lp in level]
        best = sorted(totals, reverse=True)[: figures.BEAM_SIZE]
        expected += [total in best for total in totals]
        score |= {(*p, tok): score[p] + lp for p, tok, lp in level}
    assert kept_drawn == expected


def test_bert_figure_states_mask_tokens_rule() -> None:
    assert (
        inspect.signature(mask_tokens).parameters["p"].default == figures.P_SELECT
    )
    vocab, mask_id = 1000, 4
    tokens = torch.randint(5, vocab, (200_000,))
    inputs, labels = mask_tokens(
        tokens,
        mask_id=mask_id,
        vocab_size=vocab,
        special_ids=[0, 1, 2, 3],
        generator=torch.Generator().manual_seed(0),
    )
    chosen = labels != -100
    assert chosen.float().mean().item() == pytest.approx(
        figures.P_SELECT, abs=0.005
    )
    share = {
        "[MASK]": (inputs[chosen] == mask_id).float().mean().item(),
        "unchanged": (inputs[chosen] == tokens[chosen]).float().mean().item(),
    }
    share["random"] = 1 - share["[MASK]"] - share["unchanged"]
    for kind, fraction in figures.SPLIT.items():
        assert share[kind] == pytest.approx(fraction, abs=0.01), kind
    rule = " ".join(
        e.text for e in texts(tree("16_bert_masking")) if e.get("data-rule")
    )
    assert f"p = {figures.P_SELECT}" in rule and "80 % [MASK]" in rule


def test_parallelism_figure_bytes_are_the_memory_model() -> None:
    b = training_memory(
        DecoderLM, N=2, d_model=16, d_ff=32, h=2, vocab=50, batch=2, length=8
    )
    per_param = figures.STATE_BYTES
    assert b.params == per_param["weights"] * b.parameters
    assert b.grads == per_param["gradients"] * b.parameters
    assert b.adam == per_param["Adam m, v"] * b.parameters
    total = sum(per_param.values())
    w = figures.WORLD_SIZE
    assert per_device_bytes("ddp", b, w) == total * b.parameters
    assert (
        per_device_bytes("fsdp", b, w)
        == -(-total * b.parameters // w) + 8 * b.unit_parameters
    )
    stated = [e.text for e in texts(tree("19_parallelism")) if e.get("data-bytes")]
    assert stated[0].startswith(f"every rank: {total}P bytes")
    assert stated[1] == f"every rank: {total}P / {w} bytes + one unit"
