"""Explorable charts: pictures a reader moves without a kernel.

Each chart carries its data precomputed by the package's own functions, for a small
grid of settings, and Vega-Lite parameters bound to sliders and dropdowns pick the
rows to draw. Moving a control re-draws the chart in the browser: in the static
site (offline) and in JupyterLab with no running kernel. The grids are kept small
(see :func:`size_kb`) so that a page stays light.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import altair as alt
import pandas as pd
import torch

from annotated_transformer.blocks.masks import (
    make_std_mask,
    padding_mask,
    subsequent_mask,
)
from annotated_transformer.blocks.positional import sinusoids
from annotated_transformer.data.batching import collate
from annotated_transformer.evaluation.sampling import next_byte_distribution
from annotated_transformer.tasks.base import check_texts
from annotated_transformer.tasks.translation import warn_beyond_captions
from annotated_transformer.training.schedules import ENDS_AT_TOTAL, SCHEDULES, rate

KINDS = ("encoder self", "decoder self", "cross")


def size_kb(chart: alt.TopLevelMixin) -> float:
    """The chart's Vega-Lite specification, data included, in kilobytes: what it
    adds to a page."""
    return len(json.dumps(chart.to_dict())) / 1000


def slider(
    name: str, low: float, high: float, step: float, value: float, label: str
):
    """A parameter bound to a range input."""
    return alt.param(
        name=name,
        value=value,
        bind=alt.binding_range(min=low, max=high, step=step, name=label),
    )


def dropdown(name: str, options: Sequence[Any], label: str, value: Any = None):
    """A parameter bound to a select input (``options``: its values)."""
    return alt.param(
        name=name,
        value=options[0] if value is None else value,
        bind=alt.binding_select(options=list(options), name=label),
    )


def mask_explorer(max_len: int = 8) -> alt.Chart:
    """Which keys each query may attend to, for a sequence of up to ``max_len``
    tokens with some padding at its end, causal or not.

    The cells are the package's masks for every number of real tokens at
    ``max_len``: ``padding_mask`` (an encoder's) and, causal, ``make_std_mask`` (a
    decoder's: no future, no padded key, a padded query sees itself). A shorter
    sequence is their top-left block, which is what the chart draws (the rules
    depend only on the query and key positions, so the block is exact).
    """
    pad_id = 0
    rows = []
    for real in range(1, max_len + 1):
        tokens = torch.tensor([[1] * real + [pad_id] * (max_len - real)])
        for causal in (0, 1):
            build = make_std_mask if causal else padding_mask
            mask = build(tokens, pad_id)[0].expand(max_len, max_len)
            for q in range(max_len):
                for k in range(max_len):
                    rows.append(
                        {
                            "q": q,
                            "k": k,
                            "r": real,
                            "c": causal,
                            "a": int(mask[q, k]),
                        }
                    )
    length = slider("length", 1, max_len, 1, max_len - 2, "length ")
    pad = slider("padding", 0, max_len - 1, 1, 2, "padding (at the end) ")
    causal = dropdown("causal", [0, 1], "causal (1: look-ahead mask) ", 1)
    return (
        alt.Chart(pd.DataFrame(rows), title="Mask: may query (row) attend to key?")
        .mark_rect(stroke="white")
        .encode(
            x=alt.X("k:O", title="key position", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("q:O", title="query position"),
            color=alt.Color(
                "allowed:N",
                title="attend?",
                scale=alt.Scale(domain=["yes", "no"], range=["#3b7dd8", "#e8e8e8"]),
            ),
            tooltip=["q:O", "k:O", "allowed:N"],
        )
        .transform_filter(
            "datum.q < length && datum.k < length && datum.c == causal"
            " && datum.r == max(1, length - padding)"
        )
        .transform_calculate(allowed="datum.a ? 'yes' : 'no'")
        .add_params(length, pad, causal)
        .properties(width=260, height=260)
    )


def rotation_explorer(
    d_model: int = 16, positions: int = 64, max_offset: int = 16
) -> alt.VConcatChart:
    """One pair of sinusoidal features: its sine and cosine over the positions, and
    the same pair as a point on the unit circle.

    Sliders pick the pair, a position and an offset; the circle shows that moving
    ``offset`` positions on turns the point by ``offset · ω`` whatever the position:
    a rotation. The values are the package's ``sinusoids(positions, d_model)``.
    """
    table = sinusoids(positions, d_model)
    pairs = d_model // 2
    omega = [math.exp(-2 * i * math.log(10000.0) / d_model) for i in range(pairs)]
    frame = pd.DataFrame(
        [
            {
                "p": p,
                "i": i,
                "sin": round(float(table[p, 2 * i]), 4),
                "cos": round(float(table[p, 2 * i + 1]), 4),
                "w": float(f"{omega[i]:.5g}"),
            }
            for p in range(positions)
            for i in range(pairs)
        ]
    )
    pair = slider("pair", 0, pairs - 1, 1, 2, "feature pair i ")
    position = slider("position", 0, positions - 1 - max_offset, 1, 5, "position ")
    offset = slider("offset", 0, max_offset, 1, 3, "offset k ")
    base = alt.Chart(frame).transform_filter("datum.i == pair")
    marked = base.transform_filter(
        "datum.p == position || datum.p == position + offset"
    ).transform_calculate(which="datum.p == position ? 'position' : 'position + k'")
    colour = alt.Color(
        "which:N",
        title="",
        scale=alt.Scale(domain=["position", "position + k"]),
        legend=alt.Legend(orient="bottom"),
    )
    curves = (
        base.transform_fold(["sin", "cos"], as_=["feature", "value"])
        .mark_line()
        .encode(
            x=alt.X("p:Q", title="position"),
            y=alt.Y("value:Q", title="value", scale=alt.Scale(domain=[-1, 1])),
            strokeDash=alt.StrokeDash("feature:N", title="feature"),
            color=alt.value("#888"),
        )
    )
    dots = marked.mark_rule(strokeWidth=2).encode(x="p:Q", color=colour)
    line = (curves + dots).properties(
        width=420,
        height=150,
        title=f"d_model = {d_model}, pair i: sin and cos of ω_i · pos",
    )
    circle = base.mark_point(color="#bbb", size=12).encode(
        x=alt.X("sin:Q", scale=alt.Scale(domain=[-1.1, 1.1]), title="sin feature"),
        y=alt.Y("cos:Q", scale=alt.Scale(domain=[-1.1, 1.1]), title="cos feature"),
        tooltip=["p:Q", "sin:Q", "cos:Q"],
    )
    spokes = marked.mark_point(size=120, filled=True)
    spokes = spokes.encode(x="sin:Q", y="cos:Q", color=colour, tooltip=["p:Q"])
    angle = (
        base.transform_filter("datum.p == position")
        .transform_calculate(
            text="'turned by k·ω_i = ' + format(offset * datum.w, '.3f') + ' rad'"
        )
        .mark_text(align="left", fontSize=12)
        .encode(x=alt.value(5), y=alt.value(8), text="text:N")
    )
    wheel = (circle + spokes + angle).properties(
        width=220, height=220, title="The same pair as a point on the circle"
    )
    return alt.vconcat(line, wheel).add_params(pair, position, offset)


def schedule_explorer(total: int = 20_000, points: int = 50) -> alt.Chart:
    """Learning rate against step for the paper's ``rate`` (its warm-up, model width
    and factor) and the other shapes of ``SCHEDULES`` at the same peak.

    Eq. 3 reads factor · d_model^-0.5 · shape(step, warmup): the width and the
    factor only scale the curve. So the data holds the package's curves at
    d_model = 1 and factor 1 (``points`` steps up to ``total``, each warm-up
    offered; cosine and linear end at ``total``), and the chart multiplies them by
    factor · d_model^-0.5 as the controls move.
    """
    warmups = (500, 1000, 2000, 4000, 8000)
    steps = sorted({round(total * j / (points - 1)) for j in range(points)})
    rows = []
    for warmup in warmups:
        peak = rate(warmup, 1, 1.0, warmup)
        for kind, shape in SCHEDULES.items():
            extra = (total,) if kind in ENDS_AT_TOTAL else ()
            for s in sorted({*steps, warmup}):
                value = peak * shape(s, warmup, *extra)
                rows.append(
                    {"s": s, "u": warmup, "k": kind, "v": float(f"{value:.4g}")}
                )
    warmup = dropdown("warmup", warmups, "warm-up steps ", 4000)
    width = dropdown("width", [128, 256, 512, 1024], "d_model ", 512)
    factor = slider("factor", 0.25, 4, 0.25, 1, "factor ")
    shown = dropdown("shape", ["all", *SCHEDULES], "schedule ", "all")
    return (
        alt.Chart(
            pd.DataFrame(rows), title="Learning rate against step (noam: eq. 3)"
        )
        .mark_line(clip=True)
        .encode(
            x=alt.X("s:Q", title="optimiser step"),
            y=alt.Y(
                "lr:Q",
                title="learning rate",
                axis=alt.Axis(format=".1e"),
                scale=alt.Scale(domain=[0, 2e-3]),
            ),
            color=alt.Color(
                "k:N", title="schedule", legend=alt.Legend(orient="bottom")
            ),
            tooltip=["k:N", "s:Q", alt.Tooltip("lr:Q", format=".3e")],
        )
        .transform_filter(
            "datum.u == warmup && (shape == 'all' || datum.k == shape)"
        )
        .transform_calculate(lr="datum.v * factor / sqrt(width)")
        .add_params(warmup, width, factor, shown)
        .properties(width=480, height=240)
    )


def distribution_explorer(
    logits: torch.Tensor,
    labels: Sequence[str],
    *,
    temperatures: tuple[float, float, float] = (0.2, 3.0, 0.2),
    top_ks: Sequence[int] = (),
    shown: int | None = None,
    title: str,
    x_title: str,
) -> alt.Chart:
    """Bars of the softmax of ``logits / T`` (one row of scores) as a slider moves
    the temperature T over ``temperatures`` (low, high, step) and a dropdown the
    top-k cut (0: none), each bar computed by the package's
    ``next_byte_distribution`` for every value offered. ``shown``: draw only that
    many likeliest entries, the likeliest first (the probabilities are still those
    of the whole distribution).
    """
    if len(labels) != logits.numel():
        raise ValueError(f"{len(labels)} labels for {logits.numel()} logits")
    order = (
        logits.argsort(descending=True).tolist()[:shown]
        if shown
        else list(range(len(labels)))
    )
    low, high, step = temperatures
    grid = [round(low + j * step, 6) for j in range(round((high - low) / step) + 1)]
    rows = []
    for t in grid:
        for k in (0, *top_ks):
            scaled = next_byte_distribution(logits.float()[None], t, k or None)[0]
            for rank, j in enumerate(order):
                p = round(float(scaled[j]), 4)
                rows.append({"t": t, "k": k, "j": rank, "x": labels[j], "p": p})
    params = [slider("temperature", low, high, step, 1.0, "temperature T ")]
    where = "abs(datum.t - temperature) < 1e-6"
    if top_ks:
        params.append(dropdown("top_k", [0, *top_ks], "top-k (0: none) ", 0))
        where += " && datum.k == top_k"
    return (
        alt.Chart(pd.DataFrame(rows), title=title)
        .mark_bar()
        .encode(
            x=alt.X("x:N", title=x_title, sort=alt.SortField("j")),
            y=alt.Y("p:Q", title="probability", scale=alt.Scale(domain=[0, 1])),
            tooltip=["x:N", alt.Tooltip("p:Q", format=".3f")],
        )
        .transform_filter(where)
        .add_params(*params)
        .properties(width=max(200, 22 * len(order)), height=200)
    )


def record_attention(
    model: torch.nn.Module, src: torch.Tensor, tgt: torch.Tensor, pad: int
) -> dict[tuple[str, int], torch.Tensor]:
    """Every attention map of one teacher-forced pass of an encoder-decoder.

    src: (1, src_len) ids; tgt: (1, tgt_len) the decoder's input (``<s>`` + output)
    returns {(kind, layer from 1): weights (heads, queries, keys)}, ``kind`` one of
    :data:`KINDS`; the model's modules are switched back to the fused kernel after.
    """
    encoder, decoder = model.encoder.layers, model.decoder.layers
    modules = {("encoder self", i): x.self_attn for i, x in enumerate(encoder, 1)}
    modules |= {("decoder self", i): x.self_attn for i, x in enumerate(decoder, 1)}
    modules |= {("cross", i): x.src_attn for i, x in enumerate(decoder, 1)}
    src_mask = padding_mask(src, pad)
    try:
        for module in modules.values():
            module.keep_attention = True
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            model.decode(memory, src_mask, tgt, subsequent_mask(tgt.size(1)))
        return {
            key: module.attn[0].detach().clone() for key, module in modules.items()
        }
    finally:
        for module in modules.values():
            module.keep_attention = False


def translate_with_attention(
    task: Any, model: torch.nn.Module, sentence: str, beam: int = 4
) -> tuple[str, list[str], list[str], dict[tuple[str, int], torch.Tensor]]:
    """A German sentence → (English, source tokens, decoder-input tokens, maps).

    Beam search as ``translate predict --beam``; the maps come from one
    teacher-forced pass over the translation (:func:`record_attention`). Raises
    ValueError for an empty or too long sentence; prints a note for words the
    vocabulary lacks, and warns (``BeyondData``) when most pieces are unknown.
    """
    check_texts([sentence], "translate", "sentence")
    translator = task.translator(model)
    tokens = translator.tokenize([sentence])
    unknown = translator.unknown(tokens)
    if unknown:
        print(f"note: not in the vocabulary, read as <unk>: {', '.join(unknown)}")
    warn_beyond_captions(tokens, task.src_vocab)
    out = translator.translate_tokens(tokens, beam=beam, alpha=task.config.alpha)[0]
    v = task.src_vocab
    pad, bos, eos = v.stoi["<pad>"], v.stoi["<s>"], v.stoi["</s>"]
    src = collate([v.encode(tokens[0])], pad, bos, eos)
    tgt = torch.tensor([[bos, *task.tgt_vocab.encode(out)]])
    maps = record_attention(model, src, tgt, pad)
    src_labels = v.decode(src[0].tolist())
    tgt_labels = task.tgt_vocab.decode(tgt[0].tolist())
    return translator.text(out), src_labels, tgt_labels, maps


def attention_explorer(
    examples: Sequence[tuple[str, list[str], list[str], dict]],
    *,
    cell: int = 22,
) -> alt.Chart:
    """Heatmap of one attention map of a trained translator, with dropdowns for the
    sentence, the kind of attention, the layer and the head.

    ``examples``: (name, source tokens, decoder-input tokens, maps) per sentence,
    as :func:`translate_with_attention` returns them after the English. Each map
    is stored as one row of weights in percent, unrolled in the browser; the
    tokens are stored once per sentence and kind.
    """
    rows, labels = [], []
    for s, (_, src, tgt, maps) in enumerate(examples):
        for kind in KINDS:
            queries = src if kind == "encoder self" else tgt
            keys = tgt if kind == "decoder self" else src
            labels.append({"sk": f"{s} {kind}", "qs": queries, "ks": keys})
        for (kind, layer), weights in maps.items():
            for h in range(weights.size(0)):
                percent = (100 * weights[h]).round().int().flatten().tolist()
                rows.append(
                    {
                        "sk": f"{s} {kind}",
                        "l": layer,
                        "h": h + 1,
                        "n": weights.size(-1),
                        "w": percent,
                    }
                )
    first = examples[0][3]
    layers = sorted({layer for _, layer in first})
    heads = first[(KINDS[0], 1)].size(0)
    # a dropdown of sentences only when there is more than one
    sentence = alt.param(
        name="sentence",
        value=0,
        bind=alt.binding_select(
            options=list(range(len(examples))),
            labels=[name for name, *_ in examples],
            name="sentence ",
        )
        if len(examples) > 1
        else alt.Undefined,
    )
    kind = dropdown("kind", KINDS, "attention ", "cross")
    layer = dropdown("layer", layers, "layer ")
    head = dropdown("head", list(range(1, heads + 1)), "head ")
    side = cell * max(max(len(e[1]), len(e[2])) for e in examples)
    tokens = alt.LookupData(pd.DataFrame(labels), key="sk", fields=["qs", "ks"])
    return (
        alt.Chart(pd.DataFrame(rows), title="Attention of the trained translator")
        .transform_filter(
            "datum.sk == sentence + ' ' + kind"
            " && datum.l == layer && datum.h == head"
        )
        .transform_lookup(lookup="sk", from_=tokens)
        .transform_flatten(["w"])
        .transform_window(i="row_number()")
        .transform_calculate(
            q="floor((datum.i - 1) / datum.n)",
            k="(datum.i - 1) % datum.n",
            weight="datum.w / 100",
        )
        .transform_calculate(
            query="datum.qs[datum.q] + pad('', datum.q, '\u200b')",
            key="datum.ks[datum.k] + pad('', datum.k, '\u200b')",
        )
        .mark_rect()
        .encode(
            x=alt.X(
                "key:N", sort=alt.SortField("k"), axis=alt.Axis(labelAngle=-90)
            ),
            y=alt.Y("query:N", sort=alt.SortField("q")),
            color=alt.Color(
                "weight:Q",
                scale=alt.Scale(scheme="viridis", domain=[0, 1]),
                legend=alt.Legend(orient="bottom"),
            ),
            tooltip=["query:N", "key:N", alt.Tooltip("weight:Q", format=".2f")],
        )
        .add_params(sentence, kind, layer, head)
        .properties(width=side, height=side)
    )
