"""Lesson 9's exercise: the backward of lesson 1's RMS norm, ``y = x · r`` without a weight.

Per row, with r = 1 / sqrt(mean(x²) + eps), students return dx for an output gradient dy. No
forward ran before, so there is no saved r: the kernel recomputes it from x.
"""
from __future__ import annotations

import torch

from ..inputs import random_tensors
from ..lesson_kernels.rms_norm_backward import DX_TOLERANCES
from ..spec import Case, Exercise

EPS = 1e-6
"""As in lesson 1's ``rms_norm`` and lesson 9's layer."""


def rms_norm_grad_reference(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx of y = x · rsqrt(mean(x²) + eps), by PyTorch's autograd."""
    x = x.detach().requires_grad_()
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return torch.autograd.grad(y, x, dy)[0]


def _inputs(case: Case, generator: torch.Generator, device: str):
    """(x, dy): x as in lesson 1 (normal, large or strided; every third row from row 2 all
    zeros, where r = 1000 and a kernel without eps returns inf or NaN), dy standard normal."""
    rows, n = case.shape
    (x,) = random_tensors(case, generator, device, count=1)
    x[2::3] = 0
    dy = torch.randn(rows, n, generator=generator, device=generator.device).to(device, case.dtype)
    return x, dy


_F16, _BF16 = torch.float16, torch.bfloat16
# Lesson 1's row lengths: 1, a whole block (1024) and lengths with padding lanes (7, 129, 1000,
# 1025, 500, 300), where a mean over BLOCK_SIZE instead of N is wrong. float16 values around
# 2e3 square to 4e6, past float16's 65504: the sums must be float32. The interpreter runs one
# program per row, so CPU cases stay at a few dozen rows.
_CPU = (Case((1, 1)), Case((3, 7)), Case((6, 129)), Case((17, 1000)), Case((4, 1024)),
        Case((4, 1025), _F16), Case((6, 500), _F16, values="large"), Case((5, 300), strided=True))
_GPU = _CPU + (Case((4096, 4096)), Case((128, 8191)), Case((1000, 4097), _F16),
               Case((256, 1500), _BF16), Case((64, 3000), strided=True))

EXERCISE = Exercise(
    name="lesson9_rms_norm_grad",
    function="rms_norm_grad",
    signature="rms_norm_grad(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor",
    reference=rms_norm_grad_reference,
    make_inputs=_inputs,
    solution="solutions.rms_norm_grad",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
    tolerances=DX_TOLERANCES,
)
