"""The student's code in a notebook, read as JSON (nothing of the notebook runs here): what a
runner runs (:mod:`.judge`) and what an instructor is pointed to (:mod:`..instructor.review`)."""
from __future__ import annotations

import json
from pathlib import Path


def answer_code(notebook: Path, with_setup: bool = False) -> str:
    """The answer cells (nbgrader's solution cells), in order, with the locked ``setup`` cell
    before them where ``with_setup``; IPython magics and shell lines dropped. Cells missing a
    field count as empty."""
    chosen = []
    for cell in json.loads(notebook.read_text()).get("cells", []):
        flags = cell.get("metadata", {}).get("nbgrader", {})
        wanted = flags.get("solution") or (with_setup and flags.get("grade_id") == "setup")
        if cell.get("cell_type") == "code" and wanted:
            source = cell.get("source", "")
            chosen.append("".join(source) if isinstance(source, list) else str(source))
    return "\n\n".join("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
                       for source in chosen)
