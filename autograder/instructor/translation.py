"""Chinese versions of notebooks, made from the English ones and a translation table.

A table (YAML) maps the id of every hand-written Markdown cell (one without ``course.role``) to
``{en: <digest of the English source>, zh: <the Chinese>}``. A translation whose English has
changed since is stale and stops the build, so no Chinese notebook silently lags its English.
Code cells run, and are graded, as the same code in both versions; only their comments may be
translated. A code cell's entry is ``{en: <digest>, comments: [<Chinese>, ...]}``, one text per
comment of the English, in order: a run of whole-line comments at one indentation is one comment
(several lines of Chinese for it are written at its indentation), and a comment after code is
another (one line); comments inside nbgrader's solution and hidden-test regions are not counted
(no student reads them). Every code cell of a lesson with comments has one (the generated
kernels' too: a lesson's are filled from the English before it is translated), and every code
cell of a problem set a student may edit (a test checks each).

- Lessons: ``notebooks/zh/translations/NN_name.yaml`` → ``notebooks/zh/NN_name.ipynb``
  (:mod:`autograder.instructor.sync`).
- Problem sets: ``student/zh/translations/<assignment>.yaml``, applied while nbgrader releases
  the assignment by :class:`Translate`, a preprocessor of ``generate_assignment``
  (nbgrader_config.py). ``TRITON_COURSE_LANG=zh nbgrader generate_assignment ps1_broadcast_add``
  releases the Chinese version: the same graded cells, ids and points as the English one, so one
  gradebook grades both. ``student/zh/`` holds that release (:mod:`.student_versions`).
"""
from __future__ import annotations

import hashlib
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

import nbformat
import yaml
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor

from .. import figures, settings
from ..language import say, speaking

ZH_LANGUAGE_CELL = ("from autograder import set_language\n\n"
                    "set_language(\"zh\")  # 测验、检查结果和提示以中文显示")
ASSIGNMENT_TABLES = Path("student", "zh", "translations")
"""Where, under a course's root, the problem sets' tables are."""


def source_digest(text: str) -> str:
    """What a translation records of the English it was made from, its figures blanked."""
    return hashlib.sha1(figures.blank(text).encode()).hexdigest()[:12]


def translate(nb: nbformat.NotebookNode, table_path: Path, name: str) -> nbformat.NotebookNode:
    """``nb`` in Chinese, in place: each hand-written Markdown cell from the table, the comments of
    each code cell the table names, and a cell switching the course's messages to Chinese just
    before the cell that sets up the device (whose banner is the first thing the course says)."""
    table = yaml.safe_load(table_path.read_text()) if table_path.exists() else None
    if table is None:
        raise FileNotFoundError(f"{table_path}: no Chinese translation of {name}")
    for cell in nb.cells:
        if cell.cell_type == "markdown" and "role" in cell.metadata.get("course", {}):
            continue  # generated: the sync writes it in each language
        entry = table.get(cell.id)
        if entry is None:
            if cell.cell_type == "markdown":
                raise KeyError(f"{table_path.name}: no Chinese for cell {cell.id} of {name}")
            continue
        if entry.get("en") != source_digest(cell.source):
            raise ValueError(f"{table_path.name}: cell {cell.id} of {name} is stale, its English "
                             f"changed (digest now {source_digest(cell.source)})")
        what = "comments" if cell.cell_type == "code" else "zh"
        if what not in entry:
            raise KeyError(f"{table_path.name}: cell {cell.id} of {name} is a {cell.cell_type} cell: give its {what}")
        cell.source = (with_comments(cell.source, entry["comments"], f"{table_path.name}: cell {cell.id}")
                       if what == "comments" else entry["zh"].rstrip("\n"))
    setup = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "setup_device(" in c.source)
    language = nbformat.v4.new_code_cell(ZH_LANGUAGE_CELL)
    language.id = f"zh{nb.cells[setup].id}"[:64]
    nb.cells.insert(setup, language)
    return nb


@dataclass
class Comment:
    """A comment of a code cell, as a translation counts them."""

    first: int
    """Its first line, counted from 0."""
    last: int
    """Its last line: a run of whole-line comments at one indentation is one comment."""
    column: int
    """Where its ``#`` is."""
    whole_line: bool
    """False for a comment after code, on that code's line."""
    text: str
    """Its text without the ``#`` and one space, a run's lines joined by newlines."""


def comments(source: str) -> list[Comment]:
    """The comments of Python ``source`` a student reads, in order (none inside nbgrader's
    solution or hidden-test regions)."""
    found: list[Comment] = []
    lines = source.split("\n")  # as tokenize counts rows: not at a form feed inside a string
    hidden = _hidden_lines(lines)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT or token.start[0] - 1 in hidden:
            continue
        (row, col), text = token.start, token.string[1:].removeprefix(" ")
        whole_line = not lines[row - 1][:col].strip()
        last = found[-1] if found else None
        if whole_line and last and last.whole_line and last.column == col and last.last == row - 2:
            last.last, last.text = row - 1, last.text + "\n" + text
        else:
            found.append(Comment(row - 1, row - 1, col, whole_line, text))
    return found


def _hidden_lines(lines: list[str]) -> set[int]:
    """The lines of nbgrader's solution and hidden-test regions, their markers included (found
    anywhere in a line, as nbgrader finds them): no student sees them."""
    hidden, end = set(), None
    for number, line in enumerate(lines):
        end = end or next((f"### END {what}" for what in ("SOLUTION", "HIDDEN TESTS") if f"### BEGIN {what}" in line),
                          None)
        if end:
            hidden.add(number)
            end = None if end in line else end
    return hidden


def with_comments(source: str, chinese: list[str], where: str) -> str:
    """``source`` with its comments replaced by ``chinese``, in order: a whole-line comment by as
    many lines as its Chinese has, a comment after code by one. The code itself is unchanged."""
    found = comments(source)
    if len(found) != len(chinese):
        raise ValueError(f"{where}: {len(chinese)} Chinese comments for {len(found)} in the English")
    lines = source.split("\n")
    for comment, text in reversed(list(zip(found, chinese))):
        parts = text.strip("\n").split("\n")
        if not comment.whole_line and len(parts) > 1:
            raise ValueError(f"{where}: a comment after code takes one line of Chinese: {text!r}")
        head = lines[comment.first][:comment.column]
        lines[comment.first:comment.last + 1] = [head + "# " + part for part in parts]
    return "\n".join(lines)


def code_stub() -> dict[str, str]:
    """What a student's version holds where a solution was (nbgrader's ``ClearSolutions.code_stub``),
    in the language of ``TRITON_COURSE_LANG``: a sentence, not a bare exception."""
    with speaking(settings.LANG.get()):
        return {"python": say('# YOUR CODE HERE\nraise NotImplementedError("your code goes here")')}


class Translate(NbGraderPreprocessor):
    """``generate_assignment`` step: in the language of ``TRITON_COURSE_LANG`` (English by
    default, then nothing changes), the assignment's Markdown and code comments from its table,
    and its generated cells (the rubric, the Colab badge and install cell) made in that language. The
    graded cells keep their English comments (the hidden test's), so that their nbgrader checksums
    are the same in both languages."""

    def preprocess(self, nb, resources):
        language = settings.LANG.get()
        if language == "en":
            return nb, resources
        from . import sync  # imports this module
        assignment = resources["nbgrader"]["assignment"]
        root = Path(CourseDirectory(parent=self).root)
        translate(nb, root / ASSIGNMENT_TABLES / f"{assignment}.yaml", assignment)
        for cell in nb.cells:
            meta = cell.metadata.get("course", {})
            if meta.get("role") == "rubric":
                cell.source = sync.rubric(meta["exercise"], language)
            elif meta.get("role") == "colab-badge":
                cell.source = sync.colab_badge(sync.ROOT / "student" / language / assignment / f"{assignment}.ipynb")
            elif meta.get("role") == "colab-install":
                cell.source = sync.colab_install(language)
        return nb, resources
