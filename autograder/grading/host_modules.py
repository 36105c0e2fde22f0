"""The host-side modules Triton compiles with the machine's C compiler, built once per machine
and given to every student's compile cache.

Triton 3.6 builds two kinds of small C extension on a GPU: its driver's ``cuda_utils``, and a
launcher for each kernel signature (argument types, and which integers are specialised to
1). They hold none of a kernel's code, only Triton's own C for a signature; building them was
about 7 s of a PS1 student's 8.5 s of compiling on an H100 (results/gpu/NOTES.md, 2026-12-06
(e)). So each grading machine builds them once, by running the reference solution on every
case in a process of its own (course code only), and keeps only those modules in
:func:`folder`; :func:`seed` copies them into each student's fresh compile cache
(:func:`.judge.compile_cache`). A student whose kernel keeps the notebook's signature then
compiles only their kernels. Each copy is the student's own, and their runner cannot write to
:func:`folder` (it is outside what :mod:`.confine` lets it write), so nothing one student's
code does reaches another's cache. Triton's keys name the C source and platform, so modules of
another Triton or Python are never taken for these.

``python -m autograder.grading.host_modules ASSIGNMENT`` builds them (grading workers do it
before their first student; with plain ``nbgrader autograde``, run it once first).
"""
from __future__ import annotations

import fcntl
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BUILD_TIMEOUT_S = 900
"""The reference on every case, autotuning included (PS4 autotunes each shape)."""


def folder() -> Path:
    """Where this machine keeps them: the instructor's cache, never a student's."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "triton-course" / "host-modules"


def keep_host_modules(cache: Path, into: Path) -> None:
    """Copy into ``into`` the entries of the Triton cache ``cache`` that hold a compiled C
    module (``.so``), and nothing of any kernel."""
    for entry in cache.iterdir():
        if entry.is_dir() and any(p.suffix == ".so" for p in entry.iterdir()):
            shutil.copytree(entry, into / entry.name, dirs_exist_ok=True)


def seed(cache: Path) -> None:
    """Put a copy of this machine's host modules in the fresh Triton cache ``cache``."""
    if folder().is_dir():
        keep_host_modules(folder(), cache)


def ensure(assignment: str) -> None:
    """Build the modules ``assignment``'s reference needs, once per machine and Triton (the
    first worker to ask builds them while the others wait); nothing without a GPU. A build
    that fails is reported and not retried: grading then compiles them per student, as before."""
    import torch
    import triton
    if not torch.cuda.is_available():
        return
    marker = folder() / f"built-{assignment}-triton-{triton.__version__}"
    if marker.exists():
        return
    try:
        folder().mkdir(parents=True, exist_ok=True)
        with open(folder() / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not marker.exists():
                marker.write_text(_build(assignment))
    except OSError as error:  # a cache folder it cannot write
        _report(assignment, error)


def _build(assignment: str) -> str:
    """Build them into :func:`folder`; what the marker says (a failed build is not retried)."""
    with tempfile.TemporaryDirectory(prefix="host-modules-") as cache:
        try:
            done = subprocess.run([sys.executable, "-m", __name__, assignment], capture_output=True, text=True,
                                  env=os.environ | {"TRITON_CACHE_DIR": cache}, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired as error:
            return _report(assignment, error)
        if done.returncode:
            return _report(assignment, (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1])
        keep_host_modules(Path(cache), folder())
    return "built\n"


def _report(assignment: str, why) -> str:
    print(f"Triton's host modules for {assignment} could not be built ({why}); each student's grading "
          "builds its own.", file=sys.stderr, flush=True)
    return f"failed: {why}\n"


def main(argv: list[str]) -> int:
    """Run the reference solution on every case of the assignment ``argv[0]`` on the GPU."""
    import torch

    from .. import exercises
    exercise = exercises.get(argv[0])
    reference = getattr(importlib.import_module(exercise.solution), exercise.function)
    for which in ("visible", "hidden"):
        for i, case in enumerate(exercise.cases(which, "cuda")):
            exercise.call(reference, exercise.make_inputs(case, torch.Generator("cuda").manual_seed(i), "cuda"))
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
