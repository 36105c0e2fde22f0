"""Grading in a clean process: only the student's answer cells run there, then the checker.

Under ``nbgrader autograde`` a test cell shares the kernel with everything the student's
notebook did before it: a cell that redefines ``torch.isclose``, the timer or the checker
itself would change the verdict. So ``grade`` hands the work to a fresh Python process that
runs the notebook's ``setup`` cell and its answer cells (nbgrader ``solution`` cells) and
nothing else, puts back any PyTorch or Triton attribute they replaced, imports the checker
anew, and sends back the verdict as JSON. A crash or a hang there costs only that test.

``python -m autograder.isolation NOTEBOOK EXERCISE ...`` is that process's entry point.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .report import CaseResult, CheckResult, from_json, to_json

ISOLATE_VAR = "TRITON_COURSE_ISOLATE"
"""``1`` grades in a clean process outside nbgrader too; nbgrader's autograde always does."""
PROCESS_TIMEOUT_S = 1200


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
                        seed: int | None = None, timeout_s: float = PROCESS_TIMEOUT_S) -> CheckResult:
    """Grade the current notebook's answer cells in a fresh process; a crash or hang fails it."""
    notebook = find_notebook(exercise)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "autograder.isolation", str(notebook), exercise, function,
               "--cases", cases, "--out", str(out)] + (["--throughput"] if measure_throughput else []) \
            + ([] if seed is None else ["--seed", str(seed)])
        # nbgrader's variables stay behind: the student's code should not see it is graded
        env = {k: v for k, v in os.environ.items() if not k.startswith("NBGRADER") and k != ISOLATE_VAR}
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired:
            return _failed(exercise, f"grading was stopped after {timeout_s:g} s: the code never finished.")
        if out.exists():
            return from_json(out.read_text())
    tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
    return _failed(exercise, f"your code crashed the grading process (exit code {done.returncode}):\n{tail}")


def _failed(exercise: str, message: str) -> CheckResult:
    return CheckResult(exercise, seed=-1, cases=[CaseResult("(whole submission)", False, message)])


def _guarded_namespaces():
    import torch
    import triton.testing
    return [torch, torch.Tensor, torch.cuda, torch.testing, triton.testing]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="grade one notebook's answer cells (internal)")
    parser.add_argument("notebook", type=Path)
    parser.add_argument("exercise")
    parser.add_argument("function")
    parser.add_argument("--cases", default="visible")
    parser.add_argument("--throughput", action="store_true")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    from . import device
    device.setup_device(verbose=False)  # before the student's @triton.jit
    saved = [(ns, dict(vars(ns))) for ns in _guarded_namespaces()]
    # A real file, not exec() of a string: Triton reads a kernel's source with inspect.
    source = args.out.with_name("student_answer.py")
    source.write_text(student_code(args.notebook))
    spec = importlib.util.spec_from_file_location("student_answer", source)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        error = None
    except Exception as exc:  # the answer cell itself fails when run on its own
        error = f"your answer cells raised {type(exc).__name__} when run on their own: {exc}"
    namespace = vars(module)
    for ns, attributes in saved:  # undo replaced torch/triton functions
        for name, value in attributes.items():
            if vars(ns).get(name) is not value:
                setattr(ns, name, value)
    for name in [m for m in sys.modules if m.startswith("autograder.") and m != "autograder.device"]:
        del sys.modules[name]  # a fresh checker: module-level patches of the old one stay behind
    from autograder.check import check

    fn = namespace.get(args.function)
    if error is None and fn is None:
        error = f"your answer cells define no function `{args.function}`."
    result = (_failed(args.exercise, error) if error else
              check(args.exercise, fn, seed=args.seed, cases=args.cases,
                    measure_throughput=args.throughput, verbose=False))
    args.out.write_text(to_json(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
