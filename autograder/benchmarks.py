"""The benchmark's sweeps, declared once: each reference kernel in ``solutions/`` that has a
PyTorch counterpart, the sizes it is timed at against that counterpart, and its goal.

A sweep is named for its solution module (``softmax`` for ``autograder/kernels/softmax.py``), with the
variant after it when one kernel is swept twice (``softmax_bfloat16``). The solution module is
imported only when the sweep runs, so a sweep can be declared before its kernel is written:
:meth:`Sweep.load` then returns None and the benchmark notes the sweep as skipped.
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from .references import softmax_reference

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
    """One reference kernel timed against its PyTorch counterpart over a range of sizes."""

    name: str
    """What ``python -m autograder.bench --only`` and the plot's file name use."""
    title: str
    """The plot's title and the section heading in RESULTS.md."""
    solution: str
    """Module of the reference kernel, imported only when the sweep runs."""
    function: str
    """The function in it that is timed."""
    baseline: str
    """The PyTorch operation it is compared with, as students know it."""
    reference: Callable[..., torch.Tensor]
    """That operation, called with the same arguments as the kernel."""
    make_inputs: Callable[[int, str], tuple[torch.Tensor, ...]]
    """The arguments at size ``n`` on a device (``"cuda"`` when timed)."""
    sizes: tuple[int, ...]
    """The sizes timed, smallest first."""
    size_name: str
    """What a size counts (``columns of 16384 rows``): the plot's x-axis, the table's header."""
    label: Callable[[int], str]
    """How one size reads in tables and progress lines (``16384×4096``)."""
    dtype: torch.dtype
    """The inputs' dtype; for a TFLOP/s sweep, also the dtype of the matmul rate it is held to."""
    goals: tuple[Goal, ...]
    """What the kernel must reach, each at one of ``sizes``."""
    bytes_moved: Callable[[int], int] | None = None
    """The fewest bytes a call must read and write at size ``n``, for GB/s."""
    flops: Callable[[int], int] | None = None
    """The floating-point operations a call must do at size ``n``, for TFLOP/s."""
    options: dict = field(default_factory=dict)
    """Keyword arguments for the kernel (``causal=True``); ``reference`` has its own bound."""
    atol: float | None = None
    """Absolute tolerance of the one check of the kernel's output against ``reference`` at each
    size; None (with ``rtol``): ``torch.testing.assert_close``'s default for the dtype."""
    rtol: float | None = None
    """Its relative tolerance; give both or neither."""
    rounds: int = 3
    """Alternating rounds per size (``timing.compare``); each takes 0.13-0.26 s per function."""

    def __post_init__(self):
        if (self.bytes_moved is None) == (self.flops is None):
            raise ValueError(f"sweep {self.name}: give exactly one of bytes_moved= and flops=")
        if (self.atol is None) != (self.rtol is None):
            raise ValueError(f"sweep {self.name}: give both of atol= and rtol=, or neither")
        if not {g.size for g in self.goals} <= set(self.sizes):
            raise ValueError(f"sweep {self.name}: every goal's size must be one of its sizes")

    @property
    def group(self) -> str:
        """The solution module's own name (``softmax``): ``--only softmax`` runs all its sweeps."""
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

    def load(self) -> Callable[..., torch.Tensor] | None:
        """The kernel to time, with ``options`` bound; None while ``solution`` does not exist."""
        try:
            module = importlib.import_module(self.solution)
        except ModuleNotFoundError as missing:
            if missing.name != self.solution:
                raise  # the module exists and something it imports does not: a real error
            return None
        fn = getattr(module, self.function)
        return functools.partial(fn, **self.options) if self.options else fn


def matmul_ceiling_name(dtype: torch.dtype) -> str:
    return f"torch.matmul {dtype_name(dtype)}"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def power_of_two(n: int) -> str:
    """``2^20`` for 1048576; other sizes with thousands separators."""
    k = n.bit_length() - 1
    return f"2^{k}" if n == 2**k else f"{n:,}"


def _vector_add() -> Sweep:
    def make(n, device):
        return (torch.randn(n, device=device), torch.randn(n, device=device))

    return Sweep(
        name="vector_add", title="Vector add, float32", solution="autograder.kernels.vector_add", function="add",
        baseline="torch.add", reference=torch.add, make_inputs=make,
        sizes=tuple(2**k for k in range(12, 29, 2)), size_name="elements", label=power_of_two,
        dtype=torch.float32, bytes_moved=lambda n: 3 * 4 * n,  # two float32 reads, one write
        # torch.add already streams at the copy bandwidth (105-108% of it past 2^26 in the H200
        # runs: 2 reads per write, and HBM reads are faster than the copy's 1:1 mix): match it.
        goals=(Goal(2**28, ratio=0.97, ceiling_fraction=0.95),))


# The reference softmaxes pass rtol 1e-5 against the float64 softmax on ps2/ps3's GPU cases
# (SOFTMAX_TOLERANCES); torch.softmax also sums in float32 and errs about as much, so the two
# agree within 2e-5. atol 1e-8 is ~1% of the smallest outputs that matter (~1e-6 at 2^20
# columns), where float32's default atol of 1e-5 would pass an all-zero output. bfloat16:
# both round a float32 result once, so they differ by one bfloat16 ulp at most (≤ 2^-7 relative).
_SOFTMAX_AGREEMENT = {torch.float32: (1e-8, 2e-5), torch.bfloat16: (1e-8, 1.6e-2)}


def _softmax(dtype: torch.dtype) -> Sweep:
    def make(n, device):
        return (torch.randn(SOFTMAX_ROWS, n, device=device, dtype=dtype),)

    atol, rtol = _SOFTMAX_AGREEMENT[dtype]
    return Sweep(
        name=f"softmax_{dtype_name(dtype)}", title=f"Fused softmax, {SOFTMAX_ROWS} rows, {dtype_name(dtype)}",
        solution="autograder.kernels.softmax", function="softmax", baseline="torch.softmax",
        reference=softmax_reference, make_inputs=make, sizes=(1024, 4096, 16384),
        size_name=f"columns of {SOFTMAX_ROWS} rows", label=lambda n: f"{SOFTMAX_ROWS}×{n}", dtype=dtype,
        # one read and one write per element: 16384×16384 float32 moves 2 GiB
        bytes_moved=lambda n: 2 * SOFTMAX_ROWS * n * dtype.itemsize,
        goals=tuple(Goal(n, ratio=1.0) for n in (1024, 4096, 16384)), atol=atol, rtol=rtol)


def _online_softmax() -> Sweep:
    def make(n, device):
        return (torch.randn(ONLINE_SOFTMAX_ROWS, n, device=device),)

    atol, rtol = _SOFTMAX_AGREEMENT[torch.float32]
    return Sweep(
        name="online_softmax", title=f"Online softmax, {ONLINE_SOFTMAX_ROWS} rows, float32",
        solution="solutions.online_softmax", function="softmax_online", baseline="torch.softmax",
        reference=softmax_reference, make_inputs=make, sizes=tuple(2**k for k in range(14, 21)),
        size_name=f"columns of {ONLINE_SOFTMAX_ROWS} rows",
        label=lambda n: f"{ONLINE_SOFTMAX_ROWS}×{power_of_two(n)}", dtype=torch.float32,
        # the fewest bytes, one read and one write per element (the reference reads x twice)
        bytes_moved=lambda n: 2 * ONLINE_SOFTMAX_ROWS * n * 4,
        goals=(Goal(2**20, ratio=1.0),), atol=atol, rtol=rtol)


def _matmul() -> Sweep:
    def make(n, device):
        return tuple(torch.randn(n, n, device=device, dtype=torch.float16) for _ in range(2))

    return Sweep(
        name="matmul", title="Matmul, float16, square", solution="autograder.kernels.matmul", function="matmul",
        baseline="torch.matmul", reference=torch.matmul, make_inputs=make, sizes=(1024, 2048, 4096, 8192),
        size_name="n (n×n×n)", label=lambda n: f"{n}³", dtype=torch.float16, flops=lambda n: 2 * n**3,
        goals=(Goal(4096, ratio=0.9), Goal(8192, ratio=0.9)),
        # Entries of a @ b are N(0, n) for randn inputs (std 90 at n = 8192): rtol covers the
        # float16 rounding of each output (2^-11 relative); atol the sums near zero, including a
        # split-K reduction in float16 that cuBLAS may choose (4 partial sums of std 45, each
        # rounded to a multiple of 0.03). A kernel that drops one 32-deep tile of K is off by
        # N(0, 32): std 5.7.
        atol=0.5, rtol=1e-2)


def _tma_matmul(dtype: torch.dtype) -> Sweep:
    def make(n, device):
        return tuple(torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))

    return Sweep(
        name=f"tma_matmul_{dtype_name(dtype)}", title=f"Persistent TMA matmul, {dtype_name(dtype)}, square",
        solution="autograder.kernels.persistent_matmul", function="tma_matmul", baseline="torch.matmul",
        reference=torch.matmul, make_inputs=make, sizes=(1024, 2048, 4096, 8192), size_name="n (n×n×n)",
        label=lambda n: f"{n}³", dtype=dtype, flops=lambda n: 2 * n**3,
        # lesson 11's goal (issue 25): cuBLAS's speed at the two large sizes
        goals=(Goal(4096, ratio=1.0), Goal(8192, ratio=1.0)),
        # as _matmul: both round each output once (bfloat16: 2^-8 relative, under rtol)
        atol=0.5, rtol=1e-2)


def _attention(causal: bool) -> Sweep:
    B, H, D = ATTENTION_BATCH, ATTENTION_HEADS, ATTENTION_HEAD_DIM

    def make(n, device):
        return tuple(torch.randn(B, H, n, D, device=device, dtype=torch.bfloat16) for _ in range(3))

    def flops(n):
        # Q·Kᵀ and P·V: 2·S²·D each per head; causal skips the masked half of both.
        return 4 * B * H * n * n * D // (2 if causal else 1)

    kind = "causal" if causal else "non-causal"
    return Sweep(
        name="flash_attention_causal" if causal else "flash_attention",
        title=f"FlashAttention forward, bfloat16, {kind} (B={B}, H={H}, D={D})",
        solution="autograder.kernels.flash_attention", function="attention",
        baseline="F.scaled_dot_product_attention",
        reference=functools.partial(F.scaled_dot_product_attention, is_causal=causal),
        make_inputs=make, sizes=(512, 1024, 2048, 4096), size_name="sequence length",
        label=lambda n: f"seq {n}", dtype=torch.bfloat16, flops=flops, options={"causal": causal},
        goals=(Goal(4096, ratio=0.8),),
        # Outputs are weighted averages of N(0, 1) values. A FlashAttention kernel rounds P to
        # bfloat16 before P·V (2^-9 relative: ~2e-3 on the first causal rows, where P has one or
        # two large terms, under atol) and rounds the output once (one ulp apart at most: rtol).
        # Without the causal mask, row 0 is an average of all of v (~0.03) instead of v[0] (~1).
        atol=1e-2, rtol=1.6e-2)


SWEEPS: dict[str, Sweep] = {s.name: s for s in (
    _vector_add(), _softmax(torch.float32), _softmax(torch.bfloat16), _online_softmax(), _matmul(),
    _tma_matmul(torch.float16), _tma_matmul(torch.bfloat16), _attention(causal=False), _attention(causal=True))}
"""Every sweep, in the order the benchmark runs them."""

MATMUL_DTYPES = tuple(dict.fromkeys(s.dtype for s in SWEEPS.values() if s.flops is not None))
"""The dtypes whose ``torch.matmul`` rate the benchmark measures as a ceiling."""

