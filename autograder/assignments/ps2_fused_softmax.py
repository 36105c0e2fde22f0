"""Problem set 2: fused softmax, one row per program."""
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
    name="ps2_fused_softmax",
    function="softmax",
    signature="softmax(x: torch.Tensor) -> torch.Tensor",
    reference=softmax_reference,
    make_inputs=one_random_tensor,
    solution="solutions.softmax",
    visible_cases={"cpu": _SOFTMAX_CPU, "cuda": _SOFTMAX_GPU},
    hidden_cases={
        "cpu": (Case((2, 2000)), Case((9, 513), _F16, strided=True), Case((8, 777), _F16, values="large"),
                Case((8, 777), values="neg_inf"), Case((1, 4097)), Case((3, 7)), Case((3, 7))),
        "cuda": (Case((4096, 1000)), Case((333, 8192), _F16, values="neg_inf"),
                 Case((100, 5000), _BF16, values="large"), Case((64, 8191), strided=True),
                 Case((1, 1), _BF16), Case((3, 7)), Case((3, 7))),
    },
    throughput=Throughput(case=Case((4096, 4096)), threshold=0.9,
                          bytes_moved=bytes_elementwise, baseline="torch.softmax"),
    tolerances=SOFTMAX_TOLERANCES,
    points={"correctness": 4, "hidden": 4, "throughput": 2},
)
