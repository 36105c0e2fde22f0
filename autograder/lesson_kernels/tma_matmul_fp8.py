"""Lesson 11's FP8 matmul, ``(a·scale_a) @ (b·scale_b)`` rounded once to float16, as
``torch._scaled_mm`` computes it. A case's shape is ``(M, N, K)`` as lesson 7's and its dtype is
the inputs' FP8 format; the output is float16. ``b`` is column-major (``w.t()``), as FP8 tensor
cores and ``torch._scaled_mm`` ask, and every K and N is a multiple of 16 (16-byte rows for the
descriptors)."""
import torch

from ..spec import Case, Exercise, Throughput
from .matmul import matmul_flops

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def fp8_inputs(case: Case, generator: torch.Generator, device: str) -> tuple[torch.Tensor, ...]:
    """``a`` (M×K), ``b = w.t()`` (K×N, column-major) and their scales: standard normal values
    quantised to the case's format by lesson 11's ``quantize_fp8``, one float32 scale a tensor."""
    from ..kernels.tma_matmul import quantize_fp8  # the lesson's own; imported only to draw inputs

    m, n, k = case.shape
    a8, scale_a = quantize_fp8(torch.randn(m, k, generator=generator, device=generator.device).to(device), case.dtype)
    w8, scale_b = quantize_fp8(torch.randn(n, k, generator=generator, device=generator.device).to(device), case.dtype)
    return a8, w8.t(), scale_a, scale_b


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    """``torch._scaled_mm`` to float16; on the float64 copies correctness judges with, the same
    product, unrounded."""
    if a.dtype == torch.float64:
        return (a * scale_a) @ (b * scale_b)
    return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.float16)


# Every product of two FP8 values is exact in float32. The interpreter sums them in float32, but a
# GPU's tensor cores add one BLOCK_K step's products with fewer bits (DeepSeek-V3: about 14) before
# the kernel adds the step into float32: on an H100 at 1024³, 396 of 1,048,576 outputs were off by
# more than 1e-2, at most 0.0275. That grows like sqrt(K), to about 0.08 at 8192: atol 0.2. Then one
# float16 rounding, 2**-11 of the result: rtol 2e-3. A scale left out is off by a factor of 10-100,
# a missing K step by about 11 (the sum of 128 products).
_TOLERANCE = (0.2, 2e-3)
# Ragged against the interpreter's 32-wide tiles: one row; 40 × 48 × 64; 70 × 56 × 96 (3 K steps);
# e5m2, its other format, on one of them.
_CPU = (Case((1, 16, 16), E4M3), Case((40, 48, 64), E4M3), Case((70, 56, 96), E4M3), Case((40, 48, 64), E5M2))
_GPU = _CPU + (Case((2048, 2048, 2048), E4M3), Case((3000, 1008, 2000), E4M3), Case((1000, 2048, 512), E5M2))

EXERCISE = Exercise(
    name="tma_matmul_fp8",
    function="fp8_matmul",
    signature="fp8_matmul(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) "
              "-> torch.Tensor",
    reference=scaled_mm,
    make_inputs=fp8_inputs,
    solution="autograder.kernels.tma_matmul",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
    output_dtype=torch.float16,
    # issue 25's goal for lesson 11: cuBLAS's FP8 speed
    throughput=Throughput(case=Case((8192, 8192, 8192), E4M3), threshold=1.0, baseline="torch._scaled_mm",
                          flops=matmul_flops),
    tolerances={E4M3: _TOLERANCE, E5M2: _TOLERANCE},
)
