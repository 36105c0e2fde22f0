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


def answer_code(notebook: Path, with_setup: bool = False) -> str:
    """The answer cells (nbgrader's solution cells), in order, with the locked ``setup`` cell
    before them where ``with_setup``; IPython magics and shell lines dropped. Cells or fields of
    the wrong type count as empty."""
    chosen = []
    for cell in _cells(notebook.read_text()):
        flags = _field(_field(cell, "metadata"), "nbgrader")
        wanted = flags.get("solution") or (with_setup and flags.get("grade_id") == "setup")
        if isinstance(cell, dict) and cell.get("cell_type") == "code" and wanted:
            source = cell.get("source", "")
            chosen.append("".join(source) if isinstance(source, list) else str(source))
    return "\n\n".join("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
                       for source in chosen)
