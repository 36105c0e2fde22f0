"""The student version of every assignment, as nbgrader releases it, kept in ``student/``.

Colab opens notebooks from GitHub, so an assignment's "Open in Colab" badge needs a committed
notebook without the solutions and hidden tests: ``student/<assignment>/<assignment>.ipynb``,
made by ``nbgrader generate_assignment`` from ``source/`` in a scratch course (so the course's
own ``release/`` folder and gradebook stay the instructor's). Students without nbgrader open the
same files locally.

``python -m autograder.instructor.student_versions`` rewrites them; ``--check`` only reports the ones that
differ from a fresh release (a test runs it).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIR = ROOT / "source"
STUDENT_DIR = ROOT / "student"


def assignments() -> list[str]:
    return sorted(p.name for p in SOURCE_DIR.iterdir() if (p / f"{p.name}.ipynb").exists())


def student_path(assignment: str) -> Path:
    return STUDENT_DIR / assignment / f"{assignment}.ipynb"


def released(assignment: str) -> str:
    """The text of the notebook nbgrader releases for ``assignment`` from ``source/``."""
    with tempfile.TemporaryDirectory(prefix="student-version-") as tmp:
        course = Path(tmp)
        shutil.copy(ROOT / "nbgrader_config.py", course)
        shutil.copytree(SOURCE_DIR / assignment, course / "source" / assignment)
        # nbgrader runs `alembic` from this interpreter's environment
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--force"],
                              cwd=course, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"nbgrader generate_assignment {assignment} failed:\n{done.stdout}{done.stderr}")
        return (course / "release" / assignment / f"{assignment}.ipynb").read_text()


def sync(assignment: str, write: bool = True) -> bool:
    """Bring ``student/`` in step for one assignment; return whether it was (or would be) changed."""
    want, path = released(assignment), student_path(assignment)
    if path.exists() and path.read_text() == want:
        return False
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(want)
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift, change nothing")
    args = parser.parse_args(argv)
    names = assignments()
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:  # one nbgrader process each
        changed = [a for a, c in zip(names, pool.map(lambda a: sync(a, write=not args.check), names)) if c]
    for a in changed:
        print(("drifted: " if args.check else "updated: ") + str(student_path(a).relative_to(ROOT)))
    return 1 if (changed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
