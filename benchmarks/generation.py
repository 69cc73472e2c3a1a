"""Generation speed of the byte model with and without the key/value cache.

    python benchmarks/generation.py          # 256 new bytes after a 64-byte prompt
    python benchmarks/generation.py --quick  # 64 new bytes after a 16-byte prompt

Without the cache, step t re-runs the whole context (O(t) positions per step, O(n²)
in all); with it, each step runs one position against the cached keys/values. The
two produce the same bytes (checked here, and in tests/test_sampling.py). Prints new
bytes per second per setting and the speed-up; numbers depend on the machine and its
load.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
import torch

from annotated_transformer.evaluation.sampling import sample
from annotated_transformer.models.decoder_only import DecoderLM
from annotated_transformer.tasks.base import with_settings
from annotated_transformer.tasks.lm import PRESETS


def time_sampling(
    model: DecoderLM, prompt: torch.Tensor, length: int, use_cache: bool
) -> tuple[float, torch.Tensor]:
    """Seconds to sample ``length`` bytes (best of 2 runs, after a
    warm-up) and the bytes."""
    best, out = float("inf"), None
    for _ in range(3):
        generator = torch.Generator(prompt.device).manual_seed(0)
        start = time.perf_counter()
        out = sample(
            model, prompt, length, generator=generator, use_cache=use_cache
        )
        if prompt.is_cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="short prompt and sample (CI)"
    )
    parser.add_argument(
        "--preset", default="cpu", choices=list(PRESETS), help="model size"
    )
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    prompt_len, length = (16, 64) if args.quick else (64, 256)
    torch.manual_seed(0)
    config = with_settings(PRESETS[args.preset], {"max_len": prompt_len + length})
    model = DecoderLM(config.model).to(args.device).eval()
    rows = []
    for batch in (1, 16):
        prompt = torch.randint(0, 256, (batch, prompt_len), device=args.device)
        seconds = {}
        outputs = {}
        for use_cache in (False, True):
            seconds[use_cache], outputs[use_cache] = time_sampling(
                model, prompt, length, use_cache
            )
        if not torch.equal(outputs[False], outputs[True]):
            raise AssertionError(
                "cached and recomputed sampling gave different bytes"
            )
        rows.append({
            "batch": batch, "prompt": prompt_len, "new bytes": length,
            "recompute bytes/s": batch * length / seconds[False],
            "cached bytes/s": batch * length / seconds[True],
            "speed-up": seconds[False] / seconds[True],
        })  # fmt: skip
    m = config.model
    shape = f"N={m.N}, d_model={m.d_model}, max_len={m.max_len}"
    print(f"model: preset {args.preset!r} ({shape}), device {args.device}")
    print(
        pd.DataFrame(rows).to_string(
            index=False, float_format=lambda v: f"{v:,.1f}"
        )
    )


if __name__ == "__main__":
    main()
