"""The package's top level: the Annotated Transformer's names, loaded lazily."""

import importlib
import subprocess
import sys

import pytest

import annotated_transformer

# The names a reader of the Annotated Transformer knows, and where they live.
HOMES = {
    "MultiHeadedAttention": "blocks.attention",
    "attention": "blocks.attention",
    "subsequent_mask": "blocks.masks",
    "EncoderDecoder": "models.encoder_decoder",
    "make_model": "models.encoder_decoder",
    "Generator": "models.encoder_decoder",
    "Encoder": "blocks.layers",
    "Decoder": "blocks.layers",
    "EncoderLayer": "blocks.layers",
    "DecoderLayer": "blocks.layers",
    "SublayerConnection": "blocks.layers",
    "LayerNorm": "blocks.norms",
    "PositionwiseFeedForward": "blocks.feed_forward",
    "Embeddings": "blocks.embeddings",
    "PositionalEncoding": "blocks.positional",
    "LabelSmoothing": "training.loss",
    "greedy_decode": "evaluation.decoding",
    "Batch": "data.batching",
    "clones": "blocks.layers",
}


@pytest.mark.parametrize("name", sorted(HOMES))
def test_each_name_is_its_modules_object(name: str) -> None:
    home = importlib.import_module(f"annotated_transformer.{HOMES[name]}")
    namespace: dict = {}
    exec(f"from annotated_transformer import {name}", namespace)
    assert namespace[name] is getattr(home, name)
    assert name in annotated_transformer.__all__ and name in dir(
        annotated_transformer
    )


def test_the_exports_are_exactly_these_names() -> None:
    assert sorted(annotated_transformer.__all__) == sorted(HOMES)
    with pytest.raises(AttributeError, match="no attribute 'Transformer'"):
        annotated_transformer.Transformer  # noqa: B018


def test_importing_the_package_imports_no_torch() -> None:
    """The doctor checks torch before loading it, and ``python -m
    annotated_transformer`` catches Ctrl-C from its first line: the package's
    import must load nothing heavy."""
    code = (
        "import sys, annotated_transformer\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'numpy', 'pandas') or m.startswith('annotated_transformer.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
