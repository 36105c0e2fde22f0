"""Grading students side by side, each in a copy of the course of its own, one GPU each:
on this machine (:class:`LocalPool`, threads) or on a Dask cluster (:class:`DaskPool`).

A worker gets a :class:`Job`: one student's submission with what ``nbgrader autograde``
needs around it (the course's nbgrader settings, the assignment's source and release, a
snapshot of the gradebook), as bytes, so that it can run on this machine or on another. It
grades in a scratch course folder, pinned to its slot (a GPU of its own), by a nbgrader process
it keeps from one student to the next (:class:`Service`), and hands back a
:class:`Result`: the scores and comments nbgrader wrote, and the graded notebooks. Only the
process that owns the real gradebook writes to it (:func:`merge`), one student at a time, so
workers never contend for one sqlite file and a run stopped at any moment leaves every
student either graded whole or as before.
"""
from __future__ import annotations

import json
import os
import queue
import re
import select
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from sqlalchemy.exc import SAWarning

from .. import settings
from ..grading.sandbox import remove_tree

STUDENT_TIMEOUT_S = 1800
"""For all of one student's grading: above the judge's limits on each graded test."""
KEPT_LOG_CHARS = 20_000


@dataclass
class Job:
    """Everything a worker needs to grade one student: file paths relative to the course root."""

    assignment: str
    student: str
    files: dict[str, bytes]
    left_out: list[str] = field(default_factory=list)
    """What the submission holds that is not a regular file (links above all), by path: not graded."""
    renamed: list[str] = field(default_factory=list)
    """A notebook graded under the released name (``x-Copy1.ipynb as x.ipynb``)."""


@dataclass
class Result:
    """What a worker hands back to the gradebook's owner."""

    student: str
    problem: str | None
    """None when nbgrader graded the notebook; else the reason it could not."""
    scores: dict | None = None
    """:func:`read_scores` of the worker's gradebook."""
    graded: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    """The files of ``autograded/<student>/<assignment>/``: relative path -> (mode, content)."""
    seconds: float = 0.0
    """How long nbgrader took to grade the student (its own clock, in the worker's nbgrader
    process: the start of that process and the machine's one-off build of Triton's host modules
    left out), or the time until grading stopped when no answer came."""
    log: str = ""
    """The end of what nbgrader printed."""
    seeds: dict[str, int] = field(default_factory=dict)
    """The seed of each graded test's inputs, by its cases (``visible``, ``hidden``): the judge's
    record (:data:`~autograder.settings.GRADING_RECORD`), never shown to the student."""
    retried: str | None = None
    """Why nbgrader failed the first time, when this result is a later attempt's."""


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` would name them to a child."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip() and not g.strip().startswith("-")]
    import torch
    return [str(i) for i in range(torch.cuda.device_count())]


MIN_CPUS_PER_WORKER = 2
"""Fewer, and the CPUs are not shared out: with one CPU a worker (its kernel, its runner and the
baseline's), two workers on two CPUs took 0.80 of one worker's time in one CI run
(tests/test_class_workers.py asks at most 0.75)."""


def slots(workers: int | None) -> list[dict[str, str]]:
    """The environment of each worker. With GPUs: one GPU per worker, by default one worker
    per GPU, and never more (two students timed on one GPU time each other's work too: a
    reference-speed kernel failed its 0.8x threshold that way). Without: ``workers`` CPU
    workers, by default one per core up to four. Several workers share this process's CPUs out
    (:data:`~autograder.settings.WORKER_CPUS`) when each gets :data:`MIN_CPUS_PER_WORKER` or
    more, so that busy processes one student's code starts slow only that student's grading
    (runners may not move: :mod:`~autograder.grading.confine`); otherwise they share them all."""
    gpus, cpus = visible_gpus(), sorted(os.sched_getaffinity(0))
    if gpus:
        count = workers or len(gpus)
        if count > len(gpus):
            raise ValueError(f"--workers {count} with {len(gpus)} GPU(s): throughput is timed on a GPU no one "
                             f"else uses, so use at most {len(gpus)} workers here.")
        environments = [{"CUDA_VISIBLE_DEVICES": gpu} for gpu in gpus[:count]]
    else:
        environments = [{} for _ in range(workers or min(4, len(cpus)))]
    count = len(environments)
    if count > 1 and len(cpus) // count >= MIN_CPUS_PER_WORKER:
        for i, env in enumerate(environments):
            env[settings.WORKER_CPUS.name] = ",".join(map(str, cpus[i * len(cpus) // count:(i + 1) * len(cpus) // count]))
    return environments


def describe(environments: list[dict[str, str]]) -> str:
    """One line on how the class will be graded, e.g. ``2 workers, one GPU each (GPUs 0, 1)``."""
    gpus = [env["CUDA_VISIBLE_DEVICES"] for env in environments if env.get("CUDA_VISIBLE_DEVICES")]
    count = f"{len(environments)} worker{'s' * (len(environments) > 1)}"
    line = f"{count}, one GPU each (GPUs {', '.join(gpus)})" if gpus else f"{count} on the CPU (no GPU here)"
    cpus = [env[settings.WORKER_CPUS.name] for env in environments if settings.WORKER_CPUS.name in env]
    return line + (f", CPUs {' | '.join(cpus)}" if cpus else "")


def snapshot(database: Path) -> bytes:
    """A consistent copy of an sqlite file (sqlite's own backup), as bytes."""
    with tempfile.TemporaryDirectory() as folder:
        source, target = sqlite3.connect(database), sqlite3.connect(Path(folder) / "copy.db")
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        return (Path(folder) / "copy.db").read_bytes()


def make_job(course: Path, assignment: str, student: str, gradebook: bytes) -> Job:
    files = {"nbgrader_config.py": (course / "nbgrader_config.py").read_bytes(), "gradebook.db": gradebook}
    for folder in (Path("source", assignment), Path("release", assignment)):  # the instructor's: links followed
        for path in sorted((course / folder).rglob("*")):
            if path.is_file() and ".ipynb_checkpoints" not in path.parts:
                files[str(path.relative_to(course))] = path.read_bytes()
    submitted = course / "submitted" / student / assignment
    regular, others = regular_files(submitted)
    graded = graded_notebooks(released_notebooks(course, assignment), sent_notebooks(submitted, regular))
    renamed = {path: name for name, path in graded.items() if path.name != name}
    files |= {str((submitted / renamed[path] if path in renamed else path).relative_to(course)): path.read_bytes()
              for path in regular}
    return Job(assignment, student, files, [str(path.relative_to(submitted)) for path in others],
               [f"{old.name} as {new}" for old, new in renamed.items()])


def sent_notebooks(submitted: Path, regular: list[Path] | None = None) -> list[Path]:
    """The notebooks of a submission folder that grading reads: regular files (:func:`regular_files`)
    at its top."""
    regular = regular_files(submitted)[0] if regular is None else regular
    return [path for path in regular if path.parent == submitted and path.suffix == ".ipynb"]


def released_notebooks(course: Path, assignment: str) -> list[str]:
    return sorted(path.name for path in (course / "release" / assignment).glob("*.ipynb"))


def graded_notebooks(released: list[str], sent: list[Path]) -> dict[str, Path]:
    """Which of the ``sent`` notebooks are graded, by the ``released`` name each is graded as: its
    own, or, when the assignment has one notebook and the submission one of another name
    (``ps1_broadcast_add-Copy1.ipynb``), the released one, as the judge finds it (nbgrader would
    find no notebook to grade). Empty: nothing to grade."""
    if len(released) == 1 and len(sent) == 1:
        return {released[0]: sent[0]}
    return {path.name: path for path in sent if path.name in released}


def regular_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """The regular files under ``folder``, reached through no link, checkpoints left out; and
    the links and other entries that are not such files. A link sent in a submission could name
    the gradebook or the hidden tests, which grading would read with the instructor's rights and
    nbgrader copy into the student's feedback."""
    files, others = [], []
    for root, folders, names in os.walk(folder):  # it enters no linked folder
        folders[:] = sorted(f for f in folders if f != ".ipynb_checkpoints")
        for path in [Path(root, name) for name in sorted(names)] + [Path(root, f) for f in folders]:
            mode = path.lstat().st_mode
            if stat.S_ISREG(mode):
                files.append(path)
            elif not stat.S_ISDIR(mode):
                others.append(path)
    return files, others


JOBS_PER_SERVICE = 50
"""A worker's nbgrader process grades this many students, then a fresh one starts: whatever
nbgrader leaves behind in a process stays bounded."""


class Service:
    """A worker's nbgrader process (:mod:`.autograde_service`): started with the worker's
    environment, it grades one student at a time until closed, stopped or recycled."""

    def __init__(self, env: dict[str, str]):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="nbgrader-", suffix=".log", delete=False)
        # `python -m` imports from the folder it starts in first: a folder of its own, not one that
        # anyone may write to, such as /tmp
        self.folder = tempfile.TemporaryDirectory(prefix="nbgrader-service-")
        read, write = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "autograder.instructor.autograde_service", str(write)],
            cwd=self.folder.name, env=os.environ | env, stdin=subprocess.PIPE, stdout=self.log,
            stderr=subprocess.STDOUT, text=True, pass_fds=(write,), start_new_session=True)
        os.close(write)
        self.answers = os.fdopen(read)
        self.graded = 0

    def grade(self, root: Path, job: Job, env: dict[str, str], timeout_s: float) -> tuple[dict | None, str]:
        """nbgrader's answer for ``job`` in the course folder ``root`` (None if it never came:
        the process ended, or ``timeout_s`` passed and it was stopped) and what the process
        printed meanwhile."""
        start = os.path.getsize(self.log.name)
        try:
            self.process.stdin.write(json.dumps({"root": str(root), "assignment": job.assignment,
                                                 "student": job.student, "env": env}) + "\n")
            self.process.stdin.flush()
            ready, _, _ = select.select([self.answers], [], [], timeout_s)
            answer = json.loads(self.answers.readline() or "null") if ready else None
        except OSError:  # it had ended
            answer = None
        with open(self.log.name) as log:
            log.seek(start)
            printed = log.read()
        if answer is None:
            self.stop()
        self.graded += 1
        return answer, printed

    def stop(self) -> None:
        """Kill it, its kernel and every runner below (once ended and reaped, its number may
        be another process's)."""
        if self.process.poll() is None:
            kill_tree(self.process.pid)
        self.process.wait()
        self._release()

    def close(self) -> None:
        """Let it finish (end of input); stop it if it does not."""
        try:
            self.process.stdin.close()
            self.process.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            kill_tree(self.process.pid)
            self.process.wait()
        self._release()

    def _release(self) -> None:
        self.answers.close()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)
        self.folder.cleanup()


_idle: dict[tuple, list[Service]] = {}
"""This process's idle services, by the environment they were started with."""
_busy: set[Service] = set()
_lock = threading.Lock()


class Stopped(Exception):
    """The run was stopped (:func:`stop_all`) before this student's grading began."""


def _take_service(env: dict[str, str], stops: int) -> Service:
    """An idle service started with ``env``, or a new one; :class:`Stopped` if :func:`stop_all`
    has run since its caller saw ``stops`` of them."""
    with _lock:
        idle = _idle.get(tuple(sorted(env.items())), [])
        service = idle.pop() if idle else None
    if service is not None and service.process.poll() is not None:  # it ended while idle
        service.stop()
        service = None
    service = service or Service(env)
    with _lock:
        stopped = _stops != stops
        if not stopped:
            _busy.add(service)
    if stopped:
        service.stop()
        raise Stopped
    return service


def _give_back(service: Service, env: dict[str, str], keep: bool) -> None:
    with _lock:
        _busy.discard(service)
        keep = keep and service.process.poll() is None and service.graded < JOBS_PER_SERVICE
        if keep:
            _idle.setdefault(tuple(sorted(env.items())), []).append(service)
    if not keep:
        service.close()


ATTEMPTS = 2
"""A student whose nbgrader failed on its own (its kernel died, its process ended: nothing of
a verdict, which the judge gives inside a test cell) is graded once more by a fresh nbgrader;
one past the time limit is not."""


def run_job(job: Job, workdir: Path, env: dict[str, str] | None = None,
            timeout_s: float = STUDENT_TIMEOUT_S) -> Result:
    """Grade ``job`` with nbgrader (``autograde --create --force``) in a new course folder under
    ``workdir``, by one of this process's services started with ``env`` (the worker's
    environment, added to this process's): an idle one, or a new one; :data:`ATTEMPTS` times
    at most while nbgrader itself fails, each in a fresh folder and the next with a new service.
    The log keeps every attempt's output. A run stopped meanwhile (:func:`stop_all`) starts no
    further attempt."""
    logs, problems, stops = [], [], _stops
    for attempt in range(1, ATTEMPTS + 1):
        result, timed_out = _attempt(job, workdir, env or {}, timeout_s, stops)
        logs.append(f"--- attempt {attempt} of {ATTEMPTS} ---\n{result.log}")
        problems.append(result.problem)
        if result.problem is None or timed_out or _stops != stops:  # graded, too slow, or the run was stopped
            break
    result.log = "\n".join(logs)[-KEPT_LOG_CHARS:]
    result.retried = problems[0] if len(problems) > 1 else None
    return result


def _attempt(job: Job, workdir: Path, env: dict[str, str], timeout_s: float, stops: int) -> tuple[Result, bool]:
    """One grading of ``job`` and whether it ran out of time. The student's grading has a
    temporary folder of its own (``TMPDIR``: the judge's compile cache, the runners' folders);
    both folders are removed afterwards, even when grading was stopped mid-way. A service whose
    student nbgrader failed is not used again."""
    root = workdir / f"{job.assignment}-{job.student}"
    remove_tree(root)
    scratch = Path(tempfile.mkdtemp(prefix="student-", dir=env.get("TMPDIR")))
    scratch.chmod(0o711)  # a grading user reaches its runners' folders inside, and lists nothing
    service, problem = None, "not graded"
    try:
        for name, content in job.files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(content)
        record = root / "grading-record.jsonl"
        start = time.monotonic()
        service = _take_service(env, stops)
        answer, printed = service.grade(root, job, {settings.GRADING_RECORD.name: str(record), "TMPDIR": str(scratch)},
                                        timeout_s)
        timed_out = answer is None and time.monotonic() - start >= timeout_s
        if answer is None:
            problem = (f"grading took longer than {timeout_s:g} s and was stopped" if timed_out
                       else _last_error(printed or "nbgrader's process ended"))
        else:
            problem = None if answer.get("success") else _last_error(answer.get("log", "") + answer.get("error", ""))
        output = printed + (answer or {}).get("log", "") + (answer or {}).get("error", "")
        graded = root / "autograded" / job.student / job.assignment
        return Result(job.student, problem, read_scores(root / "gradebook.db", job.assignment, job.student),
                      {str(p.relative_to(graded)): (p.stat().st_mode & 0o777, p.read_bytes())
                       for p in sorted(graded.rglob("*")) if p.is_file()},
                      (answer or {}).get("seconds", time.monotonic() - start), output[-KEPT_LOG_CHARS:],
                      recorded_seeds(record)), timed_out
    finally:
        if service is not None:
            _give_back(service, env, keep=problem is None)
        remove_tree(root)
        remove_tree(scratch)


def recorded_seeds(record: Path) -> dict[str, int]:
    """The seeds a judge's record holds, by cases (the last of each)."""
    lines = record.read_text().splitlines() if record.exists() else []
    return {entry["cases"]: entry["seed"] for entry in map(json.loads, lines)}


def _last_error(output: str) -> str:
    """Why nbgrader failed, from what it printed: the last exception raised (``UnicodeEncodeError:
    ...``) but nbgrader's own pointer to it (``NbGraderException: Please see the above
    traceback``), else the last line that names an error, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"[\w.]*(Error|Exception)\b", line) and "above traceback" not in line]
    errors = raised or [line for line in lines if "error" in line.lower()] or lines or ["nbgrader failed"]
    return errors[-1]


def kill_tree(pid: int) -> None:
    """Stop ``pid`` and every process below it (found by parent id), then kill them all:
    nbgrader, its kernel and the runners the kernel started in sessions of their own."""
    children: dict[int, list[int]] = {}
    for task in Path("/proc").glob("[0-9]*"):
        try:
            parent = int((task / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(task.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for member in tree:
            try:
                os.kill(member, sig)
            except ProcessLookupError:
                pass


_stops = 0
"""How many times :func:`stop_all` ran in this process: a grading that sees it change stops."""


def stop_all() -> None:
    """Kill every grading this process has running, and its idle services (after a Ctrl-C)."""
    global _stops
    with _lock:
        _stops += 1
        busy, idle = list(_busy), [service for services in _idle.values() for service in services]
        _idle.clear()
    for service in busy:
        kill_tree(service.process.pid)  # its thread sees the end, and cleans up
    for service in idle:
        service.stop()


def close_services() -> None:
    """End this process's idle services (its pool is done)."""
    with _lock:
        services = [service for idle in _idle.values() for service in idle]
        _idle.clear()
    for service in services:
        service.close()


def read_scores(database: Path, assignment: str, student: str) -> dict | None:
    """What ``nbgrader autograde`` wrote for one submission: timestamp, and per notebook its
    late penalty, each grade cell's automatic score and each answer cell's automatic comment."""
    if not database.exists():
        return None
    with Gradebook(f"sqlite:///{database}") as gb:
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            return None
        return {"timestamp": submission.timestamp,
                "notebooks": {nb.name: {"late_submission_penalty": nb.late_submission_penalty,
                                        "grades": {g.name: g.auto_score for g in nb.grades},
                                        "comments": {c.name: c.auto_comment for c in nb.comments}}
                              for nb in submission.notebooks}}


def merge(course: Path, assignment: str, result: Result) -> None:
    """Write one worker's result into the course's gradebook and ``autograded/`` folder. A
    student nbgrader could not grade keeps no earlier score: every automatic score becomes 0,
    flagged for a look by hand, and no graded notebook."""
    with warnings.catch_warnings(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's add_submission builds rows before adding them
        gb.update_or_create_student(result.student)
        scores = result.scores if result.problem is None else None
        timestamp: datetime | None = scores and scores["timestamp"]
        gb.update_or_create_submission(assignment, result.student, **({"timestamp": timestamp} if timestamp else {}))
        for nb in gb.find_submission(assignment, result.student).notebooks:
            theirs = (scores or {"notebooks": {}})["notebooks"].get(nb.name)
            if theirs is not None:
                nb.late_submission_penalty = theirs["late_submission_penalty"]
            for grade in nb.grades:
                grade.auto_score = theirs["grades"].get(grade.name) if theirs else 0.0
                grade.needs_manual_grade = theirs is None or grade.manual_score is not None or grade.auto_score is None
            for comment in nb.comments:
                comment.auto_comment = theirs["comments"].get(comment.name) if theirs else None
        gb.db.commit()
    _replace_folder(course / "autograded" / result.student / assignment, result.graded if scores else {})


def _replace_folder(target: Path, files: dict[str, tuple[int, bytes]]) -> None:
    """Swap ``target`` for a folder holding ``files`` (none: remove it), by renames."""
    new, old = target.with_name(f".{target.name}.new"), target.with_name(f".{target.name}.old")
    for leftover in (new, old):
        remove_tree(leftover)
    if files:
        for name, (mode, content) in files.items():
            (new / name).parent.mkdir(parents=True, exist_ok=True)
            (new / name).write_bytes(content)
            (new / name).chmod(mode)
    if target.exists():
        os.replace(target, old)
    if files:
        os.replace(new, target)
    remove_tree(old)


class LocalPool:
    """Workers on this machine: threads, each running one student's nbgrader at a time in
    its slot's environment (:func:`slots`), in copies of the course under ``workdir``."""

    def __init__(self, workers: int | None, workdir: Path):
        self.environments, self.workdir = slots(workers), workdir
        self.free: queue.SimpleQueue = queue.SimpleQueue()
        for env in self.environments:
            self.free.put(env)
        self.executor = ThreadPoolExecutor(len(self.environments), thread_name_prefix="grader")

    def describe(self) -> str:
        return describe(self.environments)

    def submit(self, job: Job) -> Future:
        return self.executor.submit(self._run, job)

    def _run(self, job: Job) -> Result:
        env = self.free.get()
        try:
            return run_job(job, self.workdir, env)
        finally:
            self.free.put(env)

    def stop(self) -> None:
        """Cancel what has not started and kill what has."""
        self.executor.shutdown(wait=False, cancel_futures=True)
        stop_all()

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        close_services()


class DaskPool:
    """Workers of a Dask cluster (``distributed``, imported only here): one student per task,
    graded in the worker's temporary folder. Start one single-threaded worker per GPU, with
    that GPU in its ``CUDA_VISIBLE_DEVICES`` and ``--resources GPU=1``; then every task asks
    for a GPU, so no two students share one. A cluster whose workers declare no GPU grades on
    their CPUs."""

    def __init__(self, address: str):
        from distributed import Client
        self.client = Client(address, timeout="30s")
        workers = self.client.scheduler_info()["workers"].values()
        self.gpus = sum(int(w.get("resources", {}).get("GPU", 0)) for w in workers)
        self.workers = len(workers)
        if not self.workers:
            raise ValueError(f"the Dask scheduler at {address} has no workers: start them first.")
        self.executor = self.client.get_executor(pure=False, resources={"GPU": 1} if self.gpus else None)

    def describe(self) -> str:
        gpus = f", {self.gpus} GPU(s), one student per GPU at a time" if self.gpus else " on their CPUs (no GPU declared)"
        return f"Dask cluster at {self.client.scheduler.address}: {self.workers} worker(s){gpus}"

    def submit(self, job: Job) -> Future:
        return self.executor.submit(run_in_temporary_folder, job)

    def stop(self) -> None:
        """Cancel what has not started, and kill every grading running on the workers
        (Dask's cancel leaves a running task's processes alone)."""
        self.executor.shutdown(wait=False)
        self.client.run(stop_all)

    def close(self) -> None:
        self.client.close()


def run_in_temporary_folder(job: Job) -> Result:
    """:func:`run_job` on a machine without the course: in a temporary folder, as the worker's
    environment says (its GPU)."""
    with tempfile.TemporaryDirectory(prefix="grading-") as folder:
        return run_job(job, Path(folder))
