"""What ``nbgrader autograde`` runs in this course: the instructor's cells, exactly as the
gradebook holds them, and none of the student's (``nbgrader_config.py`` installs both steps).

Two holes in plain nbgrader 0.9, both seen on this course's notebooks:

- the student's cells run in the same kernel as the tests, so an answer cell that says
  ``def grade(*args): return 3`` scores every test;
- a locked cell that is edited or retyped is restored, but a deleted one is not (its test
  scores 0 and waits for a manual grade) and a duplicated one fails the whole notebook
  (``OverwriteCells.add_missing_cells`` would restore the deleted one, but raises a
  ``KeyError`` on every notebook here).

So :class:`RestoreLockedCells` rebuilds every locked cell from the gradebook, once each, in
its released place, and :class:`ExecuteInstructorCells` runs only those. The kernel is then
the judge: each graded cell has the answer cells run in a runner process and judges what
comes back (:mod:`autograder.grading`).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import nbformat
from nbgrader import utils
from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import Execute, NbGraderPreprocessor

from .kernel_sockets import on_unix_sockets


def grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def released_cells(course: CourseDirectory | Path, assignment: str, notebook: str) -> list:
    """The cells of the notebook as released to students, or [] when ``release/`` is gone."""
    if isinstance(course, CourseDirectory):
        path = Path(course.format_path(course.release_directory, ".", assignment)) / f"{notebook}.ipynb"
    else:
        path = course / "release" / assignment / f"{notebook}.ipynb"
    return nbformat.read(path, as_version=4).cells if path.exists() else []


def locked_cell_changes(cells, released) -> dict[str, str]:
    """How the locked cells students got (``released``) differ in a submission's ``cells``:
    grade id -> ``deleted``, ``duplicated``, ``retyped (code -> markdown)``, ``edited`` or
    ``moved`` (out of the released order). The evidence is nbgrader's own: its cell ids, and
    its checksum of a cell's source, type, id, flags and points."""
    moved = moved_locked_cells(cells, released)
    changes = {}
    for original in (c for c in released if utils.is_locked(c)):
        name = grade_id(original)
        copies = [c for c in cells if grade_id(c) == name]
        if not copies:
            changes[name] = "deleted"
        elif len(copies) > 1:
            changes[name] = "duplicated"
        elif copies[0].get("cell_type") != original.cell_type:
            changes[name] = f"retyped ({original.cell_type} -> {copies[0].get('cell_type')})"
        elif _checksum(copies[0]) != original.metadata.nbgrader.get("checksum", _checksum(original)):
            changes[name] = "edited"
        elif name in moved:
            changes[name] = "moved"
    return changes


def moved_locked_cells(cells, released) -> list[str]:
    """The grade ids of the locked cells of ``cells`` that are out of the order they were
    ``released`` in: those outside a longest run of them (first copies) in that order."""
    rank = {grade_id(c): i for i, c in enumerate(c for c in released if utils.is_locked(c))}
    names = [name for name in dict.fromkeys(map(grade_id, cells)) if name in rank]
    runs: list[list[str]] = []  # runs[i]: a longest ordered run that ends with names[i]
    for i, name in enumerate(names):
        runs.append(max((runs[j] for j in range(i) if rank[names[j]] < rank[name]), key=len, default=[]) + [name])
    kept = max(runs, key=len, default=[])
    return [name for name in names if name not in kept]


def _checksum(cell) -> str | None:
    try:
        return utils.compute_checksum(nbformat.from_dict(cell))
    except (KeyError, TypeError, ValueError):  # metadata too damaged to checksum: changed
        return None


def gradebook_cells(db_url: str, assignment: str, notebook: str) -> dict[str, nbformat.NotebookNode]:
    """The locked cells of a notebook as the gradebook holds them (hidden tests included),
    rebuilt as notebook cells, by grade id."""
    with Gradebook(db_url) as gb:
        found = gb.find_notebook(notebook, assignment)
        points = {c.name: c.max_score for c in found.grade_cells}
        tasks = {c.name for c in found.task_cells}
        cells = {}
        for source in (c for c in found.source_cells if c.locked):
            flags = {"grade": source.name in points and source.name not in tasks, "grade_id": source.name,
                     "locked": True, "schema_version": 3, "solution": False,
                     "task": source.name in tasks, "checksum": source.checksum}
            if source.name in points:
                flags["points"] = points[source.name]
            new = nbformat.v4.new_code_cell if source.cell_type == "code" else nbformat.v4.new_markdown_cell
            cells[source.name] = new(source.source, metadata={"editable": False, "deletable": False,
                                                              "nbgrader": flags})
    return cells


def _originals(resources) -> dict[str, nbformat.NotebookNode]:
    ids = resources["nbgrader"]
    return gradebook_cells(ids["db_url"], ids["assignment"], ids["notebook"])


class RestoreLockedCells(NbGraderPreprocessor):
    """Sanitising step: every locked cell once, as the gradebook has it, where it was released.

    Extra copies of a locked cell are dropped; a deleted one is put back after the locked cell
    released before it; locked cells that were moved run in their released order (a hidden
    test moved above the visible one would otherwise run first, and what the student's code
    saw of the hidden cases, kept in its compile cache, could reach the visible test's
    feedback). A student cell that appears twice keeps nbgrader's marks on its last copy only
    (nbgrader's rule), the others become plain cells."""

    def preprocess(self, nb, resources):
        ids = resources["nbgrader"]
        originals = _originals(resources)
        released = released_cells(CourseDirectory(parent=self), ids["assignment"], ids["notebook"])
        for name, change in locked_cell_changes(nb.cells, released).items():
            self.log.warning("Locked cell %s was %s in the submission: the gradebook's version is graded",
                             name, change)
        order = [grade_id(c) for c in released if grade_id(c) in originals]
        order += [name for name in originals if name not in order]
        nb.cells = _restored(nb.cells, originals, order)
        return nb, resources


def _restored(cells, originals, order) -> list:
    last_copy = {grade_id(c): i for i, c in enumerate(cells) if grade_id(c) not in originals}
    out, placed = [], set()
    for i, cell in enumerate(cells):
        name = grade_id(cell)
        if name in originals:
            if name not in placed:
                placed.add(name)
                out.append(dict(originals[name], id=cell.get("id", originals[name].id)))
            continue
        if name is not None and last_copy[name] != i:
            del cell.metadata["nbgrader"]
        out.append(cell)
    for name in order:
        if name in placed:
            continue
        earlier = [n for n in order[:order.index(name)] if n in placed]
        at = next(i + 1 for i, c in enumerate(out) if grade_id(c) == earlier[-1]) if earlier else 0
        out.insert(at, originals[name])
        placed.add(name)
    slots = [i for i, c in enumerate(out) if grade_id(c) in originals]  # locked cells run in the released order
    for i, cell in zip(slots, sorted((out[i] for i in slots), key=lambda c: order.index(grade_id(c)))):
        out[i] = cell
    return [nbformat.from_dict(c) for c in out]


class ExecuteInstructorCells(Execute):
    """nbgrader's Execute, for the locked cells only, and only with the gradebook's text.

    In the kernel, the function under test is a :class:`~.placeholder.GradedElsewhere` placeholder: ``grade``
    has the notebook's answer cells run in a runner process, so the name only has to exist. A notebook that is not one of the course's exercises runs as nbgrader
    runs it, every cell."""

    def preprocess(self, nb, resources=None, km=None):
        from .. import exercises  # imports torch: only when autograding

        ids = resources["nbgrader"]
        try:
            self._function = exercises.get(ids["notebook"]).function
        except KeyError:
            self.log.warning("%s is not one of the course's exercises: every cell runs in the kernel",
                             ids["notebook"])
            self._function = None
        self._sources = {name: cell.source for name, cell in _originals(resources).items()}
        self._placeholder_defined = False
        self.shutdown_kernel = "graceful"  # until :meth:`_finish` has had the judge clean up
        if self._function is None:
            return super().preprocess(nb, resources, km)
        # The kernel would start in the submission's folder, where every file the student sent
        # sits beside the notebook, and Python imports from a kernel's folder first: a
        # submitted autograder/ or ipykernel_launcher.py would run as the judge. It starts in
        # a folder holding a link to the notebook alone, which the judge reads the answers from
        # (and names, resolved, in its record of each test's seed).
        folder = resources["metadata"]["path"]
        with tempfile.TemporaryDirectory(prefix="judge-") as alone:
            name = f"{ids['notebook']}.ipynb"
            Path(alone, name).symlink_to(Path(folder, name).resolve())
            resources["metadata"]["path"] = alone
            try:
                return super().preprocess(nb, resources, km)
            finally:
                resources["metadata"]["path"] = folder

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        if self._function is not None:
            on_unix_sockets(km, self.resources["metadata"]["path"])  # the judge's fresh folder
        return km

    def preprocess_cell(self, cell, resources, index):
        if self._function is None:
            return super().preprocess_cell(cell, resources, index)
        if cell.cell_type == "code" and self._sources.get(grade_id(cell)) == cell.source:
            if not self._placeholder_defined:
                self._define_placeholder(index)
            cell, resources = super().preprocess_cell(cell, resources, index)
        # else the student's cell: its code runs only in the clean process
        if index == len(self.nb.cells) - 1:
            self._finish(index)
        return cell, resources

    def _finish(self, index: int) -> None:
        """Have the judge clean up now (its runners stopped, its compile cache removed: what
        its exit functions would do), then have the kernel killed rather than shut down: a
        Python with torch loaded takes about 0.6 s more to tear itself down, every student.
        (Not all exit functions: the kernel's own close its sockets, and the cell's reply
        would never come.)"""
        last = self.nb.cells[index]
        done = self.execute_cell(nbformat.v4.new_code_cell(
            "from autograder.grading.judge import clean_up as _clean_up\n_clean_up()"), index, store_history=False)
        self.nb.cells[index] = last  # nbclient puts the cell it ran in the notebook, at the index given
        if not any(o.output_type == "error" for o in done.outputs):
            self.shutdown_kernel = "immediate"

    def _define_placeholder(self, index: int) -> None:
        code = (f"from autograder.grading.placeholder import GradedElsewhere as _GradedElsewhere\n"
                f"{self._function} = _GradedElsewhere({json.dumps(self._function)})")
        done = self.execute_cell(nbformat.v4.new_code_cell(code), index, store_history=False)
        errors = [o for o in done.outputs if o.output_type == "error"]
        if errors:
            raise RuntimeError(f"cannot define the placeholder for `{self._function}`: "
                               f"{errors[0].ename}: {errors[0].evalue}")
        self._placeholder_defined = True
