"""Lesson 4's practice exercise: a row-wise log-softmax kernel, one program per row."""
from __future__ import annotations

import torch

from ..spec import Case, Exercise

LARGE_LOGIT = 100.0
"""Added to every even row (row 0 included, so a one-row case has it too). exp(100) = 2.7e43
overflows float32, whose largest value is 3.4e38: a kernel that does not subtract the row max
returns -inf there. A larger offset would not be fairer: at 100 one float32 ulp is 7.6e-6,
so computing ``x - (max + log_sum)`` instead of ``(x - max) - log_sum`` still passes atol=1e-5."""


FAR_BELOW = 120.0
"""Taken from the first score of every odd row: exp(-120) = 7.7e-53 is below float32's smallest
value (1.4e-45), so ``log(softmax(x))`` gives log(0) = -inf there, where log-softmax is about
-120, as in the lesson's example. (The other scores of a row are 3·N(0, 1), too close together
for anything to underflow.)"""


def _reference(x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(x, dim=-1)


def _inputs(case: Case, generator: torch.Generator, device: str) -> tuple[torch.Tensor]:
    """Scores 3 * N(0, 1), even rows shifted by ``LARGE_LOGIT``, the first score of odd rows
    lowered by ``FAR_BELOW``; ``strided``: x[:, :n] of a wider tensor."""
    rows, n = case.shape
    width = n + n // 2 + 3 if case.strided else n  # odd padding: rows start unaligned
    x = 3 * torch.randn((rows, width), generator=generator, device=generator.device, dtype=torch.float32)
    x[::2] += LARGE_LOGIT
    x[1::2, 0] -= FAR_BELOW
    x = x.to(device, case.dtype)
    return (x[:, :n] if case.strided else x,)


_F16, _BF16 = torch.float16, torch.bfloat16
# Row lengths: 1 (a block of one lane), powers of two plus or minus one (every lane but one
# masked, or a single masked lane), 1000 (24 masked lanes of 1024). The interpreter runs one
# program per row, so CPU cases stay at a few dozen rows; the GPU adds full-size shapes.
_CPU = (Case((1, 1)), Case((3, 7)), Case((17, 1000)), Case((4, 1025), _F16), Case((6, 129)),
        Case((5, 300), strided=True))
_GPU = _CPU + (Case((4096, 1000)), Case((128, 8191)), Case((1000, 4097), _F16),
               Case((256, 1000), _BF16), Case((64, 3000), strided=True))

EXERCISE = Exercise(
    name="lesson4_log_softmax",
    function="log_softmax",
    signature="log_softmax(x: torch.Tensor) -> torch.Tensor",
    reference=_reference,
    make_inputs=_inputs,
    solution="solutions.log_softmax",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
)
