"""Explicit vs fused multi-head attention: forward + backward time.

And peak GPU memory on CUDA.

``CachedAttention`` (the runner's multi-head attention) runs the textbook
matmul → softmax → matmul (``keep_attention = True``, which stores the
(batch, h, len, len) weights) or
PyTorch's fused ``scaled_dot_product_attention``. This measures both on
self-attention over random inputs for growing sequence lengths and prints a Markdown
table.

    # CPU, lengths 64 … 1024
    python benchmarks/attention.py
    # adds peak memory per iteration
    python benchmarks/attention.py --device cuda
    # two lengths, few repeats (a smoke run)
    python benchmarks/attention.py --quick
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import torch

from annotated_transformer.blocks.attention import CachedAttention

LENGTHS = (64, 128, 256, 512, 1024)
QUICK_LENGTHS = (64, 256)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    step: Callable[[], None], device: torch.device, warmup: int, repeats: int
) -> tuple[float, float | None]:
    """Run ``step`` warmup times untimed, then ``repeats`` times;
    return (ms per step, peak MiB).

    Peak memory is CUDA's ``max_memory_allocated`` during the
    timed steps (None on CPU).
    """
    for _ in range(warmup):
        step()
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    _sync(device)
    elapsed_ms = (time.perf_counter() - start) * 1000 / repeats
    peak = (
        torch.cuda.max_memory_allocated(device) / 2**20
        if device.type == "cuda"
        else None
    )
    return elapsed_ms, peak


def make_step(
    mha: CachedAttention,
    x: torch.Tensor,
    grad: torch.Tensor,
    keep_attention: bool,
) -> Callable[[], None]:
    """One forward + backward pass of self-attention over
    ``x`` on the chosen path."""

    def step() -> None:
        mha.keep_attention = keep_attention
        mha(x, x, x).backward(grad)
        mha.attn = None  # free the kept weights before the next step
        mha.zero_grad(set_to_none=True)
        x.grad = None

    return step


def benchmark(
    device: torch.device,
    lengths: tuple[int, ...],
    batch: int,
    d_model: int,
    heads: int,
    warmup: int,
    repeats: int,
) -> list[dict[str, float | None]]:
    """One row per sequence length: ms per forward+backward step and
    peak MiB for both paths."""
    torch.manual_seed(0)
    # Dropout 0 keeps SDPA on its fast kernel and makes both paths
    # compute the same function.
    mha = CachedAttention(heads, d_model, dropout=0.0).to(device)
    rows = []
    for length in lengths:
        x = torch.randn(batch, length, d_model, device=device, requires_grad=True)
        grad = torch.randn(batch, length, d_model, device=device)
        row: dict[str, float | None] = {"length": length}
        for name, keep in (("explicit", True), ("fused", False)):
            step = make_step(mha, x, grad, keep)
            row[f"{name} ms"], row[f"{name} MiB"] = measure(
                step, device, warmup, repeats
            )
        rows.append(row)
    return rows


def markdown_table(rows: list[dict[str, float | None]], with_memory: bool) -> str:
    header = ["seq len", "explicit ms/iter", "fused ms/iter", "speed-up"]
    if with_memory:
        header += ["explicit peak MiB", "fused peak MiB"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for row in rows:
        cells = [
            f"{row['length']}",
            f"{row['explicit ms']:.2f}",
            f"{row['fused ms']:.2f}",
            f"{row['explicit ms'] / row['fused ms']:.2f}×",
        ]
        if with_memory:
            cells += [f"{row['explicit MiB']:.0f}", f"{row['fused MiB']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--quick", action="store_true", help="lengths 64 and 256, 2 repeats"
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument(
        "--repeats", type=int, default=None, help="timed steps per measurement"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="CPU threads (default: all cores; use fewer on a machine shared with "
        "other jobs, where idle-spinning threads slow every step down)",
    )
    args = parser.parse_args(argv)

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error(
            "--device cuda asked for, but this PyTorch sees no CUDA GPU; use "
            "--device cpu"
        )
    for name in ("batch", "d_model", "heads", "threads"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer")
    if args.d_model % args.heads:
        parser.error(
            f"--d-model {args.d_model} is not divisible by --heads {args.heads}"
        )
    if args.repeats is not None and args.repeats <= 0:
        parser.error("--repeats must be a positive integer")

    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    lengths = QUICK_LENGTHS if args.quick else LENGTHS
    repeats = args.repeats or (
        2 if args.quick else (20 if device.type == "cuda" else 5)
    )
    warmup = 1 if args.quick else 3

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    threads = f", {torch.get_num_threads()} threads" if device.type == "cpu" else ""
    print(
        f"CachedAttention forward+backward on {name}{threads}, torch "
        f"{torch.__version__}: batch {args.batch}, d_model {args.d_model}, "
        f"{args.heads} heads, fp32, {warmup} warm-up + {repeats} timed steps\n"
    )
    rows = benchmark(
        device, lengths, args.batch, args.d_model, args.heads, warmup, repeats
    )
    print(markdown_table(rows, with_memory=device.type == "cuda"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
