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
# # 03 · Tokens and embeddings
#
# - **You will learn** how text becomes vectors: word, character and byte-pair tokens measured on real data, byte-pair encoding written by hand, vocabularies and embedding tables.
# - **It assumes** [chapter 02](02_self_attention.ipynb).
# - **Time:** about 20 minutes to read; it runs in under a minute.
#
# A Transformer never sees text. It sees a sequence of vectors, one per *token*, and everything
# in Part I (attention, heads, the $\sqrt{d_k}$ scaling) happened to those vectors. This chapter
# builds the road from a sentence to them, in four steps:
#
# $$\text{text} \;\longrightarrow\; \text{tokens} \;\longrightarrow\; \text{ids}
# \;\longrightarrow\; \text{vectors}.$$
#
# The first step is a design decision with consequences: how big the vocabulary is, how long
# the sequences are, and what the model does with a word it has never seen. We measure three
# answers on real data (words, characters, and the subwords of byte-pair encoding, the
# paper's choice), then build the vocabulary (tokens ↔ ids) and the embedding table
# (ids → vectors), and end with images and sounds cut into tokens the same way.

# %%
import itertools
import json
import math
import textwrap
from collections import Counter

import pandas as pd
import torch
import torch.nn.functional as F
from tokenizers import (
    Regex,
    Tokenizer,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from torch import nn

from annotated_transformer.blocks.embeddings import Embeddings
from annotated_transformer.blocks.positional import sinusoids
from annotated_transformer.book import viz
from annotated_transformer.book.page import wrap
from annotated_transformer.book.sizes import pick
from annotated_transformer.book.source import show_source
from annotated_transformer.data import multi30k
from annotated_transformer.data.bpe import (
    BPE,
    MARK,
    learn_merges,
    learn_merges_naive,
    merge_word,
    pretokenize,
    symbols,
)
from annotated_transformer.data.vocab import SPECIALS, Vocab

_ = torch.manual_seed(0)

# %% [markdown]
# ![The sentence Two dogs play. cut three ways: into words (Two, dogs, play, full stop), into byte pairs (▁Two, ▁dog, s, ▁play, full stop) and into characters (T, w, o, space, d, o, g, s and so on), each token with an example id below it. Then four ids each point to a row of the embedding table, giving a (len, d_model) matrix of vectors.](figures/03_tokens_to_vectors.svg)
#
# *From text to vectors: tokens (words, byte pairs or characters), their ids in a
# vocabulary, and the rows of the embedding table those ids select.*

# %% [markdown]
# ## The data: Multi30k
#
# Multi30k ([Elliott et al. 2016](../book/references.md#elliott-et-al-2016)) is the translation task of Part IV: 29,000 training pairs of
# short English and German image descriptions, one raw sentence per line. The package's
# `multi30k.load_split` returns a split as two parallel lists of sentences, German and English.
# It fetches the files from their canonical address once, checks their sha256, and keeps them
# in a cache; a local copy named by the environment variable `AT_DATA_MIRROR` is used instead
# when there is one ([chapter 10](10_translation_multi30k.ipynb) looks at the data layer in detail).

# %%
train, val = {}, {}
train["de"], train["en"] = multi30k.load_split("train")
val["de"], val["en"] = multi30k.load_split("val")
print({lang: len(lines) for lang, lines in train.items()}, "training sentences")
print(train["en"][0])
print(train["de"][0])

# %% [markdown]
# ## Words
#
# The obvious unit is the word. Splitting on spaces is not quite enough (`"windows."` should
# be `windows` and `.`), so `multi30k.tokenize` uses spaCy's rule-based tokenizers, which need
# no model download; [chapter 10](10_translation_multi30k.ipynb) tokenizes the same way.

# %%
train_words = {lang: multi30k.tokenize(train[lang], lang) for lang in ("en", "de")}
val_words = {lang: multi30k.tokenize(val[lang], lang) for lang in ("en", "de")}
print(textwrap.fill(str(train_words["en"][0]), 84))
print(textwrap.fill(str(train_words["de"][0]), 84))

# %% [markdown]
# Every distinct word needs its own row in the embedding table, so the vocabulary size is the
# first number to look at. It does not settle as the corpus grows: new words keep arriving
# (Heaps' law: the number of distinct words grows like a power of the number of words read).
# German grows faster, because it glues nouns into compounds (`Boxkämpfer`, `Straßenmusiker`).


# %%
def growth(sentences: list[list[str]], every: int = 1000) -> list[tuple[int, int]]:
    """(words read, distinct words seen) after every `every` sentences."""
    seen, read, points = set(), 0, []
    for i, sentence in enumerate(sentences, start=1):
        seen.update(sentence)
        read += len(sentence)
        if i % every == 0 or i == len(sentences):
            points.append((read, len(seen)))
    return points


growth_frame = pd.DataFrame(
    [
        {"language": lang, "words read": read, "distinct words": distinct}
        for lang in ("en", "de")
        for read, distinct in growth(train_words[lang])
    ]
)
viz.line_chart(
    growth_frame,
    "words read",
    "distinct words",
    color="language",
    title="Multi30k training text: the word vocabulary keeps growing",
    x_title="words read (running total)",
    y_title="distinct words (vocabulary size)",
)

# %% [markdown]
# The other side of the same coin: a word that the training text never showed has no row.
# With a vocabulary from the training split, how much of the validation text is unknown? And
# if we drop the words seen only once (they are mostly names, typos and rare compounds, and a
# single example is too little to learn a vector from)?


# %%
def oov_rate(vocabulary: set[str], sentences: list[list[str]]) -> float:
    tokens = [t for s in sentences for t in s]
    return sum(t not in vocabulary for t in tokens) / len(tokens)


rows = []
for lang in ("en", "de"):
    counts = Counter(t for s in train_words[lang] for t in s)
    for min_freq in (1, 2):
        kept = {t for t, n in counts.items() if n >= min_freq}
        rows.append(
            {
                "language": lang,
                "keep words seen ≥": min_freq,
                "vocabulary": len(kept),
                "unknown in val (% of tokens)": round(
                    100 * oov_rate(kept, val_words[lang]), 2
                ),
                "val sentences with an unknown word (%)": round(
                    100
                    * sum(any(t not in kept for t in s) for s in val_words[lang])
                    / len(val_words[lang]),
                    1,
                ),
            }
        )
pd.DataFrame(rows)

# %% [markdown]
# One to five percent of the tokens sounds small, but they land in a large share of the
# sentences, and they are the informative words: the name, the rare animal, the compound. A
# word-level model sees them all as the same `<unk>` and can only copy `<unk>` into its
# translation.
#
# ## Characters
#
# The opposite extreme: tokens are characters. The vocabulary is tiny and nothing is ever
# unknown, but the sequences get long, and self-attention compares every token with every
# other token, so its cost grows with the *square* of the length.

# %%
for lang in ("en", "de"):
    chars = Counter(ch for line in train[lang] for ch in line)
    n_words = sum(map(len, train_words[lang])) / len(train[lang])
    n_chars = sum(map(len, train[lang])) / len(train[lang])
    print(
        f"{lang}: {len(chars)} distinct characters; a sentence is "
        f"{n_words:.1f} words or {n_chars:.1f} characters on average\n"
        f"  ({n_chars / n_words:.1f}x longer, "
        f"{(n_chars / n_words) ** 2:.0f}x more attention scores)"
    )

# %% [markdown]
# And a character carries little meaning on its own: the model must spend its first layers
# assembling characters into something word-like before it can translate.
#
# ## Subwords: byte-pair encoding
#
# The paper uses a middle road: "sentences were encoded using byte-pair encoding [Sennrich
# et al. 2016], which has a shared source-target vocabulary of about 37000 tokens". Byte-pair
# encoding (BPE) starts from characters and learns, from the training text, which neighbours
# to glue together: frequent words end up as one token, rare words as a few meaningful
# pieces, and any string at all can still be spelled, in the worst case letter by letter.
#
# The algorithm, as Sennrich et al. wrote it:
#
# 1. cut the text into words and each word into characters;
# 2. count every pair of adjacent symbols, weighted by how often its word occurs;
# 3. merge the most frequent pair into a new symbol everywhere; record the merge;
# 4. repeat from 2 until you have as many merges as you want.
#
# The learned model is just the ordered list of merges. Before counting, text is cut into
# *pieces*: a word (or a run of punctuation) together with the space before it. Merges never
# cross pieces, and the space is kept as a visible mark `▁`, so the tokens themselves say
# where the spaces were and decoding is exact.

# %%
show_source(pretokenize, symbols)

# %%
pieces = pretokenize("A man, a plan, a canal: Panama.")
print(pieces)
print([symbols(p, alphabet=set("AacPlmnp,")) for p in pieces[:3]])

# %% [markdown]
# Let us run steps 2 and 3 once by hand on the first thousand English training sentences
# (piece → frequency, each piece spelled as its symbols):

# %%
first_k = train["en"][:1000]
piece_counts = Counter(p for line in first_k for p in pretokenize(line))
alphabet = {ch for p in piece_counts for ch in p if ch != " "}
corpus = Counter()
for piece, n in piece_counts.items():
    corpus[tuple(symbols(piece, alphabet))] += n
print(
    f"{sum(corpus.values())} pieces, {len(corpus)} distinct, {len(alphabet)} "
    "characters"
)

pair_counts = Counter()
for word, n in corpus.items():
    for pair in itertools.pairwise(word):
        pair_counts[pair] += n
print("most frequent pairs:")
print(textwrap.fill(str(pair_counts.most_common(5)), 84))
best = max(pair_counts, key=pair_counts.get)
print(
    f"merge {best}:",
    merge_word(("▁", "a", "n", "d"), best),
    merge_word(("▁", "a"), best),
)

# %% [markdown]
# The most frequent pair is a space followed by `a`: the word *a* and every word that starts
# with an *a*. The package's teaching version is exactly this loop, recounting every pair after
# every merge (`merge_word` replaces the pair in one word). When two pairs are equally
# frequent it takes the pair of *older* symbols (characters by code point, merged symbols by
# creation time): that makes learning deterministic, and it is the rule Hugging Face's
# trainer uses too.

# %%
show_source(learn_merges_naive)

# %%
naive = learn_merges_naive(dict(corpus), num_merges=200)
assert naive[0] == best
for i in range(0, 30, 10):
    print(" ".join(f"{a}+{b}" for a, b in naive[i : i + 10]))

# %% [markdown]
# The first merges build the most common word beginnings and endings: `▁a`, `in` → `ing`,
# `▁s`, `▁w`, `▁t`, `▁the`... Recounting everything after each merge costs time proportional
# to merges × corpus. `learn_merges` gets the same list by updating only the counts of the
# words that contained the merged pair, and keeping the pair counts in a heap. Same answer,
# checked:

# %%
fast = learn_merges(dict(corpus), num_merges=200)
assert fast == naive
print(f"learn_merges == learn_merges_naive on all {len(fast)} merges")

# %% [markdown]
# `BPE.learn` wraps these steps: pieces, alphabet, merges. `encode` replays the merges on a new
# piece in the order they were learned (always the earliest-learned merge that applies), and
# `decode` joins the tokens and turns `▁` back into spaces. Characters never seen in training
# (an emoji, a Chinese character) fall back to their UTF-8 bytes, one token `<0xNN>` each,
# so nothing is ever unknown.

# %%
show_source(BPE._encode_piece, BPE.decode)

# %% [markdown]
# Now a real model: 1,000 merges learned from 5,000 English sentences.

# %% tags=["nbval-ignore-output"]
bpe_sentences = pick(ci=1000, full=5000)
num_merges = 1000
bpe = BPE.learn(train["en"][:bpe_sentences], num_merges=num_merges)
print(f"learned {len(bpe.merges)} merges from {bpe_sentences} sentences")
print(f"vocabulary: {len(bpe.tokens)} tokens (alphabet + merges + 256 byte tokens)")
print("last merges:", " ".join(a + b for a, b in bpe.merges[-8:]))

# %% [markdown]
# Frequent words are single tokens; rare words split into pieces that are themselves
# frequent: stems and endings. A word the training text never contained still gets a
# sensible spelling, and an emoji falls back to bytes:

# %% tags=["nbval-ignore-output"]
for text in [
    "A man in a blue shirt is standing on a ladder.",
    "A skateboarder performs a kickflip over the barricade.",
    "Unbelievably, the hippopotamus refuses to dance 🎉",
]:
    tokens = bpe.encode(text)
    assert BPE.decode(tokens) == text
    line = f"{len(tokens)} tokens: " + " ".join(tokens)
    print(textwrap.fill(line, 84, subsequent_indent="  "))

# %% [markdown]
# How long are the sequences now, on the held-out validation text? Between words and
# characters, and much closer to words:

# %% tags=["nbval-ignore-output"]
n_bpe = sum(len(bpe.encode(line)) for line in val["en"]) / len(val["en"])
n_words = sum(map(len, val_words["en"])) / len(val["en"])
n_chars = sum(map(len, val["en"])) / len(val["en"])
print(
    f"average English validation sentence: {n_words:.1f} words, "
    f"{n_bpe:.1f} BPE tokens, {n_chars:.1f} characters"
)
unknown = sum(t.startswith("<0x") for line in val["en"] for t in bpe.encode(line))
print(f"byte-fallback tokens in the validation text: {unknown}")

# %% [markdown]
# ### The same merges as Hugging Face `tokenizers`
#
# Hugging Face's `tokenizers` library has a fast BPE trainer (in Rust). Configured to cut
# text the same way (the same piece pattern, spaces written as `▁`, pairs seen at least
# twice), it should learn the same merges. It does: every merge, in the same position, and
# then the same encoding of every validation sentence it can spell without byte fallback
# (Hugging Face's BPE has no byte fallback unless asked):

# %% tags=["nbval-ignore-output"]
hf = Tokenizer(models.BPE())
hf.normalizer = normalizers.Replace(" ", MARK)
pattern = f"{MARK}?\\w+|{MARK}?[^\\w\\s{MARK}]+|\\s|{MARK}"
hf.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
hf_trainer = trainers.BpeTrainer(
    vocab_size=len(bpe.alphabet) + num_merges, min_frequency=2, show_progress=False
)
hf.train_from_iterator(train["en"][:bpe_sentences], hf_trainer)
hf_merges = [tuple(m) for m in json.loads(hf.to_str())["model"]["merges"]]

same_place = sum(a == b for a, b in zip(bpe.merges, hf_merges, strict=True))
print(
    f"{same_place} of {len(bpe.merges)} merges identical and in the same position"
)
sample = [line for line in val["en"] if set(line) - {" "} <= bpe.alphabet]
agree = sum(bpe.encode(line) == hf.encode(line).tokens for line in sample)
print(f"identical encodings for {agree} of {len(sample)} validation sentences")

# %% [markdown]
# ### WordPiece and unigram
#
# Two other subword methods are common; both keep "frequent words whole, rare words in
# pieces" and differ in how pieces are chosen.
#
# - **WordPiece** (BERT) also merges pairs, but scores a pair by
#   $\frac{\text{count}(ab)}{\text{count}(a)\,\text{count}(b)}$ instead of count$(ab)$: it
#   prefers pairs whose parts are rarely seen apart. It marks word-internal pieces with `##`
#   instead of marking spaces, and it encodes greedily, longest known prefix first, rather
#   than by replaying merges.
# - **Unigram** (SentencePiece's default; T5, ALBERT) goes the other way round: start from a
#   large set of candidate pieces, fit a probability to each with EM, and prune the pieces
#   whose removal costs the least likelihood. Encoding picks the most probable segmentation
#   (Viterbi), and during training one can *sample* segmentations as a regulariser.
#
# Trained on the same 2,000 sentences with a vocabulary of 1,200, the three split a rare word
# a little differently:


# %%
def hf_subwords(kind: str) -> Tokenizer:
    if kind == "WordPiece":
        tok = Tokenizer(models.WordPiece(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(
            vocab_size=1200, special_tokens=["<unk>"], show_progress=False
        )
    else:
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        trainer = trainers.UnigramTrainer(
            vocab_size=1200,
            special_tokens=["<unk>"],
            unk_token="<unk>",
            show_progress=False,
        )
    tok.train_from_iterator(train["en"][:2000], trainer)
    return tok


alphabet_2k = {ch for line in train["en"][:2000] for ch in line if ch != " "}
small_bpe = BPE.learn(train["en"][:2000], num_merges=1200 - len(alphabet_2k) - 1)
text = "A skateboarder performs a kickflip over the barricade."
print(wrap("BPE       " + " ".join(small_bpe.encode(text)), indent=" " * 10))
for kind in ("WordPiece", "Unigram"):
    pieces = " ".join(hf_subwords(kind).encode(text).tokens)
    print(wrap(f"{kind:9} {pieces}", indent=" " * 10))

# %% [markdown]
# ## From tokens to ids: the vocabulary
#
# The model needs integers. A vocabulary is the two-way map between tokens and ids, plus a few
# *special* tokens that never occur in text: `<pad>` fills short sentences of a batch,
# `<unk>` stands for unknown tokens, `<s>` and `</s>` mark the beginning and end of a
# sentence. The Annotated Transformer built it with torchtext:
#
# ```python
# vocab = build_vocab_from_iterator(yield_tokens(...), min_freq=2, specials=[...])
# vocab.set_default_index(vocab["<unk>"])
# ```
#
# torchtext no longer loads on current PyTorch, so the package has its own small `Vocab`.
# `Vocab.build` counts the tokens, keeps those seen at least `min_freq` times, and orders
# them deterministically: specials first, then by decreasing frequency, ties alphabetically.
# It should be built from the training split only: words that appear only in validation or
# test data must be unknown, as they will be for new text.

# %%
show_source(Vocab.build, Vocab.__getitem__)

# %%
vocab = Vocab.build(train_words["en"], min_freq=2)
print(vocab)
print("specials:", SPECIALS, "-> ids", vocab.encode(SPECIALS))
print("ids 4..13:", vocab.itos[4:14])
print("default index for unknown tokens:", vocab.default_index)

# %%
sentence = next(s for s in val_words["en"] if any(t not in vocab for t in s))
ids = vocab.encode(["<s>", *sentence, "</s>"])
for shown in (sentence, ids, vocab.decode(ids)):
    print(textwrap.fill(str(shown), 84))

# %% [markdown]
# The decoded sentence lost its unknown words: that is the word-level problem from above,
# now visible. A BPE vocabulary has no such loss, since every string has a spelling:
# `Vocab(bpe.tokens)` lists every token its `encode` can produce.
#
# ## From ids to vectors: the embedding table
#
# An embedding is a learned table with one row of $d_{\text{model}}$ numbers per vocabulary
# entry; looking up id $i$ returns row $i$. That is the same as multiplying a one-hot vector
# by the table, only without the multiplication. The paper then scales: "In the embedding
# layers, we multiply those weights by $\sqrt{d_{\text{model}}}$."

# %%
show_source(Embeddings)

# %%
d_model = 512
torch.manual_seed(0)
embed = Embeddings(d_model, len(vocab))
nn.init.xavier_uniform_(embed.lut.weight)  # as make_model initialises every matrix
token_ids = torch.tensor([ids])  # (batch=1, len)
vectors = embed(token_ids)  # (1, len, d_model)
one_hot = F.one_hot(token_ids, len(vocab)).float()  # (1, len, vocab)
torch.testing.assert_close(vectors, one_hot @ embed.lut.weight * math.sqrt(d_model))
print(
    tuple(token_ids.shape),
    "->",
    tuple(vectors.shape),
    "| lookup == one-hot @ table × √d_model",
)

# %% [markdown]
# Why scale? The next chapter *adds* a position vector to every token vector, and a sum is
# only useful if neither part drowns the other. With the initialisation the model uses
# (Glorot/Xavier: entries of size about $\sqrt{2 / (\text{vocab} + d_{\text{model}})}$, the
# same small scale as the output projection the paper shares this table with), a row has a
# norm well below 1. A sinusoidal position vector has $d_{\text{model}}/2$ sin/cos pairs, each
# of norm 1, so its norm is exactly $\sqrt{d_{\text{model}}/2}$: without the scaling the
# position would dominate every token by a factor of about 40. Multiplied by
# $\sqrt{d_{\text{model}}}$, the two are of the same order:

# %%
norms = []
for d in (64, 128, 256, 512, 1024):
    torch.manual_seed(0)
    table = nn.init.xavier_uniform_(torch.empty(len(vocab), d))
    rows_norm = table.norm(dim=1).mean().item()
    position_norm = sinusoids(100, d).norm(dim=1).mean().item()
    norms += [
        {"d_model": d, "vector": "token (Xavier)", "mean norm": rows_norm},
        {
            "d_model": d,
            "vector": "token × √d",
            "mean norm": rows_norm * math.sqrt(d),
        },
        {"d_model": d, "vector": "position", "mean norm": position_norm},
    ]
norm_frame = pd.DataFrame(norms)
print(norm_frame[norm_frame.d_model == 512].round(2).to_string(index=False))
viz.line_chart(
    norm_frame,
    "d_model",
    "mean norm",
    color="vector",
    log_y=True,
    width=400,
    title=f"Token vs position vector norms (vocabulary of {len(vocab)} words)",
    x_title="d_model",
    y_title="mean vector norm (log scale)",
)

# %% [markdown]
# A caveat: PyTorch's own `nn.Embedding` starts from $\mathcal N(0, 1)$ entries, rows of norm
# about $\sqrt{d_{\text{model}}}$, and multiplying those by $\sqrt{d_{\text{model}}}$ would
# drown the *position* instead. The scaling and the initialisation go together, which is why
# `make_model` re-initialises every weight matrix with Xavier, as the Annotated Transformer
# did.
#
# ## Not only text: patches and frames as tokens
#
# Nothing after the embedding knows that tokens came from text. Anything that can be cut into
# a sequence of vectors can go into a Transformer. The Vision Transformer (Dosovitskiy et al.
# 2021, "An image is worth 16x16 words") cuts an image into 16×16 patches, flattens each
# patch, and projects it with one linear layer: the patch plays the role of a token, the
# linear layer the role of the embedding table. Here is a procedurally drawn 64×64 grey image
# (no download), which gives a 4×4 grid of 16 patches.

# %%
size, patch = 64, 16
y, x = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
radius = ((x - 24.0) ** 2 + (y - 28.0) ** 2).sqrt().double()
image = 0.5 + 0.5 * torch.sin(radius / 2.5) * (radius < 22)  # rings in a disc
image = image + 0.4 * (x > 44) * ((y // 8) % 2)  # and a striped bar on the right
# (batch, channels, height, width); drawn in float64 and rounded, so that every
# CPU's sine gives the same pixels
image = image.clamp(0, 1).round(decimals=3).float().reshape(1, 1, size, size)

# F.unfold cuts out every 16×16 window with stride 16, (batch, channels·16·16,
# patches); transposed: (1, 16, 256)
patches = F.unfold(image, kernel_size=patch, stride=patch).transpose(1, 2)
# The same by reshaping: rows of patches, columns of patches, then the pixels of
# each patch: (b, c, gy, py, gx, px)
grid = image.reshape(1, 1, size // patch, patch, size // patch, patch)
by_hand = grid.permute(0, 2, 4, 1, 3, 5).reshape(
    1, (size // patch) ** 2, patch * patch
)
torch.testing.assert_close(patches, by_hand)

torch.manual_seed(0)
to_d_model = nn.Linear(patch * patch, 64)  # the "embedding" of a patch
patch_tokens = to_d_model(patches)  # (1, 16, 64)
print(
    f"image {tuple(image.shape)} -> patches {tuple(patches.shape)} -> tokens "
    f"{tuple(patch_tokens.shape)};\nunfold == reshape/permute"
)

# %% [markdown]
# Above the image (darker = larger value), below the same pixels as a sequence: each row is one patch,
# read left to right and top to bottom, flattened into 256 numbers. (ViT-Base does this on
# 224×224 colour images: 196 patches of 16·16·3 = 768 numbers each, and it adds learned
# position vectors, the subject of the next chapter, since the order of the rows is all that
# is left of the patches' places.)

# %%
axis_config = {"labelOverlap": True, "labelAngle": 0}
picture = viz.heatmap(
    image[0, 0],
    title="A 64×64 image (16×16 patches)",
    x_title="pixel column",
    y_title="pixel row",
    value_title="pixel value",
    scheme="greys",
    width=260,
    height=260,
)
sequence = viz.heatmap(
    patches[0],
    title="The image as 16 patch tokens",
    x_title="pixel inside the patch (row-major, 256)",
    y_title="patch token (row-major)",
    value_title="pixel value",
    scheme="greys",
    width=380,
    height=260,
)
(picture & sequence).configure_axis(**axis_config)

# %% [markdown]
# Sound works the same way. A short-time Fourier transform cuts a signal into overlapping
# frames and measures how much of each frequency every frame contains: a spectrogram. Each
# frame's column of magnitudes is a token (Whisper and the Audio Spectrogram Transformer
# embed such frames or patches of them). Our signal: one second of a *chirp*, a tone sliding
# from 200 Hz to 3,000 Hz, sampled at 8 kHz.

# %%
rate, seconds, f0, f1 = 8000, 1.0, 200.0, 3000.0
t = torch.arange(int(rate * seconds), dtype=torch.float64) / rate
# frequency f0 → f1
phase = 2 * math.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t**2)
signal = torch.sin(phase).float()

n_fft = 128  # 65 frequency bins of 62.5 Hz; one frame every 128 samples (16 ms)
spectrum = torch.stft(
    signal,
    n_fft=n_fft,
    hop_length=n_fft,
    window=torch.hann_window(n_fft),
    return_complex=True,
)  # (freq bins, frames)
frames = spectrum.abs().T  # (frames, freq bins): one row per token
log_frames = torch.log1p(frames)
peak_hz = frames.argmax(dim=1) * rate / n_fft
print(
    f"signal {tuple(signal.shape)} -> {frames.shape[0]} frame tokens of "
    f"{frames.shape[1]} features;\nloudest frequency rises from "
    f"{peak_hz[1]:.0f} Hz to {peak_hz[-2]:.0f} Hz"
)

# %% tags=["nbval-ignore-output"]
viz.heatmap(
    log_frames,
    title="A chirp as a sequence of spectrogram frames",
    x_title="frequency bin (62.5 Hz each)",
    y_title="frame token (16 ms each)",
    value_title="log(1 + magnitude)",
    width=420,
    height=380,
).configure_axis(**axis_config)

# %% [markdown]
# The bright diagonal is the rising tone. A linear layer from 65 numbers to $d_{\text{model}}$
# would turn these 63 rows into token vectors, exactly as `to_d_model` did for the patches.
#
# ## Summary
#
# - Word vocabularies keep growing with the corpus and still leave unknown words; characters
#   never fail but make sequences several times longer, and attention the square of that
#   costlier (the section on characters prints both, for English and German).
# - BPE learns a vocabulary of frequent pieces from the data: common words whole, rare words in
#   pieces, nothing unknown. The package's learner agrees merge for merge with Hugging Face's.
# - `Vocab` maps tokens ↔ ids, with specials and a default for the unknown; `Embeddings` maps
#   ids to vectors and scales them by $\sqrt{d_{\text{model}}}$ to match the positions they
#   will be added to.
# - Patches of an image and frames of a spectrogram are tokens too: a linear layer is their
#   embedding table.
#
# You can now
#
# - weigh word, character and byte-pair tokens by vocabulary size and length;
# - learn byte-pair merges by hand and map tokens to ids and ids to vectors;
# - treat image patches and audio frames as tokens.
#
# **Next:** [chapter 04 · Positional encoding](04_positional_encoding.ipynb).

# %% [markdown]
# ## Exercises
#
# Each exercise asks for one function. Their signatures and docstrings wait in
# `notebooks/exercises/03_tokens_and_embeddings.py`: fill them in there, then grade them
# from the repository's root with `make exercises CHAPTER=03` (or
# `python -m annotated_transformer.exercises 03`). The grader tests each function
# against an independent reference and prints PASS, FAIL with a hint, or TODO for what
# you have not tried yet. The solutions are behind the toggles: try first.
#
# (ex-03-count-pairs)=
# ### Exercise 3.1 · Count the pairs, as BPE does
#
# Step 2 of the BPE algorithm: given a corpus of words, each spelled as a tuple of
# symbols with its frequency, count every pair of adjacent symbols, weighted by how often
# its word occurs. Return a `collections.Counter`. The grader checks a corpus small
# enough to count by hand.
#
# Write `count_pairs(corpus)`; grade with `make exercises CHAPTER=03`.
#
# :::{dropdown} Solution
# ```python
# def count_pairs(corpus: dict[tuple[str, ...], int]) -> Counter:
#     """BPE's step 2: how often each pair of adjacent symbols occurs.
#
#     corpus: each word, spelled as a tuple of symbols -> how often it occurs
#     returns Counter {(left, right): count}, each pair weighted by its word's
#     count
#     """
#     counts = Counter()
#     for word, n in corpus.items():
#         for pair in itertools.pairwise(word):
#             counts[pair] += n
#     return counts
# ```
# :::

# %% [markdown]
# (ex-03-apply-merges)=
# ### Exercise 3.2 · Encode a word with learned merges
#
# BPE *encoding*: replay a list of learned merges, in the order they were learned, on
# the symbols of one new word. Each merge joins every occurrence of its pair, scanning
# left to right. For example, with the merges `l+o`, `lo+w`, `e+r`, `▁+low`, the word
# `▁ l o w e r` becomes `▁low er`.
#
# Write `apply_merges(word, merges)`; grade with `make exercises CHAPTER=03`.
#
# :::{dropdown} Solution
# ```python
# def apply_merges(word: list[str], merges: list[tuple[str, str]]) -> list[str]:
#     """BPE encoding: replay the learned merges, in order, on one word.
#
#     word: its symbols, e.g. ["▁", "l", "o", "w"]; merges: in the order learned
#     returns the symbols after every merge (each merge joins every occurrence
#     of its pair, left to right)
#     """
#     for left, right in merges:
#         merged, i = [], 0
#         while i < len(word):
#             if word[i : i + 2] == [left, right]:
#                 merged.append(left + right)
#                 i += 2
#             else:
#                 merged.append(word[i])
#                 i += 1
#         word = merged
#     return word
# ```
# :::

# %% [markdown]
# (ex-03-scaled-embedding)=
# ### Exercise 3.3 · The embedding, scaled by √d_model
#
# The Transformer multiplies its embeddings by $\sqrt{d_\text{model}}$. Look up a batch
# of token ids in an embedding table (a plain tensor, no `nn.Embedding`) and scale them.
# The grader compares with `F.embedding`.
#
# Write `scaled_embedding(ids, table)`; grade with `make exercises CHAPTER=03`.
#
# :::{dropdown} Solution
# ```python
# def scaled_embedding(ids: Tensor, table: Tensor) -> Tensor:
#     """The Transformer's token embedding: each id's row, times √d_model.
#
#     ids: integer (batch, len); table: (vocab, d_model)
#     returns (batch, len, d_model)
#     """
#     return table[ids] * table.size(-1) ** 0.5
# ```
# :::

# %% [markdown]
# (ex-03-frame-signal)=
# ### Exercise 3.4 · Frames of a signal as tokens
#
# This chapter turned a sound into tokens with a short-time Fourier transform; its first
# step cuts the signal into overlapping frames. Cut a 1-d signal into frames of `size`
# samples, one starting every `hop` samples, dropping a tail too short for a whole frame.
#
# Write `frame_signal(signal, size, hop)`; grade with `make exercises CHAPTER=03`.
#
# :::{dropdown} Solution
# ```python
# def frame_signal(signal: Tensor, size: int, hop: int) -> Tensor:
#     """Cut a 1-d signal into overlapping frames, the tokens of an audio model.
#
#     signal: (n,); frames of ``size`` samples starting every ``hop`` samples
#     returns (n_frames, size), n_frames = 1 + (n - size) // hop; a tail too
#     short for a whole frame is dropped
#     """
#     starts = range(0, signal.size(0) - size + 1, hop)
#     return torch.stack([signal[s : s + size] for s in starts])
# ```
# :::
