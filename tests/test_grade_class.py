"""grade_class for a class: workers side by side (one GPU each), one owner of the gradebook,
results saved as each student finishes, --resume, --show, a Ctrl-C that loses no finished
student, and set-up errors that stop the run before anyone is graded. The workers' nbgrader
is stubbed here (tests/test_class_robustness.py runs it for real, tests/test_class_workers.py
times it)."""
import json
import os
import shutil
import subprocess
import threading
import time

import pytest
from nbgrader.api import Gradebook

from autograder import exercises, settings
from autograder.instructor import grade_class as gc, grade_workers
from autograder.grading import sandbox
from test_nbgrader_pipeline import PS1, cell_scores, new_course

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    return new_course(tmp_path_factory.mktemp("released"), PS1)


@pytest.fixture
def course(released, tmp_path):
    """A fresh copy of a released course with three submissions, and a stub for nbgrader that
    records whom it grades (``course.graded``) and fails whoever is in ``course.fail``."""
    copy = tmp_path / "course"
    shutil.copytree(released, copy)
    for student in ("ada", "bob", "cy"):
        folder = copy / "submitted" / student / PS1
        folder.mkdir(parents=True)
        shutil.copy(copy / "release" / PS1 / f"{PS1}.ipynb", folder)
    return copy


VISIBLE_GPUS = grade_workers.visible_gpus
SCORES = {"test_correctness": 4.0, "test_hidden": 3.0, "test_throughput": 0.0}


@pytest.fixture
def graded(monkeypatch):
    """A stub for a worker's nbgrader run: it records whom it grades (and on which GPU) and
    gives :data:`SCORES`, fails whoever has a reason in ``outcome``, or raises a Ctrl-C."""
    calls, outcome = [], {}

    def stub(job, workdir, env=None):
        calls.append(job.student)
        if outcome.get(job.student) == "interrupt":
            raise KeyboardInterrupt
        time.sleep(0.05)
        notebooks = {PS1: {"late_submission_penalty": None, "grades": SCORES, "comments": {}}}
        return grade_workers.Result(job.student, outcome.get(job.student), {"timestamp": None, "notebooks": notebooks},
                                    {f"{PS1}.ipynb": (0o644, job.files[f"submitted/{job.student}/{PS1}/{PS1}.ipynb"])},
                                    log="nbgrader's last words", seeds={"visible": 11, "hidden": 12})

    monkeypatch.setattr(grade_workers, "run_job", stub)
    monkeypatch.setattr(grade_workers, "visible_gpus", lambda: [])
    return calls, outcome


def test_results_are_saved_and_resume_grades_only_what_changed(course, graded):
    calls, _ = graded
    assert gc.main([PS1, "--course", str(course)]) == 0 and sorted(calls) == ["ada", "bob", "cy"]
    assert all(cell_scores(course, PS1, student) == SCORES for student in calls)
    records = json.loads((course / "grades" / f"{PS1}.json").read_text())
    assert set(records) == {"ada", "bob", "cy"} and all(r["graded"] and r["notebook"] for r in records.values())
    assert all(r["seeds"] == {"visible": 11, "hidden": 12} for r in records.values())  # the judge's, to replay a verdict
    assert (course / "grades" / f"{PS1}.csv").read_text().splitlines()[0].startswith("student,score,max_score")
    calls.clear()
    notebook = course / "submitted" / "bob" / PS1 / f"{PS1}.ipynb"
    notebook.write_text(notebook.read_text().replace('"cells"', '"cells" ', 1))  # a resubmission
    assert gc.main([PS1, "--course", str(course), "--resume"]) == 0 and calls == ["bob"]


def test_a_ctrl_c_keeps_every_finished_student_and_no_half_graded_one(course, graded, capsys):
    calls, outcome = graded
    outcome["bob"] = "interrupt"
    assert gc.main([PS1, "--course", str(course), "--workers", "1"]) == 130
    assert set(gc.saved(course, PS1)) == {"ada"} and "--resume" in capsys.readouterr().err
    del outcome["bob"]
    calls.clear()
    assert gc.main([PS1, "--course", str(course), "--resume"]) == 0 and sorted(calls) == ["bob", "cy"]
    assert gc.main([PS1, "--course", str(course), "--show"]) == 0 and sorted(calls) == ["bob", "cy"]
    assert "ada" in capsys.readouterr().out


def test_a_student_who_could_not_be_graded_makes_the_run_fail_and_keeps_no_earlier_score(course, graded, capsys):
    _, outcome = graded
    assert gc.main([PS1, "--course", str(course)]) == 0 and cell_scores(course, PS1, "cy") == SCORES
    outcome["cy"] = "NbGraderException: the kernel died"
    assert gc.main([PS1, "--course", str(course)]) == 1
    out, err = capsys.readouterr()
    assert "1 could not be graded: cy" in err and "the kernel died (nbgrader's output: grades/logs/" in out
    assert (course / "grades" / "logs" / PS1 / "cy.log").read_text() == "nbgrader's last words"
    assert not gc.saved(course, PS1)["cy"].graded and not (course / "autograded" / "cy" / PS1).exists()
    assert cell_scores(course, PS1, "cy") == dict.fromkeys(SCORES, 0.0)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:  # flagged for a look by hand
        assert all(g.needs_manual_grade for g in gb.find_submission_notebook(PS1, PS1, "cy").grades)


@pytest.mark.parametrize("first, stopped, attempts", [
    ("NbGraderException: the kernel died", False, 2),  # nbgrader's own failure: a fresh one tries again
    ("grading took longer than 5 s and was stopped", False, 1),  # too slow: once is enough
    ("nbgrader's process ended", True, 1),  # a Ctrl-C killed it: no second attempt
])
def test_a_student_nbgrader_failed_is_graded_once_more_unless_too_slow_or_stopped(monkeypatch, first, stopped,
                                                                                  attempts):
    tries = []

    def attempt(job, workdir, env, timeout_s, stops):
        tries.append(job.student)
        if len(tries) == 1:
            if stopped:
                monkeypatch.setattr(grade_workers, "_stops", grade_workers._stops + 1)
            return grade_workers.Result(job.student, first, log="first words"), "longer than" in first
        return grade_workers.Result(job.student, None, log="second words"), False

    monkeypatch.setattr(grade_workers, "_attempt", attempt)
    result = grade_workers.run_job(grade_workers.Job(PS1, "ada", {}), None)
    assert len(tries) == attempts and "first words" in result.log
    if attempts == 2:
        assert result.problem is None and result.retried == first and "second words" in result.log
    else:
        assert result.problem == first and result.retried is None


def test_a_worker_taking_a_student_after_a_stop_leaves_nothing_running(monkeypatch):
    """A worker that takes its next student (or a second attempt) just as a Ctrl-C kills the
    busy services must not start one the stop missed."""
    events = []

    class Service:
        def __init__(self, env):
            events.append("started")

        def stop(self):
            events.append("stopped")

    monkeypatch.setattr(grade_workers, "Service", Service)
    stops = grade_workers._stops
    grade_workers.stop_all()
    with pytest.raises(grade_workers.Stopped):
        grade_workers._take_service({"CUDA_VISIBLE_DEVICES": "7"}, stops)
    assert events == ["started", "stopped"] and not grade_workers._busy


def test_a_student_graded_at_the_second_attempt_is_noted_with_the_first_failure(course, graded, monkeypatch,
                                                                                capsys):
    stub = grade_workers.run_job

    def flaky(job, workdir, env=None):
        result = stub(job, workdir, env)
        result.retried = "DeadKernelError: Kernel died" if job.student == "bob" else None
        return result

    monkeypatch.setattr(grade_workers, "run_job", flaky)
    assert gc.main([PS1, "--course", str(course)]) == 0
    bob = gc.saved(course, PS1)["bob"]
    assert bob.graded and cell_scores(course, PS1, "bob") == SCORES
    assert bob.notes == [f"graded at the second attempt: nbgrader failed the first (DeadKernelError: Kernel died; "
                         f"its output: grades/logs/{PS1}/bob.log)"]
    assert (course / "grades" / "logs" / PS1 / "bob.log").exists() and not gc.saved(course, PS1)["ada"].notes


def test_an_unreadable_notebook_is_not_sent_to_a_worker(course, graded, capsys):
    calls, _ = graded
    (course / "submitted" / "cy" / PS1 / f"{PS1}.ipynb").write_text('{"cells": [ not JSON')
    assert gc.main([PS1, "--course", str(course)]) == 1 and sorted(calls) == ["ada", "bob"]
    assert "is not a readable notebook (NotJSONError" in capsys.readouterr().out
    assert cell_scores(course, PS1, "cy") == dict.fromkeys(SCORES, 0.0)


def test_each_worker_has_a_gpu_of_its_own_and_never_more_workers_than_gpus(course, graded, monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # the workers' GPUs are named as the run sees them
    monkeypatch.setattr(grade_workers, "visible_gpus", VISIBLE_GPUS)
    busy, seen, lock = set(), [], threading.Lock()
    stub = grade_workers.run_job

    def on_a_gpu(job, workdir, env=None):
        gpu = env["CUDA_VISIBLE_DEVICES"]
        with lock:
            assert gpu not in busy, f"two students on GPU {gpu} at once"
            busy.add(gpu)
            seen.append(gpu)
        try:
            time.sleep(0.3)
            return stub(job, workdir, env)
        finally:
            with lock:
                busy.discard(gpu)

    monkeypatch.setattr(grade_workers, "run_job", on_a_gpu)
    assert gc.main([PS1, "--course", str(course)]) == 0
    assert sorted(set(seen)) == ["3", "5"] and len(seen) == 3
    assert "2 workers, one GPU each (GPUs 3, 5)" in capsys.readouterr().out
    assert gc.main([PS1, "--course", str(course), "--workers", "3"]) == 2 and len(seen) == 3
    assert "--workers 3 with 2 GPU(s)" in capsys.readouterr().err


def test_stopping_a_grading_kills_every_process_below_it():
    """nbgrader, its kernel, and runners in sessions of their own."""
    tree = subprocess.Popen(["bash", "-c", "sleep 300 & setsid sleep 300 & echo started; wait"],
                            stdout=subprocess.PIPE, text=True)
    tree.stdout.readline()
    below = [int(p) for p in subprocess.run(["pgrep", "-P", str(tree.pid)], capture_output=True,
                                            text=True).stdout.split()]
    assert len(below) == 2
    grade_workers.kill_tree(tree.pid)
    assert tree.wait(timeout=10) == -9
    for pid in below:
        for _ in range(50):
            try:
                state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                break
            if state == "Z":
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"process {pid} still runs")


def test_set_up_errors_stop_the_run_before_anyone_is_graded(course, graded, monkeypatch, capsys):
    calls, _ = graded
    (course / "nbgrader_config.py").write_text("c = get_config()\n")  # nbgrader's stock set-up
    released = exercises.get(PS1).points["hidden"]
    monkeypatch.setitem(exercises.get(PS1).points, "hidden", released + 1)  # the declaration changed since release
    monkeypatch.setattr(sandbox, "grading_user", lambda: "nobody")

    def cannot_run(user, python):
        raise PermissionError(f"{sandbox.GRADING_USER_VAR}=nobody: that user cannot run {python}")

    monkeypatch.setattr(sandbox, "check_interpreter_runs_as", cannot_run)
    assert gc.main([PS1, "--course", str(course)]) == 2 and calls == []
    err = capsys.readouterr().err
    assert "is missing or is not the course's" in err and "hidden tests in the feedback" in err
    assert "that user cannot run" in err
    assert f"test_hidden is worth {released:g} in the gradebook and {released + 1:g} in the package" in err
    assert f"nbgrader generate_assignment {PS1} --force" in err
    assert f"the package grades {PS1} by another rubric than the released notebook shows" in err
    assert f"| hidden tests | {released + 1:g} |" in err  # as the package would tell students now


def test_answer_cells_that_reach_past_the_rules_are_named_for_review(course, graded, capsys):
    """What the rules inside a student's process rely on, found in the answer cells, is listed
    for the instructor (the marks stay the judge's); a plain answer gets no note."""
    notebook = course / "submitted" / "cy" / PS1 / f"{PS1}.ipynb"
    cells = json.loads(notebook.read_text())
    answer = next(c for c in cells["cells"] if c["metadata"].get("nbgrader", {}).get("solution"))
    answer["source"] = ("import torch.utils._python_dispatch as d, ctypes\n"
                        "def add(x, y):\n    with d._disable_current_modes():\n        return torch.add(x, y)\n")
    notebook.write_text(json.dumps(cells))
    assert gc.main([PS1, "--course", str(course)]) == 0
    notes = {name: r["notes"] for name, r in json.loads((course / "grades" / f"{PS1}.json").read_text()).items()}
    assert notes["ada"] == notes["bob"] == []
    assert len(notes["cy"]) == 1 and "ctypes (memory by address)" in notes["cy"][0]
    assert "_disable_current_modes, _python_dispatch (PyTorch's dispatch internals" in notes["cy"][0]
    assert "review by hand" in capsys.readouterr().out


def test_every_reference_answer_reads_as_nothing_to_review():
    from autograder.instructor.review import review_notes
    from conftest import ROOT
    for name in exercises.ASSIGNMENTS:
        assert review_notes([ROOT / "source" / name / f"{name}.ipynb"]) == [], name


@pytest.mark.parametrize("code, named", [
    ("a = np.from_dlpack(x)\n    b = bytes(y.untyped_storage())", "from_dlpack, untyped_storage (memory by address)"),
    ("@torch.library.custom_op('me::clone', mutates_args=())", "custom_op, torch.library (PyTorch's dispatch"),
    ("e.__traceback__.tb_frame.f_back.f_locals", "__traceback__, f_back, f_locals, tb_frame (the process's internals)"),
    ("torch.Tensor.detach = lambda t: t", "torch.Tensor.detach = (a library's function replaced or removed)"),
    ("del torch.Tensor.__slotnames__", "del torch.Tensor.__slotnames__ (a library's function replaced or removed)"),
    ("logits.__class__ = Later", ".__class__ = (an object's class changed)"),
    ("torch.save(x, buffer)", "torch.save (a tensor's bytes serialised)"),
    ("__builtins__['len'] = None", "__builtins__ (code or names built at run time)"),
    ("weakref.finalize(x, print)", "weakref (code that runs after a call returns)"),
    ("_os.posix_spawn('/bin/sleep', ['sleep', '9'], {})", "os.posix_spawn (processes, threads, signals or sockets)"),
    ("libc.shmget(7, 1 << 27, 0o1666)", "shmget (processes, threads, signals or sockets)"),
    ("os.chmod('/course/gradebook.db', 0o666)", "chmod (a file's mode, owner, times or attributes"),
])
@pytest.mark.parametrize("version", [4, 3])  # nbgrader grades a version 3 notebook too, upgraded
def test_reaching_around_the_rules_is_named_for_review(tmp_path, code, named, version):
    import nbformat
    from autograder.instructor.review import review_notes
    answer = nbformat.v4.new_code_cell(f"def add(x, y):\n    {code}\n")
    answer.metadata["nbgrader"] = {"grade_id": "add", "solution": True}
    nbformat.write(nbformat.convert(nbformat.v4.new_notebook(cells=[answer]), version), tmp_path / "a.ipynb")
    note, = review_notes([tmp_path / "a.ipynb"])
    assert named in note, note


def test_a_kernels_default_constexpr_is_not_a_library_function_replaced(tmp_path):
    import nbformat
    from autograder.instructor.review import review_notes
    answer = nbformat.v4.new_code_cell("@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr = 1024):\n    pass\n")
    answer.metadata["nbgrader"] = {"grade_id": "add", "solution": True}
    nbformat.write(nbformat.v4.new_notebook(cells=[answer]), tmp_path / "a.ipynb")
    assert review_notes([tmp_path / "a.ipynb"]) == []


def test_review_takes_linear_time_and_says_when_it_searched_part_of_the_answer(tmp_path):
    import nbformat
    from autograder.instructor.review import MAX_REVIEWED_CHARS, review_notes
    answer = nbformat.v4.new_code_cell("import ctypes\n" + "\n" * 200_000 + "x = 1\n" * (MAX_REVIEWED_CHARS // 6))
    answer.metadata["nbgrader"] = {"grade_id": "add", "solution": True}
    nbformat.write(nbformat.v4.new_notebook(cells=[answer]), tmp_path / "a.ipynb")
    start = time.monotonic()
    partly, named = review_notes([tmp_path / "a.ipynb"])
    assert time.monotonic() - start < 10  # a pattern that backtracked over the blank lines took minutes
    assert f"only the first {MAX_REVIEWED_CHARS:,} were searched" in partly
    assert named == "review by hand, the answer cells use: ctypes (memory by address)"


def test_review_reads_a_notebook_whose_metadata_is_not_what_nbgrader_writes(tmp_path):
    from autograder.instructor.review import review_notes
    odd = {"cells": [{"cell_type": "code", "id": "a", "metadata": {"nbgrader": ["solution"]}, "source": "import ctypes",
                      "outputs": [], "execution_count": None}, "not a cell"], "metadata": [], "nbformat": 4,
           "nbformat_minor": 5}
    (tmp_path / "notes.ipynb").write_text(json.dumps(odd))
    assert review_notes([tmp_path / "notes.ipynb"]) == []  # no answer cell in it, and no crash


def test_the_class_table_shows_control_characters_and_does_not_obey_them():
    from autograder.instructor.grade_class import StudentGrade, table
    grade = StudentGrade("mallory", graded=True, score=7.5, max_score=10,
                         reasons=["test_correctness: \x1b[2K\x1b[1Gmallory 10/10 all passed"])
    line = table(PS1, [grade]).splitlines()[-1]
    assert "\x1b" not in line and "\\x1b[2K\\x1b[1Gmallory 10/10" in line and "7.5/10" in line


def test_a_failed_nbgraders_reason_is_the_exception_it_raised_not_its_pointer_to_it():
    log = """[AutogradeApp | ERROR] There was an error processing assignment: /course/submitted/eve/ps1
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/nbgrader/converters/base.py", line 371, in convert_single_notebook
UnicodeEncodeError: 'utf-8' codec can't encode character '\\ud83d' in position 3: surrogates not allowed
[AutogradeApp | WARNING] Removing failed assignment: /course/autograded/eve/ps1
nbgrader.converters.base.NbGraderException: Please see the the above traceback for details."""
    assert grade_workers._last_error(log).startswith("UnicodeEncodeError: 'utf-8' codec can't encode")
    assert grade_workers._last_error("[AutogradeApp | ERROR] the kernel died") == "[AutogradeApp | ERROR] the kernel died"


def test_a_job_carries_only_regular_files_and_names_the_links_it_left_out(tmp_path):
    from autograder.instructor.grade_workers import make_job
    course = tmp_path / "course"
    for folder in ("source/ps1", "release/ps1", "submitted/eve/ps1/extra"):
        (course / folder).mkdir(parents=True)
    (course / "nbgrader_config.py").write_text("")
    (course / "gradebook.db").write_text("every student's grades")
    (course / "source/ps1/ps1.ipynb").write_text("the answers and the hidden tests")
    sent = course / "submitted/eve/ps1"
    (sent / "ps1.ipynb").write_text("{}")
    (sent / "extra" / "notes.txt").write_text("mine")
    (sent / "gb.db").symlink_to(course / "gradebook.db")
    (sent / "notes").symlink_to(course / "source/ps1")
    (sent / "extra" / "answers.txt").symlink_to(course / "source/ps1/ps1.ipynb")
    job = make_job(course, "ps1", "eve", b"snapshot")
    assert sorted(p for p in job.files if p.startswith("submitted")) == [
        "submitted/eve/ps1/extra/notes.txt", "submitted/eve/ps1/ps1.ipynb"]
    assert sorted(job.left_out) == ["extra/answers.txt", "gb.db", "notes"]
    assert sorted(content for path, content in job.files.items() if path.startswith("submitted")) == [b"mine", b"{}"]


def test_workers_share_the_cpus_out_and_a_workers_nbgrader_keeps_to_its_own(monkeypatch):
    cpus = settings.WORKER_CPUS.name
    monkeypatch.setattr(grade_workers, "visible_gpus", lambda: [])
    monkeypatch.setattr(grade_workers.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4})
    assert [env[cpus] for env in grade_workers.slots(2)] == ["0,1", "2,3,4"]
    assert all(cpus not in env for env in grade_workers.slots(1) + grade_workers.slots(3))  # one CPU each: shared
    monkeypatch.undo()
    mine = min(os.sched_getaffinity(0))
    service = grade_workers.Service({cpus: str(mine)})
    try:
        deadline = time.monotonic() + 60  # it pins itself as it starts
        while os.sched_getaffinity(service.process.pid) != {mine} and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.sched_getaffinity(service.process.pid) == {mine}
    finally:
        service.stop()
