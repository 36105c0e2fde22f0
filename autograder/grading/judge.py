"""The judge: grades a notebook's answer cells without running them.

It reads the setup and answer cells from the notebook file, starts a runner
(:mod:`.runner`) that runs them, draws every input itself and has the runner draw the same
from the case and seed, checks the outputs that come back (bytes, or on a GPU the runner's
device memory, mapped: :mod:`.ipc`) against the reference it computes itself, and (on a
GPU) times batches with its own clock (:mod:`.clock`). Under ``nbgrader autograde`` it runs in nbgrader's kernel,
which runs only the instructor's cells (:mod:`.autograde`): the verdict, the points and the
cell output nbgrader reads come from a process that never ran the student's code.

A student's tests share their runners (:func:`_take_kept`): the correctness test spawns the
student's runner, which imports and waits while (on a GPU) the PyTorch baseline's runner is
calibrated with no student code loaded, then runs the answer cells; the hidden test takes
both, and the throughput test races the student's runner against that baseline. Two starts saved per passing student (a process, the
course's imports, the answer cells, a first call). A student's runner is kept only by a
correctness test whose every case passed, and taken only by a later test of the same answer
cells under the same settings; any other test stops it first. After a crash, a hang, an
exception, a broken rule or a wrong output, any of which could leave the runner in a state
that changes the next verdict, the next test starts afresh, as every test did before (and
after a CUDA fault, the same test's next case: :meth:`Runner.restart`). What
carries over is what already carries over between the cases of one test: the function's own
state and threads (and the outputs kept to refuse a reused buffer). Counting its calls, a
function can tell the hidden cases from the visible ones, as it already can by their shapes
(the visible cases are public), and gains nothing: every input is fresh, every output checked
against the judge's reference, every timed batch too. Work it leaves running on the GPU slows
the race's baseline batches, not the clean ones timed before it existed, and the faster of the
two is used (:mod:`.clock`). Honest code whose answers depend on earlier calls is wrong code
whose verdict already depends on the order of the cases; that order (the correctness test's
cases, then the hidden test's, then the timed batches) is the notebook's, the same at every
grading. Each test's time limit counts from its own start; what is kept ends with the judge
(:func:`stop_kept`, at exit).

The throughput test takes the correctness test's verdict on the visible cases (:data:`_verdicts`,
the judge's own record, by the same key) instead of running them again: a failing one ends it
at once (no runner, no baseline), a passing one leaves it the race, whose batches are checked
against the reference too. Run alone, it runs the cases itself.
"""
from __future__ import annotations

import atexit
import dataclasses
import json
import math
import os
import pickle
import secrets
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .. import device, settings
from ..correctness import Problem, run_cases
from ..language import say
from ..report import CaseResult, CheckResult, ThroughputResult
from ..spec import Case, Exercise
from . import host_modules, protocol, sandbox
from .cells import graded_cells

if TYPE_CHECKING:
    from . import clock

ISOLATE_VAR = settings.ISOLATE.name
TIMEOUT_VAR = settings.GRADING_TIMEOUT_S.name
START_LIMIT_S = 120
"""For the runner to import the course and run the answer cells."""


def judged() -> bool:
    """Whether ``grade`` is grading for marks here (nbgrader's autograde, or :data:`ISOLATE_VAR`)."""
    return os.environ.get("NBGRADER_EXECUTION") == "autograde" or settings.ISOLATE.get() == "1"


def find_notebook(exercise: str) -> Path:
    """The notebook being graded: nbgrader runs it from its own folder, named after the assignment."""
    here = Path.cwd()
    named = here / f"{exercise}.ipynb"
    if named.exists():
        return named
    found = sorted(here.glob("*.ipynb"))
    if len(found) == 1:
        return found[0]
    raise FileNotFoundError(f"cannot find the notebook of {exercise} in {here} to grade it")


def compile_cache(trusted: bool = False) -> Path:
    """Triton's cache for the runners this judge starts: one per grading kernel, that is per
    student's notebook, so that student's tests share compiled kernels and no one else's
    code reaches them; ``trusted``: the baseline runner's own, since that one runs unconfined
    and must load nothing a student's code wrote. Each starts with a copy of the machine's host
    modules (:mod:`.host_modules`)."""
    if trusted not in _caches:
        path = Path(tempfile.mkdtemp(prefix="triton-cache-"))
        host_modules.seed(path)
        _caches[trusted] = path
    return _caches[trusted]


_caches: dict[bool, Path] = {}
"""The caches :func:`compile_cache` made, by ``trusted``."""

FAULT_RESTARTS = 3
"""How many times one test's runner is started again after a CUDA fault (see :meth:`Runner.restart`)."""


class Runner:
    """A runner process and the judge's end of its channel. Called with a case, its seed and
    the inputs the judge drew from them, it returns ``(outputs, problem)`` as
    :func:`~autograder.correctness.run_cases` wants (the problem's message and kind as the
    runner sent them: untrusted, and shown only to the submission's own author); once the
    process has crashed, hung or broken the protocol, :attr:`ended` says so. It runs in a
    scratch folder of its own, removed when it stops."""

    def __init__(self, exercise: Exercise, code: tuple[tuple[str, str], ...] | None, deadline: float,
                 limit_s: float, begin: bool = True):
        """Start the process, which runs the cells ``code``, each a name and its Python
        (:func:`~.cells.graded_cells`; None: serve the reference); with
        ``begin``, also wait until it has run the answer cells
        (:meth:`begin`). Until then a student's runner only imports: none of their code runs."""
        self.exercise, self.code, self.deadline, self.limit_s = exercise, code, deadline, limit_s
        self.restarts = 0
        self._start()
        if begin:
            self.begin()

    def _start(self) -> None:
        """Start the process, in a scratch folder of its own."""
        exercise, code = self.exercise, self.code
        self.ended: str | None = None
        self.ended_brief: str | None = None
        """:attr:`ended` without the process's output (for a verdict on hidden cases)."""
        self.folder = Path(tempfile.mkdtemp(prefix="grading-"))
        scratch = self.folder / "work"
        self.folder.chmod(0o711)  # a grading user reaches its own folder inside (and lists nothing)
        scratch.mkdir()
        (scratch / "cells.json").write_text(json.dumps(code or ()))
        ours, theirs = socket.socketpair()
        self.channel = ours
        cmd = [sys.executable, "-m", "autograder.grading.runner", "cells.json", exercise.name, str(theirs.fileno())]
        if code is not None and sandbox.grading_user() is not None:  # not a cap on the instructor's own user
            cmd += ["--processes", str(settings.PROCESS_LIMIT.get())]
        self.process = sandbox.Sandboxed(cmd + (["--reference"] if code is None else []), cwd=scratch,
                                         hide=(ISOLATE_VAR, sandbox.GRADING_USER_VAR, settings.GRADING_RECORD.name),
                                         cache=compile_cache(trusted=code is None),
                                         pass_fds=(theirs.fileno(),), trusted=code is None)
        theirs.close()
        self.error: str | None = None
        """Why the answer cells could not be graded at all, or None."""
        self.trusted = code is None

    def restart(self) -> bool:
        """After a CUDA fault, which leaves a process's CUDA context unusable: the same answer
        cells in a new process for the cases left, so that a fault costs its own case only,
        wherever the process's memory happened to lie (at most :data:`FAULT_RESTARTS` times).
        Whether the new process is ready."""
        if self.trusted or self.ended or self.restarts >= FAULT_RESTARTS:
            return False
        self.restarts += 1
        self.stop()
        self._start()
        return not self.begin().error

    def begin(self) -> Runner:
        """Let a student's runner go on to its CUDA context, its confinement and the answer cells,
        and wait for them to run (the baseline's runner goes on by itself)."""
        header, _ = self.request(None if self.trusted else {"op": "begin"}, limit_s=START_LIMIT_S)
        error = self.ended or header.get("error")
        self.error = error if error is None or isinstance(error, str) else \
            say("the grading process sent a start-up message the judge does not accept.")
        return self

    def request(self, header: dict | None, tensors=(), max_bytes: int = 0, limit_s: float | None = None):
        """Send a request (None: only wait for the next message) and return the reply; a
        failed exchange ends the runner and returns ``({"problem": why}, [])``."""
        if self.ended:
            return {"problem": self.ended}, []
        limit_s = limit_s or self.limit_s
        deadline = min(self.deadline, time.monotonic() + limit_s)
        try:
            if header is not None:
                protocol.send(self.channel, header, tensors)
            return protocol.recv(self.channel, deadline, max_bytes, alive=lambda: self.process.process.poll() is None)
        except protocol.TimedOut:
            self.ended, self.ended_brief = self._stop(
                timed_out=(header is None, limit_s) if deadline < self.deadline else None)
        except protocol.PeerGone:
            self.ended, self.ended_brief = self._stop()
        except (protocol.ProtocolError, OSError) as error:
            self.ended, self.ended_brief = self._stop(broken=str(error))
        return {"problem": self.ended}, []

    def __call__(self, case: Case, seed: int, inputs):
        """The student's outputs for ``inputs``, which the judge drew for ``case`` from ``seed``:
        the runner draws its own copy from the same two."""
        max_bytes = _output_bytes(self.exercise, inputs)
        request = {"op": "call", "case": pickle.dumps(case).hex(), "seed": seed, "max_bytes": max_bytes}
        header, out = self.request(request, (),
                                   max_bytes=max_bytes, limit_s=self.exercise.time_limit_s)
        if self.ended:  # run_cases says so in the judge's words (ended_brief)
            return None, Problem(self.ended, "ended")
        if (problem := header.get("problem")) is not None:  # its kind picks one of correctness.brief's sentences
            return None, Problem(str(problem), str(header.get("kind")))
        where = next((t.device for t in inputs if isinstance(t, torch.Tensor)), torch.device("cpu"))
        if where.type == "cuda":
            out = _mapped_outputs(header.get("outputs"), max_bytes)
            if isinstance(out, str):
                return None, Problem(out, "protocol")
        if len(out) != len(self.exercise.outputs):
            return None, Problem(say("the grading process sent no output for this case."), "protocol")
        return tuple(o.to(where) for o in out), None

    def pause(self) -> None:
        self.process.pause()

    def resume(self) -> None:
        self.process.resume()

    def stop(self) -> None:
        if not self.ended:
            try:
                protocol.send(self.channel, {"op": "quit"})
            except OSError:
                pass
            self.process.wait(5)
        self._stop()

    def _stop(self, timed_out: tuple | bool | None = False, broken: str | None = None) -> tuple[str, str]:
        """Stop the process; why it ended, for the student, with the tail of its output and in
        brief (without it, and without what the process sent). ``timed_out``: None when the
        whole test's time ran out, (starting, seconds) when one request's did, ``starting`` when
        that request was the wait for the answer cells to run."""
        self.process.resume()
        returncode = None if timed_out is not False else self.process.wait(5)
        finished = self.process.stop()
        self.channel.close()
        sandbox.remove_tree(self.folder)
        last = "\n".join(line[:300] for line in finished.output.strip().splitlines()[-6:])
        last = "\n" + say("Its last output:\n{output}", output=last) if last else ""
        if timed_out is None:
            why = say("grading was stopped after {budget:g} s, the limit for one graded test: the code never "
                      "finished.{last}", budget=settings.GRADING_TIMEOUT_S.get(), last="")
        elif timed_out is not False:
            starting, seconds = timed_out
            why = (say("your answer cells did not finish within {seconds:g} s, so grading stopped them: look for "
                       "a loop that never ends or a grid far larger than intended.{last}",
                       seconds=seconds, last="") if starting else
                   say("`{function}` did not finish within {seconds:g} s, so grading stopped them: look for a loop "
                       "that never ends or a grid far larger than intended.{last}",
                       function=self.exercise.function, seconds=seconds, last=""))
        elif broken is not None:
            full = say("the grading process sent what the judge does not accept ({broken}).{last}",
                       broken=broken, last=last)
            return full, say("the grading process sent what the judge does not accept.")
        else:
            how = sandbox.describe_exit(returncode) if returncode is not None else say("it closed its channel")
            why = (say("your code {memory}, which ended the grading process ({how}).{last}",
                       memory=sandbox.memory_note(), how=how, last="")
                   if sandbox.ran_out_of_memory(finished.output) else
                   say("your code crashed the grading process ({how}).{last}", how=how, last=""))
        return why + last, why  # {last} ends every one of these sentences, in every language


def _mapped_outputs(exported, max_bytes: int) -> list[torch.Tensor] | str:
    """Copies of the outputs a runner exported from its GPU memory (:func:`.ipc.export`), or
    why they cannot be read. At most ``max_bytes`` in all are read."""
    from . import ipc
    if not isinstance(exported, list) or not all(map(ipc.is_export, exported)):
        return say("the grading process sent no output for this case.")
    dtypes = [protocol.DTYPES[o["dtype"]] for o in exported]
    if sum(dtype.itemsize * math.prod(o["size"]) for o, dtype in zip(exported, dtypes)) > max_bytes:
        return say("the outputs are larger than the reference's.")
    try:
        with ipc.mapped([o["handle"] for o in exported]) as tensor:
            return [tensor(o["handle"], o["offset"], dtype, o["size"]).clone() for o, dtype in zip(exported, dtypes)]
    except (ipc.IpcError, RuntimeError) as error:  # RuntimeError: sizes PyTorch cannot hold
        return say("its outputs could not be read ({error}).", error=error)


def _output_bytes(exercise: Exercise, inputs) -> int:
    """The most output bytes a case may send back: its reference's shapes in float64."""
    try:
        metas = exercise.call(exercise.reference, tuple(t.to("meta") if isinstance(t, torch.Tensor) else t
                                                        for t in inputs))
    except Exception:  # an operation without a meta kernel (PS5 reads lengths from a tensor): the real shapes
        metas = exercise.call(exercise.reference, inputs)
    return sum(max(meta.numel(), 1) * 8 for meta in metas)


def grade_notebook(exercise: Exercise, *, cases: str, measure_throughput: bool) -> CheckResult:
    """Grade the current notebook's answer cells: the ``cases`` (``visible`` or ``hidden``),
    then (``measure_throughput``, on a GPU, when every case passed) the speed."""
    from . import clock

    budget = settings.GRADING_TIMEOUT_S.get()
    deadline = time.monotonic() + budget
    notebook = find_notebook(exercise.name)
    code = graded_cells(notebook)
    where, seed = device.current(), secrets.randbits(31)
    # a kept runner serves the same answer cells under the same settings: the variables a runner starts with
    key = (exercise.name, notebook.resolve(), code, frozenset(sandbox.clean_environment(notebook.parent).items()))
    kept = _take_kept(key if cases == "hidden" or measure_throughput else None, deadline)
    visible = _verdicts.get(key)  # the correctness test's verdict on these cells, where it ran
    earlier = visible if cases == "visible" and measure_throughput else None
    sandbox.become_subreaper()
    timed = where.has_gpu and exercise.throughput is not None
    # a race against the baseline, in this test or a later one of these cells: not after failed visible cases
    races = timed and (cases == "visible" and not measure_throughput or visible is None or visible.correct)
    if earlier is not None and not (timed and earlier.correct):  # nothing left to run
        kept.stop()
        result = _copy(earlier)
        if exercise.throughput is not None:
            result.throughput = _throughput(result, timed, None, None)
        return result
    keep_runner = keep_baseline = False
    try:
        if races and kept.baseline is None and kept.runner is not None:  # its baseline's runner ended
            kept.runner.stop()  # a clean baseline is timed with no student code loaded
            kept.runner = None
        fresh = kept.runner is None
        if fresh:  # it imports (about a second) while the baseline is calibrated, then waits to begin
            kept.runner = Runner(exercise, code, deadline, budget, begin=False)
        if races and kept.baseline is None:  # calibrated before any student code is loaded
            kept.baseline = clock.Baseline(exercise, Runner(exercise, None, deadline, budget))
        if fresh:
            kept.runner.begin()
        if kept.runner.error:
            result = _failed(exercise, kept.runner.error)
        elif earlier is not None:
            result = _copy(earlier)
        else:
            result = CheckResult(exercise.name, seed, run_cases(exercise, kept.runner,
                                                                exercise.cases(cases, where.device), seed, where.device))
        if measure_throughput and exercise.throughput is not None:
            result.throughput = _throughput(result, races, kept.baseline, kept.runner)
        # a later test of these cells: the hidden test, then the throughput test if the visible cases passed
        later = not measure_throughput and (result if cases == "visible" else visible or result).correct
        keep_baseline = later and races
        keep_runner = later and result.correct and not kept.runner.ended
    finally:
        if not keep_runner and kept.runner is not None:
            kept.runner.stop()
            kept.runner = None
        if keep_baseline or keep_runner:
            _kept[key] = kept
        else:
            kept.stop()
    _name_memory_exhaustion(result)
    if cases == "visible" and not measure_throughput:
        _verdicts[key] = result
    if earlier is None and result.seed >= 0 and (record := settings.GRADING_RECORD.get()) is not None:
        with record.open("a") as f:  # the instructor's: which inputs this verdict was on
            f.write(json.dumps({"notebook": str(notebook.resolve()), "exercise": exercise.name, "cases": cases,
                                "seed": result.seed}) + "\n")
    return result


def _copy(verdict: CheckResult) -> CheckResult:
    """An earlier verdict, for a test to add its own throughput verdict to."""
    return dataclasses.replace(verdict, cases=list(verdict.cases))


@dataclasses.dataclass
class _Kept:
    """What one test of a student's answer cells leaves the next: the student's runner, and the
    baseline (:class:`~.clock.Baseline`) calibrated before that runner started."""
    runner: Runner | None = None
    baseline: clock.Baseline | None = None

    def stop(self) -> None:
        for runner in (self.runner, self.baseline and self.baseline.reference):
            if runner is not None:
                runner.stop()
        self.runner = self.baseline = None


_verdicts: dict[tuple, CheckResult] = {}
"""The correctness tests' verdicts, by the answer cells and settings they graded, for the
throughput test of the same cells."""

_kept: dict[tuple, _Kept] = {}
"""What a test kept for the next (one student's at most), by the answer cells and settings it runs."""


def _take_kept(key: tuple | None, deadline: float) -> _Kept:
    """What was kept for ``key``, now with the test's ``deadline``, less any runner that ended
    between tests; everything else kept is stopped."""
    kept = _kept.pop(key, None) or _Kept()
    stop_kept()
    if kept.runner is not None and kept.runner.process.wait(0) is not None:
        kept.runner.stop()
        kept.runner = None
    if kept.baseline is not None and kept.baseline.reference.process.wait(0) is not None:
        kept.baseline.reference.stop()
        kept.baseline = None
    for runner in (kept.runner, kept.baseline and kept.baseline.reference):
        if runner is not None:
            runner.deadline = deadline
    return kept


def stop_kept() -> None:
    """Stop everything kept."""
    while _kept:
        _kept.popitem()[1].stop()


def clean_up() -> None:
    """Stop everything kept and remove the compile caches: at exit, and earlier where nbgrader's
    kernel runs it after the last graded cell before it is killed
    (:class:`~.autograde.ExecuteInstructorCells`)."""
    stop_kept()
    while _caches:
        sandbox.remove_tree(_caches.popitem()[1])


atexit.register(clean_up)


def _throughput(result: CheckResult, timing: bool, clean, runner: Runner | None) -> ThroughputResult:
    """The throughput verdict: ``clean`` (the timed baseline) races ``runner`` when ``timing``
    (a GPU) and every case passed."""
    from .. import throughput
    if not timing:
        return throughput.not_measured()
    if not result.correct:
        return ThroughputResult("not measured", say("not measured: fix correctness first."))
    try:
        return clean.race(runner)
    except Exception as error:  # the judge's own machinery: say so, never a bare traceback
        return ThroughputResult("failed", say("not measured: the judge's timing failed ({error}); tell your "
                                              "instructor.", error=f"{type(error).__name__}: {error}"))


def _failed(exercise: Exercise, message: str) -> CheckResult:
    """The verdict when the answer cells could not be graded at all: shown in full, hidden tests
    included (nothing of a case had run)."""
    return CheckResult(exercise.name, seed=-1, cases=[CaseResult(say("(whole submission)"), False, message, message)])


def _name_memory_exhaustion(result: CheckResult) -> None:
    for case in result.cases:
        if case.passed or not sandbox.ran_out_of_memory(case.message):
            continue
        if not sandbox.memory_noted(case.message):
            case.message = say("your code {memory}: {error}", memory=sandbox.memory_note(), error=case.message)
        if not sandbox.memory_noted(case.brief):
            case.brief = say("your code {memory}.", memory=sandbox.memory_note())
