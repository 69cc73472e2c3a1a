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
# # 08 · Training
#
# - **You will learn** batches, the token-summed loss, Adam with the paper's settings, the warm-up schedule and label smoothing, each checked against a derivation.
# - **It assumes** [chapter 07](07_the_full_model.ipynb).
# - **Time:** about 20 minutes to read; it runs in under a minute.
#
# Part II built the model; this chapter builds everything needed to train it, following §5 of
# *Attention Is All You Need* ([Vaswani et al., 2017](../book/references.md#vaswani-et-al-2017)): batches that hold a source, a shifted
# target and their masks; a training loop that counts tokens; the Adam optimiser with the
# paper's unusual settings; the warm-up-then-decay learning rate schedule; and label smoothing.
# Each piece comes from the package (`annotated_transformer.data.batching`, `.training.loss`, `.training.trainer`, `.training.schedules`),
# shown with `show_source` and then checked against a derivation written out here.
#
# Two of these pieces went wrong in the Annotated Transformer, and we look at both: its loop
# advanced the learning rate schedule once per *micro-batch* when it accumulated gradients, and
# its label smoothing could return `inf` or `NaN` on some batches with (or without) padding.
# [Chapter 09](09_copy_task.ipynb) then puts it all to work on a small task.

# %%
import math
import tempfile
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd
import torch

from annotated_transformer.book import explore, viz
from annotated_transformer.book.source import show_source
from annotated_transformer.data.batching import Batch
from annotated_transformer.data.copy_task import copy_task_batches
from annotated_transformer.models.encoder_decoder import make_model
from annotated_transformer.models.eval_mode import evaluating
from annotated_transformer.training.loss import (
    LabelSmoothing,
    seq2seq_loss,
    smoothed_cross_entropy,
)
from annotated_transformer.training.schedules import (
    cosine,
    inverse_sqrt,
    linear,
    make_scheduler,
    noam,
    rate,
)
from annotated_transformer.training.trainer import (
    Trainer,
    make_optimizer,
    mean_loss,
)

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## Batches and masks
#
# The decoder is trained with *teacher forcing*: instead of feeding it its own (at first,
# nonsense) predictions, we feed it the true target sentence and ask it, at every position, for
# the next word. For a target `<s> a dog runs </s>` the decoder reads `<s> a dog runs` and must
# predict `a dog runs </s>` — the same sentence shifted by one. All positions are predicted at
# once, in parallel; the look-ahead mask of [chapter 06](06_masks.ipynb) keeps position $i$ from seeing the words
# after it, which it is being asked to predict.
#
# A `Batch` does that bookkeeping once: it splits the target into the decoder input `tgt` and
# the expected output `tgt_y`, builds the source padding mask and the target mask (look-ahead
# and padding), and counts the real (non-padding) tokens of `tgt_y` — the number the loss will
# be divided by.

# %% [markdown]
# ![The target start a dog runs end pad. The decoder input tgt = target[:, :-1] is start a dog runs end; the model and generator predict a distribution p1 to p5 at every position; each is compared with tgt_y = target[:, 1:], a dog runs end pad, by -log p, and the padding target is skipped.](figures/08_teacher_forcing.svg)
#
# *Teacher forcing: the decoder reads the target shifted right and predicts it,
# all positions at once; the loss compares each prediction with `tgt_y` there.*

# %%
show_source(Batch)

# %% [markdown]
# A worked example with a toy vocabulary: two German–English pairs of different lengths,
# padded with id 0 to the longest sentence of the batch.

# %%
words = [
    "<pad>",
    "<s>",
    "</s>",
    "ein",
    "Hund",
    "läuft",
    "Katzen",
    "a",
    "dog",
    "runs",
    "cats",
]
PAD = words.index("<pad>")


def ids(sentence: str, length: int) -> list[int]:
    tokens = [words.index(w) for w in sentence.split()]
    return tokens + [PAD] * (length - len(tokens))


def show(row: torch.Tensor) -> str:
    return " ".join(words[i] for i in row.tolist())


src = torch.tensor([ids("ein Hund läuft </s>", 4), ids("Katzen </s>", 4)])
tgt = torch.tensor([ids("<s> a dog runs </s>", 5), ids("<s> cats </s>", 5)])
batch = Batch(src, tgt, pad=PAD)
for name in ("src", "tgt", "tgt_y"):
    value = getattr(batch, name)
    print(f"{name:6} {tuple(value.shape)}  {value.tolist()}")
    for row in value:
        print(f"         {show(row)}")
print("src_mask", tuple(batch.src_mask.shape), batch.src_mask.int().tolist())
print("ntokens ", batch.ntokens)

# %% [markdown]
# The target mask of the second sentence, `<s> cats </s> <pad>` as decoder input: row $i$ is a
# query position, column $j$ a key position, 1 = may attend. Real positions see themselves and
# the real positions before them; the padded position (last row) only sees itself, so no row
# of the softmax is empty ([chapter 06](06_masks.ipynb) explains why the original's mask differed here).

# %%
print(batch.tgt_mask[1].int())

# %% [markdown]
# Checked against the definition: the shift, the token count, and the mask entry by entry.

# %%
assert torch.equal(batch.tgt, tgt[:, :-1]) and torch.equal(batch.tgt_y, tgt[:, 1:])
assert (
    batch.ntokens == sum(1 for t in tgt[:, 1:].flatten().tolist() if t != PAD) == 6
)
for b in range(2):
    for i in range(4):
        for j in range(4):
            real_query = batch.tgt[b, i] != PAD
            expected = (
                (j <= i and batch.tgt[b, j] != PAD) if real_query else (i == j)
            )
            assert bool(batch.tgt_mask[b, i, j]) == bool(expected)
print("Batch: shifted target, token count and masks agree with the definition")

# %% [markdown]
# ## The loss, summed over tokens
#
# The training loop knows nothing about translation: a task hands it a *loss function* that
# returns the loss **summed** over a batch's target tokens, and the number of those tokens.
# For the encoder–decoder, that is the label-smoothed cross-entropy of the generator's scores
# (more on label smoothing below).

# %%
show_source(seq2seq_loss)

# %% [markdown]
# Why sums and not means? Because of *gradient accumulation*. The paper trained on batches of
# about 25,000 source and 25,000 target tokens, spread over 8 GPUs. On one device the same
# batch is processed as several *micro-batches* whose gradients are added up before a single
# optimiser step. The update should be the one the big batch would have given: the gradient of
# the mean loss over **all** the step's tokens. Summing each micro-batch's loss, adding up the
# gradients and dividing once by the step's total token count gives exactly that. Taking the
# mean inside each micro-batch and adding the means does not: a micro-batch of 10 tokens would
# weigh as much as one of 100, and the sum of $k$ means is $k$ times too large.
#
# Here is one optimiser step of the package's `Trainer`:

# %%
show_source(Trainer.train_step)

# %% [markdown]
# Note where the scheduler steps: once, after `optimizer.step()`, outside the loop over
# micro-batches. The learning rate schedule is a function of the number of *updates*. The
# Annotated Transformer's `run_epoch` called `scheduler.step()` after every micro-batch while
# calling `optimizer.step()` only every `accum_iter` micro-batches, so with accumulation its
# schedule ran `accum_iter` times too fast: warm-up ended after a quarter of the intended
# updates when `accum_iter = 4`, and every later update used the rate meant for four times as
# many steps. (The schedule itself comes later in this chapter.)

# %%
steps = np.arange(1, 3001)
schedule_bug = pd.concat(
    [
        pd.DataFrame(
            {
                "optimiser step": steps,
                "learning rate": [rate(int(s) * k, 512, 1.0, 4000) for s in steps],
                "scheduler stepped": label,
            }
        )
        for k, label in [
            (1, "once per optimiser step"),
            (4, "once per micro-batch (4 per step)"),
        ]
    ]
)
viz.line_chart(
    schedule_bug[schedule_bug["optimiser step"] % 10 == 0],
    "optimiser step",
    "learning rate",
    "scheduler stepped",
    title=("Gradient accumulation over 4 micro-batches: where the scheduler steps "
        "matters"),
    x_title="optimiser step (update of the weights)",
    y_title="learning rate (d_model 512, warm-up 4000)",
).configure_legend(orient="bottom")

# %% [markdown]
# Now the claim about the update, tested. A tiny model (one layer, $d_{model} = 16$, no dropout)
# takes one step on a batch of 8 pairs of different lengths, three ways:
#
# 1. the `Trainer` on the whole batch at once;
# 2. the `Trainer` on the same pairs as 4 micro-batches of 2, `accumulate=4`;
# 3. the original's recipe written out: each micro-batch's mean loss, backward, one step.
#
# The pairs are sorted by length before they are split, as length-bucketed batching does, so
# the micro-batches hold different numbers of target tokens.
#
# Plain SGD with rate 1 is used, so that the change in the weights *is* the gradient and any
# difference shows directly (Adam divides by the gradient's own size and would hide a scale
# error).

# %%
V = 11


def ragged_pairs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n random source/target pairs, each padded after a different length."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(2, V, (n, 9), generator=gen)
    tgt = torch.randint(2, V, (n, 8), generator=gen)
    tgt[:, 0] = 1
    for i in range(n):
        src[i, 3 + (i * 5) % 6 :] = PAD
        tgt[i, 2 + (i * 3) % 6 :] = PAD
    return src, tgt


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return make_model(V, V, N=1, d_model=16, d_ff=32, h=2, dropout=0.0)


src8, tgt8 = ragged_pairs(8, seed=2)
order = (tgt8 != PAD).sum(dim=1).argsort(stable=True)  # shortest targets first
src8, tgt8 = src8[order], tgt8[order]
micro = [Batch(src8[i : i + 2], tgt8[i : i + 2], pad=PAD) for i in range(0, 8, 2)]
print("target tokens per micro-batch:", [b.ntokens for b in micro])

updated = {}
for name, batches, accumulate in [
    ("one batch of 8", [Batch(src8, tgt8, pad=PAD)], 1),
    ("4 micro-batches, accumulated", micro, 4),
]:
    model = tiny_model()
    sgd = torch.optim.SGD(model.parameters(), lr=1.0)
    trainer = Trainer(model, sgd, seq2seq_loss(PAD), accumulate=accumulate)
    trainer.train_step(batches)
    updated[name] = torch.cat([p.detach().flatten() for p in model.parameters()])

# The original's recipe: mean loss per micro-batch, gradients added up, one step.
model = tiny_model()
optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
for b in micro:
    loss_sum, n_tokens = seq2seq_loss(PAD)(model, b)
    (loss_sum / n_tokens).backward()
optimizer.step()
updated["mean per micro-batch (original)"] = torch.cat(
    [p.detach().flatten() for p in model.parameters()]
)

start = torch.cat([p.detach().flatten() for p in tiny_model().parameters()])
reference = updated["one batch of 8"] - start
original = updated.pop("mean per micro-batch (original)") - start
updates = {name: weights - start for name, weights in updated.items()}
updates["mean per micro-batch (original)"] = original
updates["the same, divided by 4"] = original / 4
for name, update in updates.items():
    error = (update - reference).norm() / reference.norm()
    print(f"{name:32} differs from the one-batch update by {error:.0%}")
torch.testing.assert_close(
    updated["4 micro-batches, accumulated"], updated["one batch of 8"]
)
print("accumulating summed losses gives the update of one big batch")

# %% [markdown]
# Accumulating sums reproduces the big batch's update to float precision. The original's
# recipe is off by a factor of 4 (the sum of 4 means), and even divided by 4 it is not the
# same update: each micro-batch's tokens are weighted by one over that micro-batch's count, so a
# token in a micro-batch of short sentences counts for more than one in a micro-batch of long
# ones.

# %% [markdown]
# Evaluation uses the same loss function, with the model in evaluation mode (no dropout) and
# under `torch.inference_mode()`, so no autograd graph is built — the original's evaluation
# ran with gradients on, wasting memory.

# %%
show_source(evaluating, mean_loss)

# %% [markdown]
# ## The optimiser: Adam with the paper's β₂
#
# "We used the Adam optimizer with $\beta_1 = 0.9$, $\beta_2 = 0.98$ and $\epsilon = 10^{-9}$"
# (§5.3). Adam keeps running averages of each parameter's gradient ($\beta_1$) and squared
# gradient ($\beta_2$) and divides the first by the square root of the second. PyTorch's
# default $\beta_2 = 0.999$ averages the squares over about 1,000 steps; $\beta_2 = 0.98$ over about 50, so
# the step size reacts faster when gradients change — as they do early in training, and when
# the learning rate changes under the schedule. The rate given here is only a starting value:
# the scheduler sets it at every step.

# %%
show_source(make_optimizer)

# %%
group = make_optimizer(tiny_model()).param_groups[0]
print({key: group[key] for key in ("lr", "betas", "eps")})
assert (group["betas"], group["eps"]) == ((0.9, 0.98), 1e-9)

# %% [markdown]
# ## The learning rate schedule
#
# The paper varies the learning rate during training (§5.3, eq. 3):
#
# $$lrate = d_{model}^{-0.5} \cdot \min(step\_num^{-0.5},\; step\_num \cdot warmup\_steps^{-1.5})$$
#
# "This corresponds to increasing the learning rate linearly for the first $warmup\_steps$
# training steps, and decreasing it thereafter proportionally to the inverse square root of the
# step number. We used $warmup\_steps = 4000$." Early on, Adam's running averages are based on
# few gradients and the weights are far from anything sensible; large steps then can push the
# model somewhere it does not recover from (post-norm Transformers are known to diverge without
# warm-up). The $d_{model}^{-0.5}$ factor gives wider models smaller steps. The Annotated
# Transformer named this the "Noam" schedule (after Noam Shazeer) and added a `factor` in
# front. The package keeps its `rate` as the formula:

# %%
show_source(rate)

# %% [markdown]
# The two branches of the minimum meet at $step = warmup$, where the rate peaks at
# $factor \cdot (d_{model} \cdot warmup)^{-0.5}$. Every task of the book makes its scheduler
# with one function, `make_scheduler`, which takes that *peak* rate and a shape: the paper's
# (`noam`, eq. 3 divided by its peak) or one of the three that later work prefers. Each shape
# is a factor between 0 and 1 that PyTorch's `LambdaLR` multiplies the peak by; `step`
# counts optimiser updates from 0.

# %%
for d_model, warmup in [(512, 4000), (512, 8000), (256, 4000)]:
    peak = max(rate(s, d_model, 1.0, warmup) for s in range(1, 20_001))
    assert math.isclose(peak, rate(warmup, d_model, 1.0, warmup))
    assert math.isclose(peak, (d_model * warmup) ** -0.5)
    print(f"d_model={d_model}, warmup={warmup}: peak {peak:.2e} at step {warmup}")

parameter = torch.nn.Parameter(torch.zeros(1))
optimizer = torch.optim.Adam([parameter], lr=1.0, betas=(0.9, 0.98), eps=1e-9)
peak = (512 * 4000) ** -0.5  # factor 1
scheduler = make_scheduler(optimizer, "noam", peak, warmup=4000, total=20_000)
driven = []
for _ in range(100):
    driven.append(optimizer.param_groups[0]["lr"])
    optimizer.step()
    scheduler.step()
torch.testing.assert_close(driven, [rate(s, 512, 1.0, 4000) for s in range(100)])
print("make_scheduler('noam') gives rate(step) for the first 100 steps")

# %% [markdown]
# The original's three example curves, over 20,000 steps: doubling the warm-up lowers and
# delays the peak; halving $d_{model}$ raises the whole curve by $\sqrt 2$.

# %%
curve_steps = np.arange(50, 20_001, 50)
noam_curves = pd.concat(
    [
        pd.DataFrame(
            {
                "step": curve_steps,
                "learning rate": [
                    rate(int(s), d_model, 1.0, warmup) for s in curve_steps
                ],
                "d_model and warm-up": f"{d_model}:{warmup}",
            }
        )
        for d_model, warmup in [(512, 4000), (512, 8000), (256, 4000)]
    ]
)
viz.line_chart(
    noam_curves,
    "step",
    "learning rate",
    "d_model and warm-up",
    title="The Noam learning rate schedule (factor 1)",
    x_title="optimiser step",
    y_title="learning rate",
    width=455,  # leaves room for the legend beside it
)

# %% [markdown]
# ### Four shapes, one function
#
# The paper's shape never ends: after the warm-up it decays as $1/\sqrt{step}$ forever, so a
# run can always be extended. When the number of steps is fixed in advance, later work
# prefers shapes that reach zero at the last step, which anneal the weights into a minimum:
# a **cosine** (half a cosine wave after a linear warm-up; this book's translation presets)
# or a straight **linear** decay (its classifier presets). T5 used an **inverse square root**
# without a warm-up ramp: constant for the first $warmup$ steps, then $\sqrt{warmup / step}$.

# %%
show_source(noam, cosine, linear, inverse_sqrt, make_scheduler)

# %% [markdown]
# The four over a run of 10,000 steps with a warm-up of 1,000 and the same peak, each driven
# through a real optimiser and checked against its formula:

# %%
TOTAL, WARMUP, PEAK = 10_000, 1_000, 1e-3
formulas = {
    "noam": lambda s: min(max(s, 1) / WARMUP, math.sqrt(WARMUP / max(s, 1))),
    "cosine": lambda s: (
        (s + 1) / WARMUP
        if s < WARMUP
        else 0.5 * (1 + math.cos(math.pi * (s - WARMUP) / (TOTAL - WARMUP)))
    ),
    "linear": lambda s: (
        (s + 1) / WARMUP if s < WARMUP else (TOTAL - s) / (TOTAL - WARMUP)
    ),
    "inverse_sqrt": lambda s: math.sqrt(WARMUP / max(s, WARMUP)),
}
rows = []
for kind, formula in formulas.items():
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])
    scheduler = make_scheduler(optimizer, kind, PEAK, WARMUP, TOTAL)
    for step in range(TOTAL):
        lr = optimizer.param_groups[0]["lr"]
        assert math.isclose(
            lr, PEAK * formula(step), rel_tol=1e-9, abs_tol=1e-15
        ), (kind, step)
        if step % 50 == 0:
            rows.append({"step": step, "learning rate": lr, "schedule": kind})
        optimizer.step()
        scheduler.step()
print("every schedule equals its formula at all 10,000 steps")
viz.line_chart(
    pd.DataFrame(rows),
    "step",
    "learning rate",
    "schedule",
    title="Four learning rate schedules with the same peak and warm-up",
    x_title="optimiser step",
    y_title="learning rate",
)

# %% [markdown]
# **Explore.** The paper's rate and the three later shapes at its peak: change the warm-up,
# the model width $d_{model}$ and the factor (the axis stays fixed, so a larger factor or a
# smaller model raises the whole curve), or show one schedule at a time. The paper's `noam`
# coincides with `inverse_sqrt` after the warm-up and with the linear ramp during it. (The
# controls work on the page without a kernel.)

# %%
explore.schedule_explorer()

# %% [markdown]
# ## Label smoothing
#
# "During training, we employed label smoothing of value $\epsilon_{ls} = 0.1$. This hurts
# perplexity, as the model learns to be more unsure, but improves accuracy and BLEU score"
# (§5.4, after [Szegedy et al. 2016](../book/references.md#szegedy-et-al-2016)). Instead of asking the model to put probability 1 on the
# correct token $y$, we ask for a smoothed target distribution $q$ that keeps a little mass
# $\epsilon$ for every class. The package uses PyTorch's convention (the one
# `F.cross_entropy(label_smoothing=ε)` implements), with $V$ classes:
#
# $$q(c) = (1 - \epsilon)\,[c = y] + \frac{\epsilon}{V}.$$
#
# The loss is the Kullback–Leibler divergence from $q$ to the model's distribution $p$,
# $\mathrm{KL}(q \,\|\, p) = \sum_c q(c)\,(\log q(c) - \log p(c))$, summed over the positions
# whose target is not padding. The Annotated Transformer spread $\epsilon$ over the $V - 2$
# classes that are neither $y$ nor padding, and gave padding zero mass;
# `OriginalLabelSmoothing`, a subclass that changes only `smoothed`, reproduces that one for
# comparison.

# %%
show_source(LabelSmoothing)

# %% [markdown]
# The original's example: 5 classes, padding id 0, $\epsilon = 0.4$ and five positions with
# targets 2, 1, 0 (padding), 3, 3. Each row of the heatmap is the target distribution $q$ of
# one position; the padding position gets an all-zero row, so it adds nothing to the loss.

# %%
from annotated_transformer.training.loss import OriginalLabelSmoothing

targets = torch.tensor([2, 1, 0, 3, 3])
log_p = torch.full((5, 5), 0.2).log()  # any log-probabilities: only q is drawn
pictures = []
for kind, title in [
    (LabelSmoothing, "package (PyTorch)"),
    (OriginalLabelSmoothing, "the original's"),
]:
    criterion = kind(5, padding_idx=0, smoothing=0.4)
    criterion(log_p, targets)
    print(title, "\n", criterion.true_dist)
    pictures.append(
        viz.heatmap(
            criterion.true_dist,
            x_labels=[str(c) for c in range(5)],
            y_labels=[f"target {t}" for t in targets.tolist()],
            title=title,
            x_title="class c",
            y_title="position (its target id)",
            value_title="q(c)",
            domain=(0, 1),
            width=180,
            height=180,
        )
    )
alt.hconcat(*pictures).resolve_scale(color="shared").properties(
    title="Smoothed targets q, ε = 0.4"
)

# %% [markdown]
# The package's $q$ written out by hand, as the formula says:

# %%
criterion = LabelSmoothing(5, padding_idx=0, smoothing=0.4)
criterion(log_p, targets)
by_hand = torch.full((5, 5), 0.4 / 5)
by_hand[torch.arange(5), targets] += 1 - 0.4
by_hand[targets == 0] = 0.0
torch.testing.assert_close(criterion.true_dist, by_hand)
print("q matches (1 - ε)[c = y] + ε/V, with padding rows zeroed")

# %% [markdown]
# What does smoothing do to the incentives? Take one position whose target is class 1 out of
# $V = 5$, and a model that gives probability $x$ to class 1 and spreads the rest evenly,
# $p = [\frac{1-x}{4}, x, \frac{1-x}{4}, \frac{1-x}{4}, \frac{1-x}{4}]$. Without smoothing
# the loss, $-\log x$, keeps falling as $x \to 1$: the model is always rewarded for more
# confidence, and its logits grow without bound. With smoothing the loss is smallest at
# $x = 1 - \epsilon + \epsilon/V$, where $p = q$ exactly and the divergence is 0, and it
# *rises* as the model grows more confident than that.

# %%
confidence = np.round(np.append(np.arange(0.2, 0.999, 0.004), 0.999), 4)
rows = []
for eps in (0.0, 0.1, 0.3):
    criterion = LabelSmoothing(5, padding_idx=None, smoothing=eps)
    p = torch.tensor(
        [
            [(1 - x) / 4, x, (1 - x) / 4, (1 - x) / 4, (1 - x) / 4]
            for x in confidence
        ]
    )
    losses = [
        criterion(row.log().unsqueeze(0), torch.tensor([1])).item() for row in p
    ]
    best = confidence[int(np.argmin(losses))]
    print(
        f"ε = {eps}: loss is smallest at x = {best:.3f} (1 - ε + ε/V = "
        f"{1 - eps + eps / 5:.3f})"
    )
    assert abs(best - (1 - eps + eps / 5)) < 2e-3 or (
        eps == 0 and best == confidence[-1]
    )
    rows += [
        {"x": x, "loss": loss, "ε": str(eps)}
        for x, loss in zip(confidence, losses, strict=True)
    ]
overconfidence = pd.DataFrame(rows).round(5)
viz.line_chart(
    overconfidence,
    "x",
    "loss",
    "ε",
    title="Label smoothing penalises over-confidence",
    x_title="probability x the model gives the correct class",
    y_title="loss KL(q ‖ p) for one token",
)

# %% [markdown]
# ### KL divergence or cross-entropy: the same gradients
#
# Building $q$ as a dense (tokens × vocabulary) tensor costs memory and time; with a 37,000
# token vocabulary it is most of the loss's cost. For training the package uses
# `F.cross_entropy(..., label_smoothing=ε)` instead, which computes the cross-entropy
# $H(q, p) = -\sum_c q(c) \log p(c)$ without building $q$. The two differ by a constant:
#
# $$\mathrm{KL}(q \,\|\, p) = \sum_c q(c)\log q(c) - \sum_c q(c)\log p(c) = H(q, p) - H(q),$$
#
# and the entropy $H(q)$ of the target does not depend on the model. So the values differ by
# $H(q)$ per token, and the gradients with respect to the model's scores are identical.

# %%
show_source(smoothed_cross_entropy)

# %% [markdown]
# Numerically, on random scores for 8 positions (two of them padding) over 7 classes. For one
# real token,
#
# $$H(q) = -\left(1 - \epsilon + \tfrac{\epsilon}{V}\right)
#   \log\left(1 - \epsilon + \tfrac{\epsilon}{V}\right)
#   - (V - 1)\,\tfrac{\epsilon}{V}\log\tfrac{\epsilon}{V}.$$

# %%
V7, eps = 7, 0.1
torch.manual_seed(1)
scores = torch.randn(8, V7)
target = torch.tensor([3, 1, 0, 6, 2, 0, 5, 4])  # id 0 is padding

scores_kl = scores.clone().requires_grad_(True)
kl = LabelSmoothing(V7, padding_idx=0, smoothing=eps)(
    scores_kl.log_softmax(-1), target
)
kl.backward()

scores_ce = scores.clone().requires_grad_(True)
ce, n_tokens = smoothed_cross_entropy(
    scores_ce, target, padding_idx=0, smoothing=eps
)
ce.backward()

top, rest = 1 - eps + eps / V7, eps / V7
entropy_per_token = -(top * math.log(top) + (V7 - 1) * rest * math.log(rest))
print(f"KL(q ‖ p) summed: {kl.item():.4f}")
print(f"H(q, p) summed:   {ce.item():.4f}")
print(f"difference:       {ce.item() - kl.item():.4f}")
print(
    f"{int(n_tokens)} tokens × H(q) = {int(n_tokens)} × {entropy_per_token:.4f} "
    f"= {int(n_tokens) * entropy_per_token:.4f}"
)
torch.testing.assert_close(ce - kl, torch.tensor(int(n_tokens) * entropy_per_token))
torch.testing.assert_close(scores_kl.grad, scores_ce.grad)
print("values differ by the constant; gradients are equal")

# %% [markdown]
# ### The padding edge cases
#
# The Annotated Transformer's label smoothing was reported to give `inf` or `NaN` losses in
# corner cases (harvardnlp/annotated-transformer issues #18, #38, #109, #117). Two pieces of
# floating-point arithmetic are behind them:

# %%
zero = torch.tensor(0.0)
# target mass 0 on a class with p = 0
print("0 · log 0          =", zero * torch.log(zero))
# a batch with nothing but padding, averaged
print("loss 0 / 0 tokens  =", zero / zero)

# %% [markdown]
# $0 \cdot \log 0$ appears when a class has zero target mass (the padding class, in the
# original's convention) and the model gives it probability 0; $0/0$ when an all-padding batch
# is averaged over its tokens. The original also selected the padding rows with
# `nonzero(...).squeeze()`, which changes shape when there is exactly one padding token or
# none. The package's `LabelSmoothing` skips zero-mass entries (`xlogy` and a masked $x$), the
# loss is a *sum* (an empty sum is 0), and the `Trainer` divides by `max(tokens, 1)`.
#
# Every edge case, for both loss forms; the cell asserts that each loss and each gradient is
# finite (class 0 is padding unless the row says otherwise; 5 positions over 6 classes):

# %%
edge_cases = [
    ("no padding in the batch", [3, 1, 4, 1, 5], 0, False),
    ("exactly one padding token", [3, 0, 4, 1, 5], 0, False),
    ("all padding", [0, 0, 0, 0, 0], 0, False),
    ("padding id is the last class", [3, 5, 4, 1, 5], 5, False),
    ("no padding index at all", [3, 0, 4, 1, 5], None, False),
    ("original's q, p(padding) = 0", [3, 0, 4, 1, 5], 0, True),
]
torch.manual_seed(2)
base_scores = torch.randn(5, 6)
rows = []
for case, target_ids, pad, exclude in edge_cases:
    target = torch.tensor(target_ids)
    row = {"case": case, "padding id": str(pad), "CE loss": "—", "tokens": "—"}
    x = base_scores.clone().requires_grad_(True)
    log_p = x.log_softmax(-1)
    if exclude:  # a model that rules out the padding class completely
        log_p = log_p.masked_fill(torch.arange(6) == pad, -math.inf)
    kind = OriginalLabelSmoothing if exclude else LabelSmoothing
    kl = kind(6, pad, 0.1)(log_p, target)
    kl.backward()
    row["KL loss"] = round(kl.item(), 4)
    assert kl.isfinite() and x.grad.isfinite().all()
    if not exclude:
        x = base_scores.clone().requires_grad_(True)
        ce, n = smoothed_cross_entropy(x, target, pad, 0.1)
        ce.backward()
        row["CE loss"] = round(ce.item(), 4)
        row["tokens"] = int(n)
        assert ce.isfinite() and x.grad.isfinite().all()
    rows.append(row)
pd.DataFrame(rows)

# %% [markdown]
# All finite; the all-padding batch costs nothing and counts no tokens. The cross-entropy form
# has no row for $p(\text{padding}) = 0$: with PyTorch's convention every class, padding
# included, has target mass $\epsilon/V > 0$, so a model that rules a class out completely
# really has an infinite loss — and scores from a linear layer are never $-\infty$.

# %% [markdown]
# :::{admonition} Find the bug
# :class: tip
# {ref}`Exercise 8.4 <ex-08-label-smoothing-loss>` hands you a label smoothing loss with
# these edge cases still in it.
# :::

# %% [markdown]
# ## Checkpoints and resuming
#
# A long run must survive an interruption. `Trainer.save` writes the model, the optimiser
# (Adam's running averages), the scheduler, every random generator, the position in the data
# and the loss history; `Trainer.resume` restores them, so a run stopped after step 3 and
# resumed in a fresh `Trainer` continues exactly as if it had never stopped — dropout masks
# included, which is why this small model has dropout on.

# %%
show_source(Trainer.resume)


# %%
def copy_trainer(checkpoint: Path | None) -> Trainer:
    torch.manual_seed(0)
    model = make_model(V, V, N=1, d_model=16, d_ff=32, h=2, dropout=0.2)
    optimizer = make_optimizer(model)
    scheduler = make_scheduler(
        optimizer, "noam", (16 * 4) ** -0.5, warmup=4, total=7
    )
    return Trainer(
        model, optimizer, seq2seq_loss(0), scheduler, checkpoint_path=checkpoint
    )


def data(epoch: int) -> list[Batch]:
    return list(copy_task_batches(V, batch_size=4, n_batches=5, seed=epoch))


straight = copy_trainer(None).fit(data, max_steps=7, progress=False)
with tempfile.TemporaryDirectory() as folder:
    first = copy_trainer(Path(folder) / "last.pt")
    first.fit(data, max_steps=3, progress=False)  # writes a checkpoint at the end
    second = copy_trainer(Path(folder) / "last.pt")
    second.resume()
    print(
        f"resumed at step {second.step}, epoch {second.epoch}, batch "
        f"{second.batch_in_epoch}"
    )
    resumed = second.fit(data, max_steps=7, progress=False)
comparison = pd.DataFrame(
    {
        "step": straight["step"],
        "epoch": straight["epoch"],
        "loss, one run": straight["loss"].round(4),
        "loss, stopped at 3 and resumed": resumed["loss"].round(4),
        "learning rate": resumed["lr"].map("{:.2e}".format),
    }
)
torch.testing.assert_close(
    torch.tensor(resumed["loss"].values), torch.tensor(straight["loss"].values)
)
comparison

# %% [markdown]
# The `Trainer`'s `history` is a pandas DataFrame with one row per optimiser step (loss per
# token, learning rate, tokens, tokens per second, gradient norm, and the validation loss when
# it is evaluated) — [chapter 09](09_copy_task.ipynb) draws its training curves from it.

# %% [markdown]
# ## Summary
#
# You can now
#
# - build batches with shifted targets and masks;
# - train with Adam, the warm-up schedule and label smoothing, summing the loss over tokens;
# - spot the two bugs of the Annotated Transformer's training code.
#
# **Next:** [chapter 09 · The copy task](09_copy_task.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/08_training.py`: fill them in there, then grade them from the
# repository's root with `make exercises CHAPTER=08` (or
# `python -m annotated_transformer.exercises 08`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-08-adam-step)=
# ### Exercise 8.1 · One Adam step by hand
#
# Write one update of Adam with the paper's $\beta_1 = 0.9$, $\beta_2 = 0.98$,
# $\epsilon = 10^{-9}$, bias corrections included. The grader runs three steps of yours
# and three of `torch.optim.Adam` on the same gradients and compares the parameters.
#
# Write `adam_step(param, grad, m, v, step, lr)`; grade with
# `make exercises CHAPTER=08`.
#
# :::{dropdown} Solution
# ```python
# def adam_step(
#     param: Tensor,
#     grad: Tensor,
#     m: Tensor,
#     v: Tensor,
#     step: int,
#     lr: float,
#     betas: tuple[float, float] = (0.9, 0.98),
#     eps: float = 1e-9,
# ) -> tuple[Tensor, Tensor, Tensor]:
#     """One Adam update; step counts from 1. Returns the new (param, m, v).
#
#     m ← β₁ m + (1 - β₁) g;  v ← β₂ v + (1 - β₂) g²;
#     param ← param - lr · m̂ / (√v̂ + eps), with m̂ = m / (1 - β₁^step),
#     v̂ = v / (1 - β₂^step) (the bias corrections)
#     """
#     beta1, beta2 = betas
#     m = beta1 * m + (1 - beta1) * grad
#     v = beta2 * v + (1 - beta2) * grad**2
#     m_hat = m / (1 - beta1**step)
#     v_hat = v / (1 - beta2**step)
#     return param - lr * m_hat / (v_hat.sqrt() + eps), m, v
# ```
# :::

# %% [markdown]
# (ex-08-noam-rate)=
# ### Exercise 8.2 · The paper's learning-rate schedule
#
# Write the paper's learning rate (eq. 3) with the original's `factor`, for steps from 1.
# Then, for yourself: at which step does it peak, and what is the peak for the base model
# ($d_\text{model} = 512$, 4000 warm-up steps)?
#
# Write `noam_rate(step, d_model, warmup, factor)`; grade with
# `make exercises CHAPTER=08`.
#
# :::{dropdown} Solution
# ```python
# def noam_rate(
#     step: int,
#     d_model: int,
#     warmup: int,
#     factor: float = 1.0,
# ) -> float:
#     """The paper's schedule (eq. 3) with the original's factor, for step >= 1:
#     factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)."""
#     return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
# ```
# :::

# %% [markdown]
# (ex-08-smoothed-targets)=
# ### Exercise 8.3 · Smoothed target distributions
#
# Build the smoothed target distributions $q$ of a batch of positions in PyTorch's
# convention, with the rows of padding positions all zero. The grader checks that
# $-\sum q \log p$ equals `F.cross_entropy(..., label_smoothing=ε, ignore_index=pad)`.
#
# Write `smoothed_targets(target, V, smoothing, pad)`; grade with
# `make exercises CHAPTER=08`.
#
# :::{dropdown} Solution
# ```python
# def smoothed_targets(
#     target: Tensor,
#     V: int,
#     smoothing: float,
#     pad: int,
# ) -> Tensor:
#     """Label-smoothed targets in PyTorch's convention, padding rows all zero.
#
#     target: (n,) ids -> q (n, V): q(c) = (1 - ε)[c = y] + ε / V, except that
#     the rows of positions whose target is ``pad`` are 0
#     """
#     q = torch.full((target.size(0), V), smoothing / V)
#     q[torch.arange(target.size(0)), target] += 1 - smoothing
#     q[target == pad] = 0.0
#     return q
# ```
# :::

# %% [markdown]
# (ex-08-label-smoothing-loss)=
# ### Exercise 8.4 · Find the bug: label smoothing that returns inf or NaN
#
# The starter's loss uses the original's $q$ and computes
# $\sum q\,(\log q - \log p)$ exactly as the formula reads, and it returns NaN even on
# a batch with no padding at all. Find out why, and fix it so that it is finite, and
# correct, for a batch without padding, with one padding token, with only padding, and
# for a model that gives the padding class probability 0. The grader also checks that the
# gradient is finite. (The original's issues #18, #38, #109 and #117 report these NaN
# and inf losses.)
#
# Write `label_smoothing_loss(log_p, target, smoothing, pad)`; grade with
# `make exercises CHAPTER=08`.
#
# :::{dropdown} Solution
# ```python
# def label_smoothing_loss(
#     log_p: Tensor,
#     target: Tensor,
#     smoothing: float,
#     pad: int,
# ) -> Tensor:
#     """Label-smoothed KL(q ‖ p) summed over the positions whose target is not
#     padding, with the original's q: 1 - ε on the target, ε / (V - 2) on every
#     other class but padding, which gets 0.
#
#     log_p: (n, V) log-probabilities; target: (n,) ids -> a scalar
#     """
#     V = log_p.size(-1)
#     q = torch.full_like(log_p, smoothing / (V - 2))
#     q.scatter_(1, target.unsqueeze(1), 1 - smoothing)
#     q[:, pad] = 0.0
#     q[target == pad] = 0.0
#     kept = q > 0  # 0 · log 0 and 0 · log p are 0: leave those entries out
#     return (q[kept] * (q[kept].log() - log_p[kept])).sum()
# ```
# :::
