"""Lesson 4's fused softmax, one row per program."""
import torch

from ..inputs import one_random_tensor
from ..references import SOFTMAX_TOLERANCES, bytes_elementwise, softmax_reference
from ..spec import Case, Exercise, Throughput


# Row lengths that are not powers of two, from 1 to 8192: the kernel's block is the next
# power of two, so every case has masked lanes. Large magnitudes overflow exp() unless the
# row max is subtracted; -inf entries must come out as exact zeros.
_F16, _BF16 = torch.float16, torch.bfloat16
_SOFTMAX_CPU = (Case((1, 1)), Case((3, 7)), Case((17, 1000)), Case((4, 1025), _F16),
                Case((5, 300), strided=True), Case((6, 129), values="large"),
                Case((6, 129), _F16, values="neg_inf"))
_SOFTMAX_GPU = _SOFTMAX_CPU + (Case((128, 8191)), Case((1000, 4097), _F16), Case((64, 3000), _BF16),
                               Case((256, 1000), _BF16, strided=True))

EXERCISE = Exercise(
    name="fused_softmax",
    function="softmax",
    signature="softmax(x: torch.Tensor) -> torch.Tensor",
    reference=softmax_reference,
    make_inputs=one_random_tensor,
    solution="autograder.kernels.fused_softmax",
    visible_cases={"cpu": _SOFTMAX_CPU, "cuda": _SOFTMAX_GPU},
    throughput=Throughput(case=Case((4096, 4096)), threshold=0.9,
                          bytes_moved=bytes_elementwise, baseline="torch.softmax"),
    tolerances=SOFTMAX_TOLERANCES,
)
