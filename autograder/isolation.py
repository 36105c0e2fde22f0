"""Grading in a clean process: only the student's answer cells run there, then the checker.

A notebook's own kernel cannot be trusted with a verdict: a cell that redefines
``torch.isclose``, the timer or the checker itself would change it. So under ``nbgrader
autograde`` (where the kernel runs only the instructor's cells, see :mod:`autograder.autograde`)
``grade`` hands the work to a fresh Python process that runs the notebook's ``setup`` cell and
its answer cells (nbgrader ``solution`` cells) and nothing else, puts back any PyTorch or Triton
attribute they replaced, imports the checker anew, and sends back the verdict as JSON.

That process starts in an empty scratch folder with a scrubbed environment, caps its own
memory, cannot import the reference solutions and is killed at a time limit
(:mod:`autograder.sandbox`); where the kernel has Landlock it also confines itself to reading
the system's and Python's files and writing its scratch folder (:mod:`autograder.confine`). A crash, a hang or exhausted memory costs only that test, and
the verdict says which it was; whatever the code prints is dropped, past a few kilobytes.

``python -m autograder.isolation ANSWER.py EXERCISE FUNCTION ...`` is that process's entry point.
"""
from __future__ import annotations

import argparse
import atexit
import functools
import json
import os
import secrets
import shutil
import sys
import tempfile
import types
from pathlib import Path

from . import confine, sandbox
from .report import CaseResult, CheckResult, from_json, to_json

ISOLATE_VAR = "TRITON_COURSE_ISOLATE"
"""``1`` grades in a clean process outside nbgrader too; nbgrader's autograde always does."""
TIMEOUT_VAR = "TRITON_COURSE_GRADING_TIMEOUT_S"
"""Seconds one graded test may take in its clean process (default :data:`PROCESS_TIMEOUT_S`)."""
PROCESS_TIMEOUT_S = 540
"""Under nbgrader's 600 s cell limit (``nbgrader_config.py``): a hang is then reported by the
test that hung instead of being cut off by nbgrader."""
KERNEL_ARGV = ["/usr/lib/python3/dist-packages/ipykernel_launcher.py", "-f",
               "/root/.local/share/jupyter/runtime/kernel-3f1c2a9e.json"]
"""What ``sys.argv`` holds while the answer cells run: a Jupyter kernel's, not the grader's."""
HIDDEN_PACKAGES = ("solutions",)
"""Not importable by the student's code while it is graded: the reference kernels."""


def enabled() -> bool:
    return os.environ.get("NBGRADER_EXECUTION") == "autograde" or os.environ.get(ISOLATE_VAR) == "1"


def find_notebook(exercise: str) -> Path:
    """The notebook being graded: nbgrader runs it from its own folder, named after the assignment."""
    here = Path.cwd()
    named = here / f"{exercise}.ipynb"
    if named.exists():
        return named
    found = sorted(here.glob("*.ipynb"))
    if len(found) == 1:
        return found[0]
    raise FileNotFoundError(f"cannot find the notebook of {exercise} in {here} to grade it in a clean process")


def student_code(notebook: Path) -> str:
    """The setup cell and the answer cells, in order; IPython magics and shell lines dropped."""
    cells = json.loads(notebook.read_text())["cells"]
    chosen = [c for c in cells if c.get("cell_type") == "code"
              and (c.get("metadata", {}).get("nbgrader", {}).get("solution")
                   or c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup")]
    sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in chosen]
    return "\n\n".join("\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))
                       for src in sources)


def check_in_subprocess(exercise: str, function: str, *, cases: str, measure_throughput: bool,
                        seed: int | None = None, timeout_s: float | None = None) -> CheckResult:
    """Grade the current notebook's answer cells in a fresh process; a crash or hang fails it."""
    if timeout_s is None:
        timeout_s = float(os.environ.get(TIMEOUT_VAR, PROCESS_TIMEOUT_S))
    code = student_code(find_notebook(exercise))
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        # A real file, not exec() of a string: Triton reads a kernel's source with inspect. It is
        # named as IPython names a cell's code, so the path does not say "graded" either.
        answer = Path(f"ipykernel_{secrets.randbelow(90000) + 10000}", f"{secrets.randbelow(9 * 10**9) + 10**9}.py")
        (scratch / answer.parent).mkdir()
        (scratch / answer).write_text(code)
        cmd = [sys.executable, "-m", "autograder.isolation", str(answer), exercise, function,
               "--cases", cases, "--out", "result.json"] + (["--throughput"] if measure_throughput else []) \
            + ([] if seed is None else ["--seed", str(seed)])
        # the student's code should not see that it is graded (nbgrader's variables go too)
        done = sandbox.run(cmd, cwd=scratch, timeout_s=timeout_s, hide=(ISOLATE_VAR, sandbox.GRADING_USER_VAR),
                           cache=compile_cache())
        if (scratch / "result.json").exists():
            return from_json((scratch / "result.json").read_text())
    last = "\n".join(line[:300] for line in done.output.strip().splitlines()[-6:])
    last = f"\nIts last output:\n{last}" if last else ""
    if done.returncode is None:
        return _failed(exercise, f"grading was stopped after {timeout_s:g} s: the code never finished.{last}")
    how = sandbox.describe_exit(done.returncode)
    if sandbox.ran_out_of_memory(done.output):
        return _failed(exercise, f"your code {sandbox.memory_note()}, which ended the grading process ({how}).{last}")
    return _failed(exercise, f"your code crashed the grading process ({how}).{last}")


@functools.cache
def compile_cache() -> Path:
    """Triton's cache for the clean processes this one starts: one per grading kernel, that is
    per student's notebook, so that student's tests share compiled kernels and no one else's
    code reaches them."""
    path = Path(tempfile.mkdtemp(prefix="triton-cache-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


class GradedElsewhere:
    """What nbgrader's kernel holds for the function under test while it autogrades
    (:mod:`autograder.autograde`): ``grade`` takes the function from the notebook file instead."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}: graded from the notebook's answer cells, in a clean process>"

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"`{self.name}` does not run in nbgrader's kernel: only the graded cells "
                           "do, and they run the answer cells in a clean process.")


def _failed(exercise: str, message: str) -> CheckResult:
    return CheckResult(exercise, seed=-1, cases=[CaseResult("(whole submission)", False, message)])


class _HiddenPackages:
    """An import hook that refuses :data:`HIDDEN_PACKAGES`, wherever they are installed."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in HIDDEN_PACKAGES:
            raise ModuleNotFoundError(f"No module named {name!r}: the reference solutions cannot be "
                                      "imported while your work is graded", name=name)
        return None


class _ImportSystem:
    """What decides which checker the fresh import finds, saved before the answer runs: the
    import finders and hooks, ``sys.path`` and the ``autograder`` package's own path (the
    builtins, ``__import__`` among them, are in :func:`_guarded_namespaces`)."""

    def __init__(self):
        import autograder
        self.package = autograder
        self.meta_path, self.path_hooks, self.path = list(sys.meta_path), list(sys.path_hooks), list(sys.path)
        self.package_path = list(autograder.__path__)

    def restore(self) -> None:
        sys.meta_path[:] = [_HiddenPackages, *self.meta_path]
        sys.path_hooks[:], sys.path[:] = self.path_hooks, self.path
        sys.path_importer_cache.clear()
        self.package.__path__[:] = self.package_path


def _name_memory_exhaustion(result: CheckResult) -> None:
    for case in result.cases:
        if not case.passed and sandbox.ran_out_of_memory(case.message):
            case.message = f"your code {sandbox.memory_note()}: {case.message}"


_KEPT_MODULES = ("autograder.device", "autograder.guards")
"""Loaded before the student's code and kept: the device choice, and the guards whose
interpreter bounds check is already installed (a fresh copy would raise a different
``OutOfBoundsAccess`` class from the one the fresh checker catches)."""


def _guarded_namespaces():
    import builtins
    import torch
    import triton.testing
    from . import guards
    return [builtins, torch, torch.Tensor, torch.cuda, torch.testing, triton.testing, guards]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="grade one notebook's answer cells (internal)")
    parser.add_argument("answer", type=Path, help="the setup and answer cells, as a .py file")
    parser.add_argument("exercise")
    parser.add_argument("function")
    parser.add_argument("--cases", default="visible")
    parser.add_argument("--throughput", action="store_true")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    sandbox.limit_memory()
    from . import device
    if device.setup_device(verbose=False).has_gpu:  # before the student's @triton.jit
        device.start_cuda()  # and before confining: the driver opens its files here
    cache = os.environ.get("TRITON_CACHE_DIR")  # this student's own (compile_cache)
    try:
        confine.confine(Path.cwd(), *([Path(cache)] if cache else []))  # before anything of the student's is read
    except confine.ConfinementError as error:
        args.out.write_text(to_json(_failed(args.exercise, f"grading could not confine your code ({error}), so "
                                            "none of it ran: tell your instructor.")))
        return 0
    from .guards import Seal
    seal, import_system = Seal(_guarded_namespaces(), callables_only=False), _ImportSystem()
    # The answer runs as a notebook's cells do: in a module named __main__ with no __file__,
    # under a kernel's argv (this process's own arguments say which cases are graded).
    module = types.ModuleType("__main__")
    sys.modules["__main__"], sys.argv = module, list(KERNEL_ARGV)
    sys.meta_path.insert(0, _HiddenPackages)
    try:
        exec(compile(args.answer.read_text(), str(args.answer.resolve()), "exec"), vars(module))
        error = None
    except Exception as exc:  # the answer cell itself fails when run on its own
        # a syntax error's line number counts from the top of setup + answers: show the line
        detail = f"{exc.msg}: `{exc.text.strip()}`" if isinstance(exc, SyntaxError) and exc.text else exc
        error = f"your answer cells raised {type(exc).__name__} when run on their own: {detail}"
        if sandbox.ran_out_of_memory(error):
            error = f"your code {sandbox.memory_note()}: {error}"
    namespace = vars(module)
    seal.restore()  # whatever the answer replaced in the builtins, torch, triton.testing, guards
    import_system.restore()  # and the finders and import paths it added or changed
    for name in [m for m in sys.modules if m.startswith("autograder.") and m not in _KEPT_MODULES]:
        del sys.modules[name]  # a fresh checker: module-level patches of the old one stay behind
    from autograder.check import check

    fn = namespace.get(args.function)
    if error is None and fn is None:
        error = f"your answer cells define no function `{args.function}`."
    result = (_failed(args.exercise, error) if error else
              check(args.exercise, fn, seed=args.seed, cases=args.cases,
                    measure_throughput=args.throughput, verbose=False))
    _name_memory_exhaustion(result)
    args.out.write_text(to_json(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
