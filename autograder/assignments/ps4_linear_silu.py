"""Problem set 4: a linear layer with a fused SiLU, ``silu(x @ weight.T + bias)``, as an MLP uses it.

A case's shape is ``(M, N, K)``: ``x`` is M×K, ``weight`` N×K (``nn.Linear``'s layout), ``bias``
has N entries and the result is M×N, so a label reads ``M×N×K dtype``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..spec import Case, Exercise, Throughput

_F16, _BF16 = torch.float16, torch.bfloat16

LARGE_X = 50.0
"""What ``values="large"`` multiplies x by: at K = 64 the pre-activations spread to ±1000, far
past ±88.7, where exp(±z) overflows float32, while staying inside float16's ±65504."""


@dataclass(frozen=True)
class LinearCase(Case):
    """A :class:`Case` for ``(x, weight, bias)``. ``strided``: x and weight are slices
    ``t[:, :K]`` of wider tensors."""

    weight_t: bool = False
    """weight is ``w.t()`` of a K×N tensor: strides ``(1, N)``, a column-major view."""

    @property
    def label(self) -> str:
        return super().label + (" weight=w.t()" if self.weight_t else "")


def _matrix(rows: int, cols: int, case: Case, generator: torch.Generator, device: str,
            scale: float = 1.0) -> torch.Tensor:
    """Standard normal ``rows × cols`` times ``scale`` in the case's dtype; ``strided``: the first
    ``cols`` columns of a wider tensor (odd padding: rows start unaligned)."""
    width = cols + cols // 2 + 3 if case.strided else cols
    t = torch.randn((rows, width), generator=generator, device=generator.device) * scale
    return t.to(device, case.dtype)[:, :cols]


def linear_silu_inputs(case: LinearCase, generator: torch.Generator, device: str):
    """``(x, weight, bias)``, standard normal; x times ``LARGE_X`` for ``values="large"``."""
    m, n, k = case.shape
    if case.values not in ("normal", "large"):
        raise ValueError(f"unknown values={case.values!r}")
    x = _matrix(m, k, case, generator, device, LARGE_X if case.values == "large" else 1.0)
    weight = _matrix(k, n, case, generator, device).t() if case.weight_t else _matrix(n, k, case, generator, device)
    bias = torch.randn(n, generator=generator, device=generator.device).to(device, case.dtype)
    return x, weight, bias


def linear_silu_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.silu(F.linear(x, weight, bias))


def linear_silu_flops(inputs, output) -> int:
    """2·M·N·K: the matmul's multiply-adds; the bias and SiLU add O(M·N), not counted."""
    x, weight, _ = inputs
    return 2 * x.shape[0] * weight.shape[0] * x.shape[1]


# Against a float64 reference: ps4_matmul's numbers for the product, which the epilogue changes
# little. z = x·wᵀ + b is a K-term dot of N(0, 1) values, about sqrt(K) in size; its float32
# accumulation was off by at most 3.5e-5 at K = 257 and 6.5e-4 at K = 4096 (simulated, terms
# added one by one). The bias add in float32 is one more rounding of 2**-24·|z|, and SiLU's
# slope is between -0.1 and 1.1, so z's error reaches the output at most 1.1 times as large:
# 3.9e-5 (float32 cases stay at K <= 257, atol 1e-4) and 7.2e-4 (16-bit atol 1e-2, a margin
# of 14). exp in float32 is a few ulps of sigmoid; the one rounding to the output dtype is
# 2**-11 = 4.9e-4 relative in float16, 2**-8 = 3.9e-3 in bfloat16 (rtol 1e-3, 1.6e-2). The
# "large" cases (x·50: |z| up to ~1000) are 16-bit only: float32 accumulation of terms of 50
# is off by ~1e-3 near z = 0, past the float32 atol. The reference kernel used at most 0.48 of
# them over 5 seeds of the CPU cases. What they catch: a float16 accumulator (3.5% of the
# 64×64×512 float16 outputs), a bias on the wrong axis or after the activation, a missing
# term, off by ~1; a NaN from an overflowing sigmoid. What they allow: rounding z to the
# output dtype before the activation too, as PyTorch's unfused F.silu(F.linear(...)) does;
# the two roundings use at most 0.36 of the float16 tolerance (0.38 in bfloat16) for any z.
LINEAR_SILU_TOLERANCES = {torch.float32: (1e-4, 1e-5), _F16: (1e-2, 1e-3), _BF16: (1e-2, 1.6e-2)}

C = LinearCase
# The interpreter's tiles are 32×32×32 (a GPU's 64 to 256): 33×65×17 is ragged on every edge,
# 64×64×64 whole tiles; K = 100 is three tiles and 4 more; N = 1 is a single output column
# (a scalar head); 64×64×512 float16 is where a float16 accumulator drifts out of tolerance;
# "large" puts most pre-activations past ±88.7.
_CPU = (C((1, 1, 1)), C((33, 65, 17)), C((64, 64, 64)), C((40, 96, 100), weight_t=True),
        C((48, 80, 96), strided=True), C((100, 1, 70)), C((17, 33, 130), _F16),
        C((64, 64, 512), _F16), C((50, 70, 66), _F16, values="large"))
_GPU = _CPU + (C((129, 257, 65), _F16), C((129, 257, 65), _BF16), C((2048, 2048, 2048), _F16),
               C((3000, 1000, 2000), _BF16), C((1024, 4096, 512), _F16, strided=True),
               C((1000, 3000, 1024), _BF16, weight_t=True), C((300, 500, 100), _BF16, values="large"))

EXERCISE = Exercise(
    name="ps4_linear_silu",
    function="linear_silu",
    signature="linear_silu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor",
    reference=linear_silu_reference,
    make_inputs=linear_silu_inputs,
    solution="solutions.linear_silu",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
    # cuBLAS's F.linear adds the bias in its own epilogue, but F.silu then reads the M×N
    # pre-activation back and writes the output: 2·4096²·2 bytes = 67 MB more at 4096³ float16,
    # 14 µs at 4.8 TB/s against the matmul's ~190 µs. A fused kernel as fast as 80% of cuBLAS's
    # matmul is then at 0.86× the pair; the reference ran at 0.91-0.92× on an H200 (482 against
    # 527 TFLOP/s, three timings, tiles 256×128×64). The judge gave it 0.80-0.89× on H100s (the
    # class runs; 0.80× where cuBLAS itself ran at 529 TFLOP/s, not ~610), so the threshold
    # sits 12% under its slowest verdict (tests/test_exercises.py asks for 10%).
    throughput=Throughput(case=C((4096, 4096, 4096), _F16), threshold=0.7,
                          baseline="F.silu(F.linear(x, weight, bias))", flops=linear_silu_flops),
    tolerances=LINEAR_SILU_TOLERANCES,
    points={"correctness": 4, "hidden": 4, "throughput": 2},
)
