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
# # 19 · Going big
#
# - **You will learn** where the memory of a training step goes, and half precision, gradient accumulation, activation checkpointing, data-parallel and sharded training and `torch.compile`, each measured.
# - **It assumes** [chapter 08](08_training.ipynb) and [chapter 10](10_translation_multi30k.ipynb) (the runner).
# - **Time:** about 25 minutes to read; it runs in about 2 minutes.
#
# Peter Bloem's *Transformers from scratch* ends with the tricks that let transformers grow:
# half precision, gradient accumulation, gradient checkpointing and many GPUs. Every model in
# this book so far fits easily on a laptop. This chapter asks what changes when it does not:
# where the memory of a training step goes, and five ways to need less of it or to spread it
# out. Each trick is one setting of the task runner, so every task (translation,
# classification, the language model) can use it:
#
# ```
# python -m annotated_transformer lm train --preset cpu --out runs/x \
#     --set precision=bf16
# python -m annotated_transformer lm train --preset cpu --out runs/x \
#     --set accumulate=4
# python -m annotated_transformer lm train --preset cpu --out runs/x \
#     --set activation_checkpointing=true
# torchrun --nproc_per_node=8 -m annotated_transformer translate train --preset base \
#     --out runs/b --set sharding=fsdp
# ```
#
# Every claim below is measured on a CPU with small models (the numbers in tables and charts
# are from the run that built this page). This page measures nothing on a GPU: the GPU
# numbers at the end are estimates from a published peak rate, and the memory formula is
# checked here against CPU measurements only.

# %%
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import altair as alt
import pandas as pd
import torch
import torch.nn.functional as F
from IPython.display import display

from annotated_transformer import runner
from annotated_transformer.blocks.layers import TransformerBlock
from annotated_transformer.book import viz
from annotated_transformer.book.sizes import pick
from annotated_transformer.book.source import show_source
from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM
from annotated_transformer.training.checkpoints import full_state_dicts
from annotated_transformer.training.distributed import wrap
from annotated_transformer.training.memory import (
    measured_training_memory,
    peak_step_bytes,
    sharding_table,
    training_memory,
)
from annotated_transformer.training.precision import (
    cpu_bf16_speedup,
    precision_context,
)
from annotated_transformer.training.schedules import make_scheduler
from annotated_transformer.training.trainer import Trainer, checkpoint_blocks

warnings.filterwarnings("ignore", message=".*returned a view tensor.*")
torch.set_num_threads(1)
WORK = Path(tempfile.mkdtemp(prefix="going-big-"))
MiB = 2**20

# %% [markdown]
# ## Where the memory goes
#
# A training step with Adam holds four things per parameter, each a 4-byte fp32 number: the
# weight, its gradient, and Adam's two moving averages $m$ and $v$. That is 16 bytes a
# parameter before a single token has been seen: a model of 1 billion parameters needs 16 GB
# for its *state* alone. On top come the **activations**: every tensor the forward pass saves
# because the backward pass needs it (the input of each linear layer, the output of each
# ReLU, dropout masks, attention's softmax unless a fused kernel recomputes it). They grow
# with the batch $b$, the length $n$ and the depth $N$: per layer, terms in $b\,n\,d_{model}$,
# $b\,n\,d_{ff}$ and, for attention weights, $b\,h\,n^2$.
#
# `memory.training_memory` writes each term out for the book's models; its docstring says
# which tensors PyTorch saves (found by listing them with saved-tensor hooks):

# %%
show_source(training_memory)

# %% [markdown]
# The peak of a step comes where the forward pass ends and the backward pass starts: every
# activation is alive and the gradient of the loss with respect to the logits is being
# formed. `memory.measured_training_memory` builds the model, runs two Adam steps and reads
# the peak of the second from the PyTorch profiler's allocation events (on CUDA it would read
# `torch.cuda.max_memory_allocated`). Here is the language model of [chapter 14](14_generation_characters.ipynb) at a few
# sizes: batch 8 windows of 64 bytes, $d_{ff} = 4 d_{model}$, dropout 0.1.

# %% tags=["nbval-ignore-output"]
memory_sizes = pick(
    [(64, 2), (128, 2)], [(64, 2), (128, 2), (128, 4), (256, 2), (256, 4)]
)
rows = []
for d_model, N in memory_sizes:
    sizes = dict(
        N=N, d_model=d_model, d_ff=4 * d_model, h=4, vocab=256, batch=8, length=64
    )
    predicted = training_memory(DecoderLM, **sizes, dropout=0.1)
    measured = measured_training_memory(DecoderLM, **sizes, dropout=0.1)
    rows.append(
        {
            "model": f"d_model {d_model}, N {N}",
            "parameters": predicted.parameters,
            "state MiB (16 B/param)": (
                predicted.params + predicted.grads + predicted.adam
            )
            / MiB,
            "activations MiB": predicted.activations / MiB,
            "predicted peak MiB": predicted.total / MiB,
            "measured peak MiB": measured / MiB,
        }
    )
memory_table = pd.DataFrame(rows).set_index("model")
memory_table["predicted / measured"] = (
    memory_table["predicted peak MiB"] / memory_table["measured peak MiB"]
)
memory_table.round(2)

# %% tags=["nbval-ignore-output"]
points = (
    alt.Chart(memory_table.reset_index())
    .mark_circle(size=80)
    .encode(
        x=alt.X(
            "measured peak MiB:Q", title="measured peak of a training step (MiB)"
        ),
        y=alt.Y("predicted peak MiB:Q", title="predicted by training_memory (MiB)"),
        color=alt.Color("model:N", title="model"),
        tooltip=["model", "predicted peak MiB", "measured peak MiB"],
    )
)
top = (
    float(memory_table[["predicted peak MiB", "measured peak MiB"]].max().max())
    * 1.05
)
diagonal = (
    alt.Chart(pd.DataFrame({"x": [0, top], "y": [0, top]}))
    .mark_line(color="gray", strokeDash=[4, 4])
    .encode(x="x:Q", y="y:Q")
)
(diagonal + points).properties(
    title=("Training memory of the language model: formula against measurement "
        "(CPU, fp32)"),
    width=420,
    height=320,
)

# %% [markdown]
# The points lie on the diagonal: on a CPU, the formula accounts for what PyTorch allocates,
# to within a few per cent at these sizes (`benchmarks/memory.py` prints a larger grid;
# a unit test holds it to a stated tolerance at two sizes). On a GPU the allocator
# and the kernels differ (cuBLAS workspaces, fused attention), so this page's check says
# nothing about GPU memory: measure it there with `measured_training_memory`. At these small widths the
# activations outweigh the state; the state grows with $d_{model}^2$, the activations with
# $b \cdot n \cdot d_{model}$, so the balance depends on the batch as much as on the model.
#
# Each of the next sections removes one of these terms or shrinks it.

# %% [markdown]
# ## Half precision
#
# A float is a sign, an exponent (the range) and a mantissa (the precision). fp32 has 8
# exponent bits and 23 mantissa bits. The two 16-bit formats split their bits differently:

# %%
formats = pd.DataFrame(
    [
        {
            "dtype": name,
            "exponent bits": exponent,
            "mantissa bits": mantissa,
            "largest": f"{torch.finfo(dtype).max:.3g}",
            "smallest normal": f"{torch.finfo(dtype).tiny:.3g}",
            "relative step (eps)": f"{torch.finfo(dtype).eps:.3g}",
            "decimal digits": round(-math.log10(torch.finfo(dtype).resolution)),
        }
        for name, dtype, exponent, mantissa in [
            ("fp32", torch.float32, 8, 23),
            ("bf16", torch.bfloat16, 8, 7),
            ("fp16", torch.float16, 5, 10),
        ]
    ]
).set_index("dtype")
formats

# %% [markdown]
# **bf16** ("brain float") keeps fp32's range (up to $3.4 \times 10^{38}$) and gives up
# precision: with 7 mantissa bits, 1 + 1/128 is the next number after 1, so about two
# decimal digits survive. **fp16** keeps three times the precision but its range stops at
# 65504, and below $6.1 \times 10^{-5}$ it loses precision (subnormals) until $6 \times
# 10^{-8}$, under which everything is zero.
#
# Neither is good enough for the weights: an update of $10^{-4}$ times a weight vanishes when
# added in bf16 (below half its eps). So *mixed* precision keeps the fp32 weights (the
# "master weights"), the fp32 gradients and fp32 Adam moments, and runs only the matrix
# products in 16 bits, where the time goes. That is what `torch.autocast` does: inside it,
# each op is cast according to a list. Which ops, on this CPU build of PyTorch:

# %%
linear = torch.nn.Linear(8, 8)
x32 = torch.randn(4, 8)
rows = []
for name, dtype in [("bf16", torch.bfloat16), ("fp16", torch.float16)]:
    with torch.autocast("cpu", dtype=dtype):
        y = linear(x32)  # fp32 in, fp32 weights
        rows.append(
            {
                "autocast": name,
                "linear (fp32 input)": y.dtype,
                "softmax of its output": torch.softmax(y, -1).dtype,
                "layer_norm of its output": F.layer_norm(y, (8,)).dtype,
                "layer_norm of an fp32 tensor": F.layer_norm(x32, (8,)).dtype,
                "cross_entropy": F.cross_entropy(
                    y, torch.zeros(4, dtype=torch.long)
                ).dtype,
                "weights after": linear.weight.dtype,
            }
        )
pd.DataFrame(rows).set_index("autocast").astype(str).T

# %% [markdown]
# The matrix product runs in half precision; the loss is computed in fp32; the weights stay
# fp32 (autocast casts a copy for each product). Softmax and LayerNorm take the dtype of
# their input on the CPU (on CUDA they are on autocast's fp32 list), but inside they
# accumulate in fp32. In the book's blocks the residual stream stays fp32 anyway, because
# fp32 plus a half-precision sublayer output is fp32, and the tasks compute their losses from
# `logits.float()`. `training.precision.precision_context` is the one switch: the runner
# puts every training step, validation and test of a run inside it, and no task opens one
# of its own:

# %%
show_source(precision_context)

# %% [markdown]
# ### fp16 needs loss scaling, bf16 does not
#
# Gradients are small: the gradient of a weight is the product of many small factors. Here is
# one that underflows. $\partial (a \cdot b) / \partial a = b$, times an upstream gradient of
# $10^{-4}$: with $a = b = 10^{-4}$ the gradient is $10^{-8}$, below fp16's smallest subnormal
# ($2^{-24} \approx 6 \times 10^{-8}$). In bf16 it is a perfectly ordinary number.

# %%
for dtype in (torch.float16, torch.bfloat16):
    a = torch.full((3,), 1e-4, dtype=dtype, requires_grad=True)
    b = torch.full((3,), 1e-4, dtype=dtype)
    ((a * b).float().sum() * 1e-4).backward()  # an fp32 loss, as under autocast
    print(f"{dtype!s:15} gradient {a.grad[0].item():.3e}  (exact: 1.000e-08)")

# %% [markdown]
# The fp16 gradient is zero: the update is lost, silently. The fix, **loss scaling**, is to
# multiply the loss by a large $S$ before the backward pass, so every gradient is $S$ times
# larger and stays in fp16's range, then divide the fp32 gradients by $S$ before the update:

# %%
scale = 2.0**16
a = torch.full((3,), 1e-4, dtype=torch.float16, requires_grad=True)
b = torch.full((3,), 1e-4, dtype=torch.float16)
((a * b).float().sum() * 1e-4 * scale).backward()
unscaled = a.grad.float() / scale
print(
    f"fp16 gradient of the scaled loss {a.grad[0].item():.4e}; divided by S: "
    f"{unscaled[0]:.4e}"
)
torch.testing.assert_close(unscaled, torch.full((3,), 1e-8), rtol=2e-3, atol=0)

# %% [markdown]
# Too large an $S$ overflows instead (65504 is fp16's largest number). `torch.amp.GradScaler`
# finds the scale as training goes: it starts at $2^{16}$, and when a step's gradients hold
# an inf or NaN it *skips that update* and halves $S$; after 2000 good steps it doubles $S$
# again. A skipped step is part of fp16 training, not an error. With `precision=fp16` the
# `Trainer` scales, unscales before clipping (the clipping threshold is meant for the true
# gradient), lets the scaler step, and saves the scaler's state in every checkpoint so that
# a resumed run continues exactly. One detail of this book: its losses are *sums* over the
# tokens of a batch (so that micro-batches add up, next section), thousands of times the
# mean, so the scaled loss is also divided by the first micro-batch's token count:

# %%
show_source(Trainer.train_step)

# %% [markdown]
# ### Measured on this CPU
#
# Half precision pays when the hardware multiplies 16-bit numbers faster than 32-bit ones.
# CPUs with native bf16 matrix instructions do; older CPUs emulate bf16 and are
# many times *slower* with it. `precision.cpu_bf16_speedup` races a matrix product in both,
# and `precision=auto` picks bf16 only when it wins:

# %% tags=["nbval-ignore-output"]
speedup = cpu_bf16_speedup()
print(
    f"a (256 × 512) @ (512 × 512) product in bf16 is {speedup:.1f}× "
    "as fast as in fp32 here"
)
print(
    "this CPU has fast bf16"
    if speedup > 1
    else "this CPU lacks fast bf16: it emulates it"
)

# %% [markdown]
# Now whole training runs: the byte-level language model of [chapter 14](14_generation_characters.ipynb) (2 layers,
# $d_{model} = 128$, 16 windows of 64 bytes a step) trained the same number of steps in fp32,
# bf16 and fp16, through the runner (`--set precision=...`).

# %% tags=["nbval-ignore-output"]
precision_steps = pick(12, 80)
base_settings = ["d_model=128", "d_ff=512", "h=4", "N=2", "dropout=0.1"]
base_settings += [
    f"steps={precision_steps}",
    f"eval_every={precision_steps}",
    "warmup=20",
]
histories = []
for precision in ("fp32", "bf16", "fp16"):
    result = runner.train(
        "lm",
        WORK / f"precision-{precision}",
        preset="tiny",
        settings=[*base_settings, f"precision={precision}"],
        device="cpu",
        progress=False,
        echo=False,
    )
    histories.append(result.history.assign(precision=precision))
precision_runs = pd.concat(histories)
summary = precision_runs.groupby("precision", sort=False).agg(
    ms_per_step=("seconds", lambda s: 1000 * s.diff().iloc[1:].median()),
    tokens_per_s=("tokens_per_s", "median"),
    final_loss=("loss", "last"),
    val_loss=("val_loss", "last"),
)
summary.round(3)

# %% tags=["nbval-ignore-output"]
viz.line_chart(
    precision_runs,
    "step",
    "loss",
    "precision",
    title=("The same language model trained in fp32, bf16 and fp16 (autocast) on "
        "this CPU"),
    x_title="optimiser step",
    y_title="training loss (nats per byte)",
)

# %% [markdown]
# The three loss curves lie on top of each other: at this scale half precision changes
# nothing the optimiser notices. The step times say how much this CPU gains: the matrix
# products are a large share of a step of a model this small, but not all of it (the
# embedding, the softmax over 256 bytes, Adam's update of the fp32 weights and the Python
# around them do not get faster), so a step gains less than the bare product above. On a
# GPU the gain is larger (tensor cores), and the activations, saved in 2 bytes instead of 4,
# take half the memory.

# %% [markdown]
# ## Gradient accumulation
#
# When a batch does not fit, split it into $k$ micro-batches, run forward and backward on
# each, let the gradients add up in `.grad`, and update once. The book's losses are sums over
# tokens, and the `Trainer` divides by the step's token count once at the end, so $k$
# micro-batches give exactly the update of one batch $k$ times larger, whatever their token
# counts. The scheduler steps once per optimiser step. Checked (plain SGD, so the
# comparison sees the gradient itself):


# %%
def lm_loss(model, batch):
    x, y = batch
    return F.cross_entropy(
        model(x).float().flatten(0, 1), y.flatten(), reduction="sum"
    ), y.numel()


def small_lm():
    torch.manual_seed(0)
    config = DecoderConfig(
        vocab=30, d_model=16, h=2, N=2, max_len=12, d_ff=32, dropout=0.0
    )
    return DecoderLM(config)


def sgd(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return optimizer, make_scheduler(optimizer, "linear", 0.1, warmup=10, total=100)


data = torch.randint(0, 30, (12, 13), generator=torch.Generator().manual_seed(0))
micro = [(data[i : i + 3, :-1], data[i : i + 3, 1:]) for i in range(0, 12, 3)]
whole = (data[:, :-1], data[:, 1:])

one_batch = small_lm()
optimizer, scheduler = sgd(one_batch)
Trainer(one_batch, optimizer, lm_loss, scheduler).train_step([whole])

accumulated = small_lm()
optimizer, scheduler = sgd(accumulated)
trainer = Trainer(accumulated, optimizer, lm_loss, scheduler, accumulate=4)
trainer.train_step(micro)

for p, q in zip(one_batch.parameters(), accumulated.parameters(), strict=True):
    torch.testing.assert_close(q, p)
print("4 micro-batches of 3 windows = 1 batch of 12: equal weights after the step")
print(f"optimiser steps {trainer.step}, scheduler steps {scheduler.last_epoch}")

# %% [markdown]
# :::{admonition} Find the bug
# :class: tip
# {ref}`Exercise 19.2 <ex-19-accumulation-loss>` hands you a loss not divided for
# accumulation to repair, and {ref}`Exercise 19.3 <ex-19-accumulation-scheduler>` the
# original's scheduler, stepped once per micro-batch.
# :::

# %% [markdown]
# Accumulation trades time for memory: the activations are those of one micro-batch, the
# step takes $k$ times as long. The runner's setting is `--set accumulate=k`; with several
# processes the micro-batches are spread over them instead (below).

# %% [markdown]
# ## Activation checkpointing
#
# The other way to shrink the activations: keep fewer of them and compute them again when the
# backward pass needs them. With `activation_checkpointing=true` every layer of the stack
# keeps only its *input*; in the backward pass it runs its forward again
# (`torch.utils.checkpoint`, non-reentrant) and backpropagates through that. The cost is one
# more forward pass (in FLOPs about a third more, as a forward pass is about a third of
# forward plus backward); the activations go from
# $N \cdot a_{layer}$ to $N \cdot b\,n\,d_{model} \cdot 4$ bytes plus one layer's
# $a_{layer}$ at a time.

# %% [markdown]
# ![Four blocks in a row. Forward: each block keeps only its input, x0 to x3, and its activations are crossed out (freed). Backward, from the last block to the first: each block recomputes its forward from its saved input, then computes its gradients.](figures/19_checkpointing.svg)
#
# *Activation checkpointing: keep each block's input, run its forward again in the
# backward pass.*

# %%
show_source(checkpoint_blocks)

# %% [markdown]
# The recomputed forward must be the same computation, dropout included: checkpointing saves
# the random generators' state and replays it, so the dropout masks drawn twice are the same.
# The gradients equal the plain model's (dropout 0.3 here):


# %%
def gradients(checkpointed):
    torch.manual_seed(0)
    config = DecoderConfig(
        vocab=50, d_model=32, h=4, N=3, max_len=16, d_ff=64, dropout=0.3
    )
    model = DecoderLM(config)
    if checkpointed:
        checkpoint_blocks(model, (TransformerBlock,))
    torch.manual_seed(1)
    x = torch.randint(0, 50, (4, 16), generator=torch.Generator().manual_seed(2))
    F.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
    return [p.grad for p in model.parameters()]


for plain, recomputed in zip(gradients(False), gradients(True), strict=True):
    torch.testing.assert_close(recomputed, plain)
print("checkpointed gradients equal the plain ones, dropout included")

# %% [markdown]
# What it saves, measured: the peak bytes of a training step (the allocator's peak, as above)
# and the time of a step, for language models of growing depth ($d_{model} = 128$,
# 8 windows of 128 bytes, dropout 0.1), with and without checkpointing.


# %% tags=["nbval-ignore-output"]
def lm_step_setup(N, checkpointed):
    torch.manual_seed(0)
    config = DecoderConfig(
        vocab=256, d_model=128, h=4, N=N, max_len=128, d_ff=512, dropout=0.1
    )
    model = DecoderLM(config)
    if checkpointed:
        checkpoint_blocks(model, (TransformerBlock,))
    x, y = torch.randint(
        0, 256, (2, 8, 128), generator=torch.Generator().manual_seed(0)
    )

    def loss_fn():
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum")

    return model, loss_fn, torch.optim.Adam(model.parameters(), lr=1e-4)


def step_seconds(model, loss_fn, optimizer, repeats):
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_fn().backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return min(times[1:])


rows = []
for N in pick([2, 4], [2, 4, 6, 8]):
    for checkpointed in (False, True):
        model, loss_fn, optimizer = lm_step_setup(N, checkpointed)
        peak = peak_step_bytes(model, loss_fn, optimizer)
        seconds = step_seconds(model, loss_fn, optimizer, pick(2, 4))
        predicted = training_memory(
            DecoderLM,
            N=N,
            d_model=128,
            d_ff=512,
            h=4,
            vocab=256,
            batch=8,
            length=128,
            activation_checkpointing=checkpointed,
        ).total
        rows.append(
            {
                "layers N": N,
                "checkpointing": "on" if checkpointed else "off",
                "measured peak MiB": peak / MiB,
                "predicted peak MiB": predicted / MiB,
                "ms per step": 1000 * seconds,
            }
        )
checkpoint_runs = pd.DataFrame(rows)
checkpoint_runs.round(1)

# %% tags=["nbval-ignore-output"]
memory_chart = viz.line_chart(
    checkpoint_runs,
    "layers N",
    "measured peak MiB",
    "checkpointing",
    title="Peak memory of a training step",
    x_title="layers N",
    y_title="measured peak (MiB)",
    width=300,
)
time_chart = viz.line_chart(
    checkpoint_runs,
    "layers N",
    "ms per step",
    "checkpointing",
    title="Time of a training step",
    x_title="layers N",
    y_title="ms per step (1 thread)",
    width=300,
)
(memory_chart & time_chart).properties(
    title=("Activation checkpointing: memory against depth, and what it costs in "
        "time")
)

# %% [markdown]
# Without checkpointing the peak grows by one layer's activations per layer; with it, by one
# layer's input (a $b \times n \times d_{model}$ tensor), so the lines part as the model
# deepens, and the formula (`activation_checkpointing=True` in `training_memory`) follows
# both. The price is the extra forward pass, and on this CPU it costs more than its third
# of the FLOPs (the table: 1.5 to 2 times the step time), because a small model's step
# spends much of its time outside the matrix products. In the runner:
# `--set activation_checkpointing=true`; checkpoints and their weights are unchanged.

# %% [markdown]
# ## Many devices
#
# ### Data parallelism
#
# With $W$ devices, the simplest scheme gives each a full copy of the model and a $1/W$ share
# of every batch. After each backward pass the devices average their gradients (an
# all-reduce), so every copy takes the same update. That is PyTorch's
# `DistributedDataParallel` (DDP), and the runner uses it whenever it is started by
# `torchrun`. One subtlety (chapter 8's): the devices' shares hold different numbers of
# tokens, so averaging per-device mean losses is not the mean over the batch;
# `distributed.global_token_loss` normalises by the global token count instead. Then two
# processes on a global batch must train exactly like one process that accumulates the same
# two halves. Both run here on this CPU, the two processes talking through Gloo (PyTorch's
# CPU backend), on the language model's tiny preset without dropout (each process would draw
# its own dropout masks):

# %% [markdown]
# ![Two panels for four devices, ranks 0 to 3. DDP: every rank holds the full weights (4P bytes), gradients (4P) and Adam moments (8P), and a quarter of the batch. FSDP: every rank holds only its quarter of weights, gradients and Adam moments, its quarter of the batch, and one gathered unit at a time.](figures/19_parallelism.svg)
#
# *What each device keeps under data parallelism (DDP) and under fully sharded
# data parallelism (FSDP); P is the number of parameters.*

# %% tags=["nbval-ignore-output"]
parallel_steps = pick(4, 12)
parallel = [
    "dropout=0",
    f"steps={parallel_steps}",
    f"eval_every={parallel_steps}",
    "warmup=4",
]


def torchrun(out, settings):
    """The command line under torchrun, two CPU processes."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node=2", "-m", "annotated_transformer", "lm", "train"]
    command += ["--out", str(out), "--no-progress", "--device", "cpu"]
    command += [arg for setting in settings for arg in ("--set", setting)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    print(
        f"{out.name}: {time.perf_counter() - start:.0f} s (process start-up "
        "included)"
    )
    return pd.read_csv(out / "history.csv")


ddp = torchrun(WORK / "ddp", parallel)
one = runner.train(
    "lm",
    WORK / "one",
    preset="tiny",
    settings=[*parallel, "accumulate=2"],
    device="cpu",
    progress=False,
    echo=False,
)
print((WORK / "ddp" / "train.log").read_text().splitlines()[0].split("  ", 1)[1])


# %% tags=["nbval-ignore-output"]
def compare(history, reference):
    """Largest relative difference of the logged numbers, step by step."""
    return {
        column: float(
            ((history[column] - reference[column]).abs() / reference[column]).max()
        )
        for column in ("loss", "grad_norm", "val_loss")
    }


ddp_difference = compare(ddp, one.history)
assert list(ddp["tokens"]) == list(one.history["tokens"])
assert max(ddp_difference.values()) < 1e-5
ddp_difference

# %% [markdown]
# The same tokens, losses, gradient norms and validation loss at every step, to float
# rounding (the sums are added in another order). Each process still holds the whole model,
# its gradients and Adam's moments: DDP divides the *activations* by $W$, not the state.
#
# ### Sharding: FSDP
#
# Fully Sharded Data Parallelism divides the state too. Each of $W$ processes keeps $1/W$ of
# every weight, gradient and Adam moment. Before a layer runs, the processes all-gather its
# full weights, and free them after; in the backward pass they gather them again, compute
# the layer's gradients and reduce-scatter them, so each process receives the summed
# gradients of its own shard; each process then updates its own shard. The arithmetic of the
# update is DDP's; what changes is that only one layer is whole at a time. In PyTorch it is
# `torch.distributed.fsdp.fully_shard`, applied here to every layer and then to the whole
# model (the embeddings, the final norm and the logits layer form the last unit):

# %%
show_source(wrap)

# %% [markdown]
# A checkpoint must still hold whole tensors, so that one process (or another number of
# them) can load it: before saving, the processes gather the full weights and Adam moments
# onto rank 0 (`torch.distributed.checkpoint.state_dict`, with `full_state_dict=True`),
# which writes the same file a single process would:

# %%
show_source(full_state_dicts)

# %% [markdown]
# FSDP runs on the CPU with Gloo, so the same check can be made here: two processes with
# `--set sharding=fsdp` against the one process above.

# %% tags=["nbval-ignore-output"]
fsdp = torchrun(WORK / "fsdp", [*parallel, "sharding=fsdp"])
fsdp_difference = compare(fsdp, one.history)
assert list(fsdp["tokens"]) == list(one.history["tokens"])
assert max(fsdp_difference.values()) < 1e-5
fsdp_difference

# %% tags=["nbval-ignore-output"]
viz.line_chart(
    pd.concat(
        [
            one.history.assign(run="1 process, accumulate=2"),
            ddp.assign(run="2 processes, DDP"),
            fsdp.assign(run="2 processes, FSDP"),
        ]
    ),
    "step",
    "loss",
    "run",
    title="One process and two (Gloo, CPU): the same training run",
    x_title="optimiser step",
    y_title="training loss (nats per byte)",
    width=440,
)

# %% [markdown]
# Equal again. Three limits of the runner's FSDP, stated rather than hidden: `--resume` of a
# sharded run on several processes is refused with a one-line error (resume it in one
# process, or without sharding); `precision=fp16` with `sharding=fsdp` is refused (the loss
# scaler would look for infs in its own shard only: use bf16); and on two CPU processes of
# a tiny model, sharding is slower than DDP: it sends every layer's weights twice per step
# to save memory that was never short.
#
# What each scheme keeps per device, for the paper's base and big models (shared 37,000-token
# vocabulary) on 8 devices, weights + gradients + Adam only (the activations, which depend on
# the batch, come on top under either scheme; `memory.per_device_bytes` has the arithmetic):

# %%
sharding_table(world_size=8).round(2)

# %% [markdown]
# The base model's 1 GiB of state fits any GPU; FSDP's gain matters for the models that do
# not fit: with 16 bytes a parameter, a 7-billion-parameter model needs 112 GB of state, more
# than one 80 GB GPU, and 14 GB a device when sharded over 8.

# %% [markdown]
# ## torch.compile
#
# `torch.compile` traces the model into a graph and generates fused kernels for it (on the
# CPU, C++ compiled on the spot). Measured on the small language model of the precision
# section (2 layers, $d_{model} = 128$, 16 windows of 64 bytes), forward and backward:


# %% tags=["nbval-ignore-output"]
def train_pass(model, x):
    F.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()


if pick(False, True):
    import torch._inductor.config

    # time a first compilation, uncached (dynamo warns that this turns its
    # profile-guided cache off too, which is the point here)
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled")
    torch._inductor.config.force_disable_caches = True
    torch.manual_seed(0)
    config = DecoderConfig(
        vocab=256, d_model=128, h=4, N=2, max_len=64, d_ff=512, dropout=0.0
    )
    eager = DecoderLM(config)
    tokens = torch.randint(
        0, 256, (16, 64), generator=torch.Generator().manual_seed(0)
    )
    start = time.perf_counter()
    compiled = torch.compile(eager)
    train_pass(compiled, tokens)
    compile_seconds = time.perf_counter() - start
    compile_rows = []
    for name, model in (("eager", eager), ("compiled", compiled)):
        train_pass(model, tokens)
        times = []
        for _ in range(10):
            start = time.perf_counter()
            train_pass(model, tokens)
            times.append(time.perf_counter() - start)
        compile_rows.append(
            {"model": name, "ms per forward+backward": 1000 * min(times)}
        )
    print(
        f"first call of the compiled model (compilation): {compile_seconds:.0f} s"
    )
    display(pd.DataFrame(compile_rows).set_index("model").round(1))
else:
    print("not measured at CI size (compilation alone takes about a minute here)")

# %% [markdown]
# Compiling costs time before the first step (the full-size run's figure above, with the
# compiler's caches off), and here it did not make the steps faster: at this size a step is a few
# dozen large matrix products that the eager mode already hands to oneDNN, and the fusions
# that pay on a GPU (where launching a kernel costs microseconds and memory traffic is the
# bottleneck) gain little on one CPU thread. The package does not compile by default.

# %% [markdown]
# ## How long would the paper's models take?
#
# A rule of thumb from Kaplan et al. (2020): training costs about $6 \cdot P \cdot D$
# floating-point operations for $P$ parameters and $D$ tokens (2 for the forward pass's
# multiply-adds, 4 for the backward pass's two products per layer). In an encoder-decoder
# each token passes through about half the weights (a source token through the encoder, a
# target token through the decoder), so with batches of about 25,000 source and 25,000
# target tokens (the paper's) one step costs about $6 \cdot P \cdot 25{,}000$. The paper
# trained the base model for 100,000 steps (12 hours<!-- source Vaswani et al. 2017, §5.2 --> on 8 P100 GPUs) and the big one for
# 300,000 (3.5 days<!-- source Vaswani et al. 2017, §5.2 -->).
#
# The rate of this CPU is measured on the operation that dominates, a large matrix product,
# on one thread; a GPU's is its published peak (NVIDIA H100 SXM: about 989 TFLOP/s dense
# bf16, 67 TFLOP/s fp32 without tensor cores). Real training reaches a fraction of a peak:
# the large published runs that [PaLM's paper](../book/references.md#chowdhery-et-al-2022)
# compares reached 21 to 46 %<!-- source Chowdhery et al. 2022 (PaLM), Table 3 --> of
# theirs. **These are estimates, not measurements.**


# %% tags=["nbval-ignore-output"]
def matmul_flops(dtype, size=1024, repeats=5):
    a = torch.randn(size, size).to(dtype)
    a @ a
    start = time.perf_counter()
    for _ in range(repeats):
        a @ a
    return 2 * size**3 * repeats / (time.perf_counter() - start)


rates = {
    "this CPU, 1 thread, fp32 (measured)": matmul_flops(torch.float32),
    "this CPU, 1 thread, bf16 (measured)": matmul_flops(torch.bfloat16),
    "one H100 SXM, bf16 peak (published)": 989e12,
    "one H100 SXM, bf16 at 40 % of peak": 0.4 * 989e12,
}
paper = sharding_table()  # its parameter counts
steps = {"base": 100_000, "big": 300_000}
estimate = pd.DataFrame(
    {
        where: {
            model: 6
            * float(paper.loc[model, "parameters"])
            * 25_000
            * steps[model]
            / rate
            / 3600
            for model in steps
        }
        for where, rate in rates.items()
    }
).T
estimate.columns = [f"{model}: hours" for model in estimate.columns]
estimate.insert(0, "TFLOP/s", [rate / 1e12 for rate in rates.values()])
estimate.round(3)

# %% [markdown]
# On one core of a CPU the base model would train for weeks to months, in fp32 or in bf16
# (divide the table's hours by 168 for weeks), and the big one for more than a year. One
# modern GPU, at a realistic fraction of its peak, needs the table's last rows; the paper's 8 P100 GPUs took 12 hours<!-- source Vaswani et al. 2017, §5.2 --> and 3.5
# days<!-- source Vaswani et al. 2017, §5.2 -->, at a few times less peak rate in all. That gap, more than three orders of magnitude
# between one CPU thread and one GPU in bf16, is why the book's chapters train small models,
# and why the runner's presets for the paper's sizes (`--preset base`, `--preset gpu`) are
# meant for a GPU.
#
# ## Summary
#
# | trick | runner setting | memory it removes | cost |
# |---|---|---|---|
# | mixed precision | `precision=bf16` (or `fp16`, with loss scaling) | half of the activations | fp16: skipped steps; bf16: precision |
# | gradient accumulation | `accumulate=k` | activations ÷ k | k× the time per step |
# | activation checkpointing | `activation_checkpointing=true` | all but one layer's activations | one more forward pass |
# | data parallelism | `torchrun --nproc_per_node=W` | activations ÷ W per device | an all-reduce per step |
# | sharding | `... --set sharding=fsdp` | weights, gradients, Adam ÷ W | all-gathers of every layer |
#
# On a GPU the runner's presets for one GPU use bf16 (`precision=auto`), and the commands
# above are the ones to run; this page does not measure them.
#
# You can now
#
# - account for the memory of a training step and predict it;
# - use half precision, gradient accumulation, activation checkpointing, data-parallel and sharded training and `torch.compile` from the runner.
#
# **Next:** the [References](../book/references.md) hold the papers this book builds on, with links.

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/19_going_big.py`: fill them in there, then grade them from the
# repository's root with `make exercises CHAPTER=19` (or
# `python -m annotated_transformer.exercises 19`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-19-adam-bytes)=
# ### Exercise 19.1 · The memory of Adam's training state
#
# Write the chapter's 16 bytes a parameter as a function, and FSDP's share of them on
# one of $W$ devices. The grader measures a real Adam step: the bytes of the weights,
# the gradients and both moments of a small model after one update.
#
# Write `training_state_bytes(n_parameters, world_size, sharded)`; grade with `make
# exercises CHAPTER=19`.
#
# :::{dropdown} Solution
# ```python
# def training_state_bytes(
#     n_parameters: int,
#     world_size: int = 1,
#     sharded: bool = False,
# ) -> int:
#     """Bytes of weights, gradients and Adam's moments on one device, fp32.
#
#     Unsharded (one device, or DDP): 4 + 4 + 8 = 16 bytes a parameter. Sharded
#     (FSDP) over ``world_size`` devices: each keeps ⌈P / W⌉ parameters' worth.
#     """
#     per_device = n_parameters
#     if sharded:
#         per_device = math.ceil(n_parameters / world_size)
#     return 16 * per_device
# ```
# :::

# %% [markdown]
# (ex-19-accumulation-loss)=
# ### Exercise 19.2 · Find the bug: the loss not divided for accumulation
#
# **Find the bug.** Accumulated over $k$ micro-batches, the gradient must equal that of
# the whole batch. The starter's `accumulate_gradients` runs the backward pass on each
# micro-batch's mean loss and lets `.grad` add up, as many tutorials do. Repair it; the
# grader compares with the gradient of one batch made of the same micro-batches. (The
# package's losses are sums, and the `Trainer` divides once by the step's token count.)
#
# Write `accumulate_gradients(model, loss_fn, micro_batches)`; grade with `make
# exercises CHAPTER=19`.
#
# :::{dropdown} Solution
# ```python
# def accumulate_gradients(
#     model: nn.Module,
#     loss_fn: LossFn,
#     micro_batches: Sequence[Any],
# ) -> None:
#     """Leave in ``.grad`` the gradient of the mean loss of all micro-batches.
#
#     The micro-batches are of equal size; ``loss_fn`` returns each one's mean.
#     """
#     model.zero_grad()
#     for batch in micro_batches:
#         loss = loss_fn(model, batch) / len(micro_batches)  # divided: a mean
#         loss.backward()
# ```
# :::

# %% [markdown]
# (ex-19-accumulation-scheduler)=
# ### Exercise 19.3 · Find the bug: the scheduler stepped per micro-batch
#
# **Find the bug.** The Annotated Transformer's training loop steps its learning-rate
# scheduler after every micro-batch, though it updates the weights only once every
# `accum_iter` of them, so under accumulation the warm-up ends that many times too soon.
# The starter's `train_steps` has the same bug; repair it. The grader counts the
# scheduler's steps and compares the weights with two full-batch steps at the schedule's
# rates.
#
# Write `train_steps(model, optimizer, scheduler, micro_batches, accumulate, loss_fn)`;
# grade with `make exercises CHAPTER=19`.
#
# :::{dropdown} Solution
# ```python
# def train_steps(
#     model: nn.Module,
#     optimizer: Any,
#     scheduler: Any,
#     micro_batches: Sequence[Any],
#     accumulate: int,
#     loss_fn: LossFn,
# ) -> None:
#     """An optimiser step and a scheduler step per ``accumulate`` batches."""
#     optimizer.zero_grad()
#     for i, batch in enumerate(micro_batches, 1):
#         (loss_fn(model, batch) / accumulate).backward()
#         if i % accumulate == 0:
#             optimizer.step()
#             optimizer.zero_grad()
#             scheduler.step()
# ```
# :::

# %% [markdown]
# (ex-19-loss-scale)=
# ### Exercise 19.4 · The dynamic loss scale of fp16
#
# Write the rule by which `torch.amp.GradScaler` moves its scale: after a step whose
# gradients overflowed, skip the update and halve the scale; after `growth_interval`
# good steps in a row, double it. The grader runs a real `GradScaler` on a weight whose
# gradient overflows at random steps and compares your scale and skips with its own,
# step by step.
#
# Write `update_scale(scale, good_steps, found_inf, growth_interval)`; grade with `make
# exercises CHAPTER=19`.
#
# :::{dropdown} Solution
# ```python
# def update_scale(
#     scale: float,
#     good_steps: int,
#     found_inf: bool,
#     growth_interval: int = 2000,
# ) -> tuple[float, int, bool]:
#     """The dynamic loss scaler after one step: (scale, good_steps, skipped).
#
#     An overflow skips the update, halves the scale and restarts the count;
#     after ``growth_interval`` good steps in a row, the scale doubles and the
#     count starts again.
#     """
#     if found_inf:
#         return scale / 2, 0, True
#     good_steps += 1
#     if good_steps == growth_interval:
#         return scale * 2, 0, False
#     return scale, good_steps, False
# ```
# :::
