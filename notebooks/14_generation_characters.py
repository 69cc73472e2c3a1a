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
# # 14 · Character-level generation
#
# - **You will learn** the same blocks as a decoder-only language model over bytes: bits per byte, sampling with a temperature, and what the model learned.
# - **It assumes** [chapter 06](06_masks.ipynb), [chapter 07](07_the_full_model.ipynb) and [chapter 13](13_classification_imdb.ipynb).
# - **Time:** about 15 minutes to read; it runs in under a minute from its run's record; training its run took 26.0 minutes on one CPU thread.
#
# :::{admonition} Where the outputs come from
# :class: dropdown
# The stored outputs on this page come from the `cpu` preset, read from its record,
# `results/e6-cpu` (the command that trained it is given with the presets below).
# :::
#
# The translation model of Part IV has two stacks: an encoder reads the source, a decoder
# writes the target one token at a time while looking back at what it wrote and across at the
# source. Drop the encoder and the source attention, and what is left is a **decoder-only**
# model: a stack of self-attention blocks that reads a text and predicts, at every position,
# the next token. That is a language model, the shape of GPT. Trained on enough text it can
# also write: feed it a prompt, draw the next token from its prediction, append it, repeat.
#
# This chapter builds the smallest honest version of that, with the blocks the book already
# has (Bloem's post-norm `TransformerBlock` with a causal mask), over **bytes**: the vocabulary
# is the 256 byte values, so there is no tokenizer at all and any text can be read and
# written. We train it on the start of enwik8, a dump of English Wikipedia in its XML and wiki
# markup, measure it in **bits per byte**, sample from it at two temperatures, and check one
# thing it learned: to close the `[[links]]` it opens.

# %%
import warnings

# tqdm.auto asks for Jupyter widgets; the chapter turns progress bars off anyway.
warnings.filterwarnings("ignore", message="IProgress not found")

# %%
import math
import zlib

import altair as alt
import pandas as pd
import torch

from annotated_transformer.blocks.layers import TransformerBlock
from annotated_transformer.blocks.masks import subsequent_mask
from annotated_transformer.book import explore, viz
from annotated_transformer.book.page import print_log, wrap
from annotated_transformer.book.sizes import pick, runs_dir
from annotated_transformer.book.source import show_source
from annotated_transformer.data.byte_corpora import load_splits
from annotated_transformer.evaluation.sampling import (
    decode,
    encode,
    next_byte_distribution,
    sample,
)
from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM
from annotated_transformer.runner import ensure_run, rows_with
from annotated_transformer.tasks.base import flat_settings
from annotated_transformer.tasks.lm import (
    PRESETS,
    RandomWindows,
    byte_bits,
    window_plan,
    windowed_bits_per_byte,
)

torch.manual_seed(0)
torch.set_printoptions(precision=3, sci_mode=False)

# %% [markdown]
# ## The data: bytes of Wikipedia
#
# enwik8 is the first $10^8$ bytes of a 2006 English Wikipedia dump, the text of the Hutter
# Prize for compression; the usual split is 90M bytes for training, 5M for validation and 5M
# for testing. Here we use only its first $10^6$ bytes (`enwik8_prefix`, sometimes called
# enwik6), split 90/5/5 in the same way, so that a CPU can train on it. **Scores on
# this prefix are not comparable with published enwik8 results**: the model sees 100 times
# less text and is tested on different bytes.
#
# Each split is one long `uint8` tensor.

# %%
splits = load_splits("enwik8_prefix")
for name, data in splits.items():
    print(f"{name:5s} {len(data):>9,} bytes")
print()
print(decode(splits["train"][1_500:1_900]))

# %% [markdown]
# Between the XML tags it is wiki markup: `[[target|text]]` makes a link, `''` italics,
# `{{...}}` a template, `&quot;` an escaped quote. A good model of this text must learn
# English words and also this little grammar of brackets.

# %% [markdown]
# ## The causal mask, again
#
# To predict byte $t+1$ the model may read bytes $1..t$ and nothing later: at training time
# the whole window is fed at once, and without a mask position $t$ could simply look at the
# answer. The look-ahead mask of [chapter 06](06_masks.ipynb) hides the future: query position $i$ may attend to
# key positions $j \le i$ only. For the twelve bytes of `[[Anarchism]`:

# %%
snippet = "[[Anarchism]"
mask = subsequent_mask(len(snippet))[0]  # (12, 12), True = may attend
labels = list(snippet)
viz.heatmap(
    mask.float(), labels, labels, title="Look-ahead mask: who may attend to whom",
    x_title="key: byte attended to", y_title="query: byte predicting the next one",
    value_title="may attend", domain=(0, 1), width=280, height=280,
)

# %% [markdown]
# In a decoder-only model every block applies it: `TransformerBlock(causal=True)` builds this
# mask itself, shifted by the number of positions already in the key/value cache when
# generating (then the new queries sit at the bottom rows and see every cached key).

# %%
show_source(TransformerBlock)

# %% [markdown]
# ## The model
#
# A byte embedding plus a learned position vector, $N$ causal blocks, and a linear layer to
# 256 scores, one per possible next byte. The positions are learned, as in Bloem's `former`
# and GPT, so the model cannot read more than `max_len` bytes at once: its *context*. Its
# sizes are one object, a `DecoderConfig`, checked once where it is made; the model builds
# every part from it.

# %%
show_source(DecoderConfig, DecoderLM)

# %% [markdown]
# The property everything rests on: the scores at position $t$ depend on bytes $1..t$ only.
# Change the bytes after position 8 and the first 8 positions' logits do not move.

# %%
small = DecoderConfig(d_model=32, h=4, N=2, max_len=32, d_ff=128)
model = DecoderLM(small).eval()
x = encode("[[Anarchism]] is a political")  # (1, 28)
changed = x.clone()
changed[0, 8:] = encode("XXXXXXXXXXXXXXXXXXXX")[0]
logits, logits_changed = model(x), model(changed)
torch.testing.assert_close(logits[:, :8], logits_changed[:, :8])
print("logits", tuple(logits.shape))
print(
    "first 8 positions unchanged:",
    torch.equal(logits[:, :8], logits_changed[:, :8]),
)
print(
    "positions 8.. changed:      ",
    not torch.allclose(logits[:, 8:], logits_changed[:, 8:]),
)

# %% [markdown]
# ## Bits per byte
#
# A language model assigns the text $x_1 \dots x_n$ the probability
# $\prod_t p(x_t \mid x_{<t})$. Its quality is the average surprise per byte, in bits:
#
# $$\text{bits per byte} = -\frac{1}{n-1}\sum_{t=2}^{n} \log_2 p(x_t \mid x_{<t}).$$
#
# It is also a compression rate: an arithmetic coder driven by the model would store the text
# in about that many bits per byte. A model that knows nothing, uniform over 256 values, pays
# $\log_2 256 = 8$ bits. It is the *mean*: Bloem's `former` printed the total bits of a batch
# and called it bits per byte (its issue #38).
#
# The model reads at most `context` bytes, so a long text is scored in overlapping windows of
# `context` bytes that advance by `stride`. Each window scores only the bytes no earlier
# window scored, so **every byte after the first is scored exactly once**, and each with at
# least `context − stride + 1` bytes of context (the bytes near the start have fewer, because
# fewer exist). The plan for a 40-byte text, a context of 16 and a stride of 8:

# %%
show_source(window_plan)

# %%
n, context, stride = 40, 16, 8
rows = []
for w, (start, first) in enumerate(window_plan(n, context, stride)):
    for t in range(start + 1, start + context + 1):
        rows.append(
            {
                "window": w,
                "byte": t,
                "role": "scored" if t >= first else "context only",
            }
        )
plan = pd.DataFrame(rows)
assert sorted(plan.query("role == 'scored'")["byte"]) == list(range(1, n))
alt.Chart(
    plan, title="Sliding windows: each byte is scored once"
).mark_rect().encode(
    x=alt.X("byte:O", title="position of the predicted byte"),
    y=alt.Y("window:O", title="window"),
    color=alt.Color("role:N", title="in this window"),
).properties(width=520, height=120)

# %% [markdown]
# `windowed_bits_per_byte` runs those windows in batches and averages with the package's
# `BitsPerByte` meter. Two checks that do not depend on training: a model with constant
# logits scores exactly 8 bits, and a stride of 1 reproduces scoring each byte by hand from
# its own forward pass.

# %%
small = DecoderConfig(d_model=32, h=4, N=2, max_len=16, d_ff=128)
uniform = DecoderLM(small).eval()
torch.nn.init.zeros_(uniform.to_logits.weight)  # the same scores for every byte:
torch.nn.init.zeros_(uniform.to_logits.bias)  # p = 1/256 whatever the context
text = splits["val"][:200]
bpb, scored = windowed_bits_per_byte(uniform, text, context=16, stride=8)
print(f"uniform model: {bpb:.12f} bits per byte over {scored} bytes")

by_hand = []
with torch.no_grad():
    for t in range(1, 60):
        # its last 16 bytes, as the windows give
        prefix = text[max(0, t - 16) : t].long()[None]
        log_p = model(prefix)[0, -1].log_softmax(-1)[int(text[t])]
        by_hand.append(-log_p.item() / math.log(2))
windowed, _ = windowed_bits_per_byte(model, text[:60], context=16, stride=1)
assert abs(windowed - sum(by_hand) / len(by_hand)) < 1e-5
print(
    f"untrained model: {windowed:.4f} bits per byte, by hand "
    f"{sum(by_hand) / len(by_hand):.4f}"
)

# %% [markdown]
# :::{admonition} Find the bug
# :class: tip
# {ref}`Exercise 14.1 <ex-14-bits-per-byte>` hands you total bits reported as bits per
# byte to repair.
# :::

# %% [markdown]
# Two simple yardsticks for the validation text: an order-0 model that knows only how often
# each byte occurs in the training text (its cross-entropy on validation), and zlib's
# general-purpose compressor at its highest level.

# %%
# add-one
train_counts = torch.bincount(splits["train"].long(), minlength=256).double() + 1
# bits of each byte value
unigram_bits = -(train_counts / train_counts.sum()).log2()
val = splits["val"]
order0 = unigram_bits[val[1:].long()].mean().item()
zlib_bpb = 8 * len(zlib.compress(bytes(val.tolist()), 9)) / len(val)
print(f"order-0 (byte frequencies): {order0:.3f} bits per byte")
print(f"zlib -9:                    {zlib_bpb:.3f} bits per byte")

# %% [markdown]
# ## Training
#
# The model is trained to predict every next byte of random windows of the training text:
# the loss is the cross-entropy summed over the window's positions. It is the `lm` task of
# the book's runner ([chapter 10](10_translation_multi30k.ipynb)), which brings Adam, the paper's warm-up-then-decay schedule,
# checkpoints and resuming; the task supplies only the windows and the loss (its
# `RandomWindows`, how a model without memory reads the text):

# %%
show_source(RandomWindows.batches, RandomWindows.loss)

# %% [markdown]
# Its presets are in the table below; the stored outputs come from `cpu` (26.0<!-- record e6-cpu train_minutes --> minutes of training on
# one CPU core; the run below is read from its record, `results/e6-cpu`), with `dataset`
# set to `enwik8_prefix` — the command line would be
# `python -m annotated_transformer lm train --preset cpu --set dataset=enwik8_prefix
# --out runs/e6-cpu`. The rows `norm`, `positions`, `feed_forward` and `bias` are switches of
# today's block (`block=modern`, [chapter 15](15_the_transformer_today.ipynb)); the `2017` block ignores them, and the config
# refuses a changed one.

# %%
preset = pick(ci="tiny", full="cpu")
pd.DataFrame(
    {name: pd.Series(flat_settings(p), dtype=object) for name, p in PRESETS.items()}
)

# %% tags=["nbval-ignore-output"]
settings = ["dataset=enwik8_prefix"]
run = ensure_run(
    "lm",
    preset,
    runs_dir() / f"e6-{preset}",
    settings=settings,
    fresh=preset == "tiny",
)
# the final weights, in eval mode
lm, history, metrics = run.model, run.history, run.metrics
print_log(run.out / "train.log")

# %% [markdown]
# The log's last line is the run's final score, which the runner heads `test:` for every
# task; a language model's is scored on the whole validation split, since this corpus has no
# test split here (the Results page says which split each record's score is on).
#
# The learning curves, in bits per byte (nats / ln 2): the training loss (averaged over 50
# steps; each step sees new random windows) and the validation loss on the first bytes of the
# validation split, measured every few hundred steps.

# %% tags=["nbval-ignore-output"]
train_bpb = (history["loss"] / math.log(2)).rolling(50, min_periods=1).mean()
curves = pd.concat(
    [
        pd.DataFrame(
            {
                "step": history["step"],
                "bits per byte": train_bpb,
                "curve": "train (50-step mean)",
            }
        ),
        rows_with(history, "val_bpb")
        .assign(curve="validation")
        .rename(columns={"val_bpb": "bits per byte"})[
            ["step", "bits per byte", "curve"]
        ],
    ]
)
viz.line_chart(
    curves,
    "step",
    "bits per byte",
    "curve",
    title="Learning curves on enwik8_prefix",
    x_title="optimiser step",
    y_title="bits per byte",
)

# %% [markdown]
# And the number that counts, the whole validation split scored once more (the same function
# that `python -m annotated_transformer lm evaluate` and the run's final test call), next to
# the yardsticks. For the stored `cpu` run it is 2.103<!-- record e6-cpu metrics.validation.bits_per_byte --> bits per byte over the
# 49,999<!-- record e6-cpu metrics.validation.bytes_scored --> predicted bytes of the split, well below zlib's rate for the same text:

# %% tags=["nbval-ignore-output"]
val_bpb, _ = windowed_bits_per_byte(lm, val)
print(
    f"uniform 8.000 | order-0 {order0:.3f} | zlib {zlib_bpb:.3f} | model "
    f"{val_bpb:.3f}"
)

# %% [markdown]
# ## Sampling
#
# To write, the model scores the next byte given the prompt, we draw a byte from that
# distribution, append it and go on. Two knobs shape the distribution. The **temperature**
# $T$ divides the logits before the softmax, $p(x) \propto \exp(\text{logit}(x)/T)$: below 1
# it sharpens the distribution towards the likeliest bytes, above 1 it flattens it. **Top-k**
# keeps only the $k$ likeliest bytes: each of the 200-odd unlikely bytes is rare, but together
# they are drawn often enough to derail a long sample.

# %%
show_source(next_byte_distribution)

# %%
scores = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]])
for T, k in ((1.0, None), (0.5, None), (2.0, None), (1.0, 2)):
    probs = next_byte_distribution(scores, temperature=T, top_k=k)
    print(f"T={T}, top_k={k}: {probs[0].numpy().round(3)}")

# %% [markdown]
# **Explore.** The trained model's distribution over the next byte after a stretch of
# validation text (the 16 likeliest bytes of 256; `␣` is a space, `\n` a new line). Move
# the temperature and choose a top-k cut: at a low temperature the likeliest byte takes
# nearly everything, at a high one the rare bytes gain; top-k sets all but the k likeliest
# to zero. (The chart holds every setting offered, so the controls work on the page without
# a kernel.)

# %% tags=["nbval-ignore-output"]
context = val[: run.task.config.max_len].long()  # as long as the model reads
with torch.no_grad():
    logits = lm(context[None])[0, -1]  # (256,) scores of the next byte
print(repr(decode(context[-60:])), "→ ?")
# each byte as it reads: a character, an escape such as \n, or (not ASCII) its value
names = [
    repr(chr(b))[1:-1].replace(" ", "␣") if b < 128 else f"{b:#x}"
    for b in range(256)
]
explore.distribution_explorer(
    logits,
    names,
    top_ks=(1, 3, 10),
    shown=16,
    title="The next byte's distribution",
    x_title="next byte",
)

# %% [markdown]
# Generation reuses the key/value cache of [chapter 09](09_copy_task.ipynb): the prompt is run once, and each later
# step feeds only the newest byte, whose keys and values join those of the earlier positions
# (the tests check that this gives the same bytes as re-running the whole context). When the
# text outgrows the model's context, the context is cut to its last half and the cache rebuilt.

# %%
show_source(sample)

# %% [markdown]
# Samples from the trained model, seeded, at $T=0.5$ and $T=1.0$:

# %% tags=["nbval-ignore-output"]
prompt = "'''Anarchism''' is "
for T in (0.5, 1.0):
    out = sample(
        lm,
        encode(prompt),
        400,
        temperature=T,
        generator=torch.Generator().manual_seed(0),
    )
    print(f"--- temperature {T} ---")
    print(wrap(decode(out[0])), end="\n\n")

# %% [markdown]
# ## What it learned: closing brackets
#
# Wiki links open with `[[` and close with `]]`, usually a few words later. Closing a link
# needs memory: the model must know that a `[[` is open somewhere in its context. Two
# measurements. First, in the validation text: how surprised is the model by each byte of
# `]]` when it closes a link, compared with the order-0 model, which knows only how common `]`
# is?

# %% tags=["nbval-ignore-output"]
bits = byte_bits(lm, val)  # bits[t - 1]: surprise of byte t given its context
text = bytes(val.tolist())
opens, first_close, second_close = [], [], []  # positions t of those bytes
link_open = False
for t in range(1, len(text) - 1):
    if text[t : t + 2] == b"[[":
        opens.append(t)
        link_open = True
    elif text[t : t + 2] == b"]]" and link_open:
        first_close.append(t)
        second_close.append(t + 1)
        link_open = False
table = pd.DataFrame([
    {"bytes": name, "count": len(where),
     "model (bits)": bits[torch.tensor(where) - 1].mean().item(),
     "order-0 (bits)": unigram_bits[val[torch.tensor(where)].long()].mean().item()}
    for name, where in (("first [ of [[", opens), ("first ] of ]]", first_close),
                        ("second ] of ]]", second_close))
] + [{"bytes": "all bytes", "count": len(bits), "model (bits)": bits.mean().item(),
      "order-0 (bits)": order0}])
table.set_index("bytes").round(3)

# %% [markdown]
# How to read it: the second `]` is the easy one (inside a link, `]` is followed by `]`), so
# a model that learned anything pays far less than the order-0 column for it. The first `]`
# is the real test: to expect it, the model must know that a link is open and that its text
# is about to end; the further its cost falls below the order-0 cost, the better it tracks
# open brackets.
#
# Second, in the model's own writing: sample long texts and count how often a `[[` it opens is
# closed by `]]` before the next `[[`, a line break or the end of the sample, compared with the
# same count in the validation text.


# %%
def closed_links(text: str) -> tuple[int, int]:
    """(links opened, links closed by ]] before the next [[ or line break)."""
    opened = closed = 0
    for piece in text.split("[[")[1:]:
        opened += 1
        closed += "]]" in piece.split("\n")[0]
    return opened, closed


# %% tags=["nbval-ignore-output"]
# (16, 32)
prompts = torch.stack([val[i : i + 32] for i in range(0, 16 * 1_000, 1_000)]).long()
samples = sample(
    lm,
    prompts,
    pick(ci=256, full=1_024),
    temperature=1.0,
    generator=torch.Generator().manual_seed(1),
)
generated = [decode(row[32:]) for row in samples]
opened, closed = map(sum, zip(*(closed_links(g) for g in generated), strict=True))
val_opened, val_closed = closed_links(text.decode("utf-8", errors="replace"))
print(
    f"model's samples: {closed}/{opened} links closed "
    f"({closed / max(opened, 1):.0%})"
)
print(
    f"validation text: {val_closed}/{val_opened} links closed "
    f"({val_closed / val_opened:.0%})"
)

# %% [markdown]
# **Try it: type your own prompt** between the quotes and run the cell: the published model
# continues it with 300 sampled bytes (temperature 0.8, top-k 40; change them in the call).
# It needs Jupyter (`make lab`, then this chapter's notebook, `14_generation_characters.ipynb`,
# or its `.py`) and runs on its own: it loads `results/e6-cpu` itself. A bad
# setting (a temperature of 0, say) gets one line saying so. Saving the chapter keeps this
# cell as it is stored.
#
# All the model has read is the first megabyte of enwik8: Wikipedia articles in their
# XML and wiki markup. So it answers in that markup: a prompt like `[[Category:` gets more
# category links, and plain prose soon drifts into `[[links]]` and `''italics''`. Every byte
# is one it knows, so no input is unknown to it; but a question, a dialogue or a recipe is
# still continued as a Wikipedia page would continue, because that is the only text it has
# seen.

# %% tags=["nbval-ignore-output", "try-it"]
from annotated_transformer.book import try_it

PROMPT = "The history of the city"  # ← type here
try_it.continue_text(PROMPT, "e6-cpu", length=300, temperature=0.8, top_k=40)

# %% [markdown]
# ## Running it yourself
#
# ```bash
# # Tiny Shakespeare (the default dataset), on a laptop CPU
# python -m annotated_transformer lm train --preset cpu --out runs/ts-cpu
# python -m annotated_transformer lm evaluate \
#     --checkpoint runs/ts-cpu/final.pt
# python -m annotated_transformer lm predict --checkpoint runs/ts-cpu/final.pt \
#     --temperature 0.8 --top-k 40 --length 500 --seed 0 "ROMEO:"
# # The full enwik8 on one GPU (the gpu preset trains in bf16), scored on its
# # test split
# python -m annotated_transformer lm train --preset gpu --out runs/e8
# python -m annotated_transformer lm evaluate \
#     --checkpoint runs/e8/final.pt --split test
# ```
#
# Training stops and resumes (`--resume`) from an atomic checkpoint; `history.csv` holds the
# learning curve, `train.log` what was printed and `metrics.json` the validation bits per
# byte.

# %% [markdown]
# ## Summary
#
# You can now
#
# - train a byte-level language model and measure it in bits per byte;
# - sample from it with a temperature and top-k.
#
# **Next:** [chapter 15 · The Transformer today](15_the_transformer_today.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/14_generation_characters.py`: fill them in there, then grade them from the
# repository's root with `make exercises CHAPTER=14` (or
# `python -m annotated_transformer.exercises 14`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-14-bits-per-byte)=
# ### Exercise 14.1 · Find the bug: total bits reported as bits per byte
#
# **Find the bug.** Bloem's `former` printed the total bits of a batch and called it
# bits per byte (its issue #38). The starter's `bits_per_byte` does the same. Repair it:
# the mean of $-\log_2 p$ over the predicted bytes. The grader checks that a model that
# knows nothing scores 8 and that scoring the same text twice leaves the figure
# unchanged.
#
# Write `bits_per_byte(logits, targets)`; grade with `make exercises CHAPTER=14`.
#
# :::{dropdown} Solution
# ```python
# def bits_per_byte(logits: Tensor, targets: Tensor) -> float:
#     """Mean bits per predicted byte: logits (..., 256), targets (...)."""
#     flat = logits.reshape(-1, logits.size(-1)).double()
#     nats = F.cross_entropy(flat, targets.reshape(-1), reduction="sum").item()
#     return nats / targets.numel() / math.log(2)
# ```
# :::

# %% [markdown]
# (ex-14-temperature)=
# ### Exercise 14.2 · A temperature for a target entropy
#
# A temperature is hard to choose by its value: $T = 0.8$ sharpens one distribution a
# lot and another hardly at all. Choose it by its effect instead: find the $T$ at which
# the next-byte distribution $\mathrm{softmax}(\text{logits}/T)$ has a given entropy in
# bits. The grader computes the entropy at your temperature for four targets.
#
# Write `temperature_for_entropy(logits, bits)`; grade with `make exercises CHAPTER=14`.
#
# :::{dropdown} Solution
# ```python
# def temperature_for_entropy(logits: Tensor, bits: float) -> float:
#     """The temperature T at which softmax(logits / T) has ``bits`` of entropy.
#
#     logits: (V,), not all equal; 0 < bits < log₂ V. The entropy grows with T,
#     from 0 bits (T → 0, all mass on the largest logit) to log₂ V (T → ∞,
#     uniform), so bisect on log T.
#     """
#
#     def entropy(t: float) -> float:
#         p = (logits.double() / t).softmax(-1)
#         return -(p * p.clamp_min(1e-300).log2()).sum().item()
#
#     low, high = 1e-3, 1e3
#     for _ in range(100):
#         middle = math.sqrt(low * high)  # bisect in log space: T spans decades
#         if entropy(middle) < bits:
#             low = middle
#         else:
#             high = middle
#     return math.sqrt(low * high)
# ```
# :::

# %% [markdown]
# (ex-14-order-0)=
# ### Exercise 14.3 · The order-0 yardstick
#
# Write the chapter's first yardstick as a function: the bits per byte of a text under a
# model that knows only how often each of the 256 byte values occurs in the training
# text, with one added to every count so that no byte is impossible. Score the bytes
# after the first, as the chapter does.
#
# Write `unigram_bits_per_byte(train, text)`; grade with `make exercises CHAPTER=14`.
#
# :::{dropdown} Solution
# ```python
# def unigram_bits_per_byte(train: bytes, text: bytes) -> float:
#     """Bits per byte of ``text[1:]`` by add-one byte counts of ``train``."""
#     seen = torch.tensor(list(train), dtype=torch.long)
#     counts = torch.bincount(seen, minlength=256).double() + 1  # add one
#     bits = -(counts / counts.sum()).log2()  # (256,): each byte value's cost
#     scored = torch.tensor(list(text[1:]), dtype=torch.long)
#     return bits[scored].mean().item()
# ```
# :::

# %% [markdown]
# (ex-14-leak-test)=
# ### Exercise 14.4 · The leak test
#
# Prove the causal property from outside the model: for a model that maps bytes $(1, n)$
# to logits $(1, n, 256)$, find for every pair $(i, j)$ whether changing byte $j$
# changes the logits at position $i$. A language model may read only the past, so the
# answer must be the lower triangle. The grader runs your test on `DecoderLM`, on the
# same model with its masks switched off, and on a model that peeks one byte ahead.
#
# Write `influence(model, x)`; grade with `make exercises CHAPTER=14`.
#
# :::{dropdown} Solution
# ```python
# def influence(model: nn.Module, x: Tensor) -> Tensor:
#     """The leak test of a language model on bytes ``x`` (1, n).
#
#     returns bool (n, n): out[i, j] is True when changing byte j changes the
#     logits at position i
#     """
#     n = x.size(1)
#     out = torch.zeros(n, n, dtype=torch.bool)
#     with torch.no_grad():
#         reference = model(x)[0]  # (n, vocab)
#         for j in range(n):
#             changed = x.clone()
#             changed[0, j] = (changed[0, j] + 1) % 256
#             out[:, j] = (model(changed)[0] != reference).any(-1)
#     return out
# ```
# :::
