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
# # 18 · Longer contexts: Transformer-XL and sparse attention
#
# - **You will learn** how Transformer-XL's memory and relative positions and sparse attention's patterns let a model see further.
# - **It assumes** [chapter 14](14_generation_characters.ipynb), [chapter 15](15_the_transformer_today.ipynb) and [chapter 17](17_gpt2.ipynb).
# - **Time:** about 25 minutes to read; it runs in about 2 minutes from its runs' records; training its 4 runs took 3.6–26.4 minutes each on one CPU thread.
#
# :::{admonition} Where the outputs come from
# :class: dropdown
# The stored outputs on this page come from the `cpu`-size runs named in each section,
# trained once from the repository root (the commands are printed with the results; the
# Time line above says what they took).
# :::
#
# Chapters [16](16_bert.ipynb) and [17](17_gpt2.ipynb) changed what a transformer is trained *for* (BERT, GPT-2).
# This chapter changes how far it can see. A model that reads windows of $n$ tokens pays for
# attention in proportion to $n^2$ and forgets everything before the window. Two answers from
# 2019:
#
# - **Transformer-XL** (Dai et al.) keeps the window short but carries a *memory* of the
#   previous segment, and scores positions by their distance, so the context outgrows the
#   window;
# - **Sparse transformers** (Child et al.) keep one long window but let each position attend to
#   only $O(\sqrt{n})$ others, in fixed patterns that still connect every pair in two layers.
#
# Both are options of chapter 14's `lm` task, trained on the enwik8 prefix and compared with
# the 2017 block of the same size.

# %%
import time

import altair as alt
import numpy as np
import pandas as pd
import torch

from annotated_transformer.book import viz
from annotated_transformer.book.sizes import pick, runs_dir
from annotated_transformer.book.source import show_source
from annotated_transformer.runner import ensure_run, rows_with

torch.manual_seed(0)
torch.set_num_threads(1)

# %% [markdown]
# ## Transformer-XL: context beyond the window
#
# [Chapter 14](14_generation_characters.ipynb)'s language model reads windows of `max_len` bytes. Whatever came before the window
# is gone: the first byte of every window is predicted from nothing, and a model trained on
# 128-byte windows cannot use byte 129 back however useful it would be. Evaluating with
# overlapping windows ([chapter 14](14_generation_characters.ipynb)'s `stride`) gives every byte *some* context, at the price of
# reading most bytes twice, and still never more than `max_len` of it.
#
# Transformer-XL ([Dai et al. 2019](../book/references.md#dai-et-al-2019)) keeps the text flowing through the model instead:
#
# * **Segment-level recurrence.** The text is read in consecutive segments. While a segment is
#   processed, every layer keeps the hidden states that entered it, and the next segment's
#   queries attend to `[memory; current]`. The memory is a constant (no gradient flows into
#   it), so training still back-propagates through one segment, at the cost of one segment.
#   Information moves up one layer per segment, so N layers with a memory of `mem_len` states
#   can reach about N · `mem_len` bytes back.
# * **Relative positions.** [Chapter 04](04_positional_encoding.ipynb) gives position 0 the same vector in every segment, so the
#   memory and the current segment would both hold a "position 0". Transformer-XL drops the
#   position vectors from the input and lets each attention score depend on the *distance*
#   between query and key.
#
# The package has both (`blocks/relative_attention.py`, `evaluation/segments.py`) and the
# `lm` task trains it with `--set block=xl` (the model's entry in `tasks/variants.py`; the
# task reads the text in segments with `tasks/lm_segments.py`):
#
# ```
# python -m annotated_transformer lm train --preset cpu --out runs/xl-cpu \
#     --set dataset=enwik8_prefix --set block=xl --set steps=1400 --set eval_every=350
# python -m annotated_transformer lm evaluate --checkpoint runs/xl-cpu/final.pt \
#     --mem-len 512
# ```

# %% [markdown]
# ![Eight columns of states in three rows (input x, block 1, block 2): four from the previous segment, dashed, marked memory with no gradient, and four of the current segment. Lines show each current state attending to the four states before it and itself, in the row below, reaching into the memory; the last position's lines are highlighted.](figures/18_xl_memory.svg)
#
# *Transformer-XL's segment-level recurrence: each block attends over [memory;
# current], the memory being the previous segment's states, detached.*

# %%
import math

from annotated_transformer.blocks.positional import sinusoids
from annotated_transformer.blocks.relative_attention import (
    RelativeMultiHeadAttention,
    rel_shift,
    relative_positions,
)
from annotated_transformer.evaluation.segments import (
    segment_bits_per_byte,
    segment_loss,
    stream_segments,
)
from annotated_transformer.models.transformer_xl import TransformerXLLM

# %% [markdown]
# ### Relative attention, one term at a time
#
# Write the input at position $i$ as its content $E_i$ plus its absolute position vector $U_i$.
# The score of [chapter 02](02_self_attention.ipynb) between query $i$ and key $j$ is then
# $(E_i + U_i)^\top W_q^\top W_k (E_j + U_j)$, which expands into four terms:
#
# $$A^{\mathrm{abs}}_{ij} = \underbrace{E_i^\top W_q^\top W_k E_j}_{(a)\ \text{content}}
# + \underbrace{E_i^\top W_q^\top W_k U_j}_{(b)}
# + \underbrace{U_i^\top W_q^\top W_k E_j}_{(c)}
# + \underbrace{U_i^\top W_q^\top W_k U_j}_{(d)}.$$
#
# Transformer-XL rewrites the three terms that involve positions (§3.3):
#
# 1. In (b) and (d) the key's absolute position $U_j$ becomes the sinusoid of the distance,
#    $R_{i-j}$ ([chapter 04](04_positional_encoding.ipynb)'s table, read at $i - j$), with its own projection $W_R$: keys are
#    placed relative to the query.
# 2. In (c) and (d) the query's position $U_i^\top W_q^\top$ would now multiply something that
#    does not depend on $i$'s position at all; it becomes a learned vector per head: $u$ in (c),
#    a preference for some keys' *content* whatever the query, and $v$ in (d), a preference for
#    some *distances* whatever the query.
#
# With $q_i = W_q E_i$ and $k_j = W_k E_j$ the score is
#
# $$A_{ij} = q_i^\top k_j + q_i^\top W_R R_{i-j} + u^\top k_j + v^\top W_R R_{i-j}
# = \underbrace{(q_i + u)^\top k_j}_{\text{content}}
# + \underbrace{(q_i + v)^\top W_R R_{i-j}}_{\text{position}},$$
#
# scaled by $1/\sqrt{d_k}$, masked (a query sees the memory and the current segment up to
# itself) and soft-maxed as usual. With a memory of $m$ states, query $i$ of the segment sits
# at position $m + i$ of the keys, so the distance to key $j$ is $m + i - j$.
#
# The most literal implementation is a double loop over $(i, j)$, one head at a time. It is far
# too slow to train with, and it is the reference the fast version must reproduce.

# %%
def naive_relative_attention(att, x, memory):
    """A_ij = (q_i + u)·k_j + (q_i + v)·W_R R_{m+i−j}.

    One head, one query and one key at a time.
    """
    context = torch.cat([memory, x], dim=1)
    m, klen, d_k = memory.size(1), context.size(1), att.d_k
    out = torch.zeros(x.size(0), x.size(1), att.d_model, dtype=x.dtype)
    for b in range(x.size(0)):
        for head in range(att.h):
            rows = slice(head * d_k, (head + 1) * d_k)
            w_q, w_k, w_v, w_r = (
                w.weight[rows] for w in (att.w_q, att.w_k, att.w_v, att.w_r)
            )
            for i in range(x.size(1)):
                q = w_q @ x[b, i]
                scores = torch.full((klen,), -math.inf, dtype=x.dtype)
                # causal: the memory and the segment up to i
                for j in range(m + i + 1):
                    # R_{m+i−j}
                    r = sinusoids(m + i + 1, att.d_model)[m + i - j].to(x.dtype)
                    content = (q + att.u[head]) @ (w_k @ context[b, j])
                    position = (q + att.v[head]) @ (w_r @ r)
                    scores[j] = (content + position) / math.sqrt(d_k)
                values = torch.stack([w_v @ context[b, j] for j in range(klen)])
                out[b, i, rows] = scores.softmax(0) @ values
    return att.w_o(out)


att = RelativeMultiHeadAttention(d_model=8, h=2).double().eval()
# u and v start near 0: make them large enough to matter in the check
with torch.no_grad():
    att.u.normal_()
    att.v.normal_()
x, memory = (
    torch.randn(2, 4, 8, dtype=torch.float64),
    torch.randn(2, 3, 8, dtype=torch.float64),
)
with torch.no_grad():
    torch.testing.assert_close(
        att(x, memory), naive_relative_attention(att, x, memory)
    )
print(
    "RelativeMultiHeadAttention == the double loop over (i, j), memory of 3, "
    "segment of 4"
)

# %% [markdown]
# ### The relative shift, on a tiny matrix
#
# The fast version cannot afford a `(len, klen, d)` tensor of $W_R R_{i-j}$ vectors, one per
# pair. The position term has only `klen` different vectors, one per distance, so one matrix
# product scores every query against every *distance*: column $t$ holds distance
# $\mathrm{klen} - 1 - t$ (`relative_positions` lists the distances in descending order). What
# we need is a matrix indexed by *key*: entry $(i, j)$ must hold distance $m + i - j$, which sits
# in column $j + \mathrm{len} - 1 - i$. Every row must slide left by a different amount,
# $\mathrm{len} - 1 - i$: the top row the most, the bottom row not at all.
#
# `rel_shift` does it with one pad and two reshapes. Take a segment of 3 queries after a memory
# of 2 (klen = 5) and fill the score of query $i$ against distance $d$ with the number $10i + d$,
# so that every entry says where it came from.

# %%
qlen, m = 3, 2
klen = m + qlen
# column t holds distance klen − 1 − t
distance = torch.arange(klen - 1, -1, -1)
by_distance = 10 * torch.arange(qlen)[:, None] + distance[None, :]  # (qlen, klen)
print("scores by distance (row i: 10·i + d):\n", by_distance)
# a zero column in front: (qlen, klen + 1)
padded = torch.nn.functional.pad(by_distance, (1, 0))
print("1. pad a zero column:\n", padded)
as_tall = padded.reshape(klen + 1, qlen)
print(
    "2. read the same numbers as (klen + 1, qlen), then drop the first row:\n",
    as_tall,
)
shifted = as_tall[1:].reshape(qlen, klen)
print(
    "3. read the rest as (qlen, klen): "
    "row i has moved qlen − 1 − i places left\n",
    shifted,
)

# %% [markdown]
# Dropping the first `qlen` numbers and reading rows of `klen` instead of `klen + 1` moves row
# $i$ left by exactly $\mathrm{qlen} - 1 - i$ places. Entry $(i, j)$ now holds $10i + (m + i - j)$
# wherever key $j$ is visible ($j \le m + i$); the entries above that, the future keys, are
# leftovers that the causal mask hides. The package's `rel_shift` agrees, and so does the
# explicit index:

# %%
# (qlen, klen)
visible = torch.arange(klen)[None, :] <= m + torch.arange(qlen)[:, None]
wanted = 10 * torch.arange(qlen)[:, None] + (
    m + torch.arange(qlen)[:, None] - torch.arange(klen)
)
assert torch.equal(shifted[visible], wanted[visible])
assert torch.equal(rel_shift(by_distance)[visible], wanted[visible])
print(
    "distance of each visible (query, key) pair after the shift:\n",
    (shifted - 10 * torch.arange(qlen)[:, None]).masked_fill(~visible, -1),
)

# %%
show_source(relative_positions, rel_shift, RelativeMultiHeadAttention.forward)

# %% [markdown]
# ### The memory, and what it does to training
#
# `TransformerXLLM`, built with every block from one `XLConfig` (its sizes and the `mem_len`
# it trains with), runs the blocks over a segment, giving each block the memory of the
# previous segment and returning, per block, the last `mem_len` of [memory; this segment's
# input to the block], detached. Evaluation may keep more states than training did
# (`mem_len=` in `forward`): the sinusoids of the position term exist for any distance.

# %%
show_source(TransformerXLLM.forward)

# %% [markdown]
# The memory is only the right history if the next batch continues the same text. A vanilla
# model trains on windows drawn anywhere; Transformer-XL's batches are `batch_size` parallel
# *streams*: the training bytes cut into `batch_size` contiguous pieces, and batch $t$ holds the
# $t$-th segment of each, so row $b$ of batch $t+1$ continues row $b$ of batch $t$. Each epoch
# starts every stream at a seeded offset (the segment boundaries move) and without memory.
#
# The memory is training state, like Adam's moments: it was made by the weights of the
# previous step, which no longer exist, so it cannot be recomputed after a crash. The task hands
# it to the runner (`Task.stream`), which saves it in `last.pt`; a killed run resumes with the
# memory it had, to the same losses as an uninterrupted run (a unit test stops a run and
# compares).

# %%
show_source(stream_segments, segment_loss)

# %% [markdown]
# A small check of the streams: three streams over the bytes 0..99, segments of 4. Row 0 of
# the second batch continues row 0 of the first.

# %%
toy = torch.arange(100, dtype=torch.uint8)
first, second = stream_segments(toy, batch_size=3, seg_len=4)[:2]
print("batch 0 inputs:\n", first.x, "\nbatch 1 inputs:\n", second.x)
assert torch.equal(first.y[:, -1], second.x[:, 0])

# %% [markdown]
# Evaluation reads the whole validation split as one stream of segments, each with up to
# `mem_len` remembered states per layer; every byte after the first is scored once, as in
# [chapter 14](14_generation_characters.ipynb)'s bits per byte.

# %%
show_source(segment_bits_per_byte)

# %% [markdown]
# ### Memory length against bits per byte
#
# The experiment: on the enwik8 prefix, the `lm --preset cpu` shape (N = 4, d_model 128, 4
# heads, d_ff 512), once as [chapter 14](14_generation_characters.ipynb)'s 2017 block on 128-byte windows and once as
# Transformer-XL on 128-byte segments with a training memory of 128
# (923,904<!-- record xl-cpu parameters --> parameters against
# 875,264<!-- record e6-cpu parameters -->: each layer's $W_R$, $u$ and $v$ replace the
# position table). The relative attention has no fused kernel here and reads twice as many
# keys, so a Transformer-XL step costs nearly twice the CPU time of a vanilla step (measured
# below). So the XL model trains 1,400<!-- record xl-cpu steps --> steps against the
# vanilla model's 3,000<!-- record e6-cpu steps -->: somewhat less compute. The vanilla
# model is [chapter 14](14_generation_characters.ipynb)'s run, read from its record:
#
# ```
# python -m annotated_transformer lm train --preset cpu --out runs/e6-cpu \
#     --set dataset=enwik8_prefix
# python -m annotated_transformer lm train --preset cpu --out runs/xl-cpu \
#     --set dataset=enwik8_prefix --set block=xl --set steps=1400 --set eval_every=350
# ```

# %%
PRESET = pick("tiny", "cpu")
xl_steps = pick([], ["steps=1400", "eval_every=350"])
xl = ensure_run("lm", PRESET, runs_dir() / f"xl-{PRESET}",
                settings=["dataset=enwik8_prefix", "block=xl", *xl_steps])
vanilla = ensure_run("lm", PRESET, runs_dir() / f"xl-vanilla-{PRESET}",
                     settings=["dataset=enwik8_prefix"])
seg_len = xl.task.config.max_len
# the first 20,000 validation bytes at the tiny size; None: all of them
val_bytes = pick(20_000, None)

# %% [markdown]
# Now the same trained XL model, evaluated with no memory, and with a memory of 1, 2 and 4
# training segments. Without memory each segment starts from scratch, like vanilla windows
# without overlap; a longer memory than training used is allowed because every score depends
# on distances through sinusoids, which exist for any distance.

# %% tags=["nbval-ignore-output"]
rows = []
for factor in (0, 1, 2, 4):
    result = xl.task.bits_per_byte(
        xl.model, "val", val_bytes, mem_len=factor * seg_len
    )
    rows.append(
        {
            "memory (segments)": factor,
            "memory (bytes)": factor * seg_len,
            "bits per byte": result["bits_per_byte"],
        }
    )
sweep = pd.DataFrame(rows)
baselines = pd.DataFrame(
    [
        {
            "vanilla protocol": f"windows of {seg_len}, stride {stride}",
            "bits per byte": vanilla.task.bits_per_byte(
                vanilla.model, "val", val_bytes, stride=stride
            )["bits_per_byte"],
        }
        for stride in (seg_len, seg_len // 2)
    ]
)
sweep

# %% tags=["nbval-ignore-output"]
title = (
    f"Transformer-XL ({xl.metrics['steps']} steps): "
    "bits per byte against the memory"
)
xl_line = (
    alt.Chart(sweep, title=title)
    .mark_line(point=True)
    .encode(
        x=alt.X("memory (bytes):Q", title="memory per layer at evaluation (bytes)"),
        y=alt.Y(
            "bits per byte:Q",
            title="bits per byte (validation)",
            scale=alt.Scale(zero=False),
        ),
        tooltip=["memory (segments)", alt.Tooltip("bits per byte", format=".4f")],
    )
)
vanilla_rules = (
    alt.Chart(baselines)
    .mark_rule(strokeDash=[4, 4])
    .encode(
        y="bits per byte:Q",
        color=alt.Color(
            "vanilla protocol:N", title=f"vanilla, {vanilla.metrics['steps']} steps"
        ),
        tooltip=["vanilla protocol", alt.Tooltip("bits per byte", format=".4f")],
    )
)
(xl_line + vanilla_rules).properties(width=460, height=280)

# %% [markdown]
# What a training step costs each model in CPU time: a forward and backward pass over a few
# of the run's own training batches, on one thread.

# %% tags=["nbval-ignore-output"]
def cpu_seconds_per_step(run, steps: int) -> float:
    """Median CPU seconds of a forward and backward pass over ``steps`` training
    batches of ``run``; its weights and the random state are left as they were."""
    task, model = run.task, run.model
    times = []
    with torch.random.fork_rng():
        model.train()
        for batch in list(task.batches(0))[: steps + 1]:
            start = time.process_time()
            loss, count = task.loss(model, batch)
            (loss / count).backward()
            times.append(time.process_time() - start)
        model.zero_grad(set_to_none=True)
        model.eval()
    return float(np.median(times[1:]))  # the first batch pays for warming up


step_seconds = {
    name: cpu_seconds_per_step(run, pick(3, 20))
    for name, run in (("vanilla (2017 block)", vanilla), ("Transformer-XL", xl))
}
per_step = (f"{name}: {s:.2f} CPU s per step" for name, s in step_seconds.items())
print(", ".join(per_step))

# %% [markdown]
# And the two runs side by side, each at the end of its training, with its CPU cost from
# those per-step times.

# %% tags=["nbval-ignore-output"]


def summary(name: str, run, bpb: float, protocol: str) -> dict:
    steps = run.metrics["steps"]
    return {
        "model": name,
        "parameters": run.metrics["parameters"],
        "steps": steps,
        "CPU seconds (steps × s/step)": steps * step_seconds[name],
        "evaluation": protocol,
        "bits per byte": bpb,
    }


table = pd.DataFrame(
    [
        *(
            summary(
                "vanilla (2017 block)",
                vanilla,
                b["bits per byte"],
                b["vanilla protocol"],
            )
            for b in baselines.to_dict("records")
        ),
        *(
            summary(
                "Transformer-XL",
                xl,
                r["bits per byte"],
                f"memory {r['memory (bytes)']} bytes",
            )
            for r in rows
        ),
    ]
)
table.style.format(
    {"bits per byte": "{:.3f}", "CPU seconds (steps × s/step)": "{:.0f}"}
).hide(axis="index")

# %% [markdown]
# What the runs showed:
#
# * **The memory is worth most of the gain, and one segment of it is enough here.** The same
#   weights score 2.130<!-- record xl-cpu metrics.validation.bits_per_byte --> bits per byte
#   with one segment (128 bytes) of memory, and far worse without it (the table above); two
#   and four segments give about the same as one: a model trained with 128 states of memory
#   uses longer memories without harm (the sinusoids extend to the new distances) but, after
#   1,400 steps on a million bytes, gains nothing from them. Without its memory the XL model
#   is worse than the vanilla model read in the same non-overlapping windows: it was
#   trained with a memory, and for fewer steps.
# * **Against the vanilla model, the verdict depends on how the vanilla model reads.** Read
#   in non-overlapping windows, each byte once as XL reads it but every window starting
#   without context, the vanilla model scores
#   2.166<!-- record e6-cpu metrics.validation.last -->, behind XL's
#   2.130<!-- record xl-cpu metrics.validation.bits_per_byte -->. Read with overlapping
#   windows (stride 64: every byte read twice, and each after the first window predicted from
#   at least 64 bytes of context), it scores
#   2.103<!-- record e6-cpu metrics.validation.bits_per_byte -->, ahead of XL. XL trained on
#   somewhat less CPU time (the table's CPU seconds, from the per-step costs measured
#   above); the overlapping windows cost twice the reading at evaluation. The CPU seconds
#   are the comparison.
# * One seed each, on one small text: the gaps between the two models (a few hundredths of a
#   bit per byte) are small enough that another seed or a longer run could close or reverse
#   them; what the memory is worth within XL, several times more, is not.

# %% [markdown]
# ## Sparse attention at long lengths
#
# Causal self-attention over n positions scores n(n+1)/2 pairs: double the context and the
# work quadruples, and the explicit form also stores an (n, n) matrix per head. The Sparse
# Transformer ([Child et al. 2019](../book/references.md#child-et-al-2019)) lets each position attend to about √n others, chosen so that
# information still flows from every position to every later one in two layers. Two patterns,
# each the union of two masks (i the query, j the key, l the stride, about √n):
#
# - *strided* (for data with a period, such as image rows): **local**, the previous l
#   positions ($0 \le i - j < l$), and **strided**, every l-th position back
#   ($(i - j) \bmod l = 0$);
# - *fixed* (for text): **block**, the earlier positions of i's own block of l
#   ($\lfloor j/l \rfloor = \lfloor i/l \rfloor$), and **summary**, the last c positions of
#   every block ($j \bmod l \ge l - c$).

# %%
import subprocess
import sys

import torch.nn.functional as F

from annotated_transformer.blocks.sparse_attention import (
    SparseSelfAttention,
    attended_pairs,
    fixed_masks,
    fixed_pairs,
    fixed_sparse_attention,
    reaches_all_earlier,
    sparsified,
    strided_masks,
    strided_pairs,
    two_layer_reach,
)

# %% [markdown]
# ### The patterns
#
# Sixteen positions, stride 4, one summary position per block (a row is a query, a column a
# key; colour = may attend):

# %%
n, l, c = 16, 4, 1
local, strided = strided_masks(n, l)
block, summary = fixed_masks(n, l, c)


def pattern_picture(
    mask: torch.Tensor, title: str | list[str], size: int = 150
) -> alt.Chart:
    return viz.heatmap(
        mask.float(),
        title=title,
        x_title="key j",
        y_title="query i",
        value_title="attends",
        domain=(0, 1),
        width=size,
        height=size,
    )


pictures = [  # a row per kind of pattern
    [(local, "strided: local"), (strided, "strided: strided")],
    [(block, "fixed: block"), (summary, "fixed: summary")],
]
rows = [alt.hconcat(*(pattern_picture(m, t) for m, t in row)) for row in pictures]
alt.vconcat(*rows).properties(
    title="The Sparse Transformer's patterns, n = 16, l = 4, c = 1"
)

# %% [markdown]
# ### How many pairs
#
# Query i reads at most l local keys and i/l strided ones; with l ≈ √n that is about 2√n keys,
# n·2√n pairs in all instead of n²/2. The fixed pattern reads its own block and c keys of each
# earlier block, l + c·n/l. Closed forms, checked against the masks at small n, then counted up
# to 16,384:

# %%
for size, stride in ((16, 4), (64, 8), (256, 16)):
    loc, st = strided_masks(size, stride)
    blk, summ = fixed_masks(size, stride, 2)
    assert attended_pairs(loc | st) == strided_pairs(size, stride)
    assert attended_pairs(blk | summ) == fixed_pairs(size, stride, 2)


def root_stride(size: int) -> int:
    """The smallest power of two >= √size (it divides size, a power of two)."""
    return 2 ** int(np.ceil(np.log2(size) / 2))


counts = {
    "dense (causal)": lambda size: size * (size + 1) // 2,
    "strided, l ≈ √n": lambda size: strided_pairs(size, root_stride(size)),
    "fixed, l ≈ √n, c = 4": (
        lambda size: fixed_pairs(size, root_stride(size), 4)
    ),
}
pairs = pd.DataFrame(
    [
        {"n": 2**k, "attention": name, "pairs": count(2**k)}
        for k in range(6, 15)
        for name, count in counts.items()
    ]
)
viz.line_chart(
    pairs,
    "n",
    "pairs",
    "attention",
    title="Attended (query, key) pairs per head against the length",
    x_title="sequence length n",
    y_title="pairs (log scale)",
    log_y=True,
    width=400,
).encode(
    x=alt.X("n:Q", scale=alt.Scale(type="log", base=2), title="sequence length n")
)

# %% [markdown]
# ### Every earlier position in two layers
#
# A layer whose mask is M lets i read j when M[i, j]; two layers, S on top of F, let i read j
# when some k has S[i, k] and F[k, j]: the boolean matrix product. Strided: local then
# strided reaches everything (step back by whole strides, then at most l − 1 locally). Fixed is
# subtler: block then summary misses the earlier positions of i's own block, which is why each
# head attends to the *union* of the two masks; union then union reaches everything.

# %%
reach = {
    "strided: local, then strided": two_layer_reach(local, strided),
    "fixed: block, then summary": two_layer_reach(block, summary),
    "fixed: union, then union": two_layer_reach(block | summary, block | summary),
}
causal = torch.ones(n, n, dtype=torch.bool).tril()
for name, r in reach.items():
    print(
        f"{name:<30} reaches {int(r[causal].sum()):>3} of {int(causal.sum())} "
        "earlier pairs"
    )
assert reaches_all_earlier(local, strided)
assert not reaches_all_earlier(block, summary)
assert reaches_all_earlier(block | summary, block | summary)
# three in a row fit the page with two-line titles and smaller squares
alt.hconcat(
    *(pattern_picture(r, t.split(": "), size=130) for t, r in reach.items())
).properties(
    title="Which keys a query reaches through two layers"
)

# %% [markdown]
# ### Block-sparse, not a masked dense matrix
#
# A dense matrix with a sparse mask saves nothing: the n² scores are still computed and
# stored. The package's kernels cut the sequence into blocks of l. For the fixed pattern each
# query block scores its own block (l × l) and the c summary keys of every block, gathered
# into one short tensor; one softmax runs over both parts. No (n, n) tensor is ever formed
# (a test watches every matrix product), and the result equals dense attention under the
# union mask:

# %%
show_source(fixed_sparse_attention)

# %%
q, k, v = torch.randn(3, 2, 4, 256, 16, dtype=torch.float64)
blk, summ = fixed_masks(256, 16, 2)
dense_out = F.scaled_dot_product_attention(q, k, v, attn_mask=blk | summ)
torch.testing.assert_close(fixed_sparse_attention(q, k, v, 16, 2), dense_out)

# %% [markdown]
# In a model, every head attends under the union of the pattern's two masks (the paper's
# "merged" head), rather than half of the heads under each mask. The kernel computes both
# parts in one softmax anyway; a union head reads everything the two split heads would; and
# with union heads *any* two layers reach every earlier position, whatever their order, where
# split heads need the right mask below the right one. A model's config names this module as its
# attention, with the pattern (`attention=SparseSelfAttention`); `sparsified` builds
# [chapter 15](15_the_transformer_today.ipynb)'s model (or GPT-2's) again that way and keeps its weights; generation
# from a key/value cache scores the few new queries densely under the same mask.

# %%
show_source(SparseSelfAttention.forward, sparsified)

# %% [markdown]
# ### Time and memory, 512 to 8,192 positions
#
# `benchmarks/sparse.py` times one attention call, forward and backward, for four
# implementations at each length in turn (one thread, batch 1, 2 heads of 64): the explicit
# softmax(QKᵀ)V, PyTorch's fused `scaled_dot_product_attention`, and the two block-sparse
# kernels (l the smallest power of two ≥ √n, c = 4); memory is the PyTorch allocator's peak
# during the call. The stored figures are its full run,
# `PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/sparse.py` (n = 512 … 8192).

# %% tags=["nbval-ignore-output"]
PRESET = pick("tiny", "cpu")
bench_csv = runs_dir() / f"sparse-benchmark-{PRESET}.csv"
if PRESET == "tiny" or not bench_csv.is_file():
    bench_csv.parent.mkdir(parents=True, exist_ok=True)
    script = runs_dir().parent / "benchmarks" / "sparse.py"
    lengths = pick("128,256,512", "512,1024,2048,4096,8192")
    command = [
        sys.executable,
        str(script),
        "--lengths",
        lengths,
        "--csv",
        str(bench_csv),
    ]
    subprocess.run(
        [*command, "--repeats", pick("1", "3")], check=True, capture_output=True
    )
bench = pd.read_csv(bench_csv)
bench.pivot(index="n", columns="attention", values=["ms", "MiB"]).round(1)

# %% tags=["nbval-ignore-output"]
log2_x = alt.X(
    "n:Q", scale=alt.Scale(type="log", base=2), title="sequence length n"
)
charts = [
    viz.line_chart(
        bench,
        "n",
        value,
        "attention",
        title=title,
        x_title="sequence length n",
        y_title=y_title,
        log_y=True,
        width=320,
    ).encode(x=log2_x)
    for value, title, y_title in (
        ("ms", "Time of one forward + backward", "milliseconds (log scale)"),
        ("MiB", "Peak memory allocated during it", "MiB (log scale)"),
    )
]
alt.vconcat(*charts)

# %% [markdown]
# Read the slopes on the log-log axes: doubling n multiplies the explicit form's memory by
# about 4 (quadratic) and its time by more; the fused kernel never stores the matrix, so its
# memory grows only linearly, but its time still grows faster than linearly; the
# block-sparse kernels' memory grows at about n√n (which multiplies by 2√2 per doubling), on
# average over the range, and their time more slowly than the fused kernel's (single steps
# are noisy). In the stored run, at 8,192 positions, the
# block-sparse kernels took under a quarter of the fused kernel's time and less than a tenth
# of the explicit form's memory; the fused kernel's memory stays the smallest of all,
# because it recomputes instead of storing.
#
# ### Bits per byte: sparse against dense
#
# The same small model ([chapter 15](15_the_transformer_today.ipynb)'s block: 2 layers, d_model 64, 4 heads) on the enwik8
# prefix with 2,048-byte windows, dense and with the fixed pattern (l = 64, c = 4), the same
# seed, data and steps; scored on the whole validation split with overlapping 2,048-byte
# windows.

# %% tags=["nbval-ignore-output"]
from annotated_transformer.book.runs import BY_NAME

SMALLER = {"max_len": 256, "batch_size": 4, "steps": 60, "eval_every": 30,
           "sparse_stride": 16}


def settings_of(name: str) -> list[str]:
    """The settings of the book's run ``name``; in CI, the smaller version."""
    settings = dict(s.split("=", 1) for s in BY_NAME[name].settings)
    if PRESET == "tiny":
        settings |= {k: str(v) for k, v in SMALLER.items() if k in settings}
    return [f"{key}={value}" for key, value in settings.items()]


lm_runs = {
    name: ensure_run(
        "lm",
        PRESET,
        runs_dir() / f"e8-{name}-{PRESET}",
        settings=settings_of(f"e8-{name}-cpu"),
        fresh=PRESET == "tiny",
    )
    for name in ("dense", "fixed")
}
pd.DataFrame.from_dict(
    {
        name: {
            "context": run.metrics["validation"]["context"],
            "steps": run.metrics["steps"],
            "train seconds": run.metrics["train_seconds"],
            "validation bytes scored": run.metrics["validation"]["bytes_scored"],
            "bits per byte": round(run.metrics["validation"]["bits_per_byte"], 3),
        }
        for name, run in lm_runs.items()
    },
    orient="index",
)

# %% tags=["nbval-ignore-output"]
curves = pd.concat(
    rows_with(run.history, "val_bpb").assign(attention=name)
    for name, run in lm_runs.items()
)
viz.line_chart(
    curves,
    "step",
    "val_bpb",
    "attention",
    title="enwik8 prefix, long windows: dense against fixed sparse attention",
    x_title="training step",
    y_title="validation bits per byte",
)

# %% [markdown]
# In the stored runs (400<!-- record e8-dense-cpu steps --> steps of two 2,048-byte windows, on one CPU core) the fixed
# pattern scored 3.566<!-- record e8-fixed-cpu metrics.validation.bits_per_byte --> bits per byte on the validation split against dense attention's
# 3.806<!-- record e8-dense-cpu metrics.validation.bits_per_byte -->, and trained in 3.6<!-- record e8-fixed-cpu train_minutes --> minutes against 5.6<!-- record e8-dense-cpu train_minutes --> (wall-clock time,
# so only a rough measure of cost). Both models are far from trained
# ([chapter 14](14_generation_characters.ipynb)'s `cpu` model reaches about 2.1<!-- record e6-cpu metrics.validation.bits_per_byte --> bits per byte on this text), so this says only
# that at the start of training the sparse pattern costs nothing: its block mask is a strong
# hint that nearby bytes matter most, which a dense model has yet to learn. Whether it keeps
# up over a long run, where the far context starts to pay, is the paper's claim (0.99<!-- source Child et al. 2019 --> bits per
# byte on enwik8 with 12k-byte contexts), not something these runs measure. The command lines:
#
# ```
# BASE="--set dataset=enwik8_prefix --set block=modern --set N=2 --set d_model=64
#   --set h=4 --set d_ff=256 --set max_len=2048 --set batch_size=2 --set steps=400
#   --set warmup=40 --set eval_every=100 --set eval_bytes=32768"
# python -m annotated_transformer lm train --preset cpu $BASE --out runs/e8-dense-cpu
# python -m annotated_transformer lm train --preset cpu $BASE \
#     --out runs/e8-fixed-cpu --set attention=fixed --set sparse_stride=64 \
#     --set sparse_summary=4
# ```

# %% [markdown]
# ## Summary
#
# You can now
#
# - carry a segment memory with relative positions (Transformer-XL);
# - apply strided and fixed sparse attention patterns and measure their cost.
#
# **Next:** [chapter 19 · Going big](19_going_big.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/18_long_context.py`: fill them in there, then grade them from the
# repository's root with `make exercises CHAPTER=18` (or
# `python -m annotated_transformer.exercises 18`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-18-strided-mask)=
# ### Exercise 18.1 · The strided sparse mask, without loops
#
# Write the strided pattern's mask for one head, local or strided, with tensor
# operations only. The grader compares it with the definition, pair by pair, for several
# lengths and strides, stride 1 and stride $= n$ among them.
#
# Write `strided_mask(n, stride)`; grade with `make exercises CHAPTER=18`.
#
# :::{dropdown} Solution
# ```python
# def strided_mask(n: int, stride: int) -> Tensor:
#     """The strided pattern in one head, bool (n, n), True = may attend.
#
#     Query i reads the previous ``stride`` positions (itself included) and
#     every position a whole number of strides back.
#     """
#     i = torch.arange(n)[:, None]
#     j = torch.arange(n)[None, :]
#     back = i - j  # how far back key j is from query i
#     return (back >= 0) & ((back < stride) | (back % stride == 0))
# ```
# :::

# %% [markdown]
# (ex-18-rel-shift)=
# ### Exercise 18.2 · The relative shift
#
# Write `rel_shift` your own way: with a gather and an index built from $i$ and $j$, or
# with the pad-and-reshape trick of this chapter from memory. Only the entries of
# visible keys matter. The grader checks each of them for segments with and without
# memory.
#
# Write `rel_shift(x)`; grade with `make exercises CHAPTER=18`.
#
# :::{dropdown} Solution
# ```python
# def rel_shift(x: Tensor) -> Tensor:
#     """Scores against distances -> scores against keys (Transformer-XL).
#
#     x: (..., qlen, klen), column t = distance klen − 1 − t
#     returns (..., qlen, klen), out[..., i, j] = x[..., i, j + qlen − 1 − i]
#     wherever j ≤ klen − qlen + i (the rest is left over, hidden by the mask)
#     """
#     *lead, qlen, klen = x.shape
#     padded = F.pad(x, (1, 0))  # a zero column in front: (..., qlen, klen + 1)
#     tall = padded.reshape(*lead, klen + 1, qlen)  # the same numbers, reread
#     # less its first row, read as (qlen, klen): row i moved qlen − 1 − i left
#     return tall[..., 1:, :].reshape(*lead, qlen, klen)
# ```
# :::

# %% [markdown]
# (ex-18-relative-bias)=
# ### Exercise 18.3 · A learned relative-position bias
#
# Transformer-XL scores distances through sinusoids and projections. T5 learns one
# number per head and distance instead and adds it to the scores, distances from $D$ on
# sharing one entry (T5 groups them in logarithmic buckets; here they are simply
# clipped). Write that bias for a causal model: `table[h, min(i − j, D)]` on the visible
# keys, $-\infty$ on the future.
#
# Write `relative_bias(table, n)`; grade with `make exercises CHAPTER=18`.
#
# :::{dropdown} Solution
# ```python
# def relative_bias(table: Tensor, n: int) -> Tensor:
#     """A learned bias per head and distance, causal.
#
#     table: (H, D + 1). returns (H, n, n),
#     out[h, i, j] = table[h, min(i − j, D)] for j ≤ i and −inf for j > i
#     """
#     i = torch.arange(n)[:, None]
#     j = torch.arange(n)[None, :]
#     distance = (i - j).clamp(0, table.size(1) - 1)  # (n, n)
#     return table[:, distance].masked_fill(j > i, float("-inf"))
# ```
# :::

# %% [markdown]
# (ex-18-memory)=
# ### Exercise 18.4 · Transformer-XL's memory
#
# Write the memory that each block hands to the next segment: the last `mem_len` states
# of the old memory followed by this segment's, cut from the autograd graph. The first
# segment has no memory yet.
#
# Write `update_memory(memory, hidden, mem_len)`; grade with `make exercises
# CHAPTER=18`.
#
# :::{dropdown} Solution
# ```python
# def update_memory(
#     memory: Tensor | None,
#     hidden: Tensor,
#     mem_len: int,
# ) -> Tensor:
#     """Transformer-XL's memory for the next segment.
#
#     memory: (b, m, d), or None for the first segment; hidden: (b, n, d)
#     returns the last mem_len states of [memory; hidden] along the positions,
#     (b, min(mem_len, m + n), d), cut from the autograd graph
#     """
#     states = hidden if memory is None else torch.cat([memory, hidden], dim=1)
#     return states[:, -mem_len:].detach()
# ```
# :::
