"""RMSNorm against torch.nn.RMSNorm and its formula."""

import pytest
import torch
from torch import nn

from annotated_transformer.blocks.norms import RMSNorm


@pytest.mark.parametrize(
    ("shape", "eps"),
    [((5, 8), 1e-6), ((2, 3, 16), 1e-5), ((4, 1, 7), 0.1), ((1,), 1e-6)],
)
def test_matches_torch_rms_norm(shape, eps):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g, dtype=torch.float64) * 3
    ours = RMSNorm(shape[-1], eps).double()
    theirs = nn.RMSNorm(shape[-1], eps=eps).double()
    with torch.no_grad():
        ours.weight.copy_(torch.randn(shape[-1], generator=g))
    theirs.load_state_dict(ours.state_dict())  # same parameter name: ``weight``
    torch.testing.assert_close(ours(x), theirs(x))


def test_unit_gain_output_has_unit_rms_and_ignores_scale():
    x = torch.randn(6, 32, dtype=torch.float64)
    norm = RMSNorm(32, eps=0.0).double()
    out = norm(x)
    torch.testing.assert_close(
        out.pow(2).mean(-1), torch.ones(6, dtype=torch.float64)
    )
    torch.testing.assert_close(norm(10 * x), out)
    assert not torch.allclose(
        out.mean(-1), torch.zeros(6, dtype=torch.float64)
    )  # no centring


def test_bad_width_raises():
    with pytest.raises(ValueError, match="positive integer, got 0"):
        RMSNorm(0)
