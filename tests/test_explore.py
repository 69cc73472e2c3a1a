"""The explorable charts hold the right numbers for every setting their controls
offer, checked against the rules and formulas written out here, not against the
package's functions that computed them."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from annotated_transformer.book import explore


def chart_data(chart) -> pd.DataFrame:
    return pd.DataFrame(chart.to_dict()["datasets"].popitem()[1])


def test_mask_explorer_for_every_length_padding_and_causal() -> None:
    n = 6
    frame = chart_data(explore.mask_explorer(n))
    for length in range(1, n + 1):
        for pad in range(length):
            real = length - pad
            for causal in (0, 1):
                # what the chart's filter keeps for these control values
                shown = frame[
                    (frame.q < length)
                    & (frame.k < length)
                    & (frame.c == causal)
                    & (frame.r == max(1, real))
                ]
                assert len(shown) == length * length
                for q, k, allowed in shown[["q", "k", "a"]].itertuples(index=False):
                    if not causal:  # an encoder: every query sees the real keys
                        expected = k < real
                    elif q >= real:  # a padded decoder query sees itself only
                        expected = k == q
                    else:  # a real decoder query: real keys up to itself
                        expected = k <= q
                    assert allowed == expected, (length, pad, causal, q, k)


def test_rotation_explorer_values_and_rotation() -> None:
    d_model, positions = 8, 20
    chart = explore.rotation_explorer(d_model, positions, max_offset=5)
    frame = chart_data(chart).set_index(["p", "i"])
    for (p, i), row in frame.iterrows():
        angle = p / 10000 ** (2 * i / d_model)
        assert row["sin"] == pytest.approx(math.sin(angle), abs=1e-3)
        assert row["cos"] == pytest.approx(math.cos(angle), abs=1e-3)
        assert row["w"] == pytest.approx(10000 ** (-2 * i / d_model), rel=1e-4)
    # the text the chart shows, offset · ω, is the angle from position p to p + k
    p, k, i = 3, 4, 1
    start, end = frame.loc[(p, i)], frame.loc[(p + k, i)]
    turned = math.atan2(end["sin"], end["cos"]) - math.atan2(
        start["sin"], start["cos"]
    )
    assert turned % (2 * math.pi) == pytest.approx(k * start["w"], abs=1e-2)


def paper_rate(step: int, d_model: int, factor: float, warmup: int) -> float:
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def test_schedule_explorer_scales_to_the_paper_rate() -> None:
    chart = explore.schedule_explorer(total=10_000, points=20)
    frame = chart_data(chart)
    # the chart's own formula, read from its spec and evaluated here
    (formula,) = [
        t["calculate"] for t in chart.to_dict()["transform"] if "calculate" in t
    ]
    noam = frame[frame.k == "noam"]
    for width, factor in ((512, 1.0), (128, 2.5)):
        for step, warmup, v in noam[["s", "u", "v"]].itertuples(index=False):
            names = {
                "datum": SimpleNamespace(v=v),
                "factor": factor,
                "width": width,
            }
            drawn = eval(formula, {"sqrt": math.sqrt}, names)
            expected = paper_rate(step, width, factor, warmup)
            assert drawn == pytest.approx(expected, rel=1e-3)
    # every shape has the same peak, (d_model · warmup)^-0.5 at d_model 1, reached
    # at the end of the warm-up
    for (_, warmup), curve in frame.groupby(["k", "u"]):
        at = curve.set_index("s")["v"]
        assert at.max() == pytest.approx(warmup**-0.5, rel=1e-3)
        assert at[warmup] == pytest.approx(warmup**-0.5, rel=1e-3)


def test_distribution_explorer_is_softmax_over_temperature_with_top_k() -> None:
    logits = torch.tensor([1.5, -0.5, 0.0, 3.0])
    chart = explore.distribution_explorer(
        logits, list("abcd"), top_ks=(2,), title="t", x_title="x"
    )
    frame = chart_data(chart)
    assert sorted(set(frame.t)) == pytest.approx([0.2 * j for j in range(1, 16)])
    for (t, k), rows in frame.groupby(["t", "k"]):
        scaled = [math.exp(x / t) for x in logits.tolist()]
        if k:
            kept = sorted(scaled, reverse=True)[:k]
            scaled = [s if s in kept else 0.0 for s in scaled]
        total = sum(scaled)
        for label, p in rows[["x", "p"]].itertuples(index=False):
            assert p == pytest.approx(scaled["abcd".index(label)] / total, abs=1e-4)


def test_distribution_explorer_shows_the_likeliest_first() -> None:
    logits = torch.tensor([0.0, 2.0, 1.0, -1.0])
    chart = explore.distribution_explorer(
        logits, list("abcd"), shown=2, title="t", x_title="x"
    )
    frame = chart_data(chart)
    one = frame[frame.t == 1.0].sort_values("j")
    assert list(one.x) == ["b", "c"]
    total = sum(math.exp(x) for x in logits.tolist())
    assert one.p.iloc[0] == pytest.approx(math.exp(2.0) / total, abs=1e-4)


def test_attention_explorer_unrolls_each_map_row_by_row() -> None:
    weights = torch.softmax(torch.randn(2, 3, 4), dim=-1)  # (heads, queries, keys)
    src, tgt = ["a", "b", "c", "d"], ["x", "y", "z"]
    maps = {(kind, 1): weights for kind in explore.KINDS}
    spec = explore.attention_explorer([("one", src, tgt, maps)]).to_dict()
    rows = pd.DataFrame(spec["datasets"][spec["data"]["name"]])
    cross = rows[(rows.sk == "0 cross") & (rows.h == 2)].iloc[0]
    # the browser's q = floor(i / n), k = i mod n over the flattened weights
    for i, percent in enumerate(cross.w):
        q, k = divmod(i, cross.n)
        assert percent == round(100 * float(weights[1, q, k]))


def test_attention_explorer_offers_only_controls_that_change_the_map() -> None:
    maps = {(kind, 1): torch.full((2, 2, 2), 0.5) for kind in explore.KINDS}
    one = ("one", ["a", "b"], ["x", "y"], maps)
    bound = {
        p["name"]
        for p in explore.attention_explorer([one]).to_dict()["params"]
        if "bind" in p
    }
    assert bound == {"kind", "layer", "head"}  # one sentence: nothing to choose
    two = explore.attention_explorer([one, one]).to_dict()["params"]
    assert "bind" in next(p for p in two if p["name"] == "sentence")
