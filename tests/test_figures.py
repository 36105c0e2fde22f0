"""No figure measured on a GPU is typed by hand: prose marks it, and the sync rewrites it from
results/gpu/ (autograder.figures)."""
import hashlib
import json
import re

import nbformat
import pytest

from autograder import device, exercises, figures, settings
from autograder.instructor import sync, translation
import kit
from conftest import ROOT

TEXT_FILES = sync.text_files()
FIGS = {"copy_bandwidth": figures.Figure(4026.51, "GB/s", "2026-12-03", "NVIDIA H200", "results/gpu/results.json"),
        "x.ratio": figures.Figure(1.5599, "×", "2026-12-03", "NVIDIA H200", "results/gpu/results.json")}


def _texts(path):
    if path.suffix != ".ipynb":
        return [path.read_text()]
    return [cell.source for cell in nbformat.read(path, as_version=4).cells]


@pytest.mark.parametrize("path", sync.all_notebooks() + TEXT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_measured_figure_is_typed_outside_a_marker(path):
    typed = [f for text in _texts(path) for f in figures.unmarked(text)]
    assert not typed, (f"{typed}: mark each as <!--fig:NAME-->...<!--/fig--> (autograder.figures), or, for a "
                       "datasheet value or arithmetic, add it to figures.ALLOWED with the reason")


@pytest.mark.parametrize("name", sorted(exercises.ASSIGNMENTS))
def test_a_problem_sets_threshold_is_never_typed_in_its_notebook(name):
    """Its rubric cell is generated from the declaration; any other cell marks the threshold
    (PS4's goals once said 0.75× after its declaration had moved on)."""
    nb = nbformat.read(ROOT / "source" / name / f"{name}.ipynb", as_version=4)
    typed = [m[0] for cell in nb.cells if "role" not in cell.metadata.get("course", {})
             for m in figures.FIGURE.finditer(figures.MARKER.sub("", cell.source))
             if m["lead"] and m["figure"].endswith(("×", "倍"))]
    assert not typed, f"{typed}: write <!--fig:{name}.threshold:g--><!--/fig--> and run `triton-course sync`"


def test_the_readme_marks_the_threshold_of_every_exercise_its_tables_name():
    names = {key.removesuffix(".threshold") for key in figures.recorded() if key.endswith(".threshold")}
    rows = [(cells[1].strip(), line) for line in (ROOT / "README.md").read_text().splitlines()
            if len(cells := line.split("|")) > 2 and cells[1].strip() in names]
    assert len(rows) >= len(exercises.ASSIGNMENTS)
    typed = [name for name, line in rows if f"<!--fig:{name}.threshold" not in line]
    assert not typed, f"README's rows for {typed} type their threshold: mark it as <!--fig:NAME.threshold:g-->"


@pytest.mark.parametrize("path", TEXT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_marked_figures_are_in_step_with_the_record(path):
    assert sync.sync_text(path, write=False) == []  # notebooks: test_notebooks.py


def test_a_typed_figure_is_caught_and_declarations_shapes_and_allowed_ones_are_not():
    text = ("copy at 4,140 GB/s, 1.56× `torch.softmax`, 25 µs, 4.2 TB/s; 融合内核是 5.4 倍. "
            "≥ 0.8× `torch.add`, at least\n0.75× the speed, 4096 × 4096, 4096×4096, 16 的倍数, "
            "the datasheet's 4.8 TB/s, 4× the bytes, <!--fig:copy_bandwidth-->4,027 GB/s<!--/fig-->")
    assert figures.unmarked(text) == ["4,140 GB/s", "1.56×", "25 µs", "4.2 TB/s", "5.4 倍"]


def test_the_sync_rewrites_a_drifted_figure_and_refuses_an_unknown_name():
    text = ("<!--fig:copy_bandwidth-->4,177 GB/s<!--/fig--> and <!--fig:x.ratio:.3f-->1.5×<!--/fig--> "
            "(<!--fig:x.ratio:date--><!--/fig-->, <!--fig:x.ratio:card-->H100<!--/fig-->)")
    assert figures.fill(text, FIGS) == ("<!--fig:copy_bandwidth-->4,027 GB/s<!--/fig--> and "
                                        "<!--fig:x.ratio:.3f-->1.560×<!--/fig--> (<!--fig:x.ratio:date-->2026-12-03<!--/fig-->, "
                                        "<!--fig:x.ratio:card-->H200<!--/fig-->)")
    assert figures.rendered(figures.fill(text, FIGS)) == "4,027 GB/s and 1.560× (2026-12-03, H200)"
    with pytest.raises(KeyError, match="copy_bandwith.*names no recorded figure"):
        figures.fill("<!--fig:copy_bandwith-->4,027 GB/s<!--/fig-->", FIGS, where="README.md")


def test_a_translation_stays_current_when_a_figure_changes_but_not_when_its_name_does():
    digest = translation.source_digest
    before = digest("copy at <!--fig:copy_bandwidth-->4,140 GB/s<!--/fig-->")
    assert digest("copy at <!--fig:copy_bandwidth-->4,027 GB/s<!--/fig-->") == before
    assert digest("copy at <!--fig:x.ratio-->4,140 GB/s<!--/fig-->") != before
    assert digest("no figures") == hashlib.sha1(b"no figures").hexdigest()[:12]  # older translations stay current


def test_every_figure_resolves_and_each_recorded_one_names_a_file_that_exists():
    recorded = figures.recorded()
    assert set(figures.DERIVED) <= set(recorded), "a DERIVED formula names a figure nobody records"
    copy = json.loads(figures.RESULTS.read_text())["ceilings"]["copy bandwidth"]["value"]
    assert recorded["copy_bandwidth"].text() == f"{copy:,.0f} GB/s"
    for name, entry in json.loads(figures.REGISTRY.read_text()).items():
        assert (ROOT / entry["source"].split(",")[0]).exists(), (name, entry["source"])


def test_figures_are_folded_only_from_a_file_the_repository_keeps(tmp_path, monkeypatch):
    outputs = tmp_path / "notebook-outputs.txt"  # e.g. the device tool's copy, gone with the session
    outputs.write_text('figure: {"name": "x.y", "value": 1.0, "unit": "ms"}\n')
    registry = tmp_path / "figures.json"
    registry.write_text(figures.REGISTRY.read_text())
    monkeypatch.setattr(figures, "REGISTRY", registry)
    before = registry.read_text()
    assert figures.main([str(outputs)]) == 2 and registry.read_text() == before


def test_a_lessons_figures_on_a_gpu_run_reach_the_prose(tmp_path, monkeypatch):
    """What scripts/gpu_run.sh tests does, faked on the CPU: a lesson cell records, the run's
    outputs are folded into the registry, the sync quotes the new value."""
    outputs, registry = tmp_path / "notebook-outputs.txt", tmp_path / "figures.json"
    registry.write_text(figures.REGISTRY.read_text())
    outputs.write_text("===== notebooks/01_ninja_gap.ipynb\n--- cell 14\nnaive PyTorch: 700 GB/s\n")
    figures.record_figures("ninja_gap", {"fused Triton": 3700.4}, "GB/s")  # no TRITON_COURSE_NOTEBOOK_OUTPUTS: nothing
    monkeypatch.setenv(settings.NOTEBOOK_OUTPUTS.name, str(outputs))
    figures.record_figures("ninja_gap", {"fused Triton": 3700.4, "naive PyTorch": 700.2}, "GB/s")
    assert figures.ingest(outputs, registry) == ["ninja_gap.fused_triton", "ninja_gap.naive_pytorch"]
    recorded = figures.recorded(figures.RESULTS, registry)
    fused = recorded["ninja_gap.fused_triton"]
    assert (fused.value, fused.unit, fused.source) == (3700.4, "GB/s", str(outputs))
    assert fused.card == device.current().name
    assert figures.fill("<!--fig:ninja_gap.fused_triton--><!--/fig--> at <!--fig:ninja_gap.fused_of_copy-->"
                        "90%<!--/fig-->", recorded) == ("<!--fig:ninja_gap.fused_triton-->3,700 GB/s<!--/fig--> at "
                                                        "<!--fig:ninja_gap.fused_of_copy-->92%<!--/fig-->")
    assert recorded["ninja_gap.torch.softmax"] == figures.recorded()["ninja_gap.torch.softmax"]  # kept


def test_a_notebook_whose_figure_drifted_is_reported():
    def drift(nb):
        cell = next(c for c in nb.cells if "<!--fig:copy_bandwidth-->" in c.source)
        cell.source = figures.MARKER.sub(lambda m: m[0].replace(m["text"], "4,140 GB/s"), cell.source, count=1)
    changes = kit.sync_of_a_changed_copy(ROOT / "notebooks" / "01_ninja_gap.ipynb", drift)
    assert any(c.endswith("(figures)") for c in changes), changes


def test_the_judges_verdicts_on_each_reference_are_read_from_the_class_tables(tmp_path):
    """Only a reference's row on the case its declaration times now counts."""
    row = "| ref | 10/10 | 20.1 | all passed: ps1_broadcast_add throughput: {ratio}× torch.add (needs ≥ 0.8×) on {case}: x |"
    (tmp_path / "class-grading-2026-12-06b-h100.md").write_text("\n".join([
        "## ps1_broadcast_add: 4 students in 92 s on 1 GPU(s) (NVIDIA H100 80GB HBM3, torch 2.11.0+cu130)", "",
        row.format(ratio="1.12", case="8192×8192 float32 + (8192,)"),
        row.format(ratio="9.99", case="2^26 float32"),  # a case the declaration no longer times
        "| ada | 3/10 | 17.2 | test_correctness: partial credit |"]))
    (tmp_path / "class-grading-2026-12-07-h200.md").write_text("\n".join([
        "## ps1_broadcast_add: 4 students in 80 s on 1 GPU(s) (NVIDIA H200, torch 2.11.0+cu130)", "",
        row.format(ratio="1.31", case="8192×8192 float32 + (8192,)")]))
    figs = figures.class_runs(tmp_path)
    low, high, runs = (figs[f"ps1_broadcast_add.judge_{k}"] for k in ("low", "high", "runs"))
    assert (low.value, high.value, runs.value) == (1.12, 1.31, 2)
    assert (runs.date, runs.card) == ("2026-12-07", "H100 80GB HBM3, H200")
    assert (figs["class_runs.tables"].value, figures.class_runs(tmp_path / "none")) == (2, {})


def test_a_lesson_figures_range_is_read_from_every_committed_run_of_the_lessons(tmp_path):
    line = 'figure: {{"name": "hopper.goals.fp8_8192", "value": {v}, "unit": "×", "date": "{d}", "card": "{c}"}}'
    (tmp_path / "notebook-outputs-2026-12-06-h100.txt").write_text("\n".join([
        "--- cell 42", line.format(v=0.71, d="2026-12-06", c="NVIDIA H100 80GB HBM3"), "e4m3 8192³ 0.710x"]))
    (tmp_path / "notebook-outputs-2026-12-08-h200.txt").write_text("\n".join([  # the English and the Chinese run
        line.format(v=0.93, d="2026-12-08", c="NVIDIA H200"), line.format(v=0.92, d="2026-12-08", c="NVIDIA H200")]))
    (tmp_path / "notes.txt").write_text(line.format(v=9.9, d="2026-12-09", c="NVIDIA H200"))  # not a run's outputs
    figs = figures.lesson_runs(tmp_path)
    low, high, runs = (figs[f"hopper.goals.fp8_8192.{k}"] for k in ("runs_low", "runs_high", "runs"))
    assert (low.text(), high.text(), runs.text()) == ("0.71×", "0.93×", "2")
    assert (runs.date, runs.text("card")) == ("2026-12-08", "H100 80GB HBM3, H200")
    assert figures.lesson_runs(tmp_path / "none") == {}


def test_a_figure_named_twice_stops_the_record(monkeypatch):
    taken = next(iter(figures.recorded()))
    monkeypatch.setattr(figures, "lesson_runs", lambda: {taken: figures.Figure(1.0, "×", "2026-12-07", "H200", "x")})
    figures.recorded.cache_clear()
    try:
        with pytest.raises(ValueError, match=f"{re.escape(taken)}: from the lessons' runs, and already recorded"):
            figures.recorded()
    finally:
        figures.recorded.cache_clear()
