"""The decoder-only byte model and sampling: causality, the KV
cache, temperature, top-k."""

import math

import pytest
import torch

from annotated_transformer.evaluation.sampling import (
    context_start,
    decode,
    encode,
    next_byte_distribution,
    sample,
)
from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM


def small_lm(max_len: int = 32, dropout: float = 0.1, seed: int = 0) -> DecoderLM:
    torch.manual_seed(seed)
    return DecoderLM(
        DecoderConfig(
            d_model=32, h=4, N=2, max_len=max_len, d_ff=128, dropout=dropout
        )
    ).eval()


def test_logits_shape_and_causality():
    model = small_lm()
    x = torch.randint(0, 256, (3, 20))
    logits = model(x)
    assert logits.shape == (3, 20, 256)
    changed = x.clone()
    changed[:, 12:] = torch.randint(
        0, 256, (3, 8)
    )  # rewrite the future from position 12 on
    torch.testing.assert_close(model(changed)[:, :12], logits[:, :12])
    assert not torch.allclose(
        model(changed)[:, 12:], logits[:, 12:]
    )  # the change is visible


def test_cached_forward_equals_full_forward():
    model = small_lm()
    x = torch.randint(0, 256, (2, 17))
    full = model(x)
    cache = model.new_cache()
    chunks = [model(x[:, :5], cache)]  # the prompt at once, then one byte at a time
    chunks += [model(x[:, t : t + 1], cache) for t in range(5, 17)]
    assert cache[0].length == 17
    torch.testing.assert_close(torch.cat(chunks, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "length", [10, 70]
)  # 70 > max_len: the context is cut and refilled
def test_cached_sampling_equals_recompute(length):
    model = small_lm(max_len=32)
    prompt = torch.randint(0, 256, (4, 6))
    runs = []
    for use_cache in (True, False):
        generator = torch.Generator().manual_seed(7)
        runs.append(
            sample(model, prompt, length, generator=generator, use_cache=use_cache)
        )
    assert runs[0].shape == (4, 6 + length)
    assert torch.equal(runs[0], runs[1])
    assert torch.equal(runs[0][:, :6], prompt)


def test_sampling_is_reproducible_with_a_seed_and_restores_the_mode():
    model = small_lm().train()
    prompt = encode("ab")

    def draw(seed):
        return sample(
            model, prompt, 40, generator=torch.Generator().manual_seed(seed)
        )

    assert torch.equal(draw(3), draw(3))
    assert not torch.equal(draw(3), draw(4))
    assert model.training  # sampling ran in eval mode and put the model back


def test_top_k_1_is_greedy_decoding():
    model = small_lm()
    text = encode("x")
    out = sample(
        model, text, 12, top_k=1, generator=torch.Generator().manual_seed(0)
    )
    for _ in range(
        12
    ):  # greedy by hand: the argmax of a full forward pass, byte by byte
        text = torch.cat([text, model(text)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, text)


def test_distribution_temperature_and_top_k_support():
    torch.manual_seed(0)
    logits = torch.randn(5, 256) * 3
    for temperature in (0.5, 1.0, 2.0):
        expected = torch.exp(logits.double() / temperature)
        expected /= expected.sum(-1, keepdim=True)
        probs = next_byte_distribution(logits, temperature)
        torch.testing.assert_close(probs.double(), expected, atol=1e-6, rtol=1e-5)
    k = 7
    probs = next_byte_distribution(logits, 0.8, top_k=k)
    top = logits.topk(k, dim=-1).indices
    for row in range(5):
        support = set(probs[row].nonzero().flatten().tolist())
        assert support == set(top[row].tolist())
        kept = logits[row, top[row]].double() / 0.8
        torch.testing.assert_close(
            probs[row, top[row]].double(), kept.softmax(-1), atol=1e-6, rtol=1e-5
        )


def test_sampled_bytes_stay_in_the_top_k():
    # A model whose logits ignore the input: bias only, so the top-k set is known.
    model = small_lm()
    with torch.no_grad():
        model.to_logits.weight.zero_()
        model.to_logits.bias.copy_(torch.linspace(0, 5, 256))
    out = sample(
        model, encode("q"), 300, top_k=3, generator=torch.Generator().manual_seed(1)
    )
    assert set(out[0, 1:].tolist()) == {253, 254, 255}


def test_context_start():
    assert context_start(total=10, start=0, max_len=16) == 0
    assert context_start(total=16, start=0, max_len=16) == 0
    assert (
        context_start(total=17, start=0, max_len=16) == 9
    )  # keep the last 8 bytes
    assert context_start(total=20, start=9, max_len=16) == 9


def test_utf8_round_trip():
    text = "naïve — 東京"
    ids = encode(text)
    assert ids.shape == (1, len(text.encode("utf-8")))
    assert decode(ids[0]) == text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": 0.0}, "temperature must be >= 0.001"),
        ({"temperature": -1.0}, "temperature must be >= 0.001"),
        ({"temperature": math.nan}, "temperature must be >= 0.001"),
        # so cold that the logits divided by it overflow to inf (softmax: NaN)
        ({"temperature": 1e-45}, "temperature must be >= 0.001"),
        ({"top_k": 0}, "top_k must be >= 1"),
    ],
)
def test_bad_sampling_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sample(small_lm(), encode("a"), 5, **kwargs)


def test_bad_model_inputs():
    model = small_lm(max_len=8)
    with pytest.raises(ValueError, match="at least one byte"):
        sample(model, torch.zeros(1, 0, dtype=torch.long), 5)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 256\)"):
        sample(model, torch.tensor([[3, 256]]), 5)
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
    with pytest.raises(ValueError, match="must be a positive integer"):
        DecoderConfig(max_len=0)
