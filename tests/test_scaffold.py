"""A newcomer's two changes, made in a copy of the repository.

- `triton-course new`: the problem set it writes is found by the course, its notebook is one
  nbgrader accepts, `triton-course sync --check` finds everything in step and its tests pass; a
  bad, taken or out-of-order name gets a sentence.
- A threshold changed in one place, PS1's declaration: one `triton-course sync` carries it
  everywhere a reader sees it (the rubric and prose of the source and student notebooks, README's
  two tables), after which `sync --check` finds everything in step and the copy's package, which
  grading reads, declares it.

And CONTRIBUTING.md names only commands that exist."""
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from nbgrader.nbgraderformat import MetadataValidator

from autograder import exercises, figures
from autograder.instructor import cli, scaffold
from conftest import ROOT
from kit import course_copy, in_copy as course

N = len(exercises.ASSIGNMENTS) + 1
NEW = f"ps{N}_example"
FAR = min(N + 3, 9)
"""A number past the next free one (names have one digit)."""


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A copy of the repository in which ``triton-course new`` has run."""
    copy = course_copy(tmp_path_factory.mktemp("course"))
    return copy, course(copy, "-m", "autograder.instructor.cli", "new", NEW, "Example")


@pytest.mark.slow
def test_new_writes_the_files_and_prints_what_is_left(scaffolded):
    copy, done = scaffolded
    assert done.returncode == 0, done.stdout + done.stderr
    for path in scaffold.targets(NEW).values():
        assert (copy / path.relative_to(ROOT)).is_file(), path
    assert (copy / "student" / NEW / f"{NEW}.ipynb").is_file()
    for item in ("grep -n PLACEHOLDER", f'WRONG["{NEW}"]', "README.md", "make test"):
        assert item in done.stdout, item


@pytest.mark.slow
def test_sync_check_finds_the_copy_in_step(scaffolded):
    copy, _ = scaffolded
    synced = course(copy, "-m", "autograder.instructor.cli", "sync", "--check")
    assert synced.returncode == 0 and "drifted" not in synced.stdout, synced.stdout + synced.stderr


@pytest.mark.slow
def test_the_course_finds_the_new_exercise_and_its_tests_pass(scaffolded):
    copy, _ = scaffolded
    found = course(copy, "-c", f"from autograder import exercises; ex = exercises.get({NEW!r}); "
                               "print(ex.function, ex.solution, sum(ex.points.values()))")
    assert found.stdout.split() == ["example", "solutions.example", "10"], found.stdout + found.stderr
    tested = course(copy, "-m", "pytest", f"tests/test_{NEW}.py", "-q", "-p", "no:cacheprovider")
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.slow
def test_the_source_notebook_is_valid_and_its_answer_cell_is_the_solution(scaffolded):
    copy, _ = scaffolded
    nb = nbformat.read(copy / "source" / NEW / f"{NEW}.ipynb", as_version=4)
    nbformat.validate(nb)
    MetadataValidator().validate_nb(nb)  # what nbgrader checks before it releases
    answer, = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert answer.metadata.nbgrader.grade_id == "example" and "def example(" in answer.source
    assert [c.metadata.course.part for c in nb.cells if c.metadata.get("course", {}).get("role") == "test"] == [
        "correctness", "hidden", "throughput"]


@pytest.mark.slow
@pytest.mark.parametrize("name, sentence", [
    ("PS7-Example", "'PS7-Example' is not a problem set name: write ps<digit>_<snake_case>"),
    (NEW, f"{NEW} exists already"),
    (f"ps{N}_other", f"ps{N} is taken by {NEW}: the next problem set is ps{N + 1}."),
    (f"ps{FAR}_far", f"ps{FAR} is out of order: the problem sets go ps1 to ps{N}, so the next is ps{N + 1}."),
    ("ps0_first", "ps0 is out of order"),
    (f"ps{N + 1}_rms_norm", "solutions/rms_norm.py exists already"),  # lesson 1's answer
])
def test_a_name_that_cannot_be_new_is_refused_with_a_sentence(scaffolded, monkeypatch, capsys, name, sentence):
    copy, _ = scaffolded
    monkeypatch.setattr(scaffold, "ROOT", copy)
    monkeypatch.setattr(scaffold, "TEMPLATES", copy / "templates" / "problem_set")
    before = sorted(copy.rglob("*"))
    assert cli.main(["new", name, "Title"]) == 2
    assert sentence in capsys.readouterr().err
    assert sorted(copy.rglob("*")) == before


def test_contributing_names_only_commands_and_files_that_exist():
    text = (ROOT / "CONTRIBUTING.md").read_text()
    makefile, gpu_run = (ROOT / "Makefile").read_text(), (ROOT / "scripts" / "gpu_run.sh").read_text()
    for command in re.findall(r"triton-course ([a-z]+)", text):
        assert command == "sync" or command in cli.COMMANDS, f"triton-course {command}"
    for target in re.findall(r"\bmake ([a-z-]+)", text):
        assert re.search(rf"^{target}:", makefile, re.M), f"make {target}"
    for stage in re.findall(r"gpu_run\.sh ([a-z]+)", text):
        assert f"  {stage})" in gpu_run, f"gpu_run.sh {stage}"
    example = re.search(r"triton-course new ps\d_(\w+)", text).group(1)  # its files are not there yet
    folders = "autograder|notebooks|results|scripts|solutions|source|student|templates|tests"
    for path in re.findall(rf"[` ]((?:{folders})/[a-z0-9_/.]*)[` ]", text):
        assert example in path or (ROOT / path).exists(), path


PS = "ps1_broadcast_add"
OLD = exercises.get(PS).throughput.threshold
NEW_THRESHOLD = round(OLD + 0.05, 2)


@pytest.fixture(scope="module")
def threshold_changed(scaffolded) -> Path:
    """The same copy, after its new problem set's checks: PS1's threshold changed, then one sync."""
    copy, _ = scaffolded
    declaration = copy / "autograder" / "assignments" / f"{PS}.py"
    text = declaration.read_text()
    assert text.count(f"threshold={OLD:g},") == 1
    declaration.write_text(text.replace(f"threshold={OLD:g},", f"threshold={NEW_THRESHOLD:g},"))
    synced = course(copy, "-m", "autograder.instructor.cli", "sync")
    assert synced.returncode == 0, synced.stdout + synced.stderr
    return copy


@pytest.mark.slow
def test_one_sync_carries_a_new_threshold_to_every_place_it_is_quoted(threshold_changed):
    baseline = exercises.get(PS).throughput.baseline
    readme = figures.rendered((threshold_changed / "README.md").read_text())
    rows = [line for line in readme.splitlines() if re.match(rf"\| ({PS}|PS1) \|", line)]
    assert len(rows) == 2 and all(f"≥ {NEW_THRESHOLD:g}× `{baseline}`" in row for row in rows), rows
    for notebook in (threshold_changed / "source" / PS / f"{PS}.ipynb", threshold_changed / "student" / PS / f"{PS}.ipynb"):
        text = notebook.read_text()
        assert f"at least {NEW_THRESHOLD:g}× the speed of `{baseline}`" in text, notebook
        assert f"{OLD:g}× the speed" not in text, notebook


@pytest.mark.slow
def test_after_that_sync_the_copy_is_in_step_and_its_package_declares_the_new_threshold(threshold_changed):
    checked = course(threshold_changed, "-m", "autograder.instructor.cli", "sync", "--check")
    assert checked.returncode == 0 and "drifted" not in checked.stdout, checked.stdout + checked.stderr
    graded = course(threshold_changed, "-c", f"from autograder import exercises; "
                                             f"print(exercises.get({PS!r}).throughput.threshold)")
    assert graded.stdout.split() == [f"{NEW_THRESHOLD:g}"], graded.stdout + graded.stderr


def test_a_gpu_session_runs_its_plans_stages_in_the_background_and_packs_what_they_wrote(tmp_path):
    """scripts/gpu_session.sh on a machine without a GPU, with a gpu_run.sh that prints its
    arguments, called twice: each stage's arguments (quoted ones whole) and exit status, a stage for
    another card skipped (the plan's last line, without its newline), the runs packed, nothing
    started again by the second call."""
    import tarfile
    tree, out = tmp_path / "tree", tmp_path / "out"
    (tree / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "gpu_session.sh", tree / "scripts")
    (tree / "scripts" / "gpu_run.sh").write_text('printf "%s\\n" "$@"\nexit 3\n')
    out.mkdir()
    plan = tmp_path / "plan.txt"
    plan.write_text('# a comment\nfirst tests -k "ps1 or ps2"  # why\nonly-on NO SUCH CARD\nsecond bench')  # no last newline
    env = {**os.environ, "OUT": str(out), "GPU_SESSION_DIR": str(tmp_path / "runs"),
           "GPU_SESSION_TREE": str(tmp_path / "copy")}
    calls = [subprocess.run(["bash", "scripts/gpu_session.sh", "60", str(plan)], cwd=tree, env=env,
                            capture_output=True, text=True, timeout=120) for _ in range(2)]
    assert all(call.returncode == 0 for call in calls), calls[-1].stderr
    progress = calls[1].stdout  # the second call packs again and starts nothing
    assert progress.count("start first") == 1 and progress == calls[0].stdout, progress
    assert re.search(r"end first rc=3 ", progress) and "skip second (not on a GPU)" in progress, progress
    assert progress.rstrip().endswith("all done"), progress
    assert (tmp_path / "runs" / "first.console").read_text().splitlines() == ["tests", "-k", "ps1 or ps2"]
    with tarfile.open(out / "gpurun.tgz") as packed:
        assert {"runs/progress", "runs/first.console", "runs/done"} <= set(packed.getnames())


@pytest.mark.parametrize("plan", sorted((ROOT / "scripts" / "gpu_plans").glob("*.txt")), ids=lambda p: p.name)
def test_a_committed_gpu_plan_names_only_stages_gpu_run_has(plan):
    """A typo in a plan would cost a GPU session's minutes: every stage is one of gpu_run.sh's,
    every stage name is used once (each names its results folder), and the test files it names
    exist."""
    script = (ROOT / "scripts" / "gpu_run.sh").read_text()
    known = set(re.findall(r"^  (\w+)\) ", script, re.M))
    names = []
    for line in plan.read_text().splitlines():
        words = shlex.split(line, comments=True)
        if not words or words[0] == "only-on":
            continue
        assert len(words) >= 2 and words[1] in known, f"{plan.name}: {line!r} (gpu_run.sh has {sorted(known)})"
        names.append(words[0])
        for path in (w for w in words[2:] if w.startswith("tests/")):
            assert (ROOT / path).exists(), f"{plan.name}: {path} does not exist"
    assert names and len(names) == len(set(names)), names
