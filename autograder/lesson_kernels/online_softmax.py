"""Softmax for rows longer than one block (lesson 5), each row split over several programs
(the benchmark's long-row sweep; its kernel is on the instructor's side, in ``solutions``)."""
import torch

from ..inputs import one_random_tensor
from ..references import SOFTMAX_TOLERANCES, bytes_elementwise, softmax_reference
from ..spec import Case, Exercise, Throughput

_F16, _BF16 = torch.float16, torch.bfloat16

# Rows past one block: on the CPU a few tiles of 4096, on a GPU up to 2^20 columns (4 MiB of
# float32, sixteen times an SM's register file).
_ONLINE_CPU = (Case((1, 1)), Case((3, 1000)), Case((2, 5000)), Case((2, 4097), _F16),
               Case((3, 9000), strided=True), Case((2, 6000), values="large"),
               Case((2, 6000), _F16, values="neg_inf"))
_ONLINE_GPU = _ONLINE_CPU + (Case((64, 2**20)), Case((16, 2**18 + 3), _F16), Case((8, 100_000), _BF16),
                             Case((4, 2**20), _BF16, strided=True))

EXERCISE = Exercise(
    name="online_softmax",
    function="softmax_online",
    signature="softmax_online(x: torch.Tensor) -> torch.Tensor",
    reference=softmax_reference,
    make_inputs=one_random_tensor,
    solution="solutions.online_softmax",
    visible_cases={"cpu": _ONLINE_CPU, "cuda": _ONLINE_GPU},
    throughput=Throughput(case=Case((64, 262_144)), threshold=0.8,
                          bytes_moved=bytes_elementwise, baseline="torch.softmax"),
    tolerances=SOFTMAX_TOLERANCES,
)
