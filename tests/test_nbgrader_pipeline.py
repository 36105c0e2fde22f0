"""The instructor's pipeline for real: generate, autograde three submissions, feedback."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.exercises import VECTOR_ADD
from autograder.notebook_sync import solution_section
from conftest import ROOT, venv_env

pytestmark = pytest.mark.slow
ASSIGNMENT = VECTOR_ADD.name
NOTEBOOK = f"{ASSIGNMENT}.ipynb"

UNMASKED = '''@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK_SIZE=1024)
    return out
'''


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=venv_env(),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def submit(course: Path, student: str, solution: str | None) -> None:
    nb = nbformat.read(course / "release" / ASSIGNMENT / NOTEBOOK, as_version=4)
    if solution is not None:
        cell, = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "add"]
        cell.source = solution
    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / NOTEBOOK)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "source" / ASSIGNMENT, course / "source" / ASSIGNMENT)
    nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    submit(course, "reference", solution_section("solutions/vector_add.py", "add"))
    submit(course, "untouched", None)
    submit(course, "unmasked", UNMASKED)
    nbgrader(course, "autograde", ASSIGNMENT, "--create", "--force")
    nbgrader(course, "generate_feedback", ASSIGNMENT, "--force")
    return course


def scores(course: Path, student: str) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(NOTEBOOK.removesuffix(".ipynb"), ASSIGNMENT, student)
        return {g.name: g.score for g in nb.grades}


def test_release_holds_no_solution_and_no_hidden_test(course):
    text = (course / "release" / ASSIGNMENT / NOTEBOOK).read_text()
    for secret in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", '"hidden")', "tl.program_id(axis=0)"):
        assert secret not in text
    assert "raise NotImplementedError()" in text


def test_reference_solution_gets_full_correctness_marks(course):
    got = scores(course, "reference")
    assert got["test_correctness"] == VECTOR_ADD.points["correctness"]
    assert got["test_hidden"] == VECTOR_ADD.points["hidden"]
    # No GPU in CI: throughput is "not measured", which scores 0 by default.
    assert got["test_throughput"] == 0


def test_untouched_release_scores_zero(course):
    assert sum(scores(course, "untouched").values()) == 0


def test_kernel_without_mask_gets_partial_marks(course):
    got = scores(course, "unmasked")
    correctness = got["test_correctness"] + got["test_hidden"]
    assert 0 < correctness < VECTOR_ADD.points["correctness"] + VECTOR_ADD.points["hidden"]


def test_feedback_names_the_failing_test_and_hides_hidden_code(course):
    html = (course / "feedback" / "unmasked" / ASSIGNMENT / NOTEBOOK.replace(".ipynb", ".html")).read_text()
    assert "GradingFailure" in html and "out of bounds" in html
    assert "test_throughput" in html or "throughput" in html
    for secret in ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS", re.escape('"hidden")')):
        assert not re.search(secret, html), secret
