"""A Colab-like environment: a bare virtual env holding only what a notebook's first cell
installs there, the course package from the students' copy (``triton-course distribute``, the
repository the Colab badges point at: no ``solutions``), non-editable, so its runtime
dependencies and none of the [course] or [test] extras: no nbgrader, no JupyterLab. Every
lesson runs in it top to bottom, in its Chinese version (test_notebooks runs the English one),
and every assignment's reference solution passes its self-check in it.

The env is kept in .venv/colab-like and rebuilt when pyproject.toml or the recipe below
changes (a first build takes a couple of minutes, mostly torch and triton); the course
package alone is reinstalled when its sources change.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autograder import exercises
from autograder.instructor import distribution
from conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

VENV = ROOT / ".venv" / "colab-like"
PYTHON = VENV / "bin" / "python"
# Colab comes with torch; here it is the CPU build that setup_env.sh installs (a local wheel).
TORCH = re.search(r"^CPU_TORCH=(\S+)", (ROOT / "scripts" / "setup_env.sh").read_text(), re.M).group(1)
# Not part of what Colab's cell installs: only the harness that runs a notebook headless here
# (Colab has its own kernel and front end).
HARNESS = ("ipykernel", "nbclient")
PACKAGE_SOURCES = ("pyproject.toml", "docs/student-readme.md", "autograder")
"""What the students' copy builds its package from (:mod:`autograder.instructor.distribution`)."""
# The Chinese lessons (test_notebooks runs the English ones): the code is the same, and this runs
# them top to bottom, as the suite runs every notebook.
LESSONS = sorted((ROOT / "notebooks" / "zh").glob("*.ipynb"))
ASSIGNMENTS = sorted((ROOT / "source").glob("*/*.ipynb"))

# Runs in the Colab-like env: one notebook, with a last cell that reports which Python ran it.
RUN_NOTEBOOK = textwrap.dedent('''
    import json, sys, tempfile, time
    from importlib.metadata import distributions
    from pathlib import Path
    from runpy import run_path

    import nbformat
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    # (the course's module by its path: importing the package would load torch here too)
    on_unix_sockets = run_path(sys.argv[2])["on_unix_sockets"]

    def installed():
        return sorted(f"{d.metadata['Name']}=={d.version}" for d in distributions())

    path = Path(sys.argv[1])
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        'import sys; print(sys.prefix, "google.colab" in sys.modules, sep="\\\\n")'))
    before, start = installed(), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kernel-") as sockets:
        km = AsyncKernelManager(kernel_name="python3")
        on_unix_sockets(km, sockets)
        NotebookClient(nb, km=km, timeout=600, resources={"metadata": {"path": str(path.parent)}}).execute(
            cleanup_kc=True)  # the kernel ends with the run
    colab_cell = next(c for c in nb.cells if c.cell_type == "code" and "google.colab" in c.source)
    print(json.dumps({
        "seconds": round(time.monotonic() - start, 1),
        # the last two lines: output a kernel print flushed late can land in this cell first
        "kernel": "".join(o.get("text", "") for o in nb.cells[-1].outputs
                          if o.get("name") == "stdout").splitlines()[-2:],
        "colab_cell_outputs": colab_cell.outputs,
        "installs_changed": installed() != before,
    }))
''')

# Runs in the Colab-like env: one exercise's reference solution through the student's check().
SELF_CHECK = textwrap.dedent('''
    import json, runpy, sys

    import autograder
    from autograder import check, exercises, setup_device

    setup_device(verbose=False)  # before the solution's @triton.jit
    spec = exercises.get(sys.argv[1])
    fn = runpy.run_path(sys.argv[2])[spec.function]  # the instructor's answer, as a student's notebook holds one
    result = check(spec.name, fn, verbose=False)
    print(json.dumps({"correct": result.correct, "summary": result.summary(),
                      "autograder": autograder.__file__}))
''')


def digest(*paths: Path, extra: str = "") -> str:
    h = hashlib.sha256(extra.encode())
    for top in paths:
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for f in files:
            if "__pycache__" not in f.parts:
                h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def colab_env(tmp: Path) -> dict:
    """A fresh process's environment: the venv first on PATH, none of the test run's Triton or
    course settings (conftest switched the interpreter on), Jupyter's user folders in ``tmp``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRITON") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{PYTHON.parent}{os.pathsep}{env.get('PATH', '')}"
    for var in ("JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        env[var] = str(tmp / var.lower())  # no user kernelspec can stand in for the venv's
    return env


def run(args: list, cwd: Path, env: dict | None = None, timeout: int = 900) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, args))}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return done.stdout


def pip(*args) -> None:
    run([PYTHON, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args], cwd=VENV)


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """The Colab-like env, built or brought up to date; returns a scratch folder for runs."""
    start = time.monotonic()
    deps_stamp, package_stamp = VENV / ".deps-stamp", VENV / ".package-stamp"
    deps = digest(ROOT / "pyproject.toml", extra=f"{sys.version_info[:2]} {TORCH} {HARNESS}")
    fresh = not (PYTHON.exists() and deps_stamp.exists() and deps_stamp.read_text() == deps)
    if fresh:
        shutil.rmtree(VENV, ignore_errors=True)
        run([sys.executable, "-m", "venv", VENV], cwd=ROOT)
        pip(TORCH)  # first, as on Colab, so the package's torch>=2.5 keeps it
        pip(*HARNESS)
    package = digest(*(ROOT / p for p in PACKAGE_SOURCES))
    if fresh or not package_stamp.exists() or package_stamp.read_text() != package:
        # What the badges point at, and a copy: pip builds in the source tree, which would leave build/ here.
        source = distribution.build(tmp_path_factory.mktemp("package") / "course")
        # What Colab's `%pip install "triton-course @ git+..."` does; later only the package.
        pip(*([] if fresh else ["--force-reinstall", "--no-deps"]), source)
        package_stamp.write_text(package)
        deps_stamp.write_text(deps)  # last: a build that stopped half-way starts over
    print(f"colab-like env ready in {time.monotonic() - start:.0f} s")
    return tmp_path_factory.mktemp("colab-run")


def test_has_the_package_and_no_course_extras(colab):
    probe = ("import importlib.util as u, json, autograder; print(json.dumps([autograder.__file__, "
             "[m for m in ('nbgrader', 'jupyterlab', 'jupyter_server', 'pytest') if u.find_spec(m)]]))")
    where, extras = json.loads(run([PYTHON, "-c", probe], cwd=colab, env=colab_env(colab)))
    assert Path(where).is_relative_to(VENV), f"autograder imported from {where}, not the installed package"
    assert extras == [], f"the Colab-like env has {extras}: the install pulled an extra"
    answers = "import importlib.util as u; print(u.find_spec('solutions'))"
    assert run([PYTHON, "-c", answers], cwd=colab, env=colab_env(colab)).strip() == "None", \
        "the Colab-like env can import the reference solutions: it was not built from the students' copy"
    speaks = "from autograder.language import say, set_language; set_language('zh'); print(say('no cases were run.'))"
    assert run([PYTHON, "-c", speaks], cwd=colab, env=colab_env(colab)).strip() == "没有运行任何用例。", \
        "the installed package lacks its message catalogue (package-data)"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_runs(colab, path):
    script = colab / "run_notebook.py"
    script.write_text(RUN_NOTEBOOK)
    sockets = ROOT / "autograder" / "grading" / "kernel_sockets.py"
    report = json.loads(run([PYTHON, script, path, sockets], cwd=colab, env=colab_env(colab)).splitlines()[-1])
    prefix, in_colab = report["kernel"]
    assert Path(prefix) == VENV, f"the kernel ran in {prefix}, not the Colab-like env"
    assert in_colab == "False" and report["colab_cell_outputs"] == [], report
    assert not report["installs_changed"], "the notebook installed packages outside Colab"


@pytest.mark.parametrize("path", ASSIGNMENTS, ids=lambda p: p.stem)
def test_assignment_self_check(colab, path):
    script = colab / "self_check.py"
    script.write_text(SELF_CHECK)
    answer = ROOT / (exercises.get(path.stem).solution.replace(".", "/") + ".py")
    report = json.loads(run([PYTHON, script, path.stem, answer], cwd=colab, env=colab_env(colab)).splitlines()[-1])
    assert Path(report["autograder"]).is_relative_to(VENV), report["autograder"]
    assert report["correct"], report["summary"]
