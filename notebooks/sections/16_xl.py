# %% [markdown]
# ## Transformer-XL: context beyond the window
#
# Chapter 14's language model reads windows of `max_len` bytes. Whatever came before the window
# is gone: the first byte of every window is predicted from nothing, and a model trained on
# 128-byte windows cannot use byte 129 back however useful it would be. Evaluating with
# overlapping windows (chapter 14's `stride`) gives every byte *some* context, at the price of
# reading most bytes twice, and still never more than `max_len` of it.
#
# Transformer-XL (Dai et al. 2019) keeps the text flowing through the model instead:
#
# * **Segment-level recurrence.** The text is read in consecutive segments. While a segment is
#   processed, every layer keeps the hidden states that entered it, and the next segment's
#   queries attend to `[memory; current]`. The memory is a constant (no gradient flows into
#   it), so training still back-propagates through one segment, at the cost of one segment.
#   Information moves up one layer per segment, so N layers with a memory of `mem_len` states
#   can reach about N · `mem_len` bytes back.
# * **Relative positions.** Chapter 04 gives position 0 the same vector in every segment, so the
#   memory and the current segment would both hold a "position 0". Transformer-XL drops the
#   position vectors from the input and lets each attention score depend on the *distance*
#   between query and key.
#
# The package has both (`relative.py`, `segments.py`) and the `lm` task trains it with
# `--set block=xl`:
#
# ```
# python -m annotated_transformer lm train --preset cpu --out runs/xl-cpu \
#     --set dataset=enwik8_prefix --set block=xl --set steps=1400 --set eval_every=350
# python -m annotated_transformer lm evaluate --checkpoint runs/xl-cpu/final.pt --mem-len 512
# ```

# %%
import math

from annotated_transformer.positional import sinusoids
from annotated_transformer.relative import (
    RelativeMultiHeadAttention,
    TransformerXLLM,
    rel_shift,
    relative_positions,
)
from annotated_transformer.segments import evaluate_bits_per_byte, segment_loss, stream_segments

# %% [markdown]
# ### Relative attention, one term at a time
#
# Write the input at position $i$ as its content $E_i$ plus its absolute position vector $U_i$.
# The score of chapter 02 between query $i$ and key $j$ is then
# $(E_i + U_i)^\top W_q^\top W_k (E_j + U_j)$, which expands into four terms:
#
# $$A^{\mathrm{abs}}_{ij} = \underbrace{E_i^\top W_q^\top W_k E_j}_{(a)\ \text{content}}
# + \underbrace{E_i^\top W_q^\top W_k U_j}_{(b)}
# + \underbrace{U_i^\top W_q^\top W_k E_j}_{(c)}
# + \underbrace{U_i^\top W_q^\top W_k U_j}_{(d)}.$$
#
# Transformer-XL rewrites the three terms that involve positions (§3.3):
#
# 1. In (b) and (d) the key's absolute position $U_j$ becomes the sinusoid of the distance,
#    $R_{i-j}$ (chapter 04's table, read at $i - j$), with its own projection $W_R$: keys are
#    placed relative to the query.
# 2. In (c) and (d) the query's position $U_i^\top W_q^\top$ would now multiply something that
#    does not depend on $i$'s position at all; it becomes a learned vector per head: $u$ in (c),
#    a preference for some keys' *content* whatever the query, and $v$ in (d), a preference for
#    some *distances* whatever the query.
#
# With $q_i = W_q E_i$ and $k_j = W_k E_j$ the score is
#
# $$A_{ij} = q_i^\top k_j + q_i^\top W_R R_{i-j} + u^\top k_j + v^\top W_R R_{i-j}
# = \underbrace{(q_i + u)^\top k_j}_{\text{content}}
# + \underbrace{(q_i + v)^\top W_R R_{i-j}}_{\text{position}},$$
#
# scaled by $1/\sqrt{d_k}$, masked (a query sees the memory and the current segment up to
# itself) and soft-maxed as usual. With a memory of $m$ states, query $i$ of the segment sits
# at position $m + i$ of the keys, so the distance to key $j$ is $m + i - j$.
#
# The most literal implementation is a double loop over $(i, j)$, one head at a time. It is far
# too slow to train with, and it is the reference the fast version must reproduce.

# %%
def naive_relative_attention(att, x, memory):
    """A_ij = (q_i + u)·k_j + (q_i + v)·W_R R_{m+i−j}, one head, query and key at a time."""
    context = torch.cat([memory, x], dim=1)
    m, klen, d_k = memory.size(1), context.size(1), att.d_k
    out = torch.zeros(x.size(0), x.size(1), att.d_model, dtype=x.dtype)
    for b in range(x.size(0)):
        for head in range(att.h):
            rows = slice(head * d_k, (head + 1) * d_k)
            w_q, w_k, w_v, w_r = (w.weight[rows] for w in (att.w_q, att.w_k, att.w_v, att.w_r))
            for i in range(x.size(1)):
                q = w_q @ x[b, i]
                scores = torch.full((klen,), -math.inf, dtype=x.dtype)
                for j in range(m + i + 1):  # causal: the memory and the segment up to i
                    r = sinusoids(m + i + 1, att.d_model)[m + i - j].to(x.dtype)  # R_{m+i−j}
                    content = (q + att.u[head]) @ (w_k @ context[b, j])
                    position = (q + att.v[head]) @ (w_r @ r)
                    scores[j] = (content + position) / math.sqrt(d_k)
                values = torch.stack([w_v @ context[b, j] for j in range(klen)])
                out[b, i, rows] = scores.softmax(0) @ values
    return att.w_o(out)


att = RelativeMultiHeadAttention(d_model=8, h=2).double().eval()
with torch.no_grad():  # u and v start near 0: make them large enough to matter in the check
    att.u.normal_()
    att.v.normal_()
x, memory = torch.randn(2, 4, 8, dtype=torch.float64), torch.randn(2, 3, 8, dtype=torch.float64)
with torch.no_grad():
    torch.testing.assert_close(att(x, memory), naive_relative_attention(att, x, memory))
print("RelativeMultiHeadAttention == the double loop over (i, j), memory of 3, segment of 4")

# %% [markdown]
# ### The relative shift, on a tiny matrix
#
# The fast version cannot afford a `(len, klen, d)` tensor of $W_R R_{i-j}$ vectors, one per
# pair. The position term has only `klen` different vectors, one per distance, so one matrix
# product scores every query against every *distance*: column $t$ holds distance
# $\mathrm{klen} - 1 - t$ (`relative_positions` lists the distances in descending order). What
# we need is a matrix indexed by *key*: entry $(i, j)$ must hold distance $m + i - j$, which sits
# in column $j + \mathrm{len} - 1 - i$. Every row must slide left by a different amount,
# $\mathrm{len} - 1 - i$: the top row the most, the bottom row not at all.
#
# `rel_shift` does it with one pad and two reshapes. Take a segment of 3 queries after a memory
# of 2 (klen = 5) and fill the score of query $i$ against distance $d$ with the number $10i + d$,
# so that every entry says where it came from.

# %%
qlen, m = 3, 2
klen = m + qlen
distance = torch.arange(klen - 1, -1, -1)  # column t holds distance klen − 1 − t
by_distance = 10 * torch.arange(qlen)[:, None] + distance[None, :]  # (qlen, klen)
print("scores by distance (row i: 10·i + d):\n", by_distance)
padded = torch.nn.functional.pad(by_distance, (1, 0))  # a zero column in front: (qlen, klen + 1)
print("1. pad a zero column:\n", padded)
as_tall = padded.reshape(klen + 1, qlen)
print("2. read the same numbers as (klen + 1, qlen), then drop the first row:\n", as_tall)
shifted = as_tall[1:].reshape(qlen, klen)
print("3. read the rest as (qlen, klen): row i has moved qlen − 1 − i places left\n", shifted)

# %% [markdown]
# Dropping the first `qlen` numbers and reading rows of `klen` instead of `klen + 1` moves row
# $i$ left by exactly $\mathrm{qlen} - 1 - i$ places. Entry $(i, j)$ now holds $10i + (m + i - j)$
# wherever key $j$ is visible ($j \le m + i$); the entries above that, the future keys, are
# leftovers that the causal mask hides. The package's `rel_shift` agrees, and so does the
# explicit index:

# %%
visible = torch.arange(klen)[None, :] <= m + torch.arange(qlen)[:, None]  # (qlen, klen)
wanted = 10 * torch.arange(qlen)[:, None] + (m + torch.arange(qlen)[:, None] - torch.arange(klen))
assert torch.equal(shifted[visible], wanted[visible])
assert torch.equal(rel_shift(by_distance)[visible], wanted[visible])
print("distance of each visible (query, key) pair after the shift:\n",
      (shifted - 10 * torch.arange(qlen)[:, None]).masked_fill(~visible, -1))

# %%
show_source(relative_positions, rel_shift, RelativeMultiHeadAttention.forward)

# %% [markdown]
# ### The memory, and what it does to training
#
# `TransformerXLLM` runs the blocks over a segment, giving each block the memory of the
# previous segment and returning, per block, the last `mem_len` of [memory; this segment's
# input to the block], detached. Evaluation may keep more states than training did
# (`mem_len=` in `forward`): the sinusoids of the position term exist for any distance.

# %%
show_source(TransformerXLLM.forward)

# %% [markdown]
# The memory is only the right history if the next batch continues the same text. A vanilla
# model trains on windows drawn anywhere; Transformer-XL's batches are `batch_size` parallel
# *streams*: the training bytes cut into `batch_size` contiguous pieces, and batch $t$ holds the
# $t$-th segment of each, so row $b$ of batch $t+1$ continues row $b$ of batch $t$. Each epoch
# starts every stream at a seeded offset (the segment boundaries move) and without memory.
#
# The memory is training state, like Adam's moments: it was made by the weights of the
# previous step, which no longer exist, so it cannot be recomputed after a crash. The task hands
# it to the runner (`Task.stream`), which saves it in `last.pt`; a killed run resumes with the
# memory it had, to the same losses as an uninterrupted run (`tests/test_xl_lm.py`).

# %%
show_source(stream_segments, segment_loss)

# %% [markdown]
# A small check of the streams: three streams over the bytes 0..99, segments of 4. Row 0 of
# the second batch continues row 0 of the first.

# %%
toy = torch.arange(100, dtype=torch.uint8)
first, second = stream_segments(toy, batch_size=3, seg_len=4)[:2]
print("batch 0 inputs:\n", first.x, "\nbatch 1 inputs:\n", second.x)
assert torch.equal(first.y[:, -1], second.x[:, 0])

# %% [markdown]
# Evaluation reads the whole validation split as one stream of segments, each with up to
# `mem_len` remembered states per layer; every byte after the first is scored once, as in
# chapter 14's bits per byte.

# %%
show_source(evaluate_bits_per_byte)

# %% [markdown]
# ### Memory length against bits per byte
#
# The experiment: on the enwik8 prefix, the `lm --preset cpu` shape (N = 4, d_model 128, 4
# heads, d_ff 512), once as chapter 14's 2017 block on 128-byte windows and once as
# Transformer-XL on 128-byte segments with a training memory of 128 (923,904 parameters against
# 875,264: each layer's $W_R$, $u$ and $v$ replace the position table). The relative attention
# has no fused kernel here and reads twice as many keys: on one idle CPU thread a
# Transformer-XL step took 0.61 s of CPU time against 0.29 s for a vanilla step (batch 32,
# measured once). So the XL model trains 1,400 steps against the vanilla model's 3,000: about
# the same compute (1,400 × 0.61 s ≈ 850 s, 3,000 × 0.29 s ≈ 870 s); the table also compares
# them at equal steps. The "train seconds" are wall-clock time and grow with whatever else the
# machine is running.
#
# ```
# python -m annotated_transformer lm train --preset cpu --out runs/xl-vanilla-cpu \
#     --set dataset=enwik8_prefix
# python -m annotated_transformer lm train --preset cpu --out runs/xl-cpu \
#     --set dataset=enwik8_prefix --set block=xl --set steps=1400 --set eval_every=350
# ```

# %%
PRESET = pick("tiny", "cpu")
xl_steps = pick([], ["steps=1400", "eval_every=350"])
xl = ensure_run("lm", PRESET, runs_dir() / f"xl-{PRESET}",
                settings=["dataset=enwik8_prefix", "block=xl", *xl_steps])
vanilla = ensure_run("lm", PRESET, runs_dir() / f"xl-vanilla-{PRESET}",
                     settings=["dataset=enwik8_prefix"])
seg_len = xl.task.config.max_len
val_bytes = pick(20_000, None)  # CI: the first 20,000 validation bytes; full size: all of them

# %% [markdown]
# Now the same trained XL model, evaluated with no memory, and with a memory of 1, 2 and 4
# training segments. Without memory each segment starts from scratch, like vanilla windows
# without overlap; a longer memory than training used is allowed because every score depends
# on distances through sinusoids, which exist for any distance.

# %%
rows = []
for factor in (0, 1, 2, 4):
    result = xl.task.bits_per_byte(xl.model, "val", val_bytes, mem_len=factor * seg_len)
    rows.append({"memory (segments)": factor, "memory (bytes)": factor * seg_len,
                 "bits per byte": result["bits_per_byte"]})
sweep = pd.DataFrame(rows)
baselines = pd.DataFrame([
    {"vanilla protocol": f"windows of {seg_len}, stride {stride}",
     "bits per byte": vanilla.task.bits_per_byte(vanilla.model, "val", val_bytes,
                                                 stride=stride)["bits_per_byte"]}
    for stride in (seg_len, seg_len // 2)
])
sweep

# %%
title = f"Transformer-XL ({xl.metrics['steps']} steps): bits per byte against the memory"
xl_line = alt.Chart(sweep, title=title).mark_line(point=True).encode(
    x=alt.X("memory (bytes):Q", title="memory per layer at evaluation (bytes)"),
    y=alt.Y("bits per byte:Q", title="bits per byte (validation)", scale=alt.Scale(zero=False)),
    tooltip=["memory (segments)", alt.Tooltip("bits per byte", format=".4f")],
)
vanilla_rules = alt.Chart(baselines).mark_rule(strokeDash=[4, 4]).encode(
    y="bits per byte:Q",
    color=alt.Color("vanilla protocol:N", title=f"vanilla, {vanilla.metrics['steps']} steps"),
    tooltip=["vanilla protocol", alt.Tooltip("bits per byte", format=".4f")],
)
(xl_line + vanilla_rules).properties(width=500, height=280)

# %% [markdown]
# And the two runs side by side: the same width and depth, first each at the end of its
# training, then both at the XL run's last step on the validation bytes that training
# validated on (the first `eval_bytes`: the whole split at full size), where chapter 14's
# validation (consecutive windows, no overlap) is Transformer-XL's evaluation without memory,
# except that it leaves out the last, partial window.

# %%
def summary(name, run, bpb, protocol, step=None):
    history = run.history.set_index("step")
    step = step or run.metrics["steps"]
    return {"model": name, "parameters": run.metrics["parameters"], "steps": step,
            "train seconds": history.loc[step, "seconds"], "evaluation": protocol,
            "bits per byte": bpb}


step = xl.metrics["steps"]
val_head = xl.task.splits["val"][: xl.task.config.eval_bytes + 1]
xl_no_memory, n_head = evaluate_bits_per_byte(xl.model, val_head, seg_len, mem_len=0)
table = pd.DataFrame([
    *(summary("vanilla (2017 block)", vanilla, b["bits per byte"], b["vanilla protocol"])
      for b in baselines.to_dict("records")),
    *(summary("Transformer-XL", xl, r["bits per byte"], f"memory {r['memory (bytes)']} bytes")
      for r in rows),
    summary("vanilla (2017 block)", vanilla, rows_with(vanilla.history, "val_bpb").set_index(
        "step").loc[step, "val_bpb"], f"windows of {seg_len}, no overlap", step),
    summary("Transformer-XL", xl, xl_no_memory, f"{n_head:,} bytes, memory 0"),
    summary("Transformer-XL", xl, xl.history.iloc[-1]["val_bpb"],
            f"{n_head:,} bytes, memory {xl.task.mem_len} bytes"),
])
table.style.format({"bits per byte": "{:.3f}", "train seconds": "{:.0f}"}).hide(axis="index")

# %% [markdown]
# What the full-size runs showed (`AT_SIZE` unset; the tiny CI runs are too short to read
# anything into):
#
# * **The memory is worth most of the gain, and one segment of it is enough here.** The same
#   weights score 2.319 bits per byte without memory and 2.148 with one segment (128 bytes) of
#   it. Two and four segments give 2.146 and 2.149: a model trained with 128 states of memory
#   uses longer memories without harm (the sinusoids extend to the new distances) but, after
#   1,000 steps on a million bytes, gains nothing from them.
# * **Per step, Transformer-XL learns faster.** At 1,000 steps and on the same bytes, the
#   vanilla model's windows score 2.459, Transformer-XL without memory 2.319 and with it 2.148.
# * **Per unit of compute it is not yet ahead.** After 3,000 steps the vanilla model scores 2.173
#   with windows that do not overlap and 2.114 with the stride-64 protocol, which reads every
#   byte twice; Transformer-XL, at about 70% of that CPU time, lands between the two (2.148) and
#   reads each byte once. Its "train seconds" (1,787 s against 959 s) are wall-clock time on a
#   machine shared with other jobs and overstate its cost; the CPU-time measure above is the
#   fair one. A longer run, a fused relative-attention kernel, or a longer text, where the
#   distant context matters more, are the experiments that would settle the question.
