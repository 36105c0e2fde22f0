"""Lesson 6's exercise: fix a bias-add kernel that arrives with two bugs (a mask and a stride)."""
from __future__ import annotations

import torch

from ..spec import Case, Exercise


def _add_bias_inputs(case: Case, generator: torch.Generator, device: str):
    """``x`` of ``case.shape`` and a bias row; ``strided`` makes ``x`` the middle third of a
    matrix three times as wide, the way the keys sit in a fused (q, k, v) projection."""
    rows, cols = case.shape
    wide = torch.randn((rows, 3 * cols if case.strided else cols), generator=generator, device=generator.device)
    bias = torch.randn(cols, generator=generator, device=generator.device)
    # Convert first, slice second: .to() of a view with gaps returns a contiguous copy.
    wide, bias = wide.to(device, case.dtype), bias.to(device, case.dtype)
    return (wide[:, cols:2 * cols] if case.strided else wide), bias


# (1, 1): one row of one column, where a mask one short leaves nothing at all; 5 and 33
# columns are ragged blocks of 8 and 64 lanes; 64 fills its block exactly. The strided
# cases are the only ones a kernel that ignores the row stride gets wrong. The interpreter
# runs one program (one row) at a time, so CPU cases stay under 20 rows.
_CPU = (Case((1, 1)), Case((3, 5)), Case((8, 64)), Case((7, 33), strided=True),
        Case((16, 100), strided=True), Case((5, 33), torch.float16),
        Case((9, 17), torch.float16, strided=True))
_GPU = _CPU + (Case((1000, 1000)), Case((4096, 4096)), Case((2048, 3000), strided=True),
               Case((1024, 1536), torch.float16, strided=True))

EXERCISE = Exercise(
    name="lesson6_add_bias",
    function="add_bias",
    signature="add_bias(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor",
    reference=torch.add,
    make_inputs=_add_bias_inputs,
    solution="solutions.add_bias",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
    diagnoses=False,  # finding the stride bug is the exercise
)
