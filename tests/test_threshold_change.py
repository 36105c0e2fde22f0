"""A threshold changed in one place: in a copy of the repository, PS1's declaration gets a new
threshold, and one `triton-course sync` carries it everywhere a reader sees it (the rubric and
prose of the source and student notebooks, README's two tables), after which `sync --check`
finds everything in step and the copy's package, which grading reads, declares it."""
import re

import pytest

from autograder import exercises, figures
from kit import course_copy, in_copy

PS = "ps1_broadcast_add"
OLD = exercises.get(PS).throughput.threshold
NEW = round(OLD + 0.05, 2)


@pytest.fixture(scope="module")
def changed(tmp_path_factory):
    copy = course_copy(tmp_path_factory.mktemp("course"))
    declaration = copy / "autograder" / "assignments" / f"{PS}.py"
    text = declaration.read_text()
    assert text.count(f"threshold={OLD:g},") == 1
    declaration.write_text(text.replace(f"threshold={OLD:g},", f"threshold={NEW:g},"))
    synced = in_copy(copy, "-m", "autograder.cli", "sync")
    assert synced.returncode == 0, synced.stdout + synced.stderr
    return copy


@pytest.mark.slow
def test_one_sync_carries_the_new_threshold_to_every_place_it_is_quoted(changed):
    baseline = exercises.get(PS).throughput.baseline
    readme = figures.rendered((changed / "README.md").read_text())
    rows = [line for line in readme.splitlines() if re.match(rf"\| ({PS}|PS1) \|", line)]
    assert len(rows) == 2 and all(f"≥ {NEW:g}× `{baseline}`" in row for row in rows), rows
    for notebook in (changed / "source" / PS / f"{PS}.ipynb", changed / "student" / PS / f"{PS}.ipynb"):
        text = notebook.read_text()
        assert f"at least {NEW:g}× the speed of `{baseline}`" in text, notebook
        assert f"{OLD:g}× the speed" not in text, notebook


@pytest.mark.slow
def test_after_the_sync_the_copy_is_in_step_and_its_package_declares_the_new_threshold(changed):
    checked = in_copy(changed, "-m", "autograder.cli", "sync", "--check")
    assert checked.returncode == 0 and "drifted" not in checked.stdout, checked.stdout + checked.stderr
    graded = in_copy(changed, "-c", f"from autograder import exercises; print(exercises.get({PS!r}).throughput.threshold)")
    assert graded.stdout.split() == [f"{NEW:g}"], graded.stdout + graded.stderr
