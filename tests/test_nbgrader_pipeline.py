"""The instructor's whole cycle for real: generate, release, fetch, submit, collect,
grade the class, feedback and export, with simulated students; and every assignment's
reference solution autograded."""
import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder import exercises
from autograder.assignments.ps1_vector_add import EXERCISE as VECTOR_ADD
from autograder.grade_class import grade_class, table
from conftest import DEVICE, ROOT, venv_env

pytestmark = pytest.mark.slow
PS1 = VECTOR_ADD.name
COURSE_ID = "triton-course"

UNMASKED = '''@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK_SIZE=1024)
    return out
'''


def nbgrader(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=venv_env(**env),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def new_course(tmp: Path, assignment: str) -> Path:
    course = tmp / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "source" / assignment, course / "source" / assignment)
    nbgrader(course, "generate_assignment", assignment, "--force")
    return course


def answer(notebook: Path, assignment: str, solution: str | None) -> None:
    """Write ``solution`` into the notebook's answer cell (None: leave it as released)."""
    if solution is None:
        return
    nb = nbformat.read(notebook, as_version=4)
    function = exercises.get(assignment).function
    cell, = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == function]
    cell.source = solution
    nbformat.write(nb, notebook)


def reference(assignment: str) -> str:
    """The instructor's answer: the solution cell of the source notebook."""
    nb = nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    cell, = [c for c in nb.cells if c.metadata.get("course", {}).get("role") == "solution"]
    return cell.source


@pytest.fixture(scope="module")
def cycle(tmp_path_factory):
    """ps1 through the exchange, for four students."""
    tmp = tmp_path_factory.mktemp("cycle")
    course = new_course(tmp, PS1)
    exchange = f"--Exchange.root={course / 'exchange'}"
    nbgrader(course, "release_assignment", PS1, "--force")
    students = {"ada": reference(PS1), "bob": UNMASKED, "cy": None, "dee": "broken"}
    for student, solution in students.items():
        home = tmp / student
        home.mkdir()
        nbgrader(home, "fetch_assignment", PS1, f"--course={COURSE_ID}", exchange, HOME=str(home))  # as the guide says
        notebook = home / PS1 / f"{PS1}.ipynb"
        if solution == "broken":
            notebook.write_text('{"cells": [ this is not JSON')
        else:
            answer(notebook, PS1, solution)
        nbgrader(home, "submit", PS1, f"--course={COURSE_ID}", f"--student={student}", exchange, HOME=str(home))
    nbgrader(course, "collect", PS1)
    grades = {g.student: g for g in grade_class(course, PS1)}
    nbgrader(course, "generate_feedback", PS1, "--force")
    nbgrader(course, "export", f"--to={course / 'grades.csv'}")
    return course, grades


def cell_scores(course: Path, assignment: str, student: str) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(assignment, assignment, student)
        return {g.name: g.score for g in nb.grades}


def expected_unmasked_points() -> dict[str, float]:
    """Only whole blocks of 1024 come out right without a mask; grade() shares points by cases."""
    def share(which):
        cases = VECTOR_ADD.cases(which, DEVICE.device)
        return round(VECTOR_ADD.points["correctness" if which == "visible" else "hidden"]
                     * sum(c.shape[0] % 1024 == 0 for c in cases) / len(cases), 2)
    return {"test_correctness": share("visible"), "test_hidden": share("hidden"), "test_throughput": 0}


def test_release_holds_no_solution_and_no_hidden_test(cycle):
    course, _ = cycle
    text = (course / "release" / PS1 / f"{PS1}.ipynb").read_text()
    for secret in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", '"hidden")', "tl.program_id(axis=0)"):
        assert secret not in text
    assert text.count(r'raise NotImplementedError(\"your code goes here\")') == 2  # kernel and wrapper (JSON-escaped)
    assert "# Hidden tests: more cases on fresh random inputs" in text


def test_reference_partial_and_empty_submissions_score_as_declared(cycle):
    course, _ = cycle
    full = {"test_correctness": VECTOR_ADD.points["correctness"], "test_hidden": VECTOR_ADD.points["hidden"],
            "test_throughput": 0}  # no GPU here: throughput is "not measured", 0 by default
    assert cell_scores(course, PS1, "ada") == full
    assert cell_scores(course, PS1, "bob") == expected_unmasked_points()
    assert sum(cell_scores(course, PS1, "cy").values()) == 0


def test_exported_grades_are_exact(cycle):
    course, _ = cycle
    rows = {r["student_id"]: r for r in csv.DictReader((course / "grades.csv").open())}
    total = sum(VECTOR_ADD.points.values())
    expected = {"ada": 6.0, "bob": sum(expected_unmasked_points().values()), "cy": 0.0, "dee": 0.0}
    assert set(rows) == set(expected)  # the broken notebook is listed too, with 0
    for student, score in expected.items():
        assert float(rows[student]["score"]) == pytest.approx(score), rows[student]
        assert float(rows[student]["max_score"]) == total


def test_class_summary_names_failing_tests_and_reasons(cycle):
    _, grades = cycle
    assert set(grades) == {"ada", "bob", "cy", "dee"}
    assert grades["ada"].failing == ["test_throughput"]
    assert "needs a GPU" in grades["ada"].reasons[0]
    assert "test_correctness" in grades["bob"].failing and "partial credit" in " ".join(grades["bob"].reasons)
    assert "no case passed; the first: `add` is not written yet" in grades["cy"].reasons[0]
    assert grades["dee"].score == 0
    assert grades["dee"].reasons[0].startswith(f"{PS1}.ipynb is not a readable notebook (NotJSONError")
    summary = table(PS1, list(grades.values()))
    assert all(name in summary for name in grades) and "6/8" in summary


def test_a_correct_notebook_validates_without_a_gpu(cycle, tmp_path):
    course, _ = cycle
    notebook = tmp_path / f"{PS1}.ipynb"
    shutil.copy(course / "release" / PS1 / f"{PS1}.ipynb", notebook)
    answer(notebook, PS1, reference(PS1))
    done = nbgrader(tmp_path, "validate", str(notebook))
    assert "Success! Your notebook passes all the tests." in done.stdout, done.stdout + done.stderr


def test_feedback_names_the_failing_test_and_hides_hidden_code(cycle):
    course, _ = cycle
    html = (course / "feedback" / "bob" / PS1 / f"{PS1}.html").read_text()
    assert "needs a GPU" in html and "out of bounds" in html and "test_throughput" in html
    for secret in ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "&quot;hidden&quot;", '"hidden"'):
        assert secret not in html, secret


@pytest.mark.parametrize("assignment", sorted(p.name for p in (ROOT / "source").iterdir() if p.is_dir()))
def test_every_reference_solution_autogrades_to_full_correctness(assignment, tmp_path):
    course = new_course(tmp_path, assignment)
    folder = course / "submitted" / "ref" / assignment
    folder.mkdir(parents=True)
    shutil.copy(course / "release" / assignment / f"{assignment}.ipynb", folder)
    answer(folder / f"{assignment}.ipynb", assignment, reference(assignment))
    nbgrader(course, "autograde", assignment, "--create", "--force")
    points = exercises.get(assignment).points
    assert cell_scores(course, assignment, "ref") == {
        "test_correctness": points["correctness"], "test_hidden": points["hidden"], "test_throughput": 0}
