"""Where one student's grading time goes: the judge grades a problem set's reference answer
cells as nbgrader's kernel would (correctness, hidden cases, throughput), in a fresh Triton
cache, and prints each step's seconds. Usage: ``python scripts/profile_grading.py ps1_broadcast_add``
from the course root (``bash scripts/gpu_run.sh profile NAME...`` on the GPU machine)."""
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def profile(assignment: str) -> None:
    from autograder import exercises
    from autograder.grading import judge

    exercise = exercises.get(assignment)
    work = Path(tempfile.mkdtemp(prefix="profile-"))
    shutil.copy(ROOT / "source" / assignment / f"{assignment}.ipynb", work)
    os.chdir(work)
    start = time.perf_counter()
    judge.Runner(exercise, None, time.monotonic() + 300, 300).stop()
    print(f"{assignment}: a runner's start and stop {time.perf_counter() - start:.1f} s", flush=True)
    for cases, timed in (("visible", False), ("hidden", False), ("visible", True)):
        start = time.perf_counter()
        result = judge.grade_notebook(exercise, cases=cases, measure_throughput=timed)
        verdict = f"; {result.throughput.message.splitlines()[0][:100]}" if timed and result.throughput else ""
        print(f"{assignment}: {cases} cases{' and throughput' if timed else ''} "
              f"{time.perf_counter() - start:.1f} s, {sum(c.passed for c in result.cases)}/{len(result.cases)} "
              f"passed{verdict}", flush=True)
    judge.stop_kept()
    files = [p for p in judge.compile_cache().rglob("*") if p.is_file()]
    print(f"{assignment}: Triton cache {sum(p.suffix == '.so' for p in files)} .so, "
          f"{sum(p.suffix == '.cubin' for p in files)} .cubin", flush=True)


if __name__ == "__main__":
    os.environ["TRITON_COURSE_ISOLATE"] = "1"  # grade for marks, as under nbgrader
    sys.path.insert(0, str(ROOT))
    profile(sys.argv[1])
