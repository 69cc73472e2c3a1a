"""Greedy decoding: with the key/value cache against recomputing.

64 random source sentences of 10-30 tokens, decoded to 30 tokens (no end symbol, so
every sentence runs the full length) by an untrained small model (3+3 layers,
d_model 256, d_ff 1024, 8 heads, vocabulary 8000); speed does not depend on the
weights. Also beam search (4 beams, cached). Prints sentences/s and checks that
cached and recomputed outputs agree.

    # full run: well under a minute
    PYTHONPATH=src python benchmarks/decoding.py
    # smoke run: 8 sentences, 10 tokens
    PYTHONPATH=src python benchmarks/decoding.py --quick
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch

from annotated_transformer.blocks.masks import padding_mask
from annotated_transformer.evaluation.decoding import beam_search, greedy_decode
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
)

VOCAB, PAD, START, END = 8000, 0, 1, 2


def timed(
    fn: Callable[..., torch.Tensor], *args: Any, **kwargs: Any
) -> tuple[torch.Tensor, float]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    if out.is_cuda:
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 8 sentences, 10 tokens"
    )
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu"
    )
    args = parser.parse_args()
    n, max_len = (8, 10) if args.quick else (64, 30)
    device = torch.device(args.device)

    torch.manual_seed(0)
    model = (
        Transformer(
            TransformerConfig(VOCAB, VOCAB, N=3, d_model=256, d_ff=1024, h=8)
        )
        .to(device)
        .eval()
    )
    gen = torch.Generator().manual_seed(1)
    lengths = torch.randint(10, 31, (n,), generator=gen)
    src = torch.full((n, int(lengths.max())), PAD)
    for i, length in enumerate(lengths.tolist()):
        src[i, :length] = torch.randint(3, VOCAB, (length,), generator=gen)
    src = src.to(device)
    mask = padding_mask(src, PAD)
    greedy_decode(model, src[:2], mask[:2], 3, START)  # warm-up

    cached, t_cached = timed(
        greedy_decode, model, src, mask, max_len, START, use_cache=True
    )
    plain, t_plain = timed(
        greedy_decode, model, src, mask, max_len, START, use_cache=False
    )
    _, t_beam = timed(
        beam_search, model, src, mask, max_len, START, END, beam_size=4
    )
    assert torch.equal(cached, plain), "cached and recomputed greedy outputs differ"

    threads = f", {torch.get_num_threads()} threads" if device.type == "cpu" else ""
    print(
        f"greedy decoding, {n} sources of 10-30 tokens, {max_len} tokens, "
        f"{device}{threads}"
    )
    print(f"{'method':28} {'sentences/s':>12} {'speed-up':>9}")
    for name, seconds in [
        ("greedy, recompute prefix", t_plain),
        ("greedy, key/value cache", t_cached),
        ("beam search (4), cache", t_beam),
    ]:
        print(f"{name:28} {n / seconds:12.1f} {t_plain / seconds:9.2f}")


if __name__ == "__main__":
    main()
