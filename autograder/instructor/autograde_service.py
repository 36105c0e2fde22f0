"""One grading worker's nbgrader: a process that autogrades one student after another through
nbgrader's own API (``NbGraderAPI.autograde``, what nbgrader's formgrader calls), so that
nbgrader, its dependencies and the course (torch among them) are imported once per worker
instead of once per student: about 3 s of a PS1 student's 10-11 s on two CPU cores
(results/gpu/NOTES.md, 2026-12-06 (d)).

Nothing of a student's runs here: each student is graded in a course folder of its own, by a
new nbgrader app with the course's ``nbgrader_config.py`` (and only that file: the global
Jupyter config folders the command line would also read play no part), in a new kernel,
which has the answer cells run in runner processes (:mod:`autograder.grading`).

Protocol (:class:`~.grade_workers.Service` speaks it): one JSON line per student on stdin,
``{"root", "assignment", "student", "env"}`` (``env``: variables set for that student only);
one JSON line back per student on the file descriptor named by the first argument,
nbgrader's ``{"success", "log", "error"}`` and ``"seconds"``, how long that student's autograde
took: not this process's start nor the machine's one-off build of Triton's host modules.
Whatever else this process and its kernels print goes to stdout and stderr (the caller keeps
it with the student's log).
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import time
import traceback
import warnings


def autograde(root: str, assignment: str, student: str) -> dict:
    """``nbgrader autograde ASSIGNMENT --student STUDENT --create --force`` in ``root``."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=root).load_config()
    config.CourseDirectory.root = root
    api = NbGraderAPI(CourseDirectory(config=config), config=config)
    return api.autograde(assignment, student, force=True, create=True)


def main(argv: list[str]) -> int:
    from sqlalchemy.exc import SAWarning

    from autograder import settings
    from autograder.grading import host_modules

    if (cpus := settings.WORKER_CPUS.get()) is not None:  # before any kernel: all it starts keeps to them
        os.sched_setaffinity(0, cpus)
    importlib.import_module("autograder.exercises")  # torch and the course: once here, not once per student
    warnings.simplefilter("ignore", SAWarning)  # nbgrader's add_submission builds rows before adding them
    answers = os.fdopen(int(argv[0]), "w")
    home, environment = os.getcwd(), dict(os.environ)
    for line in sys.stdin:
        job = json.loads(line)
        os.environ.clear()
        os.environ.update(environment | job["env"])
        tempfile.tempdir = None  # read TMPDIR again: each student's is their own, removed after them
        host_modules.ensure(job["assignment"])  # once per machine, before any student's clock starts
        os.chdir(job["root"])
        start = time.monotonic()
        try:
            result = autograde(job["root"], job["assignment"], job["student"])
        except Exception:  # nbgrader's own failures come back in the result; anything else, here
            result = {"success": False, "error": traceback.format_exc()}
        finally:
            os.chdir(home)  # the student's folder is removed next
        answers.write(json.dumps(result | {"seconds": time.monotonic() - start}) + "\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
