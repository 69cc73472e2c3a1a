"""One config per model family: every model and every block it stacks is built
from one frozen config, which no size reaches twice."""

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from annotated_transformer import records
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
from annotated_transformer.tasks import PRESETS, TASKS
from annotated_transformer.tasks.base import (
    apply_settings,
    flat_settings,
    from_settings,
    model_types,
    saved_config,
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
        (lambda: ModernConfig(h=4, kv_heads=3), "kv_heads must divide h"),
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


def test_the_masked_language_model_is_built_with_its_output_tied():
    """The MLM's output matrix is its embedding from the start, with a bias of its
    own; its weights keep the classifier's names (one tensor fewer than a
    classifier of vocab classes holds)."""
    config = EncoderConfig(50, max_len=30, **SIZES)
    model = MaskedLanguageModel(config)
    assert model.to_classes.weight is model.embed.lut.weight
    classifier = EncoderClassifier(dataclasses.replace(config, n_classes=50))
    assert list(model.state_dict()) == list(classifier.state_dict())
    saved = sum(p.numel() for p in classifier.parameters()) - 50 * SIZES["d_model"]
    assert sum(p.numel() for p in model.parameters()) == saved


# ------------------------- a task's config holds its model's; the records load

NESTED = {
    "translate": TransformerConfig,
    "classify": EncoderConfig,
    "mlm": EncoderConfig,
    "lm": DecoderConfig,
}
MODEL_CONFIGS = (
    TransformerConfig,
    EncoderConfig,
    DecoderConfig,
    ModernConfig,
    GPTConfig,
    XLConfig,
)


@pytest.mark.parametrize("task", sorted(TASKS))
def test_a_task_config_holds_its_models_config_and_no_size_besides(task):
    """No task config keeps a field that names a size of any model config, or a
    flat model setting: the sizes live in the model config it holds."""
    config = PRESETS[task]["tiny"]
    assert type(config.model) is NESTED[task]
    model_names = {f.name for m in MODEL_CONFIGS for f in dataclasses.fields(m)}
    model_names |= set(model_types(type(config)))
    own = {f.name for f in dataclasses.fields(config)} - {"model"}
    assert not own & model_names
    # a size set flat, as --set gives it, lands in the model's config
    wider = apply_settings(config, ["d_model=96", "h=4", "lr=0.5"])
    assert (wider.model.d_model, wider.model.h, wider.lr) == (96, 4, 0.5)
    assert wider.model.N == config.model.N
    assert from_settings(type(config), flat_settings(config)) == config
    with pytest.raises(ValueError, match="not divisible by h=7"):
        apply_settings(config, ["h=7"])


@pytest.mark.parametrize(
    "block, model_config",
    [
        ("2017", DecoderConfig),
        ("modern", ModernConfig),
        ("gpt2", GPTConfig),
        ("xl", XLConfig),
    ],
)
def test_the_lm_block_names_the_class_of_the_model_config(block, model_config):
    tiny = PRESETS["lm"]["tiny"]
    config = apply_settings(tiny, [f"block={block}", "d_model=96", "h=4"])
    assert type(config.model) is model_config and config.block == block
    assert (config.model.d_model, config.model.N) == (96, tiny.model.N)
    assert config.max_len == config.model.max_len == tiny.model.max_len
    assert from_settings(type(config), flat_settings(config)) == config


def test_the_lm_d_ff_of_a_swiglu_model_is_the_relu_width_it_matches():
    """--set d_ff=96 with SwiGLU: three matrices 2/3 as wide as a ReLU
    feed-forward's two of width 96; saved as 96."""
    tiny = PRESETS["lm"]["tiny"]
    config = apply_settings(tiny, ["block=modern", "d_ff=96", "d_model=32"])
    assert config.model.d_ff == 96 * 2 // 3
    assert flat_settings(config)["d_ff"] == 96
    relu = apply_settings(config, ["feed_forward=relu"])
    assert relu.model.d_ff == 96


def records_to_rebuild() -> list[Path]:
    """Every published lm record, and the first record of each other task that
    publishes its weights."""
    chosen: dict[str, Path] = {}
    lm = []
    for folder, record in records.all_records():
        if record["task"] == "lm":
            lm.append(folder)
        elif record.get("weights") and record["task"] not in chosen:
            chosen[record["task"]] = folder
    return sorted([*chosen.values(), *lm])


@pytest.mark.parametrize("folder", records_to_rebuild(), ids=lambda f: f.name)
def test_a_published_record_rebuilds_its_model_from_its_flat_config(folder):
    """A record's flat config (``d_model``, not ``model.d_model``) rebuilds the
    model it was trained in: the config reads back the same, the model has the
    number of parameters the record states, and every tensor of its safetensors
    file (where it publishes one) loads by name and shape (``load_model`` is
    strict)."""
    record = records.read_record(folder)
    if record.get("weights"):
        task, model = records.load_model(folder)
    else:  # bytes: the vocabulary needs no data
        config = saved_config(
            TASKS[record["task"]].Config, record["config"], folder
        )
        task = TASKS[record["task"]](config)
        model = task.build_model()
    settings = flat_settings(task.config)
    assert {k: settings[k] for k in record["config"]} == record["config"]
    assert sum(p.numel() for p in model.parameters()) == record["parameters"]
    if record.get("weights"):
        with safe_open(str(folder / "model.safetensors"), "pt") as weights:
            saved = set(weights.keys())
        state = model.state_dict()
        assert saved <= set(state)
        # a tensor left out is a tied one: the same memory as a saved tensor
        kept = {state[k].data_ptr() for k in saved}
        assert all(state[k].data_ptr() in kept for k in set(state) - saved)


# ------------------------------------- checks at the edge, variants as classes

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "annotated_transformer"
LAYERS = [
    path
    for folder in ("blocks", "models")
    for path in sorted((PACKAGE / folder).glob("*.py"))
]
VALUE_READS = {"item", "min", "max", "tolist"}


def forwards(tree: ast.Module) -> list[tuple[str, ast.FunctionDef]]:
    """Every ``forward`` method of every class in a module, with its class."""
    return [
        (cls.name, method)
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for method in cls.body
        if isinstance(method, ast.FunctionDef) and method.name == "forward"
    ]


def checks_and_value_reads(method: ast.FunctionDef) -> list[str]:
    """The ``raise`` statements and ``.item()``/``.min()``/``.max()`` calls in a
    method: a check, or a read that makes a GPU wait for the device."""
    found = []
    for node in ast.walk(method):
        if isinstance(node, ast.Raise):
            found.append(f"raise (line {node.lineno})")
        call = node.func if isinstance(node, ast.Call) else None
        if isinstance(call, ast.Attribute) and call.attr in VALUE_READS:
            found.append(f".{call.attr}() (line {node.lineno})")
    return found


def test_no_check_or_value_read_inside_a_forward():
    found = [
        f"{path.name} {name}.forward: {what}"
        for path in LAYERS
        for name, method in forwards(ast.parse(path.read_text()))
        for what in checks_and_value_reads(method)
    ]
    assert not found, "\n".join(found)


def test_the_forward_scan_finds_what_it_is_meant_to():
    source = """
class Block:
    def forward(self, x):
        if int(x.max()) > 3:
            raise ValueError("too big")
        return x.item()
"""
    [(_, method)] = forwards(ast.parse(source))
    assert len(checks_and_value_reads(method)) == 3


def string_tables(tree: ast.Module) -> list[str]:
    """Module-level dicts whose keys are all strings and whose values name code
    (a class, a function, a tuple of them): a variant table."""
    found = []
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(node, ast.AnnAssign):
            target = node.target
        value = getattr(node, "value", None)
        if not isinstance(value, ast.Dict) or not value.keys:
            continue
        keys = all(
            isinstance(k, ast.Constant) and isinstance(k.value, str)
            for k in value.keys
        )
        names = all(
            isinstance(v, ast.Name | ast.Attribute | ast.Tuple)
            for v in value.values
        )
        if keys and names:
            found.append(ast.unparse(target))
    return found


def test_no_string_keyed_variant_table_in_blocks_or_models():
    found = [
        f"{path.name}: {name}"
        for path in LAYERS
        for name in string_tables(ast.parse(path.read_text()))
    ]
    assert not found, "\n".join(found)
    tables = string_tables(ast.parse('NORMS = {"rms": rms_norm}\nX = {"a": "b"}'))
    assert tables == ["NORMS"]
