# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version,-kernelspec
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
# ---

# %% [markdown]
# # 15 · The Transformer today
#
# - **You will learn** the changes between the 2017 block and today's (RoPE, RMSNorm, SwiGLU, grouped-query attention, ALiBi) and what each buys on the same budget.
# - **It assumes** [chapter 04](04_positional_encoding.ipynb) and [chapter 14](14_generation_characters.ipynb).
# - **Time:** about 20 minutes to read; it runs in about a minute from its runs' records; training its 18 runs took 8.6–13.6 minutes each on one CPU thread.
#
# A model released in 2026 still has the 2017 skeleton: embeddings, a stack of attention and
# feed-forward blocks with residual connections, a softmax over the vocabulary. Its block
# differs from [chapter 14](14_generation_characters.ipynb)'s in a handful of well-understood places:
#
# | 2017 ([chapter 14](14_generation_characters.ipynb)) | today (Llama and most open models) |
# | --- | --- |
# | post-norm: `LayerNorm(x + sublayer(x))` | pre-norm: `x + sublayer(RMSNorm(x))` |
# | a position vector added to the input | queries and keys rotated in every layer (RoPE) |
# | ReLU feed-forward | SwiGLU feed-forward, two-thirds as wide |
# | biases in every linear layer | no biases |
# | one key and value head per query head | grouped-query attention: a few key/value heads |
#
# This chapter builds each change from what the book already has, checks it against PyTorch or
# a formula, and then measures what it buys. We train the same byte-level language model on
# Tiny Shakespeare with the same budget, adding one change at a time, and watch the bits per
# byte. Every model goes through the task runner, as `--set` options of the `lm` task:
#
# ```
# python -m annotated_transformer lm train --preset cpu --out runs/ladder-no-bias-s0 \
#     --set steps=1000 --set eval_every=100 --set seed=0 --set block=modern
# python -m annotated_transformer lm train --preset cpu --out runs/ladder-alibi-s0 \
#     --set steps=1000 --set eval_every=100 --set seed=0 --set block=modern \
#     --set positions=alibi
# ```

# %%
import time

import altair as alt
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.blocks.alibi import alibi_bias
from annotated_transformer.blocks.feed_forward import SwiGLU, swiglu_width
from annotated_transformer.blocks.grouped_query_attention import (
    GroupedQueryAttention,
)
from annotated_transformer.blocks.kv_cache import cache_bytes
from annotated_transformer.blocks.norms import RMSNorm
from annotated_transformer.blocks.rope import apply_rope, rope_tables, rotate_pairs
from annotated_transformer.book import viz
from annotated_transformer.book.page import wrap
from annotated_transformer.book.runs import LADDER, LADDER_BUDGET
from annotated_transformer.book.sizes import pick, runs_dir
from annotated_transformer.book.source import show_source
from annotated_transformer.evaluation.sampling import sample
from annotated_transformer.models.encoder_decoder import count_parameters
from annotated_transformer.models.modern_decoder import (
    ModernBlock,
    ModernConfig,
    ModernDecoderLM,
)
from annotated_transformer.runner import ensure_run, rows_with
from annotated_transformer.tasks.lm import bits_by_position

torch.manual_seed(0)
torch.set_num_threads(1)

# %% [markdown]
# ![Two blocks side by side. 2017, TransformerBlock, post-norm: a position vector added to x, attention (MultiHeadedAttention), add, norm1 LayerNorm, feed_forward (PositionwiseFeedForward, ReLU, biases), add, norm2 LayerNorm. Today, ModernBlock, pre-norm: norm1 RMSNorm, attention (RotaryAttention: grouped-query attention with RoPE and fewer key/value heads), add, norm2 RMSNorm, feed_forward SwiGLU without biases, add.](figures/15_block_today.svg)
#
# *Chapter 14's block against today's, labelled with the package classes this
# chapter builds and compares.*

# %% [markdown]
# ## Rotary position embeddings
#
# [Chapter 04](04_positional_encoding.ipynb) found the property that makes sinusoids work: moving a position by $k$ turns each
# $(\sin, \cos)$ pair by the angle $k\theta_i$, a rotation that does not depend on where you
# start. But the paper *adds* that vector to the token's embedding, and the attention score
# $q \cdot k$ then mixes content and position in four cross terms, only some of which depend on
# the offset alone.
#
# Rotary embeddings ([Su et al. 2021](../book/references.md#su-et-al-2021)) apply the rotation itself, to the queries and keys, in
# every layer. Cut a query $q$ at position $m$ into pairs of features and turn pair $i$ by
# $m\theta_i$: $q \mapsto R(m)\,q$, with $R(m)$ block-diagonal, one $2\times 2$ rotation per pair.
# Rotations are orthogonal and compose, $R(m)^\top R(n) = R(n-m)$, so
#
# $$\langle R(m)\,q,\; R(n)\,k\rangle = q^\top R(m)^\top R(n)\, k = q^\top R(n-m)\, k:$$
#
# the score depends on the two positions only through their offset $n - m$. Nothing is added
# to the token vectors, and a rotation keeps every vector's length.

# %%
show_source(rope_tables, rotate_pairs)

# %% [markdown]
# Both claims, numerically. One query and one key, placed at many pairs of positions: the score
# at a fixed offset is the same wherever the pair sits, to float32 rounding, and the rotated
# vectors keep their norms.

# %%
d = 32
q, k = torch.randn(d), torch.randn(d)
rows = []
for start in (0, 100, 1000):
    offsets = torch.arange(0, 64)
    qs = apply_rope(q.expand(64, d), torch.full((64,), start))
    ks = apply_rope(k.expand(64, d), start + offsets)
    for offset, score in zip(
        offsets.tolist(), (qs * ks).sum(-1).tolist(), strict=True
    ):
        rows.append(
            {
                "offset n − m": offset,
                "score": score,
                "query position m": str(start),
            }
        )
scores = pd.DataFrame(rows).pivot(
    index="offset n − m", columns="query position m", values="score"
)
spread = (scores.max(axis=1) - scores.min(axis=1)).max()
print(f"largest difference between the three starts at one offset: {spread:.1e}")
vectors = torch.randn(5, 100, d)
rotated = apply_rope(vectors, torch.arange(100))
torch.testing.assert_close(rotated.norm(dim=-1), vectors.norm(dim=-1))
print("norms kept at all 100 positions")

# %%
viz.line_chart(
    pd.DataFrame(rows), "offset n − m", "score", "query position m",
    title="RoPE: the score of a query and a key depends on their offset only",
    x_title="offset n − m (positions)", y_title="⟨R(m) q, R(n) k⟩",
)

# %% [markdown]
# The three curves lie on top of each other. Two consequences. A model with RoPE has nothing to
# learn or store per position, so it has no table to outgrow; whether it *works* beyond the
# length it was trained on is a different question, measured at the end of this chapter. And
# the rotation is applied to the keys before they enter the KV cache, each at its own absolute
# position, so cached keys are never touched again (`blocks/grouped_query_attention.py` below).
#
# ## RMSNorm
#
# Layer norm ([chapter 05](05_normalisation_and_residuals.ipynb)) recentres each vector and rescales it. RMSNorm (Zhang and Sennrich
# 2019) only rescales, by the root mean square of the features, and keeps a gain but no bias:
# $\mathrm{RMSNorm}(x) = g \odot x / \sqrt{\mathrm{mean}(x^2) + \varepsilon}$.
# One reduction instead of two, and, in their experiments and in every large model since, no
# loss of quality. PyTorch has had it since version 2.4; ours must agree with it.

# %%
show_source(RMSNorm)

# %%
ours, theirs = RMSNorm(64), nn.RMSNorm(64, eps=1e-6)
with torch.no_grad():
    ours.weight.uniform_(0.5, 1.5)
theirs.load_state_dict(ours.state_dict())
x = 3 * torch.randn(8, 10, 64) + 1
torch.testing.assert_close(ours(x), theirs(x))
print("RMSNorm == torch.nn.RMSNorm; output rms per vector:",
      ours(x).div(ours.weight).pow(2).mean(-1).sqrt().mean().item())

# %% [markdown]
# ## SwiGLU
#
# The paper's feed-forward is $\max(0, xW_1)W_2$. A gated linear unit (Shazeer 2020) multiplies,
# feature by feature, one linear map of $x$ by a smooth gate of another,
# $\mathrm{SwiGLU}(x) = (\mathrm{silu}(xW_1) \odot xW_3)\,W_2$: three matrices instead of two. To
# compare at equal cost the hidden width shrinks to $\tfrac23 d_{ff}$, so that
# $3 \cdot d \cdot \tfrac23 d_{ff} = 2 \cdot d \cdot d_{ff}$.

# %%
show_source(swiglu_width, SwiGLU)

# %%
pd.DataFrame([
    {"d_model": dm, "d_ff": dff, "ReLU (no biases)": 2 * dm * dff,
     "SwiGLU width": swiglu_width(dff),
     "SwiGLU parameters": count_parameters(SwiGLU(dm, swiglu_width(dff)))}
    for dm, dff in ((128, 512), (512, 2048), (4096, 16384))
])

# %% [markdown]
# ## Grouped-query attention
#
# When a decoder generates, each layer keeps the keys and values of every earlier token
# ([chapter 09](09_copy_task.ipynb)'s KV cache): $2 \cdot h \cdot d_k$ numbers per token and layer. At long contexts and
# large batches that cache, not the weights, fills the accelerator, and reading it back bounds
# the decoding speed. Grouped-query attention ([Ainslie et al. 2023](../book/references.md#ainslie-et-al-2023)) keeps $h$ query heads but
# only `kv_heads` key/value heads, each shared by a group of $h / \text{kv\_heads}$ query heads.
# `kv_heads = h` is multi-head attention; `kv_heads = 1` is multi-query attention (Shazeer 2019).

# %%
show_source(GroupedQueryAttention.forward)

# %% [markdown]
# The grouping is the same computation as ordinary attention with each key/value head repeated
# for every query head of its group, which is how we check it:

# %%
# Without positions: its subclass RotaryAttention adds RoPE.
att = GroupedQueryAttention(ModernConfig(d_model=64, h=8, kv_heads=2)).eval()
x = torch.randn(3, 12, 64)
heads = lambda t, n: t.unflatten(-1, (n, 8)).transpose(1, 2)  # noqa: E731
q, k, v = heads(att.w_q(x), 8), heads(att.w_k(x), 2), heads(att.w_v(x), 2)
k, v = k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1)  # 2 heads -> 8
reference = F.scaled_dot_product_attention(q, k, v, is_causal=True)
reference = att.w_o(reference.transpose(1, 2).flatten(2))
torch.testing.assert_close(att(x), reference)
print("grouped-query attention == multi-head attention on repeated key/value heads")

# %% [markdown]
# What the grouping saves at the paper's base size (6 layers, $d_{model} = 512$, 8 heads), and
# what it does to decoding speed on a CPU (one core, a batch of 16 prompts of 64
# bytes, untrained weights: speed does not depend on them). The cache size is measured on the
# cache tensors and agrees with the formula $2 \cdot N \cdot \text{kv\_heads} \cdot d_k \cdot 4$
# bytes per token in float32.

# %%
def cache_row(kv_heads: int, batch: int, new: int) -> dict:
    torch.manual_seed(0)
    config = ModernConfig(vocab=256, d_model=512, h=8, N=6, max_len=1024,
                          d_ff=swiglu_width(2048), kv_heads=kv_heads)
    model = ModernDecoderLM(config).eval()
    prompt = torch.randint(0, 256, (batch, 64))
    cache = model.new_cache()
    with torch.inference_mode():
        model(prompt, cache)
    stored = cache_bytes(cache)
    sample(model, prompt, 2)  # warm-up
    start = time.perf_counter()
    sample(model, prompt, new, generator=torch.Generator().manual_seed(0))
    seconds = time.perf_counter() - start
    return {"kv_heads": kv_heads, "parameters": count_parameters(model),
            "cache bytes / token (measured)": stored // (batch * 64),
            "cache bytes / token (formula)": 2 * 6 * kv_heads * 64 * 4,
            "new bytes / s": round(batch * new / seconds)}

# %% tags=["nbval-ignore-output"]
batch, new = pick(ci=(2, 4), full=(16, 64))
kv_table = pd.DataFrame([cache_row(kv, batch, new) for kv in (8, 2, 1)])
kv_table

# %% [markdown]
# Four and eight times less cache, and faster decoding, though by far less than the cache
# shrinks (the last column): on a CPU with a batch this small, decoding speed is set by the
# weights' matrix products more than by reading the cache. On a GPU serving long contexts to large batches, where the cache dominates the memory traffic, the
# saving turns into speed and into batch size.
#
# ## ALiBi: positions as a distance penalty
#
# One more way to give positions, because it will matter when we test longer contexts. ALiBi
# ([Press et al. 2022](../book/references.md#press-et-al-2022)) adds no vector and rotates nothing: each head subtracts from the score a
# penalty proportional to the distance, $-m_h \cdot (i - j)$, with a fixed slope per head
# ($\tfrac12, \tfrac14, \dots$). A longer context only brings larger distances, penalised more.

# %%
show_source(alibi_bias)

# %%
viz.heatmap(
    alibi_bias(4, 12)[0].clamp(min=-6),
    title="ALiBi's bias for head 1 (slope 1/4)",
    x_title="key position j",
    y_title="query position i",
)

# %% [markdown]
# ## Today's block
#
# The pieces assembled: pre-norm with RMSNorm, RoPE inside the attention, grouped-query
# attention, SwiGLU, no biases. Each change is also a switch (`norm`, `positions`,
# `feed_forward`, `bias`, `kv_heads`), so that we can walk from [chapter 14](14_generation_characters.ipynb)'s block to this one a
# step at a time. With `norm="layer"`, learned positions, ReLU, biases and `kv_heads = h`, the
# block is PyTorch's `nn.TransformerEncoderLayer(norm_first=True)` under a causal mask (a test
# checks that with the same weights).
#
# One more change is common in the newest models and left out here: QK-norm, a norm on the
# queries and keys before their dot product (Dehghani et al. 2023; OLMo 2, Qwen 3). It stops
# attention logits from growing without bound, which destabilises training of large models at
# high learning rates; a model of a million parameters trained this briefly never gets there.

# %%
show_source(ModernBlock)

# %% [markdown]
# ## The experiment: one change at a time
#
# The language model of [chapter 14](14_generation_characters.ipynb) (`lm --preset cpu`: 4 layers, $d_{model} = 128$, 4 heads,
# $d_{ff} = 512$, contexts of 128 bytes, batches of 32) on Tiny Shakespeare, every run 1,000
# steps with the same schedule, data order and seed, on a CPU. Each rung of
# the ladder adds one change to the one before:

# %%
RUNGS = {  # each rung's settings: book.runs.LADDER
    "2017": "2017 (post-norm)",
    "pre-norm": "+ pre-norm",
    "rmsnorm": "+ RMSNorm",
    "rope": "+ RoPE",
    "swiglu": "+ SwiGLU",
    "no-bias": "+ no biases",
    "gqa": "+ GQA (2 of 4 heads)",
}
preset = pick(ci="tiny", full="cpu")
budget = pick(ci=["steps=40", "eval_every=20"], full=list(LADDER_BUDGET))
seeds = pick(ci=[0], full=[0, 1])


def train_rung(folder: str, settings: list[str], seed: int, weights: bool = True):
    out = runs_dir() / f"ladder-{folder}-s{seed}-{preset}"
    return ensure_run(
        "lm",
        preset,
        out,
        settings=[*budget, f"seed={seed}", *settings],
        fresh=preset == "tiny",
        weights=weights,
    )


for rung, settings in LADDER.items():
    print(wrap(f"{RUNGS[rung]:22} {' '.join(settings)}", indent=" " * 23))

# %% tags=["nbval-ignore-output"]
runs = {
    (RUNGS[rung], seed): train_rung(rung, list(settings), seed, weights=False)
    for rung, settings in LADDER.items()
    for seed in seeds
}


def minutes(run) -> float:
    return run.history["seconds"].iloc[-1] / 60


def bpb_after(run, t: float) -> float:
    """The validation curve (bits per byte) interpolated at t minutes."""
    curve = rows_with(run.history, "val_bpb")
    return float(np.interp(60 * t, curve["seconds"], curve["val_bpb"]))


equal_time = min(minutes(run) for run in runs.values())
table = pd.DataFrame(
    [
        {
            "block": name,
            "seed": seed,
            "parameters": run.metrics["parameters"],
            "bits per byte": run.metrics["validation"]["bits_per_byte"],
            "minutes": minutes(run),
            "at equal time": bpb_after(run, equal_time),
        }
        for (name, seed), run in runs.items()
    ]
)
ladder = table.groupby("block", sort=False).agg(
    parameters=("parameters", "first"),
    bpb=("bits per byte", "mean"),
    seeds=("bits per byte", lambda s: " ".join(f"{v:.3f}" for v in s)),
    minutes=("minutes", "mean"),
    equal_time=("at equal time", "mean"),
)
change = ladder["bpb"].diff()
ladder.insert(3, "change", change.map(lambda v: "" if pd.isna(v) else f"{v:+.3f}"))
shortest = f"{equal_time:.2f} minutes, the shortest run"
print(f"equal time: the validation curves at {shortest}")
ladder.round(3)

# %% [markdown]
# `bpb`: bits per byte of the whole validation split after 1,000 steps
# ([chapter 14](14_generation_characters.ipynb)'s protocol: overlapping windows, every byte
# scored once), the mean of the seeds listed in `seeds`; `change`: the difference from the
# rung above; `minutes`: training time on one CPU core; `equal_time`: the quick validation
# loss (the first 64 KiB of the split, measured every 100 steps) interpolated at the training
# time of the fastest run, so that no rung gains from being given more time.
#
# Time matters as much as steps: a change that makes each step slower must gain more than
# the steps that time would have bought. The validation curves against wall-clock minutes:

# %% tags=["nbval-ignore-output"]
curves = pd.concat(
    [
        rows_with(run.history, "val_bpb").assign(
            minutes=lambda f: f["seconds"] / 60, block=name
        )
        for (name, seed), run in runs.items()
        if seed == 0
    ]
)
viz.line_chart(
    curves[curves["step"] >= pick(ci=20, full=300)],
    "minutes",
    "val_bpb",
    "block",
    title="Validation bits per byte against training time, one change at a time",
    x_title="training time (minutes, one thread)",
    y_title="bits per byte (validation)",
    width=440,
).encode(
    y=alt.Y(
        "val_bpb:Q", scale=alt.Scale(zero=False), title="bits per byte (validation)"
    ),
    color=alt.Color("block:N", sort=list(RUNGS.values()), title="block"),
)

# %% tags=["nbval-ignore-output"]
alt.Chart(table, title="Each rung of the ladder, one point per seed").mark_point(
    filled=True, size=60
).encode(
    x=alt.X(
        "bits per byte:Q",
        scale=alt.Scale(zero=False),
        title="bits per byte (validation)",
    ),
    y=alt.Y("block:N", sort=list(RUNGS.values()), title="block"),
    color=alt.Color("seed:N", title="seed"),
).properties(width=450, height=220)

# %% [markdown]
# What the ladder says at this scale (0.9M parameters, 1,000 steps; the two seeds of a rung
# differ by about a hundredth of a bit, see `seeds`), in bits per byte, the mean of the
# seeds:
#
# - **Pre-norm costs bits here**: 2.60<!-- record ladder-pre-norm-s0+ladder-pre-norm-s1 metrics.validation.bits_per_byte --> against post-norm's 2.52<!-- record ladder-2017-s0+ladder-2017-s1 metrics.validation.bits_per_byte -->. With a
#   warm-up and four layers, post-norm trains without trouble, and then it tends to end lower:
#   every block's output is normalised, including the last. Pre-norm's gift is stability, not
#   quality: in a post-norm stack the gradient reaching the bottom layers depends on the depth,
#   so deep post-norm models need a long warm-up or diverge (Xiong et al. 2020; Liu et al.
#   2020), while pre-norm trains a hundred layers with a plain schedule. It pays off with
#   depth, which this model does not have.
# - **RMSNorm changes nothing we can measure** (2.61<!-- record ladder-rmsnorm-s0+ladder-rmsnorm-s1 metrics.validation.bits_per_byte -->, within the seeds). Its gain is
#   speed: one reduction instead of two, which matters on GPUs, where norms are limited by
#   memory traffic rather than arithmetic.
# - **RoPE is the big win**, down to 2.32<!-- record ladder-rope-s0+ladder-rope-s1 metrics.validation.bits_per_byte -->: more than all the other changes together.
#   A learned table must learn each of its 128 position vectors from the windows that put a
#   byte there; RoPE hands every layer the relative offset for free, and a character model
#   lives on relative patterns (the letters just before, the start of the current word).
# - **SwiGLU gains again**, to 2.27<!-- record ladder-swiglu-s0+ladder-swiglu-s1 metrics.validation.bits_per_byte -->, at equal parameters (three matrices instead of
#   two, each narrower), and at equal time too (the last column).
# - **Removing the biases costs a little**: 2.29<!-- record ladder-no-bias-s0+ladder-no-bias-s1 metrics.validation.bits_per_byte -->. At this size a bias is a cheap
#   degree of freedom. Large models drop them because, at scale, they cost nothing measurable
#   and their absence made training more stable (PaLM's report); it is a large-scale choice.
# - **Grouped-query attention gains a little with fewer parameters**: 2.28<!-- record ladder-gqa-s0+ladder-gqa-s1 metrics.validation.bits_per_byte --> with
#   791,680<!-- record ladder-gqa-s0 metrics.parameters --> parameters against 857,216<!-- record ladder-no-bias-s0 metrics.parameters -->, and half the cache.
#   We do not read the gain as a law: Ainslie et al. find grouped-query attention slightly
#   *worse* than multi-head at scale. It is chosen for the cache.
#
# Together: today's block ends at 2.28<!-- record ladder-gqa-s0+ladder-gqa-s1 metrics.validation.bits_per_byte --> bits per byte against the 2017 block's
# 2.52<!-- record ladder-2017-s0+ladder-2017-s1 metrics.validation.bits_per_byte --> after the same 1,000 steps, and at the same training time the gap is as
# large (the last column). The 2017 block needs three times the steps, the `cpu` preset's
# full 3,000, to come level (the preset's own run, `results/ts-cpu`:
# 2.27<!-- record ts-cpu metrics.validation.bits_per_byte -->). Most of the difference is the position encoding.
#
# ## Longer than trained: positions that extrapolate
#
# Every model above read 128 bytes at a time. What happens at 256 or 512? A learned table has
# no vector for position 128: the model cannot even be run. Sinusoids are defined everywhere,
# RoPE has no table at all, ALiBi only sees larger distances, and a causal model with *no*
# positions (it can still count, from how attention spreads over the prefix) has nothing to
# outgrow either. Five models of today's block (multi-head, no biases) that differ only in
# `positions`, trained at 128 bytes and evaluated on windows four times as long: the bits per
# byte at each position of the window, averaged over the validation split.

# %%
POSITIONS = {"learned": "learned", "sinusoidal": "sinusoidal", "RoPE": "no-bias",
             "ALiBi": "alibi", "none": "none"}
position_runs = {
    name: rope
    if folder == "no-bias" and (rope := runs[("+ no biases", 0)]).has_model
    else train_rung(
        folder,
        ["block=modern"] + ([] if folder == "no-bias" else [f"positions={folder}"]),
        0,
    )
    for name, folder in POSITIONS.items()
}

# %% tags=["nbval-ignore-output"]
trained = position_runs["RoPE"].model.max_len
long = 4 * trained
val = position_runs["RoPE"].task.splits["val"]
by_position = {}
for name, run in position_runs.items():
    model = run.model
    if name != "learned":
        model.extend_context(long)
    by_position[name] = bits_by_position(model, val, model.max_len)
lengths = [trained, 2 * trained, long]
pd.DataFrame({
    name: {f"context {n}": bits[:n].mean().item() if len(bits) >= n else None
           for n in lengths}
    for name, bits in by_position.items()
}).T.round(3)

# %% tags=["nbval-ignore-output"]
bucket = pick(ci=4, full=8)
frame = pd.concat(
    [
        pd.DataFrame(
            {
                "position": torch.arange(len(bits))
                .div(bucket, rounding_mode="floor")
                .mul(bucket)
                .tolist(),
                "bits": bits.tolist(),
            }
        )
        .groupby("position", as_index=False)
        .mean()
        .assign(positions=name)
        for name, bits in by_position.items()
    ]
)
viz.line_chart(
    frame,
    "position",
    "bits",
    "positions",
    title=f"Bits per byte by position, trained on {trained}-byte contexts",
    x_title="position in the window (bytes)",
    y_title=f"bits per byte (mean over {bucket})",
) + alt.Chart(pd.DataFrame({"x": [trained]})).mark_rule(strokeDash=[4, 4]).encode(
    x="x:Q"
)

# %% [markdown]
# Up to position 127 all five behave as trained, RoPE best and no positions worst, as in the
# whole-split scores. Past it, three ways of failing and one success:
#
# - **Sinusoids break at once.** Position 128 adds a vector the model has never seen added; the
#   combination of phases is new, and the loss jumps there (the chart).
# - **RoPE holds for a few dozen positions, then climbs** (the chart; the table has its mean
#   on 512-byte windows). Scores
#   still depend on the offset only, but offsets beyond 127 turn the slow feature pairs to angles
#   that training never produced: the pairs whose wavelength exceeds 128 positions only ever
#   covered part of their circle. This is why long-context models rescale RoPE's frequencies
#   after training (position interpolation, NTK scaling, YaRN) and fine-tune briefly at the new
#   length.
# - **No positions at all** trains worst (the table above) and drifts up as the window grows:
#   the model infers position from how attention spreads over the prefix, and a longer prefix
#   spreads it thinner than anything it learned.
# - **ALiBi gets better with length**: fewer bits per byte on 512-byte windows than on
#   128-byte ones (the table above). A larger distance only means a larger penalty, a
#   situation seen in training, so the extra context is used rather than misread. At the
#   training length it scores a little worse than RoPE.
#
# ## Summary
#
# - Four changes separate the 2017 block from today's: pre-norm RMSNorm, rotary positions,
#   SwiGLU and grouped-query attention, with the biases removed. Each is a switch of
#   `ModernDecoderLM` and of the `lm` task, each checked here against PyTorch or a formula.
# - RoPE makes the attention score depend on the offset of query and key alone, by rotating
#   them; it was the largest gain of the ladder, from 2.61<!-- record ladder-rmsnorm-s0+ladder-rmsnorm-s1 metrics.validation.bits_per_byte --> to 2.32<!-- record ladder-rope-s0+ladder-rope-s1 metrics.validation.bits_per_byte -->
#   bits per byte.
# - SwiGLU and grouped-query attention also helped at this scale; pre-norm, RMSNorm and the
#   removal of biases did not. Those buy stability, speed and simplicity for deep, wide models
#   trained at high learning rates, which a laptop-sized run cannot show.
# - Grouped-query attention shrinks the KV cache by h / kv_heads (4× and 8× at base size), the
#   change that matters most when serving long contexts.
# - Trained at 128 bytes, only ALiBi read 512 bytes without loss; RoPE needs rescaling to go
#   beyond its training length, and learned tables cannot at all.
#
# You can now
#
# - build RoPE, RMSNorm, SwiGLU, grouped-query attention and ALiBi and check them;
# - measure one change at a time on a fixed budget.
#
# **Next:** [chapter 16 · BERT](16_bert.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/15_the_transformer_today.py`: fill them in there, then grade them from the
# repository's root with `make exercises CHAPTER=15` (or
# `python -m annotated_transformer.exercises 15`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-15-rms-norm)=
# ### Exercise 15.1 · RMSNorm by hand
#
# Write RMSNorm as a function of the input and the gain: no mean subtracted, no bias.
# The grader compares with `torch.nn.functional.rms_norm` at a small and a large `eps`.
#
# Write `rms_norm(x, weight, eps)`; grade with `make exercises CHAPTER=15`.
#
# :::{dropdown} Solution
# ```python
# def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
#     """RMSNorm over the last axis: weight ⊙ x / √(mean(x²) + eps).
#
#     x: (..., d); weight: (d,). returns (..., d)
#     """
#     return weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
# ```
# :::

# %% [markdown]
# (ex-15-rope)=
# ### Exercise 15.2 · Rotary embeddings
#
# Write RoPE for a stack of vectors, rotating the pairs $(x_{2i}, x_{2i+1})$ as the
# package does. The grader builds the rotation another way, each pair as the complex
# number $x_{2i} + \mathrm{i}\,x_{2i+1}$ times $e^{\mathrm{i} m \theta_i}$, and checks
# that the score of a query and a key depends on their offset only.
#
# Write `rope(x, positions, base)`; grade with `make exercises CHAPTER=15`.
#
# :::{dropdown} Solution
# ```python
# def rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
#     """Rotate pair (x₂ᵢ, x₂ᵢ₊₁) at position m by m θᵢ, θᵢ = base^(−2i/d).
#
#     x: (..., n, d), d even; positions: integer (n,). returns (..., n, d)
#     """
#     d = x.size(-1)
#     pairs = torch.arange(0, d, 2, dtype=torch.float64)  # 2i for i < d/2
#     theta = base ** (-pairs / d)  # (d/2,)
#     angle = positions.double()[:, None] * theta  # (n, d/2)
#     cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
#     first, second = x[..., 0::2], x[..., 1::2]  # (..., n, d/2) each
#     turned = (first * cos - second * sin, first * sin + second * cos)
#     return torch.stack(turned, dim=-1).flatten(-2)
# ```
# :::

# %% [markdown]
# (ex-15-alibi)=
# ### Exercise 15.3 · ALiBi added to attention
#
# Give causal attention ALiBi's distance penalty: head $h$ of $H$ subtracts $m_h (i -
# j)$ from its scaled scores, $m_h = 2^{-8h/H}$ for $h = 1 \dots H$, before the softmax.
# The grader compares with a loop over queries and keys.
#
# Write `alibi_attention(q, k, v)`; grade with `make exercises CHAPTER=15`.
#
# :::{dropdown} Solution
# ```python
# def alibi_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
#     """Causal attention with ALiBi: scores − m_h (i − j), m_h = 2^(−8h/H).
#
#     q, k, v: (b, H, n, d_k). returns (b, H, n, d_k)
#     """
#     heads, n = q.size(1), q.size(2)
#     slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1, dtype=q.dtype) / heads)
#     i = torch.arange(n)[:, None]
#     j = torch.arange(n)[None, :]
#     bias = -slopes[:, None, None] * (i - j).to(q.dtype)  # (H, n, n)
#     scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + bias
#     scores = scores.masked_fill(j > i, float("-inf"))
#     return scores.softmax(-1) @ v
# ```
# :::

# %% [markdown]
# (ex-15-gqa)=
# ### Exercise 15.4 · Grouped-query attention
#
# Write causal attention in which $H$ query heads share $G$ key/value heads, each shared
# by $H / G$ neighbouring query heads. The grader compares with PyTorch's
# `scaled_dot_product_attention(..., enable_gqa=True)` for $G = 1$ (multi-query), 2 and
# 8 (multi-head).
#
# Write `grouped_query_attention(q, k, v)`; grade with `make exercises CHAPTER=15`.
#
# :::{dropdown} Solution
# ```python
# def grouped_query_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
#     """Causal attention of H query heads over G key/value heads.
#
#     q: (b, H, n, d_k); k, v: (b, G, n, d_k), G divides H. Query head h reads
#     key/value head h // (H / G). returns (b, H, n, d_k)
#     """
#     group = q.size(1) // k.size(1)
#     k = k.repeat_interleave(group, dim=1)  # (b, H, n, d_k)
#     v = v.repeat_interleave(group, dim=1)
#     n = q.size(2)
#     scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
#     future = torch.ones(n, n, dtype=torch.bool).triu(1)
#     return scores.masked_fill(future, float("-inf")).softmax(-1) @ v
# ```
# :::
