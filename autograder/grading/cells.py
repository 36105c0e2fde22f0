"""The student's code in a notebook, read as data (nothing of the notebook runs here): what a
runner runs (:mod:`.judge`) and what an instructor is pointed to (:mod:`..instructor.review`)."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat


def _field(node, key: str) -> dict:
    """``node[key]`` where both are mappings, else empty: a submitted notebook may hold anything."""
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, dict) else {}


def _cells(text: str) -> list:
    """A notebook's cells as nbgrader grades them, an older format upgraded to version 4; from an
    invalid notebook, its JSON's cells as they are."""
    try:
        return nbformat.reads(text, as_version=4).get("cells", [])
    except Exception:  # nbformat's own validation failed: nbgrader would refuse it too
        data = json.loads(text)
        return data.get("cells", []) if isinstance(data, dict) else []


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
