"""Prompts of different lengths in one batch: left padding, masked, equals one at a time.

The reference is each prompt run alone, without padding or mask, through the same model.
"""

import pytest
import torch

from annotated_transformer.gpt2 import GPT2LM
from annotated_transformer.masks import left_padding_mask, left_padding_positions
from annotated_transformer.model import DecoderLM
from annotated_transformer.modern import ModernDecoderLM
from annotated_transformer.sampling import left_pad, sample

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]
MODELS = {
    "DecoderLM": lambda: DecoderLM(40, 32, 4, 2, 24, 64, dropout=0.0),
    "rope": lambda: ModernDecoderLM(40, 32, 4, 2, 24),
    "alibi": lambda: ModernDecoderLM(40, 32, 4, 2, 24, positions="alibi"),
    "sinusoidal": lambda: ModernDecoderLM(40, 32, 4, 2, 24, positions="sinusoidal"),
    "GPT2LM": lambda: GPT2LM(40, 32, 4, 2, 24),
}


def test_mask_and_positions_by_hand():
    real = torch.tensor([[False, False, True, True], [True, True, True, True]])
    assert left_padding_mask(real, 4)[0].int().tolist() == [
        [1, 0, 0, 0],  # padding sees only itself
        [0, 1, 0, 0],
        [0, 0, 1, 0],
        [0, 0, 1, 1],
    ]
    assert left_padding_mask(real, 1)[:, 0].int().tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]
    assert left_padding_positions(real, 4).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]
    assert left_padding_positions(real, 2).tolist() == [[0, 1], [2, 3]]
    ids, mask = left_pad([[7, 8], [9, 10, 11, 12]], pad=3)
    assert ids.tolist() == [[3, 3, 7, 8], [9, 10, 11, 12]] and torch.equal(mask, real)


@pytest.mark.parametrize("name", MODELS)
def test_padded_batch_gives_each_prompts_own_logits_with_and_without_cache(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    x, mask = left_pad(PROMPTS)
    width = x.size(1)
    with torch.no_grad():
        full = model(x, mask=mask)
        cache = model.new_cache()
        model(x[:, :3], cache, mask=mask[:, :3])
        steps = [model(x[:, t : t + 1], cache, mask=mask[:, : t + 1]) for t in range(3, width)]
        for i, prompt in enumerate(PROMPTS):
            alone = model(torch.tensor([prompt]))[0]
            torch.testing.assert_close(full[i, width - len(prompt) :], alone)
            for t, step in zip(range(3, width), steps, strict=True):
                if t >= width - len(prompt):
                    torch.testing.assert_close(step[i, 0], alone[t - width + len(prompt)])


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("name", MODELS)
def test_batched_greedy_sampling_equals_one_prompt_at_a_time(name, use_cache):
    torch.manual_seed(0)
    model = MODELS[name]()
    x, mask = left_pad(PROMPTS)
    out = sample(model, x, 20, top_k=1, mask=mask, use_cache=use_cache)  # crops at 24
    for i, prompt in enumerate(PROMPTS):
        alone = sample(model, torch.tensor([prompt]), 20, top_k=1, use_cache=use_cache)
        if len(prompt) == x.size(1):  # equal crops: the rows are the same text
            assert torch.equal(out[i], alone[0])
        else:  # before the first crop
            new = 24 - x.size(1)
            assert torch.equal(out[i, x.size(1) : 24], alone[0, len(prompt) :][:new])


def test_bad_masks_are_refused_in_one_line():
    model = MODELS["rope"]()
    x, mask = left_pad(PROMPTS)
    with pytest.raises(ValueError, match=r"mask must be bool \(batch, cached \+ new\)"):
        model(x, mask=mask[:, 1:])
    with pytest.raises(ValueError, match="padding on the left"):
        sample(model, x, 2, mask=mask.flip(1))
    with pytest.raises(ValueError, match="padding on the left"):
        sample(model, x, 2, mask=mask.long())


def test_norm_eps_is_a_setting():
    rms = ModernDecoderLM(40, 32, 4, 2, 24, eps=1e-5)
    assert {m.eps for m in rms.modules() if hasattr(m, "eps")} == {1e-5}
    assert {m.eps for m in ModernDecoderLM(40, 32, 4, 1, 8).modules() if hasattr(m, "eps")} == {
        1e-6
    }
    layer = ModernDecoderLM(40, 32, 4, 1, 8, norm="layer")
    assert {m.eps for m in layer.modules() if isinstance(m, torch.nn.LayerNorm)} == {1e-5}
    x = torch.randn(3, 32)
    g = rms.norm.weight
    torch.testing.assert_close(rms.norm(x), g * x / torch.sqrt((x * x).mean(-1, True) + 1e-5))
