"""Start a new problem set from the templates in templates/problem_set/.

``triton-course new psN_name "One-line title"`` writes the declaration
(``autograder/assignments/psN_name.py``), the reference solution (``solutions/name.py``, named
for the function students write), the nbgrader source notebook (``source/psN_name/``) and the
tests (``tests/test_psN_name.py``): a stand-in exercise, out = 2·x, that imports, runs and
passes, its lines to replace marked PLACEHOLDER. Then it fills the notebook's generated cells,
writes the student version, and prints what is left to do by hand (CONTRIBUTING.md lists it too).
"""
from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from pathlib import Path
from string import Template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates" / "problem_set"
NAME = re.compile(r"ps(\d)_([a-z][a-z0-9]*(?:_[a-z0-9]+)*)")

CHECKLIST = """\
Left to do by hand (CONTRIBUTING.md, "Add a problem set"):
  1. Replace every PLACEHOLDER: grep -n PLACEHOLDER $files
     the kernel and HIDDEN_CASES, the declaration (signature, inputs, cases, tolerances with
     their reasons, baseline, threshold, points), the notebook's prose, and the tests: a wrong
     version for each mistake students make.
  2. triton-course sync, after every change to the declaration or the solution.
  3. tests/test_nbgrader_pipeline.py: WRONG["$name"], two or three edits of the answer that lose points.
  4. README.md: a row in "Lessons and assignments" and one in "GPU results" (tests/test_readme.py).
  5. On a GPU: bash scripts/gpu_run.sh bench --only $name, for the threshold; a sweep over
     sizes, if the kernel deserves one, goes in autograder/bench/sweeps.py.
  6. The lesson before it: a "Next" link to student/$name/$name.ipynb, and its Chinese table if any.
  7. make test: tests/test_problem_sets.py fails until the answer has 10 lines no lesson prints."""


class Refused(ValueError):
    """A name that cannot be a new problem set; the message says why, in a sentence."""


def targets(name: str) -> dict[str, Path]:
    """Each template's file name, and where ``name``'s copy of it goes."""
    function = NAME.fullmatch(name).group(2)
    return {"assignment.py.tmpl": ROOT / "autograder" / "assignments" / f"{name}.py",
            "solution.py.tmpl": ROOT / "solutions" / f"{function}.py",
            "source.ipynb": ROOT / "source" / name / f"{name}.ipynb",
            "test.py.tmpl": ROOT / "tests" / f"test_{name}.py"}


def check_name(name: str) -> None:
    """Raise :class:`Refused` unless ``name`` is well formed, new, and takes the next number."""
    match = NAME.fullmatch(name)
    if not match:
        raise Refused(f"{name!r} is not a problem set name: write ps<digit>_<snake_case>, e.g. ps6_layer_norm.")
    taken = {int(p.name[2]): p.stem for p in (ROOT / "autograder" / "assignments").glob("ps[0-9]_*.py")}
    following = max(taken, default=0) + 1
    number = int(match.group(1))
    if name in taken.values() or (ROOT / "source" / name).exists():
        raise Refused(f"{name} exists already: pick a new name, or edit its declaration, "
                      f"autograder/assignments/{name}.py.")
    if number in taken:
        raise Refused(f"ps{number} is taken by {taken[number]}: the next problem set is ps{following}.")
    if number != following:
        raise Refused(f"ps{number} is out of order: the problem sets go ps1 to ps{following - 1}, "
                      f"so the next is ps{following}.")
    for path in targets(name).values():
        if path.exists():
            raise Refused(f"{path.relative_to(ROOT)} exists already: pick a name whose files are new.")


def scaffold(name: str, title: str) -> list[Path]:
    """Write ``name``'s files from the templates, fill its generated cells and its student
    version; return the files written."""
    if not TEMPLATES.is_dir():
        raise Refused("triton-course new needs the instructor's repository: there is no templates/problem_set/ here.")
    check_name(name)
    number, function = NAME.fullmatch(name).groups()
    fields = {"name": name, "number": number, "title": title, "function": function}
    paths = targets(name)
    for template, path in paths.items():
        text = (TEMPLATES / template).read_text()
        if path.suffix == ".ipynb":  # each value goes inside a JSON string
            text = Template(text).substitute({k: json.dumps(v)[1:-1] for k, v in fields.items()})
        else:
            text = Template(text).substitute(fields)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    from .. import exercises
    from . import student_versions, sync
    importlib.invalidate_caches()
    importlib.reload(exercises)  # read when autograder was imported, before the new declaration existed
    sync.sync(paths["source.ipynb"])
    student_versions.sync(name)
    return [*paths.values(), student_versions.student_path(name)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="ps<digit>_<snake_case>, the digit the next free number (e.g. ps6_layer_norm)")
    parser.add_argument("title", help='one line, as the notebook\'s heading shows it (e.g. "Layer norm")')
    args = parser.parse_args(argv)
    try:
        written = scaffold(args.name, args.title)
    except Refused as refusal:
        print(f"triton-course new: {refusal}", file=sys.stderr)
        return 2
    files = [str(p.relative_to(ROOT)) for p in written]
    print(f"{args.name}, a stand-in (out = 2·x) that runs and passes its tests:\n  " + "\n  ".join(files))
    print(Template(CHECKLIST).substitute(name=args.name, files=" ".join(files[:-1])))  # not the student version
    return 0


if __name__ == "__main__":
    sys.exit(main())
