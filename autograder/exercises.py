"""The course's exercises, declared once. Look one up with :func:`get`."""
from __future__ import annotations

import torch

from .inputs import one_random_tensor, random_tensors
from .spec import Case, Exercise, Throughput


def _vector_add_inputs(case: Case, generator: torch.Generator, device: str):
    return random_tensors(case, generator, device, count=2)


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

def _softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


# Softmax outputs are small (about 1/n_cols: 1.2e-4 at 8192 columns), so the default float32
# atol of 1e-5 would forgive a 7% error there: one stray exp(0 - max) ≈ 0.02 added to a sum
# of ~300 (a masked lane loaded as 0) hides under it. The atols below sit under the
# smallest outputs that matter; rtol 1e-5 is 40 float32 ulps, room for the GPU's approximate
# exp and a 2^20-term sum.
SOFTMAX_TOLERANCES = {torch.float32: (1e-8, 1e-5), torch.float16: (1e-7, 1e-3),
                      torch.bfloat16: (1e-8, 1.6e-2)}


# Row lengths that are not powers of two, from 1 to 8192: the kernel's block is the next
# power of two, so every case has masked lanes. Large magnitudes overflow exp() unless the
# row max is subtracted; -inf entries must come out as exact zeros.
_F32, _F16, _BF16 = torch.float32, torch.float16, torch.bfloat16
_SOFTMAX_CPU = (Case((1, 1)), Case((3, 7)), Case((17, 1000)), Case((4, 1025), _F16),
                Case((5, 300), strided=True), Case((6, 129), values="large"),
                Case((6, 129), _F16, values="neg_inf"))
_SOFTMAX_GPU = _SOFTMAX_CPU + (Case((128, 8191)), Case((1000, 4097), _F16), Case((64, 3000), _BF16),
                               Case((256, 1000), _BF16, strided=True))

FUSED_SOFTMAX = Exercise(
    name="ps2_fused_softmax",
    function="softmax",
    signature="softmax(x: torch.Tensor) -> torch.Tensor",
    reference=_softmax_reference,
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
                          bytes_moved=_bytes_elementwise, baseline="torch.softmax"),
    tolerances=SOFTMAX_TOLERANCES,
    points={"correctness": 4, "hidden": 4, "throughput": 2},
)


# Rows past one block: on the CPU a few tiles of 4096, on a GPU up to 2^20 columns (4 MiB of
# float32, sixteen times an SM's register file).
_ONLINE_CPU = (Case((1, 1)), Case((3, 1000)), Case((2, 5000)), Case((2, 4097), _F16),
               Case((3, 9000), strided=True), Case((2, 6000), values="large"),
               Case((2, 6000), _F16, values="neg_inf"))
_ONLINE_GPU = _ONLINE_CPU + (Case((64, 2**20)), Case((16, 2**18 + 3), _F16), Case((8, 100_000), _BF16),
                             Case((4, 2**20), _BF16, strided=True))

ONLINE_SOFTMAX = Exercise(
    name="ps3_online_softmax",
    function="softmax_online",
    signature="softmax_online(x: torch.Tensor) -> torch.Tensor",
    reference=_softmax_reference,
    make_inputs=one_random_tensor,
    solution="solutions.online_softmax",
    visible_cases={"cpu": _ONLINE_CPU, "cuda": _ONLINE_GPU},
    hidden_cases={
        "cpu": (Case((1, 20_000)), Case((4, 8193), _F16), Case((2, 3000), _F16, strided=True),
                Case((3, 4096), values="neg_inf"), Case((2, 777)), Case((2, 777))),
        "cuda": (Case((64, 262_144)), Case((3, 2**20 + 1), _F16, values="neg_inf"),
                 Case((5, 123_457), _BF16, values="large"), Case((1, 1)), Case((2, 777)), Case((2, 777))),
    },
    throughput=Throughput(case=Case((64, 262_144)), threshold=0.8,
                          bytes_moved=_bytes_elementwise, baseline="torch.softmax"),
    tolerances=SOFTMAX_TOLERANCES,
    points={"correctness": 4, "hidden": 4, "throughput": 2},
)


def _lesson_exercises() -> list[Exercise]:
    """The practice exercises of the lessons: ``EXERCISE`` of each ``lesson_exercises`` module."""
    import importlib
    import pkgutil

    from . import lesson_exercises
    return [importlib.import_module(f"{lesson_exercises.__name__}.{m.name}").EXERCISE
            for m in sorted(pkgutil.iter_modules(lesson_exercises.__path__), key=lambda m: m.name)]


EXERCISES = {ex.name: ex for ex in (VECTOR_ADD, FUSED_SOFTMAX, ONLINE_SOFTMAX, *_lesson_exercises())}


def get(name: str | Exercise) -> Exercise:
    """The exercise called ``name`` (or ``name`` itself if it is one), with a helpful typo error."""
    if isinstance(name, Exercise):
        return name
    try:
        return EXERCISES[name]
    except KeyError:
        raise KeyError(f"no exercise {name!r}; the course has: {', '.join(EXERCISES)}") from None
