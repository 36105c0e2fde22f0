"""grade_class for a class: results saved as each student finishes, --resume, --show, a Ctrl-C
that loses no finished student, and set-up errors that stop the run before anyone is graded.
nbgrader's own grading is stubbed here (tests/test_class_robustness.py runs it for real)."""
import json
import shutil

import pytest

from autograder import exercises, grade_class as gc
from autograder.grading import sandbox
from test_nbgrader_pipeline import PS1, new_course

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    return new_course(tmp_path_factory.mktemp("released"), PS1)


@pytest.fixture
def course(released, tmp_path):
    """A fresh copy of a released course with three submissions, and a stub for nbgrader that
    records whom it grades (``course.graded``) and fails whoever is in ``course.fail``."""
    copy = tmp_path / "course"
    shutil.copytree(released, copy)
    for student in ("ada", "bob", "cy"):
        folder = copy / "submitted" / student / PS1
        folder.mkdir(parents=True)
        shutil.copy(copy / "release" / PS1 / f"{PS1}.ipynb", folder)
    return copy


@pytest.fixture
def graded(monkeypatch):
    calls, outcome = [], {}

    def stub(course, assignment, student):
        calls.append(student)
        if outcome.get(student) == "interrupt":
            raise KeyboardInterrupt
        return outcome.get(student)

    monkeypatch.setattr(gc, "autograde", stub)
    return calls, outcome


def test_results_are_saved_and_resume_grades_only_what_changed(course, graded):
    calls, _ = graded
    assert gc.main([PS1, "--course", str(course)]) == 0 and calls == ["ada", "bob", "cy"]
    records = json.loads((course / "grades" / f"{PS1}.json").read_text())
    assert set(records) == {"ada", "bob", "cy"} and all(r["graded"] and r["notebook"] for r in records.values())
    assert (course / "grades" / f"{PS1}.csv").read_text().splitlines()[0].startswith("student,score,max_score")
    calls.clear()
    notebook = course / "submitted" / "bob" / PS1 / f"{PS1}.ipynb"
    notebook.write_text(notebook.read_text().replace('"cells"', '"cells" ', 1))  # a resubmission
    assert gc.main([PS1, "--course", str(course), "--resume"]) == 0 and calls == ["bob"]


def test_a_ctrl_c_keeps_every_finished_student_and_no_half_graded_one(course, graded, capsys):
    calls, outcome = graded
    outcome["bob"] = "interrupt"
    assert gc.main([PS1, "--course", str(course)]) == 130
    assert set(gc.saved(course, PS1)) == {"ada"} and "--resume" in capsys.readouterr().err
    del outcome["bob"]
    calls.clear()
    assert gc.main([PS1, "--course", str(course), "--resume"]) == 0 and calls == ["bob", "cy"]
    assert gc.main([PS1, "--course", str(course), "--show"]) == 0 and calls == ["bob", "cy"]
    assert "ada" in capsys.readouterr().out


def test_a_student_who_could_not_be_graded_makes_the_run_fail(course, graded, capsys):
    _, outcome = graded
    outcome["cy"] = "cy.ipynb is not a readable notebook (NotJSONError: ...)"
    assert gc.main([PS1, "--course", str(course)]) == 1
    out, err = capsys.readouterr()
    assert "1 could not be graded: cy" in err and "not a readable notebook" in out
    assert not gc.saved(course, PS1)["cy"].graded


def test_set_up_errors_stop_the_run_before_anyone_is_graded(course, graded, monkeypatch, capsys):
    calls, _ = graded
    (course / "nbgrader_config.py").write_text("c = get_config()\n")  # nbgrader's stock set-up
    released = exercises.get(PS1).points["hidden"]
    monkeypatch.setitem(exercises.get(PS1).points, "hidden", released + 1)  # the declaration changed since release
    monkeypatch.setattr(sandbox, "grading_user", lambda: "nobody")

    def cannot_run(user, python):
        raise PermissionError(f"{sandbox.GRADING_USER_VAR}=nobody: that user cannot run {python}")

    monkeypatch.setattr(sandbox, "check_interpreter_runs_as", cannot_run)
    assert gc.main([PS1, "--course", str(course)]) == 2 and calls == []
    err = capsys.readouterr().err
    assert "is missing or is not the course's" in err and "hidden tests in the feedback" in err
    assert "that user cannot run" in err
    assert f"test_hidden is worth {released:g} in the gradebook and {released + 1:g} in the package" in err
    assert f"nbgrader generate_assignment {PS1} --force" in err
