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
# # 12 · Tricks from the paper
#
# - **You will learn** what the paper's tricks (a shared vocabulary with tied weights, beam search, checkpoint averaging, several GPUs) and the preset's other choices are worth on Multi30k, and how close a laptop's CPU gets to the full run on a time budget.
# - **It assumes** [chapter 10](10_translation_multi30k.ipynb), and [chapter 09](09_copy_task.ipynb) for beam search.
# - **Time:** about 15 minutes to read; it runs in about 9 minutes from its runs' records; training its 19 runs took 26.9–128.3 minutes each on one or two CPU threads.
#
# :::{admonition} Where the outputs come from
# :class: dropdown
# The stored outputs on this page come from [chapter 10](10_translation_multi30k.ipynb)'s `cpu`-preset run (trained once from
# the repository root with
# `python -m annotated_transformer translate train --preset cpu --out runs/translate-cpu`)
# and from the other runs named in each section, trained the same way (the Time line above
# says what they took).
# :::
#
# The paper's base model owes part of its score to details that are easy to overlook. This
# chapter takes three of them, shows how each is done with the package, and measures what
# each changes on Multi30k:
#
# 1. **a shared source/target vocabulary with tied weights**: "we share the same weight
#    matrix between the two embedding layers and the pre-softmax linear transformation"
#    (section 3.4), which needs one byte-pair vocabulary for both languages (section 5.1);
# 2. **beam search**: "we used beam search with a beam size of 4 and length penalty
#    α = 0.6" (section 6.1);
# 3. **checkpoint averaging**: "we used a single model obtained by averaging the last 5
#    checkpoints" (section 6.1).
#
# A fourth section measures every other choice of the `cpu` preset one at a time, a fifth
# puts the changes that pay together on a time budget, and the last shows how the same
# training runs on several GPUs.

# %%
import dataclasses
import shutil
import tempfile
from pathlib import Path

import altair as alt
import pandas as pd
import torch

from annotated_transformer.blocks.embeddings import Embeddings
from annotated_transformer.book import viz
from annotated_transformer.book.page import wrap
from annotated_transformer.book.runs import (
    SPEEDRUN_BUDGET,
    SPEEDRUN_PLANS,
    speedrun_name,
    speedrun_replays,
    speedrun_rungs,
    translation_levers,
)
from annotated_transformer.book.sizes import pick, runs_dir
from annotated_transformer.book.source import show_source
from annotated_transformer.data import multi30k
from annotated_transformer.data.batching import shard_batches
from annotated_transformer.data.bpe import BPE
from annotated_transformer.data.vocab import SPECIALS, Vocab
from annotated_transformer.evaluation.decoding import (
    beam_search,
    gnmt_length_penalty,
)
from annotated_transformer.machine import short_cpu
from annotated_transformer.models.encoder_decoder import (
    Generator,
    Transformer,
    parameter_counts,
    tie_weights,
)
from annotated_transformer.runner import Run, ensure_run, rows_with
from annotated_transformer.tasks.base import run_path
from annotated_transformer.tasks.translation import PRESETS, Translation
from annotated_transformer.training.checkpoints import (
    average_checkpoints,
    read_checkpoint,
    save_checkpoint,
)
from annotated_transformer.training.trainer import Budget

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# [Chapter 10](10_translation_multi30k.ipynb)'s run is the starting point: its folder is reused when it holds a finished run,
# otherwise the runner trains it.

# %% tags=["nbval-ignore-output"]
PRESET = pick(ci="tiny", full="cpu")
run = ensure_run("translate", PRESET, runs_dir() / f"translate-{PRESET}")
preset = PRESETS[PRESET]
print(f"the {PRESET} run in {run_path(run.out)}")

# %% [markdown]
# ## 1 · One vocabulary, one matrix
#
# A translation model has three matrices of shape (vocabulary × d_model): the source
# embeddings, the target embeddings and the generator's projection to the output
# vocabulary. The generator's matrix and the target embeddings do related jobs: the
# embedding turns a token into a vector, the projection scores a vector against every token
# by a dot product with that token's row. Tying them (Press & Wolf 2017) makes a token's
# input and output representations one and the same vector, saves parameters, and gives
# rare tokens, which are seldom a target, the updates they get as inputs.
#
# The source embeddings can join only if both languages use the same vocabulary. Word
# vocabularies of German and English differ, but a byte-pair encoding learned on both
# languages together gives one set of sub-word tokens for both, and German and English
# share much: names, numbers, punctuation, and many word pieces. The package's byte-pair
# encoding is [chapter 03](03_tokens_and_embeddings.ipynb)'s:

# %%
show_source(BPE.learn, BPE.encode)

# %% [markdown]
# Learned on the German *and* English training sentences (the paper used 37,000 tokens for
# 4.5 million sentence pairs; Multi30k is 150 times smaller, so far fewer merges):

# %% tags=["nbval-ignore-output"]
train_de, train_en = (
    side[: preset.train_limit] for side in multi30k.load_split("train")
)
merges = pick(ci=1000, full=8000)
bpe = BPE.learn(train_de + train_en, num_merges=merges)
# every token encode can output: no <unk> ever
shared = Vocab([*SPECIALS, *bpe.tokens])
print(f"{len(bpe.merges):,} merges; shared vocabulary of {len(shared):,} tokens")

# %% tags=["nbval-ignore-output"]
for sentence in (train_de[0], train_en[0]):
    print(wrap(str(bpe.encode(sentence))))

# %% [markdown]
# Common words stay whole, rarer ones split into pieces (`▁` marks a space before a piece);
# `decode` joins them back exactly:

# %%
assert all(BPE.decode(bpe.encode(s)) == s for s in train_de[:100] + train_en[:100])
print(
    "decode(encode(s)) == s for the first 100 German and English training sentences"
)

# %% [markdown]
# Tying is assignment: the model's modules keep their own classes, and after the assignment
# two (or three) of them hold the *same* `Parameter` object. The embedding is a lookup table
# multiplied by √d_model (section 3.4), the generator a linear layer:

# %%
show_source(Embeddings, Generator)

# %% [markdown]
# The package's `tie_weights` makes the assignment, after checking that the shapes agree:

# %%
show_source(tie_weights)


# %% [markdown]
# How many parameters does that save? `model.parameters()` yields a shared parameter once,
# so counting it before and after gives the saving, which must be two matrices of
# vocabulary × d_model. The sizes here are those of the preset; the identity holds for any.

# %% tags=["nbval-ignore-output"]
V, d = len(shared), preset.model.d_model
sizes = dataclasses.replace(preset.model, src_vocab=V, tgt_vocab=V)
untied = Transformer(sizes)
tied = tie_weights(Transformer(sizes), share_source=True)
count = {
    name: sum(p.numel() for p in m.parameters())
    for name, m in (("untied", untied), ("tied", tied))
}
assert count["untied"] - count["tied"] == 2 * V * d
assert tied.generator.proj.weight is tied.src_embed.embed.lut.weight
print(f"untied: {count['untied']:,} parameters; tied: {count['tied']:,}")
print(
    f"saved: 2 × {V:,} × {d} = {2 * V * d:,} "
    f"({1 - count['tied'] / count['untied']:.0%})"
)

# %% [markdown]
# Per block, from the package's `parameter_counts` (which counts each block's tensors, so
# the shared table appears in all three blocks of the tied model):

# %% tags=["nbval-ignore-output"]
blocks = pd.DataFrame(
    {"untied": parameter_counts(untied), "tied": parameter_counts(tied)}
)
blocks.loc[["src_embed", "tgt_embed", "generator"]]

# %% [markdown]
# ### Measured: word vocabularies against one byte-pair vocabulary
#
# [Chapter 10](10_translation_multi30k.ipynb)'s `cpu` preset reads both languages with one byte-pair vocabulary: `tokens="bpe"`
# makes the translation task learn the byte pairs from the training sentences itself. It keeps
# the three matrices apart, though (`tie=false`): section 4 measures what tying them costs.
# Before byte pairs the preset used [chapter 10](10_translation_multi30k.ipynb)'s two word
# vocabularies (min_freq 2), and that model is trained here the same way, for the same 12
# epochs: one setting of the task, so both go through the runner:
#
#     python -m annotated_transformer translate train --preset cpu \
#         --set tokens=words --out runs/translate-cpu-words

# %%
show_source(Translation.__init__, Translation.build_model)

# %% tags=["nbval-ignore-output"]
trained = {
    "words, two vocabularies": ensure_run(
        "translate",
        PRESET,
        runs_dir() / f"translate-{PRESET}-words",
        settings=["tokens=words"],
        weights=False,  # its record's figures are all this chapter reads
    ),
    "byte pairs, one vocabulary (the preset)": run,
}
for name, r in trained.items():
    print(
        f"{name}: {run_path(r.out)}, "
        f"trained {r.metrics['train_seconds'] / 60:.1f} min"
    )

# %% [markdown]
# Each run scored itself when it finished (its `metrics.json`, kept in its record): the
# validation BLEU of `final.pt` (greedy, tokenized and lower-cased: the score that chose
# it), and test2016 decoded with the preset's beam and α, scored as [chapter
# 10](10_translation_multi30k.ipynb) scores it. The byte-pair model outputs pieces, joined
# with `BPE.decode`; the word model's tokens are joined back by rules.


# %% tags=["nbval-ignore-output"]
def val_bleu(r) -> float:
    """Validation BLEU of a run's final.pt (greedy, tokenized), from its metrics."""
    return r.metrics["validation"][r.metrics["final"]]


def final_scores(r) -> dict:
    """A finished run's figures, from its metrics: no model needed."""
    test = r.metrics["test"]
    return {
        "parameters": r.metrics["parameters"],
        "val_bleu": val_bleu(r),
        **{f"test_{k}": test[k] for k in ("bleu", "tokenized_bleu", "chrf")},
    }


vocab_scores = pd.DataFrame(
    {name: final_scores(r) for name, r in trained.items()}
).T.astype({"parameters": int})
vocab_scores.round(2)

# %% [markdown]
# How each got there: validation BLEU (greedy, measured after every epoch) against the
# minutes of training, from the two runs' `history.csv`:

# %% tags=["nbval-ignore-output"]
curves = pd.concat(
    [
        rows_with(r.history, "val_bleu").assign(run=name)
        for name, r in trained.items()
    ]
)
curves["minutes"] = curves["seconds"] / 60
chart = viz.line_chart(
    curves,
    "minutes",
    "val_bleu",
    "run",
    title="Validation BLEU against training time, 12 epochs each",
    x_title="minutes of training (validation excluded)",
    y_title="BLEU (greedy, tokenized, lower-cased)",
)
chart.mark_line(point=True).configure_legend(orient="bottom", labelLimit=0)

# %% [markdown]
# The byte-pair model ends ahead: 40.03<!-- record translate-cpu metrics.validation.best --> against 39.08<!-- record translate-cpu-words metrics.validation.best --> on validation (greedy,
# tokenized, lower-cased), and on test2016 40.42<!-- record translate-cpu metrics.test.bleu --> against 39.13<!-- record translate-cpu-words metrics.test.bleu --> sacreBLEU; it has no
# unknown words at all: every German word, seen or not, is spelled in pieces. In tokenized,
# lower-cased BLEU the two are nearly level on test2016, 40.87<!-- record translate-cpu metrics.test.tokenized_bleu --> against 40.73<!-- record translate-cpu-words metrics.test.tokenized_bleu -->: most of the
# gap is in sacreBLEU, which scores the cased text as written, and the word model's tokens
# are joined back by rules, the byte pairs exactly by `BPE.decode`. The two curves are close
# for six epochs; then the word model levels off and the byte pairs pull ahead. The byte-pair
# model has 1.2 million more parameters (its one vocabulary against English words alone at
# the output), and its epochs take more steps, 2,460<!-- record translate-cpu metrics.steps --> in all against 2,184<!-- record translate-cpu-words metrics.steps -->, because
# byte pairs make every sentence longer.
#
# ## 2 · Beam search
#
# Greedy decoding commits to the most probable next token at every step. Beam search keeps
# the `beam` most probable partial translations instead, and lets the finished ones
# compete with a length penalty, GNMT's ((5 + length) / 6)^α, so that short outputs are not
# favoured just for having fewer probabilities multiplied ([chapter 09](09_copy_task.ipynb) derives it):

# %%
show_source(gnmt_length_penalty)

# %% [markdown]
# The package's `beam_search` is [chapter 09](09_copy_task.ipynb)'s:

# %%
show_source(beam_search)

# %% [markdown]
# Beam size and α are choices, so they are made on the validation set, never on a test set.
# [Chapter 10](10_translation_multi30k.ipynb)'s model (`final.pt`) translates the 1,014 validation sentences with beams of 1
# (greedy), 4 and 8 and α from 0 (no penalty: raw log-probabilities, which favour short
# outputs) to 1.5:

# %% tags=["nbval-ignore-output"]
task, model = run.task, run.model
val = task.split("val")
grid = [(1, 0.0)] + [(b, a) for b in (4, 8) for a in (0.0, 0.6, 1.0, 1.5)]
beam_scores = pd.DataFrame(
    [task.scores(model, val, beam=b, alpha=a) for b, a in grid]
)
beam_scores["alpha"] = beam_scores["alpha"].fillna(0.0)  # greedy has no α
beam_scores[["beam", "alpha", "sentences", "bleu", "tokenized_bleu", "chrf"]]

# %% tags=["nbval-ignore-output"]
alt.Chart(
    beam_scores, title="Validation BLEU against beam size and length penalty"
).mark_line(point=True).encode(
    x=alt.X("alpha:Q", title="length penalty α"),
    y=alt.Y("bleu:Q", title="sacreBLEU", scale=alt.Scale(zero=False)),
    color=alt.Color("beam:N", title="beam", legend=alt.Legend(orient="bottom")),
    tooltip=["beam:O", "alpha:Q", "bleu:Q", "tokenized_bleu:Q", "chrf:Q"],
).properties(width=400, height=220)

# %% [markdown]
# The preset's `beam` and `alpha` are chosen on this grid: two `test_only`
# settings, which change how a finished model is tested but not how it is trained. The runner
# therefore reuses a finished run when only they change, and tests it again ([chapter 10](10_translation_multi30k.ipynb)'s
# test2016 score is that of the chosen pair, computed once).

# %% tags=["nbval-ignore-output"]
best = beam_scores.loc[beam_scores["bleu"].idxmax()]
print(
    f"best on validation: beam {best['beam']:.0f}, α {best['alpha']}, "
    f"sacreBLEU {best['bleu']:.2f}; the {PRESET} preset: beam {preset.beam}, α "
    f"{preset.alpha}"
)

# %% [markdown]
# For a trained model the gain from greedy to a small beam is usually around one BLEU point,
# and larger beams add little. The table above shows the same here: beam 4 with the paper's
# α = 0.6 gains on greedy, and a stronger penalty, α = 1, gains a little more: a small model
# trained on short sentences stops too early when nothing pushes against it. Beam 8 adds a
# little again on validation; the preset keeps beam 4, at about half the cost of decoding.
#
# ## 3 · Averaging checkpoints
#
# The weights after each of the last few epochs lie close together in parameter space,
# spread around a region of low loss by the noise of the last updates. Their average tends
# to sit nearer the middle of that region than any of them (the same idea as Polyak
# averaging, or the exponential moving averages many models keep today). The run of
# [chapter 10](10_translation_multi30k.ipynb) keeps the weights of its last epochs (`keep-NNNNNN.pt`, named by the step);
# the package averages them element by element:

# %%
show_source(average_checkpoints)

# %% [markdown]
# Derived by hand for two checkpoints, and compared with the package. Two models of the
# preset's shape, from two seeds, stand in for two epochs (the identity holds for any
# weights):

# %% tags=["nbval-ignore-output"]
folder = Path(tempfile.mkdtemp())
paths = []
for seed in (0, 1):
    torch.manual_seed(seed)
    epoch = Transformer(sizes)
    paths.append(save_checkpoint(folder / f"keep-{seed}.pt", epoch))
a, b = (read_checkpoint(path)["model"] for path in paths)
_, averaged = average_checkpoints(paths)
for name in a:
    torch.testing.assert_close(averaged[name], (a[name] + b[name]) / 2)
shutil.rmtree(folder)
print(f"average_checkpoints == (a + b) / 2 for all {len(a)} weight tensors")

# %% [markdown]
# The run kept its last epochs. Training scored each of them on the validation set as it
# went (greedy decoding, tokenized BLEU: the run's `history.csv`), and when it finished the
# runner scored their average the same way (`metrics.json`). Greedy decoding, so that only
# the weights differ; choosing among them is a choice, so no test set is involved:

# %% tags=["nbval-ignore-output"]
kept = run.metrics["config"]["keep_last"]
epochs = rows_with(run.history, "val_bleu").reset_index(drop=True)
last = epochs.tail(kept)
averages = pd.DataFrame(
    [
        {"weights": f"epoch {i + 1}", "kind": "single epoch", "bleu": bleu}
        for i, bleu in last["val_bleu"].items()
    ]
    + [
        {
            "weights": f"mean of the last {kept}",
            "kind": "average",
            "bleu": run.metrics["validation"]["averaged"],
        }
    ]
)
averages.round(2)

# %% tags=["nbval-ignore-output"]
averages["order"] = range(len(averages))
alt.Chart(
    averages, title="Validation BLEU of the kept epochs and of their average"
).mark_bar().encode(
    x=alt.X("bleu:Q", title="BLEU (greedy, tokenized, lower-cased)"),
    y=alt.Y("weights:N", title=None, sort=alt.SortField("order")),
    color=alt.Color("kind:N", title=None, legend=alt.Legend(orient="bottom")),
    tooltip=["weights:N", alt.Tooltip("bleu:Q", format=".2f")],
).properties(width=400, height=20 * len(averages))

# %% [markdown]
# On this run averaging does not pay: the last five epochs are within half a point of each
# other, and their mean, 39.77<!-- record translate-cpu metrics.validation.averaged -->, scores below the best of them, 40.03<!-- record translate-cpu metrics.validation.best -->. The learning rate
# had decayed to nearly zero over the last epochs, so their weights were already close
# together; averaging helps most after a schedule that ends at a higher rate, like the
# paper's. At this size the difference is a few tenths either way, and another run could
# come out the other way.
#
# The runner does this at the end of every run whose config says `final="best"` ([chapter
# 10](10_translation_multi30k.ipynb)'s `Run.finish`): it averages the kept epochs, compares the average with the best single
# epoch on the validation set, and keeps the better one as `final.pt` (`metrics.json`
# records which).

# %% tags=["nbval-ignore-output"]
validation = run.metrics["validation"]
print(f"final.pt = {run.metrics['final']}; validation BLEU: "
      + ", ".join(f"{name} {bleu:.2f}" for name, bleu in validation.items()))

# %% [markdown]
# ## 4 · What each choice is worth
#
# The `cpu` preset is a set of choices: the vocabulary and its size, tying, dropout on the
# attention weights, label smoothing, the batch size in tokens, the warm-up and peak of the
# learning rate, the batching. Each is measured here by changing it alone. Twelve epochs per
# change would cost as much as the preset's own run, 128.3<!-- record translate-cpu train_minutes --> minutes each, so the changes are compared on a shorter
# recipe, the preset for 3 epochs (its schedule compressed to fit), against the preset itself
# for 3 epochs. Every run goes through the runner, e.g.
#
#     python -m annotated_transformer translate train --preset cpu --set epochs=3 \
#         --set attn_dropout=0 --out runs/translate-cpu-3ep-attn0
#
# Scores are each run's validation BLEU of its `final.pt` (greedy, tokenized and
# lower-cased), written when it finished, so a record without weights is enough. The
# changes are compared for what they learn, not for speed (each run's minutes are in its
# record, on the [Results](../book/results.ipynb) page); what attention dropout 0 buys in
# speed is measured apart, in `benchmarks/attention.py`: little at the length of
# Multi30k's sentences, more from a few hundred tokens on.

# %% tags=["nbval-ignore-output"]
labels = {  # each lever's settings: book.runs.translation_levers
    "3ep": "the preset, 3 epochs",
    "3ep-attn0": "attention dropout 0 (fused kernel)",
    "3ep-tied": "tied (one matrix for all three)",
    "3ep-half-merges": f"half the merges ({preset.bpe_merges // 2:,})",
    "3ep-ls0": "no label smoothing",
    "3ep-double-tokens": "2× the tokens per batch, half the warm-up steps",
    "3ep-half-warmup": "half the warm-up",
    "3ep-lr2": "twice the peak learning rate",
    "3ep-buckets": "length buckets instead of packed batches",
}
levers = translation_levers(preset)
for name, settings in levers.items():
    print(f"{name:18} {' '.join(settings)}")
lever_runs = {
    change: ensure_run(
        "translate",
        PRESET,
        runs_dir() / f"translate-{PRESET}-{name}",
        settings=list(levers[name]),
        weights=False,
    )
    for name, change in labels.items()
}
lever_table = pd.DataFrame(
    {
        change: {"steps": r.metrics["steps"], "bleu": val_bleu(r)}
        for change, r in lever_runs.items()
    }
).T.astype({"steps": int, "bleu": float})
lever_table["change"] = lever_table["bleu"] - lever_table.iloc[0]["bleu"]
lever_table.round(2)

# %% [markdown]
# The changes alone, each against the preset trained as long:

# %% tags=["nbval-ignore-output"]
changes = lever_table.drop("the preset, 3 epochs")
changes = changes.rename_axis("setting").reset_index()
alt.Chart(
    changes, title="Each change alone: validation BLEU against the preset"
).mark_bar().encode(
    x=alt.X("change:Q", title="change in BLEU (greedy, tokenized, lower-cased)"),
    y=alt.Y("setting:N", title=None, sort="-x", axis=alt.Axis(labelLimit=320)),
    color=alt.condition(
        "datum.change > 0", alt.value("#4c78a8"), alt.value("#e45756")
    ),
    tooltip=["setting:N", "steps:Q", alt.Tooltip("change:Q", format="+.2f")],
).properties(width=360, height=22 * len(changes))

# %% [markdown]
# At 3 epochs the preset scores 25.73<!-- record translate-cpu-3ep metrics.validation.best -->: a
# model still learning fast, one seed per row, so a difference of a point is within what
# another order of batches could change. Five rows stand out:
#
# - **twice the peak learning rate** (31.96<!-- record translate-cpu-3ep-lr2 metrics.validation.best -->): on a budget this short a higher rate
#   simply gets further. Whether the gain holds over 12 epochs is not measured here, so
#   the preset keeps its rate;
# - **twice the tokens per batch** (16.83<!-- record translate-cpu-3ep-double-tokens metrics.validation.best -->): the same epochs in half the optimiser
#   steps leave the model far behind; on a short budget, steps count for more than tokens
#   per step;
# - **half the merges** (28.69<!-- record translate-cpu-3ep-half-merges metrics.validation.best -->): with 4,000 merges the pieces are fewer and each
#   is seen more often, which pays while the model is young; whether it holds over 12
#   epochs is not measured here;
# - **tied** (23.75<!-- record translate-cpu-3ep-tied metrics.validation.best -->): one matrix for all three costs two points, which is why
#   the preset keeps three;
# - **length buckets instead of packed batches** (22.42<!-- record translate-cpu-3ep-buckets metrics.validation.best -->): packing, the preset's
#   batching, learns faster on this budget.
#
# Attention dropout 0 (27.16<!-- record translate-cpu-3ep-attn0 metrics.validation.best -->), no label smoothing (26.10<!-- record translate-cpu-3ep-ls0 metrics.validation.best -->) and half the
# warm-up (25.00<!-- record translate-cpu-3ep-half-warmup metrics.validation.best -->) are within about a point and a half of the preset, one
# seed each. The preset keeps its choices: a single
# seed cannot separate most rows, and the two large gains, the learning rate and the
# merges, were measured on the short recipe only, where a model that learns faster early
# need not end ahead.
#
# ## 5 · A laptop speedrun
#
# Section 4 gave every change the same number of epochs. A reader with a laptop counts
# time instead: how far does section 4's model get in
# 30<!-- record translate-speedrun config.budget_minutes --> minutes of 2 CPU threads,
# and which changes buy the most in that time? The `speedrun` preset answers both:
#
#     python -m annotated_transformer translate train --preset speedrun --threads 2 \
#         --out runs/translate-speedrun
#
# `budget_minutes` counts the time of the training steps, as `train_minutes` does
# (validations and checkpoints not included). A schedule that ends at zero has to know
# where the end is, so the run measures its pace at the end of the warm-up and plans
# the steps that fill the budget; the plan is saved with every checkpoint, so a resumed
# run takes the same steps:

# %%
show_source(Budget)

# %% [markdown]
# The ladder goes from the `cpu` preset to the speedrun one change at a time, every rung
# at the same budget on 2 threads (`book.runs.speedrun_ladder`; each rung is one command
# of `python -m annotated_transformer.book.runs`). Below it: a change tried on the
# speedrun that did not help, a second seed of the first rung and of the last, and one
# more change tried; these last three take the steps of their first seed instead of its
# minutes, as the end of the section explains:

# %% tags=["nbval-ignore-output"]
CI_BUDGET = ("budget_minutes=0.05", "epochs=20", "keep_last=3")
BUDGET = pick(ci=CI_BUDGET, full=SPEEDRUN_BUDGET)
PLANS = pick(ci={"cpu": 20, "attn0": 20}, full=SPEEDRUN_PLANS)
rungs = speedrun_rungs(PRESET, BUDGET)
rungs |= speedrun_replays(rungs, PLANS)
rung_labels = {
    "cpu": "the cpu preset",
    "lr2": "+ twice the peak rate, 5/8 of the warm-up",
    "merges": f"+ half the merges ({preset.bpe_merges // 2:,})",
    "attn0": "+ no attention dropout: the speedrun",
    "small-batches": f"tried: {preset.max_tokens * 3 // 5:,}-token batches",
    "cpu-s1": "the cpu preset, seed 1 (seed 0's steps)",
    "s1": "the speedrun, seed 1 (seed 0's steps)",
    "higher-rate": "tried: 1.5 × the rate (seed 0's steps)",
}
rung_runs = {
    rung_labels[name]: ensure_run(
        "translate",
        rung_preset,
        runs_dir() / speedrun_name(name),
        settings=list(settings),
        weights=False,
    )
    for name, (rung_preset, settings) in rungs.items()
}
ladder_table = pd.DataFrame(
    {
        rung: {
            "steps": r.metrics["steps"],
            "minutes": r.metrics["train_seconds"] / 60,
            "val BLEU": val_bleu(r),
            "test sacreBLEU": r.metrics["test"]["bleu"],
            "CPU": short_cpu(r.machine["cpu"]),
        }
        for rung, r in rung_runs.items()
    }
).T.astype({"steps": int, "minutes": float, "val BLEU": float})
ladder_table.round(2)

# %% [markdown]
# Validation BLEU against the minutes trained, for the first rung and the last:

# %% tags=["nbval-ignore-output"]
ends = [rung_labels["cpu"], rung_labels["attn0"]]
curves = pd.concat(
    [
        rows_with(rung_runs[rung].history, "val_bleu").assign(
            rung=rung, minutes=lambda h: h["seconds"] / 60
        )
        for rung in ends
    ]
)
chart = alt.Chart(curves, title="The same budget, two recipes")
chart.mark_line(point=True).encode(
    x=alt.X("minutes:Q", title="minutes of training"),
    y=alt.Y("val_bleu:Q", title="validation BLEU (greedy, tokenized)"),
    color=alt.Color("rung:N", title=None, legend=alt.Legend(orient="bottom")),
    tooltip=["rung:N", "step:Q", alt.Tooltip("val_bleu:Q", format=".2f")],
).properties(width=340, height=240)

# %% [markdown]
# The 2017 recipe, section 4's preset, gets to 38.28<!-- record translate-speedrun-cpu metrics.test.bleu --> sacreBLEU on test2016 in
# the budget, against 40.42<!-- record translate-cpu metrics.test.bleu --> when it trains to its end
# (128.3<!-- record translate-cpu train_minutes --> minutes on one thread). Each rung's change, and why it pays on 29,000
# sentence pairs:
#
# - **twice the peak rate, after 5/8 of the warm-up** (validation 38.11<!-- record translate-speedrun-lr2 metrics.validation.best -->, from
#   35.83<!-- record translate-speedrun-cpu metrics.validation.best -->): the budget holds a handful of epochs, and a model this far from
#   its minimum gains from larger steps; the cosine decay still ends near zero, so the
#   larger rate costs nothing at the end. Section 4 saw the same at 3 epochs. This rung
#   planned its steps from a warm-up that ran slower than its later steps, so it stopped
#   after 26.9<!-- record translate-speedrun-lr2 train_minutes --> minutes: it gains with less time than the others;
# - **half the merges** (38.59<!-- record translate-speedrun-merges metrics.validation.best -->): the vocabularies shrink, and with them the
#   embedding tables and the output layer, a product with every vocabulary entry for
#   every target token, so a step runs faster (1,559<!-- record translate-speedrun-merges steps --> steps against
#   1,182<!-- record translate-speedrun-lr2 steps -->), and each piece is seen more often in the same pairs;
# - **no dropout on the attention weights** (38.63<!-- record translate-speedrun metrics.validation.best -->): PyTorch's fused attention
#   kernel for the CPU runs only without dropout; with it, attention falls back to the
#   explicit softmax, dropout and product. The dropout on every sublayer's output stays.
#
# On validation every rung gains. On test2016 the rungs after the first are within half a
# point of each other and not in order (the merges rung scores 38.72<!-- record translate-speedrun-merges metrics.test.bleu -->, the rate's
# 39.22<!-- record translate-speedrun-lr2 metrics.test.bleu -->).
#
# How much of that is the seed? The first rung and the last were trained again with
# seed 1, which draws other initial weights, batches and dropout masks. The same minutes
# hold another number of steps on another machine, so the second seed takes the steps
# that its first seed's budget planned, 1,324<!-- record translate-speedrun-cpu-s1 metrics.config.steps --> and 1,613<!-- record translate-speedrun-s1 metrics.config.steps --> (`book.runs.replay`),
# instead of a budget: the two seeds then differ in the seed alone. They ran on another
# CPU than the ladder (the table's last column), so their minutes are that CPU's.
#
# - The 2017 recipe's seeds score 38.28<!-- record translate-speedrun-cpu metrics.test.bleu --> and 38.47<!-- record translate-speedrun-cpu-s1 metrics.test.bleu --> on test2016 (validation
#   35.83<!-- record translate-speedrun-cpu metrics.validation.best --> and 36.23<!-- record translate-speedrun-cpu-s1 metrics.validation.best -->).
# - The speedrun's seeds score 39.23<!-- record translate-speedrun metrics.test.bleu --> and 40.21<!-- record translate-speedrun-s1 metrics.test.bleu --> (validation 38.63<!-- record translate-speedrun metrics.validation.best --> and
#   38.84<!-- record translate-speedrun-s1 metrics.validation.best -->): the second seed passes 40, the first does not.
#
# A seed moves the test score by up to a point, more than the rungs after the first
# differ by, so their order on test is not settled. The speedrun's lead over the 2017
# recipe holds for both seeds, and on validation it is more than two points. The mean of
# its two seeds, 39.72<!-- record translate-speedrun+translate-speedrun-s1 metrics.test.bleu -->, is less than a point below the full run's
# 40.42<!-- record translate-cpu metrics.test.bleu -->, in about a quarter of its time on one more thread.
#
# Tried on the speedrun and dropped: batches of 1,500 tokens instead of 2,500 take
# 2,338<!-- record translate-speedrun-small-batches steps --> steps instead of 1,574<!-- record translate-speedrun steps -->, but smaller matrix products run fewer tokens a second,
# and the extra steps do not make up for it (38.31<!-- record translate-speedrun-small-batches metrics.test.bleu --> on test). So was 1.5 times the
# speedrun's peak rate, at the speedrun's own steps and seed: it trails the
# speedrun at every validation and ends at 37.77<!-- record translate-speedrun-higher-rate metrics.validation.best --> on validation and 38.02<!-- record translate-speedrun-higher-rate metrics.test.bleu --> on test.
# Doubling the 2017 rate paid; raising it again does not. The other changes that lost
# in section 4 (twice the tokens per batch, one tied matrix, length buckets) were not
# tried again on this budget.
#
# ## 6 · Several GPUs
#
# The paper trained on 8 GPUs. The runner does the same with PyTorch's
# `DistributedDataParallel`, started by `torchrun`:
#
#     torchrun --nproc_per_node=4 -m annotated_transformer translate train \
#         --preset base --out runs/translate-base
#
# Each process trains a full copy of the model on its share of every epoch's batches;
# after each backward pass the processes average their gradients, so every copy takes the
# same step. The share is a slice of the same seeded list of batches, which every process
# computes identically, and the list is cut so that every process runs the same number of
# steps (a process with one batch more would wait forever for the others). The runner's
# `Run.shard` hands each process its share of the task's batches:

# %%
show_source(Run.shard, shard_batches)

# %%
batches = [[i] for i in range(10)]
print({rank: shard_batches(batches, rank, 4) for rank in range(4)})

# %% [markdown]
# The loss is also averaged over all processes' *tokens*, not per process, so that four
# processes with batches of different sizes take the same step as one process with all four
# batches would.

# %% [markdown]
# ## Summary
#
# What each of the paper's tricks did here, each against what it replaces, all in the
# same measure (validation BLEU, tokenized and lower-cased, from the sections above).
# Several GPUs are not measured: they take the same steps, sooner.

# %% tags=["nbval-ignore-output"]
greedy = beam_scores.loc[beam_scores["beam"] == 1].iloc[0]
bpe, words = (val_bleu(r) for r in reversed(trained.values()))
single = averages.loc[averages["kind"] == "single epoch", "bleu"].max()
verdict = pd.DataFrame(
    [
        ("one byte-pair vocabulary, against word vocabularies", 12, bpe - words),
        ("tied embeddings and output, against three matrices", 3,
         lever_table.loc["tied (one matrix for all three)", "change"]),
        (f"beam {best['beam']:.0f}, α {best['alpha']}, against greedy", 12,
         best["tokenized_bleu"] - greedy["tokenized_bleu"]),
        (f"the mean of the last {kept} epochs, against the best of them", 12,
         averages["bleu"].iloc[-1] - single),
    ],
    columns=["trick", "epochs", "effect"],
)
alt.Chart(verdict, title="The paper's tricks on Multi30k").mark_bar().encode(
    x=alt.X("effect:Q", title="change in validation BLEU (tokenized)"),
    y=alt.Y("trick:N", title=None, sort=None, axis=alt.Axis(labelLimit=360)),
    color=alt.condition("datum.effect > 0", alt.value("#4c78a8"),
                        alt.value("#e45756")),
    tooltip=["trick:N", "epochs:Q", alt.Tooltip("effect:Q", format="+.2f")],
).properties(width=300, height=30 * len(verdict))

# %% [markdown]
# The shared vocabulary and the beam are the paper's tricks that pay on Multi30k; tying
# costs at this size, and averaging does not pay after a schedule that ends near zero.
#
# You can now
#
# - share one vocabulary and tie embedding matrices;
# - choose a beam size and length penalty on validation data;
# - average checkpoints, and measure what each choice of a recipe is worth;
# - train to a time budget, and climb from one recipe to another one change at a time.
#
# **Next:** [chapter 13 · Sentiment classification on IMDb](13_classification_imdb.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/12_tricks_from_the_paper.py`: fill them in there, then grade them from the
# repository's root with `make exercises CHAPTER=12` (or
# `python -m annotated_transformer.exercises 12`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-12-average)=
# ### Exercise 12.1 · Averaging checkpoints
#
# Write section 3's averaging for state dicts held in memory: the element-wise mean of
# every tensor, returned in its own dtype. (The original's averaging function called a
# method that does not exist, so it never ran.) The grader sets two traps:
# half-precision weights, whose sum overflows float16's largest number, 65,504, on the
# way to an average well inside it; and the inputs, which must come back unchanged,
# although adding into the first checkpoint's tensors in place is the shortest code.
#
# Write `average_state_dicts(states)`; grade with `make exercises CHAPTER=12`.
#
# :::{dropdown} Solution
# ```python
# def average_state_dicts(states: list[dict[str, Tensor]]) -> dict[str, Tensor]:
#     """Element-wise mean of state dicts of one model, in each tensor's dtype.
#
#     Summed in float64, so that half-precision weights cannot overflow on the
#     way; the inputs are left untouched.
#     """
#     if not states or any(s.keys() != states[0].keys() for s in states):
#         raise ValueError("give state dicts (one or more) with the same names")
#     average = {}
#     for name, first in states[0].items():
#         total = sum(state[name].double() for state in states)
#         average[name] = (total / len(states)).to(first.dtype)
#     return average
# ```
# :::

# %% [markdown]
# (ex-12-ema)=
# ### Exercise 12.2 · From averaging checkpoints to a moving average
#
# Averaging the last $k$ checkpoints needs $k$ copies of the weights on disk. Most
# models today keep one running average instead, updated after every step: $\bar\theta
# \leftarrow \beta \bar\theta + (1 - \beta)\,\theta$ (Polyak averaging with exponential
# weights). Write one update; the grader runs seven and compares with the closed form,
# in which step $s$ of $T$ weighs $(1 - \beta)\,\beta^{T - s}$.
#
# Write `ema_update(average, weights, decay)`; grade with `make exercises CHAPTER=12`.
#
# :::{dropdown} Solution
# ```python
# def ema_update(
#     average: dict[str, Tensor],
#     weights: dict[str, Tensor],
#     decay: float,
# ) -> dict[str, Tensor]:
#     """One step of an exponential moving average of the weights.
#
#     returns a new dict: decay · average + (1 − decay) · weights, name by name
#     """
#     new = {}
#     for name, value in average.items():
#         new[name] = decay * value + (1 - decay) * weights[name]
#     return new
# ```
# :::

# %% [markdown]
# (ex-12-ddp-loss)=
# ### Exercise 12.3 · The loss each GPU backpropagates
#
# Under `DistributedDataParallel` each of $W$ processes backpropagates its own loss, and
# the gradients are then *averaged* over the processes. If each process used the mean
# loss over its own tokens, a process with few tokens would weigh as much as one with
# many. Which loss must each process backpropagate, from its summed loss and the token
# counts, so that the averaged gradient is that of the mean over all tokens (section 6)?
# The grader simulates three processes with 2, 5 and 9 examples and compares with one
# process that sees them all.
#
# Write `ddp_loss(loss_sum, local_tokens, global_tokens, world_size)`; grade with `make
# exercises CHAPTER=12`.
#
# :::{dropdown} Solution
# ```python
# def ddp_loss(
#     loss_sum: Tensor,
#     local_tokens: int,
#     global_tokens: int,
#     world_size: int,
# ) -> Tensor:
#     """The loss one of ``world_size`` processes backpropagates.
#
#     DDP averages the processes' gradients; for that average to be the gradient
#     of the mean over *all* tokens, each process divides its sum by the global
#     token count and multiplies by world_size to undo the averaging.
#     """
#     return loss_sum * world_size / global_tokens
# ```
# :::
