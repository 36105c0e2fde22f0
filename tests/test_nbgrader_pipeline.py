"""The instructor's whole cycle for real: generate, release, fetch, submit, collect,
grade the class, feedback and export, with simulated students; and every assignment's
reference solution autograded."""
import csv
import itertools
import json
import multiprocessing
import re
import runpy
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbgrader.api import Gradebook

from autograder import exercises, grading
from autograder.correctness import InProcess, not_run_after_fault, run_cases
from autograder.grading.autograde import ExecuteInstructorCells
from autograder.grading.judge import FAULT_RESTARTS
from autograder.report import CheckResult
from autograder.assignments.ps1_broadcast_add import EXERCISE as PS1_EXERCISE
from autograder.instructor import student_versions
from autograder.instructor.grade_class import grade_class, saved, table
from conftest import DEVICE, ROOT, venv_env

pytestmark = pytest.mark.slow
PS1 = PS1_EXERCISE.name
COURSE_ID = "triton-course"

ROW_MASK_ONLY = ("in_bounds = (r < M) & (c < N)", "in_bounds = r < M")
"""A mistake: the tiles past the last column load and store out of bounds."""


def nbgrader(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=venv_env(**env),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def new_course(tmp: Path, assignment: str) -> Path:
    course = tmp / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "source" / assignment, course / "source" / assignment)
    nbgrader(course, "generate_assignment", assignment, "--force")
    return course


def answer(notebook: Path, assignment: str, solution: str | None) -> None:
    """Write ``solution`` into the notebook's answer cell (None: leave it as released)."""
    if solution is None:
        return
    nb = nbformat.read(notebook, as_version=4)
    function = exercises.get(assignment).function
    cell, = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == function]
    cell.source = solution
    nbformat.write(nb, notebook)


def reference(assignment: str) -> str:
    """The instructor's answer: the solution cell of the source notebook."""
    nb = nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    cell, = [c for c in nb.cells if c.metadata.get("course", {}).get("role") == "solution"]
    return cell.source


GUIDE = ROOT / "docs" / "instructor-guide.md"
SOLVES = "# ... Ada solves"
"""The line of the guide's student block where the student works on the notebook."""


def guide_blocks(heading: str = "## One assignment, start to finish") -> list[str]:
    """The bash blocks of one section of the instructor guide, as written."""
    section = GUIDE.read_text().split(heading + "\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", section, re.S)


def run_lines(block: str, cwd: Path, **env: str) -> dict[str, int]:
    """Run a block in one bash, line by line as a reader pastes it; each command's exit status,
    by the command as written (less its comment)."""
    status = cwd / ".status"
    commands = [line.split("  #")[0].strip() for line in block.splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    script = "".join(f"{c}\nprintf '%s %s\\n' \"$?\" '{c}' >> {status}\n" for c in commands)
    subprocess.run(["bash", "-u", "-c", script], cwd=cwd, env=venv_env(**env), capture_output=True, timeout=900)
    codes = dict(reversed(line.split(" ", 1)) for line in status.read_text().splitlines())
    status.unlink()
    return {command: int(code) for command, code in codes.items()}


@pytest.fixture(scope="module")
def cycle(tmp_path_factory):
    """The guide's cycle for ps1, run as written (the student block once per student)."""
    tmp = tmp_path_factory.mktemp("cycle")
    course, home = tmp / "course", tmp / "home"
    home.mkdir()
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "source" / PS1, course / "source" / PS1)
    env = {"HOME": str(home), "COURSE": str(course)}
    instructor, student_block, back = guide_blocks()
    assert all(code == 0 for code in run_lines(instructor, course, HOME=str(home)).values())
    fetch, submit = student_block.split(SOLVES)
    # eve works in the Chinese release (student/zh/): one gradebook grades both languages
    students = {"ada": reference(PS1), "bob": reference(PS1).replace(*ROW_MASK_ONLY), "cy": None, "dee": "broken",
                "eve": reference(PS1)}
    for student, solution in students.items():
        assert all(code == 0 for code in run_lines(fetch.replace("ada", student), tmp, **env).values())
        folder = home / "students" / student
        notebook = folder / PS1 / f"{PS1}.ipynb"
        if student == "eve":
            shutil.copy(student_versions.student_path(PS1, "zh"), notebook)
        if solution == "broken":
            notebook.write_text('{"cells": [ this is not JSON')
        else:
            answer(notebook, PS1, solution)
        assert all(code == 0 for code in run_lines(submit.split("\n", 1)[1].replace("ada", student), folder,
                                                   **env).values())
    codes = run_lines(back, tmp, **env)
    assert {c: code for c, code in codes.items() if code} == {f"triton-course grade {PS1}": 1}, codes
    assert len(codes) == 6  # cd, collect, grade_class (1: dee's notebook is not JSON), feedback, release, export
    return course, saved(course, PS1)


def cell_scores(course: Path, assignment: str, student: str) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook(assignment, assignment, student)
        return {g.name: g.score for g in nb.grades}


def expected_unmasked_points() -> dict[str, float]:
    """Only whole 64-column tiles come out right without a column mask; grade() shares points by cases."""
    def share(which):
        cases = PS1_EXERCISE.cases(which, DEVICE.device)
        return round(PS1_EXERCISE.points["correctness" if which == "visible" else "hidden"]
                     * sum(c.shape[1] % 64 == 0 for c in cases) / len(cases), 2)
    return {"test_correctness": share("visible"), "test_hidden": share("hidden"), "test_throughput": 0}


def test_release_holds_no_solution_and_no_hidden_test(cycle):
    course, _ = cycle
    text = (course / "release" / PS1 / f"{PS1}.ipynb").read_text()
    for secret in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", '"hidden")', ROW_MASK_ONLY[0]):
        assert secret not in text
    assert text.count(r'raise NotImplementedError(\"your code goes here\")') == 2  # kernel and wrapper (JSON-escaped)
    assert "# Hidden tests: more cases on fresh random inputs" in text


def test_reference_partial_and_empty_submissions_score_as_declared(cycle):
    course, _ = cycle
    full = {"test_correctness": PS1_EXERCISE.points["correctness"], "test_hidden": PS1_EXERCISE.points["hidden"],
            "test_throughput": 0}  # no GPU here: throughput is "not measured", 0 by default
    assert cell_scores(course, PS1, "ada") == full
    assert cell_scores(course, PS1, "bob") == expected_unmasked_points()
    assert sum(cell_scores(course, PS1, "cy").values()) == 0
    assert cell_scores(course, PS1, "eve") == full


def test_exported_grades_are_exact(cycle):
    course, _ = cycle
    rows = {r["student_id"]: r for r in csv.DictReader((course / "grades.csv").open())}
    total = sum(PS1_EXERCISE.points.values())
    expected = {"ada": total - PS1_EXERCISE.points["throughput"], "bob": sum(expected_unmasked_points().values()), "cy": 0.0,
                "dee": 0.0, "eve": total - PS1_EXERCISE.points["throughput"]}
    assert set(rows) == set(expected)  # the broken notebook is listed too, with 0
    for student, score in expected.items():
        assert float(rows[student]["score"]) == pytest.approx(score), rows[student]
        assert float(rows[student]["max_score"]) == total


def test_class_summary_names_failing_tests_and_reasons(cycle):
    _, grades = cycle
    assert set(grades) == {"ada", "bob", "cy", "dee", "eve"}
    assert grades["ada"].failing == ["test_throughput"]
    assert "needs a GPU" in grades["ada"].reasons[0]
    assert "test_correctness" in grades["bob"].failing and "partial credit" in " ".join(grades["bob"].reasons)
    assert "no case passed; the first: `add` is not written yet" in grades["cy"].reasons[0]
    assert grades["dee"].score == 0
    assert grades["dee"].reasons[0].startswith(f"{PS1}.ipynb is not a readable notebook (NotJSONError")
    summary = table(PS1, list(grades.values()))
    points = PS1_EXERCISE.points
    assert all(name in summary for name in grades)
    assert f"{points['correctness'] + points['hidden']:g}/{sum(points.values()):g}" in summary


def test_the_judges_kernel_needs_no_free_tcp_port(tmp_path, monkeypatch):
    # Kernels started side by side (grading workers) can be handed the same free TCP port, and
    # the later one dies before it replies: the judge's kernel talks over sockets in its own folder.
    for key, value in venv_env().items():
        monkeypatch.setenv(key, value)
    execute = ExecuteInstructorCells(kernel_name="python3")
    execute._function = PS1_EXERCISE.function  # one of the course's exercises
    execute.resources = {"metadata": {"path": str(tmp_path)}}
    km = execute.create_kernel_manager()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        km.cache_ports, km.shell_port = False, taken.getsockname()[1]  # as if taken after it was picked
        NotebookClient(nb, km=km, timeout=120, resources=execute.resources).execute(cleanup_kc=True)
    assert nb.cells[0].outputs[0]["text"] == "42\n"


def test_a_correct_notebook_validates_without_a_gpu(cycle, tmp_path):
    course, _ = cycle
    notebook = tmp_path / f"{PS1}.ipynb"
    shutil.copy(course / "release" / PS1 / f"{PS1}.ipynb", notebook)
    answer(notebook, PS1, reference(PS1))
    done = nbgrader(tmp_path, "validate", str(notebook))
    assert "Success! Your notebook passes all the tests." in done.stdout, done.stdout + done.stderr


def test_feedback_names_the_failing_test_and_hides_hidden_code(cycle):
    course, _ = cycle
    html = (course / "feedback" / "bob" / PS1 / f"{PS1}.html").read_text()
    assert "needs a GPU" in html and "out of bounds" in html and "test_throughput" in html
    for secret in ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "&quot;hidden&quot;", '"hidden"'):
        assert secret not in html, secret
    labels = {c.label for c in PS1_EXERCISE.cases("hidden", DEVICE.device)}
    labels -= {c.label for c in PS1_EXERCISE.cases("visible", DEVICE.device)}
    assert "hidden tests, " in html and labels and not [label for label in labels if label in html]


def test_a_class_graded_in_chinese_reads_its_verdicts_in_chinese(cycle):
    # The guide's "A class in Chinese": TRITON_COURSE_LANG=zh at autograde; bob's mask mistake.
    course, _ = cycle
    nbgrader(course, "autograde", PS1, "--student", "bob", "--force", TRITON_COURSE_LANG="zh")
    nb = nbformat.read(course / "autograded" / "bob" / PS1 / f"{PS1}.ipynb", as_version=4)
    printed = "".join(o.get("text", "") + o.get("evalue", "") for c in nb.cells for o in c.get("outputs", []))
    assert "分" in printed and "越界" in printed and "points" not in printed, printed[-2000:]
    assert cell_scores(course, PS1, "bob") == expected_unmasked_points()  # the same points in any language


# Mistakes students make, as edits of each reference's answer cell: (what it says, what it
# says instead). Each is held to the self-check on the inputs grading drew (graded_seeds), so a
# mistake that some draws hide is graded as it should be on every draw.
WRONG = {
    "ps1_broadcast_add": {
        "row_mask_only": ROW_MASK_ONLY,
        "ignores_strides": ("x.stride(0), x.stride(1),\n                                y_mn.stride(0), y_mn.stride(1)",
                            "N, 1, N, 1"),
        "assumes_a_row": ("y_mn = y.expand(M, N)", "y_mn = y.reshape(-1).expand(M, N)"),
    },
    "ps2_softmax_backward": {
        "no_sum": ("(p * (g - dot))", "(p * g)"),
        "sums_dy": ("dot = tl.sum(p * g, axis=0)", "dot = tl.sum(g, axis=0)"),
        "reads_y_for_dy": ("g = tl.load(dy_ptr + r * dy_stride", "g = tl.load(y_ptr + r * y_stride"),
    },
    "ps3_cross_entropy": {
        "never_ignores": ("counted = label != IGNORE", "counted = label == label"),
        "vocab_as_row_stride": ("r.to(tl.int64) * row_stride", "r.to(tl.int64) * vocab"),
        "row_0_target": ("picked = tl.load(first + label", "picked = tl.load(logits_ptr + label"),
    },
    "ps4_linear_silu": {
        "bias_along_m": ("tl.load(b_ptr + offs_n * stride_b, mask=in_n, other=0.0).to(tl.float32)[None, :]",
                         "tl.load(b_ptr + offs_m * stride_b, mask=in_m, other=0.0).to(tl.float32)[:, None]"),
        "no_k_mask": ("in_k = offs_k < K - k0", "in_k = offs_k < TILE_K"),
        "weight_untransposed": ("weight.stride(0), weight.stride(1)", "weight.stride(1), weight.stride(0)"),
    },
    "ps5_varlen_attention": {
        "kv_head_is_query_head": ("kv_head = head // GROUP", "kv_head = head"),
        "causal_excludes_self": ("keep &= pos[None, :] <= q_pos[:, None]", "keep &= pos[None, :] < q_pos[:, None]"),
        "natural_log_scale": ("head_dim ** -0.5 * LOG2_E", "head_dim ** -0.5"),
    },
    "ps6_layer_norm": {
        "dw_sums_dy": ("dw_sum += dy * x_hat", "dw_sum += dy"),
        # every program's db into row 0 of the buffer: the other rows are never written (NaN)
        "db_in_one_row": ("tl.store(sums + n_cols, db_sum", "tl.store(partial_ptr + n_cols + cols, db_sum"),
        # every program's dw into row 0 by load, add, store: a race, which the interpreter reports
        "racy_dw": ("tl.store(sums, dw_sum, mask=inside)",
                    "tl.store(partial_ptr + cols, tl.load(partial_ptr + cols, mask=inside) + dw_sum, mask=inside)"),
    },
}


RECORD = "grading-record.jsonl"
"""Where this file's plain ``nbgrader autograde`` runs have the judge record its seeds (in the course)."""


def graded_seeds(course: Path, assignment: str, student: str) -> dict[str, int]:
    """The seed each graded test drew its inputs with, by part: the judge's record, as grade_class
    saves it with each grade (or, under plain nbgrader, the course's :data:`RECORD`). The visible
    seed is also the one the correctness test printed."""
    graded = saved(course, assignment)
    seeds = graded[student].seeds if graded else {
        entry["cases"]: entry["seed"] for entry in map(json.loads, (course / RECORD).read_text().splitlines())
        if Path(entry["notebook"]).parts[-3] == student}
    nb = nbformat.read(course / "autograded" / student / assignment / f"{assignment}.ipynb", as_version=4)
    printed, = ["".join(o.get("text", "") for o in c.get("outputs", [])) for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "test_correctness"]
    assert f"(seed {seeds['visible']})" in printed, (seeds, printed)
    return {"correctness": seeds["visible"], "hidden": seeds["hidden"]}


def expected_points(assignment: str, answer_cell: str, seeds: dict[str, int] | None = None) -> dict[str, float]:
    """What the answer earns by the self-check, run on this machine's cases; with ``seeds``
    (a part's name -> seed), on the inputs that grading drew, so a mistake that a draw can hide
    is judged on the same draw."""
    spec = exercises.get(assignment)
    points = {"test_throughput": 0.0}
    for part, which in (("correctness", "visible"), ("hidden", "hidden")):
        seed = (seeds or {}).get(part, secrets.randbits(31))
        cases = _graded_cases(assignment, answer_cell, which, seed)
        points[f"test_{part}"] = grading.points(spec, part, CheckResult(spec.name, seed, cases))
    return points


def _graded_cases(assignment: str, answer_cell: str, which: str, seed: int) -> list:
    """The self-check's verdict on each of ``which`` cases, run as grading runs them: on a GPU
    in a process of its own, and after a CUDA fault (a mistake's stray access breaks the
    context it ran in, and every later call with it) the cases left in a new one, as the
    judge restarts its runner, at most FAULT_RESTARTS times. Whether a stray read faults
    depends on where the process's memory lies, so the self-check alone would lose the cases
    after it that grading runs."""
    if not DEVICE.has_gpu:
        return _case_results(assignment, answer_cell, which, seed, 0)
    results = []
    for restarts in itertools.count():
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            got = pool.submit(_case_results, assignment, answer_cell, which, seed, len(results)).result()
        lost = next((i for i, case in enumerate(got) if case.message == not_run_after_fault()), len(got))
        if restarts == FAULT_RESTARTS or lost == len(got):
            return results + got
        results += got[:lost]


def _case_results(assignment: str, answer_cell: str, which: str, seed: int, start: int) -> list:
    """The self-check's verdict, in this process, on ``which`` cases from the ``start``-th on
    (each drawn from the seed it has in the whole set)."""
    spec = exercises.get(assignment)
    nb = nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    setup, = [c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "setup"]
    with tempfile.TemporaryDirectory() as folder:  # a file: @triton.jit reads its kernels' source
        module = Path(folder, f"{assignment}_answer.py")
        module.write_text(setup + "\n" + answer_cell)
        fn = runpy.run_path(str(module))[spec.function]
        where = DEVICE.device
        return run_cases(spec, InProcess(spec, fn, where), spec.cases(which, where)[start:], seed + start, where)


def submit_reference_and_mistakes(course: Path, assignment: str) -> dict[str, str]:
    """Submit the reference (student ``ref``) and each of its :data:`WRONG` edits; their answers."""
    ref = reference(assignment)
    answers = {"ref": ref} | {name: ref.replace(*edit) for name, edit in WRONG[assignment].items()}
    for student, answer_cell in answers.items():
        assert student == "ref" or answer_cell != ref, f"{assignment} {student}: the edit matched nothing"
        folder = course / "submitted" / student / assignment
        folder.mkdir(parents=True)
        shutil.copy(course / "release" / assignment / f"{assignment}.ipynb", folder)
        answer(folder / f"{assignment}.ipynb", assignment, answer_cell)
    return answers


@pytest.mark.parametrize("assignment", sorted(exercises.ASSIGNMENTS))
def test_autograde_grades_the_reference_and_each_mistake_as_the_self_check_does(assignment, tmp_path):
    assert WRONG.get(assignment), f"WRONG has no mistakes for {assignment}: give it two or three edits of its answer"
    course = new_course(tmp_path, assignment)
    answers = submit_reference_and_mistakes(course, assignment)
    if assignment == PS1:  # plain nbgrader, all in one process, as formgrader's Autograde button runs it
        nbgrader(course, "autograde", assignment, "--create", "--force", TRITON_COURSE_GRADING_RECORD=str(course / RECORD))
    else:  # the course's way: workers side by side
        grade_class(course, assignment)
    points = exercises.get(assignment).points
    assert cell_scores(course, assignment, "ref") == {
        "test_correctness": points["correctness"], "test_hidden": points["hidden"], "test_throughput": 0}
    for student, answer_cell in answers.items():
        if student == "ref":
            continue
        expected = expected_points(assignment, answer_cell, graded_seeds(course, assignment, student))
        assert expected["test_correctness"] + expected["test_hidden"] < points["correctness"] + points["hidden"]
        assert cell_scores(course, assignment, student) == pytest.approx(expected), student
