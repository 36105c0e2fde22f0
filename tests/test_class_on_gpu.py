"""On a GPU, a class per problem set: its reference and each mistake of
tests/test_nbgrader_pipeline.py's WRONG, graded by grade_class with one worker per GPU. The
reference earns every point, throughput included (timed by the judge's clock); each mistake
earns what the self-check gives it, and no throughput points. With COURSE_CLASS_RESULTS set,
each student's points, grading time and reasons are appended there as a Markdown table
(results/gpu/: scripts/gpu_run.sh class)."""
import os
import time
from pathlib import Path

import nbformat
import pytest
import torch

from autograder import exercises
from autograder.instructor.grade_class import grade_class
from test_nbgrader_pipeline import (WRONG, cell_scores, expected_points, graded_seeds, new_course,
                                    submit_reference_and_mistakes)

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
RESULTS_VAR = "COURSE_CLASS_RESULTS"


def throughput_verdict(course: Path, assignment: str, student: str) -> str:
    """The first line the graded throughput test printed (the ratio and the threshold)."""
    nb = nbformat.read(course / "autograded" / student / assignment / f"{assignment}.ipynb", as_version=4)
    printed, = ["".join(o.get("text", "") for o in c.get("outputs", [])) for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "test_throughput"]
    return printed.strip().splitlines()[0] if printed.strip() else "(nothing printed)"


def record(course: Path, assignment: str, grades, seconds: float) -> None:
    path = os.environ.get(RESULTS_VAR)
    if not path:
        return
    lines = [f"\n## {assignment}: {len(grades)} students in {seconds:.0f} s on {torch.cuda.device_count()} GPU(s) "
             f"({torch.cuda.get_device_name()}, torch {torch.__version__})\n",
             "| student | points | seconds | failing tests and why |", "|---|---|---|---|"]
    lines += [f"| {g.student} | {g.score:g}/{g.max_score:g} | {g.seconds:.1f} | "
              f"{'; '.join(g.reasons).replace('|', '/') or 'all passed: ' + throughput_verdict(course, assignment, g.student)} |"
              for g in grades]
    with Path(path).open("a") as f:
        f.write("\n".join(lines) + "\n")


@pytest.mark.parametrize("assignment", sorted(WRONG))
def test_a_class_of_the_reference_and_its_mistakes_on_every_gpu(assignment, tmp_path):
    course = new_course(tmp_path, assignment)
    answers = submit_reference_and_mistakes(course, assignment)
    start = time.monotonic()
    grades = grade_class(course, assignment)
    record(course, assignment, grades, time.monotonic() - start)
    points = exercises.get(assignment).points
    assert cell_scores(course, assignment, "ref") == {
        "test_correctness": points["correctness"], "test_hidden": points["hidden"],
        "test_throughput": points["throughput"]}, next(g.reasons for g in grades if g.student == "ref")
    for student, answer_cell in answers.items():
        if student != "ref":
            assert cell_scores(course, assignment, student) == pytest.approx(
                expected_points(assignment, answer_cell, graded_seeds(course, assignment, student))), student
