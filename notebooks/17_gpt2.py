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
# # 17 · GPT-2's recipe
#
# - **You will learn** GPT-2's decoder-only recipe (pre-norm, GELU, tied embeddings, a scaled initialisation, byte-level BPE) measured against chapter 14's byte model, and how to load the published GPT-2 into the book's own classes.
# - **It assumes** [chapter 12](12_tricks_from_the_paper.ipynb), [chapter 14](14_generation_characters.ipynb) and [chapter 15](15_the_transformer_today.ipynb).
# - **Time:** about 20 minutes to read; it runs in under a minute from its runs' records; training its 2 runs took 25.5–27.9 minutes each on one CPU thread.
#
# :::{admonition} Where the outputs come from
# :class: dropdown
# The stored outputs on this page come from the `cpu`-size runs named in each section,
# trained once from the repository root (the commands are printed with the results; the
# Time line above says what they took).
# :::
#
# [Chapter 16](16_bert.ipynb) kept the encoder and pretrained it. GPT-2
# ([Radford et al. 2019](../book/references.md#radford-et-al-2019)) kept the decoder: a
# decoder-only model trained to predict the next token, the same kind of model as
# [chapter 14](14_generation_characters.ipynb)'s, made large. This chapter has two sections:
# GPT-2's recipe built from the package's pieces and trained on this book's text against
# chapter 14's byte model, and the published GPT-2 loaded into the book's own classes.

# %%
import math
import textwrap

import numpy as np
import pandas as pd
import torch

from annotated_transformer.book import viz
from annotated_transformer.book.sizes import pick, runs_dir
from annotated_transformer.book.source import show_source
from annotated_transformer.runner import ensure_run, rows_with

torch.manual_seed(0)
torch.set_num_threads(1)

# %% [markdown]
# ## GPT-2's decoder-only recipe
#
# [Chapter 14](14_generation_characters.ipynb) trained a decoder-only model on bytes: the 2017 block, a causal mask, learned
# positions. GPT-2 (Radford et al. 2019) is the same kind of model and the same objective,
# next-token prediction, made large; on the way it settled a recipe that most decoder-only
# models kept for years:
#
# | [chapter 14](14_generation_characters.ipynb) | GPT-2 |
# | --- | --- |
# | post-norm `LayerNorm(x + f(x))` | pre-norm `x + f(LayerNorm(x))`, and a final LayerNorm |
# | ReLU feed-forward | GELU, x·Φ(x) |
# | a separate output matrix | the output tied to the token embeddings |
# | PyTorch's default initialisation | N(0, 0.02²), residual projections scaled by 1/√(2N) |
# | 256 bytes | byte-level BPE |
#
# Pre-norm never normalises the residual stream itself, so gradients reach the lowest layers
# unchanged; GELU is a smooth ReLU that still passes a gradient for small negative inputs;
# tying means one table to learn (with 50k tokens, a large saving); the scaled
# initialisation keeps the stream's variance flat with depth; BPE gives fewer, longer tokens
# and still no unknown input.
#
# The first row is already one of [chapter 15](15_the_transformer_today.ipynb)'s switches (`norm="layer"` on the pre-norm
# block); the rest is one small module, `models/gpt2.py`. Tokens come from a byte-level version of
# [chapter 12](12_tricks_from_the_paper.ipynb)'s BPE. Every piece is a `--set` option of the `lm` task:
#
# ```
# python -m annotated_transformer lm train --preset cpu --out runs/ts-gpt2-cpu \
#     --set block=gpt2 --set tokens=bpe --set bpe_merges=512 --set steps=2480
# ```

# %%
from torch import nn

from annotated_transformer.blocks.feed_forward import GELUFeedForward
from annotated_transformer.data.byte_bpe import ByteBPE
from annotated_transformer.data.byte_corpora import load_splits
from annotated_transformer.models.encoder_decoder import count_parameters
from annotated_transformer.models.gpt2 import (
    GPT2LM,
    GPTConfig,
    gpt2_init_,
    residual_projections,
)
from annotated_transformer.tasks.lm import (
    windowed_bits_per_byte,
    windowed_token_bits_per_byte,
)

# %% [markdown]
# ### The block: chapter 15's pre-norm switches, GELU, tying, and the 1/√(2N) init
#
# GELU weighs its input by the probability that a standard normal variable lies below it,
# $\mathrm{GELU}(x) = x\,\Phi(x)$; GPT-2's code uses the tanh approximation. The model class
# builds [chapter 15](15_the_transformer_today.ipynb)'s `ModernDecoderLM` from one `ModernConfig` with `norm="layer",
# positions="learned", feed_forward="gelu", bias=True` and one key/value head per query head,
# ties the output to the embedding table, and initialises: its constructor adds only
# `gpt2_init_` (its loader, `from_pretrained`, comes with the published GPT-2 below).

# %%
show_source(GELUFeedForward, gpt2_init_, GPT2LM.__init__)

# %% [markdown]
# Why 1/√(2N)? Each block *adds* two outputs to the residual stream, attention's and the
# feed-forward's, so after N blocks the stream is the embedding plus 2N terms. If each term
# has variance σ² at initialisation, the stream's variance grows like 2Nσ²; scaling the weights
# of the last layer of every branch by 1/√(2N) divides each term's variance by 2N, so that
# the 2N terms together add about σ², however deep the stack. We check the standard deviations of a fresh 12-block
# model against the formula, and the variance of the stream after each block against the same
# model with every projection at 0.02.

# %%
torch.manual_seed(0)
gpt = GPT2LM(GPTConfig(vocab=768, d_model=256, h=4, N=12, max_len=64))
stds = pd.DataFrame(
    {
        "layer": [
            "W^Q, block 0",
            "W₁, block 0",
            "W^O, block 0",
            "W₂, block 11",
            "positions",
        ],
        "measured std": [
            gpt.blocks[0].attention.w_q.weight.std().item(),
            gpt.blocks[0].feed_forward.w_1.weight.std().item(),
            gpt.blocks[0].attention.w_o.weight.std().item(),
            gpt.blocks[11].feed_forward.w_2.weight.std().item(),
            gpt.position.embedding.weight.std().item(),
        ],
        "formula": [0.02, 0.02, 0.02 / math.sqrt(24), 0.02 / math.sqrt(24), 0.01],
    }
)
assert np.allclose(stds["measured std"], stds["formula"], rtol=0.02)
assert gpt.to_logits.weight is gpt.embed.weight  # one Parameter, counted once
stds


# %%
def stream_variance(model: GPT2LM, x: torch.Tensor) -> list[float]:
    """Variance of the residual stream after the embeddings and after each block."""
    with torch.no_grad():
        h = model.position(model.embed(x), 0)
        out = [h.var().item()]
        for block in model.blocks:
            h = block(h)
            out.append(h.var().item())
    return out


x = torch.randint(0, 768, (8, 64))
unscaled = GPT2LM(GPTConfig(vocab=768, d_model=256, h=4, N=12, max_len=64))
for layer in residual_projections(unscaled):
    nn.init.normal_(layer.weight, std=0.02)
variance = pd.DataFrame(
    [
        {"after block": i, "init": name, "variance": v}
        for name, model in (("0.02 / √(2N)", gpt), ("0.02 everywhere", unscaled))
        for i, v in enumerate(stream_variance(model, x))
    ]
)
viz.line_chart(
    variance,
    "after block",
    "variance",
    "init",
    title="The residual stream at initialisation, 12 GPT-2 blocks",
    x_title="blocks applied (0: the embeddings)",
    y_title="variance of the stream",
)

# %% [markdown]
# Both lines start at the embeddings' variance and climb, since every block adds its two
# terms to the stream. What the blocks add differs by about the factor the formula predicts:
# with the unscaled projections the twelve blocks add roughly 2N = 24 times the variance
# they add with the scaled initialisation.
#
# Tying removes the output matrix: the logits are $h E^\top$ with the embedding table $E$
# itself ([chapter 12](12_tricks_from_the_paper.ipynb) did the same for translation). Over 256 bytes it saves little; over a
# vocabulary of 50,257 tokens at d_model 768, GPT-2 small's, it saves 38.6M parameters, a
# third of the model.

# %%
for vocab in (256, 768, 50_257):
    tied = count_parameters(GPT2LM(GPTConfig(vocab, 128, 4, 4, 128)))
    print(
        f"vocabulary {vocab:>6,}: {tied:>9,} parameters tied, "
        f"{tied + vocab * 128:>9,} untied"
    )

# %% [markdown]
# ### Byte-level BPE
#
# [Chapter 12](12_tricks_from_the_paper.ipynb)'s BPE starts from the characters of its training text and spells an unseen
# character in bytes. GPT-2 starts from the 256 byte values themselves: merges are learned by
# the same algorithm (`learn_merges`, the same tie rule), but every symbol is a byte string,
# so any input has an encoding and the base vocabulary is 256 whatever the script. The
# vocabulary is learned on the *training* split only and saved with the model (the task's
# state).

# %%
show_source(ByteBPE.learn, ByteBPE.encode)

# %%
splits = load_splits("tinyshakespeare")
merges = 512
bpe = ByteBPE.learn(bytes(splits["train"].numpy()), merges)
val_bytes = bytes(splits["val"].numpy())
val_ids = bpe.encode(val_bytes)
assert bpe.decode(val_ids) == val_bytes
# never seen, not even valid UTF-8
odd = "Naïve café — 🙂".encode() + b"\xff\xfe"
assert bpe.decode(bpe.encode(odd)) == odd
print(
    f"{bpe.vocab} tokens; validation: {len(val_bytes):,} bytes -> {len(val_ids):,} "
    "tokens,"
)
print(f"{len(val_bytes) / len(val_ids):.2f} bytes per token; its first 30 tokens:")
pieces = [repr(bpe.decode([i]).decode()) for i in val_ids[:30]]
for start in range(0, 30, 10):  # ten to a line
    print(" | ".join(pieces[start : start + 10]))

# %% [markdown]
# ### Bits per byte of a model over tokens
#
# A BPE model predicts tokens, so its loss per token is not comparable with the byte model's
# loss per byte. What is comparable is the cost of the same text: the total bits the model
# spends on the validation text, divided by its bytes,
#
# $$\text{bits per byte} = \frac{\sum_t -\log_2 p(\text{token}_t \mid \text{context})}
# {\sum_t \text{bytes}(\text{token}_t)}.$$
#
# The validation text is encoded whole and scored with the same overlapping windows as
# [chapter 14](14_generation_characters.ipynb), but over the token stream, so a window never cuts a token. Every byte after the
# first token is counted once, as the byte model counts every byte after the first. Two
# caveats, both in the BPE model's favour or against it by little: 128 tokens of context span
# about three times as many bytes as 128 bytes do; and the model is scored on the one
# tokenization BPE produces, not summed over all tokenizations of the same bytes, so its figure
# is an upper bound on the bits it assigns the text.

# %%
show_source(windowed_token_bits_per_byte)

# %% [markdown]
# ### The same text, the same training time
#
# The byte model is [chapter 14](14_generation_characters.ipynb)'s `cpu` preset on Tiny Shakespeare: 3,000 steps of 32 windows
# of 128 bytes. The GPT-2 model has the same size (4 blocks, d_model 128, 4 heads, d_ff 512,
# 128-token windows, batch 32) and the same optimiser and schedule; its step costs about a
# fifth more than the byte model's (measured by alternating steps of the two models in one
# process), so equal training time is about 2,480 steps against 3,000. (The table's
# wall-clock seconds are each run's own, on its record's machine: not a comparison.)

# %% tags=["nbval-ignore-output"]
PRESET = pick("tiny", "cpu")
gpt2_settings = ["block=gpt2", "tokens=bpe", f"bpe_merges={merges}"]
gpt2_settings += [f"steps={pick(124, 2480)}"]
byte_run = ensure_run(
    "lm", PRESET, runs_dir() / f"ts-{PRESET}", fresh=PRESET == "tiny"
)
gpt2_run = ensure_run(
    "lm",
    PRESET,
    runs_dir() / f"ts-gpt2-{PRESET}",
    settings=gpt2_settings,
    fresh=PRESET == "tiny",
)
runs = {"bytes, chapter 14": byte_run, "GPT-2, byte-level BPE": gpt2_run}
pd.DataFrame.from_dict(
    {
        name: {
            "parameters": run.metrics["parameters"],
            "steps": run.metrics["steps"],
            "train seconds": run.metrics["train_seconds"],
            "validation bytes scored": run.metrics["validation"]["bytes_scored"],
            "bits per byte": round(run.metrics["validation"]["bits_per_byte"], 3),
        }
        for name, run in runs.items()
    },
    orient="index",
)

# %% [markdown]
# The validation split is not uniform: both models find its second half harder than its
# first. Scored by halves with the same protocol (each half on its own, so the second half's
# first window starts without context):

# %% tags=["nbval-ignore-output"]
def halves_bits_per_byte(run) -> dict[str, float]:
    """Bits per byte of the first and second half of the validation split."""
    data, task = run.task.splits["val"], run.task
    out = {}
    half = len(data) // 2
    for name, part in (("first half", data[:half]), ("second half", data[half:])):
        if task.bpe is None:
            out[name] = windowed_bits_per_byte(run.model, part)[0]
        else:
            ids = task.tokenize(part)
            out[name] = windowed_token_bits_per_byte(
                run.model, ids, task.token_bytes
            )[0]
    return out


pd.DataFrame({name: halves_bits_per_byte(run) for name, run in runs.items()}).round(
    3
)

# %% [markdown]
# The two models tie on the whole validation split, 2.268<!-- record ts-cpu metrics.validation.bits_per_byte --> bits per byte for the
# bytes and 2.261<!-- record ts-gpt2-cpu metrics.validation.bits_per_byte --> for GPT-2's recipe: GPT-2 is ahead on the first half
# and behind on the second (the table above). The curves below show why it does not
# pull ahead: its validation score stops improving after about 2,000 of its 2,480 steps and
# then rises, while its training loss keeps falling. With 512 merges the 1.0 MB of training
# text is about 480,000 tokens, and 2,480 steps of 4,096 tokens pass over them 21 times (the
# byte model made 12 passes over its bytes); each token is also a harder, rarer target than a
# byte. GPT-2 itself trained with dropout 0.1 on 40 GB of text; this budget has neither, and
# the fair summary is that, on one small book at equal training time, the recipe buys about
# nothing. Both models' samples below invent words ("catchfort", "shrown"); a BPE model can
# only misspell at the boundaries between its tokens.
#
# The learning curves, in bits per byte of the first 64 KiB of the validation text (quick
# non-overlapping windows), against the fraction of the training time spent:

# %% tags=["nbval-ignore-output"]
curves = pd.concat(
    rows_with(run.history, "val_bpb").assign(
        model=name, fraction=lambda d, run=run: d["step"] / run.metrics["steps"]
    )
    for name, run in runs.items()
)
viz.line_chart(
    curves,
    "fraction",
    "val_bpb",
    "model",
    title="Tiny Shakespeare at equal training time: bytes against GPT-2's recipe",
    x_title="fraction of the training time",
    y_title="validation bits per byte",
    width=440,
)

# %% [markdown]
# Samples, seeded, from the same prompt: 400 bytes of each (the BPE model draws tokens until
# it has at least 400 bytes).

# %% tags=["nbval-ignore-output"]
prompt, length = "ROMEO:\n", 400
bytes_per_token = len(val_bytes) / len(val_ids)
samples = {
    name: run.task.predict(run.model, [prompt], length=n, temperature=0.8, seed=0)[
        0
    ][:length]
    for (name, run), n in zip(
        runs.items(), (length, int(length / bytes_per_token) + 20), strict=True
    )
}
columns = [
    [
        line
        for paragraph in text.splitlines()
        for line in textwrap.wrap(paragraph, 40) or [""]
    ]
    for text in samples.values()
]
rows = max(len(c) for c in columns)
print("".join(f"{name:<44}" for name in samples).rstrip())
for i in range(rows):
    print("".join(f"{(c[i] if i < len(c) else ''):<44}" for c in columns).rstrip())

# %% [markdown]
# **Try it: type your own prompt** between the quotes and run the cell: the published
# GPT-2-recipe model continues it with 120 sampled tokens (about 400 bytes; temperature 0.8,
# as for the samples above). It needs Jupyter (`make lab`, then this chapter's notebook,
# `17_gpt2.ipynb`, or its `.py`) and runs on its own: it loads
# `results/ts-gpt2-cpu` first. A bad setting (a temperature of 0, say) gets one
# line saying so. Saving the chapter keeps this cell as it is stored.

# %% tags=["nbval-ignore-output", "try-it"]
from annotated_transformer.book import try_it

PROMPT = "JULIET:\nO Romeo,"  # ← type here
try_it.continue_text(PROMPT, "ts-gpt2-cpu", length=120, temperature=0.8)

# %% [markdown]
# ## The published GPT-2, in the book's own classes
#
# The published GPT-2 (124M: 12 blocks, d_model 768, 12 heads, 1,024 positions,
# 50,257 tokens) is `GPT2LM` with bigger numbers, and its weights load into it.
# Hugging Face's files name each block's parts (`h.0.attn.c_attn.weight`, …), store
# the linear layers transposed (GPT-2's `Conv1D` computes x W + b with W of shape
# (in, out), where `nn.Linear` keeps (out, in)), and keep W^Q, W^K and W^V in one
# matrix. `GPT2LM.from_pretrained` reads such a folder; `from_hf` maps the names,
# transposes and splits, and the load refuses a file with a weight missing, extra or of
# the wrong shape:

# %%
from tokenizers import ByteLevelBPETokenizer

from annotated_transformer.data.byte_bpe import PATTERNS, byte_pieces
from annotated_transformer.data.download import gpt2_folder
from annotated_transformer.evaluation.sampling import left_pad, sample
from annotated_transformer.models import gpt2_weights as hf_gpt2

show_source(GPT2LM.from_pretrained, GPT2LM.from_weights, hf_gpt2.from_hf)

# %% [markdown]
# The published files (548 MB) are not part of the book, so the page loads a GPT-2 small
# enough to build here: 2 blocks of width 64, 4 heads, 64 positions, this chapter's
# 768 tokens, its weights random. Hugging Face's `transformers` builds it as
# `GPT2LMHeadModel` and saves it in the published checkpoints' layout;
# `GPT2LM.from_pretrained` loads that folder, and both models score the same tokens:

# %%
import tempfile
from pathlib import Path

from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()
torch.manual_seed(0)
small = GPT2Config(
    vocab_size=bpe.vocab, n_positions=64, n_embd=64, n_layer=2, n_head=4,
    bos_token_id=0, eos_token_id=0,
)
reference = GPT2LMHeadModel(small).eval()
with tempfile.TemporaryDirectory() as saved:
    reference.save_pretrained(saved)
    files = sorted(p.name for p in Path(saved).iterdir())
    print("saved by transformers:", ", ".join(files))
    ours = GPT2LM.from_pretrained(saved).eval()
x = torch.randint(bpe.vocab, (2, 16), generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    expected, got = reference(x).logits, ours(x)
torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
assert torch.equal(got.argmax(-1), expected.argmax(-1))
print(f"parameters: GPT2LM {count_parameters(ours):,}, "
      f"GPT2LMHeadModel {reference.num_parameters():,}")
print(f"logits {tuple(got.shape)}: equal within 1e-5, "
      f"the same next token at all {x.numel()} positions")

# %% [markdown]
# To run the rest of this section on the real weights, download them once (online, one
# call fetches the four files from Hugging Face into `$AT_GPT2_DIR`, by default
# `~/.cache/annotated_transformer/gpt2`, and checks their sha256), then run the chapter's
# notebook in Jupyter (`make lab`, then `17_gpt2.ipynb`):
#
# ```python
# from annotated_transformer.data.download import gpt2_folder
# gpt2_folder(online=True)
# ```
#
# The next cell takes the published GPT-2 and its tokenizer (`ByteBPE.from_files` reads
# GPT-2's `vocab.json` and `merges.txt`) where the files are there, and otherwise the small
# model above with this chapter's tokenizer; the cells after it run on whichever it took.

# %%
folder = gpt2_folder()  # None unless all four files are there (each verified)
if folder is None:
    model, tokenizer, which = ours, bpe, "the small random GPT-2"
else:
    model = GPT2LM.from_pretrained(folder).eval()
    tokenizer = ByteBPE.from_files(folder / "vocab.json", folder / "merges.txt")
    which = "the published GPT-2"
print(f"{which}: {count_parameters(model):,} parameters, {tokenizer.vocab:,} ids")

# %% [markdown]
# Three prompts of different lengths go through the model in one batch: `left_pad` puts
# padding before the shorter ones, and the mask keeps the model from reading it and starts
# each row's positions at its first token, so each row continues as if its prompt were
# alone. The cell checks that on the next-token logits of every prompt, then samples 40
# tokens with temperature 0.8 and top-k 40, as in chapter 14. The small model's weights are
# random, so its text is noise; the published model's is English.

# %%
prompts = ["The meaning of life is",
           "Once upon a time, in a village by the sea,",
           "In 2017, a paper titled Attention Is All You Need"]
encoded = [tokenizer.encode(p.encode()) for p in prompts]
ids, mask = left_pad(encoded)
with torch.no_grad():
    batched = model(ids, mask=mask)[:, -1]
    alone = torch.cat([model(torch.tensor([e]))[:, -1] for e in encoded])
torch.testing.assert_close(batched, alone, rtol=1e-4, atol=1e-4)
print(f"prompts of {[len(e) for e in encoded]} tokens, padded to {ids.size(1)}:")
print("the next-token logits equal those of each prompt alone")
out = sample(model, ids, 40, temperature=0.8, top_k=40, mask=mask,
             generator=torch.Generator().manual_seed(0))
for row, real in zip(out, mask, strict=True):
    tokens = row[int((~real).sum()):].tolist()  # without the padding
    text = tokenizer.decode(tokens).decode(errors="replace")
    print(textwrap.fill(text, 84), end="\n\n")

# %% [markdown]
# GPT-2 cuts the *text* into pieces before merging, so the two bytes of "é" share a
# piece and can merge; cutting the Latin-1 view of the bytes instead would split
# them, and no merge could ever join them. GPT-2's pattern (`"gpt2"`, next to
# chapter 12's `"words"`) also splits off English contractions and keeps a run of
# spaces together, except the last space, which starts the next word:

# %%
sentence = "It's   GPT-2's café 🙂"
for pattern in PATTERNS:
    pieces = byte_pieces(sentence.encode(), pattern)
    text = [p.encode("latin-1").decode() for p in pieces]  # bytes back to text
    print(f"{pattern:>5}: " + "|".join(repr(p) for p in text))

# %% [markdown]
# GPT-2's tokenizer against this chapter's (512 merges learned on Tiny Shakespeare) is the
# same algorithm with 50,000 merges learned on 40 GB of web text. The cell counts the tokens
# of four texts under this chapter's tokenizer; with GPT-2's files in place it adds GPT-2's
# counts and asserts that its ids equal those of the `tokenizers` library built from the
# same two files.

# %%
texts = {
    "English": "The quick brown fox doesn't jump over the lazy dog.",
    "German": "Der schnelle braune Fuchs springt über den faulen Hund.",
    "accented": "Crème brûlée à la française, señor Muñoz.",
    "emoji": "Party 🎉 with 👩🏾‍💻 and 🇩🇪!",
}
counts = {
    name: {"bytes": len(text.encode()),
           "this chapter's tokens": len(bpe.encode(text.encode()))}
    for name, text in texts.items()
}
if folder is not None:
    reference = ByteLevelBPETokenizer(
        str(folder / "vocab.json"), str(folder / "merges.txt")
    )
    for name, text in texts.items():
        ids = tokenizer.encode(text.encode())
        assert ids == reference.encode(text).ids
        counts[name]["GPT-2's tokens"] = len(ids)
print(pd.DataFrame(counts).T.to_string())

# %% [markdown]
# ## Summary
#
# Measured on this book's data: GPT-2's recipe and [chapter 14](14_generation_characters.ipynb)'s byte model, trained
# about as long, tie (2.261<!-- record ts-gpt2-cpu metrics.validation.bits_per_byte --> against
# 2.268<!-- record ts-cpu metrics.validation.bits_per_byte --> bits per byte).
#
# You can now
#
# - build GPT-2's recipe from the book's pieces and compare it with the 2017 block;
# - compare models over different tokens by the bits per byte of the same text;
# - load a GPT-2 saved in Hugging Face's layout into the book's own class, and check that
#   it gives the same logits.
#
# **Next:** [chapter 18 · Longer contexts](18_long_context.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/17_gpt2.py`: fill them in there, then grade them from the
# repository's root with `make exercises CHAPTER=17` (or
# `python -m annotated_transformer.exercises 17`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-17-token-bpb)=
# ### Exercise 17.1 · Bits per byte from nats per token
#
# A model over tokens reports its loss in nats per token; the section on bits per byte
# compares it with the byte model through the bits per byte of the same text. Write the
# conversion from the log-probabilities of the target tokens and the length in bytes of
# every token. The grader compares with a loop, and checks that tokens of one byte each
# give back bits per token.
#
# Write `token_bits_per_byte(log_probs, targets, token_bytes)`; grade with `make
# exercises CHAPTER=17`.
#
# :::{dropdown} Solution
# ```python
# def token_bits_per_byte(
#     log_probs: Tensor,
#     targets: Tensor,
#     token_bytes: Tensor,
# ) -> float:
#     """Bits per byte of a model over tokens: Σ −log₂ p(target) / Σ bytes.
#
#     log_probs: (n, V) natural-log probabilities; targets: (n,); token_bytes:
#     (V,), the length in bytes of every token.
#     """
#     nats = -log_probs.double().gather(1, targets[:, None]).sum().item()
#     return nats / math.log(2) / token_bytes[targets].sum().item()
# ```
# :::

# %% [markdown]
# (ex-17-gpt2-count)=
# ### Exercise 17.2 · Count GPT-2's parameters
#
# Count the parameters of `GPT2LM` with a formula, matrix by matrix and bias by bias;
# the grader compares with the model's own count at two sizes. Then evaluate it for
# GPT-2 small (vocabulary 50,257, $d_\text{model} = 768$, 12 blocks, 1,024 positions,
# $d_{ff} = 3072$): do you get the 124 million usually quoted?
#
# Write `gpt2_parameters(vocab, d_model, N, max_len, d_ff)`; grade with `make exercises
# CHAPTER=17`.
#
# :::{dropdown} Solution
# ```python
# def gpt2_parameters(
#     vocab: int,
#     d_model: int,
#     N: int,
#     max_len: int,
#     d_ff: int,
# ) -> int:
#     """Parameters of GPT2LM, counted matrix by matrix.
#
#     The tied token table, learned positions, N pre-norm blocks with biases
#     everywhere (2 LayerNorms, W^Q W^K W^V W^O, a GELU MLP of two layers) and a
#     final LayerNorm.
#     """
#     norm = 2 * d_model
#     attention = 4 * (d_model * d_model + d_model)
#     mlp = d_model * d_ff + d_ff + d_ff * d_model + d_model
#     tables = vocab * d_model + max_len * d_model  # tokens (tied), positions
#     return tables + N * (2 * norm + attention + mlp) + norm
# ```
# :::

# %% [markdown]
# (ex-17-gelu)=
# ### Exercise 17.3 · GELU, exact and as GPT-2 computed it
#
# GELU weighs its input by the probability that a standard normal variable lies below
# it, $x\,\Phi(x)$ with $\Phi(x) = \tfrac12\bigl(1 + \mathrm{erf}(x/\sqrt2)\bigr)$; GPT-2's
# code uses the approximation
# $\tfrac12 x \bigl(1 + \tanh\bigl(\sqrt{2/\pi}\,(x + 0.044715\,x^3)\bigr)\bigr)$. Write
# both, elementwise. The grader compares each with the formula evaluated number by number
# in double precision.
#
# Write `gelu(x, approximate)`; grade with `make exercises CHAPTER=17`.
#
# :::{dropdown} Solution
# ```python
# def gelu(x: Tensor, approximate: bool = False) -> Tensor:
#     """GELU(x) = x Φ(x); with ``approximate``, GPT-2's tanh form of it."""
#     if approximate:
#         inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
#         return 0.5 * x * (1 + torch.tanh(inner))
#     return x * (1 + torch.erf(x / math.sqrt(2))) / 2
# ```
# :::
