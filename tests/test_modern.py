"""The modern decoder-only LM: block wiring, parameter counts, the KV cache,
causality and sampling with sampling.sample."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated_transformer.blocks.feed_forward import swiglu_width
from annotated_transformer.evaluation.sampling import encode, sample
from annotated_transformer.models.modern_decoder import (
    ModernBlock,
    ModernConfig,
    ModernDecoderLM,
    modern_parameter_formula,
)
from annotated_transformer.tasks.variants import check_choices, modern_parts

pytestmark = pytest.mark.usefixtures("one_thread")
SIZES = {"d_model": 32, "h": 4, "N": 2, "d_ff": 48, "kv_heads": 2}


def modern_config(norm="rms", positions="rope", feed_forward="swiglu", **sizes):
    """A ModernConfig with its parts named as the lm task names them."""
    return ModernConfig(**sizes, **modern_parts(norm, positions, feed_forward))


def small_lm(max_len=32, seed=0, **kwargs):
    torch.manual_seed(seed)
    config = modern_config(max_len=max_len, **{**SIZES, **kwargs})
    return ModernDecoderLM(config).double().eval()


def tokens(batch, length, seed=1):
    return torch.randint(
        0, 256, (batch, length), generator=torch.Generator().manual_seed(seed)
    )


def test_block_is_pre_norm_rms_gqa_swiglu():
    torch.manual_seed(0)
    config = ModernConfig(d_model=16, h=4, kv_heads=2, d_ff=24)
    block = ModernBlock(config).double().eval()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        block.norm1.weight.uniform_(0.5, 1.5)
        block.norm2.weight.uniform_(0.5, 1.5)
    norm1, norm2 = (
        nn.RMSNorm(16, eps=1e-6).double(),
        nn.RMSNorm(16, eps=1e-6).double(),
    )
    norm1.load_state_dict(block.norm1.state_dict())
    norm2.load_state_dict(block.norm2.state_dict())
    ff = block.feed_forward
    y = x + block.attention(norm1(x))
    z = norm2(y)
    expected = (
        y + (F.silu(z @ ff.w1.weight.T) * (z @ ff.w3.weight.T)) @ ff.w2.weight.T
    )
    torch.testing.assert_close(block(x), expected)
    assert all(not name.endswith("bias") for name, _ in block.named_parameters())


@pytest.mark.parametrize(
    ("vocab", "d_model", "h", "kv_heads", "d_ff", "N"),
    [
        (256, 32, 4, 2, 48, 2),
        (256, 32, 4, 4, 88, 3),
        (50, 48, 6, 1, 64, 1),
        (7, 16, 8, 2, 8, 2),
    ],
)
def test_parameter_count_matches_formula(vocab, d_model, h, kv_heads, d_ff, N):
    config = ModernConfig(vocab, d_model, h, N, 16, d_ff, kv_heads)
    model = ModernDecoderLM(config)
    formula = modern_parameter_formula(config)
    measured = {
        "embed": model.embed.weight.numel(),
        "norm": model.norm.weight.numel(),
    }
    for i, block in enumerate(model.blocks):
        measured[f"blocks.{i}"] = sum(p.numel() for p in block.parameters())
    measured["to_logits"] = model.to_logits.weight.numel()
    assert formula == measured
    assert sum(formula.values()) == sum(p.numel() for p in model.parameters())


def test_grouping_saves_key_value_parameters_and_default_width():
    d, h, N = 32, 4, 2
    mha, gqa = (
        ModernDecoderLM(ModernConfig(d_model=d, h=h, N=N, kv_heads=k))
        for k in (h, 1)
    )
    saved = sum(p.numel() for p in mha.parameters()) - sum(
        p.numel() for p in gqa.parameters()
    )
    assert saved == N * 2 * d * d * (
        1 - 1 / h
    )  # W^K and W^V shrink from d² to d²/h
    assert mha.blocks[0].feed_forward.w1.out_features == swiglu_width(4 * d)


def test_logits_shape_and_causality():
    model = small_lm()
    x = tokens(3, 20)
    logits = model(x)
    assert logits.shape == (3, 20, 256)
    changed = x.clone()
    changed[:, 12:] = tokens(3, 8, seed=2)
    torch.testing.assert_close(model(changed)[:, :12], logits[:, :12])
    assert not torch.allclose(model(changed)[:, 12:], logits[:, 12:])


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_cached_decoding_equals_full_recomputation(kv_heads):
    model = small_lm(kv_heads=kv_heads)
    x = tokens(2, 17)
    full = model(x)
    one_by_one = model.new_cache()
    steps = torch.cat(
        [model(x[:, t : t + 1], one_by_one) for t in range(17)], dim=1
    )
    torch.testing.assert_close(steps, full)
    prompted = model.new_cache()
    chunks = [
        model(x[:, :5], prompted),
        model(x[:, 5:8], prompted),
    ]  # 3 new after 5 cached
    chunks += [model(x[:, t : t + 1], prompted) for t in range(8, 17)]
    torch.testing.assert_close(torch.cat(chunks, dim=1), full)
    assert prompted[0].length == 17


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_cache_stores_only_the_key_value_heads(kv_heads):
    x = tokens(2, 10)

    def cache_bytes(k):
        model = small_lm(kv_heads=k)
        cache = model.new_cache()
        model(x, cache)
        assert cache[0].key.shape == (2, k, 10, 32 // 4)
        return sum(c.key.nbytes + c.value.nbytes for c in cache)

    h = SIZES["h"]
    assert cache_bytes(h) == h // kv_heads * cache_bytes(kv_heads)


@pytest.mark.parametrize(
    "length", [10, 70]
)  # 70 > max_len: the context is cut and refilled
def test_sampling_works_unchanged(length):
    model = small_lm(max_len=32).float()
    prompt = tokens(3, 6)
    runs = []
    for use_cache in (True, False):
        generator = torch.Generator().manual_seed(7)
        runs.append(
            sample(model, prompt, length, generator=generator, use_cache=use_cache)
        )
    assert runs[0].shape == (3, 6 + length)
    assert torch.equal(runs[0], runs[1])
    assert torch.equal(runs[0][:, :6], prompt)


def test_a_few_steps_learn_a_repeated_string():
    model = small_lm(seed=0).float().train()
    text = encode("abcabcabcabcabcabcabc")
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        loss = F.cross_entropy(model(text[:, :-1]).flatten(0, 1), text[0, 1:])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_bad_inputs_raise_like_decoder_lm():
    model = small_lm(max_len=8)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 256\)"):
        sample(
            model, torch.tensor([[3, 256]]), 2
        )  # ids are checked where they enter
    with pytest.raises(ValueError, match="exceed the model's context of max_len=8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    cache = model.new_cache()
    model(torch.zeros(1, 6, dtype=torch.long), cache)
    with pytest.raises(ValueError, match=r"6 cached \+ 3 new"):
        model(torch.zeros(1, 3, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="the cache has 1 layers"):
        model(torch.zeros(1, 1, dtype=torch.long), cache[:1])
    with pytest.raises(ValueError, match="integer token ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="at least one byte"):
        model(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="must be a positive integer"):
        ModernDecoderLM(ModernConfig(max_len=0))
    with pytest.raises(ValueError, match="kv_heads must divide h"):
        ModernDecoderLM(ModernConfig(h=4, kv_heads=3))


# --- the switches of chapter 15's ablation
# ----------------------------------------------------

PRE_NORM_2017 = {
    "norm": "layer",
    "positions": "learned",
    "feed_forward": "relu",
    "bias": True,
}
SWITCHES = [
    PRE_NORM_2017,
    {**PRE_NORM_2017, "norm": "rms"},
    {"feed_forward": "relu", "bias": True},
    {"bias": True},
    {},
    {"positions": "alibi"},
    {"positions": "sinusoidal"},
    {"positions": "none", "norm": "layer"},
]


@pytest.mark.parametrize("switches", SWITCHES)
@pytest.mark.parametrize("kv_heads", [1, 4])
def test_every_switch_setting_counts_as_its_formula_and_caches_exactly(
    switches, kv_heads
):
    model = small_lm(kv_heads=kv_heads, **switches)
    # d_ff is the hidden width, ReLU or SwiGLU
    formula = modern_parameter_formula(model.config)
    assert sum(formula.values()) == sum(p.numel() for p in model.parameters())
    x = tokens(2, 11)
    cache = model.new_cache()
    steps = torch.cat(
        [model(x[:, :4], cache), model(x[:, 4:5], cache), model(x[:, 5:], cache)], 1
    )
    torch.testing.assert_close(steps, model(x))


def test_the_ladder_starts_at_pytorchs_pre_norm_layer_with_a_causal_mask():
    """norm=layer, learned positions, ReLU, biases, kv_heads = h:
    nn.TransformerEncoderLayer with norm_first=True, fed the same weights, under a
    causal mask."""
    torch.manual_seed(0)
    d, h, d_ff = 16, 4, 24
    config = modern_config(d_model=d, h=h, kv_heads=h, d_ff=d_ff, **PRE_NORM_2017)
    block = ModernBlock(config).double().eval()
    for p in block.parameters():  # move LayerNorm off its (1, 0) start
        torch.nn.init.normal_(p, std=0.3)
    reference = nn.TransformerEncoderLayer(
        d, h, d_ff, 0.0, batch_first=True, norm_first=True
    )
    reference = reference.double().eval()
    att, ff = block.attention, block.feed_forward
    with torch.no_grad():
        reference.self_attn.in_proj_weight.copy_(
            torch.cat([att.w_q.weight, att.w_k.weight, att.w_v.weight])
        )
        reference.self_attn.in_proj_bias.copy_(
            torch.cat([att.w_q.bias, att.w_k.bias, att.w_v.bias])
        )
        reference.self_attn.out_proj.load_state_dict(att.w_o.state_dict())
        reference.linear1.load_state_dict(ff.w_1.state_dict())
        reference.linear2.load_state_dict(ff.w_2.state_dict())
        reference.norm1.load_state_dict(block.norm1.state_dict())
        reference.norm2.load_state_dict(block.norm2.state_dict())
    x = torch.randn(2, 9, d, dtype=torch.float64)
    causal = nn.Transformer.generate_square_subsequent_mask(9, dtype=torch.float64)
    torch.testing.assert_close(
        block(x), reference(x, src_mask=causal, is_causal=True)
    )


def test_the_pre_norm_start_has_chapter_14s_parameters_plus_a_final_norm():
    from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM

    old = DecoderLM(DecoderConfig(256, 32, 4, 2, 32, 128))
    new = ModernDecoderLM(
        modern_config(
            vocab=256,
            d_model=32,
            h=4,
            N=2,
            max_len=32,
            d_ff=128,
            kv_heads=4,
            **PRE_NORM_2017,
        )
    )
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(new) == count(old) + 2 * 32  # the final LayerNorm's gain and bias


def test_extend_context_keeps_the_short_outputs_and_reads_longer_inputs():
    x = tokens(2, 40)
    for positions in ("rope", "alibi", "none", "sinusoidal"):
        model = small_lm(max_len=16, positions=positions)
        short = model(x[:, :16])
        model.extend_context(40)
        torch.testing.assert_close(
            model(x)[:, :16], short
        )  # causal: the first 16 unchanged
    learned = small_lm(max_len=16, positions="learned")
    with pytest.raises(
        ValueError, match="learned positions have no vector past position 15"
    ):
        learned.extend_context(40)


def test_unknown_switches_are_refused_in_one_line():
    with pytest.raises(
        ValueError, match="positions='xpos': use one of rope, alibi"
    ):
        check_choices("rms", "xpos", "swiglu")
    with pytest.raises(ValueError, match="norm='batch': use one of rms, layer"):
        check_choices("batch", "rope", "swiglu")
