"""Throughput by the judge's clock: batches of calls timed from outside the runner.

One batch: the runner makes ``k`` input sets from seeds the judge picks (untimed); then the
judge starts its clock, asks for the batch, and the runner calls the function ``k`` times
back to back and hands over the outputs' device memory (:mod:`.ipc`). The judge stops the
runner's processes (SIGSTOP), reads every output with its own kernel (a weighted sum with
weights from a key only the judge knows) and stops its clock when those reads are done. So
the time counts all the work the runner's kernels did for the outputs, on any stream, and
ends with outputs the judge has read: an answer before the work is done reads wrong sums, a
result cached from earlier inputs too (every batch has new inputs), and the runner's own
timers decide nothing. One output per batch, chosen by the judge, is also compared element
by element with the reference.

A failure of the student's runner is told in the judge's words only (:func:`.correctness.brief`):
the runner timed here is the one that ran the hidden cases, and its own text, or its output's
values, could carry them into the feedback.

The PyTorch baseline is served the same way by a second runner that never runs student code
(``--reference``), alternating with the student's batches; the same round trip and reads
with no calls, timed on that runner, are subtracted from both. The baseline is also timed
before the student's runner exists, and the faster of the two medians is used, so a runner
that leaves work on the GPU to slow the baseline gains nothing.
"""
from __future__ import annotations

import functools
import math
import secrets
import statistics
import time

import torch
import triton
import triton.language as tl

from .. import timing
from ..correctness import brief, compare_outputs
from ..language import say
from ..report import ThroughputResult
from ..spec import Exercise
from . import ipc

ROUNDS = 7
"""Student batches timed, each beside a baseline batch; the verdict is on their medians."""
CLEAN_ROUNDS = 3
"""Baseline batches timed before the student's runner starts."""
BATCH_S = 0.02
"""A batch's length to aim for: the round trip (about 10 µs) and the judge's launches are then
under 2% of it even before they are subtracted."""
MEMORY_FRACTION = 0.12
"""Of the GPU's memory, the most one runner's batch (inputs and outputs) may hold."""
MAX_CALLS = 256
CHECKSUM_BLOCK = 4096


@triton.jit
def _weighted_sums(x_ptr, out_ptr, n, key, BLOCK: tl.constexpr):
    """Per block: sum(w * x) and sum(w * |x|) in float64, w in [0.5, 1.5) hashed from the
    element's index and ``key``."""
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float64)
    h = (offs.to(tl.uint32) ^ key) * 0x9E3779B1
    h = (h ^ (h >> 15)) * 0x85EBCA77
    h = h ^ (h >> 13)
    w = 0.5 + (h & 0xFFFFFF).to(tl.float64) * (1.0 / 16777216.0)  # not / 2**24: a float64 division, 3.4× slower
    tl.store(out_ptr + 2 * pid, tl.sum(x * w))
    tl.store(out_ptr + 2 * pid + 1, tl.sum(tl.abs(x) * w))


def _launch_sums(t: torch.Tensor, key: int) -> torch.Tensor:
    n = t.numel()
    parts = torch.empty((triton.cdiv(n, CHECKSUM_BLOCK), 2), dtype=torch.float64, device=t.device)
    _weighted_sums[(parts.shape[0],)](t.reshape(-1), parts, n, key, BLOCK=CHECKSUM_BLOCK)
    return parts


def _totals(parts: torch.Tensor) -> tuple[float, float]:
    total = parts.sum(dim=0)
    return float(total[0]), float(total[1])


class Batch:
    """The judge's knowledge of one batch: its seeds, and for each input set the weighted sums of
    the reference's outputs (:meth:`~autograder.spec.Exercise.call`) under this batch's key; one
    call's reference outputs kept whole."""

    def __init__(self, exercise: Exercise, calls: int):
        self.exercise, self.case = exercise, exercise.throughput.case
        self.seeds = [secrets.randbits(62) for _ in range(calls)]
        self.key = secrets.randbits(31)
        self.sampled = secrets.randbelow(calls)
        self.sums, self.kept = [], None
        for i, seed in enumerate(self.seeds):
            references = self.exercise.call(self.exercise.reference, self.make(seed))
            self.sums.append([_totals(_launch_sums(r.contiguous(), self.key)) for r in references])
            self.layouts = [(list(r.shape), r.dtype) for r in references]  # in the order of ``outputs``
            if i == self.sampled:
                self.kept = references

    def make(self, seed: int) -> tuple:
        return self.exercise.make_inputs(self.case, torch.Generator("cuda").manual_seed(seed), "cuda")

    def check(self, sums: list[list[tuple[float, float]]], sampled: list[torch.Tensor]) -> str | None:
        """Why the batch's outputs are not the reference's, or None. ``sums``: each call's weighted
        sums, one per output; ``sampled``: the sampled call's outputs."""
        outputs = self.exercise.outputs
        for i, (got_sums, want_sums) in enumerate(zip(sums, self.sums)):
            for (name, tolerances), (shape, _), (got, _), (want, want_abs) in zip(
                    outputs.items(), self.layouts, got_sums, want_sums):
                atol, rtol = tolerances[self.case.dtype]
                allowed = 2 * (1.5 * atol * math.prod(shape) + rtol * want_abs) + 1e-9 * want_abs
                if not abs(got - want) <= allowed:  # NaN fails too
                    if len(outputs) > 1:
                        return say("the outputs of the timed runs are wrong: in call {call} of a batch of {calls}, "
                                   "a weighted sum of your {output} is {got:.6g} where the reference's is {want:.6g}. "
                                   "Outputs are read as soon as your function returns: finish all their work (on "
                                   "every stream) before returning, and compute every call from its own inputs.",
                                   call=i + 1, calls=len(sums), output=name, got=got, want=want)
                    return say("the outputs of the timed runs are wrong: in call {call} of a batch of {calls}, "
                               "a weighted sum of your output is {got:.6g} where the reference's is {want:.6g}. "
                               "Outputs are read as soon as your function returns: finish all their work (on "
                               "every stream) before returning, and compute every call from its own inputs.",
                               call=i + 1, calls=len(sums), got=got, want=want)
        if compare_outputs(self.exercise, self.case.dtype, sampled, self.kept):
            return say("the outputs of the timed runs are wrong: {why}", why=brief("values", self.exercise.function))
        return None


class Baseline:
    """The PyTorch baseline's runner, timed alone on creation; :meth:`race` times the student's
    runner against it."""

    def __init__(self, exercise: Exercise, reference):
        self.exercise, self.reference = exercise, reference
        self.problem = reference.error or reference.ended
        if self.problem:
            return
        try:
            self._calibrate()
        except Exception as error:  # the judge's own machinery: reported by race(), never raised
            self.problem = f"{type(error).__name__}: {error}"

    def _calibrate(self) -> None:
        """Pick the calls per batch, then time the baseline alone."""
        exercise, reference = self.exercise, self.reference
        probe = Batch(exercise, 1)
        self._prepare(reference, probe)
        self._timed(reference, probe, trusted=True)  # compile and warm up
        one, _ = self._timed(reference, probe, trusted=True)
        per_call = one - self._overhead()
        self.sample = probe.make(probe.seeds[0]), probe.kept[0]  # one call's inputs and output, for the rates
        nbytes = sum(t.untyped_storage().nbytes() for t in (*self.sample[0], *probe.kept) if isinstance(t, torch.Tensor))
        fits = int(MEMORY_FRACTION * torch.cuda.get_device_properties(0).total_memory // nbytes)
        self.calls = max(1, min(MAX_CALLS, fits, math.ceil(BATCH_S / max(per_call, 1e-6))))
        self.clean = [self._round(reference) for _ in range(CLEAN_ROUNDS)]

    def race(self, runner) -> ThroughputResult:
        """Time the student's runner against the baseline, round by round."""
        if self.problem:
            return ThroughputResult("failed", say("not measured: the PyTorch baseline could not be timed ({problem}); "
                                                  "tell your instructor.", problem=self.problem))
        warm_up = Batch(self.exercise, self.calls)  # untimed: compiling and autotuning end here
        header, _ = runner.request({"op": "prepare", "seeds": warm_up.seeds})
        if not header.get("problem"):
            header, _ = runner.request({"op": "run"})
        if header.get("problem"):
            return self._failed(runner, header)
        ours, theirs = [], []
        for _ in range(ROUNDS + 1):  # the first timed batch warms up too
            theirs.append(self._round(self.reference))
            batch = Batch(self.exercise, self.calls)
            header, _ = runner.request({"op": "prepare", "seeds": batch.seeds})
            if header.get("problem"):
                return self._failed(runner, header)
            seconds, problem = self._timed(runner, batch, trusted=False)
            if problem:
                return ThroughputResult("failed", say("failed: {problem}", problem=problem))
            ours.append(seconds - self._overhead())
        student = statistics.median(ours[1:]) / self.calls
        baseline = min(statistics.median(theirs[1:]), statistics.median(self.clean)) / self.calls
        return self._verdict(student, baseline)

    def _failed(self, runner, header: dict) -> ThroughputResult:
        return ThroughputResult("failed", say("failed: {problem}", problem=self._their_problem(runner, header)))

    def _their_problem(self, runner, header: dict) -> str:
        """Why the student's runner failed a request, in the judge's words."""
        why = runner.ended_brief if runner.ended else brief(str(header.get("kind")), self.exercise.function)
        return say("in the timed runs on {label}, {why} Call `{function}` on inputs of that shape to see the whole "
                   "error.", label=self.exercise.throughput.case.label, why=why, function=self.exercise.function)

    def _round(self, side) -> float:
        batch = Batch(self.exercise, self.calls)
        self._prepare(side, batch)
        seconds, problem = self._timed(side, batch, trusted=True)
        if problem:
            raise RuntimeError(say("the PyTorch baseline failed its own check: {problem}", problem=problem))
        return seconds - self._overhead()

    def _overhead(self) -> float:
        """The round trip and the reads of a batch's outputs, without the calls: on the
        baseline's runner, which has just answered the batch whose outputs it hands over again."""
        start = time.perf_counter()
        header, _ = self.reference.request({"op": "run", "again": True})
        with ipc.mapped([o["handle"] for o in header["outputs"]]) as tensor:
            for o in header["outputs"]:
                _launch_sums(tensor(o["handle"], o["offset"], getattr(torch, o["dtype"]), o["size"]), 0)
            torch.cuda.synchronize()
            return time.perf_counter() - start

    @staticmethod
    def _prepare(side, batch: Batch) -> None:
        header, _ = side.request({"op": "prepare", "seeds": batch.seeds})
        if header.get("problem"):
            raise RuntimeError(header["problem"])

    def _timed(self, side, batch: Batch, trusted: bool) -> tuple[float, str | None]:
        """One batch by the judge's clock: (seconds, why its outputs are wrong or None)."""
        start = time.perf_counter()
        header, _ = side.request({"op": "run"})
        if not trusted:
            side.pause()
        try:
            if header.get("problem"):
                return 0.0, str(header["problem"]) if trusted else self._their_problem(side, header)
            outputs, per_call = header.get("outputs"), len(batch.layouts)
            layouts = batch.layouts * len(batch.seeds)  # call by call, each call's outputs in order
            if not isinstance(outputs, list) or len(outputs) != len(layouts) or not all(
                    ipc.is_export(o) and o["dtype"] == str(dtype).removeprefix("torch.") and o["size"] == shape
                    for o, (shape, dtype) in zip(outputs, layouts)):
                shapes = functools.reduce(lambda earlier, shape: say("{earlier} and {shape}", earlier=earlier,
                                                                     shape=shape),
                                          [str(shape) for shape, _ in batch.layouts])
                return 0.0, say("`{function}` did not hand over {calls} outputs of shape {shapes}.",
                                function=self.exercise.function, calls=len(batch.seeds), shapes=shapes)
            try:
                with ipc.mapped([o["handle"] for o in outputs]) as tensor:
                    views = [tensor(o["handle"], o["offset"], dtype, o["size"]) for o, (_, dtype) in zip(outputs, layouts)]
                    parts = [_launch_sums(v, batch.key) for v in views]
                    torch.cuda.synchronize()
                    seconds = time.perf_counter() - start
                    sampled = [v.clone() for v in views[batch.sampled * per_call:(batch.sampled + 1) * per_call]]
                    torch.cuda.synchronize()
            except ipc.IpcError as error:
                return 0.0, say("its outputs could not be read ({error}).", error=error)
            sums = [_totals(p) for p in parts]
            return seconds, batch.check([sums[i:i + per_call] for i in range(0, len(sums), per_call)], sampled)
        finally:
            if not trusted:
                side.resume()

    def _verdict(self, student_s: float, baseline_s: float) -> ThroughputResult:
        from ..throughput import SUSPICIOUS_PEAK_FRACTION, rates
        spec = self.exercise.throughput
        ratio = baseline_s / student_s if student_s > 0 else math.inf
        ours, theirs, ceiling, ceiling_name = rates(spec, *self.sample, timing.Timing(student_s * 1e3, baseline_s * 1e3))
        # PyTorch's own rate in this run is a rate the device reached too: on the H200 the
        # judge's clock saw torch.matmul at 4096³ reach 117% of do_bench's 8192³ figure.
        if theirs > ceiling:
            ceiling, ceiling_name = theirs, say("PyTorch's rate here (above {ceiling})", ceiling=ceiling_name)
        peak = ours / ceiling
        figures = (ratio, spec.threshold, ours, theirs, peak, spec.unit)
        if peak > SUSPICIOUS_PEAK_FRACTION or student_s <= 0:
            return ThroughputResult("failed", say("{rate:,.0f} {unit} is {peak:.0%} of {ceiling}, which no kernel can "
                                                  "beat: the timing was fooled.", rate=ours, unit=spec.unit, peak=peak,
                                                  ceiling=ceiling_name), *figures)
        verdict = "passed" if ratio >= spec.threshold else "failed"
        message = say("{ratio:.2f}× {baseline} (needs ≥ {threshold:g}×) on {label}: {ours:,.0f} {unit} against "
                      "{theirs:,.0f} {unit}, {peak:.0%} of {ceiling}; timed by the judge, {calls} calls a batch, "
                      "median of {rounds} batches", ratio=ratio, baseline=spec.baseline, threshold=spec.threshold,
                      label=spec.case.label, ours=ours, theirs=theirs, unit=spec.unit, peak=peak,
                      ceiling=ceiling_name, calls=self.calls, rounds=ROUNDS)
        return ThroughputResult(verdict, message, *figures)
