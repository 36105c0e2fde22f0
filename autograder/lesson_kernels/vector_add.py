"""Lesson 2's vector add, the first kernel."""
import torch

from ..inputs import random_tensors
from ..references import bytes_elementwise
from ..spec import Case, Exercise, Throughput


def _inputs(case: Case, generator: torch.Generator, device: str):
    return random_tensors(case, generator, device, count=2)


# Sizes: 1 and 127 are under one block, 1025 is one element past a 1024 block, 98432 is
# 96.1 blocks; 4096 is whole blocks, which a kernel without a mask gets right by luck.
# The interpreter runs one program at a time (~2 ms each), so CPU sizes stay under 10^5;
# the GPU adds sizes past 2^20.
_ADD_CPU = tuple(Case((n,), dt) for dt in (torch.float32, torch.float16)
                 for n in (1, 127, 1025, 4096, 98432))
_ADD_GPU = _ADD_CPU + tuple(Case((n,), dt) for dt in (torch.float32, torch.float16)
                            for n in (1_048_577, 16_777_216))

EXERCISE = Exercise(
    name="vector_add",
    function="add",
    signature="add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor",
    reference=torch.add,
    make_inputs=_inputs,
    solution="autograder.kernels.vector_add",
    visible_cases={"cpu": _ADD_CPU, "cuda": _ADD_GPU},
    throughput=Throughput(case=Case((2**26,)), threshold=0.8,
                          bytes_moved=bytes_elementwise, baseline="torch.add"),
)
