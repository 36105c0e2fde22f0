"""Lesson 10's exercise: the backward of the lesson's dropout, its mask drawn again from the seed.

The forward, ``dropout(x, p, seed)`` for a 2-D x of shape (M, N), keeps element (i, j) when
``tl.rand(seed, i·N + j) >= p`` (its offset in row-major order) and scales it by 1 / (1 − p).
Students return dx = dy · mask / (1 − p) for an output gradient dy without a stored mask: the
kernel draws the same numbers again. Some dy are a slice of a wider matrix, read in place, so the
random offset (the element's index) and the address (through the row stride) differ.
"""
from __future__ import annotations

import torch

from ..assignments.ps1_broadcast_add import COPY_OPS
from ..guards import DATA_MOVEMENT_OPS
from ..inputs import random_tensors
from ..spec import Case, Exercise

PROBABILITIES = (0.1, 0.25, 0.5, 0.8)
"""The values of p the cases draw from."""


def dropout_backward_reference(dy: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """dy · mask / (1 − p), the mask from the numbers tl.rand(seed, i) that the forward drew (the
    lesson's ``uniform``, in row-major order)."""
    from ..kernels.dropout import uniform  # here, not above: a kernel is decorated after setup_device()

    u = uniform(dy.numel(), seed, device=dy.device).view(dy.shape)
    return torch.where(u >= p, dy / (1 - p), torch.zeros_like(dy))


def _inputs(case: Case, generator: torch.Generator, device: str):
    """(dy, p, seed): dy as ``case`` says (standard normal, or a row slice of a wider matrix),
    p one of :data:`PROBABILITIES`, seed a random non-negative int32."""
    (dy,) = random_tensors(case, generator, device, count=1)
    p = PROBABILITIES[int(torch.randint(len(PROBABILITIES), (1,), generator=generator, device=generator.device))]
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device))
    return dy, p, seed


_F16 = torch.float16
# One element; one long row (5 blocks of the forward's 1024); rows whose length is no power of
# two (padding lanes); rows further apart than their length (strided: the offset i·N + j is not
# the address). The interpreter runs one program at a time: a few dozen rows on the CPU.
_CPU = (Case((1, 1)), Case((1, 5000)), Case((3, 7)), Case((17, 129)), Case((8, 1000), _F16),
        Case((5, 300), strided=True), Case((6, 1025), _F16, strided=True))
_GPU = _CPU + (Case((4096, 4096)), Case((1000, 4097), _F16), Case((64, 3000), strided=True))

EXERCISE = Exercise(
    name="lesson10_dropout_backward",
    function="dropout_backward",
    signature="dropout_backward(dy: torch.Tensor, p: float, seed: int) -> torch.Tensor",
    reference=dropout_backward_reference,
    make_inputs=_inputs,
    solution="solutions.dropout_backward",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
    # No copies: a strided dy is read where it is, through its row stride.
    allowed_ops=DATA_MOVEMENT_OPS - COPY_OPS,
)
