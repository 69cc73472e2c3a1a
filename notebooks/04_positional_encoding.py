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
# # 04 · Positional encoding
#
# - **You will learn** why attention needs positions, the path from the integer index to the paper's sinusoids, and why a shift by k positions is a rotation.
# - **It assumes** [chapter 01](01_from_rnns_to_attention.ipynb) and [chapter 03](03_tokens_and_embeddings.ipynb).
# - **Time:** about 15 minutes to read; it runs in under a minute.
#
# "Since our model contains no recurrence and no convolution, in order for the model to make
# use of the order of the sequence, we must inject some information about the relative or
# absolute position of the tokens in the sequence." ([Vaswani et al. 2017](../book/references.md#vaswani-et-al-2017), §3.5)
#
# This chapter first shows *why* (attention alone cannot tell word order), then walks through
# the ideas that lead to the paper's answer, each with the problem that makes it fall short:
# the integer index, the index scaled to $[0, 1]$, binary vectors, sinusoids, and finally
# sin/cos pairs. Then the sinusoidal encoding itself: what it looks like, why a shift by $k$
# positions is a fixed rotation, the package's code checked against the formula, the learned
# alternative, and what happens beyond the longest sequence seen in training.

# %%
import math
import textwrap

import pandas as pd
import torch
from torch import nn

from annotated_transformer.blocks.attention import attention
from annotated_transformer.blocks.embeddings import Embeddings
from annotated_transformer.blocks.positional import (
    PositionalEmbedding,
    PositionalEncoding,
    check_positions,
    sinusoids,
)
from annotated_transformer.book import explore, viz
from annotated_transformer.book.source import show_source

_ = torch.manual_seed(0)

# %% [markdown]
# ## Attention does not see order
#
# Part I showed that self-attention is *permutation-equivariant*: shuffle the input tokens and
# the outputs come out shuffled the same way, otherwise unchanged. Every output is a weighted
# average over *all* tokens, with weights computed from contents only, so "dog bites man" and
# "man bites dog" give each word the same vector. Re-checked with the package's `attention`:

# %%
torch.manual_seed(0)
x = torch.randn(5, 8)  # 5 tokens, d_model = 8
perm = torch.tensor([3, 0, 4, 1, 2])
out, _ = attention(x, x, x)
out_perm, _ = attention(x[perm], x[perm], x[perm])
torch.testing.assert_close(out_perm, out[perm])
print("attention(shuffled tokens) == shuffled attention(tokens)")

# %% [markdown]
# Adding a vector that depends on the position breaks the symmetry: the same token now gives a
# different output depending on where it stands.

# %%
# one position vector per position, next sections explain its form
pe = sinusoids(5, 8)
with_pos, _ = attention(x + pe, x + pe, x + pe)
shuffled = x[perm] + pe  # the tokens move, the positions stay
with_pos_perm, _ = attention(shuffled, shuffled, shuffled)
gap = (with_pos_perm - with_pos[perm]).abs().max().item()
print(
    "with positions added, the outputs no longer just move with the tokens: "
    f"{gap > 0.1}"
)

# %% [markdown]
# So each token's embedding gets a position vector added to it, of the same size
# $d_{\text{model}}$. What should that vector be? We want it
#
# - **bounded**, on the scale of the token embeddings ([chapter 03](03_tokens_and_embeddings.ipynb): norms of order 10);
# - the **same for a position regardless of the sentence length**;
# - **unique** for every position, with a **constant notion of distance**: two steps apart
#   should look alike wherever in the sentence it happens;
# - defined for **any length**, also longer than the training sentences.
#
# ## Attempt 1: the index itself
#
# Add $pos$ to every feature. Simple and unique, but unbounded: by position 50 the number is
# over a hundred times larger than a typical feature of a scaled token embedding (the
# norm of about 9 from [chapter 03](03_tokens_and_embeddings.ipynb), spread over 512 features), and the word is drowned. And a model
# trained on sentences of at most 30 tokens has never seen the value 60.

# %%
torch.manual_seed(0)
# d_model 512, a 6,000-word vocabulary, as in chapter 03
token_table = Embeddings(512, 6000)
nn.init.xavier_uniform_(token_table.lut.weight)  # make_model's initialisation
# typical size of one feature
feature = token_table(torch.arange(6000)).abs().mean().item()
print(f"typical token-embedding feature (after × √d_model): {feature:.2f}")
for pos in (1, 10, 50, 100):
    print(f"position {pos:3d}: position / token feature = {pos / feature:6.0f}")

# %% [markdown]
# ## Attempt 2: the index scaled to [0, 1]
#
# Divide by the sentence length: $pos / (n - 1)$. Bounded now, but the same value means
# different places in sentences of different lengths, and the step between neighbours
# shrinks as sentences grow, so "one word back" has no fixed meaning:

# %%
rows = [
    {
        "sentence length": n,
        "value of position 3": round(3 / (n - 1), 3),
        "step between neighbours": round(1 / (n - 1), 3),
    }
    for n in (5, 10, 20, 40)
]
pd.DataFrame(rows)

# %% [markdown]
# ## Attempt 3: binary vectors
#
# Write the position in binary, one bit per feature. Every value is 0 or 1 (bounded), the
# code of a position does not depend on the sentence length, and every position is unique.
# The picture shows the pattern we will meet again: the lowest bit flips at every step, the
# next every two steps, the next every four...

# %%
positions = torch.arange(64)
n_bits = 6
bits = (positions.unsqueeze(1) >> torch.arange(n_bits)) & 1  # (64, 6), bit 0 first
viz.heatmap(
    bits,
    title="Positions 0–63 in binary",
    x_title="bit (0 = lowest)",
    y_title="position",
    value_title="bit",
    scheme="greys",
    width=160,
    height=380,
).configure_axis(labelOverlap=True)

# %% [markdown]
# The problem is distance. Neighbours should be about equally far apart, but in binary the
# step from 7 to 8 flips four bits while the step from 8 to 9 flips one, and the vectors
# jump rather than move smoothly:

# %%
# Euclidean, position p to p + 1
distance = (bits[1:] - bits[:-1]).float().norm(dim=1)
rounded = [round(d, 2) for d in distance[:16].tolist()]
print("distance from p to p + 1, p = 0..15:")
print(rounded[:8])
print(rounded[8:])

# %% [markdown]
# ## Attempt 4: sinusoids
#
# Replace each bit by a smooth wave that oscillates at the bit's pace: feature $i$ is
# $\sin(pos \cdot \omega_i)$ with frequencies $\omega_i$ falling geometrically, so the fast
# features tell neighbours apart and the slow ones tell distant positions apart. The values
# are bounded, continuous, independent of the sentence length and defined for every
# position.
#
# What is still missing is a fixed way to move: we would like the encoding of $pos + k$ to
# follow from the encoding of $pos$ by the same operation wherever $pos$ is, so that a layer
# can learn "look $k$ tokens back" once. With a sine alone that is impossible: two positions
# can share the value $\sin(\omega\, pos)$ while their neighbours differ. With wavelength 16
# ($\omega = \pi/8$), positions 1 and 7 look the same, position 2 and 8 do not:

# %%
omega = math.pi / 8
for pos in (1, 7):
    now, nxt = math.sin(omega * pos), math.sin(omega * (pos + 1))
    print(f"pos {pos}: sin(ω·pos) = {now:.3f}, sin(ω·(pos+1)) = {nxt:.3f}")

# %% [markdown]
# ## Attempt 5: sin and cos pairs
#
# Give every frequency a pair of features, $\sin(\omega_i\, pos)$ and $\cos(\omega_i\, pos)$:
# a point on the unit circle at angle $\omega_i\, pos$. Positions 1 and 7 now differ (their
# cosines have opposite signs), and moving $k$ positions ahead turns every point by the angle
# $\omega_i k$, whatever $pos$ is: a rotation, which is a linear map. This is the paper's
# encoding:
#
# $$PE_{(pos,\,2i)} = \sin\!\left(pos / 10000^{2i/d_{\text{model}}}\right), \qquad
#   PE_{(pos,\,2i+1)} = \cos\!\left(pos / 10000^{2i/d_{\text{model}}}\right).$$
#
# "The wavelengths form a geometric progression from $2\pi$ to $10000 \cdot 2\pi$." Each pair
# has norm 1, so every position vector has norm $\sqrt{d_{\text{model}}/2}$. The package
# computes the table once:

# %%
show_source(sinusoids)

# %% [markdown]
# The Annotated Transformer's picture: features 4–7 of a 20-dimensional encoding over 100
# positions. Features 4 and 5 are the sine and cosine of pair 2; 6 and 7 of pair 3, a
# slower pair (its wavelength is $10000^{2/20} \approx 2.5$ times longer).

# %%
table20 = sinusoids(100, 20)
waves = pd.DataFrame(
    [
        {"position": p, "value": table20[p, f].item(), "feature": f"feature {f}"}
        for f in (4, 5, 6, 7)
        for p in range(100)
    ]
)
viz.line_chart(
    waves,
    "position",
    "value",
    color="feature",
    title="Sinusoidal positional encoding, d_model = 20, features 4–7",
    x_title="position",
    y_title="encoding value",
)

# %% [markdown]
# The whole table as a heatmap, for $d_{\text{model}} = 64$: on the left the fast pairs change
# from row to row, on the right the slow pairs barely move over 64 positions (they stay near
# sin = 0, cos = 1: the stripes). It is the
# binary picture of attempt 3, made smooth.

# %%
viz.heatmap(
    sinusoids(64, 64),
    title="Sinusoidal positional encoding, d_model = 64",
    x_title="feature (sin, cos, sin, cos, …)",
    y_title="position",
    value_title="PE",
    scheme="redblue",
    domain=(-1, 1),
    width=380,
    height=380,
).configure_axis(labelOverlap=True)

# %% [markdown]
# ### The package against the formula
#
# `sinusoids` computes $10000^{-2i/d_{\text{model}}}$ in log space, and `PositionalEncoding`
# keeps the table as a buffer (moved with the model to a device, never trained), adds its
# first `len` rows (from `offset`, for cached decoding) and applies dropout:

# %%
show_source(PositionalEncoding)

# %% [markdown]
# Computed here straight from the formula, one entry at a time in double precision, and
# compared with what the module adds to a zero input (dropout off):

# %%
d_model, max_len = 64, 100
by_hand = torch.tensor(
    [
        [
            math.sin(pos / 10000 ** (j / d_model))
            if j % 2 == 0
            else math.cos(pos / 10000 ** ((j - 1) / d_model))
            for j in range(d_model)
        ]
        for pos in range(max_len)
    ]
)
module = PositionalEncoding(d_model, dropout=0.0, max_len=max_len)
added = module(torch.zeros(1, max_len, d_model))[0]  # (max_len, d_model)
torch.testing.assert_close(added, by_hand.float(), atol=1e-5, rtol=0)
torch.testing.assert_close(
    added.norm(dim=1), torch.full((max_len,), math.sqrt(d_model / 2))
)
print(
    f"PositionalEncoding == the formula for {max_len} positions × {d_model} "
    f"features;\nevery row has norm √(d_model/2) = {math.sqrt(d_model / 2):.3f}"
)

# %% [markdown]
# ### A shift is a rotation
#
# The paper chose sinusoids "because we hypothesized it would allow the model to easily learn
# to attend by relative positions, since for any fixed offset $k$, $PE_{pos+k}$ can be
# represented as a linear function of $PE_{pos}$." From the angle-addition formulas, for each
# pair with $\theta = \omega_i k$:
#
# $$\begin{aligned}
# \sin(\omega_i(pos + k)) &= \sin(\omega_i pos)\cos\theta + \cos(\omega_i pos)\sin\theta,\\
# \cos(\omega_i(pos + k)) &= \cos(\omega_i pos)\cos\theta - \sin(\omega_i pos)\sin\theta.
# \end{aligned}$$
#
# With positions as row vectors, $PE_{pos+k} = PE_{pos}\, M_k$, where $M_k$ is block-diagonal
# with one $2\times 2$ rotation $\begin{pmatrix}\cos\theta & -\sin\theta\\ \sin\theta &
# \cos\theta\end{pmatrix}$ per pair. $M_k$ depends on $k$ only, never on $pos$. Built and
# checked for every position at once:

# %%
# (d/2,)
omega = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))


def shift_matrix(k: int) -> torch.Tensor:
    """M_k, (d_model, d_model): PE[pos] @ M_k == PE[pos + k] for every pos."""
    theta = omega * k
    blocks = [
        torch.tensor([[c, -s], [s, c]])
        for c, s in zip(theta.cos(), theta.sin(), strict=True)
    ]
    return torch.block_diag(*blocks)


table = sinusoids(max_len, d_model)  # (100, 64)
for k in (1, 5, 17, 60):
    M = shift_matrix(k)
    torch.testing.assert_close(table[:-k] @ M, table[k:], atol=1e-4, rtol=0)
    # a rotation
    torch.testing.assert_close(M @ M.T, torch.eye(d_model), atol=1e-5, rtol=0)
print(
    "PE[pos] @ M_k == PE[pos + k] for all pos and k in (1, 5, 17, 60);\n"
    "each M_k is orthogonal"
)

# %% [markdown]
# **Explore.** Pick a pair $i$ (its frequency $\omega_i$), a position and an offset $k$. Top:
# the pair's sine and cosine over the positions, the two positions marked. Bottom: the same
# pair as a point on the circle. Moving the position turns both points together; the angle
# between them, $k\,\omega_i$, depends on $k$ alone. Slow pairs (large $i$) barely turn, fast
# ones wrap around. (The controls work on the page without a kernel.)

# %%
explore.rotation_explorer()

# %% [markdown]
# Because $M_k$ is a rotation, the dot product of two position vectors depends only on how far
# apart they are: $PE_{pos} \cdot PE_{pos+k} = \sum_i \cos(\omega_i k)$. Dot products are what
# attention computes, so "how similar are two positions" is a function of their distance,
# the same at the start and the end of the sentence. It falls off with distance and is
# symmetric (normalised by $d_{\text{model}}/2$, so a position's similarity with itself is 1):

# %%
offsets = torch.arange(-40, 41)
# Σ_i cos(ω_i k), (81,)
formula = torch.cos(omega * offsets.unsqueeze(1)).sum(dim=1)
for start in (40, 50, 59):
    dots = table[start + offsets] @ table[start]  # PE(start + k) · PE(start)
    torch.testing.assert_close(dots, formula, atol=1e-4, rtol=0)
print(
    "PE(pos)·PE(pos+k) == Σ cos(ω_i k) for pos in (40, 50, 59): a function of k "
    "alone"
)
sims = pd.DataFrame({"offset k": offsets, "similarity": formula / (d_model / 2)})
viz.line_chart(
    sims,
    "offset k",
    "similarity",
    title=("Similarity of position vectors depends only on their distance (d_model "
        "= 64)"),
    x_title="offset k",
    y_title="PE(pos)·PE(pos+k) / (d_model/2)",
)

# %% [markdown]
# ## Learned position embeddings
#
# The simpler alternative is to *learn* the position vectors: a second embedding table, one
# row per position, trained with the rest of the model. The paper tried it and "found that the
# two versions produced nearly identical results"; Bloem's `former`, BERT and GPT-2 use it.

# %%
show_source(PositionalEmbedding)

# %% [markdown]
# Side by side before training: the sinusoidal table has structure and no parameters; the
# learned one starts as noise ($\mathcal N(0, 1)$, PyTorch's default) and costs
# $\text{max\_len} \times d_{\text{model}}$ parameters. Training shapes it into whatever the
# task needs (plots of GPT-2's trained table, published by others, show smooth, wave-like
# curves; this book does not reproduce that).

# %%
torch.manual_seed(0)
learned = PositionalEmbedding(d_model, max_len=max_len)
learned_rows = learned(torch.zeros(1, 64, d_model))[0].detach()  # (64, d_model)
n_params = sum(p.numel() for p in learned.parameters())
print(
    f"learned: {n_params} parameters; sinusoidal: "
    f"{sum(p.numel() for p in module.parameters())}"
)
left = viz.heatmap(
    sinusoids(64, d_model),
    title="Sinusoidal (fixed)",
    x_title="feature",
    y_title="position",
    value_title="value",
    scheme="redblue",
    domain=(-2, 2),
    width=210,
    height=210,
)
right = viz.heatmap(
    learned_rows,
    title="Learned (at initialisation)",
    x_title="feature",
    y_title="position",
    value_title="value",
    scheme="redblue",
    domain=(-2, 2),
    width=210,
    height=210,
)
(left | right).configure_axis(labelOverlap=True)

# %% [markdown]
# ## Longer than anything seen in training
#
# Suppose training sentences were at most 100 tokens. The sinusoidal formula is defined for
# every position, so its table simply extends (the first 100 rows are unchanged, and the
# module's default `max_len=5000` covers far longer inputs). A learned table has no row for
# position 100: it was never trained, and looking it up fails with an index error deep
# inside `nn.Embedding`. So the package's models check a sequence once, where it enters
# (`check_positions`), and say what to do in one line.

# %%
torch.testing.assert_close(
    sinusoids(300, d_model)[:max_len], sinusoids(max_len, d_model)
)
long_input = torch.zeros(1, 120, d_model)
print(
    "sinusoidal, 120 positions:",
    tuple(PositionalEncoding(d_model, 0.0)(long_input).shape),
)
try:
    learned(long_input)
except IndexError as error:
    print("learned, 120 positions: IndexError:", error)
try:
    check_positions(long_input.size(1), 0, max_len)
except ValueError as error:
    print("a model's check on entry: ValueError:")
    print(textwrap.indent(textwrap.fill(str(error), 78), "  "))

# %% [markdown]
# Defined is not the same as useful. The model has only learned what the *combinations* of
# phases seen in training mean, and new positions bring combinations it never saw: in
# practice sinusoidal models also degrade on sequences much longer than their training data
# ([Press et al. 2022](../book/references.md#press-et-al-2022) measured this and proposed ALiBi). Encodings of *relative* position
# ([Shaw et al. 2018](../book/references.md#shaw-et-al-2018), Transformer-XL, rotary embeddings, ALiBi) attack the problem directly;
# [chapter 15](15_the_transformer_today.ipynb) returns to them. In the rotary embeddings of many current models the rotation
# $M_k$ of this chapter comes back, applied to queries and keys instead of being added to the
# input.
#
# ## Summary
#
# - Attention is blind to order; adding a position vector to every token embedding fixes it.
# - Integers are unbounded, scaled indices depend on the length, bits jump; sinusoids are
#   smooth, and sin/cos pairs make a shift by $k$ a fixed rotation $M_k$, checked above.
# - The package's `PositionalEncoding` equals the formula; `PositionalEmbedding` learns the
#   table instead and has no rows beyond `max_len`.
#
# You can now
#
# - say why attention needs positions and why sinusoids suit them;
# - show that a shift by k positions is a fixed rotation;
# - choose between sinusoidal and learned positions, knowing their limits.
#
# **Next:** [chapter 05 · Normalisation and residuals](05_normalisation_and_residuals.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/04_positional_encoding.py`: fill them in there, then grade them
# from the repository's root with `make exercises CHAPTER=04` (or
# `python -m annotated_transformer.exercises 04`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-04-sinusoidal)=
# ### Exercise 4.1 · The sinusoidal encoding at any position
#
# Write the paper's encoding for any tensor of positions, fractional ones included (some
# audio and image models use them), vectorised: no loop over features. Return float64.
# The grader compares with the formula evaluated entry by entry.
#
# Write `sinusoidal(positions, d_model)`; grade with `make exercises CHAPTER=04`.
#
# :::{dropdown} Solution
# ```python
# def sinusoidal(positions: Tensor, d_model: int) -> Tensor:
#     """The paper's encoding at any positions, fractional ones included.
#
#     positions: (n,) float; returns (n, d_model) float64:
#     PE[pos, 2i] = sin(pos ω_i), PE[pos, 2i + 1] = cos(pos ω_i),
#     ω_i = 10000^(-2i / d_model)
#     """
#     two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
#     omega = 10000.0 ** (-two_i / d_model)  # (d/2,)
#     angles = positions.to(torch.float64)[:, None] * omega  # (n, d/2)
#     return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)
# ```
# :::

# %% [markdown]
# (ex-04-pe-dot)=
# ### Exercise 4.2 · Similarity depends on the offset only
#
# Show that the similarity of two encodings depends only on how far apart they are:
# derive a closed form for $PE_{pos} \cdot PE_{pos+k}$ that does not mention $pos$, and
# return it as a float. The grader compares with dot products of encodings at several
# positions. (Plot it against $k$ for yourself: it is largest at $k = 0$.)
#
# Write `pe_dot(k, d_model)`; grade with `make exercises CHAPTER=04`.
#
# :::{dropdown} Solution
# ```python
# def pe_dot(k: int, d_model: int) -> float:
#     """PE[pos] · PE[pos + k] in closed form, Σ_i cos(k ω_i), for every pos."""
#     two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
#     omega = 10000.0 ** (-two_i / d_model)
#     return float((k * omega).cos().sum())
# ```
# :::

# %% [markdown]
# (ex-04-rotate-by)=
# ### Exercise 4.3 · An offset is a rotation, applied pair by pair
#
# This chapter built the shift as a block-diagonal matrix $M_k$. Apply the same
# rotation without any matrix: turn each (sin, cos) pair of the encodings by the angle
# $k\,\omega_i$, for a whole batch of positions at once, negative $k$ included. This
# pair-by-pair rotation is exactly how RoPE (chapter 15) rotates queries and keys.
#
# Write `rotate_by(pe, k)`; grade with `make exercises CHAPTER=04`.
#
# :::{dropdown} Solution
# ```python
# def rotate_by(pe: Tensor, k: int) -> Tensor:
#     """Move encodings k positions on by turning each (sin, cos) pair by k ω_i.
#
#     pe: (..., d_model), the encodings of some positions pos
#     returns the encodings of pos + k
#     """
#     d_model = pe.size(-1)
#     two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
#     omega = 10000.0 ** (-two_i / d_model)
#     theta = k * omega.to(pe.dtype)  # (d/2,)
#     sin, cos = pe[..., 0::2], pe[..., 1::2]  # (..., d/2) each
#     new_sin = sin * theta.cos() + cos * theta.sin()
#     new_cos = cos * theta.cos() - sin * theta.sin()
#     return torch.stack([new_sin, new_cos], dim=-1).flatten(-2)
# ```
# :::

# %% [markdown]
# (ex-04-relative-offset)=
# ### Exercise 4.4 · Read the offset back from two encodings
#
# The other direction: given the encodings of two unknown positions $pos$ and $pos + k$,
# with $|k| \le$ `max_offset`, recover the offset $k$. Each pair's angle gives
# $k\,\omega_i$ only modulo $2\pi$; think about which pair you can trust.
#
# Write `relative_offset(pe_a, pe_b, max_offset)`; grade with
# `make exercises CHAPTER=04`.
#
# :::{dropdown} Solution
# ```python
# def relative_offset(pe_a: Tensor, pe_b: Tensor, max_offset: int) -> int:
#     """The offset k, |k| <= max_offset, with pe_b the encoding of pos + k when
#     pe_a is the encoding of pos (both (d_model,), float64)."""
#     d_model = pe_a.size(-1)
#     two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
#     omega = 10000.0 ** (-two_i / d_model)
#     angle_a = torch.atan2(pe_a[0::2], pe_a[1::2])  # pos ω_i (mod 2π)
#     angle_b = torch.atan2(pe_b[0::2], pe_b[1::2])
#     turn = torch.remainder(angle_b - angle_a + math.pi, 2 * math.pi) - math.pi
#     slow = int((omega * max_offset < math.pi).nonzero()[0])  # cannot wrap
#     return round(float(turn[slow] / omega[slow]))
# ```
# :::
