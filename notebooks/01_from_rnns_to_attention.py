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
# # 01 · From RNNs to attention
#
# - **You will learn** why a fixed-size encoder state is a bottleneck, how attention over the encoder states removes it, and the five steps from there to multi-head self-attention.
# - **It assumes** Python and PyTorch basics (tensors, `nn.Module`) and matrix products.
# - **Time:** about 15 minutes to read; it runs in under a minute.
#
# Before the Transformer, neural machine translation was done by two recurrent networks: an
# *encoder* that reads the source sentence one word at a time, and a *decoder* that writes the
# translation one word at a time. This chapter follows the path from that design to the single
# line at the heart of the Transformer,
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V,$$
#
# in small steps, each a few lines of tensor code whose shapes are printed. On the way we meet
# the problem attention was invented to solve ([Bahdanau, Cho and Bengio, 2014](../book/references.md#bahdanau-cho-and-bengio-2014), *Neural Machine
# Translation by Jointly Learning to Align and Translate*) and the generalisations that turned
# it into the Transformer's multi-head self-attention ([Vaswani et al., 2017](../book/references.md#vaswani-et-al-2017), *Attention Is All
# You Need*). We end with a property of self-attention that explains why the Transformer needs
# positional encodings at all.

# %%
import altair as alt
import pandas as pd
import torch
from torch import nn

from annotated_transformer.blocks.attention import MultiHeadedAttention, attention
from annotated_transformer.book import viz
from annotated_transformer.book.source import show_source

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# ## The encoder–decoder and its bottleneck
#
# An RNN encoder turns the source words $x_1, \dots, x_n$ into hidden states
# $h_j = f(h_{j-1}, x_j)$. In the classic encoder–decoder (Cho et al. 2014; Sutskever et al.
# 2014) only the **last** state $c = h_n$ is passed to the decoder: it is the *context vector*,
# and it must summarise the whole sentence, whatever its length, in a fixed number of numbers.
# Bahdanau et al. call this out as the weakness of the design: "a potential issue with this
# encoder–decoder approach is that a neural network needs to be able to compress all the
# necessary information of a source sentence into a fixed-length vector", and they show that
# translation quality of such models falls quickly as sentences get longer.
#
# We can see the squeeze with a tiny experiment. Take a GRU encoder with a 32-number state and
# feed it random "sentences" over a vocabulary of 8 words. The GRU is left untrained, so
# nothing here depends on a lucky training run; what we measure is how much of the sentence its
# state still holds. For each position $j$ we fit a linear read-out (least squares, closed
# form) that tries to recover word $x_j$, either
#
# * from the **final state** $h_n$ alone — all a classic decoder ever sees — or
# * from the state $h_j$ at that position — what a decoder could look at if it kept *all* the
#   encoder states.
#
# Accuracy is measured on sentences the read-out was not fitted on; guessing gives 1/8.

# %% [markdown]
# ![Two diagrams. Top: an RNN encoder reads the, European, Economic, Area, full stop into states h1 to h5; only the last state, c = h5, passes to the decoder states s1 to s5 that write la zone économique européenne. Bottom: with attention, decoder state s3 receives c3, a weighted sum of all five encoder states, with most of its weight on h3 (Economic).](figures/01_rnn_bottleneck.svg)
#
# *The classic encoder–decoder squeezes the sentence into one vector $c = h_n$;
# with attention, every decoder step reads its own weighted sum of all encoder
# states.*

# %%
VOCAB, D_EMB, HIDDEN = 8, 16, 32
torch.manual_seed(0)
embed = nn.Embedding(VOCAB, D_EMB)
encoder = nn.GRU(D_EMB, HIDDEN, batch_first=True)


def read_out_accuracy(
    states: torch.Tensor, words: torch.Tensor, n_fit: int
) -> float:
    """Fit a linear map states -> one-hot word on the first n_fit rows.

    Returns its accuracy on the other rows.
    """
    # + bias
    features = torch.cat([states, torch.ones(len(states), 1)], dim=1).double()
    target = nn.functional.one_hot(words, VOCAB).double()
    fit, held_out = features[:n_fit], features[n_fit:]
    ridge = 1e-3 * torch.eye(features.size(1), dtype=torch.double)
    weights = torch.linalg.solve(fit.T @ fit + ridge, fit.T @ target[:n_fit])
    predicted = (held_out @ weights).argmax(dim=1)
    return (predicted == words[n_fit:]).double().mean().item()


rows = []
n_fit, n_test = 3000, 1000
for length in (5, 10, 20, 40):
    generator = torch.Generator().manual_seed(length)
    words = torch.randint(VOCAB, (n_fit + n_test, length), generator=generator)
    with torch.no_grad():
        # (sentences, length, 32), (1, sentences, 32)
        states, final = encoder(embed(words))
    for j in range(length):
        for source, h in (
            ("final state h_n", final[0]),
            ("own state h_j", states[:, j]),
        ):
            accuracy = read_out_accuracy(h, words[:, j], n_fit)
            rows.append(
                {
                    "length": length,
                    "position": j + 1,
                    "read from": source,
                    "accuracy": accuracy,
                }
            )
probe = pd.DataFrame(rows)
probe["accuracy"] = probe["accuracy"].round(3)
print(states.shape, final.shape)
print(probe.groupby(["length", "read from"])["accuracy"].mean().unstack().round(2))

# %% [markdown]
# Every word can be read back from its own state, at every length. From the final state, the
# last few words are clear and the earlier ones fade to chance; the longer the sentence, the
# smaller the share of it that survives in $h_n$. (Training would make the encoder use its 32
# numbers more cleverly, but not give it more of them: the decoder still sees one vector of a
# fixed size, whether the sentence has five words or fifty.)

# %%
(
    alt.Chart(probe)
    .mark_line(point=True)
    .encode(
        x=alt.X("position:Q", title="position j of the word in the sentence"),
        y=alt.Y(
            "accuracy:Q",
            title="accuracy of reading word j back",
            scale=alt.Scale(domain=[0, 1]),
        ),
        color=alt.Color("read from:N", title="read from"),
        tooltip=["length", "position", "read from", "accuracy"],
    )
    .properties(width=200, height=160)
    .facet(facet=alt.Facet("length:O", title="sentence length n"), columns=2)
    .resolve_scale(x="independent")
    .properties(title="How much of the sentence survives in the encoder's state")
)

# %% [markdown]
# ## Attention over the encoder states
#
# Bahdanau et al.'s fix is to keep all the encoder states $h_1, \dots, h_n$ and let the decoder
# build a **different context vector for every word it writes**. Before producing target word
# $i$, the decoder, in state $s_{i-1}$, scores every source position,
#
# $$e_{ij} = a(s_{i-1}, h_j) \qquad \text{(alignment scores)},$$
#
# turns the scores into weights that are positive and sum to one,
#
# $$\alpha_{ij} = \frac{\exp e_{ij}}{\sum_{k} \exp e_{ik}} \qquad \text{(softmax)},$$
#
# and reads a weighted sum of the states,
#
# $$c_i = \sum_j \alpha_{ij} h_j \qquad \text{(context vector)}.$$
#
# Bahdanau et al. learn the score function $a$ as a small feed-forward network (*additive*
# attention, $v^\top \tanh(W s + U h)$); Luong et al. (2015) showed that a plain dot product
# $s^\top h$ works as well and is cheaper, and the Transformer uses the dot product. The
# decoder no longer has to remember the sentence: it looks up the part it needs, when it needs it.
#
# To see alignment weights without training a translator, we build the decoder states by hand.
# The example is the one Bahdanau et al. draw in their paper: *the European Economic Area* →
# *la zone économique européenne*, where French puts the adjectives after the noun, so the
# alignment is not the diagonal. Each hand-made decoder state is a noisy copy of the encoder
# state of the word it translates; a trained model learns states like that.

# %%
source = ["the", "European", "Economic", "Area", "."]
target = ["la", "zone", "économique", "européenne", "."]
aligned_to = [0, 3, 2, 1, 4]  # which source word each target word translates

torch.manual_seed(1)
d = 16
h = torch.randn(len(source), d)  # encoder states h_1..h_n: (n, d)
s = h[aligned_to] + 0.5 * torch.randn(len(target), d)  # decoder states s_i: (m, d)

e = s @ h.T  # alignment scores e_ij = s_i · h_j: (m, n)
alpha = e.softmax(dim=-1)  # each row sums to one
c = alpha @ h  # context vectors c_i = Σ_j α_ij h_j: (m, d)
print(
    "scores",
    tuple(e.shape),
    "weights",
    tuple(alpha.shape),
    "contexts",
    tuple(c.shape),
)
print("row sums:", alpha.sum(dim=-1))

# %%
viz.heatmap(
    alpha.round(decimals=3),
    x_labels=source,
    y_labels=target,
    title="Alignment weights α_ij (hand-made decoder states)",
    x_title="source word j (encoder state h_j)",
    y_title="target word i (decoder state s_i)",
    value_title="weight",
    domain=(0, 1),
    width=260,
    height=220,
)

# %% [markdown]
# ## Five generalisations, from there to the Transformer
#
# The decoder step above is already almost the Transformer's attention. Five small changes
# get us all the way; after each one we print the shapes.
#
# ### 1. One query vector
#
# Strip the recurrent setting away: attention takes a **query** vector $q$ (what we are
# looking for, here the decoder state) and a set of vectors $h_1..h_n$ to look in. The scores
# are dot products, the weights their softmax, the result a weighted average.

# %%
torch.manual_seed(2)
n, d = 6, 8
H = torch.randn(n, d)  # the vectors we look in: (n, d)
q = torch.randn(d)  # one query: (d,)

scores = H @ q  # (n,)
weights = scores.softmax(dim=0)  # (n,)
out = weights @ H  # (d,)
print("q", tuple(q.shape), "scores", tuple(scores.shape), "out", tuple(out.shape))

# %% [markdown]
# ### 2. Many queries as a matrix
#
# A decoder writes many words, and each has its own query. Stacking $m$ queries as the rows of
# a matrix $Q$ turns $m$ matrix–vector products into one matrix product, $Q H^\top$, with one
# row of scores per query; the softmax runs along each row. This is how the computation becomes
# one big, parallel matrix multiplication instead of a loop.

# %%
m = 4
Q = torch.randn(m, d)  # (m, d)
scores = Q @ H.T  # (m, n): one row of scores per query
weights = scores.softmax(dim=-1)  # each row sums to one
out = weights @ H  # (m, d)
print("Q", tuple(Q.shape), "scores", tuple(scores.shape), "out", tuple(out.shape))
# Row 0 is exactly step 1 with q = Q[0]:
torch.testing.assert_close(out[0], Q[0].matmul(H.T).softmax(0) @ H)

# %% [markdown]
# ### 3. Separate keys and values
#
# So far each $h_j$ did two jobs: it was *compared* with the query, and it was *returned* in
# the weighted sum. Nothing forces these to be the same vector. Give every position a **key**
# $k_j$ (what it is matched on) and a **value** $v_j$ (what it hands back) — a soft version of
# a dictionary lookup. Keys must have the queries' width $d_k$; values can have any width
# $d_v$.
#
# One more change from the Transformer paper: divide the scores by $\sqrt{d_k}$. Dot products
# of longer vectors are larger, and large scores push the softmax into a corner where it puts
# all weight on one key and its gradient vanishes ([chapter 02](02_self_attention.ipynb) measures this). With that we have
# *scaled dot-product attention*, equation (1) of Vaswani et al.:
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V.$$

# %%
d_k, d_v = 8, 5
K = torch.randn(n, d_k)  # keys: (n, d_k)
V = torch.randn(n, d_v)  # values: (n, d_v)
weights = (Q @ K.T / d_k**0.5).softmax(dim=-1)  # (m, n)
out = weights @ V  # (m, d_v)
print(
    "Q",
    tuple(Q.shape),
    "K",
    tuple(K.shape),
    "V",
    tuple(V.shape),
    "out",
    tuple(out.shape),
)

# %% [markdown]
# That is the whole of the package's `attention` function. Besides the formula it accepts a
# boolean mask (which keys each query may see; [chapter 06](06_masks.ipynb)) and dropout on the weights, and it
# returns the weights too, so that we can draw them:

# %%
show_source(attention)

# %%
package_out, package_weights = attention(Q, K, V)
torch.testing.assert_close(out, package_out)
torch.testing.assert_close(weights, package_weights)
print("hand derivation == annotated_transformer.blocks.attention.attention")

# %% [markdown]
# ### 4. Self-attention
#
# In translation the queries come from the decoder and the keys and values from the encoder.
# The Transformer's key move is to let a sequence attend **to itself**: queries, keys and values
# are all computed from the same vectors $X$ (one row per word), through three learned linear
# maps $W^Q, W^K, W^V$. Every word gets a new representation that mixes in the words it finds
# relevant — no recurrence, and every position computed at once.

# %%
torch.manual_seed(3)
n, d_model = 6, 8
X = torch.randn(n, d_model)  # one sentence of n word vectors: (n, d_model)
W_q, W_k, W_v = (torch.randn(d_model, d_model) / d_model**0.5 for _ in range(3))

# each (n, d_model): the same words in three roles
Q, K, V = X @ W_q, X @ W_k, X @ W_v
Y, weights = attention(Q, K, V)
print("X", tuple(X.shape), "weights", tuple(weights.shape), "Y", tuple(Y.shape))

# %% [markdown]
# ### 5. Multi-head attention
#
# One softmax gives each word one way of distributing its attention. A word often has several
# relations to express at once (its subject, its object, the word before it). Multi-head
# attention runs $h$ attentions side by side, each on its own smaller projections of width
# $d_k = d_\text{model}/h$, concatenates their outputs and mixes them with a fourth map $W^O$:
#
# $$\mathrm{MultiHead}(Q,K,V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\,W^O,
# \qquad \mathrm{head}_i = \mathrm{Attention}(QW_i^Q, KW_i^K, VW_i^V).$$
#
# The package's `MultiHeadedAttention` holds $W^Q, W^K, W^V, W^O$ for all heads as four
# `nn.Linear(d_model, d_model)` layers; head $i$'s projection is the $i$-th block of $d_k$
# output features. Here is the loop over heads written out with those very weights ([chapter 02](02_self_attention.ipynb)
# derives the class step by step):

# %%
heads = 2
mha = MultiHeadedAttention(h=heads, d_model=d_model, dropout=0.0).eval()
linear_q, linear_k, linear_v, linear_o = mha.linears
d_k = d_model // heads

Q, K, V = linear_q(X), linear_k(X), linear_v(X)  # (n, d_model): all heads at once
outputs = []
for i in range(heads):
    block = slice(i * d_k, (i + 1) * d_k)  # head i's share of the features
    head_i, _ = attention(Q[:, block], K[:, block], V[:, block])  # (n, d_k)
    outputs.append(head_i)
# Concat(head_1, ..., head_h) W^O: (n, d_model)
Y = linear_o(torch.cat(outputs, dim=-1))
print(
    "each head", tuple(outputs[0].shape), "concatenated and mixed", tuple(Y.shape)
)

with torch.no_grad():
    # the package wants a batch axis
    from_package = mha(X[None], X[None], X[None])[0]
torch.testing.assert_close(Y.detach(), from_package)
print(
    "loop over heads == "
    "annotated_transformer.blocks.attention.MultiHeadedAttention"
)

# %% [markdown]
# ## Self-attention does not know word order
#
# Look at what self-attention computes for word $i$: a weighted average over *all* words, with
# weights that depend only on the word vectors, never on where the words stand. Shuffle the
# input words and nothing changes except that the outputs come out shuffled the same way. In
# symbols, for a permutation matrix $P$,
#
# $$\mathrm{SelfAttention}(PX) = P\,\mathrm{SelfAttention}(X),$$
#
# self-attention is *permutation equivariant*. Let us check it on a batch of random sentences.

# %%
torch.manual_seed(4)
mha = MultiHeadedAttention(h=2, d_model=8, dropout=0.0).eval()
X = torch.randn(3, 7, 8)  # (batch, len, d_model)
perm = torch.randperm(7)
print("permutation:", perm.tolist())

with torch.no_grad():
    Y = mha(X, X, X)
    Y_of_permuted = mha(X[:, perm], X[:, perm], X[:, perm])
torch.testing.assert_close(Y_of_permuted, Y[:, perm])
print("SelfAttention(X permuted) == SelfAttention(X) permuted")

# %% [markdown]
# For language that is a problem. *dog bites man* and *man bites dog* contain the same three
# words, so self-attention gives the same three output vectors for both, only listed in a
# different order: the word *dog* comes out identical whether it bites or is bitten.

# %%
torch.manual_seed(5)
vocab = {"dog": 0, "bites": 1, "man": 2}
embedding = nn.Embedding(len(vocab), 8)


def encode(
    sentence: str, positions: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Self-attention outputs of a sentence, one (d_model,) vector per word."""
    words = sentence.split()
    x = embedding(torch.tensor([[vocab[w] for w in words]]))  # (1, len, d_model)
    if positions is not None:
        x = x + positions[: len(words)]
    with torch.no_grad():
        y = mha(x, x, x)[0]
    return dict(zip(words, y, strict=True))


a, b = encode("dog bites man"), encode("man bites dog")
for word in vocab:
    torch.testing.assert_close(a[word], b[word])
print("without positions: every word's output is identical in both sentences")

# %% [markdown]
# The cure is to make the input vectors themselves carry their position: add a vector $p_t$
# that depends on the position $t$ to the embedding of the word at $t$. The Transformer uses
# fixed sinusoids ([chapter 04](04_positional_encoding.ipynb)); here any distinct vectors will do, so we take random ones.
# Now *dog* at position 1 and *dog* at position 3 are different inputs, and their outputs
# differ.

# %%
torch.manual_seed(6)
# one vector per position t = 1, 2, 3: (len, d_model)
positions = 2 * torch.randn(3, 8)
a, b = encode("dog bites man", positions), encode("man bites dog", positions)
for word in vocab:
    change = ((a[word] - b[word]).norm() / a[word].norm()).item()
    print(
        f"{word:>5}: its output moves by {change:.0%} of its length between the "
        "sentences"
    )
    assert not torch.allclose(a[word], b[word])

# %% [markdown]
# ## Summary
#
# * A fixed-size context vector has to hold the whole sentence, and it cannot: early words
#   fade. Attention keeps every encoder state and lets each output step choose among them.
# * Attention is scores → softmax → weighted sum. Generalised to matrices of queries, with
#   separate keys and values and scaled scores, it is $\mathrm{softmax}(QK^\top/\sqrt{d_k})V$.
# * Self-attention takes queries, keys and values from the same sequence; multi-head
#   attention runs several of these side by side on smaller projections.
# * Self-attention is permutation equivariant, so word order must be added to the inputs:
#   positional encodings ([chapter 04](04_positional_encoding.ipynb)).
#
# You can now
#
# - explain the bottleneck of an encoder-decoder RNN and how attention removes it;
# - write attention as softmax(QKᵀ/√d_k)V and follow its shapes;
# - show that self-attention without positions ignores word order.
#
# **Next:** [chapter 02 · Self-attention from scratch](02_self_attention.ipynb) builds
# self-attention again from scratch, explains the $\sqrt{d_k}$, and makes multi-head
# attention fast.

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/01_from_rnns_to_attention.py`: fill them in there, then grade
# them from the repository's root with `make exercises CHAPTER=01` (or
# `python -m annotated_transformer.exercises 01`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-01-context-vectors)=
# ### Exercise 1.1 · Alignment weights and context vectors
#
# Given decoder states $s$ (one per target word, $m \times d$) and encoder states $h$
# ($n \times d$), compute the dot-product alignment weights
# $\alpha_{ij} = \mathrm{softmax}_j(s_i \cdot h_j)$ and the context vectors
# $c_i = \sum_j \alpha_{ij} h_j$ for all $i$ at once, without a loop.
#
# Write `context_vectors(s, h)`; grade with `make exercises CHAPTER=01`.
#
# :::{dropdown} Solution
# ```python
# def context_vectors(s: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
#     """Dot-product attention of decoder states over encoder states.
#
#     s: (m, d) decoder states; h: (n, d) encoder states
#     returns (alpha (m, n), the softmax of s·h over j;
#              c (m, d), c_i = Σ_j alpha_ij h_j)
#     """
#     alpha = (s @ h.T).softmax(dim=-1)
#     return alpha, alpha @ h
# ```
# :::

# %% [markdown]
# (ex-01-additive-scores)=
# ### Exercise 1.2 · Bahdanau's additive scores
#
# Bahdanau et al. score a pair with a small network instead of a dot product,
# $e_{ij} = v^\top \tanh(W s_i + U h_j)$, so that $s$ and $h$ may even have different
# widths. Compute the whole $m \times n$ matrix of scores with broadcasting (no Python loop).
#
# Write `additive_scores(s, h, W, U, v)`; grade with `make exercises CHAPTER=01`.
#
# :::{dropdown} Solution
# ```python
# def additive_scores(
#     s: Tensor,
#     h: Tensor,
#     W: Tensor,
#     U: Tensor,
#     v: Tensor,
# ) -> Tensor:
#     """Bahdanau's alignment scores e_ij = vᵀ tanh(W s_i + U h_j).
#
#     s: (m, d_s); h: (n, d_h); W: (d_a, d_s); U: (d_a, d_h); v: (d_a,)
#     returns e: (m, n)
#     """
#     queries = s @ W.T  # (m, d_a)
#     keys = h @ U.T  # (n, d_a)
#     return torch.tanh(queries[:, None, :] + keys[None, :, :]) @ v
# ```
# :::

# %% [markdown]
# (ex-01-multi-head-self-attention)=
# ### Exercise 1.3 · Multi-head self-attention from plain matrices
#
# Write multi-head self-attention for one sequence $X$ ($n \times d_\text{model}$) from four
# plain weight matrices, applied as $XW$: head $i$ uses the $i$-th block of $d_k$ columns of
# $W^Q, W^K, W^V$. The grader loads the same matrices into PyTorch's
# `nn.MultiheadAttention` and compares.
#
# Write `multi_head_self_attention(X, W_q, W_k, W_v, W_o, h)`; grade with
# `make exercises CHAPTER=01`.
#
# :::{dropdown} Solution
# ```python
# def multi_head_self_attention(
#     X: Tensor, W_q: Tensor, W_k: Tensor, W_v: Tensor, W_o: Tensor, h: int
# ) -> Tensor:
#     """Multi-head self-attention of one sequence, a loop over heads.
#
#     X: (n, d_model); W_q, W_k, W_v, W_o: (d_model, d_model), applied as X @ W;
#     head i uses columns i·d_k .. (i+1)·d_k of W_q, W_k, W_v, d_k = d_model / h
#     returns Concat(head_1, ..., head_h) @ W_o: (n, d_model)
#     """
#     d_k = X.size(-1) // h
#     Q, K, V = X @ W_q, X @ W_k, X @ W_v
#     heads = []
#     for i in range(h):
#         block = slice(i * d_k, (i + 1) * d_k)
#         weights = (Q[:, block] @ K[:, block].T / d_k**0.5).softmax(dim=-1)
#         heads.append(weights @ V[:, block])
#     return torch.cat(heads, dim=-1) @ W_o
# ```
# :::

# %% [markdown]
# (ex-01-attention-pool)=
# ### Exercise 1.4 · Attention pooling: one query for a whole set
#
# Self-attention is permutation *equivariant*; a summary of a whole set should be
# *invariant*. Pool a set of vectors $X$ ($n \times d$) into one vector with a single
# query $q$: $\mathrm{softmax}(Xq/\sqrt{d})^\top X$. The grader checks the formula and that
# shuffling the rows of $X$ leaves the result unchanged. (Chapter 13 pools a sentence into
# one vector for classification.)
#
# Write `attention_pool(X, q)`; grade with `make exercises CHAPTER=01`.
#
# :::{dropdown} Solution
# ```python
# def attention_pool(X: Tensor, q: Tensor) -> Tensor:
#     """One learned query summarises a set: softmax(X q / √d) ᵀ X.
#
#     X: (n, d) the set's vectors; q: (d,) the query
#     returns (d,), the same for any order of the rows of X
#     """
#     weights = (X @ q / X.size(-1) ** 0.5).softmax(dim=0)  # (n,)
#     return weights @ X
# ```
# :::
