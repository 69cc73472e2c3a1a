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
# # 07 · The full model
#
# - **You will learn** how the parts become the paper's encoder-decoder, how many parameters it has, and that it computes what `torch.nn.Transformer` computes.
# - **It assumes** chapters [02](02_self_attention.ipynb) to [06](06_masks.ipynb).
# - **Time:** about 15 minutes to read; it runs in under a minute.
#
# The previous chapters built the parts: multi-head attention (02), token embeddings (03),
# positional encodings (04), layer norm and residual connections (05) and masks (06). This
# chapter assembles them into the model of the paper's Figure 1, with one change, the
# Annotated Transformer's: its layers are **pre-norm**, `x + sublayer(norm(x))`, where the
# paper's Figure 1 and text are post-norm, `norm(x + sublayer(x))` ([chapter
# 05](05_normalisation_and_residuals.ipynb) says why; the post-norm block returns at the end
# of this chapter):
#
# > The encoder maps an input sequence of symbol representations $(x_1, \dots, x_n)$ to a
# > sequence of continuous representations $z = (z_1, \dots, z_n)$. Given $z$, the decoder then
# > generates an output sequence $(y_1, \dots, y_m)$ of symbols one element at a time. At each
# > step the model is auto-regressive, consuming the previously generated symbols as
# > additional input when generating the next.
#
# Bottom-up: the position-wise feed-forward network, the encoder and decoder layers and their
# stacks, the embeddings with positions, the generator, and `make_model`, which wires them
# together. Then we count the base model's parameters two ways, let an untrained model
# "translate", check the whole thing against `torch.nn.Transformer` with the same weights, and
# meet the post-norm block used by the encoder-only and decoder-only models of Part V.

# %%
import warnings

import altair as alt
import pandas as pd
import torch
from torch import nn

from annotated_transformer.blocks.attention import MultiHeadedAttention
from annotated_transformer.blocks.embeddings import Embeddings, TokenAndPosition
from annotated_transformer.blocks.feed_forward import PositionwiseFeedForward
from annotated_transformer.blocks.layers import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    TransformerBlock,
    clones,
)
from annotated_transformer.blocks.masks import (
    make_std_mask,
    padding_mask,
    subsequent_mask,
)
from annotated_transformer.blocks.positional import PositionalEncoding
from annotated_transformer.book.source import show_source
from annotated_transformer.models.encoder_decoder import (
    EncoderDecoder,
    Generator,
    make_model,
    parameter_counts,
    parameter_formula,
)
from annotated_transformer.models.encoder_only import EncoderConfig

_ = torch.manual_seed(0)
PAD = 0

# %% [markdown]
# ![The whole EncoderDecoder built by make_model, top to bottom: src goes through src_embed (TokenAndPosition: Embeddings plus PositionalEncoding) into the encoder (Encoder: N = 6 EncoderLayers, each self_attn MultiHeadedAttention and feed_forward PositionwiseFeedForward, then norm LayerNorm), which gives memory. tgt goes through tgt_embed into the decoder (Decoder: N = 6 DecoderLayers, each self_attn, src_attn reading memory, feed_forward, then norm), then generator (Generator) gives log-probabilities.](figures/07_full_model.svg)
#
# *The model this chapter assembles, each box labelled with its attribute and the
# package class that implements it (`make_model`'s default N = 6).*

# %% [markdown]
# ## Position-wise feed-forward network
#
# Attention mixes information *between* positions; it is a weighted average, so on its own it
# is nearly linear in the values. Each layer therefore also has a small two-layer MLP that
# transforms every position *separately*, with the same weights at every position (§3.3):
#
# $$\mathrm{FFN}(x) = \max(0, xW_1 + b_1)W_2 + b_2,$$
#
# with $W_1 \in \mathbb{R}^{d_\text{model}\times d_\text{ff}}$ and
# $W_2 \in \mathbb{R}^{d_\text{ff}\times d_\text{model}}$.
#
# The inner width $d_\text{ff} = 2048$ is four times $d_\text{model} = 512$: two thirds of an
# encoder layer's parameters live here. Dropout sits on the hidden activations, as in the
# original code.

# %%
show_source(PositionwiseFeedForward)

# %% [markdown]
# The formula, written out with the module's own weights (`nn.Linear` stores $W^\top$), and
# the "position-wise" claim — running positions one at a time gives the same result:

# %%
ffn = PositionwiseFeedForward(d_model=16, d_ff=64, dropout=0.1).eval()
x = torch.randn(2, 5, 16)  # (batch, len, d_model)
w1, b1, w2, b2 = ffn.w_1.weight.T, ffn.w_1.bias, ffn.w_2.weight.T, ffn.w_2.bias
by_formula = torch.clamp(x @ w1 + b1, min=0) @ w2 + b2
torch.testing.assert_close(ffn(x), by_formula)
one_at_a_time = torch.stack([ffn(x[:, i]) for i in range(5)], dim=1)
torch.testing.assert_close(ffn(x), one_at_a_time)
print(
    "FFN == max(0, xW₁+b₁)W₂+b₂, position by position:", tuple(ffn(x).shape)
)

# %% [markdown]
# ## Encoder layer and encoder
#
# An encoder layer is two sublayers — self-attention, then the feed-forward network — each
# wrapped in the pre-norm residual connection of [chapter 05](05_normalisation_and_residuals.ipynb), `x + dropout(sublayer(norm(x)))`:
# the norm comes first, inside the residual branch, not after the sum as in the paper's
# Figure 1.
# `clones` makes the N identical layers (and the two wrappers) as independent deep copies:
# same shapes, separately trained weights.

# %%
show_source(clones, EncoderLayer, Encoder)

# %% [markdown]
# The encoder ends with one more `LayerNorm`: with pre-norm, the residual stream that leaves
# the last layer has never been normalised. The `lambda` in `EncoderLayer.forward` is how the
# original passes "self-attention with this mask" as a one-argument sublayer.


# %%
D, H = 32, 4  # a small model to look at shapes
encoder = Encoder(
    EncoderLayer(
        D, MultiHeadedAttention(H, D, 0.1), PositionwiseFeedForward(D, 4 * D), 0.1
    ),
    N=2,
).eval()
src = torch.tensor([[5, 9, 3, 7, 2], [6, 3, 8, PAD, PAD]])  # (batch, src_len)
src_mask = padding_mask(src, PAD)  # (batch, 1, src_len)
memory = encoder(torch.randn(2, 5, D), src_mask)
print("memory:", tuple(memory.shape), "= (batch, src_len, d_model)")
first, second = encoder.layers[0], encoder.layers[1]
assert (
    first.feed_forward.w_1.weight.data_ptr()
    != second.feed_forward.w_1.weight.data_ptr()
)
print("layers share no storage:", len(encoder.layers), "independent copies")

# %% [markdown]
# ## Decoder layer and decoder
#
# A decoder layer has a third sublayer between the two: **source attention** (the paper's
# "encoder-decoder attention"), where the queries come from the decoder and the keys and values
# from the encoder's output `memory` — this is where the translation looks at the source
# sentence. Its self-attention uses the target mask of [chapter 06](06_masks.ipynb), so position $i$ sees only
# target positions up to $i$; source attention uses the source padding mask.

# %%
show_source(DecoderLayer, Decoder)

# %% [markdown]
# In training the whole shifted target goes through at once. (Generation feeds one new token
# at a time and keeps the keys and values of earlier positions: chapter 09's subclasses of
# these layers add that cache.)

# %%
decoder = Decoder(
    DecoderLayer(
        D,
        MultiHeadedAttention(H, D, 0.1),
        MultiHeadedAttention(H, D, 0.1),
        PositionwiseFeedForward(D, 4 * D),
        0.1,
    ),
    N=2,
).eval()
tgt = torch.tensor([[1, 4, 7, 3], [1, 8, 5, PAD]])  # (batch, tgt_len)
hidden = decoder(torch.randn(2, 4, D), memory, src_mask, make_std_mask(tgt, PAD))
print("decoder output:", tuple(hidden.shape), "= (batch, tgt_len, d_model)")

# %% [markdown]
# ## Embeddings, positions and the generator
#
# Chapters [03](03_tokens_and_embeddings.ipynb) and [04](04_positional_encoding.ipynb) derive these; here is how they plug in. Token ids become learned vectors
# scaled by $\sqrt{d_\text{model}}$, then the sinusoidal position of each token is added (with
# dropout). `TokenAndPosition` chains the two and passes on the position `offset` that cached
# decoding (chapter 09) needs.

# %%
show_source(Embeddings, PositionalEncoding, TokenAndPosition)

# %% [markdown]
# At the top of the decoder, the generator turns each position's $d_\text{model}$-vector into
# a distribution over the target vocabulary: one linear layer and a log-softmax (§3.4). Its
# `logits` method skips the softmax, for the fused cross-entropy of Part III.

# %%
show_source(Generator)

# %% [markdown]
# ## The encoder-decoder and `make_model`
#
# `EncoderDecoder` holds the five parts. `encode` embeds and encodes the source once; `decode`
# embeds the target prefix and runs the decoder over the memory. The methods validate their
# inputs, so a wrong mask shape fails with a sentence, not a broadcasting error deep inside
# attention.

# %%
show_source(EncoderDecoder)

# %% [markdown]
# `make_model` builds a model from the hyper-parameters. Every layer is a deep copy of one
# prototype (`c = copy.deepcopy`), and then every matrix is re-initialised with Glorot
# (Xavier) uniform, as in the original: $W \sim U(-a, a)$ with
# $a = \sqrt{6/(\text{fan}_\text{in} + \text{fan}_\text{out})}$, which keeps the variance of
# activations and gradients about constant from layer to layer.

# %%
show_source(make_model)

# %% [markdown]
# The base model of the paper: $N = 6$, $d_\text{model} = 512$, $d_\text{ff} = 2048$, $h = 8$,
# dropout 0.1. The paper's English–German vocabulary is a shared byte-pair vocabulary of about
# 37,000 tokens, so we use that size for both sides.

# %%
VOCAB = 37000
torch.manual_seed(0)
base = make_model(VOCAB, VOCAB, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1)
# (d_ff, d_model) = (fan_out, fan_in)
w = base.encoder.layers[0].feed_forward.w_1.weight
bound = (6 / (w.size(0) + w.size(1))) ** 0.5
print(f"w_1 of encoder layer 0: {tuple(w.shape)}, Glorot bound a = {bound:.4f}")
print(
    f"  max |w| = {w.abs().max():.4f}, std = {w.std():.4f} (uniform: a/√3 = "
    f"{bound / 3**0.5:.4f})"
)
assert w.abs().max() <= bound and abs(w.std() - bound / 3**0.5) < 1e-3

# %% [markdown]
# ## Counting the parameters
#
# Where do the parameters sit? `parameter_counts` sums the tensors of each block;
# `parameter_formula` computes the same numbers in closed form from the sizes alone:
#
# - attention: four $d \times d$ projections with biases, $4(d^2 + d)$ — the number of heads
#   does not appear, since heads split $d$ rather than add to it;
# - feed-forward: $d\,d_\text{ff} + d_\text{ff} + d_\text{ff}\,d + d$;
# - layer norm: $2d$ (gain and bias);
# - encoder layer: attention + FFN + 2 norms; decoder layer: 2 attentions + FFN + 3 norms;
# - embeddings: $V d$ (the sinusoids are fixed, not trained); generator: $d\,V + V$.

# %%
counts = parameter_counts(base)
formula = parameter_formula(VOCAB, VOCAB, N=6, d_model=512, d_ff=2048)
assert counts == formula
assert sum(counts.values()) == sum(p.numel() for p in base.parameters())


BLOCKS = {
    "src_embed": "source embedding",
    "tgt_embed": "target embedding",
    "encoder.layers": "encoder layer",
    "encoder.norm": "encoder final norm",
    "decoder.layers": "decoder layer",
    "decoder.norm": "decoder final norm",
    "generator": "generator",
}
table = pd.DataFrame(
    {
        "block": [
            BLOCKS[n.rsplit(".", 1)[0] if ".layers." in n else n] for n in counts
        ],
        "each, counted": counts.values(),
        "each, formula": formula.values(),
    }
)
table = table.groupby("block", sort=False).agg(
    copies=("each, counted", "size"),
    **{
        "each, counted": ("each, counted", "first"),
        "each, formula": ("each, formula", "first"),
    },
    total=("each, counted", "sum"),
)
table["share"] = (table["total"] / table["total"].sum()).map("{:.1%}".format)
print(f"total: {table['total'].sum():,} parameters")
table

# %%
bars = table.reset_index()
bars["millions"] = bars["total"] / 1e6
(
    alt.Chart(
        bars,
        title="Parameters of the base model by block (vocabulary 37,000 per side)",
    )
    .mark_bar()
    .encode(
        x=alt.X("millions:Q", title="parameters (millions)"),
        y=alt.Y("block:N", sort=list(bars["block"]), title="block"),
        tooltip=["block", "copies", "each, counted", "total"],
    )
    .properties(width=450, height=200)
)

# %% [markdown]
# The embeddings and the generator — three $37{,}000 \times 512$ matrices — hold more than half
# of the 101 million parameters; the twelve layers share the rest, a decoder layer a third more
# than an encoder layer because of its source attention. The paper shares one matrix between
# both embeddings and the generator's weights (§3.4, [chapter 12](12_tricks_from_the_paper.ipynb)); counting that matrix once
# gives its size of "65 million" (Table 3) to within a few percent:

# %%
total = sum(counts.values())
# one shared 37000 × 512 matrix
tied = total - counts["src_embed"] - counts["tgt_embed"]
print(
    f"untied: {total / 1e6:.1f}M parameters; with tied embeddings: "
    f"{tied / 1e6:.1f}M"
)
del base  # 400 MB we no longer need

# %% [markdown]
# ## An untrained model "translates"
#
# The Annotated Transformer ends its model section with a sanity check: an untrained small
# model greedily decoding the source $1, 2, \dots, 10$. Greedy decoding encodes the source once,
# then repeatedly decodes the prefix generated so far and appends the most probable next token.
# Part III writes the batched version with a key/value cache; six lines suffice here.


# %%
def untrained_translation(seed: int, length: int = 10) -> list[int]:
    torch.manual_seed(seed)
    model = make_model(11, 11, N=2).eval()  # vocabulary of 11 symbols, two layers
    src = torch.arange(1, 11).unsqueeze(0)  # (1, 10): the source 1..10
    src_mask = torch.ones(1, 1, 10, dtype=torch.bool)
    memory = model.encode(src, src_mask)
    ys = torch.zeros(1, 1, dtype=torch.long)  # start symbol 0
    for _ in range(length - 1):
        out = model.decode(memory, src_mask, ys, subsequent_mask(ys.size(1)))
        next_word = model.generator(out[:, -1]).argmax(-1, keepdim=True)  # (1, 1)
        ys = torch.cat([ys, next_word], dim=1)
    return ys[0].tolist()


with torch.no_grad():
    for seed in range(5):
        print(f"seed {seed}: {untrained_translation(seed)}")

# %% [markdown]
# Random weights give fixed but meaningless sequences, unrelated to the source: the model runs
# end to end, shapes and masks fit, and there is nothing yet to learn from. [Chapter 09](09_copy_task.ipynb) trains
# this same small model to copy its input.
#
# ## The same function as `torch.nn.Transformer`
#
# PyTorch ships the encoder-decoder as `nn.Transformer`. With `norm_first=True` it is the
# pre-norm variant, like ours, and with the same weights it must compute the same function.
# The names differ, so a short mapping is needed: PyTorch stacks the query, key and value
# projections into one `in_proj` matrix, calls source attention `multihead_attn`, the
# feed-forward layers `linear1`/`linear2`, and the sublayer norms `norm1`–`norm3`. It has no
# embeddings or generator, so we feed it our embedded inputs. `load_state_dict` is strict: it
# fails if any name is missing or left over.

# %%
RENAME = {
    "attention.": "self_attn.",  # TransformerBlock's name for its self-attention
    "src_attn.": "multihead_attn.",
    "linears.3.": "out_proj.",
    "feed_forward.w_1.": "linear1.",
    "feed_forward.w_2.": "linear2.",
    "sublayer.0.norm.": "norm1.",
    "sublayer.1.norm.": "norm2.",
    "sublayer.2.norm.": "norm3.",
}


def to_torch_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict -> PyTorch's transformer names; q, k and v stacked
    into in_proj."""
    theirs = {}
    for name, tensor in state.items():
        if ".linears." in name and ".linears.3." not in name:
            # gather q, k, v once, at the query projection
            if ".linears.0." in name:
                prefix, kind = name.split(".linears.0.")
                qkv = [state[f"{prefix}.linears.{i}.{kind}"] for i in range(3)]
                name, tensor = f"{prefix}.in_proj_{kind}", torch.cat(qkv)
            else:
                continue
        for ours, pytorch in RENAME.items():
            name = name.replace(ours, pytorch)
        theirs[name] = tensor
    return theirs


torch.manual_seed(0)
model = make_model(11, 13, N=2, d_model=32, d_ff=64, h=4).eval()
with torch.no_grad():
    # move norms and biases off their initial values too
    for p in model.parameters():
        p.normal_(std=0.2)
with warnings.catch_warnings():  # norm_first disables a fast path; PyTorch says so
    warnings.simplefilter("ignore")
    reference = nn.Transformer(
        d_model=32,
        nhead=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=64,
        batch_first=True,
        norm_first=True,
    ).eval()
stacks = {
    k: v
    for k, v in model.state_dict().items()
    if k.startswith(("encoder", "decoder"))
}
reference.load_state_dict(to_torch_names(stacks))

src = torch.tensor([[5, 9, 3, 7, 2, 8], [6, 3, 8, 2, PAD, PAD]])  # (batch, src_len)
tgt = torch.tensor([[1, 4, 7, 3, 9], [1, 8, 12, PAD, PAD]])  # (batch, tgt_len)
# PyTorch's masks: True = may NOT attend
future = ~subsequent_mask(tgt.size(1))[0]
with torch.no_grad():
    ours = model(src, tgt, padding_mask(src, PAD), make_std_mask(tgt, PAD))
    theirs = reference(
        model.src_embed(src),
        model.tgt_embed(tgt),
        tgt_mask=future,
        src_key_padding_mask=src == PAD,
        tgt_key_padding_mask=tgt == PAD,
        memory_key_padding_mask=src == PAD,
    )
# padded target rows differ by design (chapter 06) and feed no loss
real = tgt != PAD
torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)
print(
    f"{len(stacks)} tensors mapped; outputs at real positions equal "
    "nn.Transformer's"
)

# %% [markdown]
# ## Bloem's block: the encoder-only variant
#
# Parts of this book also need models with only one stack: a sentiment classifier reads a
# review with an encoder ([chapter 13](13_classification_imdb.ipynb)), a character-level language model generates text with a
# causal "decoder-only" stack ([chapter 14](14_generation_characters.ipynb)). For those the package follows Peter Bloem's
# `former`: one self-contained block, **post-norm** as the paper's text writes it, with the
# feed-forward network $4\times$ wider than $d_\text{model}$. `causal=True` adds the look-ahead
# mask inside the block.

# %%
show_source(TransformerBlock)

# %% [markdown]
# This block is PyTorch's `nn.TransformerEncoderLayer` with `norm_first=False`; the same
# renaming carries the weights over (`attention` → `self_attn`, `norm1`/`norm2` keep their
# names):

# %%
torch.manual_seed(0)
block_ = TransformerBlock(EncoderConfig(d_model=32, h=4, d_ff=128)).eval()
with torch.no_grad():
    for p in block_.parameters():
        p.normal_(std=0.2)
torch_block = nn.TransformerEncoderLayer(
    d_model=32, nhead=4, dim_feedforward=128, batch_first=True, norm_first=False
).eval()
torch_block.load_state_dict(to_torch_names(block_.state_dict()))

x = torch.randn(2, 6, 32)  # (batch, len, d_model), e.g. embedded review tokens
with torch.no_grad():
    ours = block_(x, padding_mask(src, PAD))
    theirs = torch_block(x, src_key_padding_mask=src == PAD)
torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
print(
    "TransformerBlock == nn.TransformerEncoderLayer(norm_first=False):",
    tuple(ours.shape),
)

# %% [markdown]
# A classifier stacks a few of these blocks over embedded tokens, pools the outputs and
# applies a linear layer; a language model stacks causal ones and ends with a generator. Both
# reuse everything in this chapter except the source attention.

# %% [markdown]
# ## Summary
#
# You can now
#
# - assemble the encoder-decoder from its parts with `make_model`;
# - count its parameters by formula and by module;
# - check it against `torch.nn.Transformer` with the same weights.
#
# **Next:** [chapter 08 · Training](08_training.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/07_the_full_model.py`: fill them in there, then grade them from
# the repository's root with `make exercises CHAPTER=07` (or
# `python -m annotated_transformer.exercises 07`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-07-feed-forward)=
# ### Exercise 7.1 · The feed-forward network from its formula
#
# Write the position-wise feed-forward network straight from the paper's equation (2),
# $\mathrm{FFN}(x) = \max(0, xW_1 + b_1)W_2 + b_2$, with plain tensors. The grader loads
# the same numbers into two `nn.Linear` layers and compares.
#
# Write `feed_forward(x, W_1, b_1, W_2, b_2)`; grade with `make exercises CHAPTER=07`.
#
# :::{dropdown} Solution
# ```python
# def feed_forward(
#     x: Tensor,
#     W_1: Tensor,
#     b_1: Tensor,
#     W_2: Tensor,
#     b_2: Tensor,
# ) -> Tensor:
#     """The position-wise feed-forward network: max(0, x W_1 + b_1) W_2 + b_2.
#
#     x: (batch, len, d_model); W_1: (d_model, d_ff); b_1: (d_ff,);
#     W_2: (d_ff, d_model); b_2: (d_model,) -> (batch, len, d_model)
#     """
#     return torch.relu(x @ W_1 + b_1) @ W_2 + b_2
# ```
# :::

# %% [markdown]
# (ex-07-encoder-layer)=
# ### Exercise 7.2 · One encoder layer, assembled by hand
#
# PyTorch's `nn.TransformerEncoderLayer` with `norm_first=True` is this book's pre-norm
# encoder layer. Take one apart: compute its output from its pieces (`self_attn`,
# `linear1`, `linear2`, `norm1`, `norm2`) with no call to `layer(x)` itself, and match
# it exactly (dropout is 0).
#
# Write `encoder_layer(x, layer)`; grade with `make exercises CHAPTER=07`.
#
# :::{dropdown} Solution
# ```python
# def encoder_layer(x: Tensor, layer: nn.TransformerEncoderLayer) -> Tensor:
#     """One pre-norm encoder layer, from the parts of PyTorch's layer.
#
#     x: (batch, len, d_model); layer: built with norm_first=True,
#     batch_first=True, dropout 0 and ReLU; use its self_attn, linear1, linear2,
#     norm1 and norm2
#     returns what layer(x) returns
#     """
#     z = layer.norm1(x)
#     x = x + layer.self_attn(z, z, z, need_weights=False)[0]
#     z = layer.norm2(x)
#     return x + layer.linear2(torch.relu(layer.linear1(z)))
# ```
# :::

# %% [markdown]
# (ex-07-tied-parameter-count)=
# ### Exercise 7.3 · Parameters with one shared embedding table
#
# With one joint vocabulary (chapter 12's shared BPE), the paper shares a single matrix
# between the source embeddings, the target embeddings and the generator (§3.4;
# `tie_weights(model, share_source=True)`). Extend this chapter's closed-form count to
# that model: how many parameters does it have? The grader builds tied models and counts
# their tensors.
#
# Write `tied_parameter_count(vocab, N, d_model, d_ff)`; grade with
# `make exercises CHAPTER=07`.
#
# :::{dropdown} Solution
# ```python
# def tied_parameter_count(vocab: int, N: int, d_model: int, d_ff: int) -> int:
#     """make_model's size when its embeddings and generator share one table.
#
#     One joint vocabulary of ``vocab`` tokens; tie_weights(model,
#     share_source=True) makes the source embeddings, the target embeddings and
#     the generator's weight one (vocab, d_model) matrix. The generator keeps
#     its bias.
#     """
#     d = d_model
#     attention = 4 * (d * d + d)
#     ffn = d * d_ff + d_ff + d_ff * d + d
#     norm = 2 * d
#     encoder = N * (attention + ffn + 2 * norm) + norm
#     decoder = N * (2 * attention + ffn + 3 * norm) + norm
#     return vocab * d + encoder + decoder + vocab
# ```
# :::
