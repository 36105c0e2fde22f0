"""The course's exercises, declared once. Look one up with :func:`get`."""
from __future__ import annotations

import torch

from .spec import Case, Exercise, Throughput


def _randn_like_case(case: Case, generator: torch.Generator, device: str, count: int):
    """``count`` standard-normal tensors drawn on the CPU (same values on every device)."""
    shape = case.shape
    if case.strided:  # a view whose last dimension skips every other element
        shape = (*shape[:-1], 2 * shape[-1])
    tensors = []
    for _ in range(count):
        t = torch.randn(shape, generator=generator, dtype=torch.float32).to(device, case.dtype)
        tensors.append(t[..., ::2] if case.strided else t)
    return tuple(tensors)


def _vector_add_inputs(case: Case, generator: torch.Generator, device: str):
    return _randn_like_case(case, generator, device, count=2)


def _bytes_elementwise(inputs, output) -> int:
    return sum(t.numel() * t.element_size() for t in (*inputs, output))


# Sizes: 1 and 127 are under one block, 1025 is one element past a 1024 block, 98432 is
# 96.1 blocks; 4096 is whole blocks, which a kernel without a mask gets right by luck.
# The interpreter runs one program at a time (~2 ms each), so CPU sizes stay under 10^5;
# the GPU adds sizes past 2^20.
_ADD_CPU = tuple(Case((n,), dt) for dt in (torch.float32, torch.float16)
                 for n in (1, 127, 1025, 4096, 98432))
_ADD_GPU = _ADD_CPU + tuple(Case((n,), dt) for dt in (torch.float32, torch.float16)
                            for n in (1_048_577, 16_777_216))

VECTOR_ADD = Exercise(
    name="ps1_vector_add",
    function="add",
    signature="add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor",
    reference=torch.add,
    make_inputs=_vector_add_inputs,
    solution="solutions.vector_add",
    visible_cases={"cpu": _ADD_CPU, "cuda": _ADD_GPU},
    # the same shape twice with different data catches a result cached by shape
    hidden_cases={
        "cpu": (Case((3,)), Case((1023,), torch.float16), Case((2048,)), Case((4099,)),
                Case((4099,)), Case((65537,), torch.float16)),
        "cuda": (Case((3,)), Case((2048,)), Case((4099,)), Case((4099,)),
                 Case((33_554_433,)), Case((33_554_433,), torch.float16)),
    },
    throughput=Throughput(case=Case((2**26,)), threshold=0.8,
                          bytes_moved=_bytes_elementwise, baseline="torch.add"),
    points={"correctness": 3, "hidden": 3, "throughput": 2},
)

EXERCISES = {ex.name: ex for ex in (VECTOR_ADD,)}


def get(name: str | Exercise) -> Exercise:
    """The exercise called ``name`` (or ``name`` itself if it is one), with a helpful typo error."""
    if isinstance(name, Exercise):
        return name
    try:
        return EXERCISES[name]
    except KeyError:
        raise KeyError(f"no exercise {name!r}; the course has: {', '.join(EXERCISES)}") from None
