"""Generate the parts of notebooks that have a source elsewhere, or report that they drifted.

Cells carry ``metadata.course.role``:

- ``colab-badge`` / ``colab-install``: from ``[tool.triton-course] repository`` in pyproject.toml
  (an assignment's badge opens its student version in ``student/``);
- ``solution``: the section of a ``solutions/`` module named by ``from`` and ``section`` (a
  name, or a list of names joined in that order: a helper shared by two kernels);
- ``kernel``: the same without nbgrader's solution markers, for a lesson's live kernel;
- ``rubric``: the exercise's points and threshold, from :mod:`autograder.exercises`;
- ``test``: the nbgrader test cell of one graded ``part``, with its points.

Figures measured on a GPU are marked in Markdown, ``<!--fig:NAME-->4,027 GB/s<!--/fig-->``, and
rewritten from the record (:mod:`autograder.figures`) in every notebook, in README.md and
docs/*.md, and in the translations.

Chinese lessons, ``notebooks/zh/NN_name.ipynb``, are generated whole from the English
``notebooks/NN_name.ipynb`` (its generated cells filled first, so a kernel's comments are
translated like any other code cell's) and ``notebooks/zh/translations/NN_name.yaml``
(:mod:`.translation`); a translation whose English has changed since is reported as stale (a
figure's new value is no change: the digest blanks them). The problem sets' tables, in
``student/zh/translations/``, are applied when nbgrader releases them (:mod:`.student_versions`).

``triton-course sync`` (or ``python -m autograder.instructor.sync``) rewrites them; ``--check`` only reports (the tests use it).
"""
from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

import nbformat

from .. import exercises, figures
from ..guards import MAX_SCALAR_READS
from ..language import say, speaking
from .translation import ASSIGNMENT_TABLES, translate

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIRS = ("notebooks", "source")
SECTION_MARK = "# --- notebook cell: "
ZH_DIR = ROOT / "notebooks" / "zh"
TRANSLATIONS = ZH_DIR / "translations"
FROM_THE_ENGLISH = ("solution", "kernel", "test")
"""Roles whose cells a Chinese lesson takes from its English notebook, generated there and then
translated (their comments) like any other code cell."""


def repository() -> str:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return config["tool"]["triton-course"]["repository"].rstrip("/")


def colab_badge(path: Path) -> str:
    """The badge opening ``path`` in Colab; for an assignment, its student version (in
    ``student/``, made by :mod:`autograder.instructor.student_versions`), never the source with solutions."""
    repo = repository().removeprefix("https://github.com/")
    relative = Path(path).relative_to(ROOT)
    if relative.parts[0] == "source":
        relative = Path("student", *relative.parts[1:])
    url = f"https://colab.research.google.com/github/{repo}/blob/main/{relative.as_posix()}"
    return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({url})"


def colab_install(language: str = "en") -> str:
    with speaking(language):
        comment = say("In Colab this installs the course package; anywhere else it does nothing.")
    return (f"# {comment}\n"
            "import sys\n"
            "if \"google.colab\" in sys.modules:\n"
            f"    %pip install --quiet \"triton-course @ git+{repository()}\"")


def solution_section(module: str, section: str) -> str:
    """The lines after ``# --- notebook cell: <section> ---`` up to the next mark or the end."""
    text = (ROOT / module).read_text()
    chunks = text.split(SECTION_MARK)
    for chunk in chunks[1:]:
        name, _, body = chunk.partition("\n")
        if name.removesuffix(" ---").strip() == section:
            return body.strip("\n")
    raise KeyError(f"{module} has no '{SECTION_MARK}{section} ---' line")


def cell_code(module: str, section: str | list[str]) -> str:
    """The code of a solution or kernel cell: one section, or several one after another."""
    names = [section] if isinstance(section, str) else section
    return "\n\n\n".join(solution_section(module, name) for name in names)


def without_markers(code: str) -> str:
    return "\n".join(line for line in code.splitlines()
                     if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


def rubric(exercise_name: str, language: str = "en") -> str:
    ex = exercises.get(exercise_name)
    p, t = ex.points, ex.throughput
    with speaking(language):
        return "\n".join([
            say("### Rubric ({total:g} points)", total=sum(p.values())), "",
            say("| part | points | how it is graded |"), "|---|---|---|",
            say("| correctness | {points:g} | the cases your self-check runs, shared out by the fraction passed |",
                points=p["correctness"]),
            say("| hidden tests | {points:g} | more sizes on fresh random inputs, shared out the same way |",
                points=p["hidden"]),
            say("| throughput | {points:g} | at least {threshold:g}× the speed of `{baseline}` on a {case} input, on a GPU |",
                points=p["throughput"], threshold=t.threshold, baseline=t.baseline, case=t.case.label),
            "", say("A case whose inputs hold {count} values or fewer (few enough to read one at a time and work the "
                    "answer out on the host) counts only once a larger case passes too.", count=MAX_SCALAR_READS),
            *([say("A case whose answer takes no real work (all zeros, or a copy of an input) counts only once a "
                   "case that does passes too.")] if ex.edge else []),
            "", say("Grading runs the setup cell and your answer cells alone, in a fresh process: everything your "
                    "function needs (kernels, helpers, imports) goes in them, not in other cells or files.")])


def test_source(exercise_name: str, part: str) -> str:
    ex = exercises.get(exercise_name)
    call = f'grade("{ex.name}", {ex.function}, "{part}")'
    if part == "hidden":  # the comment stays in the student's version, the call does not
        return (f"# Hidden tests: more cases on fresh random inputs, run only when your work is graded.\n"
                f"### BEGIN HIDDEN TESTS\n{call}\n### END HIDDEN TESTS")
    return call


def expected_source(cell, path: Path) -> str | None:
    """What a generated cell must hold, or None for a hand-written one."""
    meta = cell.metadata.get("course", {})
    role = meta.get("role")
    if role is None or (path.parent == ZH_DIR and role in FROM_THE_ENGLISH):
        return None
    if role == "colab-badge":
        return colab_badge(path)
    if role == "colab-install":
        return colab_install("zh" if path.parent == ZH_DIR else "en")
    if role == "solution":
        return cell_code(meta["from"], meta["section"])
    if role == "kernel":
        return without_markers(cell_code(meta["from"], meta["section"]))
    if role == "rubric":
        return rubric(meta["exercise"])
    if role == "test":
        return test_source(meta["exercise"], meta["part"])
    raise ValueError(f"{path}: unknown course role {role!r}")


def translated(english: Path) -> nbformat.NotebookNode:
    """The Chinese lesson made from ``english``, its generated cells brought in step first, and its
    translation table."""
    nb = nbformat.read(english, as_version=4)
    _fill_generated(nb, english)
    return translate(nb, TRANSLATIONS / f"{english.stem}.yaml", english.name)


def sync(path: Path, write: bool = True) -> list[str]:
    """Bring one notebook in step; return what was (or would be) changed."""
    path = Path(path).resolve()
    name = path.relative_to(ROOT)
    nb = nbformat.read(path, as_version=4)
    if path.parent == ZH_DIR:  # made whole from its English notebook: nothing of the old copy is read
        want = translated(ROOT / "notebooks" / path.name)
        _fill_generated(want, path)
        changes = [] if nb == want else [f"{name} (out of step with its English notebook or its translation)"]
        nb = want
    else:
        changes = _fill_generated(nb, path)
    if changes and write:
        nbformat.write(nb, path)
    return changes


def _fill_generated(nb, path: Path) -> list[str]:
    """Write every generated cell, the marked figures, the test cells' points, and clear outputs;
    say what changed."""
    name, changes = path.relative_to(ROOT), []
    for i, cell in enumerate(nb.cells):
        want = expected_source(cell, path)
        if want is not None and cell.source != want:
            changes.append(f"{name} cell {i} ({cell.metadata['course']['role']})")
            cell.source = want
        filled = figures.fill(cell.source, where=f"{name} cell {i}") if cell.cell_type == "markdown" else cell.source
        if filled != cell.source:
            changes.append(f"{name} cell {i} (figures)")
            cell.source = filled
        meta = cell.metadata.get("course", {})
        if meta.get("role") == "test":
            points = exercises.get(meta["exercise"]).points[meta["part"]]
            if cell.metadata.get("nbgrader", {}).get("points") != points:
                changes.append(f"{name} cell {i} (points)")
                cell.metadata["nbgrader"]["points"] = points
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count):
            changes.append(f"{name} cell {i} (outputs)")
            cell.outputs, cell.execution_count = [], None
    return changes


def text_files() -> list[Path]:
    """The files besides notebooks that quote figures: README, the guides, the translations."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(TRANSLATIONS.glob("*.yaml")),
            *sorted((ROOT / ASSIGNMENT_TABLES).glob("*.yaml"))]


def sync_text(path: Path, write: bool = True) -> list[str]:
    """Rewrite the marked figures of one text file; return what was (or would be) changed."""
    name = path.relative_to(ROOT)
    text = path.read_text()
    if text == (want := figures.fill(text, where=str(name))):
        return []
    if write:
        path.write_text(want)
    return [f"{name} (figures)"]


def all_notebooks() -> list[Path]:
    return sorted(p for d in NOTEBOOK_DIRS for p in (ROOT / d).rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts)


def create_missing_translations() -> list[Path]:
    """A Chinese notebook for every translation table that has none yet."""
    made = []
    for table in sorted(TRANSLATIONS.glob("*.yaml")) if TRANSLATIONS.exists() else []:
        target = ZH_DIR / f"{table.stem}.ipynb"
        if not target.exists():
            nbformat.write(translated(ROOT / "notebooks" / target.name), target)
            made.append(target)
    return made


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift, change nothing")
    parser.add_argument("notebooks", nargs="*", type=Path, help="only these (default: all)")
    args = parser.parse_args(argv)
    if not args.check and not args.notebooks:
        create_missing_translations()
    changes = [c for p in args.notebooks or all_notebooks() for c in sync(p, write=not args.check)]
    changes += [] if args.notebooks else [c for p in text_files() for c in sync_text(p, write=not args.check)]
    for c in changes:
        print(("drifted: " if args.check else "updated: ") + c)
    return 1 if (changes and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
