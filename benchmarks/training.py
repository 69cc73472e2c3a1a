"""Training-step throughput: this package's model against ``torch.nn.Transformer``.

One step = forward, label-smoothed cross-entropy, backward and an Adam update, on a
batch of 64 random sentence pairs of 10-30 tokens (vocabulary 8000). Sizes: small
(3+3 layers, d_model 256, d_ff 1024, 8 heads) and base (6+6, 512, 2048, 8);
precisions fp32 and bf16 autocast. Each configuration runs in a fresh process so
that its peak memory is its own (CPU: peak resident set above what importing torch
takes; CUDA: ``max_memory_allocated``). Prints target tokens/s and the
package/PyTorch ratio.

    # full run: a few minutes on a CPU
    PYTHONPATH=src python benchmarks/training.py
    # smoke run: small size, batch 4
    PYTHONPATH=src python benchmarks/training.py --quick
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.blocks.masks import make_std_mask, padding_mask
from annotated_transformer.blocks.positional import PositionalEncoding
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
)

SIZES = {"small": (3, 256, 1024, 8), "base": (6, 512, 2048, 8)}
VOCAB, PAD, SMOOTHING = 8000, 0, 0.1


class TorchTransformer(nn.Module):
    """The same model from PyTorch's own modules (pre-norm, like the package)."""

    def __init__(self, N: int, d_model: int, d_ff: int, h: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.src_embed, self.tgt_embed = (
            nn.Embedding(VOCAB, d_model),
            nn.Embedding(VOCAB, d_model),
        )
        self.position = PositionalEncoding(d_model, 0.1)
        self.transformer = nn.Transformer(
            d_model, h, N, N, d_ff, dropout=0.1, batch_first=True, norm_first=True
        )
        self.proj = nn.Linear(d_model, VOCAB)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        scale = math.sqrt(self.d_model)
        causal = nn.Transformer.generate_square_subsequent_mask(
            tgt.size(1), dtype=torch.bool
        )
        out = self.transformer(
            self.position(self.src_embed(src) * scale),
            self.position(self.tgt_embed(tgt) * scale),
            tgt_mask=causal.to(src.device),
            src_key_padding_mask=src == PAD,  # True = padding, PyTorch's convention
            tgt_key_padding_mask=tgt == PAD,
            memory_key_padding_mask=src == PAD,
        )
        return self.proj(out)


def random_batch(n: int, device: torch.device, gen: torch.Generator) -> tuple:
    """n pairs of 10-30 tokens each side, padded: (src, tgt) with
    tgt starting at <s> = 1."""
    lengths = torch.randint(10, 31, (2, n), generator=gen)
    src = torch.full((n, int(lengths[0].max())), PAD)
    tgt = torch.full((n, int(lengths[1].max()) + 1), PAD)
    for i in range(n):
        src[i, : lengths[0, i]] = torch.randint(
            3, VOCAB, (int(lengths[0, i]),), generator=gen
        )
        tgt[i, 0] = 1
        tgt[i, 1 : lengths[1, i] + 1] = torch.randint(
            3, VOCAB, (int(lengths[1, i]),), generator=gen
        )
    return src.to(device), tgt.to(device)


def peak_rss_mb() -> float:
    return (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    )  # Linux reports KiB


def run_one(
    impl: str, size: str, precision: str, device: str, batch: int, steps: int
) -> dict:
    baseline = peak_rss_mb()  # torch imported, nothing built yet
    torch.manual_seed(0)
    dev = torch.device(device)
    N, d_model, d_ff, h = SIZES[size]
    if impl == "package":
        model = Transformer(
            TransformerConfig(VOCAB, VOCAB, N, d_model, d_ff, h, dropout=0.1)
        )
        model = model.to(dev)

        def logits(src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
            out = model(src, tgt, padding_mask(src, PAD), make_std_mask(tgt, PAD))
            return model.generator.logits(out)
    else:
        model = TorchTransformer(N, d_model, d_ff, h).to(dev)
        logits = model
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    gen = torch.Generator().manual_seed(1)
    batches = [random_batch(batch, dev, gen) for _ in range(steps + 1)]

    def step(src: torch.Tensor, tgt: torch.Tensor) -> int:
        with torch.autocast(
            dev.type, dtype=torch.bfloat16, enabled=precision == "bf16"
        ):
            out = logits(src, tgt[:, :-1])
            loss = F.cross_entropy(
                out.float().reshape(-1, VOCAB), tgt[:, 1:].reshape(-1),
                ignore_index=PAD, label_smoothing=SMOOTHING,
            )  # fmt: skip
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return int((tgt[:, 1:] != PAD).sum())

    step(*batches[0])  # warm-up: allocations, kernel selection
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start, tokens = time.perf_counter(), 0
    for src, tgt in batches[1:]:
        tokens += step(src, tgt)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_mb = peak_rss_mb() - baseline
    return {
        "tokens_per_s": tokens / (time.perf_counter() - start),
        "peak_mb": peak_mb,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: small, batch 4, 1 step"
    )
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument(
        "--steps", type=int, default=5, help="timed steps per configuration"
    )
    parser.add_argument(
        "--precisions",
        default="fp32,bf16",
        help="comma-separated; e.g. fp32 alone on a CPU without fast bf16 "
        "(AVX2-only x86)",
    )
    parser.add_argument(
        "--one",
        nargs=3,
        metavar=("IMPL", "SIZE", "PRECISION"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args()
    batch, steps = (4, 1) if args.quick else (64, args.steps)
    if args.one:
        print(json.dumps(run_one(*args.one, args.device, batch, steps)))
        return

    where = f"{args.device}" + (
        "" if args.device != "cpu" else f", {torch.get_num_threads()} threads"
    )
    print(
        f"training step (fwd+bwd+Adam), {batch} pairs of 10-30 tokens, vocab "
        f"{VOCAB}, {where}"
    )
    print(f"{'size':6} {'precision':9} {'package tok/s':>14} {'torch tok/s':>12} "
          f"{'ratio':>6} {'package MB':>11} {'torch MB':>9}")  # fmt: skip
    for size in ["small"] if args.quick else SIZES:
        for precision in args.precisions.split(","):
            res = {}
            for impl in ("package", "torch"):
                quick = ["--quick"] if args.quick else []
                cmd = [sys.executable, __file__, "--one", impl, size, precision,
                       "--device", args.device, *quick]  # fmt: skip
                cmd += ["--steps", str(args.steps)]
                out = subprocess.run(
                    cmd, capture_output=True, text=True, check=True
                ).stdout
                res[impl] = json.loads(out.strip().splitlines()[-1])
            p, t = res["package"], res["torch"]
            ratio = p["tokens_per_s"] / t["tokens_per_s"]
            print(f"{size:6} {precision:9} {p['tokens_per_s']:14.0f} "
                  f"{t['tokens_per_s']:12.0f} {ratio:6.2f} {p['peak_mb']:11.0f} "
                  f"{t['peak_mb']:9.0f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
