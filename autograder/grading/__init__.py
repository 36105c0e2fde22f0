"""Grading for marks: a judge that never runs the code it grades.

The threat model, in one place (the instructor guide says the same in prose):

- **The student can read all of this code** and write any Python in their answer cells.
- **Two processes.** The *runner* (:mod:`.runner`) runs the answer cells and serves calls:
  it receives inputs, calls the student's function, hands back the outputs. The *judge*
  (:mod:`.judge`) never executes student code: it makes the inputs, computes the reference,
  compares, times, decides the points and prints what nbgrader records. Under ``nbgrader
  autograde`` the judge is nbgrader's own kernel, which runs only the instructor's cells
  (:mod:`.autograde`). They talk in JSON headers and raw tensor bytes (:mod:`.protocol`),
  never pickles or rendered text.
- **Enforced from outside, by the judge**: the verdict and the points (only the bytes of the
  outputs are taken from the runner, checked for dtype, shape and size before use); the
  inputs (made by the judge, fresh for every case and every timed call); the time (the
  judge's clock around batches whose outputs it reads itself from device memory, with the
  runner's processes stopped while it does, :mod:`.clock`); the time limit of a graded test
  and of each call (the runner is killed); crashes, hangs and exhausted memory (they fail the
  test with a reason, and cost no one else anything).
- **Enforced inside the runner, best effort**: the course's rules on *how* the output was
  made: a Triton kernel computed it; no PyTorch op beyond data movement; no work handed to
  another thread; no data taken to NumPy or the host; no store outside the tensors (the
  interpreter's bounds check, guard zones on a GPU); no reused output buffer. These run in the
  runner's own process, so a determined student can switch them off; what they guard is the
  spirit of the exercise, not the verdict on the output's values or speed.
- **Around the runner** (:mod:`.sandbox`, :mod:`.confine`): a scratch folder, a scrubbed
  environment, a memory cap, Landlock (no reading the course, the gradebook or other
  submissions; no terminal or device but the GPU's; no signals outside itself), no capability
  and no new socket (seccomp), optionally an unprivileged user; whatever it leaves running, in
  any session or folder, is killed when it ends.

``grade`` (in :mod:`autograder.check`) is the one entry point the notebooks call; the
student's own ``check`` stays in their process and is a self-check, not a verdict.

The verdicts and reasons are in the grading run's language: ``TRITON_COURSE_LANG`` in the
environment ``nbgrader autograde`` runs in (a class released in Chinese is graded with
``TRITON_COURSE_LANG=zh``), which the runner inherits (:func:`.sandbox.clean_environment` keeps
``TRITON_*``). Nothing here calls ``set_language``, and the cell of a Chinese release that does
is neither locked nor an answer cell, so it runs neither in nbgrader's kernel nor in a runner.
The sentences are in :mod:`autograder.language`'s catalogue, ``autograder/messages/grading.yaml``.
"""
from __future__ import annotations

from .. import settings
from ..language import say
from ..report import CheckResult
from ..spec import Exercise
from .judge import grade_notebook, judged

__all__ = ["grade_notebook", "judged", "needs_a_gpu", "points", "why_nothing"]


def needs_a_gpu(result: CheckResult) -> bool:
    """Whether the throughput went unmeasured for want of a GPU (not for wrong answers)."""
    from ..throughput import not_measured
    speed = result.throughput  # in the language in use, as not_measured() words it in this process
    return speed is not None and speed.status == "not measured" and (
        "needs a GPU" in speed.message or speed.message.startswith(not_measured().message))


def points(exercise: Exercise, part: str, result: CheckResult) -> float:
    """What a verdict earns: throughput all or nothing (``award`` without a GPU only for
    correct code); the other parts shared out by the fraction of cases passed."""
    full = exercise.points[part]
    if part == "throughput":
        if result.throughput is not None and result.throughput.passed:
            return full
        awarded = needs_a_gpu(result) and result.correct and settings.CPU_THROUGHPUT.get() == "award"
        return full if awarded else 0.0
    return round(full * result.fraction_passed, 2)


def why_nothing(result: CheckResult, part: str) -> str:
    """One sentence on why a verdict earned no points."""
    if part == "throughput":
        return result.throughput.message if result.throughput else say("not measured.")
    if not result.cases:
        return say("no cases were run.")
    failed = next(c for c in result.cases if not c.passed)
    first = (failed.brief if result.hidden else failed.message).splitlines()[0]
    if result.edges_alone:
        return say("only edge cases passed, and they count only beside another; the first failure: {message}",
                   message=first)
    return say("no case passed; the first: {message}", message=first)
