"""Precision: the float type that the matrix products of a forward pass run in.

``fp32`` is PyTorch's default. ``bf16`` and ``fp16`` are *mixed* precision: inside
:func:`precision_context` (PyTorch's ``torch.autocast``) the matrix products
(linear layers, matmul, attention) run in the 16-bit type, while the weights, their
gradients and the optimiser's moments stay fp32; fp16, whose range is narrow, also
needs loss scaling, which the ``Trainer``'s ``GradScaler`` does beside the backward
pass, while bf16 has fp32's range and needs none. ``auto`` is a request, not a
precision: :func:`resolve_precision` turns it into bf16 where this machine runs
bf16 matrix products fast (:func:`bf16_is_fast`), else fp32. The runner is the
only caller: it resolves a run's precision once, when it builds the run, hands the
resolved name to the ``Trainer`` for the training steps, and puts every
evaluation, test and prediction of the run inside :func:`precision_context`; tasks
and models never choose a precision.
"""

from __future__ import annotations

import contextlib
import time

import torch

PRECISIONS = ("fp32", "bf16", "fp16")
PRECISION_SETTINGS = ("auto", *PRECISIONS)  # what a config's ``precision`` may say
HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _check(precision: str, allowed: tuple[str, ...] = PRECISIONS) -> None:
    """Refuse, in one line, a ``precision`` that is not one of ``allowed``."""
    if precision not in allowed:
        raise ValueError(
            f"precision={precision!r}: use one of {', '.join(allowed)}"
        )


def precision_context(
    device: torch.device, precision: str
) -> contextlib.AbstractContextManager:
    """bf16 or fp16 autocast on ``device`` when ``precision`` says so, else nothing.

    Under autocast the matrix products (linear layers, matmul, attention) run in
    half precision while the weights stay fp32, and so do the optimiser's moments;
    the tasks' losses take fp32 logits. Which other ops autocast keeps in fp32
    depends on the device: on CUDA softmax, log-softmax and the norms; on the CPU
    (PyTorch 2.13) only a few, e.g. the losses, while softmax and LayerNorm run in
    their input's dtype (accumulating in fp32 inside). The residual stream stays
    fp32 because fp32 + half is fp32. ``precision`` is a resolved name (fp32, bf16
    or fp16), not ``auto``.
    """
    _check(precision)
    dtype = HALF.get(precision, torch.bfloat16)
    return torch.autocast(device.type, dtype=dtype, enabled=precision != "fp32")


def cpu_bf16_speedup() -> float:
    """How many times faster a (256 × 512) @ (512 × 512) matmul runs in bf16 than in
    fp32 on this CPU (a quick race, best of 3): above 1 with AVX-512-BF16 or AMX,
    far below 1 on CPUs that emulate bf16 (tens of times slower than fp32)."""
    a, b = torch.randn(256, 512), torch.randn(512, 512)
    best = {}
    for dtype in (torch.float32, torch.bfloat16):
        x, y = a.to(dtype), b.to(dtype)
        x @ y  # warm-up
        times = []
        for _ in range(3):
            start = time.perf_counter()
            x @ y
            times.append(time.perf_counter() - start)
        best[dtype] = min(times)
    return best[torch.float32] / best[torch.bfloat16]


def bf16_is_fast(device: torch.device) -> bool:
    """Does bf16 pay off here? CUDA: bf16 support. MPS: no (float32 there).
    CPU: :func:`cpu_bf16_speedup` above 1."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_bf16_speedup() > 1


def resolve_precision(precision: str, device: torch.device) -> str:
    """``fp32``, ``bf16`` or ``fp16`` as given; ``auto`` becomes bf16 where
    :func:`bf16_is_fast` on ``device``, else fp32."""
    _check(precision, PRECISION_SETTINGS)
    if precision == "auto":
        return "bf16" if bf16_is_fast(device) else "fp32"
    return precision
