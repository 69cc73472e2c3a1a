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
# # 13 · Sentiment classification on IMDb
#
# - **You will learn** the same blocks as an encoder-only classifier: pooling that ignores padding, training through the runner, and where the model goes wrong.
# - **It assumes** [chapter 07](07_the_full_model.ipynb) (the post-norm block), [chapter 08](08_training.ipynb) and [chapter 10](10_translation_multi30k.ipynb) (the runner).
# - **Time:** about 15 minutes to read; it runs in about 2 minutes from its runs' records; training its 2 runs took 8.2 minutes each on one CPU thread.
#
# The blocks of Parts I–III were built for translation, but nothing in a Transformer block is
# specific to it. A block maps a sequence of vectors to a sequence of vectors of the same
# shape; what a task adds is how the sequence goes in and what is read out at the end. This
# chapter builds the simplest such task, the one Peter Bloem uses in *Transformers from
# scratch* (2019): read a movie review and say whether it is positive or negative.
#
# The model is an **encoder only**: embed the words, add learned position vectors, run a
# stack of self-attention blocks with no look-ahead mask (every word may look at every other
# word), average the output vectors into one vector for the whole review, and map that vector
# to two class scores with one linear layer. The data is the IMDb Large Movie Review Dataset
# ([Maas et al., 2011](../book/references.md#maas-et-al-2011)): 25,000 training and 25,000 test reviews, half positive, half negative.
#
# Everything here runs through the `classify` task of the book's runner, the code behind the
# command line
#
# ```
# python -m annotated_transformer classify train --preset cpu --out runs/imdb-cpu
# python -m annotated_transformer classify evaluate \
#     --checkpoint runs/imdb-cpu/final.pt
# python -m annotated_transformer classify predict \
#     --checkpoint runs/imdb-cpu/final.pt "..."
# ```
#
# so the numbers below are the ones the command line gets. A run the command line finished
# in `runs/imdb-cpu` is reused here rather than trained again.

# %%
import warnings

# tqdm.auto asks for Jupyter widgets; this chapter turns progress bars off anyway.
warnings.filterwarnings("ignore", message="IProgress not found")

import altair as alt
import pandas as pd
import torch

from annotated_transformer.book import viz
from annotated_transformer.book.page import print_log, wrap
from annotated_transformer.book.sizes import pick, runs_dir
from annotated_transformer.book.source import show_source
from annotated_transformer.data import imdb
from annotated_transformer.data.bpe import BPE
from annotated_transformer.models.encoder_only import (
    EncoderClassifier,
    EncoderConfig,
)
from annotated_transformer.runner import ensure_run, rows_with
from annotated_transformer.tasks.base import flat_settings
from annotated_transformer.tasks.classification import (
    LABELS,
    PRESETS,
    Classification,
    ReviewTokenizer,
)
from annotated_transformer.training.schedules import linear

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# Classification is a task of the book's runner ([chapter 10](10_translation_multi30k.ipynb)): a config dataclass, and the
# command line's presets are named configs. The book trains the `cpu` preset (8.2<!-- record imdb-cpu train_minutes -->
# minutes of training on one CPU core; the run below is read from its record,
# `results/imdb-cpu`).

# %% tags=["hide-output", "nbval-ignore-output"]
preset = pick(ci="tiny", full="cpu")
config = PRESETS[preset]
shown = {  # the settings this chapter discusses; print(config) lists all of them
    "data": ("tokenizer", "vocab_size", "max_len", "max_tokens"),
    "model": ("N", "d_model", "h", "d_ff", "dropout", "attn_dropout", "cls"),
    "training": (
        "steps", "optimizer", "lr", "schedule", "warmup", "weight_decay",
        "clip_norm", "eval_every",
    ),
}
print(f"the {preset} preset")
values = flat_settings(config)  # the model's sizes by their own names
for group, names in shown.items():
    settings = ", ".join(f"{name}={values[name]!r}" for name in names)
    print(wrap(f"{group:>8}  {settings}", indent=" " * 10))

# %% [markdown]
# ## The data
#
# The task reads both splits, carves a validation set out of the training reviews (a seeded
# draw, so it is the same every run), builds the vocabulary from the remaining training
# reviews only — a word that occurs only in validation or test reviews must be `<unk>`, as it
# would be for a new review — and turns every review into token ids, cut to the first
# `max_len` tokens.

# %% tags=["nbval-ignore-output"]
task = Classification(config)
vocab = task.vocab
data = {split: task.reviews(split) for split in ("train", "val", "test")}
for name, split in data.items():
    print(
        f"{name:>5}: {len(split):6,} reviews, {sum(split.labels) / len(split):.0%} "
        "positive"
    )
print(f"vocabulary: {len(vocab):,} tokens, the first ones:")
print(vocab.itos[:12])

# %% [markdown]
# Tokens are lower-cased words and the marks `!` and `?`. The reviews were scraped from HTML
# pages and keep its line breaks, `<br />`, which the tokenizer removes first:

# %%
show_source(imdb.tokenize)

# %%
example = "A <i>great</i> cast.<br /><br />But the plot? Don't bother!!"
print(" ".join(imdb.tokenize(example)))

# %% [markdown]
# The `<i>` survives as the "words" `i`: the tokenizer only knows about line breaks. Such
# leftovers are rare and harmless for a bag of words, and keeping the tokenizer this simple
# keeps it easy to check.
#
# How long are the reviews? Attention costs grow with the square of the length, so this
# decides `max_len`. The histogram counts tokens per training review before truncation:

# %% tags=["nbval-ignore-output"]
lengths = pd.Series([len(imdb.tokenize(text)) for text in data["train"].texts])
max_len = config.model.max_len
print(
    f"tokens per review: mean {lengths.mean():.0f}, median {lengths.median():.0f}, "
    f"90th percentile {lengths.quantile(0.9):.0f}, longest {lengths.max()}\n"
    f"{(lengths > max_len).mean():.0%} are cut at max_len={max_len}"
)
bins = (lengths.clip(upper=1000) // 25 * 25).value_counts().sort_index()
histogram = pd.DataFrame({"tokens": bins.index, "reviews": bins.values})
(
    alt.Chart(
        histogram, title="Length of the training reviews (1000+ in the last bar)"
    )
    .mark_bar()
    .encode(
        x=alt.X("tokens:Q", bin=alt.Bin(step=25), title="tokens per review"),
        y=alt.Y("reviews:Q", title="number of reviews"),
        tooltip=["tokens", "reviews"],
    )
    .properties(width=500, height=220)
    + alt.Chart(pd.DataFrame({"max_len": [max_len]}))
    .mark_rule(color="firebrick")
    .encode(x="max_len:Q")
)

# %% [markdown]
# Most reviews are between 100 and 300 tokens, with a long tail: the red line is where the
# preset cuts them. Cutting loses the end of the longest reviews, which often holds the
# verdict; a longer `max_len` buys a little accuracy at a quadratic price in attention.
#
# ## The model
#
# `EncoderClassifier` assembles pieces the book has already built: `Embeddings` ([chapter 03](03_tokens_and_embeddings.ipynb)),
# the learned `PositionalEmbedding` ([chapter 04](04_positional_encoding.ipynb)) and Bloem's post-norm `TransformerBlock`
# ([chapter 05](05_normalisation_and_residuals.ipynb)). Only the last two steps are new: the pooling and the linear layer.

# %%
show_source(EncoderClassifier)

# %% [markdown]
# A small instance shows the shapes: two reviews of 5 and 3 tokens, the shorter one padded
# with `<pad>` (id 0) to the length of the longer.

# %%
sizes = EncoderConfig(100, 2, d_model=16, h=2, N=2, d_ff=64, max_len=8)
model = EncoderClassifier(sizes).eval()
tokens = torch.tensor([[5, 17, 42, 8, 9], [23, 61, 7, 0, 0]])  # (batch=2, len=5)
x = model.position(model.embed(tokens))
print("embedded + positions ", tuple(x.shape))
# (batch, 1, len): True = a real token, may be attended
mask = (tokens != 0).unsqueeze(1)
for block in model.blocks:
    x = block(x, mask)
print("after the blocks     ", tuple(x.shape))
print("logits               ", tuple(model(tokens).shape))

# %% [markdown]
# ### Pooling: an average that ignores padding
#
# A review's vector is the mean of its output vectors. A plain `x.mean(dim=1)` would average
# in the padding positions, so the prediction for a review would depend on how long the
# *other* reviews in its batch are. The model weights each position by 1 for a real token
# and 0 for padding, and divides by the number of real tokens. By hand:

# %%
real = (tokens != 0).unsqueeze(-1).float()  # (batch, len, 1)
pooled = (x * real).sum(dim=1) / real.sum(dim=1)  # (batch, d_model)
torch.testing.assert_close(model.to_classes(pooled), model(tokens))
alone = model(tokens[1:, :3])  # the second review without its padding
torch.testing.assert_close(model(tokens)[1], alone[0])
print("masked mean pooling = the model's logits; padding changes nothing")

# %% [markdown]
# Attention needs the same care: the mask keeps every query from attending to padded keys.
# With `cls=True` the model instead puts a learned vector in front of every review, as BERT
# does with its `[CLS]` token, and reads the review's class off that position's output:
# attention learns what to gather there. Averaging is the simpler choice and trains faster
# from scratch, so the presets use it.
#
# ## Training
#
# The runner and its loop are [chapter 10](10_translation_multi30k.ipynb)'s and [chapter 08](08_training.ipynb)'s; the task supplies batches and a
# loss. Batches group reviews of similar length (`batching.bucket_batches`) under a token
# budget, so little compute is spent on padding. The loss is the cross-entropy summed over the
# batch's reviews, returned with their count, which is the contract `Trainer` expects:

# %% tags=["hide-output"]
show_source(Classification.batches, Classification.loss)

# %% [markdown]
# The optimiser is AdamW (`optimizer="adamw"`) with a short linear warm-up and a linear decay
# to zero at the last step (`schedule="linear"`, [chapter 08](08_training.ipynb)): with a fixed budget of steps,
# ending at a learning rate of zero settles the weights.

# %% tags=["hide-output"]
show_source(linear)

# %% [markdown]
#
# The presets keep dropout (0.2 for `cpu`) on the embeddings, the residual branches and
# the feed-forward layers, but not on the attention weights. That is a speed decision: with
# dropout on the attention weights, `scaled_dot_product_attention` cannot use its fused
# kernel, and at the length of a review a training step takes several times as long, while
# at the length of a translation sentence the difference is small (`benchmarks/attention.py`
# measures both).
#
# The runner scores the validation set every `eval_every` steps (the task's `evaluate`),
# checkpoints, and scores the test set at the end (the task's `test`):

# %% tags=["hide-output"]
show_source(Classification.evaluate, Classification.accuracy)

# %% [markdown]
# `python -m annotated_transformer classify train --preset cpu --out runs/imdb-cpu` trains it;
# `ensure_run` loads that run if `runs/imdb-cpu` already holds a finished one of the same
# configuration, and trains it otherwise. Its log:

# %% tags=["nbval-ignore-output"]
result = ensure_run(
    "classify", preset, runs_dir() / f"imdb-{preset}", fresh=preset == "tiny"
)
model = result.model
print_log(result.out / "train.log")

# %% [markdown]
# The history has one row per optimiser step. The training loss is noisy from batch to batch,
# so the chart shows its running mean next to the validation loss:

# %% tags=["nbval-ignore-output"]
history = result.history
evaluated = rows_with(history, "val_loss")  # the rows where validation was scored
window = max(1, len(history) // 20)
curves = pd.concat(
    [
        pd.DataFrame(
            {
                "step": history["step"],
                "loss": history["loss"].rolling(window, min_periods=1).mean(),
                "curve": "training (running mean)",
            }
        ),
        pd.DataFrame(
            {
                "step": evaluated["step"],
                "loss": evaluated["val_loss"],
                "curve": "validation",
            }
        ),
    ]
)
viz.line_chart(
    curves,
    "step",
    "loss",
    "curve",
    title="Cross-entropy during training",
    x_title="optimiser step",
    y_title="cross-entropy (nats per review)",
    width=430,
)

# %% tags=["nbval-ignore-output"]
print(evaluated[["step", "val_loss", "val_accuracy"]].to_string(index=False))
metrics, test = result.metrics, result.metrics["test"]
# reviews seen / training reviews
epochs = history["tokens"].sum() / len(data["train"])
print(
    f"\ntest accuracy {test['accuracy']:.2%} on {test['reviews']:,} reviews\n"
    f"after {metrics['steps']:,} steps ({epochs:.2f} epochs), "
    f"{metrics['parameters']:,} parameters"
)

# %% [markdown]
# **Try it: type your own review** between the quotes and run the cell: the published model
# reads it and says positive or negative, with its probability (as `classify predict`
# prints them). It needs Jupyter (`make lab`, then this chapter's notebook,
# `13_classification_imdb.ipynb`, or its `.py`) and runs on its own: it loads
# `results/imdb-cpu` itself. A review with no words (only emoji, say) gets one line
# saying so, and one with few words the model knows (German, say) a warning before its
# answer. Saving the chapter keeps this cell as it is stored.
#
# Mixed reviews are where it is least reliable: "Thin plot, but the acting kept me
# watching to the end." comes out negative, and sure of it. The model has two labels and
# no "mixed"; "thin plot" weighs more in what it learned than "kept me watching", and its
# probability measures how far the review lies on one side of its boundary, not how right
# it is ([chapter 10](10_translation_multi30k.ipynb) says why models answer confidently
# outside their data).

# %% tags=["nbval-ignore-output", "try-it"]
from annotated_transformer.book import try_it

REVIEW = "A warm, funny film with a wonderful cast."  # ← type here
try_it.classify(REVIEW)

# %% [markdown]
# ## Where it goes wrong
#
# The four reviews the model gets most confidently wrong (below). Read them before blaming
# the model: all four carry the label *negative*, yet two read as plain praise ("one of the
# best Kung fu movies in the history of Cinema", "A true classic that can be seen many
# times"), one as praise that may be irony ("the most hilarious movie I've ever seen"), and
# one is a single line of comparison. That is **label noise**: IMDb's labels come from the
# star rating a reviewer gave, not from the text, and a text can praise a film its rating
# pans. A model
# that reads the text is right to call the two plain ones positive, and no model can be
# right on every review of this test set.

# %% tags=["nbval-ignore-output"]
probs = task.probabilities(model, data["test"])  # (reviews, 2)
labels = torch.tensor(data["test"].labels)
wrong = (probs.argmax(-1) != labels).nonzero().squeeze(1)
confidence = probs[wrong].max(dim=-1).values
for i in wrong[confidence.argsort(descending=True)[:4]].tolist():
    text = " ".join(data["test"].texts[i].replace("<br />", " ").split())
    excerpt = text[:400] + (" ..." if len(text) > 400 else "")
    print(
        f"true {LABELS[labels[i]]}, predicted {LABELS[1 - labels[i]]} "
        f"with p = {probs[i].max():.2f}:"
    )
    print(wrap("  " + excerpt, indent="  "), end="\n\n")

# %% [markdown]
# ## What the last block attends to
#
# Setting `keep_attention = True` on a block's attention makes it run the explicit
# matmul-softmax-matmul and keep the weights ([chapter 02](02_self_attention.ipynb)). For a short review, the map below
# is the last block's attention averaged over its heads: row $i$ shows where the word in
# row $i$ takes its information from. In a trained model a few sentiment-bearing words
# ("great", "waste", "boring", ...) tend to draw weight from many positions.

# %% tags=["nbval-ignore-output"]
# a review of about 32 tokens, the most confidently scored one
test_ids = data["test"].ids
short = min(
    range(len(test_ids)),
    key=lambda i: (abs(len(test_ids[i]) - 32), -probs[i].max()),
)
ids = test_ids[short]
words = vocab.decode(ids)
last = model.blocks[-1].attention
last.keep_attention = True
with torch.inference_mode():
    p = model.eval()(torch.tensor([ids])).softmax(-1)[0]
last.keep_attention = False
weights = last.attn[0].mean(dim=0)  # (len, len), averaged over the heads
print(f"true {LABELS[labels[short]]}, predicted {LABELS[p.argmax()]}: p = {p}")
viz.heatmap(
    weights,
    words,
    words,
    title="Last block's attention, mean over heads",
    x_title="attended word (key)",
    y_title="word (query)",
    value_title="weight",
    width=520,
    height=520,
)

# %% [markdown]
# ## Words or byte pairs?
#
# Every word outside the 20,000 most frequent is `<unk>`: names, rare adjectives, misspellings
# ("awfull"). Byte-pair encoding ([chapter 03](03_tokens_and_embeddings.ipynb)) keeps the frequent words whole and spells the
# rare ones in pieces, so nothing is unknown. `ReviewTokenizer` offers both; for byte pairs it
# learns merges on the same lower-cased words, joined by single spaces, so the two tokenizers
# see the same text and differ only in their units. The vocabulary keeps the same number of
# most frequent tokens either way.

# %% tags=["hide-output"]
show_source(ReviewTokenizer)

# %% [markdown]
# The `bpe` run is the same preset with one setting changed, `python -m annotated_transformer
# classify train --preset cpu --set tokenizer=bpe --out runs/imdb-cpu-bpe`:

# %% tags=["nbval-ignore-output"]
bpe_folder = runs_dir() / f"imdb-{preset}-bpe"
bpe_run = ensure_run("classify", preset, bpe_folder, settings=["tokenizer=bpe"],
                     fresh=preset == "tiny")
bpe_tokens = bpe_run.task.tokenizer(example)
print(" ".join(bpe_tokens))
assert BPE.decode(bpe_tokens) == " ".join(imdb.tokenize(example))

# %% tags=["nbval-ignore-output"]
rows = []
for name, run in (("words", result), ("byte pairs", bpe_run)):
    train_ids = run.task.reviews("train").ids
    tokens, unknown = sum(map(len, train_ids)), run.task.vocab["<unk>"]
    rows.append(
        {
            "tokens": name,
            "per review": tokens / len(train_ids),
            "cut at max_len": sum(len(ids) == max_len for ids in train_ids)
            / len(train_ids),
            "<unk> share": sum(ids.count(unknown) for ids in train_ids) / tokens,
            "test accuracy": run.metrics["test"]["accuracy"],
            "train seconds": run.metrics["train_seconds"],
        }
    )
pd.DataFrame(rows).set_index("tokens").round(4)

# %% [markdown]
# Byte pairs leave no word unknown, but the same review takes more tokens, so more reviews are
# cut at `max_len` and every step costs more attention. Which effect wins is an empirical
# question. For the `cpu` preset (the stored outputs) words won narrowly:
# 88.0%<!-- record imdb-cpu metrics.test.accuracy % --> against 87.7%<!-- record imdb-cpu-bpe metrics.test.accuracy % --> test accuracy, 91 reviews out of
# 25,000<!-- record imdb-cpu metrics.test.reviews -->, from one seed each, so a small difference. With 20,000 entries the word
# vocabulary already covers almost every token of a review (the `<unk>` share above), so
# there is little for byte pairs to win back. Nor do they cost time here: the byte-pair run
# took 8.2<!-- record imdb-cpu-bpe train_minutes --> minutes, the word run 8.2<!-- record imdb-cpu train_minutes --> (the table's train seconds, each on one CPU
# thread).
#
# ## Summary
#
# - The same `TransformerBlock` that a language model uses, without a look-ahead mask, is a
#   sentence encoder; a masked mean over its outputs and one linear layer make it a classifier.
# - Padding must be hidden twice: from attention (the mask) and from the pooling (the weights).
# - Vocabulary from the training split only; the validation set is carved out of the training
#   split, and the test set is scored once, at the end.
# - Speed on a CPU comes from a narrow, shallow model, batches without much padding and the
#   fused attention kernel, which attention dropout would switch off.
# - Accuracy came from reading whole reviews (`max_len` 512) and stopping early: about two
#   epochs with the learning rate decayed to zero.
# - The most confident "mistakes" are label noise: reviews that praise a film but carry a
#   negative label.
#
# The `gpu` preset is Bloem's depth-6 model at full length (512 tokens); he reports about
# 85%<!-- source Bloem 2019 --> test accuracy for his depth-6 classifier.
#
# You can now
#
# - turn the blocks into a classifier with masked mean pooling;
# - train and evaluate it through the runner, and read its mistakes.
#
# **Next:** [chapter 14 · Character-level generation](14_generation_characters.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/13_classification_imdb.py`: fill them in there, then grade them from the
# repository's root with `make exercises CHAPTER=13` (or
# `python -m annotated_transformer.exercises 13`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-13-masked-mean)=
# ### Exercise 13.1 · Mean pooling that ignores padding
#
# Write the model's pooling as a function: the mean of each review's output vectors over
# its real tokens only (`real` is True for a token, False for padding). The grader fills
# the padding positions with 10,000, so that any leak shows, and checks that a review
# pooled alone, without padding, gets the same vector.
#
# Write `masked_mean(x, real)`; grade with `make exercises CHAPTER=13`.
#
# :::{dropdown} Solution
# ```python
# def masked_mean(x: Tensor, real: Tensor) -> Tensor:
#     """The mean of each sequence's real positions.
#
#     x: (b, n, d); real: bool (b, n), False at padding. returns (b, d)
#     """
#     weights = real.unsqueeze(-1).to(x.dtype)  # (b, n, 1): 1 token, 0 padding
#     return (x * weights).sum(1) / weights.sum(1)
# ```
# :::

# %% [markdown]
# (ex-13-head-and-tail)=
# ### Exercise 13.2 · Keep the verdict: head and tail
#
# Many reviews end with their verdict, and cutting at `max_len` loses it. Sun et al.
# (2019) keep the head and the tail instead: the first `max_len − tail` tokens and the
# last `tail` (chapter 16's `classify --set tail=N`). Write it; a review that fits stays
# whole. Careful with `tail = 0`.
#
# Write `head_and_tail(ids, max_len, tail)`; grade with `make exercises CHAPTER=13`.
#
# :::{dropdown} Solution
# ```python
# def head_and_tail(ids: list[int], max_len: int, tail: int) -> list[int]:
#     """A review cut to ``max_len`` tokens: its head and its tail.
#
#     The first max_len − tail tokens, then the last ``tail``; a review that
#     fits stays whole.
#     """
#     if len(ids) <= max_len:
#         return list(ids)
#     head = list(ids[: max_len - tail])
#     return head + list(ids[len(ids) - tail :])
# ```
# :::

# %% [markdown]
# (ex-13-standard-error)=
# ### Exercise 13.3 · How sure is an accuracy?
#
# A test accuracy is the mean of $n$ outcomes, each right (1) or wrong (0), so it has a
# standard error, $\sqrt{p(1 - p)/n}$. Return both. Then use it: at an accuracy near
# $p = 0.9$ on the 25,000 test reviews, is a difference of a few tenths of a point between two models
# (chapter 16 meets some) more than the noise of the test set?
#
# Write `accuracy_and_standard_error(predictions, labels)`; grade with `make exercises
# CHAPTER=13`.
#
# :::{dropdown} Solution
# ```python
# def accuracy_and_standard_error(
#     predictions: Tensor,
#     labels: Tensor,
# ) -> tuple[float, float]:
#     """Accuracy p of class ids against labels, and its standard error.
#
#     returns (p, √(p (1 − p) / n)), both fractions
#     """
#     correct = (predictions == labels).double()
#     p = correct.mean().item()
#     return p, math.sqrt(p * (1 - p) / correct.numel())
# ```
# :::
