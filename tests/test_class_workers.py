"""A class graded by workers side by side, for real (nbgrader, the judge, the interpreter):
two workers give exactly the grades of one in at most three quarters of the time, and a run
killed mid-class keeps every finished student, leaves nothing running, and resumes."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nbgrader.api import MissingEntry

from autograder.instructor import grade_workers
from autograder.instructor.grade_class import RESULTS_FOLDER, grade_class, saved
from conftest import DEVICE, venv_env
from test_nbgrader_pipeline import PS1, ROW_MASK_ONLY, answer, cell_scores, new_course, reference

pytestmark = [pytest.mark.slow, pytest.mark.alone, pytest.mark.skipif(
    DEVICE.has_gpu, reason="CPU workers; on a GPU there is one worker per GPU (tests/test_class_on_gpu.py)")]
STUDENTS = {"ada": reference(PS1), "bob": reference(PS1).replace(*ROW_MASK_ONLY), "cy": None, "dee": reference(PS1),
            "eve": reference(PS1), "fay": reference(PS1).replace(*ROW_MASK_ONLY)}
"""Three right, two missing a column mask (partial credit), one who wrote nothing: enough
students that each worker's one start of nbgrader (a few seconds) does not decide the timing."""


@pytest.fixture(scope="module")
def submitted(tmp_path_factory):
    course = new_course(tmp_path_factory.mktemp("workers"), PS1)
    for student, solution in STUDENTS.items():
        folder = course / "submitted" / student / PS1
        folder.mkdir(parents=True)
        shutil.copy(course / "release" / PS1 / f"{PS1}.ipynb", folder)
        answer(folder / f"{PS1}.ipynb", PS1, solution)
    return course


def copy_of(course: Path, tmp: Path) -> Path:
    shutil.copytree(course, tmp / "course")
    return tmp / "course"


def outcome(course: Path, students=STUDENTS) -> dict:
    """Each student's cell scores in the gradebook and saved line (less the time it took)."""
    records = saved(course, PS1)
    return {s: (cell_scores(course, PS1, s), records[s].score, records[s].failing, records[s].reasons)
            for s in students}


@pytest.fixture(scope="module")
def one_worker(submitted, tmp_path_factory):
    course = copy_of(submitted, tmp_path_factory.mktemp("one"))
    start = time.monotonic()
    Counted.started.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(grade_workers, "Service", Counted)
        grade_class(course, PS1, workers=1)
    SERVICES["one_worker"] = list(Counted.started)
    return course, time.monotonic() - start


SERVICES: dict[str, list] = {}
"""The nbgrader processes a fixture's grading started."""


class Counted(grade_workers.Service):
    """A service that keeps its process, for the tests to look at."""
    started: list = []

    def __init__(self, env):
        super().__init__(env)
        Counted.started.append(self.process)


def test_one_worker_grades_every_student_in_one_nbgrader_process_and_ends_it(one_worker):
    started, = SERVICES["one_worker"]
    assert started.poll() == 0 and all(cell_scores(one_worker[0], PS1, s) for s in STUDENTS)


def test_a_student_past_the_time_limit_is_stopped_with_their_nbgrader_and_the_next_gets_a_new_one_as_after_50(
        submitted, tmp_path, monkeypatch):
    monkeypatch.setattr(grade_workers, "Service", Counted)
    Counted.started.clear()
    job = grade_workers.make_job(submitted, PS1, "ada", grade_workers.snapshot(submitted / "gradebook.db"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    late = grade_workers.run_job(job, tmp_path, env={"TMPDIR": str(scratch)}, timeout_s=5)
    assert late.problem == "grading took longer than 5 s and was stopped"
    assert Counted.started[0].poll() == -9 and running_in(tmp_path) == []
    assert list(scratch.iterdir()) == []  # no compile cache or runner folder left by the stopped judge
    monkeypatch.setattr(grade_workers, "JOBS_PER_SERVICE", 2)
    start = time.monotonic()
    graded = grade_workers.run_job(job, tmp_path)
    assert graded.problem is None and len(Counted.started) == 2 and Counted.started[1].poll() is None
    assert graded.seconds < time.monotonic() - start - 1  # nbgrader's own clock: its process's start left out
    assert grade_workers.run_job(job, tmp_path).problem is None and len(Counted.started) == 2
    assert Counted.started[1].wait(5) == 0  # its second student: ended, a fresh one next time
    grade_workers.close_services()


def test_a_student_whose_nbgrader_died_is_graded_again_by_a_fresh_one(one_worker, submitted, tmp_path, monkeypatch):
    """As when two kernels started at once and one died: the student is graded, not failed."""
    class DiesFirst(grade_workers.Service):
        deaths = []

        def grade(self, *args, **kwargs):
            if not DiesFirst.deaths:
                DiesFirst.deaths.append(self.process.pid)
                grade_workers.kill_tree(self.process.pid)
            return super().grade(*args, **kwargs)

    monkeypatch.setattr(grade_workers, "Service", DiesFirst)
    job = grade_workers.make_job(submitted, PS1, "bob", grade_workers.snapshot(submitted / "gradebook.db"))
    result = grade_workers.run_job(job, tmp_path)
    grade_workers.close_services()
    assert len(DiesFirst.deaths) == 1 and result.problem is None and result.retried, result.log
    assert result.scores["notebooks"][PS1]["grades"] == cell_scores(one_worker[0], PS1, "bob")
    assert "--- attempt 1 of 2 ---" in result.log and "--- attempt 2 of 2 ---" in result.log


def test_the_kernel_runs_its_exit_functions_before_it_is_killed(submitted, tmp_path, monkeypatch):
    """The judge's compile cache and its runners' folders are gone once a student is graded,
    though nbgrader's kernel is killed rather than left to shut itself down (seen in the
    student's temporary folder, which run_job is kept from removing here)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    remove = grade_workers.remove_tree
    monkeypatch.setattr(grade_workers, "remove_tree", lambda path: None if Path(path).parent == scratch else remove(path))
    job = grade_workers.make_job(submitted, PS1, "ada", grade_workers.snapshot(submitted / "gradebook.db"))
    graded = grade_workers.run_job(job, tmp_path / "work", env={"TMPDIR": str(scratch)})
    grade_workers.close_services()
    assert graded.problem is None and graded.scores["notebooks"][PS1]["grades"]["test_correctness"] > 0
    student, = scratch.iterdir()
    assert [p.name for p in student.iterdir() if p.name.startswith(("triton-cache-", "grading-"))] == []


def test_two_workers_grade_exactly_as_one_in_at_most_three_quarters_of_the_time(one_worker, submitted, tmp_path):
    serial, serial_s = one_worker
    course = copy_of(submitted, tmp_path)
    start = time.monotonic()
    grade_class(course, PS1, workers=2)
    parallel_s = time.monotonic() - start
    assert outcome(course) == outcome(serial)
    assert outcome(serial)["bob"][0]["test_correctness"] not in (0, 4)  # the class has partial credit too
    assert parallel_s <= 0.75 * serial_s, f"2 workers took {parallel_s:.1f} s, 1 worker {serial_s:.1f} s"
    assert not any((course / RESULTS_FOLDER / "work").iterdir())


def logs(course: Path) -> str:
    """What nbgrader printed for the students it failed or graded at a second attempt."""
    return "\n".join(f"{path.name}:\n{path.read_text()[-3000:]}" for path in (course / RESULTS_FOLDER).glob("logs/*/*.log"))


def running_in(course: Path) -> list[str]:
    """Processes whose command line or working folder lies in ``course``."""
    found = []
    for task in Path("/proc").glob("[0-9]*"):
        try:
            where = os.readlink(task / "cwd") + " " + (task / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(course) in where:
            found.append(f"{task.name}: {where}")
    return found


def test_a_class_stopped_mid_run_keeps_its_finished_students_leaves_nothing_running_and_resumes(
        one_worker, submitted, tmp_path):
    serial, _ = one_worker
    course = copy_of(submitted, tmp_path)
    results = course / RESULTS_FOLDER / f"{PS1}.json"
    # SIGINT as a terminal gives it: a test run started in the background (`make test &`) passes
    # its children SIGINT ignored, and Python then never turns it into KeyboardInterrupt.
    run = subprocess.Popen([sys.executable, "-m", "autograder.instructor.grade_class", PS1, "--workers", "2"], cwd=course,
                           env=venv_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while not results.exists() and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.2)
    run.send_signal(signal.SIGINT)  # a Ctrl-C, with the other worker mid-student
    out, err = run.communicate(timeout=60)
    assert run.returncode == 130, out + err
    finished = set(json.loads(results.read_text()))
    assert finished and finished < set(STUDENTS) and "--resume" in err
    assert outcome(course, finished) == outcome(serial, finished), logs(course)
    for student in set(STUDENTS) - finished:  # never half-written: nothing of theirs in the gradebook
        with pytest.raises(MissingEntry):
            cell_scores(course, PS1, student)
        assert not (course / "autograded" / student).exists()
    time.sleep(1)
    assert running_in(course) == [] and not any((course / RESULTS_FOLDER / "work").iterdir())
    seconds = {s: g.seconds for s, g in saved(course, PS1).items()}
    done = subprocess.run([sys.executable, "-m", "autograder.instructor.grade_class", PS1, "--resume"], cwd=course,
                          env=venv_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert outcome(course) == outcome(serial)
    assert {s: g.seconds for s, g in saved(course, PS1).items() if s in finished} == seconds  # not regraded


def test_a_dask_cluster_grades_exactly_as_this_machine_does(one_worker, submitted, tmp_path, capsys):
    """Two single-threaded workers that each declare a GPU (there is none here: the path
    that asks a worker for a GPU is what is checked), fed by the owner of the gradebook."""
    from distributed import LocalCluster

    serial, _ = one_worker
    course = copy_of(submitted, tmp_path)
    with LocalCluster(n_workers=2, threads_per_worker=1, resources={"GPU": 1}, dashboard_address=None) as cluster:
        grade_class(course, PS1, only=["ada", "bob"], scheduler=cluster.scheduler_address)
    assert f"Dask cluster at {cluster.scheduler_address}: 2 worker(s), 2 GPU(s)" in capsys.readouterr().out
    assert outcome(course, ["ada", "bob"]) == outcome(serial, ["ada", "bob"])
    assert not any((course / RESULTS_FOLDER / "work").iterdir())


def test_a_students_seconds_leave_out_the_machines_one_off_build(tmp_path, monkeypatch):
    """The service times nbgrader's autograde alone: the first student of a machine does not
    pay for building Triton's host modules (a PS4 class's first student took 81 s on an H100,
    the others 44-48 s)."""
    from autograder.grading import host_modules
    from autograder.instructor import autograde_service
    monkeypatch.setattr(host_modules, "ensure", lambda assignment: time.sleep(0.5))
    monkeypatch.setattr(autograde_service, "autograde", lambda root, assignment, student: time.sleep(0.1) or {
        "success": True})
    job = {"root": str(tmp_path), "assignment": PS1, "student": "ada", "env": {}}
    monkeypatch.setattr(sys, "stdin", [json.dumps(job) + "\n"])
    read, write = os.pipe()
    assert autograde_service.main([str(write)]) == 0
    with os.fdopen(read) as answers:
        answer = json.loads(answers.readline())
    assert answer["success"] and 0.1 <= answer["seconds"] < 0.5


def test_a_workers_nbgrader_imports_nothing_from_a_folder_others_may_write(tmp_path, monkeypatch):
    """`python -m` puts the folder it starts in first on sys.path: a service started in /tmp
    would import a module anyone left there before the course's or the library's own."""
    import tempfile
    mark = tmp_path / "imported"
    (tmp_path / "sqlalchemy.py").write_text(f"open({str(mark)!r}, 'w').close()\nraise ImportError\n")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    service = grade_workers.Service({})
    answer, printed = service.grade(tmp_path, grade_workers.Job(PS1, "nobody", {}), {}, timeout_s=120)
    service.close()
    assert not mark.exists(), printed
    assert answer is not None and not answer["success"], printed  # no such course: nbgrader's own failure
