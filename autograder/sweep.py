"""Throughput of a kernel and its PyTorch counterpart over a range of sizes, on a GPU.

At each size both are timed side by side by :func:`autograder.timing.compare` (medians of
alternating rounds, L2 flushed, several input sets rotated), after one call checks that the
kernel's output matches the reference: the speed of a wrong kernel means nothing.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from . import timing
from .device import current
from .language import say

INPUT_SETS = 3
"""Input sets rotated per size; with the L2 flush, no timed call finds its inputs in cache."""


def measure_sweep(fn: Callable, reference: Callable, make_inputs: Callable[[int], tuple],
                  sizes: Sequence[int], bytes_moved: Callable[[int], int] | None = None,
                  labels: tuple[str, str] = ("Triton", "PyTorch"), rounds: int = 3,
                  input_sets: int = INPUT_SETS, flops: Callable[[int], int] | None = None,
                  atol: float | None = None, rtol: float | None = None,
                  check: Callable[[int, tuple, torch.Tensor], str | None] | None = None,
                  progress: Callable[[int, float, float], None] | None = None) -> dict[str, list[float]]:
    """GB/s (or TFLOP/s) of ``fn`` and ``reference`` at each of ``sizes``: ``{labels[0]: [...], labels[1]: [...]}``.

    ``make_inputs(n)`` returns the argument tuple for size ``n`` (on the GPU);
    ``bytes_moved(n)`` the bytes a call must read and write at that size (for x + y in
    float32: 3 * 4 * n), or ``flops(n)`` the floating-point operations it must do (2·n³ for
    an n×n×n matmul) for TFLOP/s; ``atol``/``rtol`` loosen the one correctness check (for
    float16 matmuls); ``check(n, inputs, output)``, if given, replaces that check: it returns why
    the output is wrong, or None (the benchmark judges against float64, as grading does).
    ``progress(n, ours, theirs)``, if given, is called as each size is done
    (a long sweep can report as it goes). Raises RuntimeError without a GPU: the
    interpreter's speed says nothing about a GPU's, so there is nothing honest to return.
    """
    if (bytes_moved is None) == (flops is None):
        raise ValueError("measure_sweep takes exactly one of bytes_moved= and flops=")
    if not torch.cuda.is_available() or current().interpreted:
        raise RuntimeError(say("measure_sweep times kernels on a GPU, and kernels here run in Triton's interpreter "
                               "on the CPU, whose speed says nothing about a GPU's. Run it on a machine with a CUDA "
                               "GPU."))
    ours, theirs = [], []
    for n in sizes:
        sets = [make_inputs(n) for _ in range(input_sets)]
        out = fn(*sets[0])
        if check is None:
            torch.testing.assert_close(out, reference(*sets[0]), atol=atol, rtol=rtol,
                                       msg=lambda m: say("at size {size}, {ours} disagrees with {theirs}: {details}",
                                                         size=n, ours=labels[0], theirs=labels[1], details=m))
        elif (problem := check(n, sets[0], out)) is not None:
            raise AssertionError(say("at size {size}, {ours} is wrong: {problem}", size=n, ours=labels[0],
                                     problem=problem))
        del out
        result = timing.compare(fn, reference, sets, rounds=rounds)
        if flops is None:
            ours.append(timing.gbps(bytes_moved(n), result.candidate_ms))
            theirs.append(timing.gbps(bytes_moved(n), result.baseline_ms))
        else:
            ours.append(timing.tflops(flops(n), result.candidate_ms))
            theirs.append(timing.tflops(flops(n), result.baseline_ms))
        del sets  # before the next size's inputs: 16384×16384 float32 is 1 GiB a set
        if progress is not None:
            progress(n, ours[-1], theirs[-1])
    return {labels[0]: ours, labels[1]: theirs}
