"""The benchmark's sweeps, declared once: each lesson kernel that has a PyTorch counterpart, the
sizes it is timed at against that counterpart, and its goal.

A sweep names the kernel's declaration in ``autograder/lesson_kernels/`` (:mod:`autograder.exercises`),
which gives it everything else: the solution module and function, the PyTorch operation it is
timed against and checked with (in float64, within the declaration's tolerances, as a student's
kernel is), and its inputs, made from the :class:`~autograder.spec.Case` the sweep gives for each
size. A sweep's name is what the results and the prose quote (``fused_softmax_bfloat16``: the variant
after the kernel when one kernel is swept twice).
The solution module is imported only when the sweep runs, so a sweep can be declared before its
kernel is written: :meth:`Sweep.load` then returns None and the benchmark notes the sweep as skipped.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch

from .. import correctness, exercises, timing
from ..lesson_kernels.flash_attention import AttentionCase
from ..spec import Case, Exercise

SOFTMAX_ROWS = 16384
ONLINE_SOFTMAX_ROWS = 64
ATTENTION_BATCH, ATTENTION_HEADS, ATTENTION_HEAD_DIM = 4, 32, 128


@dataclass(frozen=True)
class Goal:
    """What a reference kernel must reach at one size of its sweep."""

    size: int
    """The size it applies to, one of the sweep's ``sizes``."""
    ratio: float
    """PyTorch's time / ours must be at least this (1.0: as fast as PyTorch)."""
    ceiling_fraction: float | None = None
    """Ours must also reach this fraction of the device's ceiling; None: no such requirement."""

    def shortfalls(self, ratio: float, ceiling_fraction: float) -> list[str]:
        """How far the measured ``ratio`` and ``ceiling_fraction`` fall short; empty when met."""
        short = []
        if ratio < self.ratio:
            short.append(f"{self.ratio - ratio:.3f}× ({1 - ratio / self.ratio:.1%})")
        if self.ceiling_fraction is not None and ceiling_fraction < self.ceiling_fraction:
            short.append(f"{100 * (self.ceiling_fraction - ceiling_fraction):.1f} points of the ceiling")
        return short


@dataclass(frozen=True)
class Sweep:
    """One lesson kernel timed against its PyTorch counterpart over a range of sizes."""

    name: str
    """What ``python -m autograder.bench --only`` and the plot's file name use."""
    title: str
    """The plot's title and the section heading in RESULTS.md."""
    exercise: str
    """The kernel's declaration: solution, function, reference, inputs and tolerances."""
    case: Callable[[int], Case]
    """The case at size ``n``: its shape and dtype (and, for attention, whether causal)."""
    sizes: tuple[int, ...]
    """The sizes timed, smallest first."""
    size_name: str
    """What a size counts (``columns of 16384 rows``): the plot's x-axis, the table's header."""
    label: Callable[[int], str]
    """How one size reads in tables and progress lines (``16384×4096``)."""
    goals: tuple[Goal, ...]
    """What the kernel must reach, each at one of ``sizes``."""
    bytes_moved: Callable[[int], int] | None = None
    """The fewest bytes a call must read and write at size ``n``, for GB/s: the declaration's
    count at that size, as arithmetic (``tests/test_bench.py`` holds the two together)."""
    flops: Callable[[int], int] | None = None
    """The floating-point operations a call must do at size ``n``, for TFLOP/s, likewise."""
    rounds: int = 3
    """Alternating rounds per size (``timing.compare``); each takes 0.13-0.26 s per function."""

    def __post_init__(self):
        if self.exercise not in exercises.EXERCISES or self.declared.throughput is None:
            raise ValueError(f"sweep {self.name}: {self.exercise!r} is no exercise with a throughput measure")
        if (self.bytes_moved is None) == (self.flops is None):
            raise ValueError(f"sweep {self.name}: give exactly one of bytes_moved= and flops=")
        if (self.flops is None) != (self.declared.throughput.unit == "GB/s"):
            raise ValueError(f"sweep {self.name}: count what {self.exercise}'s throughput counts")
        if not {g.size for g in self.goals} <= set(self.sizes):
            raise ValueError(f"sweep {self.name}: every goal's size must be one of its sizes")

    @property
    def declared(self) -> Exercise:
        return exercises.get(self.exercise)

    @property
    def solution(self) -> str:
        return self.declared.solution

    @property
    def function(self) -> str:
        return self.declared.function

    @property
    def baseline(self) -> str:
        """The PyTorch operation it is timed against, as students know it."""
        return self.declared.throughput.baseline

    @property
    def reference(self) -> Callable[..., torch.Tensor]:
        """That operation, called with the kernel's arguments."""
        return self.declared.reference

    @property
    def dtype(self) -> torch.dtype:
        """The inputs' dtype; for a TFLOP/s sweep, also the dtype of the matmul rate it is held to."""
        return self.case(self.sizes[0]).dtype

    @property
    def group(self) -> str:
        """The solution module's own name (``fused_softmax``): ``--only fused_softmax`` runs all its sweeps."""
        return self.solution.rsplit(".", 1)[-1]

    @property
    def path(self) -> str:
        return self.solution.replace(".", "/") + ".py"

    @property
    def unit(self) -> str:
        return "GB/s" if self.flops is None else "TFLOP/s"

    @property
    def ceiling_name(self) -> str:
        """The device's ceiling for this sweep, as the benchmark measures and names it."""
        return "copy bandwidth" if self.flops is None else matmul_ceiling_name(self.dtype)

    def make_inputs(self, n: int, device: str, seed: int = 0) -> tuple:
        """The arguments at size ``n``, drawn on ``device`` (a CUDA generator there: fast)."""
        generator = torch.Generator(device=device).manual_seed(seed)
        return self.declared.make_inputs(self.case(n), generator, device)

    def problem(self, n: int, inputs: tuple, output) -> str | None:
        """Why ``output`` is not the kernel's answer for ``inputs`` at size ``n``, or None."""
        wrong = correctness.judge_output(self.declared, self.case(n), inputs, (output,))
        return wrong and wrong.message

    def load(self) -> Callable[..., torch.Tensor] | None:
        """The kernel to time; None while ``solution`` does not exist."""
        try:
            module = importlib.import_module(self.solution)
        except ModuleNotFoundError as missing:
            if missing.name != self.solution:
                raise  # the module exists and something it imports does not: a real error
            return None
        return getattr(module, self.function)


def matmul_ceiling_name(dtype: torch.dtype) -> str:
    """The matmul whose rate is the ceiling in ``dtype`` (``timing.matmul_tflops``), and the dtype."""
    return f"{timing.matmul_op(dtype)} {dtype_name(dtype)}"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def power_of_two(n: int) -> str:
    """``2^20`` for 1048576; other sizes with thousands separators."""
    k = n.bit_length() - 1
    return f"2^{k}" if n == 2**k else f"{n:,}"


def _vector_add() -> Sweep:
    return Sweep(
        name="vector_add", title="Vector add, float32", exercise="vector_add", case=lambda n: Case((n,)),
        sizes=tuple(2**k for k in range(12, 29, 2)), size_name="elements", label=power_of_two,
        bytes_moved=lambda n: 3 * 4 * n,  # two float32 reads, one write
        # torch.add already streams at the copy bandwidth (105-108% of it past 2^26 in the H200
        # runs: 2 reads per write, and HBM reads are faster than the copy's 1:1 mix): match it.
        goals=(Goal(2**28, ratio=0.97, ceiling_fraction=0.95),))


def _softmax(dtype: torch.dtype) -> Sweep:
    return Sweep(
        name=f"fused_softmax_{dtype_name(dtype)}", title=f"Fused softmax, {SOFTMAX_ROWS} rows, {dtype_name(dtype)}",
        exercise="fused_softmax", case=lambda n: Case((SOFTMAX_ROWS, n), dtype), sizes=(1024, 4096, 16384),
        size_name=f"columns of {SOFTMAX_ROWS} rows", label=lambda n: f"{SOFTMAX_ROWS}×{n}",
        # one read and one write per element: 16384×16384 float32 moves 2 GiB
        bytes_moved=lambda n: 2 * SOFTMAX_ROWS * n * dtype.itemsize,
        goals=tuple(Goal(n, ratio=1.0) for n in (1024, 4096, 16384)))


def _online_softmax() -> Sweep:
    return Sweep(
        name="online_softmax", title=f"Online softmax, {ONLINE_SOFTMAX_ROWS} rows, float32",
        exercise="online_softmax", case=lambda n: Case((ONLINE_SOFTMAX_ROWS, n)),
        sizes=tuple(2**k for k in range(14, 21)), size_name=f"columns of {ONLINE_SOFTMAX_ROWS} rows",
        label=lambda n: f"{ONLINE_SOFTMAX_ROWS}×{power_of_two(n)}",
        # the fewest bytes, one read and one write per element (the reference reads x twice)
        bytes_moved=lambda n: 2 * ONLINE_SOFTMAX_ROWS * n * 4, goals=(Goal(2**20, ratio=1.0),))


def _matmul(exercise: str, dtype: torch.dtype, title: str, goal: float, name: str | None = None,
            goal_sizes: tuple[int, ...] = (4096, 8192)) -> Sweep:
    return Sweep(
        name=name or f"{exercise}_{dtype_name(dtype)}", title=f"{title}, {dtype_name(dtype)}, square",
        exercise=exercise, case=lambda n: Case((n, n, n), dtype), sizes=(1024, 2048, 4096, 8192),
        size_name="n (n×n×n)", label=lambda n: f"{n}³", flops=lambda n: 2 * n**3,
        goals=tuple(Goal(n, ratio=goal) for n in goal_sizes))


def _attention(causal: bool) -> Sweep:
    B, H, D = ATTENTION_BATCH, ATTENTION_HEADS, ATTENTION_HEAD_DIM

    def flops(n):
        # Q·Kᵀ and P·V: 2·S²·D each per head; causal skips the masked half of both.
        return 4 * B * H * n * n * D // (2 if causal else 1)

    kind = "causal" if causal else "non-causal"
    return Sweep(
        name="flash_attention_causal" if causal else "flash_attention",
        title=f"FlashAttention forward, bfloat16, {kind} (B={B}, H={H}, D={D})", exercise="flash_attention",
        case=lambda n: AttentionCase((B, H, n, D), torch.bfloat16, causal=causal),
        sizes=(512, 1024, 2048, 4096), size_name="sequence length", label=lambda n: f"seq {n}",
        # lesson 8's goal, then issue 25's: near SDPA's Hopper kernels (FlashAttention-3)
        flops=flops, goals=(Goal(4096, ratio=0.8), Goal(4096, ratio=0.95)))


SWEEPS: dict[str, Sweep] = {s.name: s for s in (
    _vector_add(), _softmax(torch.float32), _softmax(torch.bfloat16), _online_softmax(),
    _matmul("matmul", torch.float16, "Matmul", goal=0.9, name="matmul"),  # lesson 7
    _matmul("tma_matmul", torch.float16, "Persistent TMA matmul", goal=1.0),  # lesson 11: cuBLAS's speed
    _matmul("tma_matmul", torch.bfloat16, "Persistent TMA matmul", goal=1.0),
    _matmul("tma_matmul_fp8", torch.float8_e4m3fn, "FP8 matmul, per-tensor scales", goal=1.0, name="tma_matmul_fp8",
            goal_sizes=(8192,)),
    _attention(causal=False), _attention(causal=True))}
"""Every sweep, in the order the benchmark runs them."""

MATMUL_DTYPES = tuple(dict.fromkeys(s.dtype for s in SWEEPS.values() if s.flops is not None))
"""The dtypes whose ``torch.matmul`` rate the benchmark measures as a ceiling."""

