"""Classifier training speed at length 512: fused vs explicit attention.

    PYTHONPATH=src python benchmarks/classifier.py [--quick]

Times full training steps (forward, backward, AdamW) of an ``EncoderClassifier`` on
random reviews of exactly 512 tokens, once with ``scaled_dot_product_attention``
(the default) and once with ``keep_attention = True`` in every block (the explicit
matmul-softmax-matmul that stores the weights), and prints tokens per second and the
ratio. The median of the timed steps is reported, after warm-up steps. Attention
dropout is 0, as in the presets.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from annotated_transformer.models.encoder_only import (
    EncoderClassifier,
    EncoderConfig,
)


def steps_per_second(
    model: EncoderClassifier, tokens: torch.Tensor, steps: int
) -> float:
    """Median training steps per second of ``model`` on one fixed
    batch (after 2 warm-ups)."""
    labels = torch.randint(
        0, 2, (tokens.size(0),), generator=torch.Generator().manual_seed(1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for step in range(steps + 2):
        start = time.perf_counter()
        loss = F.cross_entropy(model(tokens), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step >= 2:
            times.append(time.perf_counter() - start)
    return 1.0 / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="a small model, few steps"
    )
    args = parser.parse_args()
    length = 512
    if args.quick:
        batch, d_model, h, depth, steps = 8, 64, 4, 2, 3
    else:
        batch, d_model, h, depth, steps = 16, 128, 8, 6, 10
    vocab = 20_000
    tokens = torch.randint(
        4, vocab, (batch, length), generator=torch.Generator().manual_seed(0)
    )
    print(f"EncoderClassifier d_model={d_model} h={h} depth={depth}, "
          f"batch {batch} × {length} tokens, {torch.get_num_threads()} threads, "
          f"fp32, median of {steps} steps")  # fmt: skip
    print(f"{'attention path':<34}{'tokens/s':>12}")
    results = {}
    for name, keep in (("fused (scaled_dot_product_attention)", False),
                       ("explicit (keep_attention=True)", True)):  # fmt: skip
        torch.manual_seed(0)
        config = EncoderConfig(
            vocab,
            d_model=d_model,
            h=h,
            N=depth,
            d_ff=4 * d_model,
            max_len=length,
            dropout=0.1,
        )
        model = EncoderClassifier(config)
        for block in model.blocks:
            block.attention.keep_attention = keep
        results[name] = steps_per_second(model, tokens, steps) * batch * length
        print(f"{name:<34}{results[name]:>12,.0f}")
    fused, explicit = results.values()
    print(f"{'fused / explicit':<34}{fused / explicit:>12.2f}×")


if __name__ == "__main__":
    main()
