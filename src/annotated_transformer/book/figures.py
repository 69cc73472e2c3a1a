"""The book's diagrams, drawn as hand-written SVG: one function per figure.

``python -m annotated_transformer.book.figures [DIR]`` (``make figures``) writes
every figure to ``DIR/<name>.svg`` (default ``notebooks/figures``), where chapters
include them as ``![alt](figures/<name>.svg)``: the same relative path works in
Jupyter and on the site (``book/notebooks`` is a link to ``../notebooks``).
``--check`` only reports the files that differ from what this module draws now
(``tests/test_figures.py`` does the same).

Why hand-written SVG: a figure is a few dozen boxes, arrows and labels, so a small
canvas (:class:`Canvas`) is enough. The source is plain Python a diff can review,
the output is plain text, nothing is installed (Graphviz would be a system
dependency; matplotlib and Altair place labels by data coordinates, not by the
layout a diagram needs), and a figure can read its names and numbers from the
package itself (a mask is drawn from
:func:`~annotated_transformer.blocks.masks.make_std_mask`'s output), which tests
then check.

One style: the palette :data:`TONES`, a sans font for prose and a monospace one for
code names, the arrow marker of :meth:`Canvas.svg`. Every figure is :data:`WIDTH`
units wide and draws its own light card, so it reads on the site's dark theme too;
labels are at least :data:`MIN_FONT` units, i.e. about 12 px when a phone shows the
figure 360 px wide. Compact layouts stack rather than spread. Elements that name a
package class carry ``data-class`` (and ``data-module``, the attribute path in the
model), mask cells carry ``data-mask`` and ``data-on``: the tests read those back.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path

import torch

from annotated_transformer.blocks import attention, embeddings, layers, positional
from annotated_transformer.blocks.masks import (
    make_std_mask,
    padding_mask,
    subsequent_mask,
)
from annotated_transformer.data.batching import PackedBatch
from annotated_transformer.models import encoder_decoder as model

WIDTH = 380  # viewBox units; shown 1.25x on a wide screen, scaled down on a phone
SCALE = 1.25
MIN_FONT = 13
SANS = (
    "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, "
    "sans-serif"
)
MONO = (
    "ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', monospace"
)
INK, MUTED, CARD, EDGE = "#1f2933", "#52606d", "#fbfaf6", "#d8d3c4"
# (fill, stroke) per role: blue encoder/queries, orange decoder/keys, green values
# and feed-forward, purple norms, grey neutral, red what is dropped or hidden.
TONES = {
    "blue": ("#dbe8fb", "#2c5aa0"),
    "orange": ("#fde6cf", "#a4501a"),
    "green": ("#dcf1e1", "#2f7a46"),
    "purple": ("#ebe4fa", "#6142a8"),
    "grey": ("#eceff3", "#5b6776"),
    "red": ("#fbe0e0", "#a23232"),
}
ON = "#2c5aa0"  # a mask cell that may attend
OFF = "#e6e8ec"  # a hidden one
# packing: padding, pair 1, 2, 3
SEGMENT_TONES = ("grey", "blue", "orange", "green")


class Canvas:
    """An SVG drawing WIDTH units wide; height grows with what is drawn."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.items: list[str] = []
        self.bottom = 0.0

    def _grow(self, y: float) -> None:
        self.bottom = max(self.bottom, y)

    def text(
        self,
        x: float,
        y: float,
        s: str,
        size: float = 14,
        mono: bool = False,
        anchor: str = "middle",
        fill: str = INK,
        bold: bool = False,
        fit: float | None = None,
        attrs: dict[str, str] | None = None,
    ) -> None:
        """One line of text, baseline at y; squeezed to ``fit`` units if it is
        wider."""
        extra = "".join(f' {k}="{escape(v)}"' for k, v in (attrs or {}).items())
        width = len(s) * size * (0.6 if mono or bold else 0.55)
        # Monospace widths are known: keep the line inside the card.
        if fit is None and mono:
            fit = {"start": WIDTH - 8 - x, "end": x - 8}.get(
                anchor, 2 * min(x, WIDTH - x) - 16
            )
        if fit is not None and width > fit:
            extra += f' textLength="{fit:g}" lengthAdjust="spacingAndGlyphs"'
        family = "m" if mono else "s"
        weight = ' font-weight="600"' if bold else ""
        self.items.append(
            f'<text x="{x:g}" y="{y:g}" class="{family}" font-size="{size:g}" '
            f'text-anchor="{anchor}" '
            f'fill="{fill}"{weight}{extra}>{escape(s)}</text>'
        )
        self._grow(y + size * 0.3)

    def notes(self, y: float, lines: Sequence[str]) -> None:
        """What the figure shows, in words: muted lines under the drawing, from
        the left edge, the first baseline at y."""
        for i, s in enumerate(lines):
            self.text(14, y + i * 18, s, 13, anchor="start", fill=MUTED)

    def rect(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        tone: str = "grey",
        rx: float = 6,
        dashed: bool = False,
        fill: str | None = None,
        attrs: dict[str, str] | None = None,
    ) -> None:
        face, stroke = TONES[tone]
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        extra = "".join(f' {k}="{escape(v)}"' for k, v in (attrs or {}).items())
        self.items.append(
            f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" rx="{rx:g}" '
            f'fill="{fill or face}" stroke="{stroke}" '
            f'stroke-width="1.2"{dash}{extra}/>'
        )
        self._grow(y + h)

    def box(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        label: str,
        tone: str = "grey",
        mono: bool = True,
        sub: str | None = None,
        dashed: bool = False,
        attrs: dict[str, str] | None = None,
    ) -> None:
        """A rounded box with a label (and a smaller second line) centred in it."""
        self.rect(x, y, w, h, tone, dashed=dashed)
        cx = x + w / 2
        if sub is None:
            self.text(cx, y + h / 2 + 5, label, 14, mono, fit=w - 8, attrs=attrs)
        else:
            self.text(cx, y + h / 2 - 3, label, 14, mono, fit=w - 8, attrs=attrs)
            self.text(cx, y + h / 2 + 14, sub, 13, False, fill=MUTED, fit=w - 8)

    def named(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        attr: str,
        cls: type,
        tone: str,
        module: str | None = None,
    ) -> None:
        """A box naming a module: its attribute (sans) and its class (monospace)."""
        self.rect(x, y, w, h, tone)
        data = {"data-class": cls.__name__}
        if module is not None:
            data["data-module"] = module
        size, cx = 14, x + w / 2
        name_w = len(attr) * 13 * 0.56 + 10
        cls_w = len(cls.__name__) * size * 0.6
        start = cx - (name_w + cls_w) / 2
        self.text(start, y + h / 2 + 5, attr, 13, anchor="start", fill=MUTED)
        self.text(
            start + name_w,
            y + h / 2 + 5,
            cls.__name__,
            size,
            True,
            "start",
            attrs=data,
        )

    def line(
        self,
        points: Sequence[tuple[float, float]],
        arrow: bool = True,
        color: str = INK,
        dashed: bool = False,
        width: float = 1.4,
    ) -> None:
        d = " ".join(
            f"{'M' if i == 0 else 'L'} {x:g} {y:g}"
            for i, (x, y) in enumerate(points)
        )
        marker = ' marker-end="url(#arrow)"' if arrow else ""
        dash = ' stroke-dasharray="5 4"' if dashed else ""
        self.items.append(
            f'<path d="{d}" fill="none" stroke="{color}" '
            f'stroke-width="{width:g}"{dash}{marker}/>'
        )
        self._grow(max(y for _, y in points))

    def circle(
        self, x: float, y: float, r: float, label: str, tone: str = "grey"
    ) -> None:
        face, stroke = TONES[tone]
        self.items.append(
            f'<circle cx="{x:g}" cy="{y:g}" r="{r:g}" fill="{face}" '
            f'stroke="{stroke}" stroke-width="1.2"/>'
        )
        self.text(x, y + 5, label, 15, bold=True)

    def grid(
        self,
        x: float,
        y: float,
        mask: torch.Tensor,
        cell: float,
        name: str,
        colors: Sequence[str] | None = None,
    ) -> None:
        """A boolean (rows, cols) mask as cells: ON where
        True (or ``colors[row]``)."""
        for i, row in enumerate(mask.tolist()):
            for j, on in enumerate(row):
                fill = (colors[i] if colors else ON) if on else OFF
                self.items.append(
                    f'<rect x="{x + j * cell:g}" y="{y + i * cell:g}" '
                    f'width="{cell - 2:g}" height="{cell - 2:g}" rx="2" '
                    f'fill="{fill}" data-mask="{name}" data-on="{int(on)}"/>'
                )
        self._grow(y + mask.size(0) * cell)

    def svg(self) -> str:
        height = round(self.bottom + 14)
        head = (
            '<svg xmlns="http://www.w3.org/2000/svg" '
            f'viewBox="0 0 {WIDTH} {height}" '
            f'width="{WIDTH * SCALE:g}" height="{height * SCALE:g}" role="img">\n'
            f"<title>{escape(self.title)}</title>\n"
            "<style>.s{font-family:"
            + SANS
            + "}.m{font-family:"
            + MONO
            + "}</style>\n"
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" '
            'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
            f'<path d="M 0 0 L 10 5 L 0 10 z" fill="{INK}"/></marker></defs>\n'
            f'<rect x="1" y="1" width="{WIDTH - 2}" height="{height - 2}" rx="10" '
            f'fill="{CARD}" stroke="{EDGE}"/>\n'
        )
        return head + "\n".join(self.items) + "\n</svg>\n"


def down(c: Canvas, x: float, y0: float, y1: float) -> None:
    """A vertical arrow from y0 to y1."""
    c.line([(x, y0), (x, y1)])


# --- 01
# ----------------------------------------------------------------------------------

SOURCE = ["the", "European", "Economic", "Area", "."]
TARGET = ["la", "zone", "économique", "européenne", "."]
SUB0 = "₀₁₂₃₄₅₆₇₈₉"
SUB = SUB0[1:]


def rnn_bottleneck() -> str:
    """Chapter 01: the classic encoder-decoder squeezes the sentence into c = h_n;
    with attention every decoder step reads a weighted sum of all encoder states."""
    c = Canvas("An RNN encoder-decoder with its bottleneck, then attention")
    xs = [14 + i * 72 for i in range(5)]  # five 64-unit columns
    c.text(
        14,
        22,
        "Encoder–decoder: the decoder sees c = h₅",
        14,
        anchor="start",
        bold=True,
    )
    for i, x in enumerate(xs):
        c.text(x + 32, 46, SOURCE[i], 13, fit=66)
        down(c, x + 32, 51, 62)
        c.box(x, 64, 64, 28, f"h{SUB[i]}", "blue", mono=False)
        if i:
            c.line([(x - 8, 78), (x - 1, 78)])
    c.box(xs[4], 110, 64, 28, "c", "red", mono=False)
    down(c, xs[4] + 32, 92, 108)
    c.text(xs[4] - 8, 129, "fixed size, any length", 13, anchor="end", fill=MUTED)
    c.line(
        [(xs[4] + 32, 138), (xs[4] + 32, 148), (xs[0] + 32, 148), (xs[0] + 32, 160)]
    )
    for i, x in enumerate(xs):
        c.box(x, 162, 64, 28, f"s{SUB[i]}", "orange", mono=False)
        if i:
            c.line([(x - 8, 176), (x - 1, 176)])
        down(c, x + 32, 190, 201)
        c.text(x + 32, 216, TARGET[i], 13, fit=68)

    top = 250
    c.text(
        14,
        top,
        "With attention: cᵢ = Σⱼ αᵢⱼ hⱼ at every step",
        14,
        anchor="start",
        bold=True,
    )
    weights = [0.05, 0.1, 0.7, 0.1, 0.05]  # step 3 looks at "Economic"
    for i, x in enumerate(xs):
        c.text(x + 32, top + 24, SOURCE[i], 13, fit=66)
        c.box(x, top + 32, 64, 28, f"h{SUB[i]}", "blue", mono=False)
        c.line(
            [(x + 32, top + 60), (190, top + 108)],
            arrow=False,
            color=TONES["blue"][1],
            width=0.8 + 7 * weights[i],
        )
        line_x = x + 32 + (190 - x - 32) * 20 / 48  # where the line is at the label
        left = i <= 2
        c.text(
            line_x + (-6 if left else 6),
            top + 82,
            f"{weights[i]:.2f}",
            13,
            anchor="end" if left else "start",
            fill=MUTED,
        )
    c.circle(190, top + 122, 15, "Σ", "grey")
    c.text(212, top + 140, "c₃", 14, anchor="start")
    down(c, 190, top + 137, top + 160)
    c.box(150, top + 162, 80, 28, "s₃", "orange", mono=False)
    c.text(240, top + 181, "→ économique", 14, anchor="start")
    c.text(
        14,
        top + 214,
        "αᵢⱼ = softmax over j of the scores sᵢ · hⱼ (e, alpha, c",
        13,
        anchor="start",
        fill=MUTED,
    )
    c.text(
        14,
        top + 232,
        "in the chapter's code); numbers and line widths: α₃ⱼ",
        13,
        anchor="start",
        fill=MUTED,
    )
    return c.svg()


# --- 02
# ----------------------------------------------------------------------------------


def qkv_flow() -> str:
    """Chapter 02: every vector is projected three ways; queries meet keys, the
    softmax weights average the values."""
    c = Canvas("Queries, keys and values as a data flow")
    c.box(130, 12, 120, 34, "x", "grey", sub=None)
    c.text(258, 34, "(b, t, k)", 13, anchor="start", fill=MUTED)
    cols = [
        (20, "to_queries", "W^Q", "queries", "blue"),
        (135, "to_keys", "W^K", "keys", "orange"),
        (250, "to_values", "W^V", "values", "green"),
    ]
    for x, proj, w, out, tone in cols:
        c.line([(190, 46), (x + 55, 66)])
        c.box(x, 68, 110, 46, proj, tone, sub=f"nn.Linear(k, k) = {w}")
        down(c, x + 55, 114, 128)
        c.box(x, 130, 110, 40, out, tone, sub="(b, t, k)")
    c.line([(75, 170), (110, 196)])
    c.line([(190, 170), (160, 196)])
    c.box(
        40,
        198,
        210,
        46,
        "raw_weights",
        "grey",
        sub="bmm(queries, keysᵀ): (b, t, t)",
    )
    down(c, 145, 244, 262)
    c.box(40, 264, 210, 46, "weights", "purple", sub="softmax over keys, dim=2")
    down(c, 145, 310, 330)
    c.line([(305, 170), (305, 354), (252, 354)])
    c.box(40, 332, 210, 46, "y", "green", sub="bmm(weights, values): (b, t, k)")
    c.text(
        14,
        400,
        "yᵢ = Σⱼ wᵢⱼ vⱼ, wᵢⱼ = softmaxⱼ(qᵢ · kⱼ): what a word",
        13,
        anchor="start",
        fill=MUTED,
    )
    c.text(
        14,
        418,
        "looks for (query) meets what others offer (key)",
        13,
        anchor="start",
        fill=MUTED,
    )
    return c.svg()


# The sizes of chapter 02's multi-head example (its cell: batch, t,
# d_model, h = 2, 6, 16, 4).
MULTIHEAD = {"batch": 2, "t": 6, "d_model": 16, "h": 4}


def shape(*sizes: int | str) -> str:
    return "(" + ", ".join(str(s) for s in sizes) + ")"


def multihead_shapes(batch: int, t: int, d_model: int, h: int) -> str:
    """Chapter 02: MultiHeadedAttention's split into heads and
    merge, as tensor shapes."""
    d_k = d_model // h
    c = Canvas("The multi-head split and merge as tensor shapes")
    head_colors = [TONES[t_][1] for t_ in ("blue", "orange", "green", "purple")] * h
    cell = 7

    def features(x: float, y: float, groups: int, gap: float) -> None:
        # t rows of d_model features, coloured by the head that owns them
        for g in range(groups):
            for j in range(d_model // groups):
                for i in range(t):
                    gx = x + g * (d_model // groups * cell + gap) + j * cell
                    c.items.append(
                        f'<rect x="{gx:g}" y="{y + i * cell:g}" width="{cell - 1}" '
                        f'height="{cell - 1}" '
                        f'fill="{head_colors[g if groups > 1 else j // d_k]}" '
                        'opacity="0.8"/>'
                    )
        c._grow(y + t * cell)

    steps = [
        ("x", shape(batch, t, d_model), "(batch, t, d_model)", 1, 0),
        (
            "linears[0](x)",
            shape(batch, t, d_model),
            "W^Q for all heads at once",
            1,
            0,
        ),
        (
            ".view(batch, t, h, d_k)",
            shape(batch, t, h, d_k),
            "d_model = h · d_k",
            1,
            0,
        ),
        (
            ".transpose(1, 2)",
            shape(batch, h, t, d_k),
            "(batch, h, t, d_k): one slab a head",
            h,
            6,
        ),
        (
            "attention(q, k, v)",
            shape(batch, h, t, d_k),
            f"weights {shape(batch, h, t, t)}",
            h,
            6,
        ),
        (
            ".transpose(1, 2).reshape",
            shape(batch, t, d_model),
            "concatenate the heads",
            1,
            0,
        ),
        ("linears[3](x)", shape(batch, t, d_model), "W^O mixes the heads", 1, 0),
    ]
    y = 14
    for i, (op, dims, note, groups, gap) in enumerate(steps):
        c.text(14, y + 16, op, 14, mono=True, anchor="start", fit=200)
        c.text(14, y + 34, note, 13, anchor="start", fill=MUTED, fit=210)
        c.text(
            238,
            y + 16,
            dims,
            14,
            mono=True,
            anchor="start",
            attrs={"data-shape": str(i)},
        )
        features(238, y + 24, groups, gap)
        y += 24 + t * cell + 14
        if i < len(steps) - 1:
            down(c, 200, y - 12, y + 2)
            y += 6
    c.text(
        14,
        y + 8,
        f"batch = {batch}, t = {t}, d_model = {d_model}, h = {h}, d_k = {d_k}",
        13,
        anchor="start",
        fill=MUTED,
    )
    return c.svg()


# --- 03
# ----------------------------------------------------------------------------------


def tokens_to_vectors() -> str:
    """Chapter 03: one sentence cut three ways, each token looked up in a
    vocabulary, each id a row of the embedding table."""
    c = Canvas("Text to tokens to ids to vectors")
    c.text(190, 24, "“Two dogs play.”", 15, bold=True)
    rows = [
        ("words", ["Two", "dogs", "play", "."], [41, 87, 233, 5]),
        ("byte pairs", ["▁Two", "▁dog", "s", "▁play", "."], [310, 188, 9, 402, 5]),
        (
            "characters",
            ["T", "w", "o", "␣", "d", "o", "g", "s"],
            [29, 22, 16, 4, 11, 16, 15, 20],
        ),
    ]
    y = 44
    for name, toks, ids in rows:
        c.text(14, y + 14, name, 14, anchor="start", bold=True)
        cw = 340 / len(toks) if len(toks) < 6 else 42
        for i, (tok, idx) in enumerate(zip(toks, ids, strict=True)):
            x = 20 + i * cw
            c.box(x, y + 22, cw - 6, 26, tok, "blue", mono=True)
            c.text(
                x + (cw - 6) / 2,
                y + 64,
                str(idx),
                13,
                mono=True,
                fill=TONES["orange"][1],
            )
        if name == "characters":
            c.text(20 + 8 * cw, y + 40, "…", 14, anchor="start")
        y += 84
    c.text(
        14,
        y - 4,
        "tokens (blue) and their ids in the vocabulary (orange)",
        13,
        anchor="start",
        fill=MUTED,
    )
    y += 14
    c.text(14, y + 14, "ids → vectors: Embeddings", 14, anchor="start", bold=True)
    y += 28
    ids = [41, 87, 233, 5]
    for i, idx in enumerate(ids):
        c.text(
            36, y + 18 + i * 30, str(idx), 14, mono=True, fill=TONES["orange"][1]
        )
        c.line([(52, y + 13 + i * 30), (150, y + 13 + i * 30)])
        for j in range(8):
            c.rect(154 + j * 22, y + 2 + i * 30, 20, 22, "green", rx=2)
    c.text(256, y + 142, "(len, d_model)", 13, mono=True)
    c.text(100, y + 142, "row id of", 13, fill=MUTED)
    c.text(100, y + 158, "the table", 13, fill=MUTED)
    c.text(
        14,
        y + 186,
        "The table is (vocab, d_model); Embeddings multiplies",
        13,
        anchor="start",
        fill=MUTED,
    )
    c.text(
        14,
        y + 204,
        "each row by √d_model. Ids here are examples.",
        13,
        anchor="start",
        fill=MUTED,
    )
    return c.svg()


# --- 05
# ----------------------------------------------------------------------------------


def residual_norms() -> str:
    """Chapter 05: the residual block with the norm after the sum (post-norm) and
    before the sublayer (pre-norm)."""
    c = Canvas("A residual block, post-norm and pre-norm side by side")

    def column(
        x: float,
        title: str,
        sub: str,
        boxes: list[tuple[str, str]],
        add_at: int,
        formula: str,
    ) -> None:
        cx = x + 88
        c.text(cx, 24, title, 14, bold=True)
        c.text(cx, 42, sub, 13, mono=True, fill=MUTED)
        c.text(cx, 66, "x", 15, mono=True)
        y = 74
        down(c, cx, y, y + 14)
        branch = y + 8
        y += 16
        for i, (label, tone) in enumerate(boxes):
            if i == add_at:
                c.circle(cx, y + 14, 13, "+")
                c.line([(x + 10, branch), (x + 10, y + 14), (cx - 14, y + 14)])
                down(c, cx, y + 27, y + 44)
                y += 46
            c.box(x + 30, y, 116, 32, label, tone)
            down(c, cx, y + 32, y + 48)
            y += 50
        if add_at == len(boxes):
            c.circle(cx, y + 14, 13, "+")
            c.line([(x + 10, branch), (x + 10, y + 14), (cx - 14, y + 14)])
            down(c, cx, y + 27, y + 44)
            y += 46
        c.text(cx, y + 12, "out", 15, mono=True)
        c.text(cx, y + 40, formula, 13, mono=True, fit=172)

    column(
        8,
        "post-norm",
        "TransformerBlock",
        [("sublayer", "blue"), ("dropout", "grey"), ("LayerNorm", "purple")],
        2,
        "LN(x + Sublayer(x))",
    )
    column(
        196,
        "pre-norm",
        "SublayerConnection",
        [("LayerNorm", "purple"), ("sublayer", "blue"), ("dropout", "grey")],
        3,
        "x + Sublayer(LN(x))",
    )
    lines = [
        "Left: the paper's text, each sum normalised.",
        "Right: the Annotated Transformer's code; the skip",
        "path from x to out (left line) is a plain identity.",
    ]
    y = c.bottom + 24
    c.notes(y, lines)
    return c.svg()


# --- 06
# ----------------------------------------------------------------------------------

MASK_PAIR = {
    "src": ["ein", "Hund", "läuft", "<pad>", "<pad>"],
    "tgt": ["<s>", "a", "dog", "runs", "<pad>"],
}


def mask_pair_ids() -> tuple[torch.Tensor, torch.Tensor, int]:
    """The figure's sentence pair as ids (batch 1), and the padding id."""
    words = [
        "<pad>",
        *sorted({w for s in MASK_PAIR.values() for w in s} - {"<pad>"}),
    ]
    src = torch.tensor([[words.index(w) for w in MASK_PAIR["src"]]])
    tgt = torch.tensor([[words.index(w) for w in MASK_PAIR["tgt"]]])
    return src, tgt, 0


def masks() -> str:
    """Chapter 06: padding, look-ahead and combined masks of one sentence pair,
    drawn from the package's padding_mask, subsequent_mask and make_std_mask."""
    src, tgt, pad = mask_pair_ids()
    c = Canvas("The three masks on one sentence pair")
    c.text(
        14, 22, "Padding: padding_mask(tokens, PAD)", 14, anchor="start", bold=True
    )
    y = 34
    for side, ids in (("src", src), ("tgt", tgt)):
        row = padding_mask(ids, pad)[0, 0]  # (len,)
        c.text(14, y + 19, side, 14, mono=True, anchor="start")
        for j, on in enumerate(row.tolist()):
            x = 50 + j * 64
            c.items.append(
                f'<rect x="{x}" y="{y}" width="60" height="28" rx="4" '
                f'fill="{ON if on else OFF}" data-mask="padding_{side}" '
                f'data-on="{int(on)}"/>'
            )
            c.text(
                x + 30,
                y + 19,
                MASK_PAIR[side][j],
                13,
                mono=True,
                fill="#ffffff" if on else MUTED,
            )
        y += 36
    c.text(
        14,
        y + 12,
        "shape (batch, 1, len): the same row for every query",
        13,
        anchor="start",
        fill=MUTED,
    )
    y += 40
    c.text(
        14,
        y,
        "Look-ahead and combined (decoder, tgt)",
        14,
        anchor="start",
        bold=True,
    )
    y += 14
    cell = 24
    grids = [
        ("subsequent_mask(5)", subsequent_mask(tgt.size(1))[0], "future", 52),
        ("make_std_mask(tgt, PAD)", make_std_mask(tgt, pad)[0], "target", 234),
    ]
    for title, mask, name, x in grids:
        c.text(x + 60, y + 14, title, 13, mono=True, fit=150)
        for j in range(5):
            c.text(x + j * cell + 11, y + 34, str(j), 13, fill=MUTED)
        for i, word in enumerate(MASK_PAIR["tgt"]):
            c.text(x - 4, y + 54 + i * cell, word, 13, mono=True, anchor="end")
        c.grid(x, y + 40, mask, cell, name)
    c.text(194, y + 104, "&", 16, bold=True)
    y += 40 + 5 * cell + 22
    lines = [
        "rows: query (tgt token); columns: key position",
        "combined = tgt padding & look-ahead; the padded",
        "query row keeps only itself, so no row is empty",
    ]
    c.notes(y, lines)
    y += 3 * 18 + 4
    c.rect(14, y, 14, 14, fill=ON, rx=2)
    c.text(34, y + 12, "may attend (True)", 13, anchor="start")
    c.rect(170, y, 14, 14, fill=OFF, rx=2)
    c.text(190, y + 12, "hidden (False)", 13, anchor="start")
    return c.svg()


# --- 07
# ----------------------------------------------------------------------------------

# Built for the test with the package's defaults (make_model's
# N): the figure states N.
FULL_MODEL_N = 6


def full_model(N: int = FULL_MODEL_N) -> str:
    """Chapter 07: the whole encoder-decoder, each box the package class that
    implements it (``data-module``: its attribute path in a model built by
    make_model)."""
    c = Canvas("The whole encoder-decoder, labelled with the package's classes")
    ed = model.EncoderDecoder.__name__
    c.text(
        190,
        22,
        f"{ed}  (make_model)",
        15,
        mono=True,
        bold=True,
        attrs={"data-class": ed, "data-module": ""},
    )
    x0, w0 = 14, 352  # outer boxes
    xi, wi = 26, 328  # inner boxes

    def embed(y: float, side: str, tokens: str) -> float:
        c.text(190, y + 14, tokens, 14, mono=True)
        down(c, 190, y + 20, y + 32)
        c.rect(x0, y + 34, w0, 62, "grey")
        c.named(
            xi,
            y + 40,
            wi,
            24,
            f"{side}_embed",
            embeddings.TokenAndPosition,
            "grey",
            f"{side}_embed",
        )
        c.text(
            100,
            y + 86,
            embeddings.Embeddings.__name__,
            13,
            mono=True,
            attrs={
                "data-class": "Embeddings",
                "data-module": f"{side}_embed.embed",
            },
        )
        c.text(176, y + 86, "+", 13)
        c.text(
            268,
            y + 86,
            positional.PositionalEncoding.__name__,
            13,
            mono=True,
            attrs={
                "data-class": "PositionalEncoding",
                "data-module": f"{side}_embed.position",
            },
        )
        down(c, 190, y + 96, y + 110)
        return y + 112

    def stack(
        y: float, part: str, layer: type, rows: list[tuple[str, str, str]]
    ) -> float:
        stack_cls = layers.Encoder if part == "encoder" else layers.Decoder
        h = 34 + 26 + len(rows) * 34 + 8 + 36
        c.rect(x0, y, w0, h, "blue" if part == "encoder" else "orange")
        c.named(
            xi,
            y + 6,
            wi,
            24,
            part,
            stack_cls,
            "blue" if part == "encoder" else "orange",
            part,
        )
        c.rect(xi, y + 36, wi, 26 + len(rows) * 34 + 4, "grey", fill="#ffffff")
        c.text(
            xi + 8,
            y + 54,
            f"N = {N} ×",
            14,
            anchor="start",
            bold=True,
            attrs={"data-count": "N"},
        )
        c.text(
            xi + 74,
            y + 54,
            layer.__name__,
            14,
            mono=True,
            anchor="start",
            attrs={"data-class": layer.__name__, "data-module": f"{part}.layers.0"},
        )
        for i, (attr, note, tone) in enumerate(rows):
            ry = y + 62 + i * 34
            cls = (
                attention.MultiHeadedAttention
                if attr.endswith("attn")
                else layers.PositionwiseFeedForward
            )
            c.named(
                xi + 8, ry, wi - 16, 28, attr, cls, tone, f"{part}.layers.0.{attr}"
            )
            if note:
                c.text(xi + wi - 12, ry - 2, note, 13, anchor="end", fill=MUTED)
        ny = y + 36 + 26 + len(rows) * 34 + 10
        c.named(
            xi, ny, wi, 26, "norm", torch.nn.LayerNorm, "purple", f"{part}.norm"
        )
        return y + h

    y = embed(30, "src", "src (batch, src_len)")
    y = stack(
        y,
        "encoder",
        layers.EncoderLayer,
        [("self_attn", "", "blue"), ("feed_forward", "", "green")],
    )
    down(c, 190, y, y + 10)
    memory_y = y + 14
    c.text(190, memory_y + 8, "memory (batch, src_len, d_model)", 13, mono=True)
    y = embed(memory_y + 18, "tgt", "tgt (batch, tgt_len)")
    dec_top = y
    y = stack(
        y,
        "decoder",
        layers.DecoderLayer,
        [
            ("self_attn", "", "orange"),
            ("src_attn", "", "blue"),
            ("feed_forward", "", "green"),
        ],
    )
    # memory feeds every decoder layer's src_attn
    src_attn_y = dec_top + 62 + 34 + 14
    c.line(
        [
            (318, memory_y + 4),
            (372, memory_y + 4),
            (372, src_attn_y),
            (xi + wi - 8, src_attn_y),
        ]
    )
    down(c, 190, y, y + 14)
    c.named(x0, y + 16, w0, 28, "generator", model.Generator, "grey", "generator")
    c.text(
        190,
        y + 64,
        "log-probabilities (batch, tgt_len, vocab)",
        13,
        mono=True,
        fit=350,
    )
    c.text(
        14,
        y + 88,
        "Each layer wraps its sublayers in SublayerConnection",
        13,
        anchor="start",
        fill=MUTED,
        attrs={
            "data-class": "SublayerConnection",
            "data-module": "encoder.layers.0.sublayer.0",
        },
    )
    c.text(
        14,
        y + 106,
        "(pre-norm, residual); self_attn in the decoder takes",
        13,
        anchor="start",
        fill=MUTED,
    )
    c.text(
        14,
        y + 124,
        "tgt_mask, src_attn reads memory with src_mask.",
        13,
        anchor="start",
        fill=MUTED,
    )
    return c.svg()


# --- 08
# ----------------------------------------------------------------------------------

TEACHER = ["<s>", "a", "dog", "runs", "</s>", "<pad>"]


def teacher_forcing() -> str:
    """Chapter 08: Batch splits the target into the decoder input tgt and
    the expected output tgt_y; the loss compares the prediction at every
    position with tgt_y there."""
    c = Canvas(
        "Teacher forcing: the target shifted right, and what the loss compares"
    )
    cw, x0 = 58, 16

    def row(y: float, label: str, words: Sequence[str], tone: str) -> None:
        c.text(14, y - 8, label, 13, mono=True, anchor="start")
        for i, w in enumerate(words):
            pad = w == "<pad>"
            c.box(
                x0 + i * cw, y, cw - 6, 28, w, "grey" if pad else tone, dashed=pad
            )

    c.text(14, 22, "One target row of a batch", 14, anchor="start", bold=True)
    row(50, "target", TEACHER, "grey")
    row(110, "tgt = target[:, :-1]  (decoder input)", TEACHER[:-1], "orange")
    for i in range(5):
        down(c, x0 + i * cw + 26, 138, 152)
    c.box(
        14,
        154,
        292,
        44,
        "model + generator",
        "grey",
        sub="position i sees tgt[0..i] (tgt_mask)",
    )
    for i in range(5):
        down(c, x0 + i * cw + 26, 198, 212)
        c.box(x0 + i * cw, 214, cw - 6, 28, f"p{SUB[i]}", "blue", mono=False)
    for i in range(5):
        c.text(x0 + i * cw + 26, 262, "vs", 13, fill=MUTED)
    row(292, "tgt_y = target[:, 1:]  (expected output)", TEACHER[1:], "green")
    for i in range(5):
        skip = TEACHER[i + 1] == "<pad>"
        c.text(
            x0 + i * cw + 26,
            340,
            "skip" if skip else f"−log p{SUB[i]}",
            13,
            fill=TONES["red"][1] if skip else INK,
        )
    lines = [
        "The decoder reads the true target, shifted right by",
        "one: at every position i it predicts pᵢ, a distribution",
        "over the next word, all positions at once. The loss,",
        "Σᵢ −log pᵢ(tgt_yᵢ), is divided by ntokens (here 4):",
        "<pad> targets are skipped.",
    ]
    for i, s_ in enumerate(lines):
        c.text(14, 370 + i * 18, s_, 13, anchor="start", fill=MUTED)
    return c.svg()


# --- 09
# ----------------------------------------------------------------------------------

# The figure's decoding: the source length and the tokens fed at steps 1, 2, ...
KV_SRC_LEN = 5
KV_STEPS = ["<s>", "3", "5", "2"]


def kv_cache(
    src_len: int = KV_SRC_LEN, steps: Sequence[str] = tuple(KV_STEPS)
) -> str:
    """Chapter 09: one decoder layer's caches while decoding: self_kv gains one
    position a step, src_kv is projected from the memory once and then only read."""
    c = Canvas("A KV cache filling step by step")
    c.text(
        14,
        22,
        "One decoder layer's (self_kv, src_kv)",
        14,
        anchor="start",
        bold=True,
    )
    c.text(120, 46, "self_kv.key", 13, mono=True, anchor="start")
    c.text(246, 46, "src_kv.key", 13, mono=True, anchor="start")
    y = 58
    for t, token in enumerate(steps, start=1):
        c.text(14, y + 15, f"step {t}", 14, anchor="start", bold=True)
        c.text(
            14, y + 34, f"reads {token}", 13, mono=True, anchor="start", fill=MUTED
        )
        for j in range(t):
            new = j == t - 1
            c.rect(
                120 + j * 24,
                y + 2,
                20,
                20,
                "orange",
                rx=3,
                fill=TONES["orange"][1] if new else None,
                attrs={"data-cache": f"self{t}"},
            )
        for j in range(src_len):
            c.rect(
                246 + j * 24,
                y + 2,
                20,
                20,
                "blue",
                rx=3,
                fill=TONES["blue"][1] if t == 1 else None,
                attrs={"data-cache": f"src{t}"},
            )
        c.text(120, y + 40, shape(1, "h", t, "d_k"), 13, mono=True, anchor="start")
        c.text(
            246,
            y + 40,
            shape(1, "h", src_len, "d_k"),
            13,
            mono=True,
            anchor="start",
        )
        y += 58
    c.rect(14, y, 14, 14, "orange", rx=2, fill=TONES["orange"][1])
    c.text(34, y + 12, "projected this step", 13, anchor="start")
    c.rect(190, y, 14, 14, "orange", rx=2)
    c.text(210, y + 12, "read from the cache", 13, anchor="start")
    lines = [
        "Each step runs only the newest token: its query",
        "attends over the t cached keys. src_kv (static) is",
        "projected from the memory at step 1, then only read.",
    ]
    c.notes(y + 40, lines)
    return c.svg()


# Each step's candidates: (prefix, token, log p(token | prefix));
# beam_size hypotheses kept.
BEAM_SIZE = 2
BEAM_STEPS = [
    [((), "3", -0.4), ((), "5", -0.6), ((), "2", -2.3)],
    [
        (("3",), "1", -1.6),
        (("3",), "4", -1.9),
        (("5",), "7", -0.2),
        (("5",), "1", -1.5),
    ],
    [
        (("3", "1"), "</s>", -0.3),
        (("3", "1"), "6", -1.2),
        (("5", "7"), "</s>", -0.1),
        (("5", "7"), "2", -2.5),
    ],
]


def beam_search_tree(beam_size: int = BEAM_SIZE) -> str:
    """Chapter 09: a beam search tree; at every step the beam_size best candidates
    by total log-probability survive (filled), the others are dropped (dashed)."""
    c = Canvas("A beam search tree with its kept hypotheses")
    c.text(
        14,
        22,
        f"beam_size = {beam_size}: extend, keep the {beam_size} best",
        14,
        anchor="start",
        bold=True,
    )
    score: dict[tuple[str, ...], float] = {(): 0.0}
    place: dict[tuple[str, ...], tuple[float, float]] = {(): (190, 56)}
    c.box(150, 40, 80, 32, "<s>", "grey")
    y = 118
    for level in BEAM_STEPS:
        cands = [((*prefix, tok), score[prefix] + lp) for prefix, tok, lp in level]
        kept = {p for p, _ in sorted(cands, key=lambda pc: -pc[1])[:beam_size]}
        width = 352 / len(cands)
        for i, (path, total) in enumerate(cands):
            x = 14 + i * width + (width - 80) / 2
            px, py = place[path[:-1]]
            c.line(
                [(px, py + 16), (x + 40, y - 2)],
                color=INK if path in kept else MUTED,
                dashed=path not in kept,
            )
            tone = "orange" if path in kept else "grey"
            c.box(
                x,
                y,
                80,
                40,
                path[-1],
                tone,
                sub=f"{total:.1f}",
                dashed=path not in kept,
                attrs={"data-kept": str(int(path in kept))},
            )
            score[path] = total
            place[path] = (x + 40, y + 24)
        y += 86
    lines = [
        "Numbers: log P of the hypothesis so far (the sum of its",
        "tokens' log-probabilities). Greedy takes 3 (−0.4) first",
        "and ends at −2.3; the beam also keeps 5 and finds",
        "5 7 </s> at −0.9. The chapter searches with",
        "beam_size=4.",
    ]
    c.notes(y - 10, lines)
    return c.svg()


# --- 10
# ----------------------------------------------------------------------------------

# One packed row of three pairs (lengths with <s> and </s>), and a longer pair in a
# second row, so that the first row ends in padding as most rows do.
PACK_PAIRS = [(3, 4), (2, 3), (4, 4)]
PACK_LONGEST = (10, 10)


def packed_batch() -> PackedBatch:
    def pair(n_src: int, n_tgt: int) -> tuple[list[int], list[int]]:
        return [1] + [5] * (n_src - 2) + [2], [1] + [6] * (n_tgt - 2) + [2]

    return PackedBatch(
        [[pair(*p) for p in PACK_PAIRS], [pair(*PACK_LONGEST)]], pad=0
    )


def packing() -> str:
    """Chapter 10: several pairs in one row; positions restart per pair and
    segment_mask keeps each token inside its own pair (drawn from PackedBatch)."""
    batch = packed_batch()
    src_seg = torch.tensor(
        [[k + 1 for k, (s, _) in enumerate(PACK_PAIRS) for _ in range(s)]]
    )
    src_seg = torch.nn.functional.pad(
        src_seg, (0, batch.src.size(1) - src_seg.size(1))
    )
    tgt_seg = torch.tensor(
        [[k + 1 for k, (_, t) in enumerate(PACK_PAIRS) for _ in range(t - 1)]]
    )
    tgt_seg = torch.nn.functional.pad(
        tgt_seg, (0, batch.tgt.size(1) - tgt_seg.size(1))
    )
    c = Canvas("Packing several sentence pairs into one row, with the masks")
    c.text(
        14, 22, "Three pairs in one row (0: padding)", 14, anchor="start", bold=True
    )
    y = 34
    for name, seg, pos in (
        ("src", src_seg, batch.packing["src_pos"]),
        ("tgt", tgt_seg, batch.packing["tgt_pos"]),
    ):
        c.text(14, y + 18, name, 14, mono=True, anchor="start")
        for j, (s, p) in enumerate(
            zip(seg[0].tolist(), pos[0].tolist(), strict=True)
        ):
            c.rect(50 + j * 31, y, 28, 26, SEGMENT_TONES[s], rx=3, dashed=s == 0)
            c.text(50 + j * 31 + 14, y + 18, str(p) if s else "·", 13, mono=True)
        y += 34
    c.text(
        14,
        y + 10,
        "cells: each token's position, segment_positions(…)",
        13,
        anchor="start",
        fill=MUTED,
    )
    y += 30
    cell = 11
    grids = [
        ("encoder", batch.src_mask[0], src_seg[0], 14),
        ("decoder", batch.tgt_mask[0], tgt_seg[0], 138),
        ("cross", batch.packing["memory_mask"][0], tgt_seg[0], 256),
    ]
    for name, mask, rows, x in grids:
        c.text(x + 55, y + 12, name, 14, bold=True)
        colors = [
            TONES[SEGMENT_TONES[s]][1] if s else "#b8bfc9" for s in rows.tolist()
        ]
        c.grid(x, y + 22, mask, cell, name, colors)
    y += 22 + 10 * cell + 22
    lines = [
        (14, "src_mask = segment_mask(src_seg, src_seg)"),
        (14, "tgt_mask = segment_mask(tgt_seg, tgt_seg,"),
        (194, "causal=True)"),
        (14, "memory_mask = segment_mask(tgt_seg, src_seg)"),
    ]
    for i, (x, s) in enumerate(lines):
        c.text(x, y + i * 18, s, 13, mono=True, anchor="start")
    c.text(
        14,
        y + 84,
        "rows: queries, columns: keys; a padding query",
        13,
        anchor="start",
        fill=MUTED,
    )
    c.text(
        14,
        y + 102,
        "may see every key (grey): its output is unused",
        13,
        anchor="start",
        fill=MUTED,
    )
    return c.svg()


# --- 15
# ----------------------------------------------------------------------------------


def block_today() -> str:
    """Chapter 15: chapter 14's post-norm block (TransformerBlock) against
    today's pre-norm ModernBlock; ``data-root`` names the block a box's
    ``data-module`` is inside."""
    from annotated_transformer.blocks.feed_forward import SwiGLU
    from annotated_transformer.blocks.grouped_query_attention import RotaryAttention
    from annotated_transformer.blocks.norms import RMSNorm
    from annotated_transformer.models.modern_decoder import ModernBlock

    c = Canvas("The 2017 block against today's")
    old = [
        ("attention", attention.CachedAttention, "blue", "h key/value heads"),
        ("+", None, "", ""),
        ("norm1", torch.nn.LayerNorm, "purple", ""),
        ("feed_forward", layers.PositionwiseFeedForward, "green", "ReLU, biases"),
        ("+", None, "", ""),
        ("norm2", torch.nn.LayerNorm, "purple", ""),
    ]
    new = [
        ("norm1", RMSNorm, "purple", ""),
        ("attention", RotaryAttention, "blue", "RoPE on q, k; kv_heads < h"),
        ("+", None, "", ""),
        ("norm2", RMSNorm, "purple", ""),
        ("feed_forward", SwiGLU, "green", "no biases"),
        ("+", None, "", ""),
    ]
    columns = [
        (
            8,
            "2017 (chapter 14)",
            layers.TransformerBlock,
            "post-norm",
            old,
            "x + position vector",
        ),
        (194, "today", ModernBlock, "pre-norm", new, "x (RoPE acts inside)"),
    ]
    for x, title, root, kind, parts, start in columns:
        cx = x + 89
        c.text(cx, 22, title, 14, bold=True)
        c.text(
            cx,
            42,
            root.__name__,
            14,
            mono=True,
            attrs={"data-class": root.__name__},
        )
        c.text(cx, 60, kind, 13, fill=MUTED)
        c.text(cx, 86, start, 13, mono=True, fit=172)
        y = 94
        branch = y + 7
        for attr, cls, tone, note in parts:
            if cls is None:
                down(c, cx, y, y + 8)
                c.circle(cx, y + 22, 12, "+")
                c.line([(x + 6, branch), (x + 6, y + 22), (cx - 13, y + 22)])
                y += 36
                branch = y + 6
                continue
            down(c, cx, y, y + 12)
            h = 56 if note else 40
            c.rect(x + 14, y + 12, 150, h, tone)
            c.text(cx, y + 28, attr, 13, fill=MUTED)
            c.text(
                cx,
                y + 46,
                cls.__name__,
                14,
                mono=True,
                fit=142,
                attrs={
                    "data-class": cls.__name__,
                    "data-module": attr,
                    "data-root": root.__name__,
                },
            )
            if note:
                c.text(cx, y + 63, note, 13, fit=142)
            y += 12 + h
        down(c, cx, y, y + 14)
        c.text(cx, y + 30, "out", 14, mono=True)
    y = c.bottom + 22
    lines = [
        "Left: a norm after each residual sum. Right: each",
        "sublayer reads a normalised copy; the sums stay plain.",
    ]
    c.notes(y, lines)
    return c.svg()


# --- 16
# ----------------------------------------------------------------------------------

# mask_tokens' rule: select each ordinary token with P_SELECT; of the selected,
# replace by [MASK], by a random id, or keep, in the proportions SPLIT.
P_SELECT = 0.15
SPLIT = {"[MASK]": 0.8, "random": 0.1, "unchanged": 0.1}
BERT_ROWS = [
    ("[CLS]", None),
    ("the", None),
    ("film", "[MASK]"),
    ("was", None),
    ("a", None),
    ("great", None),
    ("waste", "piano"),
    ("of", None),
    ("time", "time"),
    ("[SEP]", None),
]


def bert_masking() -> str:
    """Chapter 16: mask_tokens' corruption of one review, with the
    labels the loss reads."""
    c = Canvas("BERT's masking: inputs and labels")
    c.text(
        14,
        22,
        "mask_tokens(tokens, …) → (inputs, labels)",
        14,
        mono=True,
        anchor="start",
        fit=352,
    )
    cols = [(70, "tokens"), (190, "inputs"), (310, "labels")]
    for x, name in cols:
        c.text(x, 50, name, 14, mono=True, bold=True)
    y = 58
    for token, replaced in BERT_ROWS:
        chosen = replaced is not None
        if chosen:
            c.rect(14, y, 352, 24, "orange", rx=3)
        c.text(70, y + 17, token, 14, mono=True)
        c.text(
            190,
            y + 17,
            replaced or token,
            14,
            mono=True,
            fill=TONES["red"][1] if chosen and replaced != token else INK,
        )
        c.text(
            310,
            y + 17,
            token if chosen else "-100",
            14,
            mono=True,
            fill=INK if chosen else MUTED,
        )
        y += 26
    pct = [f"{int(v * 100)} % {k}" for k, v in SPLIT.items()]
    lines = [
        f"Each ordinary token is selected with p = {P_SELECT} (never",
        "[CLS], [SEP] or padding). A selected token becomes",
        f"{pct[0]}, {pct[1]} id, or stays ({pct[2]}).",
        "Here: film → [MASK], waste → a random word, time kept.",
        "The loss is read only where labels ≠ −100.",
    ]
    for i, s in enumerate(lines):
        c.text(
            14,
            y + 22 + i * 18,
            s,
            13,
            anchor="start",
            fill=MUTED,
            attrs={"data-rule": "1"} if i < 3 else None,
        )
    return c.svg()


# --- 17
# ----------------------------------------------------------------------------------


def xl_memory(seg_len: int = 4, n_blocks: int = 2) -> str:
    """Chapter 18: Transformer-XL's segment-level recurrence: each block's
    queries attend to [memory; current], the memory being the previous
    segment's states, detached."""
    c = Canvas("Transformer-XL's segment memory")
    c.text(
        14,
        22,
        "Segment recurrence, mem_len = seg_len = 4",
        14,
        anchor="start",
        bold=True,
    )
    step = 38
    xs = [34 + j * step for j in range(2 * seg_len)]
    span = step * seg_len - 6
    c.rect(xs[0] - 18, 36, span, 44 + 64 * n_blocks, "grey", dashed=True)
    c.rect(xs[seg_len] - 18, 36, span, 44 + 64 * n_blocks, "blue", fill="#f3f7fd")
    c.text(xs[0] - 18 + span / 2, 56, "memory (no grad)", 13, fill=MUTED)
    c.text(
        xs[seg_len] - 18 + span / 2,
        56,
        "current segment",
        13,
        fill=TONES["blue"][1],
    )
    # the height of each level, the input's at the bottom
    ys = [72 + 64 * (n_blocks - level) for level in range(n_blocks + 1)]
    for level in range(1, n_blocks + 1):
        for j in range(seg_len, 2 * seg_len):
            focus = j == 2 * seg_len - 1
            for k in range(j - seg_len, j + 1):
                c.line(
                    [(xs[k], ys[level - 1] - 8), (xs[j], ys[level] + 9)],
                    arrow=False,
                    color=TONES["orange"][1] if focus else "#b7bec8",
                    width=1.6 if focus else 0.8,
                )
    for level, y in enumerate(ys):
        for j, x in enumerate(xs):
            mem = j < seg_len
            tone = "grey" if mem else "blue"
            face, stroke = TONES[tone]
            dash = ' stroke-dasharray="3 2"' if mem else ""
            c.items.append(
                f'<circle cx="{x}" cy="{y}" r="8" fill="{face}" '
                f'stroke="{stroke}"{dash}/>'
            )
        c.text(
            xs[-1] + 22,
            y + 5,
            "x" if level == 0 else f"block {level}",
            13,
            anchor="start",
            fill=MUTED,
        )
    y = ys[0] + 36
    lines = [
        "Queries of the current segment attend to the previous",
        "segment's states, kept as memory without gradient;",
        "orange: what the last position reads. The memory",
        "each block leaves (memory.tensors) is the next",
        "segment's; reach grows by a segment per block.",
    ]
    c.notes(y, lines)
    return c.svg()


# --- 18
# ----------------------------------------------------------------------------------

WORLD_SIZE = 4
# Bytes per parameter of what each device keeps (fp32 weights,
# gradients, Adam's m and v).
STATE_BYTES = {"weights": 4, "gradients": 4, "Adam m, v": 8}


def parallelism(world_size: int = WORLD_SIZE) -> str:
    """Chapter 19: what each device keeps under DDP (everything) and FSDP (a 1/W
    shard, plus one gathered unit at a time)."""
    c = Canvas("What DDP and FSDP keep on each device")
    colw = 64
    x0 = 118
    tones = ["blue", "orange", "green", "purple"] * world_size
    y = 12
    total = sum(STATE_BYTES.values())
    for scheme in ("DDP", "FSDP"):
        c.text(14, y + 16, scheme, 15, bold=True, anchor="start")
        for d in range(world_size):
            c.text(
                x0 + d * colw + colw / 2 - 4, y + 16, f"rank {d}", 13, fill=MUTED
            )
        y += 26
        rows = [*STATE_BYTES.items(), ("batch", 0)]
        if scheme == "FSDP":
            rows.insert(0, ("gathered", 0))
        for name, nbytes in rows:
            label = f"{name} {nbytes}P" if nbytes else name
            c.text(14, y + 15, label, 13, anchor="start")
            for d in range(world_size):
                x = x0 + d * colw
                if name == "batch":
                    c.rect(x, y + 2, colw - 8, 16, tones[d], rx=2)
                    c.text(x + colw / 2 - 4, y + 15, f"1/{world_size}", 13)
                elif name == "gathered":
                    c.rect(x, y + 2, colw - 8, 16, "grey", rx=2, dashed=True)
                elif scheme == "DDP":
                    c.rect(x, y + 2, colw - 8, 16, "grey", rx=2, fill="#7d8a99")
                else:
                    c.rect(x, y + 2, colw - 8, 16, "grey", rx=2, fill=OFF)
                    sw = (colw - 8) / world_size
                    c.rect(x + d * sw, y + 2, sw, 16, "grey", rx=1, fill="#7d8a99")
            y += 24
        if scheme == "DDP":
            note = [f"every rank: {total}P bytes; gradients all-reduced"]
        else:
            note = [
                f"every rank: {total}P / {world_size} bytes + one unit",
                "gathered (dashed), freed after use",
            ]
        for s in note:
            c.text(
                14,
                y + 14,
                s,
                13,
                anchor="start",
                fill=MUTED,
                attrs={"data-bytes": str(total)},
            )
            y += 18
        y += 22
    c.text(
        14,
        y,
        f"P: parameters; W = {world_size} devices, each on its own",
        13,
        anchor="start",
        fill=MUTED,
    )
    c.text(
        14,
        y + 18,
        "share of the batch; activations as for one device.",
        13,
        anchor="start",
        fill=MUTED,
    )
    return c.svg()


def checkpointing(n_layers: int = 4) -> str:
    """Chapter 19: with checkpoint_blocks, the forward pass keeps only each block's
    input; the backward pass runs each block's forward again, then its backward."""
    c = Canvas("What activation checkpointing keeps and recomputes")
    w, gap, x0 = 70, 18, 14
    c.text(
        14,
        22,
        "forward: keep only each block's input",
        14,
        anchor="start",
        bold=True,
    )
    y = 36
    for i in range(n_layers):
        x = x0 + i * (w + gap)
        c.rect(x, y, 26, 22, "green", rx=3)
        c.text(x + 13, y + 16, f"x{SUB0[i]}", 13)
        c.box(
            x,
            y + 30,
            w,
            48,
            f"block {i + 1}",
            "blue",
            mono=False,
            sub="activations",
        )
        c.line(
            [(x + 8, y + 74), (x + w - 8, y + 36)],
            arrow=False,
            color=TONES["red"][1],
        )
        if i:
            c.line([(x - gap, y + 54), (x - 2, y + 54)])
    y += 104
    c.text(14, y, "backward, last block first:", 14, anchor="start", bold=True)
    y += 12
    for i in reversed(range(n_layers)):
        x = x0 + i * (w + gap)
        c.rect(x, y, 26, 22, "green", rx=3)
        c.text(x + 13, y + 16, f"x{SUB0[i]}", 13)
        c.box(x, y + 30, w, 48, "recompute", "orange", mono=False, sub="then grad")
        if i < n_layers - 1:
            c.line([(x + w + gap, y + 54), (x + w + 2, y + 54)])
    y += 100
    lines = [
        "Green: the inputs kept, N · b · n · d_model values;",
        "crossed out: activations freed after the forward.",
        "The backward pass runs each block's forward again",
        "from its input, one block's activations at a time:",
        "about one more forward pass (checkpoint_blocks).",
    ]
    c.notes(y, lines)
    return c.svg()


# --- all of them
# --------------------------------------------------------------------------

FIGURES: dict[str, Callable[[], str]] = {
    "01_rnn_bottleneck": rnn_bottleneck,
    "02_qkv_flow": qkv_flow,
    "02_multihead_shapes": lambda: multihead_shapes(**MULTIHEAD),
    "03_tokens_to_vectors": tokens_to_vectors,
    "05_residual_norms": residual_norms,
    "06_masks": masks,
    "07_full_model": full_model,
    "08_teacher_forcing": teacher_forcing,
    "09_kv_cache": kv_cache,
    "09_beam_search": beam_search_tree,
    "10_packing": packing,
    "15_block_today": block_today,
    "16_bert_masking": bert_masking,
    "18_xl_memory": xl_memory,
    "19_parallelism": parallelism,
    "19_checkpointing": checkpointing,
}


def stale(folder: Path) -> list[str]:
    """Names of the figures whose file in ``folder`` is missing or
    differs from the source."""
    return [
        name
        for name, draw in FIGURES.items()
        if not (folder / f"{name}.svg").exists()
        or (folder / f"{name}.svg").read_text(encoding="utf-8") != draw()
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "folder", nargs="?", type=Path, default=Path("notebooks/figures")
    )
    parser.add_argument(
        "--check", action="store_true", help="only list the stale figures"
    )
    args = parser.parse_args(argv)
    if args.check:
        names = stale(args.folder)
        for name in names:
            print(f"{args.folder / name}.svg is out of date: run make figures")
        return 1 if names else 0
    args.folder.mkdir(parents=True, exist_ok=True)
    for name, draw in FIGURES.items():
        (args.folder / f"{name}.svg").write_text(draw(), encoding="utf-8")
    print(f"wrote {len(FIGURES)} figures to {args.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
