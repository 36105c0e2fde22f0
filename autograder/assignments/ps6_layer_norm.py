"""Problem set 6: LayerNorm's forward and backward as one autograd operation, graded on the
output and on every gradient (the exercise's ``gradients``: x, w and b)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..inputs import random_tensors
from ..spec import Case, Exercise, Throughput

EPS = 1e-5
"""F.layer_norm's default, and the layer's."""


def layer_norm_reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """PyTorch's LayerNorm over the last dimension; autograd gives its backward."""
    return F.layer_norm(x, (x.shape[-1],), w, b, EPS)


def layer_norm_inputs(case: Case, generator: torch.Generator, device: str):
    """(x, w, b, dy): x as :func:`~autograder.inputs.random_tensors` draws it (normal, large or
    strided), with every third row from row 2 on all zeros. There x − mean = 0 in any order of
    summation and with any division, the variance 0 and rstd = 1/sqrt(eps) = 316 (a kernel without
    eps returns inf or NaN), and dx = 316 · (w·dy − mean(w·dy)). (A constant c ≠ 0 is not exact on a
    GPU: Triton's float32 division is not correctly rounded there, so mean = sum / n can be an ulp
    off c, which rstd = 316 turns into 316 ulps of c in y: the H100 run of 2026-12-05 failed the
    reference that way, 1.5e-5 in float32 and 0.05 at c = -1504.) w and b
    standard normal, far from LayerNorm's initial ones and zeros, so a dropped or swapped one is
    off by far more than a rounding. dy standard normal, a row slice 2N + 5 wide when strided, so
    that x and dy have different row strides."""
    rows, n = case.shape
    (x,) = random_tensors(case, generator, device, count=1)
    x[2::3] = 0
    w, b = (torch.randn(n, generator=generator, device=generator.device).to(device, case.dtype) for _ in "wb")
    width = 2 * n + 5 if case.strided else n
    dy = torch.randn((rows, width), generator=generator, device=generator.device).to(device, case.dtype)
    return x, w, b, dy[:, :n]


def layer_norm_bytes(inputs, output) -> int:
    """The fewest bytes a forward and backward step moves: x read by both passes, y written, dy
    read and dx written (5 · M · N elements); w read by both, b read, dw and db written (5 · N).
    The saved mean and rstd (8 bytes a row) are left out: the backward could recompute them from
    the x it reads anyway."""
    x, w = inputs[0], inputs[1]
    return 5 * (x.numel() + w.numel()) * x.element_size()


_F16, _BF16 = torch.float16, torch.bfloat16
# (atol, rtol) of y against float64 autograd on the same inputs. y = x̂ · w + b with x̂ of size ~1:
# the float32 mean and variance err by a few ulps (1e-7 of x̂), then y rounds once to its dtype,
# 2**-11 (float16) or 2**-8 (bfloat16) of the value. Dropping w or b, or eps, is off by ~1.
Y_TOLERANCES = {torch.float32: (1e-5, 1e-5), _F16: (1e-5, 1e-3), _BF16: (1e-4, 1.6e-2)}
# dx = rstd · (w·dy − x̂ · mean(x̂·w·dy) − mean(w·dy)). In a constant row rstd = 316 multiplies the
# float32 rounding of w·dy − mean(w·dy), 3e-8 of |w·dy| (up to ~5), to ~5e-5 where the two nearly
# cancel and dx is near 0: a float32 emulation of the reference needed 2.3e-5 beyond rtol (5 seeds
# of every CPU case, and 4096 × 512); atol 1e-4 has room for |w·dy| up to 10. 16-bit dx rounds
# once more, 2**-11 or 2**-8 of the value. A missing mean(w·dy) term is off by rstd · mean(w·dy):
# 0.03 at 1000 columns in a normal row, 10 or more in a constant one.
DX_TOLERANCES = {torch.float32: (1e-4, 1e-5), _F16: (1e-5, 1e-3), _BF16: (1e-4, 1.6e-2)}
# dw and db sum one term per row, M terms of size ~1 in float32 (lesson 9's dw: 4096 rows in an
# arbitrary order were off by up to 5.3e-4); then one rounding to the dtype. A sum that misses
# another program's rows is off by whole terms, ~1.
DW_TOLERANCES = {torch.float32: (1e-3, 1e-5), _F16: (1e-3, 1e-3), _BF16: (1e-2, 1.6e-2)}

# Row lengths that leave padding lanes (7, 129, 1000, 1025, 300) and a whole block (1024), where a
# mean over BLOCK_SIZE instead of N, or padding lanes that are not 0 in a sum, is wrong; one
# column (x̂ = 0: y = b, dx = dw = 0, db = dy); one row, where a dw or db without the sum across
# programs is right by luck; 300 rows of 17, two rows a backward program (GROUPS = 256); float16
# values near 2000, whose squares overflow float16; strided x and dy. The interpreter runs one
# program at a time: CPU cases stay at a few hundred programs.
_CPU = (Case((1, 1)), Case((3, 7)), Case((6, 129)), Case((17, 1000)), Case((4, 1024)), Case((300, 17)),
        Case((4, 1025), _F16), Case((6, 500), _F16, values="large"), Case((5, 300), strided=True),
        Case((7, 129), _F16, strided=True))
_GPU = _CPU + (Case((1, 4096)), Case((4096, 4096)), Case((2048, 4097), _F16), Case((1000, 1500), _BF16),
               Case((512, 3000), _BF16, strided=True), Case((16384, 1024), _F16, values="large"))

EXERCISE = Exercise(
    name="ps6_layer_norm",
    function="layer_norm",
    signature="layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor",
    reference=layer_norm_reference,
    make_inputs=layer_norm_inputs,
    solution="solutions.layer_norm",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
    # A training step's LayerNorm at a 70B-class model's width: 32k tokens of 8192 in float16, forward
    # and backward, 2.7 GB at the fewest. The judge times calls back to back by its own clock, so the
    # Python of an autograd.Function (0.38-0.44 ms a call for the reference's six allocations and
    # three launches, on an H100) counts. At 16384 × 4096 that was more than the GPU's 0.26 ms: the
    # judge's four verdicts on the reference read 1.00-1.13× and the bench's five 0.74-1.16× where
    # the GPU alone ran it 1.71× PyTorch's speed. Here the GPU's share is 1.0 ms (PyTorch's 1.9 ms):
    # the judge gave the reference 1.73× on an H100 (2026-12-05), do_bench 1.71-1.75× in four
    # verdicts. At least PyTorch eager's speed is asked. PyTorch's kernels read x and dy a
    # second time for dw and db (7 · M · N elements against 5). A kernel with one buffer row per row
    # for dw and db (lesson 9's strategy (a)) writes and reads M × 2N float32 more: 26 bytes an
    # element against 10, about 0.4 of the reference's speed.
    throughput=Throughput(case=Case((32768, 8192), _F16), threshold=1.0, bytes_moved=layer_norm_bytes,
                          baseline="F.layer_norm forward + autograd backward"),
    tolerances=Y_TOLERANCES,
    gradients={"x": DX_TOLERANCES, "w": DW_TOLERANCES, "b": DW_TOLERANCES},
    # One element: y = b, dx = dw = 0, db = dy. (A column of rows still sums dy into db.)
    edge=lambda case: case.shape == (1, 1),
    points={"correctness": 4, "hidden": 4, "throughput": 2},
)
