"""Lesson 7's matrix multiplication, ``c = a @ b`` in tiles with ``tl.dot``.

A case's shape is ``(M, N, K)``: ``a`` is M×K, ``b`` is K×N and the result M×N, so a label
reads ``M×N×K dtype``.
"""
from dataclasses import replace

import torch

from ..inputs import random_tensors
from ..spec import Case, Exercise, Throughput


def matmul_inputs(case: Case, generator: torch.Generator, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``a`` (M×K) and ``b`` (K×N), standard normal; ``strided``: each a slice ``x[:, :n]`` of a
    wider tensor, so its rows are not adjacent in memory."""
    m, n, k = case.shape
    (a,) = random_tensors(replace(case, shape=(m, k)), generator, device, count=1)
    (b,) = random_tensors(replace(case, shape=(k, n)), generator, device, count=1)
    return a, b


def matmul_flops(inputs, output) -> int:
    """2·M·N·K: one multiply and one add per term of every output (``a`` and ``b`` first among
    the inputs)."""
    a, b = inputs[:2]
    return 2 * a.shape[0] * b.shape[1] * a.shape[1]


# Against a float64 reference. The output of a K-term dot of N(0, 1) values is about sqrt(K)
# in size. float32 accumulation, one rounding of 2**-24 per term added, was off by at most
# 3.5e-5 at K = 257 and 6.5e-4 at K = 4096 in a simulation (128×128 outputs, terms added one
# by one): the float32 cases stay at K <= 257, under atol 1e-4; the 16-bit atol of 1e-2 leaves
# a margin of 15 at K = 4096. Rounding the result costs up to 2**-11 = 4.9e-4 of it in float16
# and 2**-8 = 3.9e-3 in bfloat16 (rtol 1e-3 and 1.6e-2). What they catch: accumulating in
# float16 put 6% of the outputs of the 64×64×512 case past them, TF32 products 94% at K = 65,
# a missing term of the sum is off by about 1.
MATMUL_TOLERANCES = {torch.float32: (1e-4, 1e-5), torch.float16: (1e-2, 1e-3),
                     torch.bfloat16: (1e-2, 1.6e-2)}

_F16, _BF16 = torch.float16, torch.bfloat16
# The interpreter's tiles are 32×32×32 (a GPU's 64 to 256): 33×65×17 is ragged on every edge,
# 64×64×64 is whole tiles (right even without masks), 300 rows make 10 tile rows, two bands of
# GROUP_M = 8 of which the last is short, and 64×64×512 float16 is where a float16
# accumulator drifts out of tolerance. 1×1×1 is a single product.
_CPU = (Case((1, 1, 1)), Case((33, 65, 17)), Case((64, 64, 64)), Case((300, 40, 100)),
        Case((48, 80, 96), strided=True), Case((17, 33, 130), _F16), Case((64, 64, 512), _F16))
_GPU = _CPU + (Case((129, 257, 65)), Case((129, 257, 65), _F16), Case((129, 257, 65), _BF16),
               Case((2048, 2048, 2048), _F16), Case((3000, 1000, 2000), _BF16),
               Case((1024, 4096, 512), _F16, strided=True))

EXERCISE = Exercise(
    name="matmul",
    function="matmul",
    signature="matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor",
    reference=torch.matmul,
    make_inputs=matmul_inputs,
    solution="autograder.kernels.matmul",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
    throughput=Throughput(case=Case((4096, 4096, 4096), _F16), threshold=0.75, baseline="torch.matmul",
                          flops=matmul_flops),
    tolerances=MATMUL_TOLERANCES,
)
