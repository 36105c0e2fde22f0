"""Throughput on a GPU, always as a ratio against a PyTorch counterpart timed in the same run.

Every figure is the median of many ``triton.testing.do_bench`` repetitions (L2 flushed
before each), with the device synchronised inside the timed region so that work pushed to
a side stream is counted, several input sets rotated so no run is served from L2, and the
student's function and PyTorch's alternating round by round so drifting clocks hit both.

The synchronisation costs a host round trip (~20 µs on an H200) inside every timed region:
13% of a 2**26-element float32 add (0.19 ms). So a call shorter than ``BATCH_MS`` is timed
in batches of back-to-back calls followed by one synchronisation, and the batch time is
divided by the batch size; the round trip then weighs under 2%.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

import torch


@dataclass(frozen=True)
class Timing:
    """Median milliseconds of two functions timed side by side."""

    candidate_ms: float
    baseline_ms: float

    @property
    def ratio(self) -> float:
        """Baseline time over candidate time: above 1 means the candidate is faster."""
        return self.baseline_ms / self.candidate_ms


BATCH_MS = 1.0
"""Calls shorter than this are timed in back-to-back batches of at least this long."""


def median_ms(fn: Callable[[], object], warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median time of one call of ``fn`` in ms, the device synchronised inside the timed region."""
    import triton.testing

    def batch_of(calls: int) -> Callable[[], None]:
        def run():
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        return run

    def bench(calls: int) -> float:
        ms = triton.testing.do_bench(batch_of(calls), warmup=warmup_ms, rep=rep_ms, return_mode="median")
        return float(ms) / calls

    single = bench(1)
    calls = math.ceil(BATCH_MS / single)
    return single if calls <= 1 else bench(calls)


def rotating(fn: Callable, input_sets: Sequence[tuple], keep: list | None = None) -> Callable[[], object]:
    """A no-argument call of ``fn`` that cycles through ``input_sets``; stores outputs in ``keep``."""
    state = {"i": 0}

    def call():
        i = state["i"] % len(input_sets)
        state["i"] += 1
        out = fn(*input_sets[i])
        if keep is not None:
            keep[i] = out
        return out

    return call


def compare(candidate: Callable, baseline: Callable, input_sets: Sequence[tuple],
            rounds: int = 5, keep: list | None = None) -> Timing:
    """Time ``candidate`` and ``baseline`` alternately for ``rounds``; medians of the rounds."""
    run_candidate = rotating(candidate, input_sets, keep)
    run_baseline = rotating(baseline, input_sets)
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(median_ms(run_candidate))
        theirs.append(median_ms(run_baseline))
    return Timing(statistics.median(ours), statistics.median(theirs))


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def tflops(flops: int, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


_copy_bandwidth: float | None = None


def copy_bandwidth_gbps(nbytes: int = 2**30) -> float:
    """The device's measured copy bandwidth (bytes read + written per second), once per process."""
    global _copy_bandwidth
    if _copy_bandwidth is None:
        src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
        dst = torch.empty_like(src)
        _copy_bandwidth = gbps(2 * nbytes, median_ms(lambda: dst.copy_(src)))
    return _copy_bandwidth


_matmul_rate: dict[torch.dtype, float] = {}


def matmul_op(dtype: torch.dtype) -> str:
    """The PyTorch matmul :func:`matmul_tflops` times in ``dtype``: ``torch._scaled_mm`` for an
    FP8 format (one byte an element; ``torch.matmul`` takes none), else ``torch.matmul``."""
    return "torch._scaled_mm" if dtype.itemsize == 1 else "torch.matmul"


def matmul_tflops(dtype: torch.dtype, n: int = 8192) -> float:
    """The device's measured matmul rate at n×n×n in ``dtype``, once per process and dtype.

    float32 is timed as PyTorch runs it by default (IEEE, no TF32); an FP8 format as
    ``torch._scaled_mm`` with unit scales, to float16 (``torch.matmul`` takes no FP8).
    """
    if dtype not in _matmul_rate:
        a, b = (torch.randn(n, n, device="cuda").to(dtype) for _ in range(2))
        if matmul_op(dtype) == "torch._scaled_mm":
            one = torch.ones((), device="cuda")
            call = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.float16)  # noqa: E731
        else:
            call = lambda: a @ b  # noqa: E731
        _matmul_rate[dtype] = tflops(2 * n**3, median_ms(call))
    return _matmul_rate[dtype]
