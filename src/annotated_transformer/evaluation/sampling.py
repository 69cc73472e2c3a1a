"""Sampling text from a decoder-only language model: temperature
and top-k, with a KV cache.

At each step the model scores the next byte given the text
so far, and we draw it from

    p(x) ∝ exp(logit(x) / T)  over the k most likely bytes (top-k), 0 elsewhere.

T < 1 sharpens the distribution (safer, more repetitive text), T > 1 flattens it
(more surprising, more errors); T → 0 would be greedy decoding. Top-k removes the
long tail of unlikely bytes, each rare on its own but together likely enough to
derail a sample.

With ``use_cache=True`` the prompt is run once and each later step feeds only the
newest byte (its keys/values join the per-block
:class:`~annotated_transformer.blocks.kv_cache.KVCache`); ``use_cache=False``
re-runs the whole context every step: slower, and the reference the cached path is
tested against. Both see exactly the same context (see :func:`context_start`).

The model has learned positions only up to ``max_len``. A longer prompt is cut to
its last ``max_len`` bytes; when the text outgrows the window, the context is cut to
its last ``max_len // 2`` bytes (the cache is rebuilt from them), so the model
always sees at least half a window of context and the cache is refilled rarely.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from annotated_transformer.blocks.embeddings import check_ids
from annotated_transformer.models.decoder_only import DecoderLM
from annotated_transformer.models.eval_mode import evaluating


def context_start(total: int, start: int, max_len: int) -> int:
    """Where the model's context begins when the text has ``total`` bytes.

    Keep ``start`` while the context ``total - start`` fits in ``max_len``;
    otherwise start again from the last ``max_len // 2`` bytes, so the cache is
    rebuilt only every ``max_len // 2`` steps and the model never has less than half
    a window of context.
    """
    if total - start <= max_len:
        return start
    return total - max(max_len // 2, 1)


def next_byte_distribution(
    logits: Tensor, temperature: float = 1.0, top_k: int | None = None
) -> Tensor:
    """Probabilities (batch, vocab) of the next byte from its logits (batch, vocab),
    cooled by ``temperature`` and cut to the ``top_k`` likeliest."""
    scaled = logits.float() / temperature
    if top_k is not None and top_k < scaled.size(-1):
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (batch, 1)
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return scaled.softmax(dim=-1)


# The lowest temperature: already as good as always the likeliest byte, where the
# logits divided by a tiny one would overflow float32 to inf (and softmax to NaN).
COLDEST = 1e-3


def check_sampling(temperature: float, top_k: int | None, length: int) -> None:
    """Raise a ValueError for a temperature below :data:`COLDEST`, a
    top-k ≤ 0 or a negative length."""
    if not temperature >= COLDEST:
        raise ValueError(
            f"temperature must be >= {COLDEST}, got {temperature}; use e.g. 0.5 "
            "(conservative) to 1.0 (the model's own distribution), or top_k=1 for "
            "the likeliest byte every time"
        )
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1 (or None for no cut), got {top_k}")
    if length < 0:
        raise ValueError(f"length must be >= 0 new bytes, got {length}")


def left_pad(
    prompts: Sequence[Sequence[int]],
    pad: int = 0,
) -> tuple[Tensor, Tensor]:
    """Prompts of different lengths as one batch for :func:`sample`, padded left.

    returns ids (batch, longest) with ``pad`` before the shorter prompts, and their
    mask, bool (batch, longest), False at the padding
    """
    if not prompts or min(map(len, prompts)) < 1:
        raise ValueError("give at least one prompt, each of at least one token")
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts])
    lengths = torch.tensor([len(p) for p in prompts])
    return ids, torch.arange(width) >= (width - lengths).unsqueeze(1)


def sample(
    model: DecoderLM,
    prompt: Tensor,
    length: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    mask: Tensor | None = None,
) -> Tensor:
    """Continue ``prompt`` (batch, prompt_len) by ``length`` sampled bytes.

    generator: a seeded ``torch.Generator`` on the model's device
        makes the draw reproducible.
    mask: bool (batch, prompt_len), False at the padding on the left of shorter
    prompts (prompts of different lengths in one batch, :func:`left_pad`; the
    model's forward takes ``mask``): each row is continued as if its prompt were
    alone. Rows are cropped together, so a padded row sees fewer tokens of context
    than the window holds.
    returns (batch, prompt_len + length): the prompt followed by the new bytes.
    The model runs in eval mode (no dropout) and is put back in
    its former mode afterwards.
    """
    check_sampling(temperature, top_k, length)
    if prompt.dim() != 2 or prompt.size(1) < 1:
        raise ValueError(
            "prompt must be (batch, prompt_len >= 1) byte ids, got "
            f"{tuple(prompt.shape)}: the model needs at least one byte to "
            "condition on"
        )
    check_ids(prompt, model.vocab)  # once, not in every forward pass
    if mask is not None:
        like_prompt = (mask.dtype, mask.shape) == (torch.bool, prompt.shape)
        if not like_prompt or not mask[:, -1].all():
            raise ValueError(
                f"mask must be bool {tuple(prompt.shape)} like the prompt, False "
                "only at padding on the left (every prompt's last place is a token)"
            )
    with evaluating(model):
        text = prompt.to(next(model.parameters()).device)
        real = None if mask is None else mask.to(text.device)  # (batch, text_len)
        # A long prompt: its end.
        start, cache = max(0, text.size(1) - model.max_len), None
        for _ in range(length):
            new_start = context_start(text.size(1), start, model.max_len)
            # the mask covers the context, cached places included
            padding = {} if real is None else {"mask": real[:, new_start:]}
            if not use_cache:
                logits = model(text[:, new_start:], **padding)
            elif cache is None or new_start != start:
                cache = model.new_cache()  # (re)fill: run the whole context once
                logits = model(text[:, new_start:], cache, **padding)
            else:
                logits = model(text[:, -1:], cache, **padding)  # the newest byte
            start = new_start
            # (batch, vocab), then (batch, 1)
            probs = next_byte_distribution(logits[:, -1], temperature, top_k)
            next_byte = torch.multinomial(probs, 1, generator=generator)
            text = torch.cat([text, next_byte], dim=1)
            if real is not None:  # the new byte is a token
                real = torch.cat([real, next_byte >= 0], dim=1)
    return text


def encode(text: str) -> Tensor:
    """A string's UTF-8 bytes as ids (1, n_bytes)."""
    return torch.tensor([list(text.encode("utf-8"))], dtype=torch.long)


def decode(ids: Tensor) -> str:
    """Byte ids (n,) back to text; bytes that are not valid UTF-8 become U+FFFD."""
    return bytes(ids.tolist()).decode("utf-8", errors="replace")
