"""Autograde a whole class, students side by side, and print who got what and why.

``triton-course grade ps1_broadcast_add`` (from the course root, after
``nbgrader collect``) runs ``nbgrader autograde`` for each student in ``submitted/`` in a
process and a copy of the course of its own, several at once, one GPU each
(:mod:`autograder.instructor.grade_workers`; ``--workers``), so a notebook that is broken, hangs or
crashes costs only its own student; this process alone writes the gradebook. Then it prints
a table: points, the tests that lost points, and why, and which locked cells a student
changed (each is graded as released: :mod:`autograder.grading.autograde`).

Each student's result is saved as soon as they are graded, in ``grades/<assignment>.json`` and
``.csv`` beside the gradebook; ``--resume`` skips students already graded on the same
notebook, ``--show`` prints the table from what was saved. Before anyone is graded, the set-up
is checked (:func:`setup_problems`): a run that would grade wrongly stops with a sentence.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import json
import os
import re
import signal
import sys
from concurrent.futures import Future, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry

import solutions

from . import grade_workers
from .review import review_notes
from ..report import case_mark
from ..grading import confine, sandbox
from ..grading.autograde import (grade_id, gradebook_cells, locked_cell_changes, moved_locked_cells,
                                 released_cells)

RESULTS_FOLDER = "grades"
"""Beside the gradebook: ``<assignment>.json`` and ``.csv``, rewritten after every student;
``logs/`` (what nbgrader printed for students it could not grade) and ``work/`` (the workers'
copies of the course, each removed when its student is done)."""
CLOSED_TO_GRADING_USER = ("submitted", "autograded", "feedback", "source", "release", "exchange", "gradebook.db",
                          RESULTS_FOLDER)
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
    """One line per locked cell the student changed, and whether the released one was graded;
    one naming what in the answer cells to review by hand (:mod:`.review`)."""
    graded: bool = True
    """False when nbgrader could not grade the notebook at all (``reasons`` says why)."""
    seconds: float = 0.0
    """How long grading this student took."""
    notebook: str = ""
    """The SHA-256 of the submitted notebooks, so ``--resume`` knows a resubmission."""
    seeds: dict[str, int] = field(default_factory=dict)
    """The seed of each graded test's inputs, by its cases: ``check(EXERCISE, fn, cases="hidden",
    seed=...)`` replays a verdict on the same inputs (on the same kind of device)."""


PART_OF_CELL = {"test_correctness": "correctness", "test_hidden": "hidden", "test_throughput": "throughput"}


class SetupError(RuntimeError):
    """The course is set up so that grading would go wrong: nothing is graded."""


def submission_digest(course: Path, assignment: str, student: str) -> str:
    digest = hashlib.sha256()
    for path in sorted((course / "submitted" / student / assignment).glob("*.ipynb")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def saved(course: Path, assignment: str) -> dict[str, StudentGrade]:
    """The results saved by earlier runs, by student."""
    path = course / RESULTS_FOLDER / f"{assignment}.json"
    if not path.exists():
        return {}
    return {name: StudentGrade(**record) for name, record in json.loads(path.read_text()).items()}


def save(course: Path, assignment: str, grades: dict[str, StudentGrade]) -> None:
    """Write the JSON and the CSV whole, each to a new file renamed over the old one: a run
    stopped at any moment leaves the last complete pair."""
    folder = course / RESULTS_FOLDER
    folder.mkdir(exist_ok=True)
    records = {name: dataclasses.asdict(g) for name, g in sorted(grades.items())}
    _replace(folder / f"{assignment}.json", json.dumps(records, indent=1, ensure_ascii=False))
    rows = [["student", "score", "max_score", "graded", "seconds", "failing", "reasons", "notes"]]
    rows += [[g.student, f"{g.score:g}", f"{g.max_score:g}", g.graded, f"{g.seconds:.1f}", " ".join(g.failing),
              " | ".join(g.reasons), " | ".join(g.notes)] for g in (grades[n] for n in sorted(grades))]
    _replace(folder / f"{assignment}.csv", rows)


def _replace(path: Path, content) -> None:
    part = path.with_name(path.name + ".part")
    with part.open("w", newline="") as f:
        if isinstance(content, str):
            f.write(content)
        else:
            csv.writer(f).writerows(content)
    os.replace(part, path)


def setup_problems(course: Path, assignment: str) -> list[str]:
    """What would make grading this class go wrong, one sentence each: nbgrader's settings not
    the course's (hidden tests would show in the feedback, the student's cells would run in
    the tests' kernel), a grading user who cannot run Python, points in the package that differ
    from the gradebook's, a rubric (points, threshold) that differs from the one released."""
    problems = []
    if not (course / "gradebook.db").exists():
        problems.append(f"{course} has no gradebook.db: run `nbgrader generate_assignment {assignment}` there first.")
    config = course / "nbgrader_config.py"
    if not config.exists() or "autograder.grading.autograde.ExecuteInstructorCells" not in config.read_text():
        problems.append(f"{config} is missing or is not the course's: nbgrader would run the student's cells "
                        "beside the tests and show hidden tests in the feedback. Copy the course's "
                        "nbgrader_config.py there, or pass --course the course root.")
    try:
        if (user := sandbox.grading_user()) is not None:
            sandbox.check_interpreter_runs_as(user, sys.executable)
    except (PermissionError, KeyError) as error:
        problems.append(str(error).strip("'\""))
    problems += _points_differ(course, assignment)
    problems += _rubric_differs(course, assignment)
    return problems


def _points_differ(course: Path, assignment: str) -> list[str]:
    from .. import exercises
    if assignment not in exercises.ASSIGNMENTS or not (course / "gradebook.db").exists():
        return []
    declared = exercises.get(assignment).points
    try:
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            cells = {c.name: c.max_score for c in gb.find_notebook(assignment, assignment).grade_cells}
    except MissingEntry:
        return []
    differ = [f"{name} is worth {cells[name]:g} in the gradebook and {declared[part]:g} in the package"
              for name, part in PART_OF_CELL.items() if name in cells and part in declared
              and cells[name] != declared[part]]
    if not differ:
        return []
    return [f"{'; '.join(differ)}: run `nbgrader generate_assignment {assignment} --force` after changing "
            "the declaration (and reinstall the package where grading runs)."]


def _rubric_differs(course: Path, assignment: str) -> list[str]:
    """The released notebook's rubric (points and threshold, as students read it) against the
    one the package grades by."""
    from .. import exercises
    from .sync import rubric
    released = course / "release" / assignment / f"{assignment}.ipynb"
    if assignment not in exercises.ASSIGNMENTS or not released.exists():
        return []
    cells = nbformat.read(released, as_version=4).cells
    told = next((c.source for c in cells if c.cell_type == "markdown" and c.source.startswith("### Rubric")), None)
    graded = rubric(assignment)
    if told is None or told == graded:
        return []
    changed = [f"'{new}' where students read '{old}'" for old, new in zip(told.splitlines(), graded.splitlines())
               if old != new]
    return [f"the package grades {assignment} by another rubric than the released notebook shows: "
            f"{'; '.join(changed) or graded}. Run `triton-course sync` and `nbgrader generate_assignment "
            f"{assignment} --force`, release it again, and reinstall the package where grading runs."]


def unreadable(course: Path, assignment: str, student: str) -> str | None:
    """Why a submission cannot be graded at all (no notebook of the released name, nor a lone
    notebook to take for it; not JSON, text nbgrader cannot write out again such as a lone UTF-16
    surrogate, no cells), or None."""
    sent = grade_workers.sent_notebooks(course / "submitted" / student / assignment)
    released = grade_workers.released_notebooks(course, assignment)
    if released and not grade_workers.graded_notebooks(released, sent):
        return (f"the submission holds no {' or '.join(released)}"
                + (f" (it holds {', '.join(p.name for p in sent)})" if sent else " (nor any notebook)"))
    for path in sent:
        try:
            nb = nbformat.read(path, as_version=4)
            nbformat.writes(nb).encode()
        except Exception as error:  # any parse failure: the student gets the reason
            return f"{path.name} is not a readable notebook ({type(error).__name__}: {str(error).splitlines()[0]})"
        if not nb.cells:
            return f"{path.name} has no cells"
    return None


def failing_reason(notebook: dict, cell_id: str) -> str:
    """The first line of the error a graded cell printed, e.g. ``GradingFailure: ...``; for
    partial credit, the first failed case of the verdict it printed (``❌ failed label``, then why)."""
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
        failed = case_mark(False)  # in the grading run's language, as the verdicts were printed
        first = next((i for i, line in enumerate(lines) if line.startswith(failed)), None)
        if first is None and lines:  # no case failed: the verdict's own first line (a throughput)
            return lines[0]
        if first is None or first + 1 == len(lines):
            return "partial credit (see the cell's output)"
        return f"partial credit; the first failure, {lines[first].removeprefix(failed).strip()}: {lines[first + 1]}"
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


def locked_cell_notes(course: Path, assignment: str, student: str, paths: dict[str, Path]) -> list[str]:
    """What the student did to the locked cells of the submitted notebooks ``paths`` (by the name
    of the released notebook each was graded as), checked against what nbgrader then graded."""
    notes = []
    for graded_as, path in paths.items():
        released = released_cells(course, assignment, graded_as)
        changes = locked_cell_changes(nbformat.read(path, as_version=4).cells, released)
        if not changes:
            continue
        graded = course / "autograded" / student / assignment / f"{graded_as}.ipynb"
        notebook = json.loads(graded.read_text()) if graded.exists() else {}
        ok = graded_as_released(notebook, gradebook_cells(f"sqlite:///{course / 'gradebook.db'}", assignment, graded_as))
        if moved_locked_cells(notebook.get("cells", []), released):  # the graded ones ran out of order
            ok -= {name for name, change in changes.items() if change == "moved"}
        notes += [f"locked cell {name} {change}: "
                  + ("graded as released" if name in ok else "NOT graded as released, check it by hand")
                  for name, change in changes.items()]
    return notes


def collect_grade(course: Path, assignment: str, result: grade_workers.Result) -> StudentGrade:
    """One student's line of the class table, read from the gradebook once the result is merged."""
    grade = StudentGrade(result.student, graded=result.problem is None, seconds=result.seconds, seeds=result.seeds)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        submission = gb.find_submission(assignment, result.student)
        grade.score, grade.max_score = submission.score, submission.max_score
        if result.problem is not None:
            grade.failing, grade.reasons = ["(whole notebook)"], [result.problem]
            return grade
        read = grade_workers.graded_notebooks([f"{nb.name}.ipynb" for nb in submission.notebooks],
                                              grade_workers.sent_notebooks(course / "submitted" / result.student / assignment))
        graded = {name.removesuffix(".ipynb"): path for name, path in read.items()}
        try:
            grade.notes = (locked_cell_notes(course, assignment, result.student, graded)
                           + review_notes(list(graded.values())))
        except Exception as error:  # a notebook nbgrader graded may still defeat this reading: grade on
            grade.notes = [f"review failed ({type(error).__name__}: {error}): read the notebooks by hand"]
        for nb in submission.notebooks:
            path = course / "autograded" / result.student / assignment / f"{nb.name}.ipynb"
            notebook = json.loads(path.read_text()) if path.exists() else {}
            for g in sorted(nb.grades, key=lambda g: g.name):
                if g.score < g.max_score:
                    grade.failing.append(g.name)
                    grade.reasons.append(f"{g.name}: {failing_reason(notebook, g.name)}")
    grade.reasons, grade.notes = [printable(r) for r in grade.reasons], [printable(n) for n in grade.notes]
    return grade


def printable(text: str) -> str:
    """``text`` with its control characters written out (``\\x1b``): a message a student's code
    wrote must not move the cursor of the terminal the class table is printed on."""
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", text)


def grade_class(course: Path, assignment: str, only: list[str] | None = None, resume: bool = False,
                workers: int | None = None, scheduler: str | None = None) -> list[StudentGrade]:
    """Autograde every student in ``submitted/`` (or those in ``only``), with ``workers``
    workers on this machine (:func:`grade_workers.slots`) or on the Dask cluster whose
    scheduler is at ``scheduler``, saving each result as it comes; ``resume`` keeps saved
    results of unchanged notebooks. Raises :class:`SetupError` before grading anyone when
    :func:`setup_problems` finds any."""
    from tqdm import tqdm

    problems = setup_problems(course, assignment)
    work = course / RESULTS_FOLDER / "work"
    try:
        pool = grade_workers.LocalPool(workers, work) if scheduler is None else grade_workers.DaskPool(scheduler)
    except (ValueError, OSError) as error:  # too many workers for the GPUs; no cluster there
        problems.append(str(error))
    if problems:
        raise SetupError("\n".join(problems))
    students = sorted(p.parent.name for p in (course / "submitted").glob(f"*/{assignment}")
                      if only is None or p.parent.name in only)
    results = saved(course, assignment)
    digests = {student: submission_digest(course, assignment, student) for student in students}
    todo = [s for s in students if not (resume and s in results and results[s].graded
                                        and results[s].notebook == digests[s])]
    print(pool.describe(), flush=True)
    work.mkdir(parents=True, exist_ok=True)
    _close_course(course)
    gradebook = grade_workers.snapshot(course / "gradebook.db")
    failed = 0
    try:
        futures, left_out, renamed = [], {}, {}
        for student in todo:
            if (problem := unreadable(course, assignment, student)) is not None:
                futures.append(Future())
                futures[-1].set_result(grade_workers.Result(student, problem))
            else:
                job = grade_workers.make_job(course, assignment, student, gradebook)
                left_out[student], renamed[student] = job.left_out, job.renamed
                futures.append(pool.submit(job))
        with tqdm(total=len(todo), unit="student", dynamic_ncols=True) as bar:
            for future in as_completed(futures):
                result = future.result()
                with _uninterrupted():  # a Ctrl-C waits until this student is merged and saved
                    grade_workers.merge(course, assignment, result)
                    grade = collect_grade(course, assignment, result)
                    grade.notebook = digests[result.student]
                    if left_out.get(result.student):
                        grade.notes.append(printable("left out of grading, not regular files (links?): "
                                                     + ", ".join(left_out[result.student])))
                    if renamed.get(result.student):
                        grade.notes.append(printable("graded " + ", ".join(renamed[result.student])
                                                     + ": the submission holds no notebook of the released name"))
                    if result.problem is not None:
                        grade.reasons[0] += f" (nbgrader's output: {_save_log(course, assignment, result)})"
                    elif result.retried is not None:
                        grade.notes.append(printable(f"graded at the second attempt: nbgrader failed the first "
                                                     f"({result.retried}; its output: "
                                                     f"{_save_log(course, assignment, result)})"))
                    results[result.student] = grade
                    save(course, assignment, results)
                    _close_course(course)
                failed += result.problem is not None
                bar.set_postfix_str(f"{result.student} {result.seconds:.0f} s, {failed} not graded", refresh=False)
                bar.update()
    except BaseException:
        pool.stop()
        raise
    finally:
        pool.close()
    return [results[s] for s in students]


def _close_course(course: Path) -> None:
    """With a grading user, take "others" off what the student's code may not read (again
    after each student: nbgrader adds files), and off the reference solutions."""
    if sandbox.grading_user() is not None:
        sandbox.close_to_others(*(course / name for name in CLOSED_TO_GRADING_USER),
                                Path(solutions.__file__).parent)


def _save_log(course: Path, assignment: str, result: grade_workers.Result) -> str:
    path = course / RESULTS_FOLDER / "logs" / assignment / f"{result.student}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.log or "(nbgrader was not run)\n")
    return str(path.relative_to(course))


@contextmanager
def _uninterrupted():
    """Hold back a Ctrl-C (SIGINT) until the block is done, then raise it."""
    caught = []
    try:
        previous = signal.signal(signal.SIGINT, lambda *_: caught.append(True))
    except ValueError:  # not the main thread: nothing to hold back
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def table(assignment: str, grades: list[StudentGrade]) -> str:
    lines = [f"{assignment}: {len(grades)} students", f"{'student':<20} {'points':>11}  failing tests and why"]
    for g in grades:
        points = f"{g.score:g}/{g.max_score:g}" if g.max_score else "0/?"
        why = "; ".join(g.reasons + g.notes if g.reasons else ["all passed"] + g.notes)
        lines.append(printable(f"{g.student:<20} {points:>11}  {why}"))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignment")
    parser.add_argument("--course", type=Path, default=Path.cwd(), help="the course root (default: here)")
    parser.add_argument("--student", action="append", help="grade only this student (repeatable)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, help="students graded at once (default: one per GPU, "
                        "else one per CPU core up to 4)")
    where.add_argument("--scheduler", metavar="ADDRESS", help="grade on the Dask cluster whose scheduler is at "
                        "ADDRESS (e.g. tcp://10.0.0.5:8786) instead of on this machine")
    parser.add_argument("--resume", action="store_true", help="skip students already graded on the same notebook")
    parser.add_argument("--show", action="store_true", help="print the saved results; grade no one")
    args = parser.parse_args(argv)
    course = args.course.resolve()
    if args.show:
        grades = [g for name, g in sorted(saved(course, args.assignment).items())
                  if not args.student or name in args.student]
    else:
        print(confine.summary())
        try:
            grades = grade_class(course, args.assignment, args.student, resume=args.resume, workers=args.workers,
                                 scheduler=args.scheduler)
        except SetupError as error:
            print(f"grading stopped before anyone was graded:\n{error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            done = saved(course, args.assignment)
            print(f"\nstopped: {len(done)} results saved in {course / RESULTS_FOLDER}; the students being graded "
                  "were not saved. Run again with --resume to go on.", file=sys.stderr)
            return 130
    if not grades:
        print(f"no results for {args.assignment} in {course}: run `nbgrader collect` first")
        return 1
    print(table(args.assignment, grades))
    ungraded = [g.student for g in grades if not g.graded]
    if ungraded:
        print(f"{len(ungraded)} could not be graded: {', '.join(ungraded)} (their reasons are above)", file=sys.stderr)
    return 1 if ungraded else 0


if __name__ == "__main__":
    sys.exit(main())
