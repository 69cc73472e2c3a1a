"""Runner options for bigger models (issue 12) and today's block as an
lm setting (issue 14)."""

import pytest
import torch

from annotated_transformer import runner
from annotated_transformer.blocks.feed_forward import swiglu_width
from annotated_transformer.blocks.grouped_query_attention import ALiBiAttention
from annotated_transformer.blocks.layers import (
    DecoderLayer,
    EncoderLayer,
    TransformerBlock,
)
from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
)
from annotated_transformer.models.modern_decoder import (
    ModernConfig,
    ModernDecoderLM,
    modern_parameter_formula,
)
from annotated_transformer.tasks.lm import LanguageModel
from annotated_transformer.training.trainer import checkpoint_blocks


def grads(model: torch.nn.Module, loss: torch.Tensor) -> list[torch.Tensor]:
    loss.backward()
    return [
        torch.zeros_like(p) if p.grad is None else p.grad.clone()
        for p in model.parameters()
    ]


@pytest.mark.parametrize("kind", ["lm", "seq2seq"])
def test_checkpointed_gradients_equal_the_plain_ones_with_dropout_on(kind):
    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        if kind == "lm":
            return DecoderLM(DecoderConfig(50, 16, 2, 3, 12, 32, dropout=0.3))
        return Transformer(
            TransformerConfig(50, 50, N=2, d_model=16, d_ff=32, h=2, dropout=0.3)
        )

    def loss(model: torch.nn.Module) -> torch.Tensor:
        torch.manual_seed(1)  # the same dropout masks for both models
        x = torch.randint(
            1, 50, (4, 10), generator=torch.Generator().manual_seed(2)
        )
        out = model(x) if kind == "lm" else model(x, x, None, None)
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(4))
        return (
            out * weights
        ).sum()  # not a function of the layer norm's scale alone

    plain, checkpointed = build(), build()
    blocks = (EncoderLayer, DecoderLayer, TransformerBlock)
    assert checkpoint_blocks(checkpointed, blocks) == (3 if kind == "lm" else 4)
    plain_loss, checkpointed_loss = loss(plain), loss(checkpointed)
    torch.testing.assert_close(checkpointed_loss, plain_loss, rtol=0, atol=0)
    for a, b in zip(
        grads(plain, plain_loss),
        grads(checkpointed, checkpointed_loss),
        strict=True,
    ):
        torch.testing.assert_close(a, b)
    # The test can fail: different dropout masks give different gradients.
    other = build()
    x = torch.randint(1, 50, (4, 10), generator=torch.Generator().manual_seed(2))
    out = (
        other(x) if kind == "lm" else other(x, x, None, None)
    )  # masks of another seed
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(4))
    assert not torch.allclose((out * weights).sum(), plain_loss)


def test_checkpointing_keeps_fewer_activations_for_backward():
    """Bytes autograd keeps for the backward pass, counted
    with saved-tensor hooks."""

    def saved_bytes(model: torch.nn.Module) -> int:
        total = 0

        def pack(t: torch.Tensor) -> torch.Tensor:
            nonlocal total
            total += t.numel() * t.element_size()
            return t

        x = torch.randint(0, 50, (8, 64))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(x).sum()
        return total

    torch.manual_seed(0)
    model = DecoderLM(DecoderConfig(50, 32, 4, 6, 64, 128, dropout=0.1))
    plain = saved_bytes(model)
    checkpoint_blocks(model, (TransformerBlock,))
    assert saved_bytes(model) < plain / 3


def test_a_run_with_activation_checkpointing_has_the_plain_runs_losses(tmp_path):
    settings = ["steps=6", "eval_every=3", "dropout=0.2"]
    plain = runner.train(
        "lm",
        tmp_path / "a",
        preset="tiny",
        settings=settings,
        progress=False,
        echo=False,
        device="cpu",
    )
    more = [*settings, "activation_checkpointing=true"]
    saved = runner.train(
        "lm",
        tmp_path / "b",
        preset="tiny",
        settings=more,
        progress=False,
        echo=False,
        device="cpu",
    )
    assert saved.metrics["config"]["activation_checkpointing"] is True
    assert saved.history["loss"].tolist() == pytest.approx(
        plain.history["loss"].tolist()
    )


def test_lm_block_modern_builds_todays_model_with_the_2017_parameter_budget():
    config = runner.new_config(
        "lm", "tiny", ["block=modern", "kv_heads=2", "N=2", "d_ff=96"]
    )
    model = LanguageModel(config).build_model()
    assert isinstance(model, ModernDecoderLM)
    c = config.model
    width = swiglu_width(96)
    formula = modern_parameter_formula(
        ModernConfig(256, c.d_model, c.h, c.N, c.max_len, width, kv_heads=2)
    )
    assert sum(p.numel() for p in model.parameters()) == sum(formula.values())
    assert (
        swiglu_width(96) == 64
    )  # 3 · d · 64 = 2 · d · 96: the 2017 feed-forward's weights
    old = LanguageModel(
        runner.new_config("lm", "tiny", ["N=2", "d_ff=96"])
    ).build_model()
    assert isinstance(old, DecoderLM)
    with pytest.raises(
        ValueError,
        match="h=4 query heads cannot be split into groups for kv_heads=3",
    ):
        runner.new_config("lm", "tiny", ["block=modern", "kv_heads=3"])
    with pytest.raises(ValueError, match="block='gpt'"):
        runner.new_config("lm", "tiny", ["block=gpt"])


def test_lm_switches_reach_the_modern_model_and_are_refused_for_the_2017_block():
    settings = [
        "block=modern",
        "norm=layer",
        "positions=alibi",
        "feed_forward=relu",
        "bias=true",
    ]
    model = LanguageModel(runner.new_config("lm", "tiny", settings)).build_model()
    block = model.blocks[0]
    assert (
        isinstance(block.norm1, torch.nn.LayerNorm) and block.norm1.bias is not None
    )
    assert type(block.attention) is ALiBiAttention
    assert not any(model.position.parameters())
    assert block.feed_forward.w_1.out_features == 256  # ReLU keeps d_ff itself
    assert model.to_logits.bias is not None
    with pytest.raises(
        ValueError, match="block=2017 has no norm, bias: use block=modern"
    ):
        runner.new_config("lm", "tiny", ["norm=layer", "bias=true"])
    with pytest.raises(ValueError, match="positions='rotary': use one of"):
        runner.new_config("lm", "tiny", ["block=modern", "positions=rotary"])


def test_lm_block_modern_trains_and_predicts_through_the_runner(tmp_path):
    result = runner.train(
        "lm",
        tmp_path / "m",
        preset="tiny",
        settings=["block=modern", "kv_heads=1", "steps=20", "eval_every=10"],
        progress=False,
        echo=False,
        device="cpu",
    )
    history = result.history
    assert history["loss"].iloc[-1] < history["loss"].iloc[0]
    task, model = runner.load_model(tmp_path / "m" / "final.pt")
    assert isinstance(model, ModernDecoderLM)
    assert task.predict(model, ["ab"], length=5)[0].startswith("ab")
