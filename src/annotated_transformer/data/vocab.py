"""A vocabulary: the two-way map between tokens and the integer ids a model embeds.

Replaces torchtext's ``build_vocab_from_iterator`` (torchtext no longer loads on
current PyTorch). Build it from the *training* split only: tokens seen only in
validation or test data must map to ``<unk>``, as they would for new text.

Order is deterministic: the special tokens first, in the order given, then the
other tokens by decreasing frequency, ties broken alphabetically. The same data
always gives the same ids.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")
# BERT's [MASK], reserved after SPECIALS by masked-LM pretraining (tasks.mlm)
MASK = "<mask>"


class Vocab:
    """Tokens ↔ ids. ``itos[i]`` is the token of id i; ``stoi[token]`` its id.

    default: the token whose id stands for unknown tokens in :meth:`encode` (None:
        unknown tokens raise a ValueError instead).
    """

    def __init__(self, itos: Sequence[str], default: str | None = "<unk>") -> None:
        self.itos = list(itos)
        self.stoi = {token: i for i, token in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            duplicates = sorted(t for t, n in Counter(self.itos).items() if n > 1)
            raise ValueError(
                f"a vocabulary lists each token once; repeated: {duplicates[:5]}"
            )
        if default is not None and default not in self.stoi:
            raise ValueError(f"default token {default!r} is not in the vocabulary")
        self.default = default

    @classmethod
    def build(
        cls,
        sentences: Iterable[Sequence[str]],
        specials: Sequence[str] = SPECIALS,
        min_freq: int = 1,
        max_size: int | None = None,
        default: str | None = "<unk>",
    ) -> Vocab:
        """Count the tokens of ``sentences`` (each a list of tokens)
        and keep the frequent ones.

        min_freq: drop tokens seen fewer times; max_size: at most this many entries
            in all, specials included (the rarest tokens go first).
        """
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        if max_size is not None and max_size < len(specials):
            raise ValueError(
                f"max_size={max_size} leaves no room for the {len(specials)} "
                "special tokens"
            )
        counts = Counter(token for sentence in sentences for token in sentence)
        special = set(specials)
        kept = [t for t, n in counts.items() if n >= min_freq and t not in special]
        kept.sort(key=lambda t: (-counts[t], t))  # frequent first, ties by name
        if max_size is not None:
            kept = kept[: max_size - len(specials)]
        return cls([*specials, *kept], default=default)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def __getitem__(self, token: str) -> int:
        """The id of ``token``; the default's id if it is unknown."""
        if token in self.stoi:
            return self.stoi[token]
        if self.default is None:
            raise ValueError(
                f"token {token!r} is not in the vocabulary and it has no default"
            )
        return self.stoi[self.default]

    @property
    def default_index(self) -> int | None:
        return None if self.default is None else self.stoi[self.default]

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Tokens -> ids (unknown tokens -> the default's id)."""
        return [self[token] for token in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Ids -> tokens."""
        tokens = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.itos):
                raise ValueError(
                    f"id {i} is outside the vocabulary of size {len(self.itos)}"
                )
            tokens.append(self.itos[i])
        return tokens

    def save(self, path: str | Path) -> None:
        """Write the vocabulary as JSON: ``{"itos": [...], "default": ...}``."""
        data = {"itos": self.itos, "default": self.default}
        Path(path).write_text(
            json.dumps(data, ensure_ascii=False), encoding="utf-8"
        )

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(data["itos"], default=data["default"])

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)}, default={self.default!r})"
