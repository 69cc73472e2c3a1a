"""Training memory: the formula of ``memory`` against the measured peak.

One step = forward, loss, backward and an Adam update (the second step is measured,
so that Adam's moments exist), on random tokens, fp32, dropout 0.1 (the math
attention kernel) and 0 (the flash kernel). Models: the decoder-only LM (vocabulary
256, bytes) and the encoder-decoder (vocabulary 8000, source and target both
``length`` long), d_ff = 4·d_model, h = d_model / 64.
CPU: bytes held before the step plus the PyTorch profiler's allocator peak during
it; CUDA: ``torch.cuda.max_memory_allocated``. Prints predicted and measured MiB and
their ratio, then the bytes per device of the paper's base and big models under DDP
and FSDP.

    # full grid: about a minute on one core
    PYTHONPATH=src python benchmarks/memory.py
    # two small sizes
    PYTHONPATH=src python benchmarks/memory.py --quick
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch

from annotated_transformer.models.decoder_only import DecoderLM
from annotated_transformer.models.encoder_decoder import Transformer
from annotated_transformer.training.memory import (
    measured_training_memory,
    sharding_table,
    training_memory,
)

VOCAB = {DecoderLM: 256, Transformer: 8000}
# (d_model, N, length, batch)
FULL = [
    (128, 2, 64, 8),
    (256, 2, 256, 8),
    (256, 4, 64, 32),
    (512, 2, 64, 8),
    (512, 4, 256, 8),
]
QUICK = [(128, 2, 64, 8), (256, 2, 64, 8)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small sizes only")
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads (default one)"
    )
    parser.add_argument(
        "--world-size", type=int, default=8, help="devices for the FSDP table"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    print(
        f"training step (fwd+bwd+Adam), fp32, {args.device}"
        + (f", {args.threads} thread(s)" if args.device == "cpu" else "")
    )
    print(
        f"{'model':11} {'d_model':>7} {'N':>2} {'len':>4} {'batch':>5} "
        f"{'dropout':>7} {'predicted MiB':>13} {'measured MiB':>12} {'ratio':>6} "
        f"{'s':>5}"
    )
    start = time.perf_counter()
    sizes = QUICK if args.quick else FULL
    for family, (d_model, N, length, batch), dropout in itertools.product(
        VOCAB, sizes, (0.1, 0.0)
    ):
        config = dict(
            N=N,
            d_model=d_model,
            d_ff=4 * d_model,
            h=max(2, d_model // 64),
            vocab=VOCAB[family],
            batch=batch,
            length=length,
            dropout=dropout,
        )
        t = time.perf_counter()
        measured = measured_training_memory(family, **config, device=args.device)
        predicted = training_memory(family, **config).total
        print(
            f"{family.__name__:11} {d_model:7} {N:2} {length:4} {batch:5} "
            f"{dropout:7} "
            f"{predicted / 2**20:13.1f} {measured / 2**20:12.1f} "
            f"{predicted / measured:6.3f} {time.perf_counter() - t:5.1f}",
            flush=True,
        )
    print(f"({time.perf_counter() - start:.0f} s)\n")

    print(
        f"weights + gradients + Adam per device, {args.world_size} devices (no "
        "activations):"
    )
    print(sharding_table(args.world_size).round(2).to_string())


if __name__ == "__main__":
    main()
