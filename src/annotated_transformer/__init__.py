"""Transformers from Scratch: the package the book's chapters import.

One module per idea, in layers from the bottom up, each importing only the
layers below it (``tests/test_layout.py`` checks):

- ``paths`` and ``files``: where the data and caches are; files written
  atomically;
- ``blocks/``: attention, masks, embeddings, positions, norms, feed-forwards,
  caches, the encoder and decoder layers;
- ``models/``: whole models (the paper's encoder-decoder, decoder-only and
  encoder-only ones), beside ``data/``: corpora, tokenizers, vocabularies,
  batches;
- ``training/``: the trainer, loss, schedules, checkpoints, many processes;
- ``evaluation/``: metrics, decoding, sampling;
- ``tasks/``: what the runner trains (translation, classification, language
  models);
- ``runner``, ``records``, ``finished`` and ``machine``: runs, their records, a
  finished run read back, provenance;
- ``cli``, ``doctor`` and ``__main__``: the command lines;
- ``book/`` and ``exercises/``: the chapters' machinery, the graded exercises.

The names a reader knows from the Annotated Transformer are importable from here
(``from annotated_transformer import make_model, greedy_decode``). Each is loaded
from its module on first use (PEP 562), so ``import annotated_transformer``
itself imports nothing, torch included: the doctor checks torch before loading
it, and ``python -m annotated_transformer`` handles Ctrl-C from the start.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (15 ms)
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

# Each name's module, below this package.
_EXPORTS = {
    "attention": "blocks.attention",
    "MultiHeadedAttention": "blocks.attention",
    "subsequent_mask": "blocks.masks",
    "Embeddings": "blocks.embeddings",
    "PositionalEncoding": "blocks.positional",
    "LayerNorm": "blocks.norms",
    "PositionwiseFeedForward": "blocks.feed_forward",
    "clones": "blocks.layers",
    "SublayerConnection": "blocks.layers",
    "EncoderLayer": "blocks.layers",
    "Encoder": "blocks.layers",
    "DecoderLayer": "blocks.layers",
    "Decoder": "blocks.layers",
    "EncoderDecoder": "models.encoder_decoder",
    "Generator": "models.encoder_decoder",
    "make_model": "models.encoder_decoder",
    "LabelSmoothing": "training.loss",
    "Batch": "data.batching",
    "greedy_decode": "evaluation.decoding",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """An exported name, imported from its module the first time it is asked for."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value  # later look-ups find it without calling this
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
