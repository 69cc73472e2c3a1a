"""The training-memory formula against the real models: parameter counts, the
tensors autograd saves, the measured peak of a step, and the per-device
arithmetic of DDP and FSDP."""

import pytest
import torch
import torch.nn.functional as F

from annotated_transformer.blocks.masks import make_std_mask, padding_mask
from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
    tie_weights,
)
from annotated_transformer.training.loss import smoothed_cross_entropy
from annotated_transformer.training.memory import (
    measured_training_memory,
    per_device_bytes,
    training_memory,
)

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(N=2, d_model=32, d_ff=128, h=4, vocab=50, batch=3, length=12)


def build(
    kind, N, d_model, d_ff, h, vocab, shared=False, dropout=0.1, attention="fused"
):
    torch.manual_seed(0)
    if kind is DecoderLM:
        model = DecoderLM(DecoderConfig(vocab, d_model, h, N, 12, d_ff, dropout))
    else:
        model = Transformer(
            TransformerConfig(vocab, vocab, N, d_model, d_ff, h, dropout)
        )
        model = tie_weights(model, share_source=True) if shared else model
    for module in model.modules():
        if hasattr(module, "keep_attention"):
            module.keep_attention = attention == "explicit"
    return model


@pytest.mark.parametrize(
    ("kind", "shared"),
    [(DecoderLM, False), (Transformer, False), (Transformer, True)],
)
def test_parameter_count_equals_the_models(kind, shared):
    sizes = dict(N=2, d_model=32, d_ff=64, h=4, vocab=50)
    model = build(kind, **sizes, shared=shared)
    expected = sum(
        p.numel() for p in model.parameters()
    )  # shared tensors counted once
    mem = training_memory(
        kind, **sizes, batch=1, length=12, max_len=12, shared=shared
    )
    assert mem.parameters == expected
    assert (mem.params, mem.grads, mem.adam) == (
        4 * expected,
        4 * expected,
        8 * expected,
    )


def saved_bytes(kind, model, b, n, vocab):
    """Bytes of the distinct storages autograd saves in the forward
    pass (weights excluded)."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    gen = torch.Generator().manual_seed(0)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if kind is DecoderLM:
            x, y = torch.randint(vocab, (2, b, n), generator=gen)
            F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum")
        else:
            src = torch.randint(1, vocab, (b, n), generator=gen)
            tgt = torch.randint(
                1, vocab, (b, n + 1), generator=gen
            )  # as in Batch: two views
            inputs, target = tgt[:, :-1], tgt[:, 1:]
            hidden = model(
                src, inputs, padding_mask(src, 0), make_std_mask(inputs, 0)
            )
            smoothed_cross_entropy(model.generator.logits(hidden), target, 0, 0.1)
    return sum(v for k, v in storages.items() if k not in weights)


@pytest.mark.parametrize("kind", [DecoderLM, Transformer])
@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("attention", ["fused", "explicit"])
def test_activations_equal_what_autograd_saves(kind, dropout, attention):
    sizes = {k: TINY[k] for k in ("N", "d_model", "d_ff", "h", "vocab")}
    model = build(kind, **sizes, dropout=dropout, attention=attention).train()
    actual = saved_bytes(kind, model, TINY["batch"], TINY["length"], TINY["vocab"])
    predicted = training_memory(
        kind, **TINY, dropout=dropout, attention=attention
    ).activations
    # Left out: the 4-byte loss scalar; seq2seq: one saved view keeps
    # the whole (b, n+1) target.
    assert 0 <= actual - predicted <= 4 + 8 * TINY["batch"]
    assert predicted > 0


@pytest.mark.parametrize("kind", [DecoderLM, Transformer])
def test_formula_within_10_percent_of_measured_peak(kind):
    # 10%: over benchmarks/memory.py's grid the ratio ranges 0.92-1.01; the worst
    # case is a small batch whose weights' gradients overlap the activations (see
    # MemoryBreakdown.total).
    config = dict(
        N=2, d_model=64, d_ff=256, h=4, vocab=300, batch=4, length=32, dropout=0.1
    )
    measured = measured_training_memory(kind, **config)
    predicted = training_memory(kind, **config).total
    assert predicted == pytest.approx(measured, rel=0.10)


@pytest.mark.parametrize("kind", [DecoderLM, Transformer])
def test_checkpointing_keeps_less(kind):
    config = dict(N=4, d_model=64, d_ff=256, h=4, vocab=100, batch=8, length=64)
    plain = training_memory(kind, **config)
    ckpt = training_memory(kind, **config, activation_checkpointing=True)
    assert ckpt.activations < plain.activations
    assert ckpt.total < plain.total
    assert (ckpt.params, ckpt.grads, ckpt.adam) == (
        plain.params,
        plain.grads,
        plain.adam,
    )


def test_ddp_and_fsdp_bytes_of_the_base_model():
    base = training_memory(
        Transformer,
        N=6,
        d_model=512,
        d_ff=2048,
        h=8,
        vocab=37000,
        batch=1,
        length=1,
        shared=True,
    )
    # By hand: attention 4(512² + 512) = 1,050,624; FFN
    # 2·512·2048 + 2048 + 512 = 2,099,712; encoder layer
    # 1,050,624 + 2,099,712 + 2·1024 = 3,152,384; decoder layer
    # 2·1,050,624 + 2,099,712 + 3·1024 = 4,204,032; 6 of each and two final norms
    # 44,140,544; one shared 37000 × 512 table 18,944,000 and the generator's bias
    # 37,000.
    assert base.parameters == 63_121_544
    assert per_device_bytes("ddp", base, 8) == 16 * 63_121_544
    # FSDP, 8 devices: 16P / 8 = 126,243,088, plus the largest unit gathered with
    # its gradients: everything outside the layers,
    # 63,121,544 - 44,138,496 = 18,983,048 parameters, × 8 bytes.
    assert per_device_bytes("fsdp", base, 8) == 126_243_088 + 8 * 18_983_048
    assert per_device_bytes("fsdp", base, 1) > per_device_bytes("ddp", base, 1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="scheme"):
        per_device_bytes("zero", training_memory(DecoderLM, **TINY), 2)
    with pytest.raises(ValueError, match="world_size"):
        per_device_bytes("ddp", training_memory(DecoderLM, **TINY), 0)
    with pytest.raises(ValueError, match="family must be DecoderLM or Transformer"):
        training_memory(torch.nn.Linear, **TINY)
    with pytest.raises(ValueError, match="divisible by h"):
        training_memory(DecoderLM, **{**TINY, "h": 3})
