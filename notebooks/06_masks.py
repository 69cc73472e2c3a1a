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
# # 06 · Masks
#
# - **You will learn** padding and look-ahead masks, how they combine, and a check that no information leaks from the future.
# - **It assumes** [chapter 02](02_self_attention.ipynb).
# - **Time:** about 10 minutes to read; it runs in under a minute.
#
# Attention, as [chapter 02](02_self_attention.ipynb) built it, lets every query look at every key. Two situations need
# less than that:
#
# - **padding**: sentences in a batch have different lengths, so the short ones are filled up
#   with a padding token. Those filler positions are not words; no query should read them.
# - **the future**: in training, the decoder sees the whole (shifted) target sentence at once
#   and predicts every next word in parallel. Position $i$ must not look at positions after
#   $i$ — otherwise it could copy the word it is supposed to predict. The paper (§3.2.3):
#
# > We need to prevent leftward information flow in the decoder to preserve the auto-regressive
# > property. We implement this inside of scaled dot-product attention by masking out (setting
# > to −∞) all values in the input of the softmax which correspond to illegal connections.
#
# A mask is a boolean tensor next to the attention scores. In this book **True means "may
# attend"** (the convention of PyTorch's `scaled_dot_product_attention`); a masked score is set
# to −∞, so its softmax weight is exactly 0. The shapes leave out the head axis, which
# `MultiHeadedAttention` adds: a padding mask is `(batch, 1, k_len)`, a look-ahead mask
# `(1, q_len, k_len)`, and the decoder's combined mask `(batch, q_len, k_len)`.

# %% [markdown]
# :::{admonition} Find the bug
# :class: tip
# The original Annotated Transformer sets masked scores to −1e9 rather than −∞. In half
# precision that breaks: {ref}`Exercise 6.2 <ex-06-masked-softmax>` lets you find out how.
# :::

# %%
import pandas as pd
import torch

from annotated_transformer.blocks.attention import attention
from annotated_transformer.blocks.masks import (
    make_std_mask,
    padding_mask,
    subsequent_mask,
)
from annotated_transformer.book import explore, viz
from annotated_transformer.book.source import show_source
from annotated_transformer.models.encoder_decoder import make_model

_ = torch.manual_seed(0)
PAD = 0  # the padding token's id in this chapter's toy vocabulary

# %% [markdown]
# ![Masks on one pair, source ein Hund läuft with two padding tokens and target start-token a dog runs with one. Padding masks: a row per sentence, real tokens allowed, padding hidden. subsequent_mask(5): a lower-triangular 5 by 5 grid. make_std_mask(tgt, PAD): the same triangle without the padding column, and the padding query row allowed only its own position.](figures/06_masks.svg)
#
# *The three masks of this chapter on one sentence pair, drawn from the package's
# `padding_mask`, `subsequent_mask` and `make_std_mask`.*

# %% [markdown]
# ## Padding
#
# Four source sentences of lengths 7, 4, 3 and 5, padded to 7 tokens with id 0:

# %%
src = torch.tensor(
    [
        [5, 9, 3, 7, 2, 8, 4],
        [6, 3, 8, 2, PAD, PAD, PAD],
        [7, 4, 9, PAD, PAD, PAD, PAD],
        [3, 5, 2, 6, 9, PAD, PAD],
    ]
)  # (batch, len)
show_source(padding_mask)

# %% [markdown]
# The mask compares every token with the padding id and inserts a singleton query axis, so the
# same row of allowed keys broadcasts to every query position:

# %%
src_mask = padding_mask(src, PAD)
print(
    "tokens:",
    tuple(src.shape),
    " padding mask:",
    tuple(src_mask.shape),
    src_mask.dtype,
)
viz.heatmap(
    src_mask[:, 0].int(),
    x_labels=[str(i) for i in range(src.size(1))],
    y_labels=[f"sentence {b}" for b in range(src.size(0))],
    title="Padding mask of a padded batch (1 = real token, may be attended to)",
    x_title="key position",
    y_title="sentence in the batch",
    value_title="may attend",
    domain=(0, 1),
    height=140,
)

# %% [markdown]
# Inside attention the `(batch, 1, len)` mask broadcasts against the `(batch, len, len)`
# scores: each sentence hides its own padded keys from all of its queries, and the softmax
# gives them weight exactly zero.

# %%
x = torch.randn(4, 7, 16)  # (batch, len, d_k): stand-ins for the projected tokens
_, weights = attention(x, x, x, mask=src_mask)  # weights: (batch, q_len, k_len)
hidden = ~src_mask.expand_as(weights)
assert (weights[hidden] == 0).all()
torch.testing.assert_close(weights.sum(-1), torch.ones(4, 7))
print(
    "weights on padded keys:",
    weights[hidden].abs().max().item(),
    "; rows still sum to 1",
)

# %% [markdown]
# ## Hiding the future
#
# The look-ahead (subsequent) mask is a lower-triangular matrix: query $i$ may see keys
# $0, \dots, i$. The diagonal is included because the decoder's input is shifted right: the
# token at position $i$ is the word *before* the one predicted there, so seeing it is fair.

# %%
show_source(subsequent_mask)

# %% [markdown]
# The Annotated Transformer draws it for 20 positions:

# %%
viz.heatmap(
    subsequent_mask(20)[0].int(),
    title="Subsequent mask, 20 positions (1 = may attend)",
    x_title="key position (earlier → later)",
    y_title="query position",
    value_title="may attend",
    domain=(0, 1),
)

# %% [markdown]
# ## The target mask: both at once, and the padded rows
#
# The decoder's self-attention needs both: no future keys and no padded keys. The
# Annotated Transformer builds it in `Batch.make_std_mask` as the AND of the two masks. Written
# in this book's convention (True = may attend), the original is:


# %%
def original_make_std_mask(tgt: torch.Tensor, pad: int) -> torch.Tensor:
    """The Annotated Transformer's target mask: hide padded keys and the future."""
    return (tgt != pad).unsqueeze(-2) & subsequent_mask(tgt.size(-1))


# (batch, len): a begin-of-sentence token 1, then words; the second is padded
tgt = torch.tensor(
    [
        [1, 4, 7, 3, 9, 2, 6],
        [1, 8, 5, 2, PAD, PAD, PAD],
    ]
)
original = original_make_std_mask(tgt, PAD)
print(tuple(original.shape))

# %% [markdown]
# Look at the padded sentence. Its real queries (rows 0–3) are fine. But the mask only hides
# padded *keys*: the padded *queries* (rows 4–6) still attend to the real tokens 0–3. This is
# harvardnlp/annotated-transformer issue #137, "padded target rows unmasked". With right padding
# it is harmless for training — those rows' outputs are thrown away by the loss, which skips
# padded targets — but it means padded positions do computation on real information, and the
# mask does not say what it means. Worse, with *left* padding (common for decoder-only
# batches), a padded query at position 0 has no key left at all: every score in its row is
# −∞, the softmax computes 0/0 and returns NaN.
#
# The package's `make_std_mask` (alias `target_mask`) keeps what the original does for real
# queries and gives each padded query exactly one key, itself:

# %%
show_source(make_std_mask)

# %%
ours = make_std_mask(tgt, PAD)
labels = ["<s>", "w1", "w2", "w3", "pad", "pad", "pad"]
(
    viz.heatmap(
        original[1].int(),
        labels,
        labels,
        title="Original make_std_mask",
        x_title="key",
        y_title="query",
        value_title="may attend",
        domain=(0, 1),
        width=180,
        height=180,
    )
    | viz.heatmap(
        ours[1].int(),
        labels,
        labels,
        title="Package make_std_mask",
        x_title="key",
        y_title="query",
        value_title="may attend",
        domain=(0, 1),
        width=180,
        height=180,
    )
)

# %% [markdown]
# For the real rows the two masks agree exactly; they differ only in the padded rows:

# %%
real = tgt != PAD  # (batch, len)
assert torch.equal(ours[real], original[real])
# an unpadded sentence: plain look-ahead
assert torch.equal(ours[0], subsequent_mask(7)[0])
assert ours.any(-1).all()  # every query row has at least one key
print("real query rows identical; padded rows attend only to themselves")

# %% [markdown]
# **Explore.** Set the sequence's length, how many of its last tokens are padding, and
# whether the look-ahead mask applies: causal is the decoder's `make_std_mask`, not causal
# the encoder's `padding_mask`. Padding removes columns (keys); the causal mask removes the
# upper triangle, and its padded rows keep only their own key. (The controls work on the page
# without a kernel.)

# %%
explore.mask_explorer()

# %% [markdown]
# :::{admonition} Find the bug
# :class: tip
# {ref}`Exercise 6.3 <ex-06-make-std-mask>` hands you the original's `make_std_mask` to repair.
# :::

# %% [markdown]
# ### No NaN, even with left padding
#
# Take left-padded targets. Written out by hand, the softmax over a fully masked row is NaN;
# the package's `attention` refuses such a mask with a message instead of returning NaN.

# %%
left = torch.tensor([[PAD, PAD, 1, 4, 7], [1, 8, 5, 2, 6]])  # (batch, len)
scores = torch.randn(2, 5, 5)  # (batch, q_len, k_len)
by_hand = scores.masked_fill(
    ~original_make_std_mask(left, PAD), float("-inf")
).softmax(-1)
print(
    "original mask, NaN rows per sentence:",
    by_hand.isnan().all(-1).sum(-1).tolist(),
)
try:
    attention(scores, scores, scores, mask=original_make_std_mask(left, PAD))
except ValueError as error:
    print("package attention:", str(error).split(";")[0])
fixed = scores.masked_fill(~make_std_mask(left, PAD), float("-inf")).softmax(-1)
assert torch.isfinite(fixed).all()
print(
    "package mask, NaN rows per sentence:", fixed.isnan().all(-1).sum(-1).tolist()
)

# %% [markdown]
# In the first sentence, queries 0 and 1 are padding, and the only keys the look-ahead lets
# them see (0 and 1) are padding too: two empty rows, two NaN rows. A NaN does not stay put —
# in the next layer, padded slots are masked keys with weight 0, but 0 × NaN is still NaN, so
# the matrix product spreads it to every real position of the sentence; one NaN in the loss
# then spoils the whole update. The package's mask leaves no row empty.
#
# ### Padded positions do not influence real ones
#
# Through a whole model, the question that matters is whether anything in a padded slot can
# reach a real position. Two checks with a small untrained model (dropout off in `eval` mode):
#
# 1. keep the masks, but put random tokens into the padded slots: the real positions' outputs
#    must not change;
# 2. append extra padding to the target: the real positions' outputs must not change.

# %%
torch.manual_seed(0)
model = make_model(11, 11, N=2, d_model=32, d_ff=64, h=4).eval()
src_mask = padding_mask(src[:2], PAD)
tgt_mask = make_std_mask(tgt, PAD)
with torch.no_grad():
    out = model(src[:2], tgt, src_mask, tgt_mask)  # (batch, len, d_model)

    scrambled = tgt.clone()
    scrambled[~real] = torch.randint(1, 11, (int((~real).sum()),))
    out_scrambled = model(src[:2], scrambled, src_mask, tgt_mask)  # same masks

    longer = torch.cat([tgt, torch.full((2, 3), PAD)], dim=1)
    out_longer = model(src[:2], longer, src_mask, make_std_mask(longer, PAD))

assert torch.isfinite(out).all()
torch.testing.assert_close(out_scrambled[real], out[real])
torch.testing.assert_close(out_longer[:, :7][real], out[real], atol=1e-5, rtol=1e-5)
print("outputs finite:", tuple(out.shape))
print("random tokens in padded slots: real outputs unchanged")
print("three more padding positions:  real outputs unchanged")

# %% [markdown]
# ## The leak check
#
# The look-ahead mask is only correct if *no* path through the decoder — self-attention in
# every layer, feed-forward, layer norms — carries information backwards. The direct test:
# change the target tokens from position $k$ on and check that the decoder outputs at
# positions $0, \dots, k-1$ do not move, for every $k$. As a control, the same experiment
# with only the padding mask (no look-ahead) must show a leak.


# %%
def max_change_before(mask_fn, k: int) -> float:
    """Largest change of the outputs before position k when the targets from k on
    change.
    """
    g = torch.Generator().manual_seed(k)
    changed = tgt_full.clone()
    changed[:, k:] = torch.randint(1, 11, changed[:, k:].shape, generator=g)
    with torch.no_grad():
        before = model(src[:2], tgt_full, src_mask, mask_fn(tgt_full))
        after = model(src[:2], changed, src_mask, mask_fn(changed))
    return (after[:, :k] - before[:, :k]).abs().max().item()


def padding_only(t: torch.Tensor) -> torch.Tensor:
    # (batch, len, len), no look-ahead
    return padding_mask(t, PAD).expand(-1, t.size(1), -1)


# (batch, len)
tgt_full = torch.tensor([[1, 4, 7, 3, 9, 2, 6], [1, 8, 5, 2, 10, 3, 7]])
leak = pd.DataFrame(
    [
        {
            "k (first changed position)": k,
            "max |Δ| before k, target mask": max_change_before(
                lambda t: make_std_mask(t, PAD), k
            ),
            "max |Δ| before k, padding mask only": max_change_before(
                padding_only, k
            ),
        }
        for k in range(1, tgt_full.size(1))
    ]
)
assert (leak["max |Δ| before k, target mask"] == 0).all()
assert (leak["max |Δ| before k, padding mask only"] > 1e-3).all()
shown = leak.copy()
for column in leak.columns[1:]:
    shown[column] = leak[column].map("{:.1e}".format)
shown

# %% [markdown]
# With the target mask, the earlier outputs are *bit-for-bit* unchanged for every $k$: no
# information flows from the future. Without the look-ahead part, every earlier position
# moves — the decoder would be trained to read the answer off the input. The package's unit
# tests run the same check, together with cached decoding, which relies on exactly this
# property: an earlier position's output never has to be recomputed
# when a new token arrives.

# %% [markdown]
# ## Summary
#
# You can now
#
# - build padding, look-ahead and target masks with the right shapes;
# - check a decoder for leaks from the future.
#
# **Next:** [chapter 07 · The full model](07_the_full_model.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/06_masks.py`: fill them in there, then grade them from the
# repository's root with `make exercises CHAPTER=06` (or
# `python -m annotated_transformer.exercises 06`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-06-prefix-lm-mask)=
# ### Exercise 6.1 · A prefix-LM mask, proved with the leak test
#
# A *prefix LM* (UniLM, and T5's decoder-only variant) reads a prompt, the
# prefix, with full bidirectional attention, and generates the rest causally. Build its
# mask for a batch whose rows have different prefix lengths: query $i$ may attend to key
# $j$ when $j$ is in the prefix or $j \le i$. Then prove it with this chapter's leak
# test: the grader runs a PyTorch encoder with your mask, changes the inputs from
# position $k$ on, and checks that no earlier output moves for any $k$ past the prefix,
# and that outputs inside the prefix do see the whole prefix.
#
# Write `prefix_lm_mask(prefix_len, size)`; grade with `make exercises CHAPTER=06`.
#
# :::{dropdown} Solution
# ```python
# def prefix_lm_mask(prefix_len: Tensor, size: int) -> Tensor:
#     """A prefix LM's mask: the prefix is read both ways, the rest causally.
#
#     prefix_len: integer (batch,), how many first positions form each prefix
#     returns bool (batch, size, size), True = may attend: query i sees key j
#     when j < prefix_len (the whole prefix, also from inside it) or j <= i
#     """
#     j = torch.arange(size)
#     in_prefix = j < prefix_len[:, None, None]  # (batch, 1, size)
#     causal = torch.ones(size, size, dtype=torch.bool).tril()  # (size, size)
#     return in_prefix | causal
# ```
# :::

# %% [markdown]
# (ex-06-masked-softmax)=
# ### Exercise 6.2 · Find the bug: a mask fill that breaks in half precision
#
# The original Annotated Transformer hides masked scores with
# `scores.masked_fill(mask == 0, -1e9)`. That is fine in float32, but training in half
# precision (chapter 19) runs the attention in float16. Run the starter's
# `masked_softmax` on float16 scores, read the error, and fix it so that it works in
# every floating-point dtype, with masked weights exactly 0.
#
# Write `masked_softmax(scores, mask)`; grade with `make exercises CHAPTER=06`.
#
# :::{dropdown} Solution
# ```python
# def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
#     """Attention weights: the softmax of the scores where mask is True, or 0.
#
#     scores: (..., q_len, k_len) in any float dtype; mask: bool, broadcastable,
#     True = may attend (every row has at least one True)
#     returns weights of the scores' dtype and shape
#     """
#     lowest = torch.finfo(scores.dtype).min  # -inf would also do
#     return scores.masked_fill(~mask, lowest).softmax(dim=-1)
# ```
# :::

# %% [markdown]
# (ex-06-make-std-mask)=
# ### Exercise 6.3 · Find the bug: padded target rows left unmasked
#
# The starter holds the original's target mask, which this chapter
# showed leaving padded query rows unmasked (issue #137). Fix it: real queries keep
# exactly the original's rows, padded queries must not read any real token, and no row
# may be empty (with left padding the original leaves one empty: NaN).
#
# Write `make_std_mask(tgt, pad)`; grade with `make exercises CHAPTER=06`.
#
# :::{dropdown} Solution
# ```python
# def make_std_mask(tgt: Tensor, pad: int) -> Tensor:
#     """The decoder's self-attention mask: no look-ahead and no padding.
#
#     tgt: integer (batch, len); pad: the padding id
#     returns bool (batch, len, len), True = may attend
#     """
#     length = tgt.size(-1)
#     real = tgt != pad  # (batch, len)
#     causal = torch.ones(length, length, dtype=torch.bool).tril()
#     mask = real[:, None, :] & causal  # real queries: real keys j <= i
#     itself = torch.eye(length, dtype=torch.bool)
#     # a padded query attends to itself only
#     return torch.where(real[:, :, None], mask, itself)
# ```
# :::

# %% [markdown]
# (ex-06-sliding-window-mask)=
# ### Exercise 6.4 · A causal sliding window
#
# Long-context models often let each position attend only to its recent past. Build the
# causal sliding-window mask: query $i$ sees keys $i - \text{window} + 1, \dots, i$ (fewer
# at the start). Chapter 18's sparse attention combines this local
# pattern with a strided one.
#
# Write `sliding_window_mask(size, window)`; grade with `make exercises CHAPTER=06`.
#
# :::{dropdown} Solution
# ```python
# def sliding_window_mask(size: int, window: int) -> Tensor:
#     """Causal attention over the last ``window`` positions only (the local
#     attention of Longformer or Mistral, in its causal form).
#
#     returns bool (size, size): query i sees key j when i - window < j <= i
#     """
#     i = torch.arange(size)[:, None]
#     j = torch.arange(size)[None, :]
#     return (j <= i) & (j > i - window)
# ```
# :::
