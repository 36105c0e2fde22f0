"""README's tables name every lesson and assignment and quote their thresholds and recorded GPU
figures as the declarations and results/gpu/results.json hold them."""
import json
import re

import pytest

from autograder import exercises
from conftest import ROOT

README = (ROOT / "README.md").read_text()
RESULTS = json.loads((ROOT / "results" / "gpu" / "results.json").read_text())


def test_every_lesson_and_assignment_is_listed():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"`notebooks/{path.name}`" in README, path.name
    for folder in sorted(p for p in (ROOT / "source").iterdir() if p.is_dir()):
        assert f"`source/{folder.name}/`" in README, folder.name


@pytest.mark.parametrize("name", sorted(exercises.ASSIGNMENTS))
def test_threshold_and_recorded_ratio_match(name):
    ex = exercises.get(name)
    row = re.search(rf"^\| {name} \|(.+)\|$", README, re.M)
    assert row, f"README's GPU results table has no row for {name}"
    cells = [c.strip() for c in row.group(1).split("|")]
    assert cells[1].startswith(f"≥ {ex.throughput.threshold:g}×"), (cells[1], ex.throughput.threshold)
    recorded, = [r for r in RESULTS["exercises"] if r["exercise"] == name]
    assert cells[2].startswith(f"{recorded['median_ratio']:.3f}×"), (cells[2], recorded["median_ratio"])
