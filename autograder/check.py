"""The two entry points: ``check`` for a student's self-check, ``grade`` for nbgrader cells."""
from __future__ import annotations

import secrets

from . import device, exercises, isolation, throughput
from .correctness import run_cases
from .guards import Seal
from .report import CheckResult, ThroughputResult


class GradingFailure(AssertionError):
    """A failed nbgrader test: shows the verdict only, never the test cell's code."""

    def _render_traceback_(self):  # IPython prints this instead of the traceback
        return [f"GradingFailure: {self}"]


def check(exercise: str, fn, *, seed: int | None = None, cases: str = "visible",
          measure_throughput: bool = True, verbose: bool = True) -> CheckResult:
    """Check ``fn`` against the exercise's reference on fresh random inputs; time it on a GPU.

    Prints a compact summary and returns the :class:`CheckResult`. Pass the printed seed
    back as ``seed=`` to replay exactly the same inputs.
    """
    spec = exercises.get(exercise)
    where = device.current()
    seed = secrets.randbits(31) if seed is None else seed
    result = CheckResult(spec.name, seed, run_cases(spec, fn, spec.cases(cases, where.device), seed, where.device))
    if measure_throughput and spec.throughput is not None:
        if not where.has_gpu:
            result.throughput = throughput.not_measured()
        elif not result.correct:
            result.throughput = ThroughputResult("not measured", "not measured: fix correctness first.")
        else:
            seal = Seal()
            result.throughput = throughput.measure(spec, fn, seed)
            if broken := seal.broken():
                seal.restore()
                result.throughput = ThroughputResult(
                    "failed", f"failed: `{spec.function}` replaced {', '.join(broken[:3])} while it was timed.")
    if verbose:
        print(result.summary())
    return result


def grade(exercise: str, fn, part: str) -> float:
    """An nbgrader test cell: print the verdict and return the points earned.

    ``part`` is ``correctness`` (the cases students also see), ``hidden`` (cases only
    grading runs) or ``throughput`` (GPU timing against PyTorch). nbgrader reads a
    number returned by a cell as partial credit; nothing earned raises
    :class:`GradingFailure`, which nbgrader scores 0.
    """
    spec = exercises.get(exercise)
    if part not in spec.points:
        raise ValueError(f"part={part!r}: use one of {', '.join(spec.points)}")
    points = spec.points[part]
    if part == "throughput":
        if device.current().has_gpu:
            verdict = _checked(spec, fn, cases="visible", measure_throughput=True).throughput
        else:
            verdict = throughput.not_measured()
        print(f"{exercise} throughput: {verdict.message}")
        if verdict.passed:
            return points
        if verdict.status == "not measured" and not device.current().has_gpu \
                and throughput.cpu_policy() == "award":
            print(f"Points awarded without a GPU ({throughput.CPU_POLICY_VAR}=award).")
            return points
        raise GradingFailure(f"{exercise} throughput: {verdict.message}")
    result = _checked(spec, fn, cases="visible" if part == "correctness" else "hidden",
                      measure_throughput=False)
    print(result.summary())
    if not any(c.passed for c in result.cases):
        first = result.cases[0].message.splitlines()[0] if result.cases else "no cases"
        raise GradingFailure(f"{exercise} {part}: no case passed; the first: {first}")
    return round(points * result.fraction_passed, 2)


def _checked(spec, fn, *, cases: str, measure_throughput: bool) -> CheckResult:
    """The check, in a clean process when grading (see :mod:`autograder.isolation`)."""
    if isolation.enabled():
        return isolation.check_in_subprocess(spec.name, spec.function, cases=cases,
                                             measure_throughput=measure_throughput)
    return check(spec, fn, cases=cases, measure_throughput=measure_throughput, verbose=False)
