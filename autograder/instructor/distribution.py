"""The course as students get it: lessons, problem sets and the runtime, and no answer.

This repository is the instructor's: ``solutions/`` holds every reference answer and every
problem set's hidden cases, ``source/`` the notebooks with their solutions and hidden tests.
``triton-course distribute DEST`` writes the students' copy to DEST, a new folder:
the ``autograder`` package (with the lessons' live kernels, :mod:`autograder.kernels`), the
lessons, the problem sets as released (``student/``), the set-up script and READMEs of its
own (English and Chinese). Publish DEST (the repository the Colab badges point at, ``[tool.triton-course]
repository`` in pyproject.toml, or a JupyterHub image) and keep this repository private.
What a student installs from it can check visible cases, run quizzes and plot; it cannot
grade hidden cases, because it does not have them (:meth:`autograder.spec.Exercise.hidden_cases`).
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("autograder", "notebooks", "student", "scripts/setup_env.sh", "environment.yml", "results/gpu/*.png")
"""What the students' copy takes from this repository, as it is (the figures are the lessons'
reference runs on an H200)."""
INSTRUCTOR_ONLY = ("solutions", "source", "tests", "docs", "nbgrader_config.py")
"""What it never takes (a test checks the copy against both lists)."""
READMES = {"README.md": ROOT / "docs" / "student-readme.md", "README.zh.md": ROOT / "docs" / "student-readme.zh.md"}
"""The students' copy's READMEs, in English and in Chinese."""


def student_pyproject() -> str:
    """pyproject.toml without the instructor's ``solutions`` package."""
    text = (ROOT / "pyproject.toml").read_text()
    packages = re.search(r"^packages = \[(.*?)\]", text, re.M | re.S)
    kept = [p for p in re.findall(r'"([^"]+)"', packages.group(1)) if p.split(".")[0] != "solutions"]
    return text.replace(packages.group(0), "packages = [" + ", ".join(f'"{p}"' for p in kept) + "]")


def build(dest: Path) -> Path:
    """Write the students' copy of the course to ``dest``, which must not exist yet."""
    dest = Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest} exists: give a new folder")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")
    for source in (path for name in COPIED for path in sorted(ROOT.glob(name))):
        target = dest / source.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=ignore)
        else:
            shutil.copy2(source, target)
    (dest / "pyproject.toml").write_text(student_pyproject())
    for name, source in READMES.items():
        shutil.copy2(source, dest / name)
    return dest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="a new folder for the students' copy")
    args = parser.parse_args(argv)
    print(f"wrote the students' copy of the course to {build(args.dest)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
