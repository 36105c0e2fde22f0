"""The two entry points: ``check`` for a student's self-check, ``grade`` for nbgrader cells."""
from __future__ import annotations

import math
import os
import secrets

from . import device, exercises, throughput
from .correctness import InProcess, run_cases
from .language import say
from .printed import first_lines
from .report import CheckResult, ThroughputResult


class GradingFailure(AssertionError):
    """A failed nbgrader test: shows the verdict only, never the test cell's code."""

    def _render_traceback_(self):  # IPython prints this instead of the traceback
        return [f"GradingFailure: {self}"]


def check(exercise: str, fn, *, seed: int | None = None, cases: str = "visible",
          measure_throughput: bool = True, verbose: bool = True) -> CheckResult:
    """Check ``fn`` against the exercise's reference on fresh random inputs; time it on a GPU.

    Prints a compact summary and returns the :class:`CheckResult`. Pass the printed seed
    back as ``seed=`` to replay exactly the same inputs. This runs ``fn`` in this process:
    it is a self-check, not a verdict (grading runs it elsewhere, :mod:`autograder.grading`).
    """
    spec = exercises.get(exercise)
    where = device.current()
    seed = secrets.randbits(31) if seed is None else seed
    call = InProcess(spec, fn, where.device, notice=verbose)
    with first_lines():
        result = CheckResult(spec.name, seed, run_cases(spec, call, spec.cases(cases, where.device), seed, where.device))
        if measure_throughput and spec.throughput is not None:
            if not where.has_gpu:
                largest = max(spec.cases(cases, where.device), key=lambda case: math.prod(case.shape))
                result.throughput = throughput.not_measured(
                    throughput.traffic_note(spec, fn, seed, largest) if result.correct else "")
            elif not result.correct:
                result.throughput = ThroughputResult("not measured", say("not measured: fix correctness first."))
            else:
                result.throughput = throughput.measure(spec, fn, seed)
    if verbose:
        print(result.summary())
        if call.stray is not None:
            from .memory_trace import show_out_of_bounds
            show_out_of_bounds(call.stray)
    return result


def grade(exercise: str, fn, part: str) -> float:
    """An nbgrader test cell: print the verdict and return the points earned.

    ``part`` is ``correctness`` (the cases students also see), ``hidden`` (cases only
    grading runs) or ``throughput`` (GPU timing against PyTorch). Under ``nbgrader
    autograde`` the judge grades the notebook's answer cells in a runner process and ``fn``
    is not used (:mod:`autograder.grading`); anywhere else ``fn`` is checked here.
    nbgrader reads a number returned by a cell as partial credit; nothing earned raises
    :class:`GradingFailure`, which nbgrader scores 0, except the throughput on a machine
    without a GPU: it scores what ``TRITON_COURSE_CPU_THROUGHPUT`` says (0 by default) without
    an error, and under nbgrader's Validate it returns nothing, so a correct notebook validates.
    """
    from . import grading
    from .grading.placeholder import GradedElsewhere

    spec = exercises.get(exercise)
    if os.environ.get("NBGRADER_EXECUTION") == "autograde" and not isinstance(fn, GradedElsewhere):
        # the course's nbgrader_config.py was not loaded: the student's cells ran in this kernel
        raise GradingFailure(say("{exercise} {part}: not graded. nbgrader ran without the course's settings "
                                 "(nbgrader_config.py), so the student's cells ran beside the tests; run nbgrader "
                                 "from the course root, where nbgrader_config.py is.", exercise=spec.name, part=part))
    if part not in spec.points:
        raise ValueError(f"part={part!r}: use one of {', '.join(spec.points)}")
    cases = "hidden" if part == "hidden" else "visible"
    if grading.judged():
        result = grading.grade_notebook(spec, cases=cases, measure_throughput=part == "throughput")
    else:
        result = check(spec, fn, cases=cases, measure_throughput=part == "throughput", verbose=False)
    result.hidden = part == "hidden"  # its cases are counted, never shown: the feedback reaches the student
    points, earned = spec.points[part], grading.points(spec, part, result)
    if part == "throughput":
        print(say("{exercise} throughput: {message}", exercise=spec.name, message=result.throughput.message))
    else:
        print(result.summary())
    if part == "throughput" and grading.needs_a_gpu(result):
        # Nothing can be timed here: say so and score by the instructor's policy, never an error.
        if os.environ.get("NBGRADER_EXECUTION") == "validate":
            print(say("Timed on a GPU when your work is graded; validating without one checks the other cells."))
            return None
        awarded = say(" (awarded without a GPU: {setting}=award)", setting=throughput.CPU_POLICY_VAR) if earned else ""
        print(say("{earned:g} / {points:g} points", earned=earned, points=points) + awarded)
        return earned
    if earned > 0:
        print(say("{earned:g} / {points:g} points", earned=earned, points=points))
        return earned
    raise GradingFailure(say("{exercise} {part}: 0 / {points:g} points. {why}", exercise=spec.name, part=part,
                             points=points, why=grading.why_nothing(result, part)))
