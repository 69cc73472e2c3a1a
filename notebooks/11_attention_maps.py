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
# # 11 · Attention maps of a trained model
#
# - **You will learn** to record the attention weights of a trained model and to read its heads.
# - **It assumes** [chapter 10](10_translation_multi30k.ipynb) (its trained model).
# - **Time:** about 10 minutes to read; it runs in under a minute from its run's record; training its run took 128.3 minutes on one CPU thread.
#
# :::{admonition} Where the outputs come from
# :class: dropdown
# The maps on this page are those of [chapter 10](10_translation_multi30k.ipynb)'s `cpu`-preset model, read from its record
# `results/translate-cpu` (weights included), which was trained with
#
#     python -m annotated_transformer translate train \
#         --preset cpu --out runs/translate-cpu
#
# :::
#
# A Transformer translates with three kinds of attention, and every layer has its own heads
# of each kind:
#
# - **encoder self-attention**: each German token looks at the German sentence;
# - **decoder self-attention**: each English token looks at the English tokens *before* it
#   (the look-ahead mask of chapter 06 hides the rest);
# - **decoder-source attention**: each English token looks at the encoder's output, the
#   German sentence. This is the one that can resemble a word alignment.
#
# The Annotated Transformer ends by drawing all of them for one sentence. Here we do the same
# with the model that chapter 10 trained, with one correction: the original drew its maps
# with the model still in training mode, so *dropout was on*, and the weights it drew had
# random entries zeroed and the rest scaled up by 1 / (1 − p). A trained model translates in
# evaluation mode, and that is what we draw.

# %%
import altair as alt
import pandas as pd
import torch

from annotated_transformer.blocks.attention import CachedAttention, attention
from annotated_transformer.blocks.masks import padding_mask, subsequent_mask
from annotated_transformer.book import explore, viz
from annotated_transformer.book.sizes import pick, runs_dir
from annotated_transformer.book.source import show_source
from annotated_transformer.data.batching import collate
from annotated_transformer.evaluation.decoding import greedy_decode
from annotated_transformer.runner import ensure_run

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# ## The model
#
# The model of [chapter 10](10_translation_multi30k.ipynb): its record,
# `results/translate-cpu`, publishes the weights, and a finished run in
# `runs/translate-<preset>` is reused too; otherwise the runner trains it. Either carries
# the config and both vocabularies, so the runner rebuilds the task and the model, loads the
# weights and puts the model in evaluation mode.

# %% tags=["nbval-ignore-output"]
PRESET = pick(ci="tiny", full="cpu")
run = ensure_run("translate", PRESET, runs_dir() / f"translate-{PRESET}")
task, model = run.task, run.model
src_vocab, tgt_vocab = task.src_vocab, task.tgt_vocab
where = f"{run.out.parent.name}/{run.out.name}"  # runs/… or a record, results/…
print(f"{PRESET} model from {where}; training mode: {model.training}")

# %% [markdown]
# ## Keeping the weights
#
# The trained model's attention modules are `CachedAttention`, the subclass of chapter 02's
# `MultiHeadedAttention` that the runner uses: it normally runs PyTorch's fused
# `scaled_dot_product_attention`, which never materialises the attention weights. Setting
# `keep_attention = True` switches a module to the explicit `attention` function of [chapter 02](02_self_attention.ipynb) and keeps its weights in `.attn`,
# shaped `(batch, heads, queries, keys)`:

# %%
show_source(CachedAttention.forward, attention)

# %% [markdown]
# The model has one `CachedAttention` per attention sublayer: one in every encoder
# layer, two in every decoder layer. We name them and switch them all:

# %% tags=["nbval-ignore-output"]
modules = {}
for i, layer in enumerate(model.encoder.layers, 1):
    modules[("encoder self-attention", i)] = layer.self_attn
for i, layer in enumerate(model.decoder.layers, 1):
    modules[("decoder self-attention", i)] = layer.self_attn
    modules[("decoder-source attention", i)] = layer.src_attn
n_layers, heads = len(model.encoder.layers), model.encoder.layers[0].self_attn.h
print(
    f"{len(modules)} attention modules ({n_layers} layer(s) × 3 kinds), {heads} "
    "heads each"
)

# %% [markdown]
# ## One sentence
#
# A short test2016 sentence keeps the maps readable; we take the first one of at most ten
# tokens in which a word is split into pieces (a piece after the first that does not start
# with `▁` continues the word before it). The model translates it greedily; then
# one teacher-forced pass feeds the model its own translation, the same computation as the
# last step of decoding, and collects every module's weights. (At most a few more tokens
# than the source are decoded, which only matters for a model that does not stop.)

# %% tags=["nbval-ignore-output"]
def splits_a_word(tokens: list[str]) -> bool:
    """Does a piece after the first continue a word (no ▁ before it)?"""
    return any(t[:1].isalpha() for t in tokens[1:])


test = task.split("test2016")
index = next(i for i, s in enumerate(test.src) if len(s) <= 10 and splits_a_word(s))
src_tokens = test.src[index]
pad, bos, eos = (src_vocab.stoi[t] for t in ("<pad>", "<s>", "</s>"))
src = collate([src_vocab.encode(src_tokens)], pad, bos, eos)  # (1, src_len)
src_mask = padding_mask(src, pad)  # (1, 1, src_len)
print("German:   ", " ".join(src_tokens))
print("reference:", test.en[index])

# %% [markdown]
# With word vocabularies this sentence went wrong: "Reparieren" (capitalised
# by mistake in the test set) was not in the vocabulary, so the word model read `<unk>` and
# wrote it: "People `<unk>` the roof of a house." (beam 4). The byte-pair model reads the word
# as three pieces it knows:

# %% tags=["nbval-ignore-output"]
ys = greedy_decode(model, src, src_mask, max_len=src.size(1) + 4, start_symbol=bos,
                   end_symbol=eos)
# what the decoder reads: <s> + translation
tgt_in = ys[:, :-1] if ys[0, -1] == eos else ys
src_labels = src_vocab.decode(src[0].tolist())
tgt_labels = tgt_vocab.decode(tgt_in[0].tolist())
print("model:    ", " ".join(tgt_labels[1:]))


# %%
def forward(tgt: torch.Tensor) -> torch.Tensor:
    """One teacher-forced pass: decoder states (1, tgt_len, d_model)."""
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        return model.decode(memory, src_mask, tgt, subsequent_mask(tgt.size(1)))


fused = forward(tgt_in)
for module in modules.values():
    module.keep_attention = True
explicit = forward(tgt_in)
torch.testing.assert_close(explicit, fused)
print(
    "explicit path with kept weights == fused path: the maps show what the model "
    "computes"
)

# %%
# (heads, queries, keys)
maps = {key: module.attn[0] for key, module in modules.items()}
for weights in maps.values():
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
print("every row of every map sums to 1 (eval mode: no dropout on the weights)")

# %% [markdown]
# What the original drew instead: the same pass in training mode. Dropout (p = 0.1) zeroes
# about one weight in ten and multiplies the others by 1 / 0.9, so rows no longer sum to 1
# and the picture changes from run to run:

# %% tags=["nbval-ignore-output"]
model.train()
torch.manual_seed(0)
forward(tgt_in)
noisy = modules[("encoder self-attention", 1)].attn[0]
model.eval()
sums = noisy.sum(-1)
print(f"training mode: {(noisy == 0).float().mean():.0%} of the weights are zero; "
      f"row sums range from {sums.min():.2f} to {sums.max():.2f}")

# %% [markdown]
# :::{admonition} Find the bug
# :class: tip
# {ref}`Exercise 11.1 <ex-11-dropout-maps>` hands you maps drawn with dropout still on
# to repair.
# :::

# %% [markdown]
# ## The maps
#
# For each kind of attention, the head this section reads is printed, each query with the
# key it weighs most; the explorer at the end of the section draws every map, one head at a
# time, and the decoder-source attention is also drawn whole, one heatmap per head and
# layer. Rows are queries (the token doing the looking), columns are keys (the tokens looked
# at); colour is the weight, on the same 0–1 scale everywhere. Hover over a cell for its
# tokens and value.
#
# The tokens are the model's own: pieces of the shared byte-pair vocabulary ([chapter 12](12_tricks_from_the_paper.ipynb)). A
# piece that starts with `▁` starts a word (the mark stands for the space before it); a piece
# without it continues the word on its left, so a rare word shows up as two or three columns.


# %%
def head_grid(kind: str, layer: int, per_row: int = 3) -> alt.VConcatChart:
    """Heatmaps of every head of one attention module, ``per_row`` to a row."""
    weights = maps[(kind, layer)]
    queries = src_labels if kind == "encoder self-attention" else tgt_labels
    keys = tgt_labels if kind == "decoder self-attention" else src_labels
    charts = []
    for h in range(weights.size(0)):
        chart = viz.heatmap(
            weights[h],
            keys,
            queries,
            title=f"head {h + 1}",
            x_title="key",
            y_title="query",
            value_title="weight",
            domain=(0, 1),
            width=13 * len(keys),
            height=13 * len(queries),
        )
        # labels would overlap
        axis = chart.encoding.x.to_dict()["axis"] | {"labelAngle": -90}
        charts.append(chart.encode(x=alt.X("column:O", axis=alt.Axis(**axis))))
    rows = [
        alt.hconcat(*charts[i : i + per_row])
        for i in range(0, len(charts), per_row)
    ]
    return alt.vconcat(*rows, title=f"{kind}, layer {layer}").resolve_scale(
        color="shared"
    )


def strongest(kind: str, layer: int, head: int) -> None:
    """Print each query of one head with the key it weighs most, and that weight:
    the cells the text below reads, to check against the maps."""
    weights = maps[(kind, layer)][head - 1]
    queries = src_labels if kind == "encoder self-attention" else tgt_labels
    keys = tgt_labels if kind == "decoder self-attention" else src_labels
    print(f"{kind}, layer {layer}, head {head}: each query's strongest key")
    for query, row in zip(queries, weights, strict=True):
        key = int(row.argmax())
        print(f"  {query:>14} -> {keys[key]:<14} {row[key]:.2f}")


def layer_grids(kind: str) -> alt.VConcatChart:
    """:func:`head_grid` for every layer, the colour legend below.

    (Beside the charts, the legend would not fit.)
    """
    grids = (head_grid(kind, layer) for layer in range(1, n_layers + 1))
    return alt.vconcat(*grids).configure_legend(orient="bottom")


# %% [markdown]
# ### Encoder self-attention
#
# Layer 1 works on words. Take **layer 1, head 6** (printed below): "Reparieren" arrives as
# three pieces, `▁R`, `epar`, `ieren`, and all three give most of their weight to `epar`,
# so the word's pieces read as one; whole words (`Leute`, `▁Dach`, `▁Hauses`) look at
# themselves. Every head of layer 1 sends `ieren` to `epar`. By
# layer 3 the rows have spread out: in head 3 no key gets most of any row's weight (pick
# layer 3, head 3 in the explorer below).

# %% tags=["nbval-ignore-output"]
strongest("encoder self-attention", layer=1, head=min(6, heads))

# %% [markdown]
# ### Decoder self-attention
#
# The look-ahead mask leaves only the lower triangle: token $i$ can look at tokens $1 … i$.
# The first row has one key, so all its weight is on `<s>`. In **layer 2, head 6** (printed
# below) the early rows stay there (`People` and `▁are` put most of their weight on `<s>`)
# while later rows look at the last content word so far: `▁fixing` at itself, `▁the` at
# `▁fixing`, `▁roof` at itself, the full stop at itself. `<s>` serves as a resting place for
# a query with nothing to read yet.

# %% tags=["nbval-ignore-output"]
strongest("decoder self-attention", layer=min(2, n_layers), head=min(6, heads))

# %% [markdown]
# ### Decoder-source attention
#
# Each English token (row) against the German sentence (columns). A row is the decoder's
# input at one step, so it is looking for the *next* English word. Take **layer 2, head
# 1** (printed below): the row `▁the` puts nearly all its weight on `▁Dach` (the next word
# is "roof"), the row `▁a` on `▁Hauses` ("house"), the row `▁fixing` on `▁Dach` (next
# comes "the roof"), and the rows `People` and `▁are` more than half of theirs on `epar`, a
# piece of "Reparieren" ("are fixing"). That is a word alignment, one step ahead. Most heads of
# layers 2 and 3 find the same cells (`▁the` → `▁Dach` among them: the grid below shows
# every head).

# %% tags=["nbval-ignore-output"]
strongest("decoder-source attention", layer=min(2, n_layers), head=1)

# %% tags=["nbval-ignore-output"]
layer_grids("decoder-source attention")

# %% [markdown]
# ## Explore every map
#
# **Explore.** Every map of this sentence and of two more short test2016 sentences, one at a
# time: pick the sentence, the kind of attention, the layer and the head. Here each sentence
# is translated with beam search (beam 4, as for the test score), so its English can differ
# from the greedy one above. (The chart holds all the maps, so the dropdowns work on the page
# without a kernel.)

# %% tags=["nbval-ignore-output"]
others = [i for i, s in enumerate(test.src) if len(s) <= 10 and i != index]
picked = [index, *others[:2]]
examples = []
for i in picked:
    english, *kept = explore.translate_with_attention(task, model, test.de[i])
    print(f"{test.de[i]}  →  {english}")
    examples.append((test.de[i], *kept))
explore.attention_explorer(examples)

# %% [markdown]
# The third sentence goes wrong: test2016's reference reads "Three people sit in a cave", and
# the model writes *lift* for *Höhle*, a word in only a handful of the training captions, so
# rare that the vocabulary splits it into three pieces (▁H, öh, le). Pick it with
# cross-attention in the last layer: the row that writes *lift* (its input is *a*) looks at
# ▁H in every head. The model knows where the word is; it has too few examples to know what
# it means, and it answers with a fluent guess rather than a doubt.
#
# **Try it: type your own German sentence** between the quotes and run the cell: its
# beam translation and the same explorable maps, for your sentence. It needs Jupyter
# (`make lab`, then this chapter's notebook, `11_attention_maps.ipynb`, or its `.py`) and
# runs on its own: it loads the published model, `results/translate-cpu`, itself.
# An empty sentence gets one line saying so; so does a sentence most of whose pieces the
# model never learned ([chapter 10](10_translation_multi30k.ipynb) says why it translates
# those anyway). Saving the chapter keeps this cell as it is stored.

# %% tags=["nbval-ignore-output", "try-it"]
from annotated_transformer.book import try_it

SENTENCE = "Eine Frau liest im Park ein Buch."  # ← type here
try_it.translate(SENTENCE)

# %% [markdown]
# ## How focused is each head?
#
# The maps are many; one number per head summarises them: the entropy of its attention
# rows, $-\sum_j p_j \log_2 p_j$ bits, averaged over the queries. A head that puts all its
# weight on one token has entropy 0; one that spreads evenly over $n$ tokens has
# $\log_2 n$ bits (drawn as a rule for the source sentence's length).

# %% tags=["nbval-ignore-output"]
rows = []
for (kind, layer), weights in maps.items():
    # (heads, queries)
    entropy = -(weights * torch.log2(weights.clamp_min(1e-12))).sum(-1)
    if kind == "decoder self-attention":  # row i has i keys: rescale to compare
        entropy = entropy[:, 1:] / torch.log2(
            torch.arange(2, weights.size(1) + 1.0)
        )
        entropy = entropy * torch.log2(torch.tensor(float(len(src_labels))))
    for h, value in enumerate(entropy.mean(-1).tolist(), 1):
        rows.append({"kind": kind, "layer": layer, "head": h, "entropy": value})
entropies = pd.DataFrame(rows)
uniform = float(torch.log2(torch.tensor(float(len(src_labels)))))


def entropy_bars(kind: str) -> alt.LayerChart:
    bars = (
        alt.Chart(entropies[entropies["kind"] == kind], title=kind)
        .mark_bar()
        .encode(
            x=alt.X("head:O", title="head", axis=alt.Axis(labelAngle=0)),
            y=alt.Y(
                "entropy:Q",
                title="mean entropy (bits)",
                scale=alt.Scale(domain=[0, uniform]),
            ),
            color=alt.Color(
                "layer:O", title="layer", legend=alt.Legend(orient="bottom")
            ),
            xOffset="layer:O",
            tooltip=[
                "kind:N",
                "layer:O",
                "head:O",
                alt.Tooltip("entropy:Q", format=".2f"),
            ],
        )
    )
    rule = alt.Chart(pd.DataFrame({"bits": [uniform]})).mark_rule(strokeDash=[4, 4])
    return (bars + rule.encode(y="bits:Q")).properties(width=150, height=200)


alt.hconcat(
    *(entropy_bars(kind) for kind in entropies["kind"].unique())
).properties(
    title="Attention entropy per head (dashed: uniform over the source sentence)"
)


# %% [markdown]
# (Decoder self-attention rows see different numbers of tokens, so each row's entropy is
# rescaled to the source length's maximum before averaging.) Lower bars are sharper heads.
# In the stored chart the sharpest are the encoder's layer 1 (the word-piece heads read
# above) and the decoder-source heads of layer 2 (the alignment), all well under the
# uniform rule; the encoder's layer 3 spreads most.

# %%
for module in modules.values():  # back to the fused kernel
    module.keep_attention = False

# %% [markdown]
# ## Summary
#
# You can now
#
# - record the attention weights of a trained model without dropout;
# - read a head's map and summarise all heads by their entropy.
#
# **Next:** [chapter 12 · Tricks from the paper](12_tricks_from_the_paper.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/11_attention_maps.py`: fill them in there, then grade them from the
# repository's root with `make exercises CHAPTER=11` (or
# `python -m annotated_transformer.exercises 11`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-11-dropout-maps)=
# ### Exercise 11.1 · Find the bug: maps drawn in training mode
#
# **Find the bug.** The original drew its maps right after training, with the model
# still in training mode: dropout zeroed some attention weights and scaled up the
# others, and every drawing differed. The starter's `encoder_attention_maps` switches
# each encoder self-attention to the explicit path, runs the encoder and collects the
# weights, and has the same bug. Repair it so that the maps are those the trained model
# computes, and give the model back in the mode you found it.
#
# The grader hands it a small model with dropout 0.5, in training mode, and checks that
# every row sums to 1, that padding gets no weight and that two calls draw the same
# maps.
#
# Write `encoder_attention_maps(model, src, src_mask)`; grade with `make exercises
# CHAPTER=11`.
#
# :::{dropdown} Solution
# ```python
# def encoder_attention_maps(
#     model: EncoderDecoder,
#     src: Tensor,
#     src_mask: Tensor,
# ) -> list[Tensor]:
#     """Each encoder layer's self-attention weights, in eval mode.
#
#     returns one (b, h, n, n) map per layer; the model is left in its mode
#     """
#     modules = [layer.self_attn for layer in model.encoder.layers]
#     was_training = model.training
#     model.eval()  # dropout off: the weights the trained model really uses
#     try:
#         for module in modules:
#             module.keep_attention = True
#         with torch.no_grad():
#             model.encode(src, src_mask)
#         return [module.attn for module in modules]
#     finally:
#         for module in modules:
#             module.keep_attention = False
#         model.train(was_training)
# ```
# :::

# %% [markdown]
# (ex-11-normalised-entropy)=
# ### Exercise 11.2 · Comparing rows that see different numbers of keys
#
# Entropy says how spread out a row of attention is
# (exercise 2.3 in [chapter 2](02_self_attention.ipynb)), but its largest value,
# $\log_2 n$ bits, depends on how many keys $n$ the row may see: in decoder
# self-attention, row $i$ sees $i + 1$. This chapter's entropy chart rescales for that.
# Divide each row's entropy by $\log_2$ of its visible keys, so that 0 means all weight
# on one key and 1 uniform over what the row may see, and average over the rows that see
# two keys or more (a row with one key has no choice). The grader compares with
# `torch.distributions.Categorical`'s entropy on causal maps.
#
# Write `normalised_entropy(weights, mask)`; grade with `make exercises CHAPTER=11`.
#
# :::{dropdown} Solution
# ```python
# def normalised_entropy(weights: Tensor, mask: Tensor) -> Tensor:
#     """How spread out each head's attention is: 0 one key, 1 uniform.
#
#     weights: (..., q, k), rows summing to 1; mask: bool (q, k), True = visible
#     Per row: −Σⱼ pⱼ log₂ pⱼ (0 · log 0 = 0) over log₂ of its visible keys;
#     then the mean over the rows that see two keys or more. returns (...)
#     """
#     terms = torch.where(weights > 0, weights * torch.log2(weights), 0.0)
#     entropy = -terms.sum(-1)  # (..., q), in bits
#     visible = mask.sum(-1)  # (q,)
#     rows = visible >= 2  # a row with one key has nothing to spread over
#     return (entropy[..., rows] / torch.log2(visible[rows].double())).mean(-1)
# ```
# :::

# %% [markdown]
# (ex-11-rollout)=
# ### Exercise 11.3 · Attention rollout through the layers
#
# One map per layer and head is a lot to read. Attention rollout (Abnar and Zuidema
# 2020) follows information up the stack instead. For each layer, average the heads and
# add the identity for the residual connection, renormalising the rows: $\hat A = (\bar
# A + I) / 2$; then multiply the layers, the top one on the left, $R = \hat A_L \cdots
# \hat A_1$. $R_{ij}$ estimates how much of input position $j$ reaches position $i$ at
# the top. The grader sums over every path through the layers.
#
# Write `attention_rollout(maps)`; grade with `make exercises CHAPTER=11`.
#
# :::{dropdown} Solution
# ```python
# def attention_rollout(maps: list[Tensor]) -> Tensor:
#     """Abnar and Zuidema's rollout; maps (h, n, n), the bottom layer first.
#
#     Each layer: the mean over the heads plus the identity (the residual
#     connection), rows renormalised to 1; then the product of the layers, the
#     top one on the left: R = Â_L ⋯ Â_1, (n, n).
#     """
#     n = maps[0].size(-1)
#     rollout = torch.eye(n, dtype=maps[0].dtype)
#     for weights in maps:
#         layer = weights.mean(0) + torch.eye(n, dtype=weights.dtype)
#         layer = layer / layer.sum(-1, keepdim=True)
#         rollout = layer @ rollout
#     return rollout
# ```
# :::
