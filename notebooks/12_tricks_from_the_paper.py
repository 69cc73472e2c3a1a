# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
# ---

# %% [markdown]
# # 12 · Tricks from the paper
#
# ```{note}
# The stored outputs on this page come from chapter 10's `cpu`-preset run (trained once from
# the repository root with
# `python -m annotated_transformer translate train --preset cpu --out runs/translate-cpu`)
# and from two shorter trainings in this chapter. In CI everything runs at the `tiny` size,
# where every BLEU score is near zero and every difference between them is noise.
# ```
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
# The last section shows how the same training runs on several GPUs.

# %%

import altair as alt
import pandas as pd
import torch

from annotated_transformer import multi30k
from annotated_transformer.batching import shard_batches
from annotated_transformer.book.sizes import pick, runs_dir
from annotated_transformer.book.source import show_source
from annotated_transformer.bpe import BPE
from annotated_transformer.checkpoint import average_checkpoints, read_checkpoint
from annotated_transformer.decoding import beam_search, gnmt_length_penalty
from annotated_transformer.embeddings import Embeddings
from annotated_transformer.model import Generator, make_model, parameter_counts, tie_weights
from annotated_transformer.runner import Run, ensure_run, load_model
from annotated_transformer.tasks.translation import PRESETS, Translation
from annotated_transformer.vocab import SPECIALS, Vocab

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# Chapter 10's run is the starting point: its folder is reused when it holds a finished run,
# otherwise the runner trains it (in CI, chapter 10 has just trained the tiny preset afresh,
# and this chapter reuses that run).

# %% tags=["nbval-ignore-output"]
PRESET = pick(ci="tiny", full="cpu")
run = ensure_run("translate", PRESET, runs_dir() / f"translate-{PRESET}")
preset = PRESETS[PRESET]
print(f"the {PRESET} run in runs/{run.out.name}")

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
# encoding is chapter 03's:

# %%
show_source(BPE.learn, BPE.encode)

# %% [markdown]
# Learned on the German *and* English training sentences (the paper used 37,000 tokens for
# 4.5 million sentence pairs; Multi30k is 150 times smaller, so far fewer merges):

# %% tags=["nbval-ignore-output"]
train_de, train_en = (side[: preset.train_limit] for side in multi30k.load_split("train"))
merges = pick(ci=1000, full=8000)
bpe = BPE.learn(train_de + train_en, num_merges=merges)
shared = Vocab([*SPECIALS, *bpe.tokens])  # every token encode can output: no <unk> ever
print(f"{len(bpe.merges):,} merges; shared vocabulary of {len(shared):,} tokens")

# %% tags=["nbval-ignore-output"]
for sentence in (train_de[0], train_en[0]):
    print(bpe.encode(sentence))

# %% [markdown]
# Common words stay whole, rarer ones split into pieces (`▁` marks a space before a piece);
# `decode` joins them back exactly:

# %%
assert all(BPE.decode(bpe.encode(s)) == s for s in train_de[:100] + train_en[:100])
print("decode(encode(s)) == s for the first 100 German and English training sentences")

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
V, d = len(shared), preset.d_model
untied = make_model(V, V, **preset.model)
tied = tie_weights(make_model(V, V, **preset.model), share_source=True)
count = {name: sum(p.numel() for p in m.parameters()) for name, m in (("untied", untied),
                                                                      ("tied", tied))}
assert count["untied"] - count["tied"] == 2 * V * d
assert tied.generator.proj.weight is tied.src_embed.embed.lut.weight
print(f"untied: {count['untied']:,} parameters; tied: {count['tied']:,}; "
      f"saved 2 × {V:,} × {d} = {2 * V * d:,} ({1 - count['tied'] / count['untied']:.0%})")

# %% [markdown]
# Per block, from the package's `parameter_counts` (which counts each block's tensors, so
# the shared table appears in all three blocks of the tied model):

# %% tags=["nbval-ignore-output"]
blocks = pd.DataFrame({"untied": parameter_counts(untied), "tied": parameter_counts(tied)})
blocks.loc[["src_embed", "tgt_embed", "generator"]]

# %% [markdown]
# ### Measured: word vocabularies against a tied byte-pair vocabulary
#
# To compare fairly, both variants are trained with the same short recipe: the preset's
# architecture and learning rate, two epochs (the `cpu` run trains twelve), a warm-up of 70
# steps (a fifth of the word model's run), the same token budget per batch, and the weights
# as training leaves them. One uses chapter 10's separate word vocabularies (untied), the other
# the shared byte-pair vocabulary with all three matrices tied: two settings of the
# translation task, `tokens` and `tie`, which learns the byte pairs from the training
# sentences itself. Both go through the runner, as the command line would:
#
#     python -m annotated_transformer translate train --preset cpu --set epochs=2 \
#         --set warmup=70 --set final=last --set keep_last=0 --set tokens=bpe --set tie=true \
#         --set bpe_merges=8000 --out runs/translate-cpu-bpe-tied

# %%
show_source(Translation.__init__, Translation.build_model)

# %% tags=["nbval-ignore-output"]
recipe = ["epochs=2", f"warmup={pick(ci=10, full=70)}", "final=last", "keep_last=0"]
variants = {
    "words, separate vocabularies, untied": [],
    "shared byte pairs, tied": ["tokens=bpe", "tie=true", f"bpe_merges={merges}"],
}
trained = {}
for name, settings in variants.items():
    folder = runs_dir() / f"translate-{PRESET}-{'bpe-tied' if settings else 'words'}-2ep"
    trained[name] = ensure_run("translate", PRESET, folder, settings=[*recipe, *settings])
    print(f"{name}: runs/{folder.name}, {trained[name].metrics['train_seconds'] / 60:.0f} min")

# %% [markdown]
# The byte-pair model outputs pieces; joined with `BPE.decode`, they are scored exactly as
# chapter 10 scores words (the task's `scores`, greedy here):

# %% tags=["nbval-ignore-output"]
vocab_scores = pd.DataFrame(
    {name: r.task.scores(r.model, "test2016", beam=1) for name, r in trained.items()}
).T
vocab_scores["parameters"] = [sum(p.numel() for p in r.model.parameters()) for r in trained.values()]
vocab_scores[["sentences", "parameters", "bleu", "tokenized_bleu", "chrf"]]

# %% [markdown]
# Greedy decoding on test2016 for both. With fewer parameters the tied model has no
# unknown words at all: every German word, seen or not, is spelled in pieces.
#
# After two epochs (the stored outputs) the word model is ahead, 9.7 against 5.7 sacreBLEU.
# Both are far from trained (chapter 10's run needs twelve epochs to reach 38), so this
# measures how fast each starts, not where each ends: byte pairs make every sentence longer,
# and the model must first learn to assemble words from pieces. On 29,000 sentence pairs
# with a vocabulary of ~8,000 words there are few unknown words to win back; the paper's
# shared vocabulary was built for 4.5 million pairs, where it pays.
#
# ## 2 · Beam search
#
# Greedy decoding commits to the most probable next token at every step. Beam search keeps
# the `beam` most probable partial translations instead, and lets the finished ones
# compete with a length penalty, GNMT's ((5 + length) / 6)^α, so that short outputs are not
# favoured just for having fewer probabilities multiplied (chapter 09 derives it):

# %%
show_source(gnmt_length_penalty)

# %% [markdown]
# The package's `beam_search` is chapter 09's; here it runs on chapter 10's model
# (`final.pt`) for beam sizes 1 (greedy) to 8 on test2016:

# %%
show_source(beam_search)

# %% tags=["nbval-ignore-output"]
task, model = run.task, run.model
test = task.split("test2016")
beam_scores = pd.DataFrame([task.scores(model, test, beam=b) for b in [1, 2, 4, 8]])
beam_scores[["beam", "sentences", "bleu", "tokenized_bleu", "chrf"]]

# %% tags=["nbval-ignore-output"]
alt.Chart(beam_scores, title="test2016 BLEU against beam size").mark_line(point=True).encode(
    x=alt.X("beam:O", title="beam size (1 = greedy)", axis=alt.Axis(labelAngle=0)),
    y=alt.Y("bleu:Q", title="sacreBLEU", scale=alt.Scale(zero=False)),
    tooltip=["beam:O", "bleu:Q", "tokenized_bleu:Q", "chrf:Q"],
).properties(width=400, height=220)

# %% [markdown]
# For a trained model, the gain from greedy to a small beam is usually around one BLEU
# point, and larger beams add little or even lose a little: the model's most probable
# translation is not always its best one. Here (the stored outputs) beam 4, the paper's
# choice, gains 2.0 sacreBLEU (1.0 tokenized) over greedy, and beam 8 loses a little of it.
#
# ## 3 · Averaging checkpoints
#
# The weights after each of the last few epochs lie close together in parameter space,
# spread around a region of low loss by the noise of the last updates. Their average tends
# to sit nearer the middle of that region than any of them (the same idea as Polyak
# averaging, or the exponential moving averages many models keep today). The run of
# chapter 10 keeps the weights of its last epochs (`keep-NNNNNN.pt`, named by the step);
# the package averages them element by element:

# %%
show_source(average_checkpoints)

# %% [markdown]
# Derived by hand for two checkpoints, and compared with the package:

# %% tags=["nbval-ignore-output"]
epoch_paths = sorted(run.out.glob("keep-*.pt"))
a, b = (read_checkpoint(p)["model"] for p in epoch_paths[-2:])
_, averaged = average_checkpoints(epoch_paths[-2:])
for name in a:
    torch.testing.assert_close(averaged[name], (a[name] + b[name]) / 2)
print(f"average_checkpoints == (a + b) / 2 for all {len(a)} weight tensors")

# %% [markdown]
# Each kept epoch alone, and the average of the last $k$ of them, scored on test2016
# (greedy decoding, so that only the weights differ):

# %% tags=["nbval-ignore-output"]
rows = []
for path in epoch_paths:
    single = load_model(path)[1]
    rows.append({"weights": path.stem, "kind": "single epoch",
                 **task.scores(single, test, beam=1)})
for k in range(2, len(epoch_paths) + 1):
    model.load_state_dict(average_checkpoints(epoch_paths[-k:])[1])
    rows.append({"weights": f"mean of the last {k}", "kind": "average",
                 **task.scores(model, test, beam=1)})
model.load_state_dict(read_checkpoint(run.out / "final.pt")["model"])
averages = pd.DataFrame(rows)
averages[["weights", "sentences", "bleu", "tokenized_bleu", "chrf"]]

# %% tags=["nbval-ignore-output"]
averages["order"] = range(len(averages))
alt.Chart(
    averages, title="test2016 BLEU of single epochs and of averaged weights"
).mark_bar().encode(
    x=alt.X("bleu:Q", title="sacreBLEU (greedy)"),
    y=alt.Y("weights:N", title=None, sort=alt.SortField("order")),
    color=alt.Color("kind:N", title=None, legend=alt.Legend(orient="bottom")),
    tooltip=["weights:N", "bleu:Q", "tokenized_bleu:Q", "chrf:Q"],
).properties(width=400, height=20 * len(averages))

# %% [markdown]
# On this run the gain is small: on test2016 the mean of the last five epochs scores 36.9
# sacreBLEU against 36.7 for the last epoch alone (the stored outputs), and on validation
# the average lost to the best epoch. The learning rate
# had decayed to nearly zero over the last epochs, so their weights were already close
# together; averaging helps most after a schedule that ends at a higher rate, like the
# paper's.
#
# The runner does this at the end of every run whose config says `final="best"` (chapter
# 10's `Run.finish`): it averages the kept epochs, compares the average with the best single
# epoch on the validation set, and keeps the better one as `final.pt` (`metrics.json`
# records which).

# %% tags=["nbval-ignore-output"]
validation = run.metrics["validation"]
print(f"final.pt = {run.metrics['final']}; validation BLEU: "
      + ", ".join(f"{name} {bleu:.2f}" for name, bleu in validation.items()))

# %% [markdown]
# ## 4 · Several GPUs
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
