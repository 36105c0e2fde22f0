"""The student's code in a notebook, read as data (nothing of the notebook runs here): what a
runner runs (:mod:`.judge`) and what an instructor is pointed to (:mod:`..instructor.review`)."""
from __future__ import annotations

import json
from pathlib import Path


def _field(node, key: str) -> dict:
    """``node[key]`` where both are mappings, else empty: a submitted notebook may hold anything."""
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, dict) else {}


def _cells(text: str) -> list:
    """A notebook's cells as nbgrader grades them: an older format's upgraded to version 4 (by
    nbformat, imported only then: the judge reads a notebook in every graded test)."""
    data = json.loads(text)
    if not (isinstance(data, dict) and data.get("nbformat") == 4):
        import nbformat

        data = nbformat.reads(text, as_version=4)
    return data["cells"] if isinstance(data.get("cells"), list) else []


def answer_cells(notebook: Path, with_setup: bool = False) -> tuple[str, ...]:
    """The answer cells (nbgrader's solution cells), in order, with the locked ``setup`` cell
    before them where ``with_setup``, each as plain Python (:func:`as_python`): magics and
    shell lines (``%matplotlib inline``, ``!pip list``, ``%%time``) become calls on
    ``get_ipython()``, for which a runner's stand-in runs the Python of :data:`PYTHON_MAGICS`
    and does nothing else (:class:`.runner.NoShell`).
    Cells or fields of the wrong type count as empty."""
    return tuple(source for _, source in graded_cells(notebook, with_setup))


def graded_cells(notebook: Path, with_setup: bool = True) -> tuple[tuple[str, str], ...]:
    """:func:`answer_cells`, each with a name a student can find it by (``setup-cell``,
    ``answer-cell-2``): what a runner runs, and names in a traceback. ASCII without spaces in
    every language: it is the cell's file name, which Triton writes into a kernel's debug lines."""
    chosen, counts = [], {"setup-cell": 0, "answer-cell": 0}
    for cell in _cells(notebook.read_text()):
        flags = _field(_field(cell, "metadata"), "nbgrader")
        setup = with_setup and flags.get("grade_id") == "setup"
        if isinstance(cell, dict) and cell.get("cell_type") == "code" and (flags.get("solution") or setup):
            kind = "setup-cell" if setup else "answer-cell"
            counts[kind] += 1
            source = cell.get("source", "")
            name = "setup-cell" if setup and counts[kind] == 1 else f"{kind}-{counts[kind]}"  # a name each
            chosen.append((name,
                           as_python("".join(source) if isinstance(source, list) else str(source))))
    return tuple(chosen)


PYTHON_MAGICS = frozenset({"time", "timeit", "capture", "prun"})
"""Magics whose code is Python, which a runner runs (once, untimed); any other (``%%bash``,
``%%writefile``, ``%matplotlib``) does nothing there."""
MAX_TRANSFORM_WORK = 500_000
"""IPython's transformer reads the whole cell again for each magic, shell or help line it turns
into Python (up to 500 times): past this many characters to read (the lines that may hold one,
times the cell's length), a cell's magic lines are dropped instead. 300 assignments from
``%time`` took 2.5 s here at 1.3 million, 2,000 of them 31 s; the course's own cells reach 45,000."""


def as_python(source: str) -> str:
    """A cell as plain Python, as IPython reads it: magics and shell lines, only where a
    statement starts, become calls on ``get_ipython()``."""
    from IPython.core.inputtransformer2 import TransformerManager

    source = source.replace("\r\n", "\n").replace("\r", "\n")
    lines = source.split("\n")
    may_be = sum("%" in line or "!" in line or line.rstrip().endswith("?") for line in lines)
    if may_be * len(source) <= MAX_TRANSFORM_WORK:
        try:
            return TransformerManager().transform_cell(source)
        except (RuntimeError, SyntaxError, ValueError):  # a cell IPython cannot read: run it as Python, below
            pass
    return "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))


def answer_code(notebook: Path, with_setup: bool = False) -> str:
    """:func:`answer_cells` as one text, as :func:`joined` writes them."""
    return joined(answer_cells(notebook, with_setup))[0]


def joined(cells: tuple[str, ...]) -> tuple[str, list[int]]:
    """The text of a file holding ``cells`` one after another, a blank line between them, and
    the line (counted from 0) each starts on."""
    starts, line = [], 0
    for source in cells:
        starts.append(line)
        line += source.count("\n") + 2
    return "\n\n".join(cells), starts
