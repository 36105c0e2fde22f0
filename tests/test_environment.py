"""The set-up a new user trusts: pyproject.toml and environment.yml agree, the env has
JupyterLab 4 with nbgrader's extensions on, and README, Makefile and .ci/run name the same
commands."""

import functools
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
JUPYTER = Path(sys.executable).parent / "jupyter"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
NBGRADER_SERVER_EXTENSIONS = ["formgrader", "assignment_list", "course_list", "validate_assignment"]


def pyproject_requirements(pyproject: dict) -> list[str]:
    """dependencies + [course] + [test]: what `pip install -e ".[course,test]"` asks for."""
    extras = pyproject["project"]["optional-dependencies"]
    return pyproject["project"]["dependencies"] + extras["course"] + extras["test"]


def environment_requirements(environment: dict) -> list[str]:
    """The pip: section of environment.yml, less `-e .` (the course package itself)."""
    pip = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    return [line for line in pip if not line.startswith("-e")]


def drift(ours: list[str], theirs: list[str], names=("pyproject.toml", "environment.yml")) -> list[str]:
    """One line per difference between two requirement lists; [] when they agree.

    Names compare as pip normalises them and ranges as sets of clauses, so `PyYAML>=6`
    equals `pyyaml >= 6` and `triton>=3.6,<3.10` equals `triton<3.10,>=3.6`."""

    def index(lines: list[str]) -> dict[str, tuple]:
        out = {}
        for line in lines:
            req = Requirement(line)
            out[canonicalize_name(req.name)] = (
                sorted(req.extras), sorted(map(str, req.specifier)), str(req.marker or "")
            )
        return out

    a, b = index(ours), index(theirs)
    problems = [f"{n}: only in {names[0]}" for n in sorted(a.keys() - b.keys())]
    problems += [f"{n}: only in {names[1]}" for n in sorted(b.keys() - a.keys())]
    problems += [
        f"{n}: {names[0]} says {a[n]}, {names[1]} says {b[n]}"
        for n in sorted(a.keys() & b.keys())
        if a[n] != b[n]
    ]
    return problems


def load_pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def load_environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def test_environment_yml_matches_pyproject():
    problems = drift(pyproject_requirements(load_pyproject()), environment_requirements(load_environment()))
    assert not problems, "environment.yml drifted from pyproject.toml:\n" + "\n".join(problems)


def test_environment_yml_python_and_package():
    deps = load_environment()["dependencies"]
    python = next(d for d in deps if isinstance(d, str) and d.startswith("python="))
    floor = load_pyproject()["project"]["requires-python"]
    assert Requirement(f"python{floor}").specifier.contains(python.split("=")[1]), (python, floor)
    assert "-e ." in next(d["pip"] for d in deps if isinstance(d, dict))


@pytest.mark.parametrize(
    "plant, expected",
    [
        (lambda reqs: [r for r in reqs if not r.startswith("nbgrader")], "nbgrader: only in pyproject.toml"),
        (lambda reqs: reqs + ["rich>=13"], "rich: only in environment.yml"),
        (lambda reqs: [r.replace("<3.10", "<3.11") for r in reqs], "triton: pyproject.toml says"),
        (lambda reqs: [r.replace("pytest>=8", "pytest") for r in reqs], "pytest: pyproject.toml says"),
    ],
    ids=["package dropped", "package added", "range widened", "range removed"],
)
def test_drift_is_caught(plant, expected):
    reqs = pyproject_requirements(load_pyproject())
    assert any(p.startswith(expected) for p in drift(reqs, plant(list(reqs))))


def test_drift_ignores_spelling():
    assert drift(["PyYAML>=6", "triton>=3.6,<3.10"], ["pyyaml >= 6", "triton<3.10, >=3.6"]) == []


@functools.cache
def jupyter(*args: str) -> str:
    assert JUPYTER.exists(), f"{JUPYTER} is missing: run the tests with the course env (make test)"
    proc = subprocess.run([str(JUPYTER), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return ANSI.sub("", proc.stdout + proc.stderr)


def test_jupyterlab_4():
    assert jupyter("lab", "--version").strip().startswith("4."), "JupyterLab 4 is required"


def test_nbgrader_lab_extension_enabled():
    line = next((l for l in jupyter("labextension", "list").splitlines() if "@jupyter/nbgrader" in l), "")
    assert re.search(r"\benabled\s+OK\b", line), f"nbgrader's lab extension: {line or 'not listed'}"


@pytest.mark.parametrize("name", NBGRADER_SERVER_EXTENSIONS)
def test_nbgrader_server_extension_enabled(name):
    listing = jupyter("server", "extension", "list")
    module = re.escape(f"nbgrader.server_extensions.{name}")
    assert re.search(rf"{module}\s+enabled", listing), listing
    assert re.search(rf"{module}\s+OK", listing), listing


def make(*args: str) -> list[str]:
    # A `make test PYTEST_ARGS=...` running this test exports its variables through
    # MAKEFLAGS and the environment; clear them so the child make sees the plain Makefile.
    env = {k: v for k, v in os.environ.items()
           if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "LAB_ARGS", "PYTEST_ARGS"}}
    proc = subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def make_dry_run(*args: str) -> list[str]:
    return make("-n", *args)


def readme_claims() -> dict[str, list[str]]:
    """{"lab": [commands...], ...} from README's lines `make lab    # runs A, then B`."""
    found = re.findall(r"^make (\w+)\s+# runs (.+)$", (ROOT / "README.md").read_text(), re.M)
    return {target: claim.split(", then ") for target, claim in found}


@pytest.mark.parametrize("target", ["lab", "test"])
def test_make_runs_what_readme_says(target):
    claims = readme_claims()
    assert target in claims, f"README's Set-up no longer says what `make {target}` runs"
    assert make_dry_run(target) == claims[target]


@pytest.mark.parametrize("target, variable", [("lab", "LAB_ARGS"), ("test", "PYTEST_ARGS")])
def test_make_passes_arguments_through(target, variable):
    assert make_dry_run(target, f"{variable}=--flag-a --flag-b")[-1].endswith(" --flag-a --flag-b")


def test_make_puts_the_venv_first_on_path(tmp_path):
    # nbgrader's formgrader runs `alembic` from PATH: without .venv/bin there, its
    # gradebook pages answer 500 under `make lab`.
    probe = tmp_path / "probe.mk"
    probe.write_text("print-path:\n\t@echo $$PATH\n")
    path = make("-f", "Makefile", "-f", str(probe), "print-path")[-1]
    assert path.split(os.pathsep)[0] == str(ROOT / ".venv" / "bin")


def test_ci_runs_make_test():
    ci = ROOT / ".ci" / "run"
    assert os.access(ci, os.X_OK), ".ci/run must be executable"
    text = ci.read_text()
    commands = [l.strip() for l in text.splitlines() if l.strip() and not l.lstrip().startswith("#")]
    assert "set -euo pipefail" in commands
    # The last command, with nothing that could hide pytest's exit code behind it.
    assert commands[-1] == "make test", commands[-1]
    assert "pytest" not in "\n".join(commands) and "|| true" not in text


SHARING_PROJECT = {
    "conftest.py": ("import importlib.util, sys\nsys.path.insert(0, {tests!r})\n"  # the suite's conftest, by path
                    "spec = importlib.util.spec_from_file_location('suite_conftest', {tests!r} + '/conftest.py')\n"
                    "suite = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(suite)\n"
                    "pytest_cmdline_main, pytest_collection_modifyitems, machine_share = suite.pytest_cmdline_main, "
                    "suite.pytest_collection_modifyitems, suite.machine_share\n"),
    # More tests than any other module: pytest-xdist's own order (most tests first) would run it first.
    "test_alone.py": "import pytest\npytestmark = pytest.mark.alone\n\n"
                     + "".join(f"def test_timed_{i}():\n    {{note}}('alone')\n\n" for i in range(3)),
    "test_slow.py": "import pytest\n\n@pytest.mark.slow\ndef test_long():\n    {note}('slow')\n",
    "test_first.py": "def test_a():\n    {note}('first')\n\ndef test_b():\n    {note}('first')\n",
    "test_second.py": "def test_a():\n    {note}('second')\n\ndef test_b():\n    {note}('second')\n",
}
NOTE = """
import os, time
def note(module):
    start = time.monotonic(); time.sleep(0.6)
    with open({log!r}, 'a') as f:
        f.write(f"{{module}} {{os.environ['PYTEST_XDIST_WORKER']}} {{start}} {{time.monotonic()}}\\n")
"""


def test_make_tests_workers_share_the_machine_and_an_alone_module_has_it_to_itself(tmp_path):
    """Under `make test`'s pytest-xdist flags, modules run side by side, each whole on one
    worker, a module marked `alone` overlaps no other (the conftest's lock), and modules are
    handed out in the conftest's order: a `slow` one first, an `alone` one last."""
    log = tmp_path / "log.txt"
    for name, text in SHARING_PROJECT.items():
        body = text.format(tests=str(ROOT / "tests"), note="note")
        (tmp_path / name).write_text((NOTE.format(log=str(log)) if name != "conftest.py" else "") + body)
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider",
                           "-q", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = [line.split() for line in log.read_text().splitlines()]
    spans = {m: [(float(a), float(b)) for mod, _, a, b in runs if mod == m] for m in ("alone", "first", "second", "slow")}
    workers = {m: {w for mod, w, _, _ in runs if mod == m} for m in ("first", "second")}
    assert all(len(w) == 1 for w in workers.values()) and workers["first"] != workers["second"], runs
    a0, a1 = min(a for a, _ in spans["alone"]), max(b for _, b in spans["alone"])
    assert all(b1 <= a0 or b0 >= a1 for m in ("first", "second", "slow") for b0, b1 in spans[m]), runs
    assert spans["slow"][0][0] < a0, runs  # handed out first, where pytest-xdist's order would run it last
    first, second = spans["first"], spans["second"]
    assert any(f0 < s1 and s0 < f1 for f0, f1 in first for s0, s1 in second), runs  # side by side
