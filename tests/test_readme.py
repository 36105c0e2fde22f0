"""README's tables name every lesson and assignment and quote their thresholds and recorded GPU
figures as the declarations and results/gpu/results.json hold them (the figures as a reader
sees them, markers aside: tests/test_figures.py checks the markers); the instructor guide's
times per student are those of the class tables it cites."""
import json
import re

import pytest

from autograder import exercises, figures
from conftest import ROOT

README = figures.rendered((ROOT / "README.md").read_text())
RESULTS = json.loads((ROOT / "results" / "gpu" / "results.json").read_text())


def _current(record: dict) -> bool:
    """Whether a recorded grading timed the case its exercise declares now (a problem set whose
    timed case changed is not recorded until the benchmark runs again; a lesson's kernel that was
    a problem set keeps its old name and record)."""
    name = record["exercise"]
    return name not in exercises.ASSIGNMENTS or record["case"] == exercises.get(name).throughput.case.label


def test_every_lesson_and_assignment_is_listed():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"`notebooks/{path.name}`" in README, path.name
    for folder in sorted(p for p in (ROOT / "source").iterdir() if p.is_dir()):
        assert f"`source/{folder.name}/`" in README, folder.name


def _row(name: str) -> list[str]:
    row = re.search(rf"^\| {name} \|(.+)\|$", README, re.M)
    assert row, f"README's GPU results table has no row for {name}"
    return [c.strip() for c in row.group(1).split("|")]


@pytest.mark.parametrize("name", sorted(exercises.ASSIGNMENTS))
def test_each_problem_sets_threshold_and_recorded_ratio_match(name):
    cells, ex = _row(name), exercises.get(name)
    assert cells[1].startswith(f"≥ {ex.throughput.threshold:g}×"), (cells[1], ex.throughput.threshold)
    recorded = [r for r in RESULTS["exercises"] if r["exercise"] == name and _current(r)]
    if recorded:
        assert cells[2].startswith(f"{recorded[0]['median_ratio']:.3f}×"), (cells[2], recorded[0]["median_ratio"])
    else:
        assert cells[2].startswith("not recorded yet"), cells[2]


@pytest.mark.parametrize("record", [r for r in RESULTS["exercises"] if _current(r)], ids=lambda r: r["exercise"])
def test_every_recorded_grading_is_quoted_as_recorded(record):
    cells = _row(record["exercise"])
    assert cells[1].startswith(f"≥ {record['threshold']:g}×"), (cells[1], record["threshold"])
    assert cells[2].startswith(f"{record['median_ratio']:.3f}×"), (cells[2], record["median_ratio"])


def class_seconds(table: str) -> dict[str, list[float]]:
    """Each problem set's grading seconds, student by student in the order graded, from a
    committed class table (results/gpu/class-grading-*.md: a "## psN_name: ..." heading, then
    rows "| student | points | seconds | ... |")."""
    times, name = {}, None
    for line in table.splitlines():
        if line.startswith("## "):
            name = line[3:].split("_")[0]
        elif name and re.match(r"\| \S+ \| [\d.]+/[\d.]+ \| [\d.]+ \|", line):
            times.setdefault(name, []).append(float(line.split("|")[3]))
    return times


SET_UP_IN_FIRST_STUDENT = {"class-grading-2026-12-06f-h100.md"}
"""Class tables made before a student's seconds left out the worker's one-off set-up (commit
c1c18dc): their first student carried it, and the guide quotes them without that student."""


def test_the_guides_times_per_student_are_those_of_the_class_tables_it_cites():
    """Each range the guide quotes is that of the class table cited next after it; several
    problem sets named together share one range."""
    guide = (ROOT / "docs" / "instructor-guide.md").read_text()
    paragraph = next(p for p in guide.split("\n\n") if p.startswith("**Time per student.**"))
    # Split on the citations: each quote's text, then the table that text cites.
    parts = re.split(r"results/gpu/(class-grading-[\w-]+\.md)", paragraph.split("a student then took")[1])
    checked = 0
    for text, cited in zip(parts[::2], parts[1::2]):
        times = class_seconds((ROOT / "results" / "gpu" / cited).read_text())
        skip = 1 if cited in SET_UP_IN_FIRST_STUDENT else 0
        for low, high, *names in re.findall(r"(\d+)(?:-(\d+))?\s+s\s+for\s+(ps\d)(?:\s+and\s+(ps\d))?", text):
            seconds = [t for name in filter(None, names) for t in times[name][skip:]]
            assert (round(min(seconds)), round(max(seconds))) == (int(low), int(high or low)), (cited, names)
            checked += 1
    assert checked == 11, paragraph
