"""One config per model family: every model and every block it stacks is built
from one frozen config, which no size reaches twice."""

import dataclasses
import inspect

import pytest
import torch

from annotated_transformer.blocks.layers import TransformerBlock
from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM
from annotated_transformer.models.encoder_decoder import (
    Transformer,
    TransformerConfig,
)
from annotated_transformer.models.encoder_only import (
    EncoderClassifier,
    EncoderConfig,
    MaskedLanguageModel,
)
from annotated_transformer.models.gpt2 import GPT2LM, GPTConfig
from annotated_transformer.models.modern_decoder import (
    ModernBlock,
    ModernConfig,
    ModernDecoderLM,
)
from annotated_transformer.models.transformer_xl import (
    TransformerXLBlock,
    TransformerXLLM,
    XLConfig,
)

SIZES = {"d_model": 24, "h": 3, "N": 2, "d_ff": 40}
FAMILIES = [
    # The 2017 layers are composed, as chapter 07 builds them: no block config.
    (Transformer, TransformerConfig(11, 13, max_len=30, **SIZES), None),
    (
        EncoderClassifier,
        EncoderConfig(50, 3, max_len=30, **SIZES),
        TransformerBlock,
    ),
    (MaskedLanguageModel, EncoderConfig(50, max_len=30, **SIZES), TransformerBlock),
    (DecoderLM, DecoderConfig(40, max_len=30, **SIZES), TransformerBlock),
    (
        ModernDecoderLM,
        ModernConfig(40, max_len=30, kv_heads=1, **SIZES),
        ModernBlock,
    ),
    (GPT2LM, GPTConfig(40, max_len=30, **SIZES), ModernBlock),
    (TransformerXLLM, XLConfig(40, **SIZES), TransformerXLBlock),
]
IDS = [family.__name__ for family, _, _ in FAMILIES]


def only_argument(cls: type) -> list[str]:
    """The parameters of ``cls.__init__`` besides self."""
    return list(inspect.signature(cls.__init__).parameters)[1:]


@pytest.mark.parametrize(("family", "config", "block"), FAMILIES, ids=IDS)
def test_a_model_and_its_blocks_take_the_config_alone(family, config, block):
    assert only_argument(family) == ["config"]
    if block is not None:
        assert only_argument(block) == ["config"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 8


@pytest.mark.parametrize(("family", "config", "block"), FAMILIES, ids=IDS)
def test_every_size_comes_from_the_config(family, config, block):
    """The widths and depths of the built model, read from its tensors, are the
    config's: d_model in every norm, d_ff in every feed-forward, N blocks."""
    model = family(config)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    norms += [m for m in model.modules() if type(m).__name__ == "RMSNorm"]
    assert norms and {m.weight.shape[0] for m in norms} == {config.d_model}
    ff_hidden = {
        m.w_1.out_features for m in model.modules() if hasattr(m, "w_1")
    } | {m.w1.out_features for m in model.modules() if hasattr(m, "w1")}
    assert ff_hidden == {config.d_ff}
    if block is None:
        layers = [*model.encoder.layers, *model.decoder.layers]
    else:
        layers = [m for m in model.modules() if isinstance(m, block)]
    assert len(layers) == (2 if block is None else 1) * config.N


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: TransformerConfig(11, 11, d_model=30, h=4),
            "not divisible by h=4",
        ),
        (lambda: TransformerConfig(11, 0), "tgt_vocab must be a positive"),
        (lambda: EncoderConfig(50, pad=60), "pad=60"),
        (lambda: EncoderConfig(50, d_model=30, h=4), "not divisible by h=4"),
        (lambda: DecoderConfig(d_model=30, h=4), "not divisible by h=4"),
        (lambda: ModernConfig(norm="batch"), "norm='batch'"),
    ],
)
def test_a_bad_size_is_refused_where_the_config_is_made(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_gpt2_is_the_modern_model_with_gpt2s_choices():
    """GPTConfig names GPT-2's parts; nothing is patched after construction: the
    output layer is the embedding from the start."""
    config = GPTConfig(40, max_len=30, **SIZES)
    assert (config.kv_heads, config.d_ff, config.eps) == (3, 40, 1e-5)
    model = GPT2LM(config)
    assert model.to_logits.weight is model.embed.weight
    assert model.to_logits.bias is None
    assert model.config is config
