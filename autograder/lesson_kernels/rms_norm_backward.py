"""Lesson 9's RMSNorm backward: dx here, dw in :mod:`.rms_norm_backward_dw`, both against float64 autograd.

A case's shape is ``(M, N)``: x and dy are M × N, the weight w has N values. The checked
functions, ``rms_norm_dx(x, w, dy)`` and ``rms_norm_dw(x, w, dy)``, run the layer's forward
(for the saved ``r``) and then its backward.
"""
from __future__ import annotations

import torch

from ..inputs import random_tensors
from ..spec import Case, Exercise

EPS = 1e-6
"""The layer's eps, as in :mod:`autograder.kernels.rms_norm_backward`."""


def layer_grads(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dw) of y = x · rsqrt(mean(x²) + eps) · w, by PyTorch's autograd on the given dtype."""
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS) * w
    return torch.autograd.grad(y, (x, w), dy)


def dx_reference(x, w, dy):
    return layer_grads(x, w, dy)[0]


def dw_reference(x, w, dy):
    return layer_grads(x, w, dy)[1]


def layer_inputs(case: Case, generator: torch.Generator, device: str):
    """(x, w, dy): standard normal (x ``large`` or strided as the case says), every third row of x
    from row 2 on all zeros, like a batch's padding: there r = 1/sqrt(eps) = 1000, and a kernel
    without eps returns inf or NaN. w is N(0, 1), far from the ones it starts at, so a kernel
    that drops w somewhere is off by a factor, not by a rounding."""
    rows, n = case.shape
    (x,) = random_tensors(case, generator, device, count=1)
    x[2::3] = 0
    w = torch.randn(n, generator=generator, device=generator.device).to(device, case.dtype)
    dy = torch.randn(rows, n, generator=generator, device=generator.device).to(device, case.dtype)
    return x, w, dy


_F16, _BF16 = torch.float16, torch.bfloat16
# Row lengths: 1 (one lane), 1024 (a whole block), and lengths that leave padding lanes: 7, 129,
# 1000, 1025, 500, 300; a mean over BLOCK_SIZE instead of N is wrong at all of them. 300 rows of
# 17 take the grouped path of the default backward (GROUPS = 256: two rows a program, 150
# partial rows, a ragged last block of 32 for the second stage); one row (1 × 1, 1 × 4096 on a
# GPU) is where a dw without the cross-program sum is right by luck. The interpreter runs one
# program at a time, so CPU cases stay at a few hundred programs.
CPU_CASES = (Case((1, 1)), Case((3, 7)), Case((6, 129)), Case((17, 1000)), Case((4, 1024)),
             Case((300, 17)), Case((4, 1025), _F16), Case((6, 500), _F16, values="large"),
             Case((5, 300), strided=True))
GPU_CASES = CPU_CASES + (Case((1, 4096)), Case((4096, 4096)), Case((2048, 4097), _F16),
                         Case((1000, 1500), _BF16), Case((512, 3000), strided=True))

# (atol, rtol) against float64 autograd on the same inputs. dx is r·(w·dy) - x·r³·c, two terms
# of size up to ~10 that can cancel: float32 arithmetic leaves ~1e-6 absolute there, and rows of
# zeros (r = 1000, dx up to ~4000) ~1e-7 of the value; the GPU's approximate rsqrt adds 2 ulps.
# 16-bit outputs round once: 2**-11 (float16) and 2**-8 (bfloat16) of the value. A missing mean
# term, a mean over the padding lanes or a missing w is off by 1e-2 of the value or far more.
DX_TOLERANCES = {torch.float32: (1e-5, 1e-5), _F16: (1e-5, 1e-3), _BF16: (1e-4, 1.6e-2)}

EXERCISE = Exercise(
    name="rms_norm_backward_dx",
    function="rms_norm_dx",
    signature="rms_norm_dx(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> torch.Tensor",
    reference=dx_reference,
    make_inputs=layer_inputs,
    solution="autograder.kernels.rms_norm_backward",
    visible_cases={"cpu": CPU_CASES, "cuda": GPU_CASES},
    tolerances=DX_TOLERANCES,
)
