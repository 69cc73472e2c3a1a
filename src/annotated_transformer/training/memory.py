"""Where the training memory goes: a formula for one training step, and a
measurement.

One step (forward, backward, Adam update) of a model with P parameters holds

    M = 4P (weights) + 4P (gradients) + 8P (Adam's m, v) + B (buffers)
        + A (activations)

bytes in fp32. A, what the forward pass saves for the backward pass, grows with
the batch b and the length n: per layer, terms in b·n·d_model (inputs of every
linear layer and LayerNorm, dropout masks), b·n·d_ff (the feed-forward's hidden
layer) and b·h·n² (attention weights, unless a fused kernel avoids them).
:func:`training_memory` writes each term out for ``DecoderLM`` and
``Transformer`` as this CPU build of PyTorch saves them (listed with
``torch.autograd.graph.saved_tensors_hooks``: dropout keeps its mask in the
activation dtype (CUDA's fused one: 1 byte); the flash kernel keeps a log-sum-exp
and the mask made additive instead of the weights; with dropout the math kernel
keeps three (b, h, n, n) tensors); :func:`measured_training_memory` runs a real
step and reads the peak.

The peak comes where the forward pass ends and the backward pass begins: all
activations alive, the weights' gradients not yet (``set_to_none=True``), the
loss's gradient with respect to the logits being formed (:class:`MemoryBreakdown`):

    peak = weights + Adam + buffers + max(A + transient, gradients)

It undershoots when the gradients are as large as the activations (the backward
pass then peaks later, holding most gradients and some activations at once);
:func:`per_device_bytes` gives the fixed part per device under DDP or FSDP.
"""

from __future__ import annotations

import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile

from annotated_transformer.blocks.masks import make_std_mask, padding_mask
from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
    parameter_formula,
    tie_weights,
)
from annotated_transformer.training.loss import smoothed_cross_entropy

# The families the formula is written for: a decoder-only LM, an encoder-decoder.
FAMILIES = (DecoderLM, Transformer)
ATTENTION = ("fused", "explicit")
# bytes: weights, gradients and each Adam moment (mixed precision keeps them fp32)
FP32 = 4
INDEX = 8  # bytes of an int64 token id, saved by every embedding lookup
# bytes a position of a LayerNorm: its mean and 1/std, kept in fp32
STATS = 2 * FP32


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes of one training step, by what holds them.

    parameters: the count P; params = 4P, grads = 4P, adam = 8P (m and v);
    unit_parameters: the largest piece FSDP would gather at once: one layer,
        or everything outside the layers (embeddings, logits layer, final
        norms), whichever is larger;
    buffers: tensors that are not trained (the sinusoid tables);
    activations: what the forward pass saves for the backward pass, A;
    transient: the largest temporary of the backward pass, on top of the
        activations: max(2·4·b·n·V, k·s·b·n·d_ff − 4·b·n·V) — the gradients of the
        log-probabilities and of the logits (fp32), or the top feed-forward's
        gradients w.r.t. its hidden layer (k = 2: before relu and after it; k = 1
        with dropout, whose saved input is freed first), by which time the loss's
        log-softmax (4·b·n·V) has been freed.
    """

    parameters: int
    unit_parameters: int
    params: int
    grads: int
    adam: int
    buffers: int
    activations: int
    transient: int

    @property
    def total(self) -> int:
        """Predicted peak: params + adam + buffers +
        max(activations + transient, grads)."""
        fixed = self.params + self.adam + self.buffers
        return fixed + max(self.activations + self.transient, self.grads)

    @property
    def upper_bound(self) -> int:
        """Everything at once: params + grads + adam + buffers +
        activations + transient."""
        return (
            self.params
            + self.grads
            + self.adam
            + self.buffers
            + self.activations
            + (self.transient)
        )


def attention_bytes(
    b: int,
    n_q: int,
    n_k: int,
    d_model: int,
    h: int,
    s: int,
    dropout: bool,
    attention: str,
) -> int:
    """Bytes one multi-head attention saves, masks aside (see :func:`mask_bytes`).

    Every path keeps q (b·n_q·d), k and v (b·n_k·d each) and the concatenated heads
    (b·n_q·d), the input of W^O:  s·b·d·(2 n_q + 2 n_k).
    fused, no dropout (flash kernel): + the log-sum-exp, 4·b·h·n_q (fp32);
    fused with dropout on CPU (math kernel), explicit with dropout: + softmax,
    dropout mask and dropped weights, 3·s·b·h·n_q·n_k;  explicit without
    dropout: + the softmax, s·b·h·n_q·n_k.
    """
    projections = s * b * d_model * (2 * n_q + 2 * n_k)
    if attention == "fused" and not dropout:
        return projections + FP32 * b * h * n_q
    return projections + (3 if dropout else 1) * s * b * h * n_q * n_k


def mask_bytes(elements: int, s: int, dropout: bool, attention: str) -> int:
    """Bytes of one saved attention mask of ``elements`` entries (e.g. b·n² or n²).

    Each attention call saves its own: the flash kernel (fused, no dropout) the
    boolean mask turned additive, s bytes an entry; the explicit path the negated
    boolean that ``masked_fill`` reads (1 byte); the math kernel none.
    """
    if attention == "explicit":
        return elements
    return 0 if dropout else s * elements


def feed_forward_bytes(b: int, n: int, d_ff: int, s: int, dropout: bool) -> int:
    """Bytes FFN(x) = W₂ dropout(relu(W₁ x)) saves besides its input x.

    relu's output s·b·n·d_ff; with dropout also the mask and the
    dropped values: 3·s·b·n·d_ff.
    """
    return (3 if dropout else 1) * s * b * n * d_ff


def lm_block_bytes(
    b: int,
    n: int,
    d_model: int,
    d_ff: int,
    h: int,
    s: int,
    dropout: bool,
    attention: str,
) -> int:
    """Bytes one post-norm ``TransformerBlock`` (causal) saves.

    x (input of W^Q, W^K, W^V) + attention + the inputs of norm1 and norm2 and of
    the FFN (norm1's output): 4·s·b·n·d;  LayerNorm statistics 2 · 8·b·n;  the FFN;
    with dropout the masks after attention and FFN, 2·s·b·n·d;  the causal mask, n²
    entries.
    """
    bnd = b * n * d_model
    return (
        (4 + (2 if dropout else 0)) * s * bnd
        + 2 * STATS * b * n
        + attention_bytes(b, n, n, d_model, h, s, dropout, attention)
        + mask_bytes(n * n, s, dropout, attention)
        + feed_forward_bytes(b, n, d_ff, s, dropout)
    )


def sublayer_bytes(b: int, n: int, d_model: int, s: int, dropout: bool) -> int:
    """Bytes a pre-norm ``SublayerConnection``
    x + dropout(f(norm(x))) saves besides f's own.

    The norm's input and output, 2·s·b·n·d, its statistics 8·b·n,
    the dropout mask s·b·n·d.
    """
    return (3 if dropout else 2) * s * b * n * d_model + STATS * b * n


def encoder_layer_bytes(
    b: int,
    n: int,
    d_model: int,
    d_ff: int,
    h: int,
    s: int,
    dropout: bool,
    attention: str,
) -> int:
    """Bytes one ``EncoderLayer`` saves: two sublayers, self-attention, FFN and its
    (b, 1, 1, n) padding mask."""
    return (
        2 * sublayer_bytes(b, n, d_model, s, dropout)
        + attention_bytes(b, n, n, d_model, h, s, dropout, attention)
        + mask_bytes(b * n, s, dropout, attention)
        + feed_forward_bytes(b, n, d_ff, s, dropout)
    )


def decoder_layer_bytes(
    b: int,
    n: int,
    d_model: int,
    d_ff: int,
    h: int,
    s: int,
    dropout: bool,
    attention: str,
) -> int:
    """Bytes one ``DecoderLayer`` saves: three sublayers, self- and source attention
    with their (b, 1, n, n) target and (b, 1, 1, n) source masks, FFN."""
    return (
        3 * sublayer_bytes(b, n, d_model, s, dropout)
        + 2 * attention_bytes(b, n, n, d_model, h, s, dropout, attention)
        + mask_bytes(b * n * n + b * n, s, dropout, attention)
        + feed_forward_bytes(b, n, d_ff, s, dropout)
    )


def activation_bytes(
    family: type[nn.Module],
    *,
    N: int,
    d_model: int,
    d_ff: int,
    h: int,
    vocab: int,
    batch: int,
    length: int,
    dropout: bool,
    attention: str = "fused",
    dtype_bytes: int = FP32,
    activation_checkpointing: bool = False,
) -> int:
    """A, the bytes saved for the backward pass (source and
    target both ``length`` long).

    DecoderLM: A = N·a_block + 2·8·b·n + 8·n (input, target and position
             ids) + s·b·n·d (the last block's output, input of the logits
             layer) + [dropout] s·b·n·d (embedding dropout mask) + 4·b·n·V (the
             loss's log-softmax, fp32)
    Transformer: A = N·(a_enc + a_dec) + 3·8·b·n (source, target and loss-target
             ids) + 4·s·b·n·d (input of each final norm, the encoder output (memory)
             and the decoder output) + 2·8·b·n (the final norms'
             statistics) + [dropout] 2·s·b·n·d (embedding dropout
             masks) + 4·b·n·V + b·n (the loss's log-softmax and padding mask)

    With activation checkpointing every layer keeps only its input, s·b·n·d, and the
    backward pass recomputes one layer at a time, so N·a_layer becomes
    N·s·b·n·d + max(a_layer) (for seq2seq 2N inputs and the larger of a_enc, a_dec).
    """
    b, n, s = batch, length, dtype_bytes
    bnd = b * n * d_model
    sizes = (b, n, d_model, d_ff, h, s, dropout, attention)
    loss = FP32 * b * n * vocab
    drop = s * bnd if dropout else 0
    if family is DecoderLM:
        layers = [lm_block_bytes(*sizes)] * N
        ends = INDEX * (2 * b * n + n) + s * bnd + drop + loss
    else:
        layers = [encoder_layer_bytes(*sizes)] * N + [
            decoder_layer_bytes(*sizes)
        ] * N
        ends = (
            3 * INDEX * b * n
            + 4 * s * bnd
            + 2 * STATS * b * n
            + 2 * drop
            + loss
            + b * n
        )
    if activation_checkpointing:
        return ends + len(layers) * s * bnd + max(layers)
    return ends + sum(layers)


def parameter_count(
    family: type[nn.Module],
    *,
    N: int,
    d_model: int,
    d_ff: int,
    vocab: int,
    max_len: int,
    shared: bool,
) -> int:
    """P in closed form, from
    :func:`~annotated_transformer.models.encoder_decoder.parameter_formula`.

    DecoderLM: V·d (tokens) + max_len·d (learned positions) + N·(4(d²+d) + 2·d·d_ff
        + d_ff + d + 4d) (a block has an encoder layer's
        parameters) + d·V + V (the logits layer).
    Transformer: the paper's model, minus 2·V·d when ``shared`` (one vocabulary,
        and one matrix for the source and target embeddings and the generator:
        ``tie_weights(share_source=True)``).
    """
    counts = parameter_formula(vocab, vocab, N, d_model, d_ff)
    if family is DecoderLM:
        block = counts["encoder.layers.0"]
        return (
            vocab * d_model
            + max_len * d_model
            + N * block
            + d_model * vocab
            + vocab
        )
    return sum(counts.values()) - (2 * vocab * d_model if shared else 0)


def _check(
    family: type[nn.Module], attention: str, d_model: int, d_ff: int, h: int
) -> None:
    if family not in FAMILIES:
        raise ValueError(f"family must be DecoderLM or Transformer, got {family!r}")
    if attention not in ATTENTION:
        raise ValueError(f"attention must be one of {ATTENTION}, got {attention!r}")
    if h < 1 or d_model % h != 0:
        raise ValueError(f"d_model={d_model} must be divisible by h={h}")


def training_memory(
    family: type[nn.Module],
    *,
    N: int,
    d_model: int,
    d_ff: int,
    h: int,
    vocab: int,
    batch: int,
    length: int,
    dropout: float = 0.1,
    attention: str = "fused",
    dtype_bytes: int = FP32,
    max_len: int | None = None,
    shared: bool = False,
    activation_checkpointing: bool = False,
) -> MemoryBreakdown:
    """Bytes of one training step of a ``family``, ``DecoderLM`` or
    ``Transformer``, with Adam, batch × length
    tokens (source and target).

    attention: "fused" (``F.scaled_dot_product_attention``, the default) or
        "explicit" (``keep_attention = True``); dtype_bytes: bytes of an activation
        (2 under bf16, whose weights, gradients and Adam stay fp32; measured here
        in fp32 only); max_len: the LM's positions (default ``length``) or the
        sinusoid tables' length (default 5000, two fp32 (max_len, d) buffers);
        shared: the seq2seq model with all three matrices tied.
    """
    _check(family, attention, d_model, d_ff, h)
    if family is DecoderLM:
        max_len = length if max_len is None else max_len
        buffers = 0
    else:
        max_len = 5000 if max_len is None else max_len
        buffers = 2 * FP32 * max_len * d_model
    P = parameter_count(
        family,
        N=N,
        d_model=d_model,
        d_ff=d_ff,
        vocab=vocab,
        max_len=max_len,
        shared=shared,
    )
    counts = parameter_formula(vocab, vocab, N, d_model, d_ff)
    layer = counts[
        "encoder.layers.0" if family is DecoderLM else "decoder.layers.0"
    ]
    in_layers = N * (
        layer if family is DecoderLM else layer + counts["encoder.layers.0"]
    )
    activations = activation_bytes(
        family,
        N=N,
        d_model=d_model,
        d_ff=d_ff,
        h=h,
        vocab=vocab,
        batch=batch,
        length=length,
        dropout=dropout > 0,
        attention=attention,
        dtype_bytes=dtype_bytes,
        activation_checkpointing=activation_checkpointing,
    )
    head = 2 * FP32 * batch * length * vocab
    ffn = (
        1 if dropout > 0 else 2
    ) * dtype_bytes * batch * length * d_ff - head // 2
    return MemoryBreakdown(
        parameters=P,
        unit_parameters=max(layer, P - in_layers),
        params=FP32 * P,
        grads=FP32 * P,
        adam=2 * FP32 * P,
        buffers=buffers,
        activations=activations,
        transient=max(head, ffn),
    )


def per_device_bytes(
    scheme: str, breakdown: MemoryBreakdown, world_size: int
) -> int:
    """Bytes of weights, gradients and Adam that each of
    ``world_size`` devices holds.

    ddp:  params + grads + adam = 16P: every device keeps the whole model and
          optimiser (DDP's gradient buckets may add another 4P unless
          ``gradient_as_bucket_view=True``);
    fsdp: ⌈(params + grads + adam) / W⌉ + 2·4·P_unit: each device keeps 1/W of the
          three, and gathers one wrapped unit at a time, its full weights and (in
          the backward pass) its full gradients; P_unit =
          ``breakdown.unit_parameters``, the largest such unit.
    Activations are left out: each device holds those of its own
    micro-batch under either.
    """
    if world_size < 1:
        raise ValueError(
            f"world_size must be a positive number of devices, got {world_size}"
        )
    state = breakdown.params + breakdown.grads + breakdown.adam
    if scheme == "ddp":
        return state
    if scheme == "fsdp":
        return math.ceil(state / world_size) + 2 * FP32 * breakdown.unit_parameters
    raise ValueError(f"scheme must be 'ddp' or 'fsdp', got {scheme!r}")


PAPER_MODELS = {
    "base": dict(N=6, d_model=512, d_ff=2048, h=8),
    "big": dict(N=6, d_model=1024, d_ff=4096, h=16),
}


def sharding_table(world_size: int = 8, vocab: int = 37000) -> pd.DataFrame:
    """GiB per device for the paper's base and big models (one shared vocabulary of
    37000 tokens, tied embeddings) under DDP and FSDP on ``world_size`` devices.

    returns one row per model: parameters, ddp_gib, fsdp_gib
        (activations not included)
    """
    rows = []
    for name, sizes in PAPER_MODELS.items():
        mem = training_memory(
            Transformer, **sizes, vocab=vocab, batch=1, length=1, shared=True
        )
        rows.append(
            {
                "model": name,
                "parameters": mem.parameters,
                "ddp_gib": per_device_bytes("ddp", mem, world_size) / 2**30,
                "fsdp_gib": per_device_bytes("fsdp", mem, world_size) / 2**30,
            }
        )
    return pd.DataFrame(rows).set_index("model")


def _held_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the distinct storages of the weights,
    buffers and optimiser state."""
    tensors = [*model.parameters(), *model.buffers()]
    tensors += [
        t
        for state in optimizer.state.values()
        for t in state.values()
        if torch.is_tensor(t)
    ]
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for t in tensors
    }
    return sum(storages.values())


# Kineto, the profiler's C++ library, writes a line to the process's stderr when a
# profile starts and when it stops ("USDT:<time> <pid>:<tid>
# SyncActivityProfilerHandler.cpp:52] profiler_start"); its setting,
# KINETO_LOG_LEVEL, turns them off only with its warnings and errors. The
# allocator's note that a block allocated before the profile was freed during it
# goes too: that free has no size, so the running sum below is unchanged.
_PROFILER_MARKS = re.compile(
    rb"^(?:(?:USDT|STAGE):.*ActivityProfiler.*"
    rb"|\[W.*CPUAllocator.*allocated before the profiling started.*)\n?",
    re.M,
)


@contextmanager
def _without_profiler_marks() -> Iterator[None]:
    """Send file descriptor 2 (stderr, where C++ code writes) to a temporary
    file while the block runs, then pass on everything but kineto's start and
    stop lines."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            rest = _PROFILER_MARKS.sub(b"", held.read())
            while rest:
                rest = rest[os.write(2, rest) :]


def allocator_peak(step: Callable[[], None]) -> int:
    """Highest sum of the CPU allocator's allocations minus
    frees while ``step`` runs."""
    with (
        _without_profiler_marks(),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
    ):
        step()
    # Each raw event is one allocation (+bytes) or free (-bytes), in
    # the order they happened.
    events = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
    )
    running = peak = 0
    for _, nbytes in events:
        running += nbytes
        peak = max(peak, running)
    return peak


def peak_step_bytes(
    model: nn.Module,
    loss_fn: Callable[[], Tensor],
    optimizer: torch.optim.Optimizer,
) -> int:
    """Peak bytes of one training step: zero_grad(set_to_none),
    loss_fn().backward(), step().

    A first step runs unmeasured (it creates Adam's
    moments); the second is measured.
    CUDA: ``torch.cuda.max_memory_allocated`` over the step (everything on the
    device, the batch included). CPU: the bytes held before the step (weights,
    buffers, Adam; counted from the tensors) plus the peak of the PyTorch profiler's
    allocation events during it. Limits on CPU: it sees what PyTorch's allocator
    hands out, not what the C library's malloc keeps around it (fragmentation,
    per-thread arenas), nor memory that libraries such as oneDNN take themselves;
    and the profiler slows the step down a few times.
    """

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn().backward()
        optimizer.step()

    step()
    optimizer.zero_grad(set_to_none=True)
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device)
    return _held_bytes(model, optimizer) + allocator_peak(step)


def measured_training_memory(
    family: type[nn.Module],
    *,
    N: int,
    d_model: int,
    d_ff: int,
    h: int,
    vocab: int,
    batch: int,
    length: int,
    dropout: float = 0.1,
    attention: str = "fused",
    shared: bool = False,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> int:
    """Build the model :func:`training_memory` describes, run two Adam steps on
    random tokens (batch × length; seq2seq: the source and the target) and return
    the second's peak bytes (:func:`peak_step_bytes`). Losses: the LM's summed
    cross-entropy, the translation model's label-smoothed one (ε = 0.1), both on
    fp32 logits as in training.
    """
    _check(family, attention, d_model, d_ff, h)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    dev = torch.device(device)
    if family is DecoderLM:
        config = DecoderConfig(vocab, d_model, h, N, length, d_ff, dropout)
        model = DecoderLM(config).to(dev)
        x, y = torch.randint(vocab, (2, batch, length), generator=gen).to(dev)

        def loss_fn() -> Tensor:
            return F.cross_entropy(
                model(x).flatten(0, 1), y.flatten(), reduction="sum"
            )
    else:
        model = Transformer(
            TransformerConfig(vocab, vocab, N, d_model, d_ff, h, dropout)
        )
        model = (tie_weights(model, share_source=True) if shared else model).to(dev)
        src = torch.randint(1, vocab, (batch, length), generator=gen).to(dev)
        tgt = torch.randint(1, vocab, (batch, length + 1), generator=gen).to(dev)
        src_mask, tgt_mask = padding_mask(src, 0), make_std_mask(tgt[:, :-1], 0)

        def loss_fn() -> Tensor:
            hidden = model(src, tgt[:, :-1], src_mask, tgt_mask)
            logits = model.generator.logits(hidden)
            return smoothed_cross_entropy(logits, tgt[:, 1:], 0, 0.1)[0]

    for module in model.modules():
        if hasattr(module, "keep_attention"):
            module.keep_attention = attention == "explicit"
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    return peak_step_bytes(model, loss_fn, optimizer)
