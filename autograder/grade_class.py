"""Autograde a whole class, one student at a time, and print who got what and why.

``python -m autograder.grade_class ps1_vector_add`` (from the course root, after
``nbgrader collect``) runs ``nbgrader autograde`` for each student in ``submitted/`` in a
process of its own, so a notebook that is broken, hangs or crashes costs only its own
student; then it prints a table: points, the tests that lost points, and why, and which
locked cells a student changed (each is graded as released: :mod:`autograder.grading.autograde`).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry

import solutions

from .grading import confine, sandbox
from .grading.autograde import grade_id, gradebook_cells, locked_cell_changes, released_cells

STUDENT_TIMEOUT_S = 1800
CLOSED_TO_GRADING_USER = ("submitted", "autograded", "feedback", "source", "exchange", "gradebook.db")
"""What the student's code may not read when it runs as :data:`sandbox.GRADING_USER_VAR`."""


@dataclass
class StudentGrade:
    """One student's result on one assignment."""

    student: str
    score: float = 0.0
    max_score: float = 0.0
    failing: list[str] = field(default_factory=list)
    """Names of the graded cells that lost points."""
    reasons: list[str] = field(default_factory=list)
    """One line per failing cell (or per failure to grade at all)."""
    notes: list[str] = field(default_factory=list)
    """One line per locked cell the student changed, and whether the released one was graded."""


def unreadable(course: Path, assignment: str, student: str) -> str | None:
    """Why a submitted notebook cannot be graded at all (not JSON, no cells), or None."""
    for path in sorted((course / "submitted" / student / assignment).glob("*.ipynb")):
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception as error:  # any parse failure: the student gets the reason
            return f"{path.name} is not a readable notebook ({type(error).__name__}: {str(error).splitlines()[0]})"
        if not nb.cells:
            return f"{path.name} has no cells"
    return None


def autograde(course: Path, assignment: str, student: str) -> str | None:
    """Run nbgrader for one student; None on success, else the last line nbgrader printed."""
    if (problem := unreadable(course, assignment, student)) is not None:
        return problem
    cmd = [sys.executable, "-m", "nbgrader", "autograde", assignment, "--student", student,
           "--create", "--force"]
    try:
        done = subprocess.run(cmd, cwd=course, capture_output=True, text=True, timeout=STUDENT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"grading took longer than {STUDENT_TIMEOUT_S} s and was stopped"
    if done.returncode == 0:
        return None
    lines = [l for l in (done.stderr + done.stdout).splitlines() if l.strip()]
    errors = [l for l in lines if "Error" in l or "error" in l] or lines or ["nbgrader failed"]
    return errors[-1].strip()


def failing_reason(notebook: dict, cell_id: str) -> str:
    """The first line of the error a graded cell printed, e.g. ``GradingFailure: ...``; for
    partial credit, the first failed case of the verdict it printed (``❌ label``, then why)."""
    for cell in notebook.get("cells", []):
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") != cell_id:
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                ename, evalue = output.get("ename"), output.get("evalue", "")
                text = evalue if ename == "GradingFailure" else f"{ename}: {evalue}"
                return (text.splitlines() or [ename])[0]
        printed = "".join(_joined(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        lines = [line.strip() for line in printed.splitlines()]
        first = next((i for i, line in enumerate(lines) if line.startswith("❌")), None)
        if first is None or first + 1 == len(lines):
            return "partial credit (see the cell's output)"
        return f"partial credit; the first failure, {lines[first][1:].strip()}: {lines[first + 1]}"
    return "cell missing from the submission"


def _joined(text) -> str:
    """A notebook's text field: one string, or the list of lines nbformat may store."""
    return "".join(text) if isinstance(text, list) else text


def graded_as_released(notebook: dict, originals: dict) -> set[str]:
    """The locked cells that appear exactly once in a graded notebook, with the gradebook's
    type and text, and (code cells) were run."""
    ok = set()
    for name, original in originals.items():
        copies = [c for c in notebook.get("cells", []) if grade_id(c) == name]
        if len(copies) == 1 and copies[0]["cell_type"] == original.cell_type \
                and _joined(copies[0]["source"]) == original.source \
                and (original.cell_type != "code" or copies[0].get("execution_count") is not None):
            ok.add(name)
    return ok


def locked_cell_notes(course: Path, assignment: str, student: str) -> list[str]:
    """What the student did to locked cells, checked against what nbgrader then graded."""
    notes = []
    for path in sorted((course / "submitted" / student / assignment).glob("*.ipynb")):
        changes = locked_cell_changes(nbformat.read(path, as_version=4).cells,
                                      released_cells(course, assignment, path.stem))
        if not changes:
            continue
        graded = course / "autograded" / student / assignment / path.name
        ok = graded_as_released(json.loads(graded.read_text()) if graded.exists() else {},
                                gradebook_cells(f"sqlite:///{course / 'gradebook.db'}", assignment, path.stem))
        notes += [f"locked cell {name} {change}: "
                  + ("graded as released" if name in ok else "NOT graded as released, check it by hand")
                  for name, change in changes.items()]
    return notes


def collect_grade(course: Path, assignment: str, student: str, problem: str | None) -> StudentGrade:
    grade = StudentGrade(student)
    if problem is not None:
        grade.failing, grade.reasons = ["(whole notebook)"], [problem]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:  # nbgrader never got to it: record a zero, so exports list it
            gb.update_or_create_student(student)
            submission = gb.add_submission(assignment, student)
        grade.score, grade.max_score = submission.score, submission.max_score
        if problem is not None:
            return grade
        grade.notes = locked_cell_notes(course, assignment, student)
        for nb in submission.notebooks:
            path = course / "autograded" / student / assignment / f"{nb.name}.ipynb"
            notebook = json.loads(path.read_text()) if path.exists() else {}
            for g in sorted(nb.grades, key=lambda g: g.name):
                if g.score < g.max_score:
                    grade.failing.append(g.name)
                    grade.reasons.append(f"{g.name}: {failing_reason(notebook, g.name)}")
    return grade


def progress(done: int, total: int, student: str) -> None:
    width = 30
    filled = width * done // total
    end = "\n" if done == total or not sys.stdout.isatty() else "\r"
    print(f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {student:<20}", end=end, flush=True)


def grade_class(course: Path, assignment: str, only: list[str] | None = None) -> list[StudentGrade]:
    """Autograde every student in ``submitted/`` (or those in ``only``), one process each."""
    students = sorted(p.parent.name for p in (course / "submitted").glob(f"*/{assignment}")
                      if only is None or p.parent.name in only)
    grades = []
    for i, student in enumerate(students):
        if sandbox.grading_user() is not None:  # closed again before each student: nbgrader adds files
            sandbox.close_to_others(*(course / name for name in CLOSED_TO_GRADING_USER),
                                    Path(solutions.__file__).parent)
        problem = autograde(course, assignment, student)
        grades.append(collect_grade(course, assignment, student, problem))
        progress(i + 1, len(students), student)
    return grades


def table(assignment: str, grades: list[StudentGrade]) -> str:
    lines = [f"{assignment}: {len(grades)} students", f"{'student':<20} {'points':>11}  failing tests and why"]
    for g in grades:
        points = f"{g.score:g}/{g.max_score:g}" if g.max_score else "0/?"
        why = "; ".join(g.reasons + g.notes if g.reasons else ["all passed"] + g.notes)
        lines.append(f"{g.student:<20} {points:>11}  {why}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignment")
    parser.add_argument("--course", type=Path, default=Path.cwd(), help="the course root (default: here)")
    parser.add_argument("--student", action="append", help="grade only this student (repeatable)")
    args = parser.parse_args(argv)
    print(confine.summary())
    grades = grade_class(args.course.resolve(), args.assignment, args.student)
    if not grades:
        print(f"no submissions for {args.assignment} in {args.course / 'submitted'}: run `nbgrader collect` first")
        return 1
    print(table(args.assignment, grades))
    return 0


if __name__ == "__main__":
    sys.exit(main())
