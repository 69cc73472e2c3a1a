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
# # 16 · Pretraining an encoder: BERT
#
# - **You will learn** BERT's masked-language-model pretraining and fine-tuning, measured against classifiers trained from scratch and a bag of words.
# - **It assumes** [chapter 13](13_classification_imdb.ipynb).
# - **Time:** about 20 minutes to read; it runs in about 7 minutes from its runs' records; training its 5 runs took 8.2–251.7 minutes each on one or two CPU threads.
#
# :::{admonition} Where the outputs come from
# :class: dropdown
# The stored outputs on this page come from the `cpu`-size runs named in each section,
# trained once from the repository root (the commands are printed with the results; the
# Time line above says what they took).
# :::
#
# The 2017 model was an encoder-decoder for translation. Within two years its blocks had
# been rearranged into the models that every later system descends from. This chapter and
# the next two build four of them from the package's pieces, run each through the same task
# runner as the rest of the book, and measure on this book's data what each idea buys:
#
# - **BERT** ([Devlin et al. 2019](../book/references.md#devlin-et-al-2019)), this chapter: an encoder alone, *pretrained* to fill in hidden words in
#   unlabelled text, then fine-tuned on a small labelled task;
# - **GPT-2** ([Radford et al. 2019](../book/references.md#radford-et-al-2019)), [chapter 17](17_gpt2.ipynb): a decoder alone, pre-norm, with tied embeddings and
#   byte-level byte-pair tokens;
# - **Transformer-XL** ([Dai et al. 2019](../book/references.md#dai-et-al-2019)) and **sparse transformers** ([Child et al. 2019](../book/references.md#child-et-al-2019)),
#   [chapter 18](18_long_context.ipynb): a memory of the previous segment, and fixed sparse
#   attention patterns, so that the context outgrows the window.
#
# The models are small and the runs short: the point is to see
# each mechanism work and to measure its effect against a baseline trained the same way, not
# to reproduce the papers' scale.

# %%
import altair as alt
import pandas as pd
import torch

from annotated_transformer.book import viz
from annotated_transformer.book.page import wrap
from annotated_transformer.book.sizes import pick, runs_dir
from annotated_transformer.book.source import show_source
from annotated_transformer.runner import ensure_run, rows_with

torch.manual_seed(0)
torch.set_num_threads(1)

# %% [markdown]
# ## Pretraining an encoder: BERT's masked language model
#
# [Chapter 13](13_classification_imdb.ipynb)'s classifier learns everything it knows about English from one bit per review:
# positive or negative. That is a thin signal for 1.4 million weights. Its embedding of
# "superb" only moves when a review containing "superb" is misclassified, and a word that
# appears in few reviews barely moves at all.
#
# BERT (Devlin et al. 2019) splits the work in two. First *pretrain* the encoder on a task
# whose labels come free with the text: hide some words and predict them from the words on
# both sides. To fill the blank in "the acting was ___ and the plot made no sense" a model
# must know which words go with which, and that a review which complains about the plot
# probably complains about the acting too. Then *fine-tune*: put a fresh two-class layer on
# the pretrained encoder and train the whole thing on the labels, as in [chapter 13](13_classification_imdb.ipynb).
#
# BERT pretrained on 3.3 billion words of books and Wikipedia. We pretrain on nothing but the
# 22,500 IMDb training reviews that [chapter 13](13_classification_imdb.ipynb) trains on, labels unused, so whatever
# the pretrained model gains comes from the objective, not from more text. The validation
# reviews are only scored, and the test reviews are not read until the fine-tuned classifier
# is tested. Both steps are tasks of the runner:
#
# ```
# python -m annotated_transformer mlm train --preset cpu --out runs/mlm-cpu
# python -m annotated_transformer classify train --preset cpu \
#     --out runs/imdb-bert-cpu --set init=runs/mlm-cpu --set N=4 --set d_model=128 \
#     --set d_ff=512 --set window=2 --set lr=1e-3
# ```

# %%
import json
import os
import time

from annotated_transformer.data import imdb
from annotated_transformer.data.masking import mask_tokens
from annotated_transformer.data.vocab import MASK
from annotated_transformer.models.encoder_only import (
    EncoderClassifier,
    MaskedLanguageModel,
)
from annotated_transformer.tasks import bag_of_words as bow
from annotated_transformer.tasks.classification import (
    SHAPES,
    Classification,
    check_pretrained,
)

PRESET = pick("tiny", "cpu")
FRESH = PRESET == "tiny"  # the tiny size trains its runs afresh

# %% [markdown]
# ### Hiding words: `[MASK]`, a random word, or unchanged
#
# Each ordinary token is *selected* with probability 0.15<!-- source Devlin et al. 2019, §3.1 -->, and the loss is the cross-entropy
# at the selected positions only. If every selected token became `[MASK]`, the model would
# learn to predict only where it sees `[MASK]`, a token that never occurs in a review it
# classifies later. So of the selected tokens 80 %<!-- source Devlin et al. 2019, §3.1 --> become
# `[MASK]`, 10 %<!-- source Devlin et al. 2019, §3.1 --> a random word and
# 10 %<!-- source Devlin et al. 2019, §3.1 --> stay as they are: the model cannot tell which visible words are genuine and must keep
# a good representation of every one of them.

# %% [markdown]
# ![A table of ten tokens, [CLS] the film was a great waste of time [SEP], with the inputs and labels mask_tokens returns. Three are selected: film becomes [MASK], waste becomes the random word piano, time stays time; their labels are the original words, every other label is -100.](figures/16_bert_masking.svg)
#
# *BERT's corruption of one review: `mask_tokens` returns the inputs and the
# labels the loss reads.*

# %%
show_source(mask_tokens)

# %% [markdown]
# Here is the start of a validation review after masking. `[MASK]` marks a hidden word,
# `~word~` a random replacement; a selected word left unchanged looks like any other, but it
# is still one of the positions the loss scores (underlined in the list below).

# %% tags=["nbval-ignore-output"]
mlm = ensure_run("mlm", PRESET, runs_dir() / f"mlm-{PRESET}", fresh=FRESH)
vocab = mlm.task.vocab
reserved = [vocab[token] for token in mlm.task.specials]
review = mlm.task.reviews("val").ids[0][:60]
inputs, labels = mask_tokens(
    torch.tensor(review),
    mask_id=vocab[MASK],
    vocab_size=len(vocab),
    special_ids=reserved,
    generator=torch.Generator().manual_seed(3),
)


def shown(new: int, old: int) -> str:
    word = vocab.itos[new]
    return "[MASK]" if word == MASK else word if new == old else f"~{word}~"


masked = zip(inputs.tolist(), review, strict=True)
lines = {
    "original:": " ".join(vocab.itos[i] for i in review),
    "input:": " ".join(shown(new, old) for new, old in masked),
    "scored:": ", ".join(vocab.itos[i] for i in labels[labels >= 0].tolist()),
}
for name, text in lines.items():
    print(wrap(f"{name:9} {text}", indent=" " * 10), end="\n\n")

# %% [markdown]
# ### Pretraining
#
# The `mlm` task uses [chapter 13](13_classification_imdb.ipynb)'s reviews and tokenizer, with one more token in the
# vocabulary, `<mask>`, and its encoder made twice as wide and twice as deep: four blocks of
# width 128 against two of width 64. (Pretrained, [chapter 13](13_classification_imdb.ipynb)'s narrower shape learns less: a
# model that must store what it learns about words needs room for it.) Its model is the classifier's encoder whose output
# layer has a "class" per word, `EncoderClassifier` with the tied embedding matrix as output
# weights, so every weight except that layer has the same name and shape as in the
# classifier. Two details keep it affordable on a CPU. The output layer costs
# 20,000 × 128 multiply-adds per position, more than the four blocks below it, so the model
# computes it only at the selected positions (`where`). And each epoch draws a new masking
# (RoBERTa's dynamic masking), so a second pass over the reviews hides different words.

# %%
show_source(MaskedLanguageModel, mlm.task.loss)

# %% [markdown]
# ### A window for the first block
#
# One change to [chapter 13](13_classification_imdb.ipynb)'s encoder decides whether the masked LM learns anything. To fill
# a blank, a model first needs the words right beside it: in "a total waste of ___" the
# answer is "time" whatever the rest of the review says. Attention can single out the
# neighbours only if it can tell them from the other words, and [chapter 13](13_classification_imdb.ipynb)'s learned
# positions start as random vectors: nothing in them says that position 41 is next to 40.
# The classifier never had to find out (a bag of words nearly suffices for sentiment), and
# the masked LM, with attention over the whole review, did not either: it stalled early,
# and its first block spread a hidden word's attention evenly over the review, its
# neighbours getting no more than any other word.
#
# So the `mlm` presets give the first block a *window*, `window=2`: each position attends
# only to the tokens at most two places away (`masks.window_mask`, the local pattern of the
# sparse transformers of [chapter 18](18_long_context.ipynb), run in both directions); the other blocks still
# see the whole review. With it the masked LM keeps learning. The classifier that
# is fine-tuned must be built the same way (`classify --set window=2`; a pretrained run with
# another window is refused).

# %%
show_source(EncoderClassifier.encode)

# %% tags=["nbval-ignore-output"]
scored = torch.cat([b.labels[b.labels >= 0] for b in mlm.task.validation])
# always guess the most common word
common = scored.bincount().max().item() / len(scored)
print(
    f"pretraining: {mlm.metrics['steps']} steps in "
    f"{mlm.metrics['train_seconds'] / 60:.1f} minutes\n"
    f"validation: {mlm.metrics['validation']['loss']:.2f} nats per hidden word, "
    f"top-1 accuracy {mlm.metrics['validation']['accuracy']:.1%}\n"
    f"(always guessing {vocab.itos[scored.bincount().argmax().item()]!r}: "
    f"{common:.1%})"
)

# %% [markdown]
# What does it predict? The three likeliest words for each blank, with their probabilities,
# first for sentences of our own, then for words hidden in validation reviews.

# %% tags=["nbval-ignore-output"]
sentences = [
    "this movie was [MASK] . i loved every minute of it",
    "the acting was [MASK] and the plot made no sense at all",
    "one of the [MASK] films i have ever seen , a total waste of [MASK]",
    "i would [MASK] recommend this movie to anyone who likes horror",
]
rows = []
for text in sentences:
    for blank, fill in enumerate(mlm.task.fill(mlm.model, text, top=3), 1):
        guesses = ", ".join(f"{word} ({p:.0%})" for word, p in fill)
        rows.append({"text": text, "blank": blank, "top three": guesses})
pd.DataFrame(rows).style.hide(axis="index")

# %% tags=["nbval-ignore-output"]
rows = []
for review in mlm.task.raw["val"][0][:4]:
    words = imdb.tokenize(review)[:24]
    hidden = [4, 11, 18]
    text = " ".join("[MASK]" if i in hidden else w for i, w in enumerate(words))
    for i, fill in zip(hidden, mlm.task.fill(mlm.model, text, top=3), strict=True):
        context = (
            " ".join(words[max(0, i - 6) : i])
            + " ___ "
            + " ".join(words[i + 1 : i + 5])
        )
        guess = ", ".join(word for word, _ in fill)
        rows.append(
            {"context": context, "hidden word": words[i], "top three": guess}
        )
pd.DataFrame(rows).style.hide(axis="index")

# %% [markdown]
# ### Fine-tuning
#
# `classify --set init=RUN` builds [chapter 13](13_classification_imdb.ipynb)'s classifier with the pretrained run's
# vocabulary and copies its embeddings, positions and blocks; only the two-class output layer
# starts from random weights. A pretrained run of other sizes, another tokenizer or another
# validation split is refused in one line, before any training, so the classifier is given
# the pretrained encoder's sizes and window. The rest is [chapter 13](13_classification_imdb.ipynb)'s recipe, with half its
# peak learning rate: large steps would wash out what pretraining found. Its 1,300 steps
# were chosen over 650 (`--set steps=650 --set warmup=50`) on the validation reviews.

# %%
show_source(Classification.build_model, check_pretrained)

# %%
# a chapter runs in notebooks/, the command line at the top
init = os.path.relpath(mlm.out)
# what check_pretrained compares
shape = [f"{k}={getattr(mlm.task.config.model, k)}" for k in SHAPES]
recipe = [*shape, "lr=1e-3"]  # built as the pretrained encoder was
bert = runs_dir() / f"imdb-bert-{PRESET}"
# The rows of a table and curves: records without weights will do.
tuned = ensure_run(
    "classify",
    PRESET,
    bert,
    settings=[f"init={init}", *recipe],
    fresh=FRESH,
    weights=False,
)
scratch = ensure_run("classify", PRESET, runs_dir() / f"imdb-{PRESET}")
# The same classifier, sizes and window from scratch: is it pretraining that pays,
# or size?
sized = ensure_run(
    "classify",
    PRESET,
    runs_dir() / f"imdb-big-scratch-{PRESET}",
    settings=recipe,
    fresh=FRESH,
    weights=False,
)
# Chapter 13's model with four times its steps (its schedule stretched to fit),
# keeping the best validated checkpoint: does more training from scratch pay?
long_settings = [
    f"steps={4 * scratch.task.config.steps}",
    f"eval_every={pick(40, 400)}",
    "final=best",
]
long = ensure_run(
    "classify",
    PRESET,
    runs_dir() / f"imdb-long-{PRESET}",
    settings=long_settings,
    fresh=FRESH,
    weights=False,
)

# %% [markdown]
# ### The yardstick: a bag of words
#
# Before crediting the Transformer with anything, compare it with the classic recipe: count
# the words and word pairs of each review, weight them by tf-idf, fit a logistic regression.
# Published bag-of-words results on this split are around 88–89 %<!-- source Maas et al. 2011, Table 2 -->; [chapter 13](13_classification_imdb.ipynb)'s
# Transformer, at 88.04 %<!-- record imdb-cpu metrics.test.accuracy % --> (the table below), is no better. We train ours on the same training reviews, choose its
# L2 penalty on the same validation reviews and test it once.

# %%
show_source(bow.TfIdf.fit, bow.LogisticRegression.fit, bow.baseline)

# %% tags=["nbval-ignore-output"]
kept = runs_dir() / f"bow-{PRESET}.json"  # minutes at full size: kept like a run
if kept.is_file() and not FRESH:
    words = json.loads(kept.read_text())
else:
    splits = {
        name: ([imdb.tokenize(text) for text in texts], labels)
        for name, (texts, labels) in tuned.task.raw.items()
    }
    start = time.perf_counter()
    words = bow.baseline(splits) | {"seconds": time.perf_counter() - start}
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(
        json.dumps(words | {"val_accuracy": list(words["val_accuracy"].items())})
    )
words["val_accuracy"] = dict(words["val_accuracy"])
bow_seconds = words["seconds"]
by_l2 = ", ".join(f"{l2:g}: {acc:.2%}" for l2, acc in words["val_accuracy"].items())
print(f"{words['features']:,} words and word pairs")
print(wrap(f"validation accuracy by L2: {by_l2}", indent="  "))

# %% [markdown]
# ### What pretraining bought
#
# Test accuracy on the 25,000 test reviews, and the minutes each model took to train (for
# the fine-tuned model, pretraining included). Each run's minutes are its record's
# training time, on the machine the Results page names (the bag of words' include building
# its tf-idf table): read them as orders of magnitude, not as ratios.

# %% tags=["nbval-ignore-output"]
pretrain_min = mlm.metrics["train_seconds"] / 60
rows = [
    (
        "bag of words (tf-idf, logistic regression)",
        words["test_accuracy"],
        bow_seconds / 60,
    )
]
for name, run, before in [
    ("Transformer from scratch (chapter 13)", scratch, 0.0),
    ("Transformer from scratch (chapter 13), 4× the steps", long, 0.0),
    ("Transformer from scratch, the pretrained encoder's size", sized, 0.0),
    ("Transformer pretrained (masked LM) + fine-tuned", tuned, pretrain_min),
]:
    rows.append(
        (
            name,
            run.metrics["test"]["accuracy"],
            before + run.metrics["train_seconds"] / 60,
        )
    )
table = pd.DataFrame(rows, columns=["model", "test accuracy", "minutes"])
table.style.format({"test accuracy": "{:.2%}", "minutes": "{:.1f}"}).hide(
    axis="index"
)

# %% [markdown]
# Is the gap between the bag of words and the pretrained model more than chance? A test
# accuracy $p$ measured on $n$ reviews has a standard error of $\sqrt{p(1-p)/n}$:

# %% tags=["nbval-ignore-output"]
p = tuned.metrics["test"]["accuracy"]
n = tuned.metrics["test"]["reviews"]
gap = words["test_accuracy"] - p
error = (p * (1 - p) / n) ** 0.5
print(
    f"bag of words minus pretrained: {100 * gap:+.2f} points\n"
    f"one standard error on {n:,} reviews: {100 * error:.2f} points\n"
    f"the gap in standard errors: {gap / error:+.1f}"
)

# %% [markdown]
# The learning curves on the validation reviews, against the minutes spent: the fine-tuned
# model's curve starts where pretraining ended.

# %% tags=["nbval-ignore-output"]
curves = []
for name, run, before in [
    ("chapter 13", scratch, 0.0),
    ("chapter 13, 4× the steps", long, 0.0),
    ("pretrained + fine-tuned", tuned, pretrain_min),
]:
    validated = rows_with(run.history, "val_accuracy")
    curves.append(
        validated.assign(model=name, minutes=before + validated["seconds"] / 60)
    )
curves = pd.concat(curves)
by_step = rows_with(long.history, "val_accuracy").set_index("step")
val_loss = by_step["val_loss"]
print(
    f"chapter 13's model, 4× the steps ({long.metrics['steps']:,}):\n"
    f"  validation accuracy peaks at step {by_step['val_accuracy'].idxmax():,}\n"
    f"  validation loss: lowest {val_loss.min():.2f} (step "
    f"{val_loss.idxmin():,}), last {val_loss.iloc[-1]:.2f}"
)
lines = viz.line_chart(
    curves,
    "minutes",
    "val_accuracy",
    "model",
    title="Validation accuracy against training time",
    x_title="minutes of training, pretraining included",
    y_title="validation accuracy",
)
best_words = max(words["val_accuracy"].values())
rule = (
    alt.Chart(
        pd.DataFrame({"val_accuracy": [best_words], "label": ["bag of words"]})
    )
    .mark_rule(strokeDash=[4, 4], color="gray")
    .encode(y="val_accuracy:Q", tooltip=["label:N", "val_accuracy:Q"])
)
zoomed = alt.Y(
    "val_accuracy:Q", title="validation accuracy", scale=alt.Scale(zero=False)
)
chart = lines.mark_line(point=True).encode(y=zoomed) + rule
chart.configure_axisY(format="%").configure_legend(orient="bottom", labelLimit=0)

# %% [markdown]
# The table is the section's result. Each Transformer row is a command of its own, printed
# above with the runs; the pretrained row's minutes are pretraining plus fine-tuning. Three
# readings:
#
# - **Pretraining pays.** The pretrained and fine-tuned encoder scores
#   89.68 %<!-- record imdb-bert-cpu metrics.test.accuracy % -->, ahead of all three
#   Transformers trained from scratch: [chapter 13](13_classification_imdb.ipynb)'s model
#   (88.04 %<!-- record imdb-cpu metrics.test.accuracy % -->), an encoder of the pretrained
#   one's size and window (87.16 %<!-- record imdb-big-scratch-cpu metrics.test.accuracy % -->)
#   and [chapter 13](13_classification_imdb.ipynb)'s model with four times its steps
#   (86.88 %<!-- record imdb-long-cpu metrics.test.accuracy % -->). The masked LM behind it
#   guesses 32.07 %<!-- record mlm-cpu metrics.validation.accuracy % --> of the hidden
#   validation words, far more than always guessing the commonest word (printed under "A
#   window for the first block"): it learned which words go together from every word of
#   every review, not from one bit per review.
# - **Size alone does not explain it.** From scratch, the bigger encoder scores less than
#   [chapter 13](13_classification_imdb.ipynb)'s small one; pretraining is what lets the
#   extra width and depth pay.
# - **More training from scratch does not help.** Four times
#   [chapter 13](13_classification_imdb.ipynb)'s steps score lower. The run's validation
#   accuracy (the orange curve) peaks a third of the way in and then drifts, while its
#   validation loss more than doubles (printed above the chart): more steps of the same
#   recipe fit the training reviews rather than new ones. The run keeps its best validated
#   weights (`final=best`), so its test figure is the peak's.
#
# The bag of words still leads, in a fraction of the training time (the cell under the table
# prints by how much, in points and in standard errors). It is given what the Transformer
# must learn from the reviews, that sentiment rides on which words occur, and 22,500
# reviews of pretraining teach the encoder only a little English: 10,000 steps of
# pretraining are a sliver of BERT-base's million, on a far narrower and shallower encoder.
#
# Two changes to the fine-tuning alone are options of the command line, not run on this
# page. The classifier reads only the first 512 tokens of a review, and a reviewer often sums
# up at the end: `--set tail=384` keeps the first 128 and the last 384 tokens, close to what
# Sun et al. (2019) found best for BERT on this dataset. And several fine-tuning recipes
# that validation cannot rank can be averaged *weight by weight* into a "model soup"
# ([Wortsman et al. 2022](../book/references.md#wortsman-et-al-2022)), which works because
# they all start from one pretrained encoder: `classify evaluate --checkpoint A --checkpoint
# B ...` evaluates the soup of the checkpoints it is given.

# %% [markdown]
# ## Summary
#
# Measured on this book's data: masked-LM pretraining on the very reviews the classifier
# learns from lifts a Transformer above every one trained from scratch, larger or trained
# longer, though not above a bag of words.
#
# You can now
#
# - corrupt text the way BERT does (`[MASK]`, a random word, or the word unchanged) and
#   train an encoder to restore it;
# - fine-tune the pretrained encoder on a labelled task, and tell what pretraining bought
#   from what size or longer training would have;
# - compare a Transformer with a bag of words, in points and in standard errors.
#
# **Next:** [chapter 17 · GPT-2's recipe](17_gpt2.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/16_bert.py`: fill them in there, then grade them from the
# repository's root with `make exercises CHAPTER=16` (or
# `python -m annotated_transformer.exercises 16`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-16-bert-masking)=
# ### Exercise 16.1 · BERT's masking, 80/10/10, checked statistically
#
# The package's `mask_tokens` selects each token on its own with probability $p$, so a
# review may get more or fewer than a fraction $p$ of its tokens selected, as in many later
# implementations. The original BERT code chose a fixed number per sequence instead,
# about $p$ of its length. Write that variant: in each row select exactly $\max(1,
# \mathrm{round}(p k))$ of its $k$ ordinary tokens, then apply the same 80/10/10 rule,
# drawing every random number from `generator`.
#
# The grader checks the count per row, that no special token is selected or drawn as a
# replacement, that one seed gives one masking, and, over several thousand selected
# tokens, that the shares that became `[MASK]` and a random word are the rule's, to within
# five standard errors.
#
# Write `mask_exactly(tokens, mask_id, vocab_size, special_ids, p, generator)`; grade
# with `make exercises CHAPTER=16`.
#
# :::{dropdown} Solution
# ```python
# def mask_exactly(
#     tokens: Tensor,
#     mask_id: int,
#     vocab_size: int,
#     special_ids: Sequence[int],
#     p: float = 0.15,
#     generator: torch.Generator | None = None,
# ) -> tuple[Tensor, Tensor]:
#     """The original BERT's masking of ``tokens`` (b, n): (inputs, labels).
#
#     In each row exactly max(1, round(p · k)) of its k ordinary tokens are
#     selected; of those, 80 % become ``mask_id``, 10 % a random ordinary id and
#     10 % stay. labels: the original id where selected, -100 elsewhere.
#     """
#     special = torch.zeros(vocab_size, dtype=torch.bool)
#     special[list(special_ids)] = True
#     special[mask_id] = True
#     ordinary_ids = (~special).nonzero().squeeze(1)
#     inputs = tokens.clone()
#     labels = torch.full_like(tokens, -100)  # F.cross_entropy's ignore_index
#     for row in range(tokens.size(0)):
#         candidates = (~special[tokens[row]]).nonzero().squeeze(1)
#         if candidates.numel() == 0:
#             continue
#         count = max(1, round(p * candidates.numel()))
#         order = torch.randperm(candidates.numel(), generator=generator)
#         chosen = candidates[order[:count]]
#         labels[row, chosen] = tokens[row, chosen]
#         action = torch.rand(count, generator=generator)
#         n_ordinary = ordinary_ids.numel()
#         draw = torch.randint(n_ordinary, (count,), generator=generator)
#         original = tokens[row, chosen]
#         replaced = torch.where(action < 0.9, ordinary_ids[draw], original)
#         inputs[row, chosen] = torch.where(action < 0.8, mask_id, replaced)
#     return inputs, labels
# ```
# :::

# %% [markdown]
# (ex-16-load-matching)=
# ### Exercise 16.2 · Fine-tuning starts from the pretrained encoder
#
# `classify --set init=RUN` builds the classifier and copies into it every weight of the
# masked language model that it shares: the same name and the same shape. Write that
# copy for any model and any state dict, and return the names of the model's tensors
# left as they were. The grader starts chapter 13's classifier from a masked language
# model and checks every tensor: the encoder's copied, the new two-class head untouched,
# and no tensor shared with the pretrained model.
#
# Write `load_matching(model, state)`; grade with `make exercises CHAPTER=16`.
#
# :::{dropdown} Solution
# ```python
# def load_matching(model: nn.Module, state: dict[str, Tensor]) -> list[str]:
#     """Start ``model`` from a pretrained ``state`` (a state dict).
#
#     Copies every tensor whose name and shape match one of the model's; returns
#     the sorted names of the model's tensors left as they were (a new head).
#     """
#     own = model.state_dict()
#     kept = {}
#     for name, value in state.items():
#         if name in own and own[name].shape == value.shape:
#             kept[name] = value
#     model.load_state_dict(kept, strict=False)  # copies into the model
#     return sorted(set(own) - set(kept))
# ```
# :::

# %% [markdown]
# (ex-16-masked-accuracy)=
# ### Exercise 16.3 · The masked LM's accuracy counts the hidden words only
#
# The masked language model's validation accuracy, printed with its runs, is the share of
# *selected* words it predicts; every other position carries the label -100 and no
# prediction is asked of it there. Write that score from the logits and the labels that
# `mask_tokens` returns. The grader compares with a loop over every position, and checks
# that the predictions at positions labelled -100 do not change it.
#
# Write `masked_accuracy(logits, labels)`; grade with `make exercises CHAPTER=16`.
#
# :::{dropdown} Solution
# ```python
# def masked_accuracy(logits: Tensor, labels: Tensor) -> float:
#     """The share of hidden words the masked LM predicts.
#
#     logits: (b, n, V); labels: (b, n), the original id where selected, -100
#     elsewhere; only the selected positions count.
#     """
#     hidden = labels != -100
#     right = logits.argmax(-1)[hidden] == labels[hidden]
#     return right.double().mean().item()
# ```
# :::
