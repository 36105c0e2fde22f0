"""The committed student versions (student/) are what nbgrader releases, and run top to bottom."""
import nbformat
import pytest
from nbclient import NotebookClient

from autograder.instructor import student_versions, sync
from conftest import ROOT, venv_env

ASSIGNMENTS = student_versions.assignments()


def test_every_assignment_has_a_student_version():
    assert ASSIGNMENTS and all(student_versions.student_path(a).exists() for a in ASSIGNMENTS)
    assert sorted(p.name for p in student_versions.STUDENT_DIR.iterdir()) == ASSIGNMENTS


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_student_version_is_nbgraders_release(assignment):
    assert not student_versions.sync(assignment, write=False), \
        f"student/{assignment} is stale: run `python -m autograder.instructor.student_versions`"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_badge_opens_the_student_version(assignment):
    for path in (ROOT / "source" / assignment / f"{assignment}.ipynb", student_versions.student_path(assignment)):
        badge = nbformat.read(path, as_version=4).cells[0].source
        assert badge == sync.colab_badge(path)
        assert badge.endswith(f"/blob/main/student/{assignment}/{assignment}.ipynb)"), badge


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_student_version_runs_and_only_its_tests_fail(assignment, monkeypatch):
    # Unsolved, every graded cell fails with the grader's verdict, and the only other errors are
    # the student's own calls of the unwritten function.
    for key, value in venv_env().items():
        monkeypatch.setenv(key, value)
    path = student_versions.student_path(assignment)
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    failed = {c.metadata.get("nbgrader", {}).get("grade_id"): next(o for o in c.outputs if o.output_type == "error")
              for c in nb.cells if c.cell_type == "code" and any(o.output_type == "error" for o in c.outputs)}
    graded = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.cell_type == "code"
              and c.metadata.get("nbgrader", {}).get("grade")
              and any(not line.startswith("#") for line in c.source.splitlines() if line.strip())}
    hidden = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_hidden")
    assert hidden.startswith("# Hidden tests:") and "grade(" not in hidden  # it says what it is, and no more
    # without a GPU the throughput cell only says so (tests/test_check.py), every other one fails
    assert graded and graded - {"test_throughput"} <= set(failed), {k: v.evalue for k, v in failed.items()}
    assert all(e.ename == ("GradingFailure" if name in graded else "NotImplementedError")
               for name, e in failed.items()), {k: v.ename for k, v in failed.items()}
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "not written yet" in printed and "needs a GPU" in printed and "your code goes here" in printed
