"""``triton-course``: the course's commands under one name.

    triton-course grade ASSIGNMENT [...]   autograde a class (autograder.instructor.grade_class)
    triton-course bench [...]              the GPU benchmark (autograder.bench)
    triton-course sync [--check]           regenerate every generated notebook cell, then the
                                           student versions and the guide's settings table
                                           (--check: report drift, change nothing)
    triton-course distribute DEST          write the students' copy (autograder.instructor.distribution)
    triton-course new psN_name "Title"     start a problem set from templates/problem_set/, then
                                           print what is left by hand (autograder.instructor.scaffold)

``triton-course COMMAND --help`` shows a command's options; each is also ``python -m`` its module.
"""
from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {"grade": "autograder.instructor.grade_class", "bench": "autograder.bench.run",
            "distribute": "autograder.instructor.distribution", "new": "autograder.instructor.scaffold"}


def sync(argv: list[str]) -> int:
    """The graded cells and rubrics from the declarations, then the student versions from the
    source notebooks (in that order: the second reads what the first writes), then the guide's
    table of settings."""
    parser = argparse.ArgumentParser(prog="triton-course sync", description=sync.__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift, change nothing")
    check = ["--check"] if parser.parse_args(argv).check else []
    from .. import settings
    from . import student_versions, sync as notebooks
    return max(notebooks.main(check), student_versions.main(check), settings.main(check))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "sync":
        return sync(rest)
    if command not in COMMANDS:
        print(f"triton-course: no command {command!r}; the commands are {', '.join(['sync', *COMMANDS])} "
              "(triton-course --help)", file=sys.stderr)
        return 2
    sys.argv[0] = f"triton-course {command}"  # what the command's --help calls it
    return importlib.import_module(COMMANDS[command]).main(rest)


if __name__ == "__main__":
    sys.exit(main())
