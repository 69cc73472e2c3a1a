"""Prompts of different lengths in one batch: left padding, masked, equals one at a
time. The reference is each prompt run alone, unpadded, through the same model.
"""

import pytest
import torch

from annotated_transformer.blocks.masks import (
    left_padding_mask,
    left_padding_positions,
)
from annotated_transformer.evaluation.sampling import left_pad, sample
from annotated_transformer.models.decoder_only import DecoderConfig, DecoderLM
from annotated_transformer.models.gpt2 import GPT2LM, GPTConfig
from annotated_transformer.models.modern_decoder import (
    ModernConfig,
    ModernDecoderLM,
)
from annotated_transformer.tasks.variants import modern_parts

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]
MODELS = {
    "DecoderLM": lambda: DecoderLM(DecoderConfig(40, 32, 4, 2, 24, 64, 0.0)),
    "rope": lambda: ModernDecoderLM(ModernConfig(40, 32, 4, 2, 24)),
    "alibi": lambda: ModernDecoderLM(
        ModernConfig(40, 32, 4, 2, 24, **modern_parts(positions="alibi"))
    ),
    "sinusoidal": lambda: ModernDecoderLM(
        ModernConfig(40, 32, 4, 2, 24, **modern_parts(positions="sinusoidal"))
    ),
    "GPT2LM": lambda: GPT2LM(GPTConfig(40, 32, 4, 2, 24)),
}


def test_mask_and_positions_by_hand():
    real = torch.tensor([[False, False, True, True], [True, True, True, True]])
    assert left_padding_mask(real, 4)[0].int().tolist() == [
        [1, 0, 0, 0],  # padding sees only itself
        [0, 1, 0, 0],
        [0, 0, 1, 0],
        [0, 0, 1, 1],
    ]
    last = left_padding_mask(real, 1)[:, 0].int().tolist()
    assert last == [[0, 0, 1, 1], [1, 1, 1, 1]]
    assert left_padding_positions(real, 4).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]
    assert left_padding_positions(real, 2).tolist() == [[0, 1], [2, 3]]
    ids, mask = left_pad([[7, 8], [9, 10, 11, 12]], pad=3)
    assert ids.tolist() == [[3, 3, 7, 8], [9, 10, 11, 12]]
    assert torch.equal(mask, real)


@pytest.mark.parametrize("name", MODELS)
def test_padded_batch_gives_each_prompts_logits_with_and_without_cache(name):
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    x, mask = left_pad(PROMPTS)
    width = x.size(1)
    with torch.no_grad():
        full = model(x, mask=mask)
        cache = model.new_cache()
        model(x[:, :3], cache, mask=mask[:, :3])
        steps = {}
        for t in range(3, width):  # one token at a time, mask over cache + new
            steps[t] = model(x[:, t : t + 1], cache, mask=mask[:, : t + 1])
        for i, prompt in enumerate(PROMPTS):
            alone = model(torch.tensor([prompt]))[0]
            start = width - len(prompt)  # where the prompt begins in the batch
            torch.testing.assert_close(full[i, start:], alone)
            for t in range(max(3, start), width):
                torch.testing.assert_close(steps[t][i, 0], alone[t - start])


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("name", MODELS)
def test_batched_greedy_sampling_equals_one_prompt_at_a_time(name, use_cache):
    torch.manual_seed(0)
    model = MODELS[name]()
    x, mask = left_pad(PROMPTS)
    width, options = x.size(1), {"top_k": 1, "use_cache": use_cache}
    out = sample(model, x, 20, mask=mask, **options)  # the context is cropped at 24
    for i, prompt in enumerate(PROMPTS):
        alone = sample(model, torch.tensor([prompt]), 20, **options)[0]
        if len(prompt) == width:  # equal crops: the rows are the same text
            assert torch.equal(out[i], alone)
        else:  # before the first crop
            assert torch.equal(out[i, width:24], alone[len(prompt) :][: 24 - width])


def test_bad_masks_are_refused_in_one_line():
    model = MODELS["rope"]()
    x, mask = left_pad(PROMPTS)
    with pytest.raises(ValueError, match=r"bool \(batch, cached \+ new\)"):
        model(x, mask=mask[:, 1:])
    with pytest.raises(ValueError, match="padding on the left"):
        sample(model, x, 2, mask=mask.flip(1))
    with pytest.raises(ValueError, match="padding on the left"):
        sample(model, x, 2, mask=mask.long())


def norm_eps(model: torch.nn.Module) -> set[float]:
    return {m.eps for m in model.modules() if hasattr(m, "eps")}


def test_norm_eps_is_a_setting():
    rms = ModernDecoderLM(ModernConfig(40, 32, 4, 2, 24, eps=1e-5))
    assert norm_eps(rms) == {1e-5}
    assert norm_eps(ModernDecoderLM(ModernConfig(40, 32, 4, 1, 8))) == {1e-6}
    assert norm_eps(
        ModernDecoderLM(ModernConfig(40, 32, 4, 1, 8, **modern_parts(norm="layer")))
    ) == {1e-5}
    x, g = torch.randn(3, 32), rms.norm.weight
    expected = g * x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)
    torch.testing.assert_close(rms.norm(x), expected)
