import math

import pytest
import torch

from annotated_transformer.training.schedules import make_scheduler, rate


@pytest.mark.parametrize(
    "d_model,factor,warmup", [(512, 1.0, 4000), (32, 2.0, 400), (64, 0.5, 1)]
)
def test_rate_matches_the_formula(d_model: int, factor: float, warmup: int) -> None:
    for step in [1, 2, 3, warmup - 1, warmup, warmup + 1, 10 * warmup, 123_457]:
        if step < 1:
            continue
        expected = (
            factor
            / math.sqrt(d_model)
            * min(1 / math.sqrt(step), step / warmup**1.5)
        )
        assert rate(step, d_model, factor, warmup) == pytest.approx(
            expected, rel=1e-12
        )


def test_rate_step_zero_is_step_one_and_peak_is_at_warmup() -> None:
    assert rate(0, 512, 1.0, 4000) == rate(1, 512, 1.0, 4000)
    rates = [rate(s, 512, 1.0, 4000) for s in range(1, 20_000)]
    assert max(range(len(rates)), key=rates.__getitem__) + 1 == 4000
    assert max(rates) == pytest.approx((512 * 4000) ** -0.5)


def test_rate_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="warmup"):
        rate(1, 512, 1.0, 0)
    with pytest.raises(ValueError, match=r"step >= 0 .* got step=-1"):
        rate(-1, 512, 1.0, 10)
    with pytest.raises(ValueError, match="unknown schedule 'nom'"):
        make_scheduler(
            torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0),
            "nom",
            1,
            1,
            2,
        )


def test_noam_scheduler_sets_the_optimiser_rate_of_eq_3_each_step() -> None:
    param = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.Adam([param], lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    peak = 2.0 * (16 * 5) ** -0.5  # eq. 3 at step == warmup
    sched = make_scheduler(opt, "noam", peak, warmup=5, total=0)
    for step in range(1, 12):
        # The rate used by update number `step` is
        # rate(step - 1): LambdaLR starts at 0.
        assert opt.param_groups[0]["lr"] == pytest.approx(
            rate(step - 1, 16, 2.0, 5)
        )
        param.sum().backward()
        opt.step()
        sched.step()
    # Its state is plain data (no pickled function), so a checkpoint can carry it.
    state = sched.state_dict()
    assert state["last_epoch"] == 11
    assert all(fn is None or fn == {} for fn in state["lr_lambdas"])
