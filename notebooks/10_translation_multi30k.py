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
# # 10 · German→English on Multi30k
#
# - **You will learn** a real translation task end to end: data, tokenizers, vocabularies, batches with little padding, the task runner, training and BLEU.
# - **It assumes** [chapter 09](09_copy_task.ipynb), and [chapter 03](03_tokens_and_embeddings.ipynb) for byte-pair encoding.
# - **Time:** about 20 minutes to read; it runs in about a minute from its run's record; training its run took 128.3 minutes on one CPU thread.
#
# :::{admonition} Where the outputs come from
# :class: dropdown
# The stored outputs on this page come from the `cpu` preset (3 + 3 layers, d_model 256, all
# 29,000 training pairs, 12 epochs, one shared byte-pair vocabulary, packed random batches),
# trained with
#
#     python -m annotated_transformer translate train \
#         --preset cpu --out runs/translate-cpu
#
# in 128.3<!-- record translate-cpu train_minutes --> minutes on one CPU core, and read from its record,
# `results/translate-cpu`, which publishes the weights: `make execute
# CHAPTER=10_translation_multi30k` re-executes this chapter from it without training.
# :::
#
# The copy task of chapter 09 showed that the model, loss and decoding work. Now the real
# thing: translating German image descriptions into English, the task the Annotated
# Transformer ends with. Everything the earlier chapters built is used here, and a few
# practical pieces join them: a data set and its tokenizers, vocabularies, batches of
# similar-length sentences, checkpoints, and a way to score translations (BLEU), which the
# original notebook never computed.
#
# All of it lives in the package: `multi30k` (the data), `batching`, `tasks.translation` (the
# task: vocabularies, batches, model, loss, translator, scores) and `runner`, which trains any
# task and is what the command line `python -m annotated_transformer translate ...` runs.
# This chapter walks through the pieces and then trains through that same runner, so that
# what you read here is exactly what runs.

# %%
import functools
from collections import Counter

import altair as alt
import pandas as pd
import torch

from annotated_transformer.blocks.masks import segment_mask
from annotated_transformer.book import viz
from annotated_transformer.book.page import print_log, wrap
from annotated_transformer.book.sizes import pick, runs_dir
from annotated_transformer.book.source import show_source
from annotated_transformer.data.batching import (
    bucket_batches,
    fixed_batches,
    pack_rows,
    padding_ratio,
)
from annotated_transformer.data.multi30k import (
    SPLITS,
    build_vocabs,
    detokenize,
    load_split,
    tokenize,
)
from annotated_transformer.data.vocab import Vocab
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
)
from annotated_transformer.runner import Run, ensure_run, rows_with
from annotated_transformer.tasks.base import TrainConfig, flat_settings
from annotated_transformer.tasks.translation import (
    PRESETS,
    Translation,
    TranslationConfig,
    make_batch,
    make_packed_batch,
    pair_lengths,
    score,
)
from annotated_transformer.training.loss import seq2seq_loss

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## The data
#
# Multi30k ([Elliott et al. 2016](../book/references.md#elliott-et-al-2016)) pairs English descriptions of Flickr photos with German
# translations made by professional translators. Its task 1 has 29,000 training pairs, 1,014
# for validation and several test sets; `test2016` is the one Multi30k results are usually
# reported on. The sentences are short and the vocabulary small, which is why a small model
# trained on a CPU can already translate many of them.
#
# The package downloads the raw files (checking their SHA-256) or reads them from a local
# mirror:

# %% tags=["hide-output"]
show_source(load_split)

# %%
splits = {name: load_split(name) for name in SPLITS}
pd.DataFrame(
    {"pairs": {name: len(de) for name, (de, en) in splits.items()}}
).rename_axis("split")

# %%
train_de, train_en = splits["train"]
for de, en in zip(train_de[:3], train_en[:3], strict=True):
    print(f"de: {de}\nen: {en}\n")

# %% [markdown]
# ## Tokenizers
#
# The Annotated Transformer split sentences into words with spaCy's German and English
# pipelines. Only their tokenizers were used, and those are rules (prefixes, suffixes,
# infixes and exceptions per language) that `spacy.blank(lang)` provides without downloading
# any model:

# %%
show_source(tokenize)

# %%
german = "Ein Mann in einem blauen Hemd steht auf einer Leiter."
english = "A man in a blue shirt isn't standing on a ladder."
print(wrap(str(tokenize([german], "de")[0])))
print(wrap(str(tokenize([english], "en")[0])))

# %% [markdown]
# Punctuation is split off and English clitics ("n't") become tokens of their own. Scores are
# computed on text, so the model's English tokens have to be joined back; `detokenize` undoes
# what the tokenizer did, closely enough that standard BLEU can score the result:

# %%
sentence = "A brown-haired girl (in red) isn't jumping, she's running."
tokens = tokenize([sentence], "en")[0]
print(wrap(str(tokens)))
print(detokenize(tokens))
assert detokenize(tokens) == sentence

# %% [markdown]
# How long are the sentences? Source and target lengths in tokens, over the whole training
# set (counted, then drawn: the chart holds one row per length, not per sentence):

# %%
train_src = tokenize(train_de, "de")
train_tgt = tokenize(train_en, "en")
counts = pd.concat(
    [
        pd.Series(Counter(len(s) for s in side), name="sentences")
        .rename_axis("tokens")
        .reset_index()
        .assign(language=language)
        for language, side in (
            ("German (source)", train_src),
            ("English (target)", train_tgt),
        )
    ]
)
alt.Chart(counts, title="Sentence lengths in the Multi30k training set").mark_line(
    point=True
).encode(
    x=alt.X("tokens:Q", title="length (spaCy tokens)"),
    y=alt.Y("sentences:Q", title="sentences"),
    color=alt.Color("language:N", title=None, legend=alt.Legend(orient="bottom")),
    tooltip=["language:N", "tokens:Q", "sentences:Q"],
).properties(width=520, height=260)

# %%
lengths = pd.DataFrame(
    {"German": [len(s) for s in train_src], "English": [len(t) for t in train_tgt]}
)
lengths.describe().loc[["mean", "50%", "max"]].round(1)

# %% [markdown]
# Most sentences have 8 to 16 tokens, a few are much longer. That spread matters for
# batching, below.
#
# ## Vocabularies
#
# Each side gets its own vocabulary: every token seen at least twice in the **training** set,
# after four special tokens (`<pad>`, `<unk>`, `<s>`, `</s>`). Rarer tokens become `<unk>`.
# The Annotated Transformer built its vocabularies from train, validation *and* test, so test
# words the model can never have seen in training still got their own ids; here the test
# sets are kept out.

# %%
show_source(build_vocabs, Vocab.build)

# %%
src_vocab, tgt_vocab = build_vocabs(train_src, train_tgt, min_freq=2)
print(f"German vocabulary: {len(src_vocab):,} tokens; English: {len(tgt_vocab):,}")
print("first ids:", src_vocab.itos[:10])

# %% [markdown]
# What would train + validation + test have added? The tokens that the original's
# vocabulary would hold and ours does not, and how often test2016 uses a token that our
# vocabulary lacks (those become `<unk>` for the model):

# %%
everything_de = train_src + [
    s for name in ("val", "test2016") for s in tokenize(splits[name][0], "de")
]
leaky = Vocab.build(everything_de, min_freq=2)
test_src = tokenize(splits["test2016"][0], "de")
test_tokens = [t for s in test_src for t in s]
unknown = sum(t not in src_vocab for t in test_tokens)
print(
    "German tokens added by building from train+val+test: "
    f"{len(leaky) - len(src_vocab):,}"
)
print(
    f"test2016 German tokens read as <unk>: {unknown:,} of {len(test_tokens):,} "
    f"({unknown / len(test_tokens):.1%})"
)
unknown_sentences = sum(any(t not in src_vocab for t in s) for s in test_src)
print(
    f"test2016 sentences with at least one <unk>: {unknown_sentences:,} of "
    f"{len(test_src):,}"
)

# %% [markdown]
# A few per cent of the tokens sounds harmless, but they are spread over many sentences, and
# they are the informative ones: names, rare nouns, compound words ("Dachreparatur"). A model
# that reads `<unk>` cannot translate them, and one that *writes* `<unk>` puts the token in
# its output for the reader to see. Word vocabularies are how the Annotated Transformer
# started, and they are what this chapter's pipeline shows; the `cpu` preset that this page
# trains below uses a better choice instead, which [chapter 12](12_tricks_from_the_paper.ipynb) builds step by step: one
# vocabulary of *byte pairs* shared by German and English (`tokens="bpe"`), learned on the
# training text only. Any word splits into known pieces, down to single bytes, so no token is
# ever unknown.

# %% [markdown]
# :::{admonition} Find the bug
# :class: tip
# {ref}`Exercise 10.1 <ex-10-train-vocab>` hands you the original's vocabulary, built
# from every split, to repair.
# :::

# %% [markdown]
# ## Batching
#
# The original cut the shuffled training set into batches of 32 sentences and padded every
# sentence to 72 tokens. Padding costs compute and teaches nothing, so we measure it:
# `padding_ratio` counts, over all batches and both sides, the fraction of positions that are
# padding.

# %%
show_source(padding_ratio)

# %% [markdown]
# Three ways to batch the same 29,000 pairs (lengths include `<s>` and `</s>`):
#
# 1. the original's: 32 random pairs, every sentence padded to 72 tokens;
# 2. 32 random pairs, each batch padded only to its own longest sentence;
# 3. length buckets: sort by length, then fill each batch up to a token budget
#    (`len(batch) × longest <= max_tokens`), so that sentences in a batch have similar
#    lengths. The order of the batches is shuffled every epoch (seeded).

# %%
show_source(bucket_batches)

# %%
pairs = [
    (src_vocab.encode(s), tgt_vocab.encode(t))
    for s, t in zip(train_src, train_tgt, strict=True)
]
pair_len = pair_lengths(pairs)  # (source, target) with <s> and </s>
random_32 = fixed_batches(len(pairs), 32, seed=0)
budget = PRESETS["cpu"].max_tokens
buckets = bucket_batches(pair_len, budget, seed=0)
ratios = pd.DataFrame(
    {
        "batches": [len(random_32), len(random_32), len(buckets)],
        "padding": [
            padding_ratio(random_32, pair_len, pad_to=72),
            padding_ratio(random_32, pair_len),
            padding_ratio(buckets, pair_len),
        ],
    },
    index=[
        "32 random pairs, padded to 72 (original)",
        "32 random pairs, padded to the longest",
        f"length buckets, max_tokens={budget}",
    ],
)
ratios.assign(padding=ratios["padding"].map("{:.1%}".format))

# %% [markdown]
# Padding to 72 makes most positions padding. Padding each batch only to its own longest
# sentence helps, but a random batch of 32 nearly always holds one long sentence, so a large
# share is still padding. Bucketing by length leaves only a few per cent. Bucketed batches hold
# a varying number of sentences (many short ones, few long ones) but a similar number of
# tokens, which keeps the cost of each step roughly constant.
#
# ### Packing
#
# Sorting by length has a cost that the padding ratio does not show. A bucket is not a random
# sample of the data: all its sentences have about the same length, and so, often, the same
# kind of content (short captions like "A dog runs." together, long ones together).
# `benchmarks/batching.py` trains the same model for one epoch on both kinds of batches, at
# the same number of steps: the bucketed epoch is several times faster but ends with a higher
# validation loss (`benchmarks/README.md` has the figures and the command). Sorting only
# within small random pools closes that gap only once the pools are so small that the padding
# comes back.
#
# *Packing* keeps every batch a random draw and removes the padding another way: it lays
# several pairs end to end in one row. `pack_rows` decides which pairs share a row: as many
# rows as the batch fills at about `width` tokens a row, then each pair, longest first, into
# the row that stays shortest with it. Rows come out nearly equally long, so little padding is
# left at their ends:

# %% [markdown]
# ![Three sentence pairs laid end to end in one row, each in its own colour, with positions restarting at 0 for each pair and one padding token at the end of each side. Below, three attention masks from segment_mask: encoder self-attention and decoder-to-source attention are block-diagonal, one block per pair, and the decoder's self-attention is block-diagonal and lower-triangular; the padding row may attend to every key.](figures/10_packing.svg)
#
# *Packing: several pairs share a row; `segment_positions` restarts the positions
# and `segment_mask` keeps every token inside its own pair (drawn from
# `PackedBatch`).*

# %%
show_source(pack_rows)

# %%
PACK_WIDTH = 48
packed = [
    [
        [batch[j] for j in row]
        for row in pack_rows([pair_len[i] for i in batch], PACK_WIDTH)
    ]
    for batch in random_32
]
ratios.loc[f"32 random pairs, packed in rows of ~{PACK_WIDTH}"] = [
    len(packed),
    padding_ratio(packed, pair_len, packed=True),
]
ratios.assign(padding=ratios["padding"].map("{:.1%}".format))

# %% [markdown]
# Inside a row, each pair must behave as if it were alone, and two things would let it see
# past its borders: attention and positions. `PackedBatch` numbers the pairs of each row as
# segments 1, 2, 3, … (0 is padding) and builds every mask with `segment_mask`: a token attends
# only to tokens of its own segment (and, in the decoder's self-attention, only to earlier
# ones). Positions restart at 0 for every pair (`segment_positions`), so the positional
# encoding of a pair does not depend on where in the row it landed.

# %%
show_source(segment_mask)

# %% [markdown]
# One row holding three short pairs: the decoder's self-attention (each target token sees the
# earlier tokens of its own sentence) and its attention over the source (each target token
# sees only its own German sentence).

# %%
short = [i for i, (s, t) in enumerate(pair_len) if s <= 6 and t <= 6][:3]
one_row = make_packed_batch(pairs, [short], src_vocab)  # one row: the pairs `short`
src_labels = [src_vocab.itos[i] for i in one_row.src[0].tolist()]
tgt_labels = [tgt_vocab.itos[i] for i in one_row.tgt[0].tolist()]
mask_chart = functools.partial(
    viz.heatmap,
    x_title="key",
    y_title="query (target token)",
    value_title="may attend",
    domain=(0, 1),
    width=240,
    height=240,
)
(
    mask_chart(
        one_row.tgt_mask[0].int(),
        tgt_labels,
        tgt_labels,
        title="Decoder self-attention",
    )
    | mask_chart(
        one_row.packing["memory_mask"][0].int(),
        src_labels,
        tgt_labels,
        title="Source attention",
    )
).configure_legend(orient="bottom")

# %% [markdown]
# The claim "as if each pair were alone" is checked, not assumed: a small random model gives
# the same summed loss on the three pairs packed into one row as on the same pairs in an
# ordinary padded batch (the tests check the gradients too).

# %%
torch.manual_seed(0)
small = Transformer(
    TransformerConfig(len(src_vocab), len(tgt_vocab), N=2, d_model=32, d_ff=64, h=4)
).eval()
padded = make_batch(pairs, short, src_vocab)  # one pair a row, padded
loss = seq2seq_loss(tgt_vocab.stoi["<pad>"], 0.1)
print("padded:", round(loss(small, padded)[0].item(), 4))
print("packed:", round(loss(small, one_row)[0].item(), 4))

# %% [markdown]
# Does it pay? `benchmarks/batching.py` trains one epoch each way (`benchmarks/README.md` has
# the table): packed random batches end at about the validation loss of the original's random
# batches, and nearly as fast as length buckets, which end higher. Packing keeps what random
# batches are worth and nearly all the speed of buckets; its masks cost a small fraction of
# a step. The `cpu` preset therefore trains on packed batches.
#
# The translation task hands such batches to training, one epoch at a time: length buckets by
# default, packed random batches with `pack_width` set. Epoch $e$'s batches depend only on the
# seed and $e$, so a resumed run sees exactly the batches it would have seen.

# %% tags=["hide-output"]
show_source(Translation.batches)

# %% [markdown]
# ## Training
#
# Everything that trains a model in this book goes through one runner. A *task* says what
# differs between jobs — here the data and vocabularies, the `Transformer`, the label-smoothed
# loss, `batches(epoch)`, and the validation and test scores — and the runner does the rest
# the same way for every task: device and precision, the optimiser and its learning-rate
# schedule ([chapter 08](08_training.ipynb)), checkpoints, logs and resuming. The whole recipe is one config
# dataclass: the task's fields on top of the optimisation fields every task shares.

# %% tags=["hide-output"]
show_source(TrainConfig, TranslationConfig)

# %% [markdown]
# A *preset* is such a config with its values filled in. Three matter here: `tiny` (a model
# that learns next to nothing, to check quickly that everything runs), `cpu` (the size
# of this chapter: 3 + 3 layers, d_model 256, all training pairs, one byte-pair vocabulary
# shared by both languages, packed random batches; its training time is in the Time line above) and `base` (for a GPU: the paper's base size, 6 + 6 layers and d_model 512, but with
# word vocabularies and untied embeddings, as the table shows). Compared with
# the paper, `cpu` is smaller in every direction because the data set is small: 29,000 short
# sentences, not 4.5 million. It uses a linear warm-up then a cosine decay of the learning
# rate, which reaches a good model in fewer epochs than the Noam schedule of [chapter 08](08_training.ipynb). Its
# beam size and length penalty α were chosen on the validation set, from greedy decoding and
# beams 4 and 8 with five values of α ([chapter 12](12_tricks_from_the_paper.ipynb) has the grid and explains both).

# %% tags=["hide-output"]
presets = {name: flat_settings(PRESETS[name]) for name in ("tiny", "cpu", "base")}
table = pd.DataFrame(presets).rename_axis("setting")
table.map(lambda v: f"{v:.3g}" if isinstance(v, float) else str(v))  # 3 digits

# %% [markdown]
# The runner's `Run` builds the task, the model, the optimiser, the scheduler and [chapter
# 08](08_training.ipynb)'s `Trainer`; `train` runs `Trainer.fit` with an evaluation hook, `validate`, which the
# trainer calls at the end of every epoch (here `eval_every` is 0): it scores the model on the
# validation set, keeps the best weights in `best.pt`, and keeps the last `keep_last` epochs
# for averaging ([chapter 12](12_tricks_from_the_paper.ipynb)).

# %% tags=["hide-output"]
show_source(Run.train, Run.validate)

# %% [markdown]
# At the end, `finish` picks the final weights — with `final="best"`, the better on
# validation BLEU of the best epoch and the average of the kept ones — and scores them once on
# test2016, with beam search:

# %% tags=["hide-output"]
show_source(Run.finish)

# %% [markdown]
# A run writes everything into one folder, every file atomically (a kill never leaves half a
# file): `last.pt` (all that is needed to resume), `best.pt`, `keep-NNNNNN.pt` (the kept
# epochs), `averaged.pt`, `final.pt`, `history.csv` (one row per optimiser step, with the
# validation scores on the steps that have them), `metrics.json` (the test2016 scores) and
# `train.log`. Each checkpoint holds the config and both vocabularies, so it can be loaded on
# its own.
#
# The chapter calls the runner with the arguments of the command you would type,
# `python -m annotated_transformer translate train --preset cpu --out runs/translate-cpu`. If
# that folder already holds a finished run (for instance one trained beforehand with that
# command, on all cores), it is reused; an interrupted one is resumed; otherwise training
# starts there.

# %% tags=["nbval-ignore-output"]
PRESET = pick(ci="tiny", full="cpu")
run = ensure_run(
    "translate", PRESET, runs_dir() / f"translate-{PRESET}", fresh=PRESET == "tiny"
)
print(
    f"python -m annotated_transformer translate train --preset {PRESET} \\\n"
    f"    --out runs/{run.out.name}"
)

# %% [markdown]
# The run's log, `train.log`: what the model was, one line per epoch with the validation loss
# and greedy BLEU, the choice of the final weights, then the test2016 score.

# %% tags=["nbval-ignore-output"]
print_log(run.out / "train.log")

# %% [markdown]
# The log's last line is the test score the run wrote when it finished, decoded with the
# preset's beam 4 and α 1.0 (the pair that [chapter 12](12_tricks_from_the_paper.ipynb)
# chooses on validation): sacreBLEU 40.42<!-- record translate-cpu metrics.test.bleu -->. The table
# under "BLEU on test2016" below decodes the same `final.pt` the same way, and its beam row
# repeats that score.
#
# The same numbers from `history.csv`, one row per epoch:

# %% tags=["nbval-ignore-output"]
history, metrics = run.history, run.metrics
epochs = rows_with(history, "val_bleu").assign(epoch=lambda frame: frame.index + 1)
print(
    f"{metrics['preset']}: {metrics['steps']:,} optimiser steps, {len(epochs)} "
    "epochs, "
    f"{metrics['train_seconds'] / 60:.0f} minutes of training"
)
epochs.set_index("epoch")[["step", "loss", "val_loss", "val_bleu"]].round(3)

# %% [markdown]
# The training loss per step (label-smoothed, so it cannot reach zero), with the learning
# rate beside it, and the validation loss and BLEU after each epoch:

# %% tags=["nbval-ignore-output"]
every = max(1, len(history) // 1000)  # at most ~1,000 points per chart
thin = history.iloc[::every]
loss_chart = viz.line_chart(
    thin,
    "step",
    "loss",
    title="Training loss",
    x_title="optimiser step",
    y_title="loss per token",
    width=230,
    height=200,
)
lr_chart = viz.line_chart(
    thin,
    "step",
    "lr",
    title="Learning rate (warm-up, cosine decay)",
    x_title="optimiser step",
    y_title="learning rate",
    width=230,
    height=200,
)
loss_chart | lr_chart

# %% tags=["nbval-ignore-output"]
val_loss = viz.line_chart(
    epochs,
    "epoch",
    "val_loss",
    title="Validation loss",
    x_title="epoch",
    y_title="loss per token",
    width=230,
    height=200,
).mark_line(point=True)
val_bleu = viz.line_chart(
    epochs,
    "epoch",
    "val_bleu",
    title="Validation BLEU (greedy)",
    x_title="epoch",
    y_title="BLEU (tokenized, lower-cased)",
    width=230,
    height=200,
).mark_line(point=True)
# whole epochs
epoch_axis = alt.X("epoch:O", title="epoch", axis=alt.Axis(labelAngle=0))
val_loss.encode(x=epoch_axis) | val_bleu.encode(x=epoch_axis)

# %% [markdown]
# What a reader with a laptop wants to know is how BLEU grows with *time*. The history records
# the seconds of training so far at every step (validation excluded) and every step's real
# (non-padding) target tokens:

# %% tags=["nbval-ignore-output"]
epochs["minutes"] = epochs["seconds"] / 60
seconds = history["seconds"].iloc[-1]
print(
    f"{history['tokens'].sum() / seconds:,.0f} real target tokens per second of "
    "training, "
    f"{seconds / 60:.0f} minutes in all"
)
viz.line_chart(
    epochs,
    "minutes",
    "val_bleu",
    title="Validation BLEU against training time",
    x_title="minutes of training (validation excluded)",
    y_title="BLEU (greedy, tokenized, lower-cased)",
).mark_line(point=True)

# %% [markdown]
# ## BLEU on test2016
#
# BLEU ([Papineni et al. 2002](../book/references.md#papineni-et-al-2002)) compares the n-grams (n = 1 … 4) of the model's translations
# with those of the references, over the whole test set, and penalises translations that are
# too short. Its value depends on how the text is tokenized and cased, so numbers from
# different setups are not comparable. `score` reports three:
#
# - **BLEU**: sacreBLEU's standard BLEU on detokenized, cased text, printed with its
#   *signature*, which records exactly how it was computed;
# - **tokenized BLEU**: BLEU on spaCy tokens, lower-cased, the number most Multi30k tutorials
#   report (e.g. 36.5 for a well-known 3 + 3-layer model trained on a GPU);
# - **chrF**: an F-score of character 6-grams, kinder to near-miss word forms.

# %%
show_source(score)

# %% [markdown]
# The model in `final.pt` (`run.model`) translates test2016 twice: greedily (the most likely
# next token at every step, [chapter 09](09_copy_task.ipynb)) and with beam search, with the preset's beam size and
# GNMT length penalty α ([chapter 12](12_tricks_from_the_paper.ipynb) chooses both on the validation set).

# %% tags=["nbval-ignore-output"]
task, model = run.task, run.model
test = task.split("test2016")
translator = task.translator(model)
beam, alpha = run.metrics["config"]["beam"], run.metrics["config"]["alpha"]
outputs = {
    "greedy": translator.translate_tokens(test.src),
    f"beam {beam}, α {alpha}": translator.translate_tokens(test.src, beam, alpha),
}
texts = {name: [translator.text(h) for h in hyps] for name, hyps in outputs.items()}
print(f"{len(test.src)} test2016 sentences translated: {', '.join(outputs)}")

# %% tags=["nbval-ignore-output"]
scores = {name: score(hyps, test) for name, hyps in texts.items()}
pd.DataFrame(scores).T[["sentences", "bleu", "tokenized_bleu", "chrf"]]

# %% tags=["nbval-ignore-output"]
print("BLEU:          ", scores["greedy"]["bleu_signature"])
print("tokenized BLEU:", scores["greedy"]["tokenized_bleu_signature"])
print("chrF:          ", scores["greedy"]["chrf_signature"])

# %% [markdown]
# ## Example translations
#
# Scores summarise; reading translations tells you what kind of mistakes the model makes.
# The first few test sentences, with the reference and both outputs:

# %% tags=["nbval-ignore-output"]
greedy, beamed = texts.values()
for i in range(5):
    print(wrap(f"source:    {test.de[i]}", indent=" " * 11))
    print(wrap(f"reference: {test.en[i]}", indent=" " * 11))
    print(wrap(f"greedy:    {greedy[i]}", indent=" " * 11))
    print(wrap(f"beam:      {beamed[i]}", indent=" " * 11), end="\n\n")

# %% [markdown]
# The model reads and writes byte pairs: `translate_tokens` returns them, and `text` joins
# them into text (`▁` marks the space before a word). The first sentence's pieces, German in
# and English out:

# %% tags=["nbval-ignore-output"]
print(wrap(str(translator.tokenize(test.de[:1])[0])))
print(wrap(str(outputs["greedy"][0])))

# %% [markdown]
# The same model from the command line, `python -m annotated_transformer translate predict
# --checkpoint results/translate-cpu --beam 4 "Zwei Hunde spielen im Schnee."` (the
# published record; a run of your own is `runs/translate-cpu/final.pt`), which
# calls the task's `predict`. A word it has never seen is spelled in smaller pieces, never
# read as `<unk>`:

# %% tags=["nbval-ignore-output"]
print(
    task.predict(
        model,
        ["Zwei Hunde spielen im Schnee.", "Ein Mann repariert das Dach."],
        beam,
    )
)

# %% [markdown]
# **Try it: type your own German sentence** between the quotes and run the cell. It needs
# Jupyter (`make lab`, then this chapter's notebook, `10_translation_multi30k.ipynb`, or its
# `.py`) and runs on its own: it loads the published model, `results/translate-cpu`, itself,
# so no cell above it needs to run first. The model translates your sentence
# with beam search (beam 4) and draws its attention: pick the kind (cross-attention first:
# which German piece each English token looked at), the layer and the head.
# [Chapter 11](11_attention_maps.ipynb) reads such maps. An empty sentence gets one line
# saying so; so does a sentence most of whose pieces the model never learned (emoji, say).
# Saving the chapter keeps this cell as it is stored: your sentence and its answer stay in
# the open notebook.

# %% tags=["nbval-ignore-output", "try-it"]
from annotated_transformer.book import try_it

SENTENCE = "Ein kleines Mädchen spielt mit einem roten Ball."  # ← type here
try_it.translate(SENTENCE)

# %% [markdown]
# **Why a model answers confidently outside its data.** Give the translator a row of emoji
# and it still writes a fluent English caption. Nothing in it can say "I don't know": every
# step ends in a softmax over the English pieces, which always has a likeliest piece, and
# the decoder was trained only to continue captions, so a caption is what it continues. Its
# probabilities measure how the pieces compete with each other, not how far the input lies
# from the 29,000 sentences it learned from. The warning line comes from outside the model: it
# counts how many of the sentence's pieces are ones the model learned as units (see
# `annotated_transformer.evaluation.coverage`), a crude but honest sign that the answer is
# a guess.

# %% [markdown]
# [Chapter 11](11_attention_maps.ipynb) looks inside this model at what its attention heads attend to; [chapter 12](12_tricks_from_the_paper.ipynb)
# measures the effect of the paper's tricks: a shared vocabulary with tied embeddings, beam
# search, and checkpoint averaging.

# %% [markdown]
# ## Summary
#
# You can now
#
# - train a translation model through the runner or the command line;
# - batch sentences with little padding and score translations with BLEU.
#
# **Next:** [chapter 11 · Attention maps of a trained model](11_attention_maps.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/10_translation_multi30k.py`: fill them in there, then grade them from the
# repository's root with `make exercises CHAPTER=10` (or
# `python -m annotated_transformer.exercises 10`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-10-train-vocab)=
# ### Exercise 10.1 · Find the bug: a vocabulary that has seen the test set
#
# **Find the bug.** The Annotated Transformer built its vocabularies from the training,
# validation *and* test sentences, so words that only the test set contains got ids of
# their own, and the test set was no longer new text (the section on vocabularies above
# measures what that adds). The starter's `train_vocab` makes the same mistake. Repair
# it: keep the tokens seen at least `min_freq` times in the training split only, so that
# a word the model never saw in training reads as `<unk>`.
#
# The grader builds a vocabulary from three tiny splits and checks each of its tokens
# against counts of the training split.
#
# Write `train_vocab(splits, min_freq)`; grade with `make exercises CHAPTER=10`.
#
# :::{dropdown} Solution
# ```python
# def train_vocab(
#     splits: dict[str, list[list[str]]],
#     min_freq: int = 2,
# ) -> Vocab:
#     """The vocabulary of the *training* split: other words become <unk>."""
#     return Vocab.build(splits["train"], min_freq=min_freq)
# ```
# :::

# %% [markdown]
# (ex-10-brevity-penalty)=
# ### Exercise 10.2 · BLEU's brevity penalty
#
# BLEU's n-gram precisions alone would reward a system that writes only the few words it
# is sure of. The brevity penalty (Papineni et al. 2002) corrects that: with $c$ the
# number of tokens the system wrote over the whole test set and $r$ the number in the
# references, $\mathrm{BP} = 1$ if $c > r$ and $e^{1 - r/c}$ otherwise (0 for an empty
# output). The grader compares your penalty with the one sacreBLEU reports for random
# corpora.
#
# Write `brevity_penalty(hyp_len, ref_len)`; grade with `make exercises CHAPTER=10`.
#
# :::{dropdown} Solution
# ```python
# def brevity_penalty(hyp_len: int, ref_len: int) -> float:
#     """BP: 1 for an output longer than the references, else e^(1−r/c)."""
#     if hyp_len == 0:
#         return 0.0
#     if hyp_len > ref_len:
#         return 1.0
#     return math.exp(1 - ref_len / hyp_len)
# ```
# :::

# %% [markdown]
# (ex-10-corpus-bleu)=
# ### Exercise 10.3 · Corpus BLEU by hand
#
# Now the whole score, for token lists with one reference each. For $n = 1 \dots 4$,
# count the hypotheses' $n$-grams and the matches, each $n$-gram's count *clipped* at
# its count in the reference ("the the the the" earns one "the" against "the cat is
# here"); sum both over the corpus, divide, and combine: $\mathrm{BLEU} = 100 \cdot
# \mathrm{BP} \cdot \exp\big(\tfrac14 \sum_n \log p_n\big)$, and 0 when a precision is
# 0. The grader compares with sacreBLEU's `BLEU(tokenize="none", smooth_method="none")`
# to nine digits.
#
# Write `corpus_bleu(hypotheses, references)`; grade with `make exercises CHAPTER=10`.
#
# :::{dropdown} Solution
# ```python
# def corpus_bleu(
#     hypotheses: Sequence[Sequence[str]],
#     references: Sequence[Sequence[str]],
# ) -> float:
#     """Corpus BLEU (0–100) of token lists, one reference each, no smoothing.
#
#     BLEU = BP · exp(¼ Σₙ log pₙ) for n = 1 … 4, where pₙ = (clipped n-gram
#     matches) / (n-grams of the hypotheses), both summed over the whole corpus
#     before dividing.
#     """
#
#     def ngrams(tokens: Sequence[str], n: int) -> Counter:
#         starts = range(len(tokens) - n + 1)
#         return Counter(tuple(tokens[i : i + n]) for i in starts)
#
#     matches, totals = [0] * 4, [0] * 4
#     for hyp, ref in zip(hypotheses, references, strict=True):
#         for n in range(1, 5):
#             hyp_counts, ref_counts = ngrams(hyp, n), ngrams(ref, n)
#             clipped = (min(c, ref_counts[g]) for g, c in hyp_counts.items())
#             matches[n - 1] += sum(clipped)
#             totals[n - 1] += sum(hyp_counts.values())
#     if min(matches) == 0:
#         return 0.0  # a precision of 0: the geometric mean is 0
#     precisions = [m / t for m, t in zip(matches, totals, strict=True)]
#     mean = math.exp(sum(math.log(p) for p in precisions) / 4)
#     hyp_len = sum(len(h) for h in hypotheses)
#     ref_len = sum(len(r) for r in references)
#     return 100 * brevity_penalty(hyp_len, ref_len) * mean
# ```
# :::

# %% [markdown]
# (ex-10-token-budget)=
# ### Exercise 10.4 · Batches under a token budget
#
# Write the heart of `bucket_batches` yourself: sort the indices by length and cut them
# into batches with $\text{len(batch)} \times \text{longest} \le$ `max_tokens`, each as
# full as the budget allows (a sequence longer than the budget goes alone), in order of
# length and without shuffling. The grader checks that every index appears once, that
# every batch keeps to the budget and that no batch could have taken the next sequence.
#
# Write `token_budget_batches(lengths, max_tokens)`; grade with `make exercises
# CHAPTER=10`.
#
# :::{dropdown} Solution
# ```python
# def token_budget_batches(
#     lengths: Sequence[int],
#     max_tokens: int,
# ) -> list[list[int]]:
#     """Indices sorted by length, cut greedily under a token budget.
#
#     Each batch holds len(batch) · longest <= max_tokens; batches come out in
#     order of length; a sequence longer than the budget makes a batch alone.
#     """
#     batches: list[list[int]] = []
#     batch: list[int] = []
#     for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
#         # sorted by length, so sequence i is the longest of the batch it joins
#         if batch and (len(batch) + 1) * lengths[i] > max_tokens:
#             batches.append(batch)
#             batch = []
#         batch.append(i)
#     if batch:
#         batches.append(batch)
#     return batches
# ```
# :::
