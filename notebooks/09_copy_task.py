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
# # 09 · The copy task
#
# - **You will learn** to train a small Transformer end to end, and to decode with it greedily, with a key/value cache and with beam search.
# - **It assumes** [chapter 08](08_training.ipynb).
# - **Time:** about 20 minutes to read; it runs in about 2 minutes.
#
# Before training on real translations, which takes far longer and can fail for a hundred reasons,
# the Annotated Transformer trains on the simplest sequence-to-sequence task there is: given a
# random sequence of symbols, output the same sequence. A correct model, loss, optimiser and
# schedule learn it quickly on a CPU (the Time line above says how quickly, training included);
# a bug in a mask or in the shifting of the
# target usually shows up as a model that never gets past a fraction of right symbols.
#
# This chapter trains a 2-layer Transformer on the copy task with the pieces of [chapter 08](08_training.ipynb),
# draws its training curves, and then turns the trained model into a *decoder* of new
# sequences three ways: greedy decoding that recomputes the whole prefix at every step;
# greedy decoding with a key/value cache (token for token the same, and faster); and beam
# search with GNMT's length penalty.

# %%
import copy
import time

import altair as alt
import numpy as np
import pandas as pd
import torch

from annotated_transformer.blocks.attention import CachedAttention
from annotated_transformer.blocks.layers import CachedDecoderLayer
from annotated_transformer.blocks.masks import padding_mask, subsequent_mask
from annotated_transformer.book import viz
from annotated_transformer.book.sizes import pick
from annotated_transformer.book.source import show_source
from annotated_transformer.data.batching import Batch
from annotated_transformer.data.copy_task import (
    copy_task_batches,
    variable_copy_batch,
)
from annotated_transformer.evaluation.decoding import (
    _Stepper,
    beam_search,
    gnmt_length_penalty,
    greedy_decode,
)
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
)
from annotated_transformer.training.loss import seq2seq_loss
from annotated_transformer.training.schedules import make_scheduler
from annotated_transformer.training.trainer import (
    Trainer,
    make_optimizer,
    mean_loss,
)

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# ## The data
#
# The original's copy task draws sequences of 10 symbols; the first is a start symbol and the
# target is the source itself. The package keeps that version, seeded so that epoch $e$ always
# yields the same batches (which is what lets a resumed run continue exactly):

# %%
show_source(copy_task_batches)

# %% [markdown]
# Every sequence there has the same length, and nothing marks its end: a decoder would have to
# be told when to stop. Here we make the task a little more like translation: sequences of 1
# to 10 symbols drawn from 10 symbols (ids 3–12), closed by an end symbol `</s>` and padded.
# The decoder must now decide *when* to stop, which is what makes beam search's length
# penalty matter later on. The target is `<s>` followed by the source, so the decoder reads
# `<s> a b c` and predicts `a b c </s>`; `Batch` does the shifting and the masks. The package
# draws these batches with `copy_task_batches(..., variable=True)`:

# %%
show_source(variable_copy_batch)

# %%
PAD, START, END = 0, 1, 2
V, MAX_SYMBOLS = 13, 10
names = {PAD: "·", START: "<s>", END: "</s>"} | {
    i: chr(ord("a") + i - 3) for i in range(3, V)
}


def copy_batches(
    epoch: int, batch_size: int = 64, n_batches: int = 20
) -> list[Batch]:
    """The batches of one epoch, the same ones whenever the epoch is asked for "
    "again."""
    return list(
        copy_task_batches(
            V, batch_size, n_batches, MAX_SYMBOLS, seed=epoch, variable=True
        )
    )


def show(row: torch.Tensor, output: bool = False) -> str:
    """The symbols of one sequence; a decoder's output is cut after its first "
    "</s>."""
    ids = row.tolist()
    if output and END in ids:
        ids = ids[: ids.index(END) + 1]
    return " ".join(names[i] for i in ids)


example = copy_batches(epoch=0, batch_size=3)[0]
for name in ("src", "tgt", "tgt_y"):
    print(f"{name} {tuple(getattr(example, name).shape)}")
    for row in getattr(example, name):
        print("   ", show(row))
print("target tokens in this batch:", example.ntokens)

# %% [markdown]
# ## The model and its training
#
# Two encoder and two decoder layers, as in the original's copy example, but narrower
# ($d_{model}$ = 64) so that it trains on a CPU as the chapter
# runs. Dropout is off: every batch is fresh random data, so the model cannot memorise its
# training set and needs no regularisation. Everything else is the paper's recipe from
# [chapter 08](08_training.ipynb): Adam with $\beta_2 = 0.98$, the Noam schedule (here with a short warm-up of 100
# steps, as the whole run is short), and label smoothing $\epsilon = 0.1$. Gradients
# are clipped to norm 1, a cheap guard for a tiny model at the peak learning rate.

# %% tags=["nbval-ignore-output"]
D_MODEL = pick(ci=32, full=64)
HEADS = pick(ci=2, full=4)
STEPS = pick(ci=400, full=1200)
EARLY = 100  # a snapshot at the end of warm-up, for comparing decoders later
EPSILON = 0.1

torch.manual_seed(0)
model = Transformer(
    TransformerConfig(
        V, V, N=2, d_model=D_MODEL, d_ff=2 * D_MODEL, h=HEADS, dropout=0.0
    )
)
optimizer = make_optimizer(model)
scheduler = make_scheduler(
    optimizer, "noam", (D_MODEL * 100) ** -0.5, warmup=100, total=STEPS
)
trainer = Trainer(
    model, optimizer, seq2seq_loss(PAD, EPSILON), scheduler, clip_norm=1.0
)
# an epoch never trained on
validation = copy_batches(epoch=10_000, batch_size=256, n_batches=2)
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")

# %% [markdown]
# `Trainer.fit` counts optimiser steps across calls, so the run is done in two parts: up to
# step `EARLY`, where we keep a copy of the partly trained model, and on to `STEPS`. Every
# tenth of the run, its evaluation hook measures the validation loss (`mean_loss`: the loss
# per token in eval mode, without autograd). Progress bars are off (`progress=False`):
# the cell prints a summary instead.

# %% tags=["nbval-ignore-output"]
start = time.perf_counter()
trainer.fit(copy_batches, EARLY, progress=False)
early_model = copy.deepcopy(model).eval()
eval_every = STEPS // 10
loss = seq2seq_loss(PAD, EPSILON)
history = trainer.fit(
    copy_batches,
    STEPS,
    evaluate=lambda: {"eval_loss": mean_loss(model, loss, validation)},
    every=eval_every,
    progress=False,
)
seconds = time.perf_counter() - start
last = history.iloc[-1]
print(
    f"{STEPS} steps in {seconds:.0f} s ({history['tokens_per_s'].median():,.0f} "
    "tokens/s)"
)
print(
    f"training loss at the end: {history['loss'].tail(20).mean():.3f} (mean of the "
    "last 20)"
)
print(f"validation loss at the end: {last['eval_loss']:.3f}")

# %% [markdown]
# With label smoothing the loss cannot reach 0. Its smallest value is reached when the model's
# distribution equals the smoothed target $q$, and it is then the entropy of $q$ ([chapter 08](08_training.ipynb))
# per token:
#
# $$H(q) = -\left(1 - \epsilon + \tfrac{\epsilon}{V}\right)
#   \log\left(1 - \epsilon + \tfrac{\epsilon}{V}\right)
#   - (V - 1)\,\tfrac{\epsilon}{V}\log\tfrac{\epsilon}{V}.$$
#
# The training curves below draw
# it as a dashed line. The learning rate climbs for 100 steps of warm-up and then decays as
# $1/\sqrt{step}$.

# %%
top, rest = 1 - EPSILON + EPSILON / V, EPSILON / V
floor = -(top * np.log(top) + (V - 1) * rest * np.log(rest))
print(f"smallest possible loss per token: H(q) = {floor:.4f}")

# %% tags=["nbval-ignore-output"]
losses = pd.concat(
    [
        history[["step", "loss"]].assign(data="training batch"),
        history[["step", "eval_loss"]]
        .dropna()
        .rename(columns={"eval_loss": "loss"})
        .assign(data="validation"),
    ]
)
loss_chart = alt.Chart(
    losses, title="Copy task: loss per target token"
).mark_line().encode(
    x=alt.X("step:Q", title="optimiser step"),
    y=alt.Y("loss:Q", title="loss per token (label-smoothed cross-entropy)"),
    color=alt.Color("data:N", title="data"),
) + alt.Chart(pd.DataFrame({"floor": [floor]})).mark_rule(strokeDash=[4, 4]).encode(
    y="floor:Q", tooltip=[alt.Tooltip("floor:Q", title="H(q)", format=".3f")]
)
lr_chart = viz.line_chart(
    history.iloc[::4],
    "step",
    "lr",
    title="Learning rate (Noam schedule, warm-up 100)",
    x_title="optimiser step",
    y_title="learning rate",
    height=160,
)
alt.vconcat(
    loss_chart.properties(width=500, height=240), lr_chart
).configure_legend(orient="bottom")

# %% [markdown]
# ## Greedy decoding
#
# At test time there is no target to feed the decoder. We start from `<s>`, ask the model for
# the distribution of the next token, take the most probable one, append it, and repeat until
# every sequence has produced `</s>` (or a length limit is reached). That is *greedy*
# decoding. The package's version decodes a whole batch at once; a sequence that has ended
# keeps receiving `</s>` while the others go on.

# %%
show_source(greedy_decode)

# %% [markdown]
# Each step calls a small helper that returns the log-probabilities of the next token. Without
# a cache it runs the decoder over the **whole prefix** under the look-ahead mask and keeps
# only the last position; with a cache it feeds only the **newest** token (next section).

# %%
show_source(_Stepper)

# %% [markdown]
# Five sequences the model has never seen, and their greedy decodings:

# %% tags=["nbval-ignore-output"]
# training used seeds 0, 1, 2, ...
test_generator = torch.Generator().manual_seed(12345)
src = variable_copy_batch(V, 5, MAX_SYMBOLS, test_generator).src
src_mask = padding_mask(src, PAD)  # (batch, 1, src_len)
out = greedy_decode(
    model,
    src,
    src_mask,
    max_len=src.size(1) + 1,
    start_symbol=START,
    end_symbol=END,
)
for s, o in zip(src, out, strict=True):
    print(f"source  {show(s)}\noutput  {show(o, output=True)}\n")


# %% [markdown]
# ## Exact-match accuracy
#
# A copy is correct only if every symbol and the end symbol are right. We decode fresh random
# sequences and count the exact copies: a sequence counts if the output, after `<s>`, matches
# the source at every position up to and including its `</s>`.


# %%
def exact_copies(output: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """bool (batch,): the output after <s> equals the source up to its </s>."""
    produced = output[:, 1:]
    width = src.size(1)
    # decoding stopped early for every sequence: pad with </s>
    if produced.size(1) < width:
        produced = torch.cat(
            [
                produced,
                produced.new_full((len(src), width - produced.size(1)), END),
            ],
            dim=1,
        )
    real = src != PAD
    return ((produced[:, :width] == src) | ~real).all(dim=1)


N_TEST = pick(ci=500, full=2000)
test_src = variable_copy_batch(V, N_TEST, MAX_SYMBOLS, test_generator).src
test_mask = padding_mask(test_src, PAD)
decoded = {}
for name, m in [
    (f"partly trained (step {EARLY})", early_model),
    ("trained", model),
]:
    decoded[name] = greedy_decode(
        m, test_src, test_mask, test_src.size(1) + 1, START, END
    )
accuracy = {
    name: exact_copies(o, test_src).float().mean().item()
    for name, o in decoded.items()
}
assert accuracy["trained"] >= 0.95, (
    f"the model copies only {accuracy['trained']:.1%} exactly"
)
print("the trained model copies at least 95% of fresh sequences exactly")

# %% tags=["nbval-ignore-output"]
for name, value in accuracy.items():
    print(f"{name:26} exact copies: {value:.1%} of {N_TEST} fresh sequences")

# %% [markdown]
# ## The key/value cache
#
# Recomputing the prefix is wasteful. At step $t$ the decoder runs all $t$ positions through
# every layer, but positions $1, \dots, t-1$ give exactly the same keys and values as at the
# step before: the decoder is causal, so nothing about an earlier position depends on the
# tokens after it. A sequence of $n$ tokens therefore costs $1 + 2 + \dots + n = O(n^2)$
# position passes. With a cache each layer keeps the projected keys and values of the earlier
# positions (and those of the encoder memory, which never change) and the step runs only the
# newest token: $O(n)$ position passes, each attending over the cached keys ([chapter 02](02_self_attention.ipynb) built
# the attention, and `blocks/kv_cache.py` holds the cache).

# %% [markdown]
# The cache enters chapter 07's classes as subclasses with the same weights. `CachedAttention`
# projects only the new positions and reads the earlier keys and values from the cache (the
# source memory's are projected once, at the first step); `CachedDecoderLayer` hands each of
# its attentions its cache; `Transformer.decode` numbers the new positions from
# `cache.length` and checks its inputs once, where they enter. `Transformer` builds
# `make_model`'s model from these classes, weight for weight: the model trained above is one.

# %%
show_source(CachedAttention.forward, CachedDecoderLayer.forward, Transformer.decode)

# %% [markdown]
# The cached path must give *exactly* the tokens of the recomputing one. We check it token for
# token on 64 fresh sequences, for the trained model and for the partly trained one (whose less
# certain choices would expose a difference sooner):

# %% [markdown]
# ![Four decoding steps of one decoder layer. self_kv.key grows by one position a step, from (1, h, 1, d_k) to (1, h, 4, d_k), the newest position projected that step and the others read from the cache. src_kv.key holds all 5 source positions, (1, h, 5, d_k), projected from the memory at step 1 and only read afterwards.](figures/09_kv_cache.svg)
#
# *A decoder layer's key/value caches while decoding: `self_kv` gains one position
# a step, `src_kv` is projected once.*

# %%
bench_src = variable_copy_batch(
    V, 64, MAX_SYMBOLS, torch.Generator().manual_seed(777)
).src
bench_mask = padding_mask(bench_src, PAD)
for m in (early_model, model):
    cached = greedy_decode(m, bench_src, bench_mask, 12, START, END, use_cache=True)
    recomputed = greedy_decode(
        m, bench_src, bench_mask, 12, START, END, use_cache=False
    )
    assert torch.equal(cached, recomputed)
print(
    "cached and recomputing greedy decoding agree token for token on 64 sequences"
)

# %% [markdown]
# And the speed. To see how the cost grows with length, we decode the 64 sequences without an
# end symbol, so that every output runs to the length limit, from 16 to 128 tokens. Each
# timing is the best of three runs. (The model never saw sequences this long, so the outputs
# past the 11th token are not meaningful copies; the work per step is the same.)


# %% tags=["nbval-ignore-output"]
def best_time(fn, *args, repeats: int = 3, **kwargs) -> float:
    """The fastest of ``repeats`` calls of fn(*args, **kwargs), in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return min(times)


rows = []
for length in pick(ci=(16, 32, 64), full=(16, 32, 64, 128)):
    for use_cache in (True, False):
        seconds = best_time(
            greedy_decode,
            model,
            bench_src,
            bench_mask,
            length,
            START,
            None,
            use_cache,
        )
        rows.append(
            {
                "tokens per sequence": length,
                "decoder": "with key/value cache"
                if use_cache
                else "recomputing the prefix",
                "sequences per second": round(64 / seconds, 1),
            }
        )
speed = pd.DataFrame(rows)
print(
    speed.pivot(
        index="tokens per sequence",
        columns="decoder",
        values="sequences per second",
    )
)
table = speed.pivot(
    index="tokens per sequence", columns="decoder", values="sequences per second"
)
ratio = table["with key/value cache"] / table["recomputing the prefix"]
print(
    "speed-up of the cache:",
    ", ".join(f"{r:.1f}× at {n}" for n, r in ratio.items()),
)
viz.line_chart(
    speed,
    "tokens per sequence",
    "sequences per second",
    "decoder",
    title="Greedy decoding of 64 sequences on this CPU",
    x_title="tokens decoded per sequence",
    y_title="sequences per second (best of 3)",
    log_y=True,
).configure_legend(orient="bottom")

# %% [markdown]
# The gap grows with the length, as $O(n)$ against $O(n^2)$ says it should; at the lengths of
# this task (11 tokens) the saving is smaller, since each step also pays a fixed cost for
# running the layers at all.
#
# ## Beam search with a length penalty
#
# Greedy decoding commits to the single most probable token at each step. The most probable
# *sequence* can start with a token that is not the most probable first token, and greedy
# will never find it. Beam search keeps the $k$ best partial sequences (the *beam*) at every
# step: each is extended by every possible next token, and the $k$ best of the $k \cdot V$
# candidates survive. The paper used $k = 4$.
#
# Scoring a hypothesis by its log-probability $\log P(Y \mid X) = \sum_t \log p(y_t \mid
# y_{<t}, X)$ has a bias: every token adds a negative term, so shorter hypotheses score
# higher, and a beam search ranked that way likes to stop early. The paper follows Google's
# neural machine translation system ([Wu et al., 2016](../book/references.md#wu-et-al-2016), *GNMT*, eq. 14) and divides by a length
# penalty,
#
# $$\mathrm{score}(Y) = \frac{\log P(Y \mid X)}{lp(Y)}, \qquad
# lp(Y) = \left(\frac{5 + |Y|}{6}\right)^{\alpha},$$
#
# with $\alpha = 0.6$ (§6.1). $\alpha = 0$ turns the penalty off; $\alpha = 1$ divides by
# (almost) the length, i.e. ranks by the average log-probability per token. The 5 damps the
# effect on very short outputs, and $lp = 1$ for a single token.

# %% [markdown]
# ![A beam search tree with beam size 2. From the start token, candidates 3 (-0.4), 5 (-0.6) and 2 (-2.3): 3 and 5 are kept. Next, 3 1 (-2.0) and 5 7 (-0.8) are kept, 3 4 (-2.3) and 5 1 (-2.1) dropped. Then 3 1 end (-2.3) and 5 7 end (-0.9) are kept. Greedy would have taken 3 first and ended at -2.3.](figures/09_beam_search.svg)
#
# *Beam search keeps the `beam_size` best partial hypotheses by total
# log-probability (filled boxes) and drops the rest (dashed).*

# %%
show_source(gnmt_length_penalty)

# %%
lengths = torch.arange(1, 31, dtype=torch.float)
penalty = pd.concat(
    [
        pd.DataFrame(
            {
                "|Y|": lengths.int().numpy(),
                "lp(Y)": gnmt_length_penalty(lengths, alpha).numpy().round(4),
                "α": str(alpha),
            }
        )
        for alpha in (0.0, 0.6, 1.0)
    ]
)
for alpha in (0.0, 0.6, 1.0):  # the formula, written out
    by_hand = torch.tensor([((5 + n) / 6) ** alpha for n in range(1, 31)])
    torch.testing.assert_close(gnmt_length_penalty(lengths, alpha), by_hand)
viz.line_chart(
    penalty,
    "|Y|",
    "lp(Y)",
    "α",
    title="GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^α",
    x_title="hypothesis length |Y| (tokens generated)",
    y_title="lp(Y), the divisor of log P(Y | X)",
)

# %% [markdown]
# A worked example: a short hypothesis of 3 tokens with log-probability $-2.0$ against a long
# one of 8 tokens with $-2.6$. By log-probability alone the short one wins; with
# $\alpha = 0.6$ the long one does, because its $-2.6$ is divided by a larger $lp$.

# %%
for alpha in (0.0, 0.6):
    short = -2.0 / gnmt_length_penalty(torch.tensor(3.0), alpha).item()
    long = -2.6 / gnmt_length_penalty(torch.tensor(8.0), alpha).item()
    winner = "short" if short > long else "long"
    print(
        f"α = {alpha}: short {short:.3f}, long {long:.3f} -> the {winner} "
        "hypothesis wins"
    )

# %% [markdown]
# The package's beam search decodes a batch of sources together, with $k$ hypotheses each.
# A hypothesis that has produced `</s>` is finished: it keeps its score and its place, and can
# only be "extended" by `</s>` at no cost, so it competes with the unfinished ones on equal
# terms. With a cache, the caches are reordered to follow the surviving hypotheses.

# %%
show_source(beam_search)

# %% [markdown]
# The cached and the recomputing beam search agree too:

# %%
for m in (early_model, model):
    a = beam_search(
        m, bench_src, bench_mask, 12, START, END, beam_size=4, use_cache=True
    )
    b = beam_search(
        m, bench_src, bench_mask, 12, START, END, beam_size=4, use_cache=False
    )
    assert torch.equal(a, b)
print("cached and recomputing beam search agree token for token")

# %% [markdown]
# ## Greedy against beam
#
# On the copy task a trained model is so sure of every token that greedy decoding and beam
# search give the same outputs. The partly trained snapshot is where they can differ. For both
# models and every decoder we measure, on the same fresh sequences: the exact-match accuracy,
# the mean output length (symbols before `</s>`), and the mean log-probability the model gives
# its own output, $\log P(Y \mid X)$, computed afresh by teacher forcing. Beam search looks for
# outputs of higher probability than greedy's; whether the most probable output is also the
# right one is a question about the model, not the search.
#
# The length limit leaves a few tokens of room beyond the longest true output. A hypothesis
# that is still unfinished when the limit is reached has not paid for its `</s>` (a token of
# probability below 1, so a negative term), and would compete unfairly with the finished ones
# if the limit were tight.


# %%
@torch.inference_mode()
def sequence_log_prob(
    m: torch.nn.Module, src: torch.Tensor, output: torch.Tensor
) -> torch.Tensor:
    """log P(output[1:] | src) per sequence, up to and including the first </s>."""
    src_mask = padding_mask(src, PAD)
    tgt = output[:, :-1]
    hidden = m.decode(
        m.encode(src, src_mask), src_mask, tgt, subsequent_mask(tgt.size(1))
    )
    log_p = m.generator(hidden).gather(-1, output[:, 1:].unsqueeze(-1)).squeeze(-1)
    # Count each token up to the first </s>; the repeated </s> after it are padding.
    ended_before = (output[:, 1:] == END).int().cumsum(dim=1) - (
        output[:, 1:] == END
    ).int()
    return (log_p * (ended_before == 0)).sum(dim=1)


def output_length(output: torch.Tensor) -> torch.Tensor:
    """Symbols generated before the first </s> (or all of them if there is none)."""
    return (output[:, 1:] != END).int().cumprod(dim=1).sum(dim=1)


compare_src = test_src[: pick(ci=200, full=500)]
compare_mask = padding_mask(compare_src, PAD)
max_len = compare_src.size(1) + 4  # room beyond the longest true output (see above)
outputs, rows = {}, []
for model_name, m in [("partly trained", early_model), ("trained", model)]:
    decoders = {
        "greedy": lambda m=m: greedy_decode(
            m, compare_src, compare_mask, max_len, START, END
        )
    }
    for alpha in (0.0, 0.6, 1.0):
        decoders[f"beam 4, α = {alpha}"] = lambda m=m, a=alpha: beam_search(
            m,
            compare_src,
            compare_mask,
            max_len,
            START,
            END,
            beam_size=4,
            length_penalty=a,
        )
    for decoder, run in decoders.items():
        out = run()
        outputs[model_name, decoder] = out
        rows.append(
            {
                "model": model_name,
                "decoder": decoder,
                "exact copies": (
                    f"{exact_copies(out, compare_src).float().mean().item():.1%}"
                ),
                "mean length": round(output_length(out).float().mean().item(), 2),
                "mean log P(Y|X)": round(
                    sequence_log_prob(m, compare_src, out).mean().item(), 3
                ),
            }
        )

# %% tags=["nbval-ignore-output"]
true_length = (compare_src != PAD).sum(dim=1) - 1
print(
    f"{len(compare_src)} fresh sequences, true mean length "
    f"{true_length.float().mean():.2f}"
)
pd.DataFrame(rows)

# %% [markdown]
# On the trained model every decoder returns the same copies: when each next token has a
# probability near $1 - \epsilon$ and every other token is far behind, there is nothing for a
# search to find. On the partly trained snapshot, beam search finds outputs that the model
# itself rates as more probable than greedy's (the last column), and that also buys some exact
# copies. A larger $\alpha$ makes the outputs slightly longer on average, as the penalty
# intends; on this task the effect is small, since the source fixes the length, while in
# translation the choice matters more ([chapter 12](12_tricks_from_the_paper.ipynb)).
#
# Some sequences where the partly trained model's greedy and beam ($\alpha = 0.6$) outputs
# differ. Beam search's output is the more probable one under the model, but not necessarily
# the correct copy: a search can only find what the model prefers.

# %% tags=["nbval-ignore-output"]
greedy_out = outputs["partly trained", "greedy"]
beam_out = outputs["partly trained", "beam 4, α = 0.6"]
width = min(greedy_out.size(1), beam_out.size(1))
differ = (greedy_out[:, :width] != beam_out[:, :width]).any(dim=1) | (
    greedy_out.size(1) != beam_out.size(1)
)
print(
    f"greedy and beam differ on {int(differ.sum())} of {len(compare_src)} sequences"
)
for i in differ.nonzero().flatten()[:4].tolist():
    g_lp = sequence_log_prob(
        early_model, compare_src[i : i + 1], greedy_out[i : i + 1]
    ).item()
    b_lp = sequence_log_prob(
        early_model, compare_src[i : i + 1], beam_out[i : i + 1]
    ).item()
    print(f"source  {show(compare_src[i])}")
    print(f"greedy  {show(greedy_out[i], output=True)}   log P = {g_lp:.2f}")
    print(f"beam    {show(beam_out[i], output=True)}   log P = {b_lp:.2f}\n")

# %% [markdown]
# The trained model copies; the decoders, the cache and the length penalty are in place. Part
# IV uses the same `Trainer`, `greedy_decode` and `beam_search` on real German–English
# translation, where sentences are longer, the model is less certain, and the choice of
# decoder shows up in the BLEU score.

# %% [markdown]
# ## Summary
#
# You can now
#
# - train a small Transformer and read its training curves;
# - decode greedily, with a key/value cache, and with beam search and a length penalty.
#
# **Next:** [chapter 10 · German→English on Multi30k](10_translation_multi30k.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/09_copy_task.py`: fill them in there, then grade them from the
# repository's root with `make exercises CHAPTER=09` (or
# `python -m annotated_transformer.exercises 09`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-09-beam-score)=
# ### Exercise 9.1 · GNMT's length-normalised score
#
# Write GNMT's length-normalised score for a tensor of hypotheses, then use it on this
# chapter's worked example: a 3-token hypothesis with log-probability $-2.0$ against an
# 8-token one with $-2.6$. Which $\alpha$ makes the two tie?
#
# Write `beam_score(logp, length, alpha)`; grade with `make exercises CHAPTER=09`.
#
# :::{dropdown} Solution
# ```python
# def beam_score(logp: Tensor, length: Tensor, alpha: float) -> Tensor:
#     """GNMT's length-normalised score: log P(Y | X) / ((5 + |Y|) / 6)^α.
#
#     logp: the hypotheses' summed log-probabilities; length: their lengths |Y|
#     (same shape) -> the scores, same shape
#     """
#     return logp / ((5 + length) / 6) ** alpha
# ```
# :::

# %% [markdown]
# (ex-09-greedy)=
# ### Exercise 9.2 · Greedy decoding of any model
#
# Write greedy decoding for any model given as a function: the tokens so far in, the
# log-probabilities of the next token out. It stops at the end symbol or at `max_len`
# tokens. The grader's model is a fixed random table of next-token distributions.
#
# Write `greedy(next_log_probs, start, end, max_len)`; grade with
# `make exercises CHAPTER=09`.
#
# :::{dropdown} Solution
# ```python
# def greedy(
#     next_log_probs: Callable[[list[int]], Tensor],
#     start: int,
#     end: int,
#     max_len: int,
# ) -> list[int]:
#     """Greedy decoding: append the most probable token until ``end``, or until
#     the sequence holds ``max_len`` tokens (the start symbol included).
#
#     next_log_probs: the model, tokens so far -> log-probabilities (V,)
#     returns the tokens, start symbol first, ``end`` included if produced
#     """
#     tokens = [start]
#     while len(tokens) < max_len and tokens[-1] != end:
#         tokens.append(int(next_log_probs(tokens).argmax()))
#     return tokens
# ```
# :::

# %% [markdown]
# (ex-09-top-p-filter)=
# ### Exercise 9.3 · Top-p (nucleus) filtering
#
# Top-p (nucleus) sampling (Holtzman et al. 2020) samples only from the smallest set of
# most probable tokens whose probabilities add up to at least $p$. Write the filter: keep
# those tokens' logits, set the others to $-\infty$, for a batch of rows at once (the
# most probable token always stays). Chapter 14 samples text with temperature and top-k;
# top-p is a drop-in alternative there.
#
# Write `top_p_filter(logits, p)`; grade with `make exercises CHAPTER=09`.
#
# :::{dropdown} Solution
# ```python
# def top_p_filter(logits: Tensor, p: float) -> Tensor:
#     """Nucleus (top-p) filtering: keep the fewest most probable tokens whose
#     probabilities add up to at least p; the others get -inf.
#
#     logits: (..., V) -> (..., V); the most probable token is always kept
#     """
#     sorted_logits, order = logits.sort(dim=-1, descending=True)
#     probs = sorted_logits.softmax(dim=-1)
#     before = probs.cumsum(dim=-1) - probs  # mass of the more probable tokens
#     drop_sorted = before >= p  # the nucleus is already complete without them
#     drop = drop_sorted.scatter(-1, order, drop_sorted)
#     return logits.masked_fill(drop, float("-inf"))
# ```
# :::

# %% [markdown]
# (ex-09-beam-search)=
# ### Exercise 9.4 · Beam search, checked by trying every sequence
#
# Write a small beam search of your own for the same kind of model as in exercise 9.2,
# ranked by the summed log-probability (no length penalty). The grader proves it two
# ways: with a beam wide enough to hold every hypothesis it must find the most probable
# complete sequence (found by trying all of them), and with $k = 1$ it must be greedy
# decoding.
#
# Write `beam_search(next_log_probs, start, end, max_len, k)`; grade with
# `make exercises CHAPTER=09`.
#
# :::{dropdown} Solution
# ```python
# def beam_search(
#     next_log_probs: Callable[[list[int]], Tensor],
#     start: int,
#     end: int,
#     max_len: int,
#     k: int,
# ) -> list[int]:
#     """Beam search ranked by the summed log-probability (no length penalty).
#
#     next_log_probs: the model, tokens so far -> log-probabilities (V,).
#     Every step extends each unfinished hypothesis by every token; a finished
#     one (its last token is ``end``) is carried over unchanged; the k best of
#     all of them survive. Stops when all k are finished or hold ``max_len``
#     tokens, and returns the best: tokens, start symbol first.
#     """
#     beam = [([start], 0.0)]
#     while not all(h[-1] == end or len(h) == max_len for h, _ in beam):
#         candidates = []
#         for tokens, score in beam:
#             if tokens[-1] == end or len(tokens) == max_len:
#                 candidates.append((tokens, score))
#                 continue
#             logp = next_log_probs(tokens).tolist()
#             for t, lp in enumerate(logp):
#                 candidates.append(([*tokens, t], score + lp))
#         beam = sorted(candidates, key=lambda c: c[1], reverse=True)[:k]
#     return beam[0][0]
# ```
# :::
