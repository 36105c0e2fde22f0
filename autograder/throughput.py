"""The throughput verdict for an exercise: GPU only, never a silent pass on the CPU."""
from __future__ import annotations

import torch

from . import settings, timing
from .correctness import compare_outputs
from .language import say
from .report import ThroughputResult
from .spec import Exercise, Throughput

CPU_POLICY_VAR = settings.CPU_THROUGHPUT.name
INPUT_SETS = 3
SUSPICIOUS_PEAK_FRACTION = 1.25
"""A result this far above the device's measured ceiling is implausible. Not 1.0: a kernel that
mostly reads (vector add: 2 reads per write) can beat a copy's 1:1 mix by a few percent."""


def not_measured(traffic: str = "") -> ThroughputResult:
    return ThroughputResult("not measured", say("not measured: needs a GPU (kernels ran in Triton's interpreter, "
                                                "whose speed says nothing about a GPU's).") + traffic)


def traffic_note(exercise: Exercise, fn, seed: int, case) -> str:
    """For a memory-bound exercise, in the interpreter: the bytes ``fn``'s kernels moved on
    ``case`` against the fewest the operation must move, and what that ratio would cost on a
    GPU (where such a kernel's time is its bytes over the memory bandwidth). None for an
    exercise with gradients: their sums across programs go through a buffer that is small next
    to the rows at a GPU's sizes but not at the interpreter's, so the count would blame a good
    kernel."""
    from .memory_trace import count_bytes_moved, format_bytes

    if exercise.throughput is None or exercise.throughput.bytes_moved is None or exercise.gradients:
        return ""
    inputs = exercise.make_inputs(case, torch.Generator().manual_seed(seed), "cpu")
    try:
        outs, moved = count_bytes_moved(exercise.call, fn, inputs)
    except Exception:  # it passed its cases; a failure here is not this note's to report
        return ""
    fewest = exercise.throughput.bytes_moved(inputs, outs[0])
    if not moved or not fewest:
        return ""
    ratio = moved / fewest
    figures = dict(label=case.label, moved=format_bytes(moved), fewest=format_bytes(fewest), ratio=ratio)
    if ratio < 1.05:
        return say(" On {label}, your kernels moved {moved} where the operation needs {fewest}: {ratio:.2f}x, "
                   "each byte once, as a fast kernel does.", **figures)
    return say(" On {label}, your kernels moved {moved} where the operation needs {fewest}: {ratio:.2f}x; where the "
               "extra bytes come from GPU memory, it runs at {share:.0%} of the speed of a kernel that moves each "
               "byte once (re-reads the cache still holds cost less).",
               share=1 / ratio, **figures)


def measure(exercise: Exercise, fn, seed: int) -> ThroughputResult:
    """Time ``fn`` against the exercise's PyTorch baseline on the GPU (each a whole
    :meth:`~autograder.spec.Exercise.call`: the forward and the backward, for an exercise with gradients)."""
    spec = exercise.throughput
    if not torch.cuda.is_available():
        return not_measured()
    input_sets = [exercise.make_inputs(spec.case, torch.Generator("cuda").manual_seed(seed + k), "cuda")
                  for k in range(INPUT_SETS)]
    outputs: list = [None] * INPUT_SETS
    result = timing.compare(lambda *inputs: exercise.call(fn, inputs),
                            lambda *inputs: exercise.call(exercise.reference, inputs), input_sets, keep=outputs)
    ours, theirs, ceiling, ceiling_name = rates(spec, input_sets[0], outputs[0][0], result)
    peak = ours / ceiling
    figures = (result.ratio, spec.threshold, ours, theirs, peak, spec.unit)
    for inputs, outs in zip(input_sets, outputs):  # the timed outputs must be right too
        problem = compare_outputs(exercise, spec.case.dtype, outs, exercise.call(exercise.reference, inputs))
        if problem:
            return ThroughputResult("failed", say("the outputs of the timed runs are wrong:\n{problem}",
                                                  problem=problem), *figures)
    if peak > SUSPICIOUS_PEAK_FRACTION:
        return ThroughputResult("failed", say("{rate:,.0f} {unit} is {peak:.0%} of {ceiling}, which no kernel can "
                                              "beat: the timing was fooled.", rate=ours, unit=spec.unit, peak=peak,
                                              ceiling=ceiling_name), *figures)
    verdict = "passed" if result.ratio >= spec.threshold else "failed"
    message = say("{ratio:.2f}× {baseline} (needs ≥ {threshold:g}×) on {label}: {ours:,.0f} {unit} against "
                  "{theirs:,.0f} {unit}, {peak:.0%} of {ceiling}", ratio=result.ratio, baseline=spec.baseline,
                  threshold=spec.threshold, label=spec.case.label, ours=ours, theirs=theirs, unit=spec.unit,
                  peak=peak, ceiling=ceiling_name)
    return ThroughputResult(verdict, message, *figures)


def rates(spec: Throughput, inputs: tuple, output, timing_: timing.Timing) -> tuple[float, float, float, str]:
    """(student rate, PyTorch rate, the device's ceiling, its name in the language in use) in ``spec.unit``."""
    if spec.flops is None:
        nbytes = spec.bytes_moved(inputs, output)
        return (timing.gbps(nbytes, timing_.candidate_ms), timing.gbps(nbytes, timing_.baseline_ms),
                timing.copy_bandwidth_gbps(), say("the copy bandwidth"))
    flops = spec.flops(inputs, output)
    return (timing.tflops(flops, timing_.candidate_ms), timing.tflops(flops, timing_.baseline_ms),
            timing.matmul_tflops(spec.case.dtype), say("the measured matmul rate"))
