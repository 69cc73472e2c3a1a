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
# # 05 · Normalisation and residuals
#
# - **You will learn** layer normalisation by hand and its relatives, what residual connections do to gradients, and pre-norm against post-norm.
# - **It assumes** [chapter 02](02_self_attention.ipynb).
# - **Time:** about 15 minutes to read; it runs in under a minute.
#
# Every sublayer of the Transformer — attention or feed-forward — sits inside the same
# wrapper: a *residual connection* around it and a *layer normalisation* next to it. The
# paper says it in one sentence (§3.1):
#
# > We employ a residual connection around each of the two sub-layers, followed by layer
# > normalization. That is, the output of each sub-layer is
# > $\mathrm{LayerNorm}(x + \mathrm{Sublayer}(x))$.
#
# Both pieces exist for the same reason: a stack of 6 (or 48) layers only learns if the signal
# going forward and the gradient coming back keep a sensible size at every depth. Layer
# normalisation resets the *scale* of each token's vector; the residual connection gives the
# gradient a path that no layer can shrink. This chapter builds layer norm by hand, compares
# it with its relatives (batch, group and instance norm), measures what residual connections
# do to gradients in a deep stack, and explains why the package — like the Annotated
# Transformer's code, but unlike the paper's sentence — normalises *before* each sublayer.

# %%
import altair as alt
import numpy as np
import pandas as pd
import torch
from torch import nn

from annotated_transformer.blocks.attention import MultiHeadedAttention
from annotated_transformer.blocks.feed_forward import PositionwiseFeedForward
from annotated_transformer.blocks.layers import (
    EncoderLayer,
    SublayerConnection,
    TransformerBlock,
)
from annotated_transformer.blocks.norms import LayerNorm
from annotated_transformer.book import viz
from annotated_transformer.book.source import show_source
from annotated_transformer.models.encoder_only import EncoderConfig

_ = torch.manual_seed(0)

# %% [markdown]
# ## Layer normalisation by hand
#
# Layer normalisation ([Ba, Kiros and Hinton, 2016](../book/references.md#ba-kiros-and-hinton-2016)) looks at one token's vector
# $x \in \mathbb{R}^{d}$ at a time — for the Transformer, $d = d_\text{model}$ — and
# standardises it with statistics computed from that vector alone:
#
# $$\mu = \frac{1}{d}\sum_{i=1}^{d} x_i, \qquad
# \sigma^2 = \frac{1}{d}\sum_{i=1}^{d} (x_i - \mu)^2,$$
#
# $$\mathrm{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}} + \beta .$$
#
# After the division the features have mean 0 and variance 1 (up to ε). The learned gain
# $\gamma$ and bias $\beta$ (one per feature, starting at 1 and 0) let the model undo the
# standardisation where that helps, so nothing is lost in expressiveness. Because the
# statistics come from the token itself, the result does not depend on the batch, on the
# other tokens, or on the sequence length — which matters for variable-length text and for
# decoding one token at a time.
#
# In tensor code every step reduces over the last axis only:

# %%
x = 3 * torch.randn(2, 5, 512) + 1  # (batch, len, d_model), deliberately off-scale
eps = 1e-5
mu = x.mean(-1, keepdim=True)  # (batch, len, 1): one mean per token
var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased: divide by d, not d - 1
gamma, beta = torch.ones(512), torch.zeros(512)
by_hand = gamma * (x - mu) / torch.sqrt(var + eps) + beta

reference = nn.LayerNorm(512, eps=eps)
torch.testing.assert_close(by_hand, reference(x))
print("by hand == nn.LayerNorm:", tuple(by_hand.shape))
per_token_var = by_hand.var(-1, unbiased=False)
print(f"largest |per-token mean|: {by_hand.mean(-1).abs().max():.0e}")
print(f"per-token variance: {per_token_var.min():.4f} to {per_token_var.max():.4f}")

# %% [markdown]
# ### The original's variant
#
# The Annotated Transformer writes its own `LayerNorm`. The package keeps it, to show the
# formula in code:

# %%
show_source(LayerNorm)

# %% [markdown]
# It differs from the formula above in two small ways:
#
# 1. `x.std(-1)` is the *unbiased* standard deviation, dividing by $d-1$ instead of $d$;
# 2. ε is added to the standard deviation, not to the variance inside the square root.
#
# Ignoring ε, the unbiased std is larger by a factor $\sqrt{d/(d-1)}$, so every output of
# the original is smaller than the standard layer norm's by the factor
# $\sqrt{(d-1)/d}$ (harvardnlp/annotated-transformer issue #122). For $d = 512$ that is
# $0.99902$: a relative difference of about $10^{-3}$. Let us measure it rather than believe it,
# for several widths:

# %%
rows = []
for d in (8, 64, 512, 2048):
    g = torch.Generator().manual_seed(d)
    z = torch.randn(64, 10, d, generator=g)  # (batch, len, d)
    ours, theirs = LayerNorm(d)(z), nn.LayerNorm(d)(z)
    # least-squares scale factor
    ratio = (ours * theirs).sum() / (theirs * theirs).sum()
    predicted = np.sqrt((d - 1) / d)
    assert abs(ratio.item() - predicted) < 1e-4, (d, ratio, predicted)
    rows.append(
        {
            "d": d,
            "measured ratio": round(ratio.item(), 6),
            "√((d−1)/d)": round(predicted, 6),
            "max |difference|": f"{(ours - theirs).abs().max():.2e}",
        }
    )
pd.DataFrame(rows)

# %% [markdown]
# The measured scale factor matches $\sqrt{(d-1)/d}$ to about six digits (ε moves it in the
# seventh). At the base model's $d = 512$ the largest element-wise difference is a few
# thousandths — harmless for training (the gain $\gamma$ absorbs any constant factor), but
# enough to make a model's outputs differ from PyTorch's beyond `assert_close` tolerances.
#
# That is why the package's stacks use `nn.LayerNorm` and keep the hand-written class for
# teaching only: `nn.LayerNorm` is Ba et al.'s exact formula, it runs as one fused kernel, and
# it is what `torch.nn.Transformer` uses — so [chapter 07](07_the_full_model.ipynb) can check the whole model against
# PyTorch's with the same weights.

# %% [markdown]
# :::{admonition} Find the bug
# :class: tip
# {ref}`Exercise 5.3 <ex-05-layer-norm>` hands you the original's layer norm to repair.
# :::

# %% [markdown]
# ## Batch, layer, group and instance norm: which axes?
#
# Layer norm is one member of a family. All of them compute $(x-\mu)/\sqrt{\sigma^2+\varepsilon}$;
# they differ only in *which elements share one* $\mu$ *and* $\sigma$. Take an activation
# tensor of shape (batch, channels, positions) — channels are the Transformer's $d_\text{model}$
# features, positions its tokens:
#
# - **batch norm** ([Ioffe and Szegedy, 2015](../book/references.md#ioffe-and-szegedy-2015)): one statistic per *channel*, over the batch and
#   all positions. It couples the examples of a batch and needs running averages at test time —
#   awkward for padded, variable-length text.
# - **layer norm**, as Transformers use it: one statistic per *token* (per example and
#   position), over the channels.
# - **group norm** ([Wu and He, 2018](../book/references.md#wu-and-he-2018)): channels are split into groups; one statistic per example
#   and group, over the group's channels and all positions.
# - **instance norm** ([Ulyanov et al., 2016](../book/references.md#ulyanov-et-al-2016)): one statistic per example and channel, over the
#   positions.
#
# In the picture below, each panel is one normalisation and each small grid one example of a
# batch of 3 (6 channels × 4 positions). Cells of the same colour share one mean and one
# variance.

# %%
B, C, L, GROUPS = 3, 6, 4, 2
b, c, p = np.meshgrid(np.arange(B), np.arange(C), np.arange(L), indexing="ij")
statistic_set = {  # element (b, c, p) -> which (mean, variance) it uses
    "batch norm": c,
    "layer norm (per token)": b * L + p,
    f"group norm ({GROUPS} groups)": b * GROUPS + c // (C // GROUPS),
    "instance norm": b * C + c,
}
grid = pd.concat(
    pd.DataFrame(
        {
            "norm": name,
            "example": b.ravel(),
            "channel": c.ravel(),
            "position": p.ravel(),
            "statistics": sets.ravel(),
        }
    )
    for name, sets in statistic_set.items()
)
(
    alt.Chart(grid)
    .mark_rect(stroke="white", strokeWidth=1)
    .encode(
        x=alt.X("position:O", title="position"),
        y=alt.Y("channel:O", title="channel"),
        color=alt.Color(
            "statistics:N", scale=alt.Scale(scheme="tableau20"), legend=None
        ),
        tooltip=["norm", "example", "channel", "position", "statistics"],
    )
    .properties(width=80, height=110)
    .facet(
        row=alt.Row(
            "norm:N",
            title=None,
            sort=list(statistic_set),
            header=alt.Header(
                labelAngle=0, labelAlign="left", labelFontWeight="bold"
            ),
        ),
        column=alt.Column("example:O", title="example in the batch"),
    )
    .properties(
        title=("Which elements share one mean and variance (same colour = same "
            "statistics)")
    )
)

# %% [markdown]
# The count of distinct colours is the number of (μ, σ) pairs each norm computes:

# %%
pd.DataFrame(
    {
        "norm": list(statistic_set),
        "statistics computed": [len(np.unique(s)) for s in statistic_set.values()],
        "elements per statistic": [
            s.size // len(np.unique(s)) for s in statistic_set.values()
        ],
    }
)

# %% [markdown]
# A picture can be drawn wrong, so let us check it numerically. One function normalises over
# any set of axes; each norm is that function with the right axes (group norm first splits the
# channel axis into (groups, channels per group)). The references are PyTorch's own modules,
# without their affine parameters.


# %%
def normalise(
    x: torch.Tensor, dims: tuple[int, ...], eps: float = 1e-5
) -> torch.Tensor:
    """(x - mean) / sqrt(biased var + eps), the statistics taken over ``dims``."""
    mean = x.mean(dims, keepdim=True)
    var = x.var(dims, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps)


x = torch.randn(B, C, L) * 2 + 0.5  # (batch, channels, positions)
checks = {
    "batch norm": (
        normalise(x, (0, 2)),
        # training mode: batch statistics
        nn.BatchNorm1d(C, affine=False).train()(x),
    ),
    "layer norm (per token)": (
        normalise(x, (1,)),
        nn.LayerNorm(C, elementwise_affine=False)(x.transpose(1, 2)).transpose(
            1, 2
        ),
    ),
    f"group norm ({GROUPS} groups)": (
        normalise(x.view(B, GROUPS, C // GROUPS, L), (2, 3)).view(B, C, L),
        nn.GroupNorm(GROUPS, C, affine=False)(x),
    ),
    "instance norm": (normalise(x, (2,)), nn.InstanceNorm1d(C)(x)),
}
for name, (ours, torch_module) in checks.items():
    torch.testing.assert_close(ours, torch_module)
    print(f"{name:24} matches PyTorch")

# %% [markdown]
# One naming trap: in the group-norm paper's figure (drawn for images), "layer norm"
# normalises each example over *all* channels and positions together — that is group norm with
# one group. Transformers normalise each token separately, over its channels only, which is
# what `nn.LayerNorm(d_model)` does to a (batch, len, d_model) tensor.

# %%
torch.testing.assert_close(
    nn.GroupNorm(1, C, affine=False)(x),
    nn.LayerNorm([C, L], elementwise_affine=False)(x),
)
print("group norm with 1 group == layer norm over (channels, positions)")

# %% [markdown]
# ## Residual connections keep the gradient alive
#
# A residual connection computes $x + f(x)$ instead of $f(x)$ ([He et al., 2016](../book/references.md#he-et-al-2016)). Its
# Jacobian is $I + \partial f/\partial x$: however small the layer's own derivative, the
# identity carries the gradient through unchanged. Without it the gradient reaching layer
# $\ell$ is a product of $L-\ell$ Jacobians, and a product of many matrices with gains below
# one shrinks geometrically.
#
# The experiment: 48 small layers $f(x) = \tanh(xW + b)$ (width 32, PyTorch's default
# initialisation), once stacked plainly and once with residual connections. We run one batch
# through, take a simple loss (the mean square of the output) and look at the gradient norm of
# each layer's weight matrix.


# %%
def weight_gradients(depth: int, width: int, residual: bool) -> list[float]:
    """Norm of dLoss/dW for each layer of a tanh stack, at initialisation."""
    torch.manual_seed(0)  # the same weights and inputs for both variants
    layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
    x = torch.randn(64, width)  # (batch, width)
    for layer in layers:
        y = torch.tanh(layer(x))
        x = x + y if residual else y
    x.pow(2).mean().backward()
    return [layer.weight.grad.norm().item() for layer in layers]


depth = 48
residual_frame = pd.concat(
    pd.DataFrame(
        {
            "layer": np.arange(1, depth + 1),
            "gradient norm": weight_gradients(depth, 32, residual),
            "stack": "with residuals" if residual else "plain",
        }
    )
    for residual in (False, True)
)
viz.line_chart(
    residual_frame,
    "layer",
    "gradient norm",
    color="stack",
    log_y=True,
    title="Gradient norm per layer in a 48-layer tanh stack at initialisation",
    x_title="layer (1 = next to the input)",
    y_title="‖∂loss/∂W‖ (log scale)",
    width=380,
)

# %%
summary = residual_frame.pivot(
    index="layer", columns="stack", values="gradient norm"
)
print(summary.loc[[1, 24, 48]].map(lambda v: f"{v:.2e}"))
plain = summary["plain"]
assert plain[1] < 1e-9 * plain[depth]  # vanished by more than a factor of a billion
assert summary["with residuals"].min() > 0.1 * summary["with residuals"].max()

# %% [markdown]
# In the plain stack the first layer's gradient is more than a billion times smaller than the
# last layer's: after a few dozen layers the early ones receive practically no learning signal.
# With residual connections every layer gets a gradient of about the same size. This is what
# lets the Transformer stack 6, 12 or 96 layers.

# %% [markdown]
# ## Post-norm or pre-norm?
#
# Where does the layer norm go relative to the residual sum? The paper's sentence puts it
# *after* the sum — **post-norm**:
#
# $$x_{\ell+1} = \mathrm{LN}\big(x_\ell + \mathrm{Sublayer}(x_\ell)\big).$$
#
# Bloem's `former` follows the text, and so does the package's `TransformerBlock`, which the
# encoder-only and decoder-only models of Part V use (its `forward` is two lines:
# `norm1(x + attention)`, then `norm2(x + feed_forward)`). The Annotated Transformer's *code*
# instead normalises the sublayer's input and leaves the sum alone — **pre-norm**:
#
# $$x_{\ell+1} = x_\ell + \mathrm{Sublayer}\big(\mathrm{LN}(x_\ell)\big).$$
#
# The package's encoder-decoder follows the code:

# %% [markdown]
# ![Two residual blocks side by side. Post-norm (TransformerBlock): x goes through the sublayer and dropout, is added to x, then LayerNorm: LN(x + Sublayer(x)). Pre-norm (SublayerConnection): x goes through LayerNorm, the sublayer and dropout, then is added to x, so the skip path from x to the output is a plain identity: x + Sublayer(LN(x)).](figures/05_residual_norms.svg)
#
# *Where the norm goes: after the residual sum (post-norm, the paper's text) or
# before the sublayer (pre-norm, the Annotated Transformer's code).*

# %%
show_source(SublayerConnection)

# %% [markdown]
# With pre-norm the path from the input to the output is a plain sum,
# $x_L = x_0 + \sum_\ell \mathrm{Sublayer}_\ell(\cdot)$: nothing rescales the residual stream,
# so a final `LayerNorm` after the last layer is needed (the package's `Encoder` and `Decoder`
# have one, [chapter 07](07_the_full_model.ipynb)). With post-norm every residual sum passes through a layer norm, whose
# Jacobian divides by the current standard deviation; the gradient to a lower layer crosses all
# of them.
#
# Xiong et al. (2020, "On Layer Normalization in the Transformer Architecture") analysed what
# this means at initialisation: in a post-norm stack the layers next to the output receive the
# largest gradients, and their size does not shrink as the stack gets deeper; in a pre-norm
# stack the gradient of the top layers falls like $1/\sqrt{L}$. Large gradients at the top,
# combined with Adam's full-sized first steps, are why post-norm Transformers need a careful
# learning-rate warm-up, while pre-norm ones train deep stacks without one.
#
# We can measure this with the package's own blocks: stacks of `TransformerBlock`
# (post-norm) and `EncoderLayer` (pre-norm, plus the final norm), width 32, 4 heads,
# feed-forward 4× wider, Glorot-initialised, dropout off; the same input and a regression
# loss against a random target.

# %%
D_MODEL, HEADS = 32, 4


def build_stack(kind: str, depth: int) -> nn.ModuleList:
    torch.manual_seed(0)
    sizes = EncoderConfig(d_model=D_MODEL, h=HEADS, d_ff=4 * D_MODEL, dropout=0.0)
    if kind == "post-norm":
        layers = [TransformerBlock(sizes) for _ in range(depth)]
    else:
        layers = [
            EncoderLayer(
                D_MODEL,
                MultiHeadedAttention(HEADS, D_MODEL, dropout=0.0),
                PositionwiseFeedForward(D_MODEL, 4 * D_MODEL, dropout=0.0),
                dropout=0.0,
            )
            for _ in range(depth)
        ]
    stack = nn.ModuleList(layers)
    for parameter in stack.parameters():
        if parameter.dim() > 1:
            nn.init.xavier_uniform_(parameter)
    return stack


def layer_gradients(kind: str, depth: int) -> list[float]:
    """Gradient norm of all parameters of each layer, at initialisation."""
    stack = build_stack(kind, depth)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 8, D_MODEL, generator=g)  # (batch, len, d_model)
    target = torch.randn(4, 8, D_MODEL, generator=g)
    for layer in stack:
        x = layer(x, None)
    if kind == "pre-norm":
        x = nn.functional.layer_norm(x, (D_MODEL,))  # the stack's final norm
    ((x - target) ** 2).mean().backward()
    return [
        torch.cat([p.grad.flatten() for p in layer.parameters()]).norm().item()
        for layer in stack
    ]


DEPTHS = (3, 6, 12, 24)
gradients = {
    (kind, n): layer_gradients(kind, n)
    for kind in ("post-norm", "pre-norm")
    for n in DEPTHS
}

# %%
per_layer = pd.concat(
    pd.DataFrame(
        {
            "layer": np.arange(1, 25),
            "gradient norm": gradients[kind, 24],
            "stack": kind,
        }
    )
    for kind in ("post-norm", "pre-norm")
)
viz.line_chart(
    per_layer,
    "layer",
    "gradient norm",
    color="stack",
    log_y=True,
    title="Gradient norm per layer at initialisation, 24-layer stacks",
    x_title="layer (1 = next to the input)",
    y_title="‖∂loss/∂θ_layer‖ (log scale)",
    width=380,
)

# %% [markdown]
# And the top layer's gradient as the stack gets deeper:

# %%
top = pd.DataFrame(
    [
        {"stack": kind, "layers": n, "top-layer gradient": gradients[kind, n][-1]}
        for kind in ("post-norm", "pre-norm")
        for n in DEPTHS
    ]
)
table = top.pivot(index="layers", columns="stack", values="top-layer gradient")
table["pre-norm × √layers"] = table["pre-norm"] * np.sqrt(table.index)
print(table.map(lambda v: f"{v:.3f}"))

# %%
viz.line_chart(
    top,
    "layers",
    "top-layer gradient",
    color="stack",
    log_y=True,
    title="Gradient norm of the top layer against depth, at initialisation",
    x_title="number of layers",
    y_title="‖∂loss/∂θ_top‖ (log scale)",
    width=380,
).mark_line(point=True)

# %%
post, pre = table["post-norm"], table["pre-norm"]
assert post.max() < 2 * post.min()  # post-norm: about the same whatever the depth
assert pre[24] < 0.6 * pre[3]  # pre-norm: falls as the stack deepens
assert (post > pre).all()
post_24 = gradients["post-norm", 24]
# post-norm: the top layer gets the largest gradient
assert post_24[-1] == max(post_24)
print(
    "post-norm top layer: depth-independent; pre-norm top layer: shrinks with depth"
)

# %% [markdown]
# The measurements follow the analysis. In the post-norm stacks the top layer's gradient stays
# of the same size at every depth (it even grows a little), and in the 24-layer stack it is the
# largest of all layers. In the pre-norm stacks it shrinks as layers are added — roughly like
# $1/\sqrt{L}$: the last column, the gradient times $\sqrt{L}$, stays nearly level while the
# depth grows eightfold — and within a pre-norm stack the gradients are largest
# near the input, not at the top. An optimiser's first steps therefore move a pre-norm stack
# gently, with no oversized steps at the top; a post-norm stack needs its learning rate warmed
# up (the paper warms up over 4,000 steps, [chapter 08](08_training.ipynb)) before it can take full-sized steps.
#
# The cost of pre-norm is small: the final norm after each stack, and a residual stream whose
# scale grows with depth (harmless, since every sublayer sees a normalised copy). Most large
# models since GPT-2 use pre-norm; the package uses it for the encoder-decoder and keeps
# Bloem's post-norm `TransformerBlock` for the small encoder-only and decoder-only models of
# Part V, which are shallow enough not to care.

# %% [markdown]
# ## Summary
#
# You can now
#
# - write layer norm by hand and say which axes each normalisation uses;
# - measure what residual connections do to gradients in a deep stack;
# - choose between pre-norm and post-norm blocks.
#
# **Next:** [chapter 06 · Masks](06_masks.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/05_normalisation_and_residuals.py`: fill them in there, then
# grade them from the repository's root with `make exercises CHAPTER=05` (or
# `python -m annotated_transformer.exercises 05`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-05-running-statistics)=
# ### Exercise 5.1 · Batch norm's running averages
#
# Batch norm needs running averages of its statistics for test time, when there is no
# batch to average over. Write the update one training batch makes to them, per channel:
# $\text{new} = (1 - m)\,\text{old} + m\,\text{batch statistic}$. The grader compares
# with the running buffers `F.batch_norm` updates; mind which variance PyTorch keeps.
#
# Write `running_statistics(x, mean, var, momentum)`; grade with
# `make exercises CHAPTER=05`.
#
# :::{dropdown} Solution
# ```python
# def running_statistics(
#     x: Tensor, mean: Tensor, var: Tensor, momentum: float
# ) -> tuple[Tensor, Tensor]:
#     """Batch norm's running averages after one training batch.
#
#     x: (batch, channels, positions); mean, var: (channels,), running averages
#     returns the new (mean, var): (1 - momentum)·old + momentum·statistic, the
#     batch's statistic, its variance unbiased (divided by n - 1, n = batch ·
#     positions)
#     """
#     batch_mean = x.mean(dim=(0, 2))
#     batch_var = x.var(dim=(0, 2), unbiased=True)
#     new_mean = (1 - momentum) * mean + momentum * batch_mean
#     return new_mean, (1 - momentum) * var + momentum * batch_var
# ```
# :::

# %% [markdown]
# (ex-05-token-group-norm)=
# ### Exercise 5.2 · Group norm, one token at a time
#
# A per-token variant of group norm: split each token's $d_\text{model}$ features into
# `groups` groups and standardise each group with its own mean and variance (no gain, no
# bias). With one group it is layer norm. The grader compares with `nn.GroupNorm` applied
# to the tokens as a batch of vectors.
#
# Write `token_group_norm(x, groups)`; grade with `make exercises CHAPTER=05`.
#
# :::{dropdown} Solution
# ```python
# def token_group_norm(x: Tensor, groups: int, eps: float = 1e-5) -> Tensor:
#     """Group norm of each token on its own: its features split into ``groups``
#     groups, each standardised with its own mean and (biased) variance.
#
#     x: (batch, len, d_model), d_model divisible by groups -> the same shape
#     """
#     batch, length, d_model = x.shape
#     g = x.reshape(batch, length, groups, d_model // groups)
#     mu = g.mean(-1, keepdim=True)
#     var = g.var(-1, unbiased=False, keepdim=True)
#     return ((g - mu) / torch.sqrt(var + eps)).reshape(x.shape)
# ```
# :::

# %% [markdown]
# (ex-05-layer-norm)=
# ### Exercise 5.3 · Find the bug: the original's LayerNorm
#
# The starter holds the original Annotated Transformer's layer norm,
# which this chapter measured against `nn.LayerNorm`. Repair it so that it computes Ba et
# al.'s formula exactly; the grader compares with `nn.LayerNorm` at $d = 8$, where the
# difference is large.
#
# Write `layer_norm(x, gamma, beta, eps)`; grade with `make exercises CHAPTER=05`.
#
# :::{dropdown} Solution
# ```python
# def layer_norm(
#     x: Tensor,
#     gamma: Tensor,
#     beta: Tensor,
#     eps: float = 1e-5,
# ) -> Tensor:
#     """Layer norm over the last axis: gamma (x - μ) / √(σ² + eps) + beta.
#
#     x: (..., d); gamma, beta: (d,); σ² the biased variance (divided by d)
#     """
#     mu = x.mean(-1, keepdim=True)
#     var = x.var(-1, unbiased=False, keepdim=True)
#     return gamma * (x - mu) / torch.sqrt(var + eps) + beta
# ```
# :::

# %% [markdown]
# (ex-05-residual-block)=
# ### Exercise 5.4 · Pre-norm and post-norm sub-layers
#
# Write one residual sub-layer both ways: pre-norm, $x + f(\mathrm{LN}(x))$, as this book's
# stacks do, and post-norm, $\mathrm{LN}(x + f(x))$, as the paper's sentence says.
#
# Write `residual_block(x, sublayer, norm, pre_norm)`; grade with
# `make exercises CHAPTER=05`.
#
# :::{dropdown} Solution
# ```python
# def residual_block(
#     x: Tensor,
#     sublayer: Callable[[Tensor], Tensor],
#     norm: nn.Module,
#     pre_norm: bool,
# ) -> Tensor:
#     """One residual sub-layer: pre-norm x + f(LN(x)), post-norm LN(x + f(x)).
#
#     x: (batch, len, d_model); sublayer f and norm LN keep that shape
#     """
#     if pre_norm:
#         return x + sublayer(norm(x))
#     return norm(x + sublayer(x))
# ```
# :::
