"""Where one student's grading time goes: the judge grades a problem set's reference answer
cells as nbgrader's kernel would (correctness, hidden cases, throughput), in a fresh Triton
cache (which, as in grading, starts with the machine's host modules where they are built:
autograder/grading/host_modules.py), and prints each test's seconds and, inside it, the
judge's steps (runner starts, calls, the checks of outputs, the clock's calibration, input
draws and timed batches). The visible cases then run once more in a new runner on the now
warm cache (the difference is compiling), and once more with only the host-side C modules
cached (what building those costs).
Usage: ``python scripts/profile_grading.py ps1_broadcast_add`` from the course root
(``bash scripts/gpu_run.sh profile NAME...`` on the GPU machine)."""
import collections
import functools
import inspect
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS: collections.Counter = collections.Counter()
"""Seconds per step of the test being profiled (a step nested in another counts in both)."""
COUNTS: collections.Counter = collections.Counter()
CALLS: list[tuple[float, str]] = []
"""(seconds, case) of every call to the student's function in the test being profiled."""


def timed(owner, name: str, step: str) -> None:
    """Count the seconds of ``owner.name`` under ``step``."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            STEPS[step] += time.perf_counter() - start
            COUNTS[step] += 1
    if isinstance(owner, type) or inspect.ismodule(owner):
        static = isinstance(inspect.getattr_static(owner, name), staticmethod)
        setattr(owner, name, staticmethod(wrapper) if static else wrapper)
    else:  # an Exercise: a frozen dataclass
        object.__setattr__(owner, name, wrapper)


def instrument() -> None:
    from autograder import correctness
    from autograder.grading import clock, judge, protocol

    timed(protocol, "send", "send a request and its tensors' bytes")
    timed(protocol, "recv", "wait for a reply and read its tensors' bytes")
    timed(judge.Runner, "__init__", "runner start (process; the baseline's whole start)")
    timed(judge.Runner, "begin", "runner begin (the rest of its imports, CUDA context, answer cells)")
    timed(judge.Runner, "stop", "runner stop")
    timed(correctness, "judge_output", "check a case's outputs (reference, compare)")
    timed(clock.Baseline, "_calibrate", "clock: calibrate the baseline (3 clean batches incl.)")
    timed(clock.Baseline, "race", "clock: race (audit, 8 rounds each side)")
    timed(clock.Batch, "__init__", "clock: the judge's reference sums for a batch")
    timed(clock.Baseline, "_prepare", "clock: a runner draws a batch's inputs")
    timed(clock.Baseline, "_timed", "clock: timed batches (incl. sampled compare)")
    timed(clock.Baseline, "_overhead", "clock: overhead probes")
    original_call = judge.Runner.__call__

    def call(self, case, seed, inputs):
        start = time.perf_counter()
        try:
            return original_call(self, case, seed, inputs)
        finally:
            CALLS.append((time.perf_counter() - start, case.label))
    judge.Runner.__call__ = call


def report(title: str, seconds: float, result, timed_run: bool) -> None:
    verdict = f"; {result.throughput.message.splitlines()[0][:110]}" if timed_run and result.throughput else ""
    print(f"{title}: {seconds:.1f} s, {sum(c.passed for c in result.cases)}/{len(result.cases)} passed{verdict}",
          flush=True)
    for step, s in sorted(STEPS.items(), key=lambda kv: -kv[1]):
        print(f"    {s:7.2f} s  {COUNTS[step]:4d}×  {step}", flush=True)
    if CALLS:
        slow = sorted(CALLS, reverse=True)[:4]
        print(f"    {sum(s for s, _ in CALLS):7.2f} s  {len(CALLS):4d}×  calls to the function in its runner; slowest: "
              + ", ".join(f"{label} {s:.2f} s" for s, label in slow), flush=True)
    STEPS.clear(), COUNTS.clear(), CALLS.clear()


def keep_only_host_modules(cache: Path) -> None:
    """Leave in Triton's cache only its host modules (:mod:`autograder.grading.host_modules`):
    the kernels compile again."""
    from autograder.grading.host_modules import keep_host_modules
    with tempfile.TemporaryDirectory() as kept:
        keep_host_modules(cache, Path(kept))
        shutil.rmtree(cache)
        shutil.copytree(kept, cache)


def profile(assignment: str) -> None:
    from autograder import exercises
    from autograder.grading import judge

    exercise = exercises.get(assignment)
    timed(exercise, "make_inputs", "the judge draws inputs")
    work = Path(tempfile.mkdtemp(prefix="profile-"))
    shutil.copy(ROOT / "source" / assignment / f"{assignment}.ipynb", work)
    os.chdir(work)
    total = time.perf_counter()
    for title, cases, timed_run in (("visible cases", "visible", False), ("hidden cases", "hidden", False),
                                    ("visible cases and throughput", "visible", True),
                                    ("visible cases again, warm cache (not part of grading)", "visible", False),
                                    ("visible cases again, only the host-side modules (.so) cached", "visible", False)):
        if title.startswith("visible cases again, warm"):
            print(f"{assignment}: the three graded tests {time.perf_counter() - total:.1f} s", flush=True)
        if title.startswith("visible cases again"):
            judge.stop_kept()
        if title.startswith("visible cases again, only"):
            keep_only_host_modules(judge.compile_cache())
        start = time.perf_counter()
        result = judge.grade_notebook(exercise, cases=cases, measure_throughput=timed_run)
        report(f"{assignment}: {title}", time.perf_counter() - start, result, timed_run)
    judge.stop_kept()
    files = [p for p in judge.compile_cache().rglob("*") if p.is_file()]
    print(f"{assignment}: Triton cache {sum(p.suffix == '.so' for p in files)} .so, "
          f"{sum(p.suffix == '.cubin' for p in files)} .cubin", flush=True)


if __name__ == "__main__":
    os.environ["TRITON_COURSE_ISOLATE"] = "1"  # grade for marks, as under nbgrader
    sys.path.insert(0, str(ROOT))
    instrument()
    profile(sys.argv[1])
