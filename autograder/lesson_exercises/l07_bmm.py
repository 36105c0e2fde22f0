"""Lesson 7's exercise: a batched matmul, ``c[i] = a[i] @ b[i]``, one more grid axis.

A case's shape is ``(B, M, N, K)``: ``a`` is B×M×K, ``b`` is B×K×N and the result B×M×N.
"""
from dataclasses import replace

import torch

from ..lesson_kernels.matmul import MATMUL_TOLERANCES
from ..inputs import random_tensors
from ..spec import Case, Exercise


def _inputs(case: Case, generator: torch.Generator, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``a`` and ``b``, standard normal; ``strided``: slices ``x[..., :n]`` of wider tensors."""
    batches, m, n, k = case.shape
    (a,) = random_tensors(replace(case, shape=(batches, m, k)), generator, device, count=1)
    (b,) = random_tensors(replace(case, shape=(batches, k, n)), generator, device, count=1)
    return a, b


_F16, _BF16 = torch.float16, torch.bfloat16
# One batch (where ignoring the batch stride goes unnoticed) and several; every edge ragged in
# 3×33×65×17 for 32-wide tiles; K = 100 is three tiles and a ragged fourth.
_CPU = (Case((1, 1, 1, 1)), Case((1, 40, 24, 70)), Case((3, 33, 65, 17)), Case((2, 64, 64, 64)),
        Case((4, 20, 10, 100), _F16), Case((2, 40, 24, 70), strided=True))
_GPU = _CPU + (Case((8, 512, 512, 512), _F16), Case((4, 129, 257, 65), _BF16),
               Case((16, 256, 128, 1024), _F16, strided=True))

EXERCISE = Exercise(
    name="lesson7_bmm",
    function="bmm",
    signature="bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor",
    reference=torch.bmm,
    make_inputs=_inputs,
    solution="solutions.bmm",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
    tolerances=MATMUL_TOLERANCES,
)
