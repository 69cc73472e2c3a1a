"""The full model against torch.nn.Transformer,
leak/padding/permutation checks, counts."""

import math

import pytest
import torch
from torch import nn

from annotated_transformer.blocks.attention import MultiHeadedAttention
from annotated_transformer.blocks.embeddings import check_ids
from annotated_transformer.blocks.feed_forward import PositionwiseFeedForward
from annotated_transformer.blocks.kv_cache import DecoderCache
from annotated_transformer.blocks.layers import Encoder, EncoderLayer
from annotated_transformer.blocks.masks import (
    check_rows,
    make_std_mask,
    padding_mask,
    subsequent_mask,
)
from annotated_transformer.models.encoder_decoder import (
    Generator,
    Transformer,
    TransformerConfig,
    make_model,
    parameter_counts,
    parameter_formula,
    tie_weights,
)

PAD = 0
# nn.Transformer notes that norm_first disables its nested-tensor
# fast path: expected here.
pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
SIZES = {"N": 2, "d_model": 32, "d_ff": 64, "h": 4}


def make_transformer(*sizes, **named) -> Transformer:
    """The translation model from its config alone."""
    return Transformer(TransformerConfig(*sizes, **named))


def small_model(src_vocab=11, tgt_vocab=13, build=make_transformer, **kwargs):
    torch.manual_seed(0)
    return build(src_vocab, tgt_vocab, **{**SIZES, **kwargs}).eval()


def copy_attention(ours, theirs):
    q, k, v, o = ours.linears
    theirs.in_proj_weight.copy_(torch.cat([q.weight, k.weight, v.weight]))
    theirs.in_proj_bias.copy_(torch.cat([q.bias, k.bias, v.bias]))
    theirs.out_proj.weight.copy_(o.weight)
    theirs.out_proj.bias.copy_(o.bias)


def load_into_torch_transformer(model, ref: nn.Transformer) -> None:
    """The weight mapping: our module names -> nn.Transformer's parameters."""
    with torch.no_grad():
        for ours, theirs in zip(
            model.encoder.layers, ref.encoder.layers, strict=True
        ):
            copy_attention(ours.self_attn, theirs.self_attn)
            theirs.linear1.load_state_dict(ours.feed_forward.w_1.state_dict())
            theirs.linear2.load_state_dict(ours.feed_forward.w_2.state_dict())
            theirs.norm1.load_state_dict(ours.sublayer[0].norm.state_dict())
            theirs.norm2.load_state_dict(ours.sublayer[1].norm.state_dict())
        ref.encoder.norm.load_state_dict(model.encoder.norm.state_dict())
        for ours, theirs in zip(
            model.decoder.layers, ref.decoder.layers, strict=True
        ):
            copy_attention(ours.self_attn, theirs.self_attn)
            copy_attention(ours.src_attn, theirs.multihead_attn)
            theirs.linear1.load_state_dict(ours.feed_forward.w_1.state_dict())
            theirs.linear2.load_state_dict(ours.feed_forward.w_2.state_dict())
            for i, norm in enumerate((theirs.norm1, theirs.norm2, theirs.norm3)):
                norm.load_state_dict(ours.sublayer[i].norm.state_dict())
        ref.decoder.norm.load_state_dict(model.decoder.norm.state_dict())


def random_batch(src_vocab=11, tgt_vocab=13, batch=3, src_len=7, tgt_len=6):
    g = torch.Generator().manual_seed(1)
    src = torch.randint(1, src_vocab, (batch, src_len), generator=g)
    tgt = torch.randint(1, tgt_vocab, (batch, tgt_len), generator=g)
    src[1, 5:] = PAD
    tgt[2, 4:] = PAD
    return src, tgt


@pytest.mark.parametrize("build", [make_model, make_transformer])
def test_matches_torch_nn_transformer(build):
    """The chapter's 2017 model and the runner's, each against PyTorch's."""
    model = small_model(build=build)
    # Also move LayerNorms and biases off their defaults.
    for p in model.parameters():
        nn.init.normal_(p, std=0.2)
    ref = nn.Transformer(
        d_model=SIZES["d_model"], nhead=SIZES["h"], num_encoder_layers=SIZES["N"],
        num_decoder_layers=SIZES["N"], dim_feedforward=SIZES["d_ff"], dropout=0.1,
        activation="relu", batch_first=True, norm_first=True,
    ).eval()  # fmt: skip
    load_into_torch_transformer(model, ref)
    src, tgt = random_batch()
    ours = model(src, tgt, padding_mask(src, PAD), make_std_mask(tgt, PAD))
    # nn.Transformer has no embeddings: feed it the same embedded inputs.
    expected = ref(
        model.src_embed(src),
        model.tgt_embed(tgt),
        tgt_mask=~subsequent_mask(tgt.size(1))[0],  # PyTorch: True = may NOT attend
        src_key_padding_mask=src == PAD,
        tgt_key_padding_mask=tgt == PAD,
        memory_key_padding_mask=src == PAD,
    )
    real = tgt != PAD  # padded target positions differ by design and feed no loss
    torch.testing.assert_close(ours[real], expected[real], atol=1e-5, rtol=1e-5)


def test_transformer_is_make_model_with_the_later_chapters_classes():
    """Same seed, same weights under the same names (so records written by either
    load into the other); the same outputs; only the runner's has the cache."""
    simple, full = small_model(build=make_model), small_model()
    assert isinstance(full, Transformer) and not isinstance(simple, Transformer)
    a, b = simple.state_dict(), full.state_dict()
    assert list(a) == list(b)
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=0, rtol=0)
    src, tgt = random_batch()
    masks = padding_mask(src, PAD), make_std_mask(tgt, PAD)
    torch.testing.assert_close(
        full(src, tgt, *masks), simple(src, tgt, *masks), atol=1e-5, rtol=1e-5
    )
    with pytest.raises(TypeError):
        simple.decode(simple.encode(src, masks[0]), masks[0], tgt, None, None)


def test_changing_future_targets_leaves_earlier_outputs_unchanged():
    model = small_model()
    src, tgt = random_batch()
    tgt[2] = torch.tensor([1, 2, 3, 4, 5, 6])
    src_mask = padding_mask(src, PAD)
    out = model(src, tgt, src_mask, make_std_mask(tgt, PAD))
    for k in range(1, tgt.size(1)):
        changed = tgt.clone()
        changed[:, k:] = torch.randint(1, 13, changed[:, k:].shape)
        out2 = model(src, changed, src_mask, make_std_mask(changed, PAD))
        torch.testing.assert_close(out2[:, :k], out[:, :k])
        assert not torch.allclose(out2[:, k:], out[:, k:])


def test_extra_source_padding_changes_nothing():
    model = small_model()
    src, tgt = random_batch()
    padded = torch.cat([src, torch.full((src.size(0), 4), PAD)], dim=1)
    tgt_mask = make_std_mask(tgt, PAD)
    out = model(src, tgt, padding_mask(src, PAD), tgt_mask)
    out_padded = model(padded, tgt, padding_mask(padded, PAD), tgt_mask)
    torch.testing.assert_close(out_padded, out, atol=1e-5, rtol=1e-5)
    memory = model.encode(src, padding_mask(src, PAD))
    memory_padded = model.encode(padded, padding_mask(padded, PAD))
    real = src != PAD
    torch.testing.assert_close(memory_padded[:, : src.size(1)][real], memory[real])


def test_encoder_is_permutation_equivariant_without_positions():
    torch.manual_seed(0)
    d = 16
    layer = EncoderLayer(
        d, MultiHeadedAttention(4, d, 0.0), PositionwiseFeedForward(d, 32), 0.0
    )
    encoder = Encoder(layer, 2).eval()
    x = torch.randn(2, 9, d)
    perm = torch.randperm(9)
    torch.testing.assert_close(encoder(x[:, perm], None), encoder(x, None)[:, perm])


def test_cached_decoding_matches_full_decoding():
    model = small_model()
    src, tgt = random_batch()
    tgt[2, 4:] = 5  # no padding: each step decodes real tokens
    src_mask = padding_mask(src, PAD)
    memory = model.encode(src, src_mask)
    full = model.decode(memory, src_mask, tgt, subsequent_mask(tgt.size(1)))
    cache = DecoderCache(SIZES["N"])
    first = model.decode(
        memory, src_mask, tgt[:, :2], subsequent_mask(2), cache=cache
    )
    steps = [first]
    for t in range(2, 4):
        steps.append(
            model.decode(memory, src_mask, tgt[:, t : t + 1], None, cache=cache)
        )
    steps.append(
        model.decode(
            memory, src_mask, tgt[:, 4:], subsequent_mask(2, 4), cache=cache
        )
    )
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == tgt.size(1)


def test_generator_logits_and_log_probs():
    torch.manual_seed(0)
    gen = Generator(8, 5)
    x = torch.randn(2, 3, 8)
    logits = gen.logits(x)
    torch.testing.assert_close(logits, x @ gen.proj.weight.T + gen.proj.bias)
    log_probs = gen(x)
    torch.testing.assert_close(
        log_probs, logits - logits.exp().sum(-1, keepdim=True).log()
    )


def test_matrices_are_glorot_uniform():
    model = small_model(src_vocab=50, tgt_vocab=60)
    for name, p in model.named_parameters():
        if p.dim() > 1:
            fan_out, fan_in = p.shape
            bound = math.sqrt(6 / (fan_in + fan_out))
            assert p.abs().max() <= bound, name
            assert p.abs().max() > 0.9 * bound, name  # uniform over the whole range


@pytest.mark.parametrize(
    ("src_vocab", "tgt_vocab", "N", "d_model", "d_ff", "h"),
    [(11, 13, 1, 8, 16, 2), (100, 37, 2, 32, 64, 4), (500, 600, 3, 64, 256, 8)],
)
def test_parameter_count_matches_formula(src_vocab, tgt_vocab, N, d_model, d_ff, h):
    model = make_model(src_vocab, tgt_vocab, N=N, d_model=d_model, d_ff=d_ff, h=h)
    counts = parameter_counts(model)
    assert counts == parameter_formula(src_vocab, tgt_vocab, N, d_model, d_ff)
    total = sum(p.numel() for p in model.parameters())
    assert sum(counts.values()) == total
    # Independent reference: PyTorch's transformer plus
    # embeddings and the output layer.
    ref = nn.Transformer(d_model, h, N, N, d_ff, batch_first=True, norm_first=True)
    torch_total = sum(p.numel() for p in ref.parameters())
    assert (
        total
        == torch_total
        + (src_vocab + tgt_vocab) * d_model
        + (d_model + 1) * tgt_vocab
    )


def test_base_model_size_is_near_the_paper():
    """Base model, shared 37000-token vocabulary, source/target embeddings and the
    output projection all tied (§3.4): one 37000 × 512 matrix. Table 3 reports 65M
    parameters; the formula gives 63.1M (the paper does not say exactly what its
    count includes)."""
    counts = parameter_formula(37000, 37000)
    tied = sum(counts.values()) - counts["src_embed"] - counts["tgt_embed"]
    assert abs(tied - 65e6) / 65e6 < 0.05


def test_attention_dropout_is_separate_from_dropout():
    def rates(
        model: nn.Module,
    ) -> set[tuple[bool, float]]:  # (in attention?, p) of every dropout
        attention = {
            id(m.dropout)
            for m in model.modules()
            if isinstance(m, MultiHeadedAttention)
        }
        drops = [m for m in model.modules() if isinstance(m, nn.Dropout)]
        return {(id(m) in attention, m.p) for m in drops}

    assert rates(make_transformer(11, 11, N=1, d_model=8, d_ff=16, h=2)) == {
        (True, 0.1),
        (False, 0.1),
    }
    model = make_transformer(11, 11, N=1, d_model=8, d_ff=16, h=2, attn_dropout=0.0)
    assert rates(model) == {(True, 0.0), (False, 0.1)}


def test_bad_inputs_raise_with_sizes():
    model = small_model(max_len=10)
    src, tgt = random_batch(src_len=7, tgt_len=6)
    src_mask, tgt_mask = padding_mask(src, PAD), make_std_mask(tgt, PAD)
    long = torch.ones(1, 12, dtype=torch.long)
    with pytest.raises(ValueError, match=r"len=12.*max_len=10"):
        model.encode(long, padding_mask(long, PAD))
    with pytest.raises(ValueError, match=r"\[0, 11\).*from 1 to 11"):
        check_ids(torch.tensor([[1, 11]]), 11)  # where ids enter, not in forward
    with pytest.raises(ValueError, match=r"src_mask has shape \(3, 7\).*k_len=7"):
        model(src, tgt, src_mask[:, 0], tgt_mask)
    with pytest.raises(
        ValueError, match=r"tgt_mask has shape \(3, 5, 5\).*q_len=6"
    ):
        model(src, tgt, src_mask, tgt_mask[:, :5, :5])
    with pytest.raises(ValueError, match="d_model=30 is not divisible by h=4"):
        make_model(11, 13, N=1, d_model=30, h=4)
    with pytest.raises(ValueError, match="cache has 1 layers"):
        memory = model.encode(src, src_mask)
        model.decode(memory, src_mask, tgt[:, :1], None, cache=DecoderCache(1))


def test_left_padded_targets_stay_finite():
    """With left padding the original make_std_mask leaves padded query 0 with no
    key at all (softmax of nothing: NaN, refused where batches are built); ours lets
    padded queries see themselves."""
    model = small_model()
    src, _ = random_batch()
    tgt = torch.tensor([[PAD, PAD, 3, 4, 5], [1, 2, 3, 4, 5], [PAD, 7, 8, 9, 10]])
    src_mask = padding_mask(src, PAD)
    out = model(src, tgt, src_mask, make_std_mask(tgt, PAD))
    assert torch.isfinite(out).all()
    original = (tgt != PAD).unsqueeze(-2) & subsequent_mask(tgt.size(1))
    with pytest.raises(ValueError, match="no key it may attend to"):
        check_rows(original)  # what a batch built with it would be refused for


def test_tie_weights_shares_one_table_and_saves_its_parameters():
    V, d = 37, 16
    untied = make_model(V, V, N=1, d_model=d, d_ff=32, h=2)
    tied = tie_weights(
        make_model(V, V, N=1, d_model=d, d_ff=32, h=2), share_source=True
    )
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert (
        count(untied) - count(tied) == 2 * V * d
    )  # generator and source table gone
    table = tied.tgt_embed.embed.lut.weight
    assert (
        tied.generator.proj.weight is table
        and tied.src_embed.embed.lut.weight is table
    )
    # The generator's logits are now x · Eᵀ + b with the embedding table E.
    x = torch.randn(2, 3, d)
    torch.testing.assert_close(
        tied.generator.logits(x), x @ table.T + tied.generator.proj.bias
    )


def test_tie_weights_refuses_different_vocabularies():
    with pytest.raises(ValueError, match="share_source needs one vocabulary"):
        tie_weights(
            make_model(11, 13, N=1, d_model=16, d_ff=32, h=2), share_source=True
        )
