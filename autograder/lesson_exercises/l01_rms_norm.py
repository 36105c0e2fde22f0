"""Lesson 1's exercise: RMS normalisation of each row, five PyTorch kernels fused into one."""
from __future__ import annotations

import torch

from ..inputs import one_random_tensor
from ..spec import Case, Exercise

EPS = 1e-6
"""The ``eps`` under the square root, as in LLaMA's RMSNorm. It only matters where a row's mean
square is near 0; for an all-zero row it is what turns 0 / sqrt(0) = NaN into 0."""


def _reference(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)


def _rows(case: Case, generator: torch.Generator, device: str) -> tuple[torch.Tensor]:
    """Random rows (normal, large or strided as the case says), every third one from row 2 on
    all zeros, like the padding positions of a batch: a kernel without ``eps`` returns NaN there."""
    (x,) = one_random_tensor(case, generator, device)
    x[2::3] = 0
    return (x,)


_F16 = torch.float16
# Row lengths: 1 (one lane), 1024 (a whole block), and lengths that leave padding lanes in the
# power-of-two block: 7 (1 spare of 8), 129 (127 of 256), 1000, 1025 (1023 of 2048), 300.
# A mean over BLOCK_SIZE instead of n_cols is right only at the powers of two (bfloat16 rows
# are 1500 long: at 1000 the wrong mean would be off by 1.2%, inside bfloat16's rtol of 1.6%).
# float16 values around 2e3 square to 4e6, past float16's 65504: squares left in float16 are inf.
# The interpreter runs one program per row, so CPU cases stay at a few dozen rows.
_CPU = (Case((1, 1)), Case((3, 7)), Case((6, 129)), Case((17, 1000)), Case((4, 1024)),
        Case((4, 1025), _F16), Case((6, 500), _F16, values="large"), Case((5, 300), strided=True))
_GPU = _CPU + (Case((4096, 4096)), Case((128, 8191)), Case((1000, 4097), _F16),
               Case((256, 1500), torch.bfloat16), Case((64, 3000), strided=True))

EXERCISE = Exercise(
    name="lesson1_rms_norm",
    function="rms_norm",
    signature="rms_norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor",
    reference=_reference,
    make_inputs=_rows,
    solution="solutions.rms_norm",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
)
