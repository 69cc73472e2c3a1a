"""Key/value-cache memory and decoding speed of three attention kinds.

Multi-head, grouped-query and multi-query attention.

Today's block (``modern.ModernDecoderLM``) at the paper's base size (N=6, d_model
512, 8 heads, SwiGLU of the 2048 feed-forward's parameter count), untrained (speed
and memory do not depend on the weights), over a byte vocabulary. For kv_heads 8
(multi-head), 2 (grouped-query) and 1 (multi-query): the cache's bytes per token,
from the formula 2 (keys and values) · N · kv_heads · d_k · bytes per number and
measured on the cache tensors after decoding, and sampling speed with the cache (a
batch of prompts, new bytes per second).

    # full run: about a minute per row
    PYTHONPATH=src python benchmarks/kv_cache.py
    # smoke run: small batch, few bytes
    PYTHONPATH=src python benchmarks/kv_cache.py --quick
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
import torch

from annotated_transformer.blocks.feed_forward import swiglu_width
from annotated_transformer.blocks.kv_cache import cache_bytes
from annotated_transformer.evaluation.sampling import sample
from annotated_transformer.models.modern_decoder import (
    ModernConfig,
    ModernDecoderLM,
)

N, D_MODEL, HEADS, D_FF = 6, 512, 8, 2048


def filled_cache_bytes(model: ModernDecoderLM, prompt: torch.Tensor) -> int:
    """Bytes held by a cache filled with ``prompt``'s keys and values (measured)."""
    cache = model.new_cache()
    with torch.inference_mode():
        model(prompt, cache)
    return cache_bytes(cache)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: batch 2, 8 bytes"
    )
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument(
        "--new", type=int, default=64, help="bytes sampled per prompt"
    )
    args = parser.parse_args()
    batch, new, prompt_len = (
        (2, 8, 16) if args.quick else (args.batch, args.new, 64)
    )
    rows = []
    for kv_heads, name in (
        (8, "multi-head"),
        (2, "grouped-query"),
        (1, "multi-query"),
    ):
        torch.manual_seed(0)
        model = ModernDecoderLM(
            ModernConfig(
                256,
                D_MODEL,
                HEADS,
                N,
                max_len=1024,
                d_ff=swiglu_width(D_FF),
                kv_heads=kv_heads,
            )
        ).eval()
        prompt = torch.randint(0, 256, (batch, prompt_len))
        measured = filled_cache_bytes(model, prompt) / (batch * prompt_len)
        formula = 2 * N * kv_heads * (D_MODEL // HEADS) * 4  # fp32
        sample(
            model, prompt, 2, generator=torch.Generator().manual_seed(0)
        )  # warm-up
        start = time.perf_counter()
        sample(model, prompt, new, generator=torch.Generator().manual_seed(0))
        seconds = time.perf_counter() - start
        rows.append({
            "attention": f"{name} (kv_heads={kv_heads})",
            "parameters": sum(p.numel() for p in model.parameters()),
            "cache bytes/token (formula)": formula,
            "cache bytes/token (measured)": measured,
            "new bytes/s": batch * new / seconds,
        })  # fmt: skip
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    base = table["new bytes/s"].iloc[0]
    table["speed vs multi-head"] = (table["new bytes/s"] / base).round(2)
    print(f"N={N}, d_model={D_MODEL}, {HEADS} heads, batch {batch}, "
          f"prompt {prompt_len}, {new} new bytes, "
          f"{torch.get_num_threads()} thread(s), fp32")  # fmt: skip
    print(table.round(1).to_string(index=False))


if __name__ == "__main__":
    main()
