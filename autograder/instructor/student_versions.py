"""The student version of every assignment, as nbgrader releases it, kept in ``student/``.

Colab opens notebooks from GitHub, so an assignment's "Open in Colab" badge needs a committed
notebook without the solutions and hidden tests: ``student/<assignment>/<assignment>.ipynb``,
made by ``nbgrader generate_assignment`` from ``source/`` in a scratch course (so the course's
own ``release/`` folder and gradebook stay the instructor's). Students without nbgrader open the
same files locally.

The Chinese version, ``student/zh/<assignment>/<assignment>.ipynb``, is nbgrader's release in
Chinese (``TRITON_COURSE_LANG=zh``, :class:`~autograder.instructor.translation.Translate`), made
for every assignment with a table in ``student/zh/translations/``.

``python -m autograder.instructor.student_versions`` rewrites them; ``--check`` only reports the ones that
differ from a fresh release (a test runs it).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

from . import sync as notebook_sync, translation
from .translation import ASSIGNMENT_TABLES

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIR = ROOT / "source"
STUDENT_DIR = ROOT / "student"
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "triton-course" / "releases"
"""Releases already made, by the digest of everything they are made from: a sync, its check and
the tests ask for the same twelve releases again and again, at 5 s of nbgrader each."""


def assignments() -> list[str]:
    return sorted(p.name for p in SOURCE_DIR.iterdir() if (p / f"{p.name}.ipynb").exists())


def versions() -> list[tuple[str, str]]:
    """Every (assignment, language) there is a student version of: English, and each language
    with a translation table."""
    return [(a, lang) for a in assignments() for lang in ("en", "zh")
            if lang == "en" or (ROOT / ASSIGNMENT_TABLES / f"{a}.yaml").exists()]


def student_path(assignment: str, language: str = "en") -> Path:
    return STUDENT_DIR.joinpath(*([] if language == "en" else [language]), assignment, f"{assignment}.ipynb")


def release_key(assignment: str, language: str) -> str:
    """A digest of what a release is made from: the assignment's source folder, its translation
    table, the nbgrader settings, the code that translates and generates cells (the rubric's and
    badge's sources are in the source notebook too), and the versions of nbgrader and Python."""
    import nbgrader
    digest = hashlib.sha256(f"{language} {nbgrader.__version__} {sys.version_info[:2]}".encode())
    inputs = [*sorted(p for p in (SOURCE_DIR / assignment).rglob("*") if p.is_file() and "__pycache__" not in p.parts),
              ROOT / ASSIGNMENT_TABLES / f"{assignment}.yaml", ROOT / "nbgrader_config.py", ROOT / "pyproject.toml",
              Path(translation.__file__), Path(notebook_sync.__file__)]
    for path in inputs:
        digest.update(path.name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"(none)"))
    return digest.hexdigest()


def released(assignment: str, language: str = "en") -> str:
    """The text of the notebook nbgrader releases for ``assignment`` from ``source/``, in ``language``
    (from :data:`CACHE_DIR` when the same inputs were released before)."""
    cached = CACHE_DIR / f"{release_key(assignment, language)}.ipynb"
    if cached.exists():
        return cached.read_text()
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with _alone(cached.with_suffix(".lock")):  # another process making the same release: wait for it
        if cached.exists():
            return cached.read_text()
        text = _release(assignment, language)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")  # written whole, then renamed: no half file
        partial.write_text(text)
        partial.replace(cached)
    return text


@contextlib.contextmanager
def _alone(lock: Path):
    """Hold ``lock`` (a file) against every other process that asks for it (where there is
    ``fcntl`` and the file system locks: elsewhere two processes may each make the same
    release, which is only slower)."""
    with open(lock, "a") as held:
        if fcntl is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(held, fcntl.LOCK_EX)
        yield


def _release(assignment: str, language: str) -> str:
    with tempfile.TemporaryDirectory(prefix="student-version-") as tmp:
        course = Path(tmp)
        shutil.copy(ROOT / "nbgrader_config.py", course)
        shutil.copytree(SOURCE_DIR / assignment, course / "source" / assignment)
        if (tables := ROOT / ASSIGNMENT_TABLES).exists():
            shutil.copytree(tables, course / ASSIGNMENT_TABLES)
        # nbgrader runs `alembic` from this interpreter's environment
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                   TRITON_COURSE_LANG=language)
        done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--force"],
                              cwd=course, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"nbgrader generate_assignment {assignment} ({language}) failed:\n"
                               f"{done.stdout}{done.stderr}")
        return (course / "release" / assignment / f"{assignment}.ipynb").read_text()


def sync(assignment: str, language: str = "en", write: bool = True) -> bool:
    """Bring ``student/`` in step for one assignment in one language; return whether it was (or
    would be) changed."""
    want, path = released(assignment, language), student_path(assignment, language)
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
    wanted = versions()
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:  # one nbgrader process each
        done = pool.map(lambda v: sync(*v, write=not args.check), wanted)
        changed = [v for v, c in zip(wanted, done) if c]
    for v in changed:
        print(("drifted: " if args.check else "updated: ") + str(student_path(*v).relative_to(ROOT)))
    return 1 if (changed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
