"""Block-sparse against dense causal attention: time and peak memory.

From n = 512 to 8192.

One attention call, forward and backward, on random (batch 1, heads, n,
d_k) queries, keys and values, fp32, one thread, for four implementations
of causal self-attention:

- ``explicit``: the textbook softmax(Q Kᵀ / √d_k) V with the causal mask, an (n, n)
  score matrix per head (time and memory ∝ n²);
- ``sdpa``: PyTorch's fused ``scaled_dot_product_attention(is_causal=True)`` (its
  CPU flash kernel never stores the (n, n) matrix: memory ∝ n, time still ∝ n²);
- ``strided`` and ``fixed``:
  :func:`annotated_transformer.blocks.sparse_attention.sparse_attention` under the
  two patterns' unions, stride l = the smallest power of two ≥ √n and c = 4
  summary positions (each query reads about 2l + n/l, resp. l + 4n/l keys: time
  and memory ∝ n√n).

Every length is measured for all four in turn (ratios in one run, on the same load):
the median of ``repeats`` timed calls after one warm-up, then the peak of the
PyTorch allocator during one more call
(:func:`annotated_transformer.training.memory.allocator_peak`: what the call
allocates beyond its inputs). Prints a Markdown table; ``--csv`` also writes the
rows.

    # 512 … 8192
    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/sparse.py
    # 128 … 512
    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/sparse.py --quick
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from annotated_transformer.blocks.sparse_attention import (
    Fixed,
    Strided,
    sparse_attention,
)
from annotated_transformer.training.memory import allocator_peak

LENGTHS = (512, 1024, 2048, 4096, 8192)
QUICK_LENGTHS = (128, 256, 512)
SUMMARY = 4  # c, the fixed pattern's summary positions per block
Attention = Callable[[Tensor, Tensor, Tensor], Tensor]


def stride_for(n: int) -> int:
    """The smallest power of two >= √n (it divides n when n is a power of two)."""
    return 2 ** math.ceil(math.log2(n) / 2)


def explicit_causal(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    n = q.size(-2)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(
        ~causal, -math.inf
    )
    return scores.softmax(-1) @ v


def attentions(n: int) -> dict[str, Attention]:
    """The four implementations at length n."""
    l = stride_for(n)  # the paper's name
    return {
        "explicit": explicit_causal,
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, is_causal=True
        ),
        "strided": lambda q, k, v: sparse_attention(q, k, v, Strided(l)),
        "fixed": lambda q, k, v: sparse_attention(q, k, v, Fixed(l, SUMMARY)),
    }


def measure(
    attention: Attention, n: int, heads: int, d_k: int, repeats: int
) -> tuple[float, int]:
    """(median seconds, peak allocated bytes) of one
    forward + backward at length n."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, d_k, requires_grad=True) for _ in range(3))
    grad = torch.randn(1, heads, n, d_k)

    def step() -> None:
        attention(q, k, v).backward(grad)
        q.grad = k.grad = v.grad = None

    step()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times), allocator_peak(step)


def benchmark(
    lengths: tuple[int, ...], heads: int, d_k: int, repeats: int
) -> pd.DataFrame:
    """One row per (length, implementation): ms, peak MiB, and
    both relative to ``sdpa``."""
    rows = []
    for n in lengths:
        for name, attention in attentions(n).items():
            seconds, peak = measure(attention, n, heads, d_k, repeats)
            rows.append(
                {
                    "n": n,
                    "attention": name,
                    "ms": seconds * 1e3,
                    "MiB": peak / 2**20,
                }
            )
    table = pd.DataFrame(rows)
    sdpa = table[table.attention == "sdpa"].set_index("n")
    table["time / sdpa"] = table.ms / table.n.map(sdpa.ms)
    table["memory / sdpa"] = table.MiB / table.n.map(sdpa.MiB)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="lengths 128, 256, 512"
    )
    parser.add_argument(
        "--lengths", help="comma-separated powers of two (default 512…8192)"
    )
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--d-k", type=int, default=64)
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed calls per measurement"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads (default one)"
    )
    parser.add_argument("--csv", help="also write the rows to this CSV file")
    args = parser.parse_args()
    lengths = QUICK_LENGTHS if args.quick else LENGTHS
    if args.lengths:
        lengths = tuple(int(n) for n in args.lengths.split(","))
    bad = [n for n in lengths if n < 4 or n & (n - 1)]
    if bad:
        parser.error(
            f"--lengths {bad}: use powers of two >= 4 (the stride must divide n)"
        )
    for name in ("heads", "d_k", "repeats", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer")
    torch.set_num_threads(args.threads)
    print(
        f"causal self-attention forward+backward, CPU, {torch.get_num_threads()} "
        f"thread(s), torch {torch.__version__}: batch 1, {args.heads} heads, d_k "
        f"{args.d_k}, fp32, median of {args.repeats}; sparse: stride = 2^⌈log₂ "
        f"√n⌉, c = {SUMMARY}\n"
    )
    table = benchmark(lengths, args.heads, args.d_k, args.repeats)
    print(table.to_markdown(index=False, floatfmt=".3g"))
    if args.csv:
        table.to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
