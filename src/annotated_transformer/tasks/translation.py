"""German→English translation on Multi30k (Part IV): the task
the paper was written for.

- Tokens: ``tokens="words"``, spaCy's words with one vocabulary per language (words
  seen at least ``min_freq`` times in training, the rest ``<unk>``); or
  ``tokens="bpe"``, one byte-pair vocabulary learned on the German *and* English
  training sentences (chapter 03's :class:`~annotated_transformer.data.bpe.BPE`),
  which spells any word in pieces: no ``<unk>``. ``tie=True`` then makes the source
  and target embeddings and the generator one matrix.
- Batches: sentence pairs of similar length, up to ``max_tokens`` padded tokens per
  batch (``batching.bucket_batches``), shuffled per epoch with a seed; ``pool_size``
  sorts by length only within random pools of that many pairs (more padding, more
  varied batches). ``pack_width`` instead keeps batches random and packs their pairs
  several to a row of that many tokens (``batching.packed_batches``,
  :class:`~annotated_transformer.data.batching.PackedBatch`).
- Loss: label-smoothed cross-entropy summed over the target tokens.
- Validation: loss per target token and greedy BLEU; test:
  test2016 with beam search.
- Scores (:func:`score`): sacreBLEU on detokenized, cased text (comparable across
  papers), tokenized lower-cased BLEU (what Multi30k tutorials report) and chrF.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from pathlib import Path
from typing import Any, ClassVar

from torch import Tensor, nn

from annotated_transformer.blocks.masks import padding_mask
from annotated_transformer.data import multi30k
from annotated_transformer.data.batching import (
    Batch,
    PackedBatch,
    bucket_batches,
    collate,
    packed_batches,
)
from annotated_transformer.data.bpe import BPE
from annotated_transformer.data.vocab import SPECIALS, Vocab
from annotated_transformer.evaluation import metrics
from annotated_transformer.evaluation.coverage import warn_beyond_data
from annotated_transformer.evaluation.decoding import (
    beam_search,
    check_beam_size,
    check_length_penalty,
    greedy_decode,
)
from annotated_transformer.models.encoder_decoder import (
    EncoderDecoder,
    Transformer,
    TransformerConfig,
    tie_weights,
)
from annotated_transformer.models.eval_mode import evaluating
from annotated_transformer.tasks.base import Task, TrainConfig, check_texts
from annotated_transformer.training.loss import seq2seq_loss

Pair = tuple[list[int], list[int]]  # (source ids, target ids), without <s> and </s>


@dataclass(frozen=True)
class TranslationConfig(TrainConfig):
    """A translation run: data and tokens, the model (a
    :class:`~annotated_transformer.models.encoder_decoder.TransformerConfig`
    without its vocabularies, which the data gives), the loss."""

    train_limit: int | None = None  # the first N training pairs (None: all 29,000)
    eval_limit: int | None = None  # the first N pairs of every evaluation split
    lower: bool = False  # keep case: sacreBLEU scores cased text
    # "words" (two vocabularies) or "bpe" (one shared, no <unk>)
    tokens: str = "words"
    min_freq: int = 2  # words: rarer training words become <unk>
    bpe_merges: int = 8_000  # bpe: merges learned on German + English training text
    tie: bool = False  # bpe: one matrix for both embeddings and the generator
    # padded tokens per batch (and per rank), <s>/</s> included
    max_tokens: int = 4_000
    # bucket within shuffled pools of this many pairs (0: sort them all)
    pool_size: int = 0
    # >0: random batches of max_tokens real tokens, packed in rows this wide
    pack_width: int = 0
    # the model: its sizes, set flat (--set d_model=256); the vocabularies come
    # from the data; max_len: the longest sentence, <s> and </s> included
    model: TransformerConfig = field(
        default_factory=partial(TransformerConfig, max_len=256)
    )
    label_smoothing: float = 0.1
    beam: int = 4  # for the test score
    # beam search's length penalty α (GNMT's; 0: none), for the test score
    alpha: float = 0.6

    test_only: ClassVar[tuple[str, ...]] = ("beam", "alpha")
    positive = (
        *TrainConfig.positive,
        *("train_limit", "eval_limit", "min_freq", "max_tokens", "max_len", "beam"),
        *("N", "d_model", "d_ff", "h"),
    )
    shares = ("dropout", "attn_dropout", "label_smoothing")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tokens not in ("words", "bpe"):
            raise ValueError(f"tokens={self.tokens!r}: use words or bpe")
        if self.tie and self.tokens != "bpe":
            raise ValueError(
                "tie=true needs one shared vocabulary: set tokens=bpe too"
            )
        check_length_penalty(self.alpha)
        if self.pack_width and self.pool_size:
            raise ValueError(
                f"pack_width={self.pack_width} with pool_size={self.pool_size}: "
                "packing does not sort by length, so pool_size must stay 0"
            )


PRESETS = {
    # A one-layer model on 1,000 pairs: a check in seconds; learns next to nothing.
    "tiny": TranslationConfig(
        tokens="bpe",
        bpe_merges=1_000,
        pack_width=48,
        train_limit=1_000,
        eval_limit=50,
        max_tokens=1_200,
        model=TransformerConfig(N=1, d_model=64, d_ff=128, h=4, max_len=256),
        epochs=2,
        lr=3e-3,
        warmup=10,
        keep_last=2,
        final="best",
        beam=1,
    ),
    # A laptop: 12 epochs of 205 steps on one shared byte-pair vocabulary (no
    # <unk>), untied, random batches packed in rows of ~48 tokens (chapter 10;
    # chapter 12 measures each choice); fp32, or bf16 where the CPU does it fast.
    # Its record (translate-cpu) gives its minutes, machine and scores.
    "cpu": TranslationConfig(
        tokens="bpe",
        pack_width=48,
        max_tokens=2_500,
        model=TransformerConfig(N=3, d_model=256, d_ff=1_024, h=8, max_len=256),
        epochs=12,
        lr=1e-3,
        warmup=400,
        precision="auto",
        checkpoint_every=200,
        keep_last=5,
        final="best",
        beam=4,  # beam and α: the best on the validation set (Results page)
        alpha=1.0,
    ),
    # The paper's base model (Vaswani et al. 2017, table 3), for a GPU: the Noam
    # schedule with factor 1, whose peak is (d_model · warmup)^-0.5 = 7.0e-4.
    "base": TranslationConfig(
        max_tokens=8_000,
        epochs=30,
        schedule="noam",
        lr=(512 * 4_000) ** -0.5,
        warmup=4_000,
        precision="auto",
        checkpoint_every=500,
        keep_last=5,
        final="best",
    ),
    # The paper's big model: d_model 1024, 16 heads, dropout 0.3.
    "big": TranslationConfig(
        max_tokens=8_000,
        model=TransformerConfig(
            d_model=1_024, d_ff=4_096, h=16, dropout=0.3, max_len=256
        ),
        epochs=30,
        schedule="noam",
        lr=(1_024 * 4_000) ** -0.5,
        warmup=4_000,
        precision="auto",
        checkpoint_every=500,
        keep_last=5,
        final="best",
    ),
}

# The laptop speedrun: the cpu preset's model for 30 minutes of training on 2
# threads in fp32 (the budget stops it; its epochs only cap it), with twice the
# peak rate after a shorter warm-up, half the merges and no dropout on the
# attention weights (the fused kernel). Its record: translate-speedrun.
PRESETS["speedrun"] = replace(
    PRESETS["cpu"],
    bpe_merges=4_000,
    model=replace(PRESETS["cpu"].model, attn_dropout=0.0),
    lr=2e-3,
    warmup=250,
    budget_minutes=30,
    epochs=20,
    precision="fp32",
    keep_last=3,
)


@dataclass
class Parallel:
    """A split: German sentences, English references, and both as token lists."""

    de: list[str]
    en: list[str]
    src: list[list[str]]
    tgt: list[list[str]]


def make_batch(
    pairs: Sequence[Pair],
    index: Sequence[int],
    vocab: Vocab,
    pad_to: int | None = None,
) -> Batch:
    """The pairs ``index`` as a padded ``Batch``: ``<s> ids </s>`` on both sides
    (both vocabularies share the special ids of ``vocab.SPECIALS``). ``pad_to``: pad
    (and cut) every sentence to this length, as the original did; None pads to the
    longest."""
    pad, bos, eos = vocab.stoi["<pad>"], vocab.stoi["<s>"], vocab.stoi["</s>"]
    src = collate([pairs[i][0] for i in index], pad, bos, eos, pad_to)
    tgt = collate([pairs[i][1] for i in index], pad, bos, eos, pad_to)
    return Batch(src, tgt, pad)


def make_packed_batch(
    pairs: Sequence[Pair], rows: Sequence[Sequence[int]], vocab: Vocab
) -> Batch:
    """The pairs of each row of ``rows`` (indices into ``pairs``)
    packed into one row each."""
    pad, bos, eos = vocab.stoi["<pad>"], vocab.stoi["<s>"], vocab.stoi["</s>"]
    packed = [
        [([bos, *pairs[i][0], eos], [bos, *pairs[i][1], eos]) for i in row]
        for row in rows
    ]
    return PackedBatch(packed, pad)


def pair_lengths(pairs: Sequence[Pair]) -> list[tuple[int, int]]:
    """(source, target) lengths as padded: with ``<s>`` and ``</s>``."""
    return [(len(s) + 2, len(t) + 2) for s, t in pairs]


class Translator:
    """Sentences in, sentences out: tokenize, encode, decode
    (greedy or beam), detokenize.

    ``bpe``: the shared byte-pair encoding of a ``tokens="bpe"`` run (None:
    spaCy words). Decodes in batches of similar-length sentences; the output
    order is the input order.
    """

    def __init__(
        self,
        model: EncoderDecoder,
        src_vocab: Vocab,
        tgt_vocab: Vocab,
        *,
        lower: bool = False,
        bpe: BPE | None = None,
        max_len: int = 5_000,
    ) -> None:
        self.model, self.src_vocab, self.tgt_vocab = model, src_vocab, tgt_vocab
        self.lower, self.bpe, self.max_len = lower, bpe, max_len

    def tokens(self, sentences: Sequence[str], lang: str) -> list[list[str]]:
        """Sentences as the model's tokens: byte pairs, or spaCy's words."""
        if self.bpe is None:
            return multi30k.tokenize(sentences, lang, lower=self.lower)
        return [self.bpe.encode(s.lower() if self.lower else s) for s in sentences]

    def text(self, tokens: Sequence[str]) -> str:
        """English output tokens as a sentence."""
        return (
            multi30k.detokenize(tokens)
            if self.bpe is None
            else BPE.decode(tokens).strip()
        )

    def tokenize(self, sentences: Sequence[str]) -> list[list[str]]:
        """German sentences as tokens; raises ValueError for an
        empty or too long sentence."""
        tokens = self.tokens(sentences, "de")
        for i, sentence in enumerate(tokens, 1):
            if not sentence:
                raise ValueError(
                    f"sentence {i} is empty: give one German sentence per line"
                )
            if len(sentence) + 2 > self.max_len:
                raise ValueError(
                    f"sentence {i} has {len(sentence)} tokens but the model has "
                    f"only {self.max_len} positions (<s> and </s> included): split "
                    "it"
                )
        return tokens

    def unknown(self, tokens: Sequence[Sequence[str]]) -> list[str]:
        """The distinct tokens the source vocabulary lacks (they
        are read as ``<unk>``)."""
        return sorted(
            {t for sentence in tokens for t in sentence if t not in self.src_vocab}
        )

    def translate_tokens(
        self,
        tokens: Sequence[Sequence[str]],
        beam: int = 1,
        alpha: float = 0.6,
        batch_size: int = 100,
    ) -> list[list[str]]:
        """Source token lists → target token lists (``beam`` 1: greedy decoding;
        ``alpha``: beam search's length penalty)."""
        v = self.src_vocab
        pad, bos, eos = v.stoi["<pad>"], v.stoi["<s>"], v.stoi["</s>"]
        device = next(self.model.parameters()).device
        order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]))
        out: list[list[str]] = [[] for _ in tokens]
        for begin in range(0, len(order), batch_size):
            index = order[begin : begin + batch_size]
            src = collate([v.encode(tokens[i]) for i in index], pad, bos, eos)
            src = src.to(device)
            src_mask = padding_mask(src, pad)  # (batch, 1, src_len)
            # room for <s> + the output
            max_len = min(self.max_len, src.size(1) + 50)
            if beam > 1:
                ys = beam_search(
                    self.model, src, src_mask, max_len, bos, eos, beam, alpha
                )
            else:
                ys = greedy_decode(self.model, src, src_mask, max_len, bos, eos)
            for i, row in zip(index, ys.tolist(), strict=True):
                row = row[1:]  # drop <s>
                out[i] = self.tgt_vocab.decode(
                    row[: row.index(eos)] if eos in row else row
                )
        return out

    def translate(
        self, sentences: Sequence[str], beam: int = 1, alpha: float = 0.6
    ) -> list[str]:
        """German sentences → English sentences."""
        tokens = self.translate_tokens(self.tokenize(sentences), beam, alpha)
        return [self.text(t) for t in tokens]


def score(
    hypotheses: Sequence[str],
    data: Parallel,
    words: Sequence[Sequence[str]] | None = None,
) -> dict[str, Any]:
    """Scores of English sentences against a split's references, as plain data.

    ``bleu``: sacreBLEU on detokenized, cased text (with its signature);
    ``tokenized_bleu``: lower-cased BLEU of spaCy's tokens, as Multi30k tutorials
    report (``words``: the hypotheses' tokens when the model output words; else the
    sentences are tokenized); ``chrf``.
    """
    words = words if words is not None else multi30k.tokenize(hypotheses, "en")
    references = multi30k.tokenize(data.en, "en")
    # sacreBLEU warns that tokenized input "may hurt your score":
    # tokenized_bleu means it.
    logging.getLogger("sacrebleu").setLevel(logging.ERROR)
    results = {
        "bleu": metrics.bleu(hypotheses, data.en),
        "tokenized_bleu": metrics.tokenized_bleu(words, references),
        "chrf": metrics.chrf(hypotheses, data.en),
    }
    out: dict[str, Any] = {"sentences": len(hypotheses)}
    for name, s in results.items():
        out[name] = round(s.score, 2)
        out[f"{name}_signature"] = s.signature
    return out


class Translation(Task):
    """Multi30k German→English with an
    :class:`~annotated_transformer.models.encoder_decoder.EncoderDecoder`."""

    name = "translate"
    title = "German→English translation on Multi30k (an encoder-decoder)"
    Config = TranslationConfig
    score = ("val_bleu", "max")

    def __init__(
        self,
        config: TranslationConfig,
        *,
        data_dir: str | Path | None = None,
        state: dict | None = None,
    ) -> None:
        super().__init__(config, data_dir=data_dir, state=state)
        if state is None:  # learn the vocabularies from the training split only
            de, en = self.raw("train")
            if config.tokens == "bpe":
                texts = [s.lower() if config.lower else s for s in de + en]
                bpe = BPE.learn(texts, num_merges=config.bpe_merges)
                shared = [*SPECIALS, *bpe.tokens]  # every token encode can output
                state = {
                    "src_itos": shared,
                    "tgt_itos": shared,
                    "bpe": bpe.to_dict(),
                }
            else:
                src = multi30k.tokenize(de, "de", lower=config.lower)
                tgt = multi30k.tokenize(en, "en", lower=config.lower)
                src_vocab, tgt_vocab = multi30k.build_vocabs(
                    src, tgt, config.min_freq
                )
                state = {
                    "src_itos": src_vocab.itos,
                    "tgt_itos": tgt_vocab.itos,
                    "bpe": None,
                }
        self._state = state
        self.src_vocab, self.tgt_vocab = (
            Vocab(state["src_itos"]),
            Vocab(state["tgt_itos"]),
        )
        self.bpe = BPE.from_dict(state["bpe"]) if state["bpe"] else None

    def state(self) -> dict[str, Any]:
        return self._state

    # --- data
    def raw(self, split: str) -> tuple[list[str], list[str]]:
        de, en = multi30k.load_split(split, mirror=self.data_dir)
        limit = (
            self.config.train_limit if split == "train" else self.config.eval_limit
        )
        return de[:limit], en[:limit]

    def split(self, name: str) -> Parallel:
        """A split's sentences and tokens
        (``Translator.tokens``: words or byte pairs)."""
        de, en = self.raw(name)
        translator = self.translator(None)
        return Parallel(
            de, en, translator.tokens(de, "de"), translator.tokens(en, "en")
        )

    def encode(self, data: Parallel) -> list[Pair]:
        """Token lists → id pairs (unknown tokens → ``<unk>``)."""
        src, tgt = self.src_vocab, self.tgt_vocab
        return [
            (src.encode(s), tgt.encode(t))
            for s, t in zip(data.src, data.tgt, strict=True)
        ]

    @cached_property
    def train_pairs(self) -> list[Pair]:
        """The training pairs that fit the model's positions."""
        pairs = self.encode(self.split("train"))
        limit = min(self.config.model.max_len, self.config.max_tokens)
        fits = [max(lengths) <= limit for lengths in pair_lengths(pairs)]
        return [pair for pair, ok in zip(pairs, fits, strict=True) if ok]

    @cached_property
    def val(self) -> Parallel:
        return self.split("val")

    @cached_property
    def val_batches(self) -> list[Batch]:
        pairs = self.encode(self.val)
        index = bucket_batches(pair_lengths(pairs), self.config.max_tokens)
        return [make_batch(pairs, i, self.src_vocab) for i in index]

    def batches(self, epoch: int) -> Iterator[Batch]:
        """Length-bucketed (or packed) batches of the training
        pairs, seeded per epoch."""
        pairs, c = self.train_pairs, self.config
        lengths, pool = pair_lengths(pairs), c.pool_size or None
        if c.pack_width:
            for rows in packed_batches(
                lengths, c.max_tokens, c.pack_width, seed=c.seed, epoch=epoch
            ):
                yield make_packed_batch(pairs, rows, self.src_vocab)
            return
        for index in bucket_batches(
            lengths, c.max_tokens, seed=c.seed, epoch=epoch, pool_size=pool
        ):
            yield make_batch(pairs, index, self.src_vocab)

    # --- model and loss
    def build_model(self) -> EncoderDecoder:
        vocabularies = {
            "src_vocab": len(self.src_vocab),
            "tgt_vocab": len(self.tgt_vocab),
        }
        model = Transformer(replace(self.config.model, **vocabularies))
        return tie_weights(model, share_source=True) if self.config.tie else model

    def loss(self, model: nn.Module, batch: Batch) -> tuple[Tensor, Tensor]:
        """Label-smoothed cross-entropy, summed over the
        target tokens, and their count.

        The logits come from ``generator.logits`` so that ``F.cross_entropy`` does
        the fused log-softmax in fp32.
        """
        pad = self.tgt_vocab.stoi["<pad>"]
        return seq2seq_loss(pad, self.config.label_smoothing)(model, batch)

    # --- metrics
    def translator(self, model: nn.Module | None) -> Translator:
        c = self.config
        vocabs = self.src_vocab, self.tgt_vocab
        options = {"lower": c.lower, "max_len": c.model.max_len}
        return Translator(model, *vocabs, bpe=self.bpe, **options)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Validation loss per target token and greedy, tokenized BLEU."""
        val_loss = self.mean_loss(model, self.val_batches)
        bleu = self.scores(model, self.val, beam=1)["tokenized_bleu"]
        return {"val_loss": val_loss, "val_bleu": bleu}

    def scores(
        self,
        model: nn.Module,
        data: Parallel | str,
        beam: int,
        alpha: float | None = None,
    ) -> dict[str, Any]:
        """All scores of a split (or its name) with beam size ``beam`` (1: greedy)
        and length penalty ``alpha`` (None: the config's)."""
        alpha = self.config.alpha if alpha is None else alpha
        check_beam_size(beam)
        check_length_penalty(alpha)
        data = self.split(data) if isinstance(data, str) else data
        translator = self.translator(model)
        with evaluating(model):
            tokens = translator.translate_tokens(data.src, beam, alpha)
        # words: scored as the model wrote them
        words = tokens if self.bpe is None else None
        decoding = {"beam": beam} if beam == 1 else {"beam": beam, "alpha": alpha}
        return {
            **decoding,
            **score([translator.text(t) for t in tokens], data, words),
        }

    def test(self, model: nn.Module) -> dict[str, Any]:
        return {
            "split": "test2016",
            **self.scores(model, "test2016", self.config.beam),
        }

    def predict(
        self,
        model: nn.Module,
        inputs: Sequence[str],
        beam: int = 1,
        alpha: float | None = None,
    ) -> list[str]:
        """English translations; warns (``UnknownTokens``) when a
        word is read as ``<unk>``, and (``BeyondData``) when most of a sentence's
        pieces are unknown."""
        check_texts(inputs, "translate", "sentence")
        alpha = self.config.alpha if alpha is None else alpha
        check_beam_size(beam)
        check_length_penalty(alpha)
        translator = self.translator(model)
        tokens = translator.tokenize(inputs)
        unknown = translator.unknown(tokens)
        if unknown:
            shown = ", ".join(repr(t) for t in unknown[:10]) + (
                " ..." if len(unknown) > 10 else ""
            )
            warnings.warn(
                f"{len(unknown)} token(s) not in the vocabulary, read as <unk>: "
                f"{shown}",
                UnknownTokens,
                stacklevel=2,
            )
        warn_beyond_captions(tokens, self.src_vocab)
        with evaluating(model):
            return [
                translator.text(t)
                for t in translator.translate_tokens(tokens, beam, alpha)
            ]


def warn_beyond_captions(tokens: Sequence[Sequence[str]], vocab: Vocab) -> None:
    """Warn (``BeyondData``) for each sentence most of whose pieces are unknown."""
    for i, pieces in enumerate(tokens, 1):
        warn_beyond_data(
            pieces,
            vocab,
            item=f"sentence {i}",
            unit="pieces",
            data="the German captions it learned from",
        )


class UnknownTokens(UserWarning):
    """Input words that the vocabulary lacks: the model reads them as ``<unk>``."""
