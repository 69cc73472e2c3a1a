"""Chapter 03 exercises (Tokens and embeddings): fill in each function.

Grade your answers from the repository's root with
    make exercises CHAPTER=03
or  python -m annotated_transformer.exercises 03
"""

from collections import Counter

from torch import Tensor


def count_pairs(corpus: dict[tuple[str, ...], int]) -> Counter:
    """BPE's step 2: how often each pair of adjacent symbols occurs.

    corpus: each word, spelled as a tuple of symbols -> how often it occurs
    returns Counter {(left, right): count}, each pair weighted by its word's
    count
    """
    raise NotImplementedError


def apply_merges(word: list[str], merges: list[tuple[str, str]]) -> list[str]:
    """BPE encoding: replay the learned merges, in order, on one word.

    word: its symbols, e.g. ["▁", "l", "o", "w"]; merges: in the order learned
    returns the symbols after every merge (each merge joins every occurrence
    of its pair, left to right)
    """
    raise NotImplementedError


def scaled_embedding(ids: Tensor, table: Tensor) -> Tensor:
    """The Transformer's token embedding: each id's row, times √d_model.

    ids: integer (batch, len); table: (vocab, d_model)
    returns (batch, len, d_model)
    """
    raise NotImplementedError


def frame_signal(signal: Tensor, size: int, hop: int) -> Tensor:
    """Cut a 1-d signal into overlapping frames, the tokens of an audio model.

    signal: (n,); frames of ``size`` samples starting every ``hop`` samples
    returns (n_frames, size), n_frames = 1 + (n - size) // hop; a tail too
    short for a whole frame is dropped
    """
    raise NotImplementedError
