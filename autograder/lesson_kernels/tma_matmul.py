"""Lesson 11's persistent matmul fed by tensor descriptors, ``c = a @ b`` (case shape ``(M, N, K)``
as lesson 7's). A descriptor needs rows a multiple of 16 bytes apart: every N and K here is a
multiple of 8 (16-bit elements), and no case is a strided slice."""
import torch

from .matmul import MATMUL_TOLERANCES, matmul_flops, matmul_inputs
from ..spec import Case, Exercise, Throughput

_F16, _BF16 = torch.float16, torch.bfloat16
# The interpreter has no bfloat16. Ragged against 32-wide tiles on every edge but the aligned
# ones: 1 row; 33 × 64 × 24; 100 × 72 × 136 (K = 4¼ tiles); 129 × 40 × 64.
_CPU = (Case((1, 8, 8), _F16), Case((33, 64, 24), _F16), Case((100, 72, 136), _F16), Case((129, 40, 64), _F16))
_GPU = _CPU + (Case((129, 264, 72), _BF16), Case((2048, 2048, 2048), _F16), Case((3000, 1000, 2000), _BF16))

EXERCISE = Exercise(
    name="tma_matmul",
    function="tma_matmul",
    signature="tma_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor",
    reference=torch.matmul,
    make_inputs=matmul_inputs,
    solution="autograder.kernels.tma_matmul",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
    # issue 25's goal for lesson 11: cuBLAS's speed
    throughput=Throughput(case=Case((4096, 4096, 4096), _F16), threshold=1.0, baseline="torch.matmul",
                          flops=matmul_flops),
    tolerances={dtype: MATMUL_TOLERANCES[dtype] for dtype in (_F16, _BF16)},
)
