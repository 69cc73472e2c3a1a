"""Checks of chapter 04's exercises (Positional encoding)."""

import math
from types import ModuleType

import torch

from annotated_transformer.exercises.grading import (
    assert_close,
    exercise,
    integers,
    rng,
)


def _pe(pos: float, d_model: int) -> torch.Tensor:
    """The paper's formula, one entry at a time, in double precision."""
    row = []
    for j in range(d_model):
        angle = pos / 10000 ** ((j - j % 2) / d_model)
        row.append(math.sin(angle) if j % 2 == 0 else math.cos(angle))
    return torch.tensor(row, dtype=torch.float64)


def _encodings(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """:func:`_pe` of every entry of ``positions``: (*positions.shape, d_model)."""
    rows = [_pe(p, d_model) for p in positions.flatten().tolist()]
    return torch.stack(rows).reshape(*positions.shape, d_model)


@exercise(
    chapter="04",
    name="sinusoidal",
    title="The sinusoidal encoding at any position",
    hint="compute all angles at once, positions[:, None] * ω[None, :] with ω_i = "
    "10000 ** (-2i / d_model) for i = 0 .. d_model/2 - 1; then interleave: even "
    "features get the sines, odd ones the cosines.",
)
def check_sinusoidal(m: ModuleType) -> None:
    drawn = 100 * torch.rand(3, generator=rng(1))
    positions = torch.cat([torch.tensor([0.0, 1.0, 2.5, 17.0, 99.0]), drawn])
    expected = torch.stack([_pe(p, 16) for p in positions.tolist()])
    assert_close(m.sinusoidal(positions, 16), expected, "PE", atol=1e-6)


@exercise(
    chapter="04",
    name="pe_dot",
    title="Similarity depends on the offset only",
    hint="each (sin, cos) pair contributes sin a sin b + cos a cos b = cos(a - "
    "b), and a - b = -k ω_i whatever pos is; sum over the pairs.",
)
def check_pe_dot(m: ModuleType) -> None:
    for k in (0, 1, 3, 10, -7, *integers(2, -50, 50, 2)):
        for pos in (0, 5, 40):
            expected = float(_pe(pos, 32) @ _pe(pos + k, 32))
            got = m.pe_dot(k, 32)
            wrong = f"pe_dot({k}, 32) = {got}, not {expected}"
            assert abs(got - expected) < 1e-6, wrong


@exercise(
    chapter="04",
    name="rotate_by",
    title="An offset is a rotation, applied pair by pair",
    hint="split pe into its sines pe[..., 0::2] and cosines pe[..., 1::2]; with "
    "θ_i = k ω_i, the angle-addition formulas give sin' = sin cos θ + cos sin θ "
    "and cos' = cos cos θ - sin sin θ; interleave them again.",
)
def check_rotate_by(m: ModuleType) -> None:
    table = _encodings(torch.arange(60.0), 24)  # (60, 24)
    for k in (1, 7, 30):
        got = m.rotate_by(table[:-k], k)
        assert_close(got, table[k:], f"rotate_by(PE[pos], {k})", atol=1e-6)
        back = m.rotate_by(table[k:], -k)
        assert_close(back, table[:-k], f"rotate_by(PE[pos], -{k})", atol=1e-6)
    half, *offsets = integers(3, 2, 16, 1) + integers(4, -80, 80, 3)
    positions = 500 * torch.rand(2, 5, generator=rng(5), dtype=torch.float64)
    pe = _encodings(positions, 2 * half)  # positions in no order, not whole
    for k in offsets:
        what = f"rotate_by(PE[pos], {k}) at random positions, d_model {2 * half}"
        expected = _encodings(positions + k, 2 * half)
        assert_close(m.rotate_by(pe, k), expected, what, atol=1e-6)


@exercise(
    chapter="04",
    name="relative_offset",
    title="Read the offset back from two encodings",
    hint="the angle of pair i is atan2(sin, cos) = pos ω_i (mod 2π), so the "
    "angles of the two encodings differ by k ω_i (mod 2π); pick a pair slow "
    "enough that |k| ω_i < π cannot wrap around, and divide.",
)
def check_relative_offset(m: ModuleType) -> None:
    g = rng(0)
    for _ in range(20):
        pos = int(torch.randint(0, 500, (1,), generator=g))
        k = int(torch.randint(-60, 61, (1,), generator=g))
        got = m.relative_offset(_pe(pos, 64), _pe(pos + k, 64), 60)
        assert got == k, f"positions {pos} and {pos + k}: offset {k}, got {got}"
