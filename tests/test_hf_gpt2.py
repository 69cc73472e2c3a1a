"""GPT2LM.from_pretrained / save_pretrained against Hugging Face's GPT2LMHeadModel.

No network: the reference models are built by ``transformers`` from a GPT2Config
with random weights and saved by its own ``save_pretrained``, the layout of the
published checkpoints.
"""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel

from annotated_transformer.evaluation.sampling import sample
from annotated_transformer.models.gpt2 import GPT2LM, GPTConfig

SMALL = {"vocab_size": 300, "n_positions": 64, "n_embd": 48, "n_layer": 3}
SMALL["n_head"] = 4


def reference(tmp_path, **sizes) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(**sizes, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    model.save_pretrained(tmp_path)
    return model


def greedy(model: GPT2LMHeadModel, x: torch.Tensor, new: int) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(
            x,
            attention_mask=torch.ones_like(x),
            max_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
        )


def check_equal(model: GPT2LM, ref: GPT2LMHeadModel) -> None:
    """Logits within 1e-5 (float32) and the same greedy continuation."""
    rng = torch.Generator().manual_seed(1)
    x = torch.randint(0, ref.config.vocab_size, (2, 12), generator=rng)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x).logits, rtol=0, atol=1e-5)
    assert torch.equal(sample(model, x, 6, top_k=1), greedy(ref, x, 6))


def test_loaded_gpt2_gives_the_logits_and_greedy_tokens_of_transformers(tmp_path):
    ref = reference(tmp_path, **SMALL)
    check_equal(GPT2LM.from_pretrained(tmp_path).eval(), ref)


def test_gpt2_124m_shape_equals_transformers():
    """GPT2Config's defaults are GPT-2 (124M). The weights come from memory (the
    files' path is the small test's), so that the test takes seconds."""
    torch.manual_seed(0)
    ref = GPT2LMHeadModel(GPT2Config(bos_token_id=0, eos_token_id=0)).eval()
    model = GPT2LM.from_weights(ref.config.to_dict(), ref.state_dict()).eval()
    assert sum(p.numel() for p in model.parameters()) == 124_439_808
    assert model.to_logits.weight is model.embed.weight
    check_equal(model, ref)


def test_saved_gpt2_loads_into_transformers(tmp_path):
    torch.manual_seed(0)
    model = GPT2LM(
        GPTConfig(vocab=120, d_model=32, h=4, N=2, max_len=40, d_ff=80, eps=1e-6)
    )
    model.eval().save_pretrained(tmp_path)
    ref = GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    assert ref.config.n_inner == 80 and ref.config.layer_norm_epsilon == 1e-6
    x = torch.randint(0, 120, (3, 17))
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x).logits, rtol=0, atol=1e-5)
    again = GPT2LM.from_pretrained(tmp_path)
    loaded, saved = again.state_dict(), model.state_dict()
    assert all(torch.equal(loaded[name], w) for name, w in saved.items())


def test_published_layout_without_prefix_and_with_mask_buffers_loads(tmp_path):
    ref = reference(tmp_path, **SMALL)
    state = ref.state_dict()
    weights = {n.removeprefix("transformer."): w.clone() for n, w in state.items()}
    n = SMALL["n_positions"]
    for i in range(SMALL["n_layer"]):  # older files store the causal mask
        weights[f"h.{i}.attn.bias"] = torch.ones(n, n).tril().view(1, 1, n, n)
    weights["lm_head.weight"] = weights["wte.weight"].clone()
    save_file(weights, tmp_path / "model.safetensors")
    model = GPT2LM.from_pretrained(tmp_path).eval()
    x = torch.randint(0, 300, (1, 9))
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x).logits, rtol=0, atol=1e-5)


def test_left_padded_batch_equals_transformers_attention_mask(tmp_path):
    ref = reference(tmp_path, **SMALL)
    model = GPT2LM.from_pretrained(tmp_path).eval()
    x = torch.randint(1, 300, (3, 10))
    mask = torch.ones(3, 10, dtype=torch.bool)
    mask[0, :4], mask[1, :7] = False, False  # rows of 6, 3 and 10 tokens
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # Hugging Face's recipe
    with torch.no_grad():
        ours = model(x, mask=mask)
        theirs = ref(x, attention_mask=mask.long(), position_ids=positions).logits
    torch.testing.assert_close(ours[mask], theirs[mask], rtol=0, atol=1e-5)


def drop_bias(w):
    w.pop("transformer.h.1.mlp.c_fc.bias")


@pytest.mark.parametrize(
    "change, message",
    [
        (drop_bias, "missing h.1.mlp.c_fc.bias"),
        (lambda w: w.update(extra=torch.zeros(2)), "unexpected extra"),
        (
            lambda w: w.update({"transformer.wpe.weight": torch.zeros(10, 48)}),
            r"wpe.weight of shape \(10, 48\), but config.json implies \(64, 48\)",
        ),
        (lambda w: w.update({"lm_head.weight": torch.zeros(300, 48)}), "ties them"),
    ],
)
def test_missing_extra_or_misshapen_weights_are_named(tmp_path, change, message):
    reference(tmp_path, **SMALL)
    weights = load_file(tmp_path / "model.safetensors")
    change(weights)
    save_file(weights, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=message) as error:
        GPT2LM.from_pretrained(tmp_path)
    assert "\n" not in str(error.value)


def test_unsupported_config_and_missing_files_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"config\.json and model\."):
        GPT2LM.from_pretrained(tmp_path)
    reference(tmp_path, **SMALL)
    config = json.loads((tmp_path / "config.json").read_text())
    config["activation_function"] = "relu"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="activation_function='relu'"):
        GPT2LM.from_pretrained(tmp_path)
