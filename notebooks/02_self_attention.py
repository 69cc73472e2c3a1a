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
# # 02 · Self-attention from scratch
#
# - **You will learn** self-attention built up from no parameters to queries, keys and values, why scores are divided by √d_k, and multi-head attention as one batched product.
# - **It assumes** [chapter 01](01_from_rnns_to_attention.ipynb).
# - **Time:** about 15 minutes to read; it runs in under a minute.
#
# [Chapter 01](01_from_rnns_to_attention.ipynb) arrived at attention from translation. This chapter builds it again from the
# ground up, as a sequence-to-sequence operation on its own, following the progression of
# Peter Bloem's blog post *Transformers from scratch* (2019): first the simplest possible
# self-attention, with no parameters at all; then queries, keys and values; then the scaling by
# $\sqrt{d_k}$ — with a measurement of why it is needed; then multiple heads, and the reshaping
# trick that computes all heads in one batched matrix product. At each step we prove that the
# derivation computes the same numbers as the package, and at the end that the package agrees
# with PyTorch's own `scaled_dot_product_attention` and `nn.MultiheadAttention` (Vaswani et al.,
# 2017, §3.2).

# %%
import math

import altair as alt
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.blocks.attention import (
    CachedAttention,
    MultiHeadedAttention,
    attention,
)
from annotated_transformer.book import explore, viz
from annotated_transformer.book.source import show_source

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# ## Basic self-attention
#
# Self-attention maps a sequence of $t$ input vectors $x_1, \dots, x_t$ (each of width $k$) to
# a sequence of $t$ output vectors $y_1, \dots, y_t$ of the same width. Each output is a
# weighted average of **all** the inputs,
#
# $$y_i = \sum_j w_{ij}\, x_j,$$
#
# and in its most basic form the weights are not learned parameters but computed from the
# inputs themselves: the dot product of $x_i$ with $x_j$, made positive and normalised over
# $j$ by a softmax,
#
# $$w'_{ij} = x_i^\top x_j, \qquad w_{ij} = \frac{\exp w'_{ij}}{\sum_{j'} \exp w'_{ij'}}.$$
#
# It is the only place in a Transformer where vectors at different positions exchange
# information; everything else (the feed-forward layers, the normalisation) acts on each
# position separately.
#
# In PyTorch, with a batch of $b$ sequences held as a tensor of shape $(b, t, k)$, all the dot
# products are one batched matrix product `torch.bmm(x, xᵀ)`, and all the weighted sums are
# another:

# %%
b, t, k = 2, 5, 4
x = torch.randn(b, t, k)  # (batch, t, k)

raw_weights = torch.bmm(x, x.transpose(1, 2))  # (b, t, t): w'_ij = x_i · x_j
# normalise over j, the positions we look at
weights = F.softmax(raw_weights, dim=2)
y = torch.bmm(weights, x)  # (b, t, k): y_i = Σ_j w_ij x_j
print("x", tuple(x.shape), "weights", tuple(weights.shape), "y", tuple(y.shape))

# %% [markdown]
# The two `bmm` calls are just the two sums written for all $i$ and $j$ at once. A double loop
# straight from the formula gives the same numbers:

# %%
y_loop = torch.zeros_like(x)
for batch in range(b):
    for i in range(t):
        w = torch.stack([x[batch, i] @ x[batch, j] for j in range(t)]).softmax(0)
        y_loop[batch, i] = sum(w[j] * x[batch, j] for j in range(t))
torch.testing.assert_close(y, y_loop)
print("bmm version == the formula, position by position")

# %% [markdown]
# ### Why a dot product?
#
# A dot product is large when two vectors point the same way, near zero when they have
# nothing in common, and negative when they disagree. Bloem's illustration is a recommender:
# describe every film by a few features (how romantic, how much action, how funny) and every
# user by how much they like each feature. The dot product of a user with a film adds up the
# matches and subtracts the mismatches, so it is a score of how well they fit.

# %%
features = ["romance", "action", "comedy"]
films = pd.DataFrame(
    [[0.9, 0.1, 0.3], [0.0, 1.0, 0.2], [0.2, 0.3, 1.0]],
    index=["Love Letters", "Car Chase 3", "Slapstick Inc."],
    columns=features,
)
users = pd.DataFrame(
    [[1.0, -0.5, 0.2], [-0.3, 1.0, 0.4]],
    index=["Ana (likes romance, not action)", "Ben (likes action)"],
    columns=features,
)
match = torch.tensor(users.values) @ torch.tensor(films.values).T  # (users, films)
print(pd.DataFrame(match.numpy(), index=users.index, columns=films.index).round(2))

# %% [markdown]
# In self-attention the "features" are the dimensions of the word vectors, and they are not
# designed by hand but learned: training moves the embeddings of words that should inform each
# other to have large dot products. With hand-made four-feature vectors for a short sentence we
# can see the mechanism work. Every word matches itself well (a vector's dot product with
# itself is its squared length), but beyond that, *it* looks at *cat*, the animal it refers to,
# the verbs and the adjective look at each other, and the grammar words look at grammar words.

# %%
# features:        animal, thing/place, action/state, grammar word
sentence = ["the", "cat", "sat", "on", "the", "mat"]
sentence += ["because", "it", "was", "tired"]
feature_of = {
    "the": [0.0, 0.0, 0.0, 1.0],
    "cat": [1.0, 0.2, 0.0, 0.0],
    "sat": [0.4, 0.0, 1.0, 0.0],
    "on": [0.0, 0.6, 0.0, 0.8],
    "mat": [0.0, 1.0, 0.0, 0.0],
    "because": [0.0, 0.0, 0.2, 1.0],
    "it": [1.0, 0.0, 0.0, 0.3],
    "was": [0.0, 0.0, 1.0, 0.4],
    "tired": [0.6, 0.0, 0.8, 0.0],
}
# (t, 4); ×3 sharpens the softmax
words = 3.0 * torch.tensor([feature_of[w] for w in sentence])
_, sentence_weights = attention(words, words, words)  # Q = K = V = the word vectors
print(
    sentence_weights.shape,
    "rows sum to",
    sentence_weights.sum(-1).round(decimals=3).unique(),
)

# %%
viz.heatmap(
    sentence_weights.round(decimals=3),
    x_labels=sentence,
    y_labels=sentence,
    title="Self-attention weights over a sentence (hand-made word vectors)",
    x_title="key: the word looked at",
    y_title="query: the word being updated",
    value_title="weight",
    domain=(0, 1),
    width=340,
    height=300,
)

# %% [markdown]
# ## Queries, keys and values
#
# In basic self-attention each input vector plays three roles:
#
# * as a **query**, it is compared with every other vector to set the weights of its own output;
# * as a **key**, it is compared with the query of every other vector to set that output's weights;
# * as a **value**, it is summed into the outputs.
#
# Using the same vector for all three is a strong restriction (for one, $w'_{ij} = w'_{ji}$:
# attention is symmetric). Giving each role its own learned linear map — three $k \times k$
# matrices $W^Q, W^K, W^V$ — lets the model decide what a word looks for, what it offers to be
# found by, and what it passes on:
#
# $$q_i = W^Q x_i, \quad k_i = W^K x_i, \quad v_i = W^V x_i, \qquad
#   w'_{ij} = q_i^\top k_j, \quad y_i = \sum_j w_{ij} v_j .$$
#
# These three maps are the only parameters self-attention has.

# %% [markdown]
# ![Data flow: x of shape (b, t, k) goes through three linear maps, to_queries, to_keys and to_values, giving queries, keys and values of shape (b, t, k). Queries times keys transposed gives raw_weights (b, t, t); a softmax over the keys gives weights; weights times values gives the output y of shape (b, t, k).](figures/02_qkv_flow.svg)
#
# *Queries, keys and values as a data flow, with the names this chapter's code
# uses.*

# %%
torch.manual_seed(1)
to_queries, to_keys, to_values = (nn.Linear(k, k, bias=False) for _ in range(3))
queries, keys, values = to_queries(x), to_keys(x), to_values(x)  # each (b, t, k)
# (b, t, t): no longer symmetric
raw_weights = torch.bmm(queries, keys.transpose(1, 2))
weights = F.softmax(raw_weights, dim=2)
y = torch.bmm(weights, values)  # (b, t, k)
print(
    "y",
    tuple(y.shape),
    "| symmetric weights?",
    torch.allclose(raw_weights, raw_weights.mT),
)

# %% [markdown]
# ## Why scale the dot product by √d_k
#
# The Transformer paper divides the raw weights by $\sqrt{d_k}$, the width of the queries and
# keys, and explains: "We suspect that for large values of $d_k$, the dot products grow large
# in magnitude, pushing the softmax function into regions where it has extremely small
# gradients." Here is the variance argument behind that sentence. If the components of $q$ and
# $k$ are independent with mean 0 and variance 1, each product $q_m k_m$ has mean 0 and
# variance 1, and the dot product is a sum of $d_k$ of them:
#
# $$\operatorname{Var}(q^\top k) = \sum_{m=1}^{d_k} \operatorname{Var}(q_m k_m) = d_k,
# \qquad \operatorname{Var}\!\left(\frac{q^\top k}{\sqrt{d_k}}\right) = 1.$$
#
# So the typical raw score grows like $\sqrt{d_k}$, and dividing by $\sqrt{d_k}$ brings it back
# to a size that does not depend on the width. Numerically, with 20,000 random pairs per width:

# %%
widths = [4, 8, 16, 32, 64, 128, 256, 512, 1024]
generator = torch.Generator().manual_seed(2)
rows = []
for d_k in widths:
    qs = torch.randn(20_000, d_k, generator=generator)
    ks = torch.randn(20_000, d_k, generator=generator)
    dots = (qs * ks).sum(dim=-1)  # 20,000 dot products
    rows.append(
        {
            "d_k": d_k,
            "Var(q·k)": dots.var().item(),
            "Var(q·k/√d_k)": (dots / math.sqrt(d_k)).var().item(),
        }
    )
print(pd.DataFrame(rows).round(2).to_string(index=False))

# %% [markdown]
# What large scores do to the softmax: it becomes nearly one-hot, putting almost all weight on
# the largest score, and a saturated softmax passes almost no gradient back to the scores (its
# Jacobian, $\operatorname{diag}(p) - pp^\top$, tends to zero as $p$ tends to a one-hot vector).
# Below, for each width, 500 random queries each attend over 32 random keys; we record the
# largest attention weight and the size of the gradient that flows back into the scores for a
# random upstream gradient, with and without the scaling.

# %%
generator = torch.Generator().manual_seed(3)
rows = []
for d_k in widths:
    qs = torch.randn(500, 1, d_k, generator=generator)  # 500 queries
    ks = torch.randn(500, 32, d_k, generator=generator)  # 32 keys for each
    upstream = torch.randn(500, 1, 32, generator=generator)
    for scaled in (False, True):
        scores = (qs @ ks.mT / (math.sqrt(d_k) if scaled else 1.0)).requires_grad_()
        p = scores.softmax(dim=-1)  # (500, 1, 32)
        (p * upstream).sum().backward()
        rows.append(
            {
                "d_k": d_k,
                "scores": "divided by √d_k" if scaled else "raw q·k",
                "largest weight": p.max(dim=-1).values.mean().item(),
                "gradient norm": scores.grad.norm(dim=-1).mean().item(),
            }
        )
saturation = pd.DataFrame(rows).round(4)
print(saturation.pivot(index="d_k", columns="scores").round(3))

# %%
base = alt.Chart(saturation).encode(
    x=alt.X(
        "d_k:Q",
        title="key/query width d_k (log scale)",
        scale=alt.Scale(type="log", base=2),
    ),
    color=alt.Color("scores:N", title="scores"),
    tooltip=["d_k", "scores", "largest weight", "gradient norm"],
)
largest = base.mark_line(point=True).encode(
    y=alt.Y(
        "largest weight:Q",
        title="mean largest softmax weight",
        scale=alt.Scale(domain=[0, 1]),
    )
)
gradient = base.mark_line(point=True).encode(
    y=alt.Y(
        "gradient norm:Q",
        title="mean gradient norm at the scores",
        scale=alt.Scale(type="log"),
    )
)
alt.hconcat(
    largest.properties(
        title="Unscaled scores saturate the softmax", width=200, height=200
    ),
    gradient.properties(
        title="…and its gradient vanishes", width=200, height=200
    ),
).configure_legend(orient="bottom")

# %% [markdown]
# **Explore.** Dividing the scores by a number is a *temperature*: the softmax of $s / T$.
# The scaling above is $T = \sqrt{d_k}$. Move the slider over the scores of one query for
# eight keys: a low temperature (large scores) puts nearly all the weight on one key, a high
# one spreads it evenly. (The chart holds the softmax at every temperature offered, so the
# slider works on the page without a kernel.)

# %%
scores = torch.randn(8, generator=torch.Generator().manual_seed(1)) * 2
explore.distribution_explorer(
    scores,
    [f"key {j + 1}" for j in range(8)],
    title="softmax(scores / T) for one query",
    x_title="key",
)

# %% [markdown]
# With raw dot products, by $d_k = 64$ (the paper's head width) the softmax already puts most of
# its weight on one key, and the gradient reaching the scores keeps shrinking as $d_k$ grows, so
# the queries and keys learn ever more slowly. With the scaling, both stay flat whatever the
# width: each query spreads its attention the same way at $d_k = 4$ and at $d_k = 1024$. The package's `attention` is exactly this
# scaled form, with an optional mask and dropout:

# %%
show_source(attention)

# %%
out, package_weights = attention(queries, keys, values)
scaled = F.softmax(torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(k), dim=2)
torch.testing.assert_close(package_weights, scaled)
torch.testing.assert_close(out, torch.bmm(scaled, values))
print(
    "bmm derivation with 1/√d_k == "
    "annotated_transformer.blocks.attention.attention"
)

# %% [markdown]
# ## Multi-head attention
#
# One set of attention weights expresses one kind of relation at a time. In *the chef handed
# the knife to the apprentice*, the word *handed* relates to who handed, what was handed and to
# whom; one weighted average blurs these together. Multi-head attention runs $h$ self-attentions side by side, each with
# its own $W_i^Q, W_i^K, W_i^V$, concatenates their outputs and mixes them with one more linear
# map $W^O$ (Vaswani et al., §3.2.2):
#
# $$\mathrm{MultiHead}(X) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\,W^O,
# \qquad \mathrm{head}_i = \mathrm{Attention}(XW_i^Q, XW_i^K, XW_i^V).$$
#
# To keep the cost of $h$ heads the same as one, each head works on $d_k = d_\text{model}/h$
# features (Bloem calls this *narrow* self-attention; the paper uses $h = 8$ heads of
# $d_k = 64$ for $d_\text{model} = 512$). Here is the package's class; we then derive what it
# computes in three ways and check each against it, using its own weights.

# %% [markdown]
# ![Seven tensor shapes, top to bottom, with the feature axis coloured by head: x (2, 6, 16); linears[0] keeps (2, 6, 16); view gives (2, 6, 4, 4); transpose(1, 2) gives (2, 4, 6, 4), four separate slabs, one per head; attention keeps (2, 4, 6, 4) with weights (2, 4, 6, 6); transpose and reshape merge the heads back into (2, 6, 16); linears[3] gives (2, 6, 16).](figures/02_multihead_shapes.svg)
#
# *How `MultiHeadedAttention` splits $d_\text{model}$ into $h$ heads of $d_k$
# features and merges them again, with the sizes of the example below (batch 2, t
# 6, d_model 16, h 4).*

# %%
show_source(MultiHeadedAttention)

# %%
torch.manual_seed(4)
batch, t, d_model, h = 2, 6, 16, 4
d_k = d_model // h
mha = MultiHeadedAttention(h, d_model, dropout=0.0).eval()
x = torch.randn(batch, t, d_model)  # (batch, t, d_model)
with torch.no_grad():
    expected = mha(x, x, x)  # the package: (batch, t, d_model)
# each nn.Linear(d_model, d_model); head i owns d_k rows
W_q, W_k, W_v, W_o = mha.linears
print("package output", tuple(expected.shape), "| d_k per head:", d_k)

# %% [markdown]
# ### Version 1: a loop over heads
#
# Head $i$'s projection $W_i^Q$ is the $i$-th block of $d_k$ rows of the big $W^Q$ (and
# likewise for keys and values). The most literal implementation slices out each head's
# weights, runs attention, and concatenates:

# %%
with torch.no_grad():
    head_outputs = []
    for i in range(h):
        rows_i = slice(i * d_k, (i + 1) * d_k)
        q_i = F.linear(x, W_q.weight[rows_i], W_q.bias[rows_i])  # (batch, t, d_k)
        k_i = F.linear(x, W_k.weight[rows_i], W_k.bias[rows_i])
        v_i = F.linear(x, W_v.weight[rows_i], W_v.bias[rows_i])
        w_i = F.softmax(q_i @ k_i.mT / math.sqrt(d_k), dim=-1)  # (batch, t, t)
        head_outputs.append(w_i @ v_i)  # (batch, t, d_k)
    # (batch, t, h * d_k) -> (batch, t, d_model)
    looped = W_o(torch.cat(head_outputs, dim=-1))
torch.testing.assert_close(looped, expected)
print("loop over heads == MultiHeadedAttention")

# %% [markdown]
# ### Version 2: fold the heads into the batch
#
# The loop runs $h$ small matrix products one after another. Since the heads never interact
# until the final $W^O$, they can be computed together: project with the full $W^Q$ once
# (all heads at once), cut the $d_\text{model}$ features into $h$ groups of $d_k$ with a `view`,
# move the head axis next to the batch axis, and treat (batch × heads) as one big batch for
# `bmm`. Then undo the reshaping and concatenate the heads by viewing them side by side again.

# %%
with torch.no_grad():
    # (batch, t, h, d_k): cut features into heads
    qh = W_q(x).view(batch, t, h, d_k)
    kh = W_k(x).view(batch, t, h, d_k)
    vh = W_v(x).view(batch, t, h, d_k)
    # (batch, t, h, d_k) -> (batch, h, t, d_k) -> (batch * h, t, d_k): heads
    # become batch rows
    qh, kh, vh = (
        z.transpose(1, 2).reshape(batch * h, t, d_k) for z in (qh, kh, vh)
    )
    # (batch*h, t, t)
    w = F.softmax(torch.bmm(qh, kh.transpose(1, 2)) / math.sqrt(d_k), dim=2)
    heads = torch.bmm(w, vh).view(batch, h, t, d_k)  # (batch, h, t, d_k)
    # concat heads, mix
    folded = W_o(heads.transpose(1, 2).reshape(batch, t, h * d_k))
print("scores for all heads in one bmm:", tuple(w.shape))
torch.testing.assert_close(folded, expected)
print("heads folded into the batch == MultiHeadedAttention")

# %% [markdown]
# The package does the same with one difference: it keeps the head axis separate, as
# `(batch, h, t, d_k)`, because `@` (and PyTorch's fused attention kernel) broadcast over any
# number of leading axes, so no flattening into `batch * h` is needed.
#
# ### Version 3: einsum
#
# `torch.einsum` states the same contractions by naming the axes: `b` batch, `h` head,
# `i` query position, `j` key position, `d` feature within a head. The score of query $i$ with
# key $j$ sums over `d`; the output of query $i$ sums over `j`. No transposes to get right.

# %%
with torch.no_grad():
    qh = W_q(x).view(batch, t, h, d_k)  # (b, i, h, d)
    kh = W_k(x).view(batch, t, h, d_k)  # (b, j, h, d)
    vh = W_v(x).view(batch, t, h, d_k)  # (b, j, h, d)
    # (b, h, i, j)
    scores = torch.einsum("bihd,bjhd->bhij", qh, kh) / math.sqrt(d_k)
    w = scores.softmax(dim=-1)
    heads = torch.einsum("bhij,bjhd->bihd", w, vh)  # (b, i, h, d)
    # (b, i, h·d): heads side by side
    via_einsum = W_o(heads.reshape(batch, t, d_model))
torch.testing.assert_close(via_einsum, expected)
print("einsum version == MultiHeadedAttention")

# %% [markdown]
# ## The explicit path and the fused path
#
# `MultiHeadedAttention` is the explicit path: it calls `attention` and keeps the weights in
# `.attn`, shaped `(batch, h, q_len, k_len)`. The models the runner trains use its subclass
# `CachedAttention` (same weights; chapter 09 gives it a cache), which by default calls
# `torch.nn.functional.scaled_dot_product_attention` (SDPA), a fused kernel that never stores
# the $(t \times t)$ weight matrix for every head and is faster and lighter on memory for long
# sequences (see `benchmarks/attention.py`); setting `keep_attention = True` switches it to the
# explicit path. Both paths must agree — here with a look-ahead mask (True = may attend), so
# that position $i$ sees only positions $\le i$:

# %%
causal = torch.tril(torch.ones(t, t, dtype=torch.bool))[None]  # (1, q_len, k_len)
fast = CachedAttention(h, d_model, dropout=0.0).eval()
fast.load_state_dict(mha.state_dict())  # the same weights
with torch.no_grad():
    fused = fast(x, x, x, mask=causal)
    print("fused path keeps no weights:", fast.attn)
    explicit = mha(x, x, x, mask=causal)
    print("explicit path keeps weights:", tuple(mha.attn.shape))
torch.testing.assert_close(explicit, fused)
assert torch.all(mha.attn[..., ~causal[0]] == 0), "a masked (future) key got weight"
print("explicit == fused; every future position has weight exactly 0")

# %% [markdown]
# The kept weights of the four heads over the first example's six positions: every row sums to
# one, and everything above the diagonal (the future) is zero.

# %%
positions = [f"t={i}" for i in range(t)]
maps = [
    viz.heatmap(
        mha.attn[0, head].round(decimals=3),
        positions,
        positions,
        title=f"head {head}",
        x_title="key position",
        y_title="query position",
        value_title="weight",
        domain=(0, 1),
        width=160,
        height=160,
    )
    for head in range(h)
]
alt.vconcat(alt.hconcat(*maps[:2]), alt.hconcat(*maps[2:])).properties(
    title="Causal self-attention weights kept in .attn (random weights, seeded)"
)

# %% [markdown]
# ## Agreement with PyTorch
#
# Finally, two independent references. First, PyTorch's `F.scaled_dot_product_attention`
# against the package's explicit `attention`, on per-head queries, keys and values. SDPA's
# boolean masks use the package's convention: **True = may attend**.

# %%
torch.manual_seed(5)
qh, kh, vh = (torch.randn(batch, h, t, d_k) for _ in range(3))  # (batch, h, t, d_k)
# 2nd sequence: 2 padded keys
pad = torch.tensor([[True] * t, [True] * (t - 2) + [False] * 2])
# (batch, 1, q_len, k_len), True = may attend
mask = pad[:, None, None, :] & causal[None]
ours, _ = attention(qh, kh, vh, mask=mask)
torch.testing.assert_close(
    ours, F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
)
print("attention == F.scaled_dot_product_attention (same mask, True = may attend)")

# %% [markdown]
# Second, `torch.nn.MultiheadAttention`, a whole multi-head layer written independently of
# ours. It stores $W^Q, W^K, W^V$ stacked in one `in_proj_weight` of shape
# $(3 d_\text{model}, d_\text{model})$ and $W^O$ as `out_proj`; copying our four linears into
# it makes the two layers compute the same function. One trap: its boolean masks mean the
# **opposite** — in `attn_mask` and `key_padding_mask`, **True = blocked** — so we pass the
# negation of ours.

# %%
torch_mha = nn.MultiheadAttention(d_model, h, dropout=0.0, batch_first=True).eval()
with torch.no_grad():
    torch_mha.in_proj_weight.copy_(torch.cat([W_q.weight, W_k.weight, W_v.weight]))
    torch_mha.in_proj_bias.copy_(torch.cat([W_q.bias, W_k.bias, W_v.bias]))
    torch_mha.out_proj.weight.copy_(W_o.weight)
    torch_mha.out_proj.bias.copy_(W_o.bias)

    reference, _ = torch_mha(
        x, x, x, attn_mask=~causal[0], key_padding_mask=~pad, need_weights=False
    )  # True = blocked
    ours_mask = pad[:, None, :] & causal  # (batch, q_len, k_len), True = may attend
    for module in (mha, fast):
        torch.testing.assert_close(module(x, x, x, mask=ours_mask), reference)
print("MultiHeadedAttention (explicit and fused) == torch.nn.MultiheadAttention")

# %% [markdown]
# ## Summary
#
# * Basic self-attention is two batched matrix products and a softmax: each output is an
#   average of the inputs, weighted by dot-product similarity.
# * Queries, keys and values give each of the three roles its own learned projection.
# * Dot products of $d_k$-wide vectors have variance $d_k$; without dividing by $\sqrt{d_k}$
#   the softmax saturates and its gradient vanishes as $d_k$ grows.
# * Multi-head attention runs $h$ narrow attentions at the cost of one; folding the heads into
#   the batch (or naming axes with einsum) computes them all at once.
# * The package's `MultiHeadedAttention` equals each derivation, PyTorch's SDPA and
#   `nn.MultiheadAttention` — mind the mask convention: ours and SDPA's True = may attend,
#   `nn.MultiheadAttention`'s True = blocked.
#
# You can now
#
# - derive self-attention from a loop to one batched matrix product;
# - explain, with a measurement, why the scores are divided by √d_k;
# - check an attention implementation against PyTorch's, mask convention included.
#
# **Next:** [chapter 03 · Tokens and embeddings](03_tokens_and_embeddings.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/02_self_attention.py`: fill them in there, then grade them from
# the repository's root with `make exercises CHAPTER=02` (or
# `python -m annotated_transformer.exercises 02`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-02-split-heads)=
# ### Exercise 2.1 · Fold the heads into their own axis
#
# Version 2 of multi-head attention folds the heads into the batch. Write the first step
# as a function: turn $(\text{batch}, \text{len}, d_\text{model})$ into
# $(\text{batch}, h, \text{len}, d_k)$, head $i$ getting features
# $i d_k, \dots, (i+1) d_k - 1$ of every position. The grader compares with a triple
# loop.
#
# Write `split_heads(x, h)`; grade with `make exercises CHAPTER=02`.
#
# :::{dropdown} Solution
# ```python
# def split_heads(x: Tensor, h: int) -> Tensor:
#     """Fold the heads into their own axis.
#
#     x: (batch, len, d_model); h heads of d_k = d_model / h features each
#     returns (batch, h, len, d_k): [b, i, t] is head i's block of x[b, t],
#     features i·d_k .. (i+1)·d_k
#     """
#     batch, length, d_model = x.shape
#     return x.view(batch, length, h, d_model // h).transpose(1, 2)
# ```
# :::

# %% [markdown]
# (ex-02-einsum-attention)=
# ### Exercise 2.2 · Attention with einsum and a mask
#
# Write scaled dot-product attention for per-head tensors with two `torch.einsum` calls
# (no `@`, no `transpose`) and a boolean mask, True = may attend. The grader compares
# with `F.scaled_dot_product_attention` under a padding-and-look-ahead mask.
#
# Write `einsum_attention(q, k, v, mask)`; grade with `make exercises CHAPTER=02`.
#
# :::{dropdown} Solution
# ```python
# def einsum_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
#     """Scaled dot-product attention with two einsums and a boolean mask.
#
#     q: (batch, h, q_len, d_k); k: (batch, h, k_len, d_k);
#     v: (batch, h, k_len, d_v)
#     mask: bool, broadcastable to (batch, h, q_len, k_len); True = may attend
#     returns (batch, h, q_len, d_v)
#     """
#     scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.size(-1) ** 0.5
#     weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
#     return torch.einsum("bhqk,bhkd->bhqd", weights, v)
# ```
# :::

# %% [markdown]
# (ex-02-attention-entropy)=
# ### Exercise 2.3 · How peaked is the attention? Its entropy
#
# The entropy $H = -\sum_j w_j \log w_j$ of a row of attention weights measures how
# spread out it is: $\log n$ for uniform weights over $n$ keys, 0 when all weight is on
# one key. Compute it for every row, treating masked keys (weight exactly 0) correctly.
# Then, for yourself: compute the entropies of `softmax(q·k)` and
# `softmax(q·k/√d_k)` for random vectors with $d_k = 512$, and see the saturation this
# chapter describes.
#
# Write `attention_entropy(weights)`; grade with `make exercises CHAPTER=02`.
#
# :::{dropdown} Solution
# ```python
# def attention_entropy(weights: Tensor) -> Tensor:
#     """The entropy of each row of attention weights, in nats.
#
#     weights: (..., k_len), rows summing to 1, zeros allowed (masked keys)
#     returns (...): H = -Σ_j w_j log w_j, with 0 · log 0 = 0
#     """
#     return -torch.xlogy(weights, weights).sum(dim=-1)
# ```
# :::

# %% [markdown]
# (ex-02-causal-attention-loop)=
# ### Exercise 2.4 · Causal attention, one query at a time
#
# The look-ahead mask of chapter 06 in its most literal form: compute causal attention
# with a Python loop, query $i$ attending only to keys $0..i$, without building any
# mask. The grader compares with `F.scaled_dot_product_attention(..., is_causal=True)`.
#
# Write `causal_attention_loop(q, k, v)`; grade with `make exercises CHAPTER=02`.
#
# :::{dropdown} Solution
# ```python
# def causal_attention_loop(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
#     """Causal attention one query at a time: position i attends to keys 0..i.
#
#     q, k: (len, d_k); v: (len, d_v) -> (len, d_v)
#     """
#     rows = []
#     for i in range(q.size(0)):
#         scores = k[: i + 1] @ q[i] / q.size(-1) ** 0.5  # (i + 1,)
#         rows.append(scores.softmax(dim=0) @ v[: i + 1])
#     return torch.stack(rows)
# ```
# :::
