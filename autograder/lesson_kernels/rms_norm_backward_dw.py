"""Lesson 9's RMSNorm backward, the weight's gradient: a sum over every row, across programs."""
import torch

from ..spec import Exercise
from .rms_norm_backward import CPU_CASES, GPU_CASES, dw_reference, layer_inputs

# (atol, rtol) against float64 autograd. dw[j] = Σ_rows dy·x·r is a sum of M terms of size ~1,
# added in float32: in the atomics' arbitrary order, 4096 rows were off by up to 5.3e-4 (4096
# columns, a simulation adding the rows one by one in a random order), 2e-4 past rtol 1e-5; the
# GPU cases stay at 4096 rows or fewer, under atol 1e-3. 16-bit outputs round once more, 2**-11 or 2**-8 of
# the value. A dw without the cross-program sum is off by whole rows' contributions, ~1 or more.
DW_TOLERANCES = {torch.float32: (1e-3, 1e-5), torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-2, 1.6e-2)}

EXERCISE = Exercise(
    name="rms_norm_backward_dw",
    function="rms_norm_dw",
    signature="rms_norm_dw(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> torch.Tensor",
    reference=dw_reference,
    make_inputs=layer_inputs,
    solution="autograder.kernels.rms_norm_backward",
    visible_cases={"cpu": CPU_CASES, "cuda": GPU_CASES},
    tolerances=DW_TOLERANCES,
)
