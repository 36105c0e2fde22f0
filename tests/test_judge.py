"""The judge grades answer cells it never runs: whatever the runner's code does to the
checker in its own process, the verdict is the judge's. Each attack below earned marks when
checker and student code shared one process (issue 18); each must now earn what a kernel
that does nothing earns."""
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import torch

from autograder import exercises, settings
from autograder.check import GradingFailure, grade
from autograder.assignments.ps1_broadcast_add import EXERCISE as ADD
from autograder.grading import judge as judging
from autograder.grading.cells import answer_code
from autograder.instructor.sync import solution_section
from conftest import DEVICE, ROOT

SETUP = "import torch\nimport triton\nimport triton.language as tl\nfrom autograder import check, grade, setup_device\ndevice = setup_device()"
ZEROS = '''
@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), dtype=out_ptr.dtype.element_ty), mask=offs < n)

def add(x, y):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
'''
RIGGED_CHECKER = '''
import autograder.correctness, torch
autograder.correctness.compare = lambda *args, **kwargs: None   # "every output matches"
torch.isclose = lambda a, b, **kw: torch.ones(a.shape, dtype=torch.bool)
torch.equal = lambda a, b: True
'''

RIGGED_IMPORT = '''
import importlib.abc, importlib.util, sys

class RiggedChecker(importlib.abc.Loader):   # the fresh checker, as this answer would have it
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        from autograder.report import CaseResult, CheckResult
        module.check = lambda name, fn, **kw: CheckResult(name, 0, [CaseResult("every case", True)])

class Finder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "autograder.check":
            return importlib.util.spec_from_loader(name, RiggedChecker())

sys.meta_path.insert(0, Finder)
'''


def write_notebook(folder, answer: str, other: str = "", name: str = ADD.name) -> None:
    def cell(source, **nbgrader):
        c = nbformat.v4.new_code_cell(source)
        c.metadata["nbgrader"] = nbgrader
        return c
    nb = nbformat.v4.new_notebook(cells=[
        cell(SETUP, grade_id="setup", solution=False),
        cell(answer, grade_id="answer", solution=True),
        cell(other + "\n%timeit 1", grade_id="try_code", solution=False),
    ])
    nbformat.write(nb, folder / f"{name}.ipynb")


@pytest.fixture
def graded_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(judging.ISOLATE_VAR, "1")
    return tmp_path


def isolated(exercise=ADD, cases="visible"):
    return judging.grade_notebook(exercise, cases=cases, measure_throughput=False)


def test_only_setup_and_answer_cells_run(graded_here):
    write_notebook(graded_here, "def add(x, y): pass", other="raise SystemExit('never run')")
    code = answer_code(graded_here / f"{ADD.name}.ipynb", with_setup=True)
    assert "never run" not in code and "def add" in code and "setup_device()" in code


def test_the_reference_passes_in_a_clean_process(graded_here):
    write_notebook(graded_here, solution_section("solutions/broadcast_add.py", "add"))
    assert isolated().correct


def test_answer_cells_run_as_jupyter_runs_them(graded_here):
    """Each cell compiled on its own (a ``from __future__`` import holds from its cell on); the
    Python of ``%%capture``, ``%%time`` and ``%time`` runs (a kernel defined there too), other
    magics and shell lines do nothing, and are such only where a statement starts: ``%``
    beginning a continued line is Python's (black breaks lines so)."""
    answer = ("%%capture\n%%time\nfrom __future__ import annotations\n%matplotlib inline\n!true\nlisted = !ls\n"
              "WRAP = (\n    7\n    % 4\n)\nassert WRAP == 3, WRAP\n"
              + solution_section("solutions/broadcast_add.py", "add")
              + "\n_x = torch.ones(4, 4, device=device.device)\n%time _out = add(_x, _x[0])\nassert _out.shape == (4, 4)\n")
    write_notebook(graded_here, answer)
    result = isolated()
    assert result.correct, result.summary()


def test_annotations_are_evaluated_as_in_jupyter(graded_here):
    # the runner's own `from __future__ import annotations` must not reach the student's cells:
    # Triton's interpreter would then read `BLOCK: language.constexpr` as a string, not a constexpr
    answer = ("def _probe(x: int) -> int:\n    return x\n\n"
              "assert _probe.__annotations__['x'] is int, 'annotations became strings'\n"
              + solution_section("solutions/broadcast_add.py", "add"))
    write_notebook(graded_here, answer)
    result = isolated()
    assert result.correct, result.summary()


def test_a_magic_runs_in_grading_only_where_its_code_is_python(tmp_path, monkeypatch):
    from autograder.grading.runner import NoShell
    monkeypatch.chdir(tmp_path)
    shell = NoShell()
    assert shell.run_cell_magic("bash", "", "echo hi > there\n") is None
    assert shell.run_cell_magic("writefile", "helper.py", "import nothing_here\n") is None
    assert shell.system("touch there") is None and not list(tmp_path.iterdir())
    assert shell.run_line_magic("time", "6 * 7") == 42


@pytest.mark.parametrize("wrong, said", [
    ("torch.empty(out.shape, dtype=torch.uint16, device=out.device)", "output dtype is torch.uint16, expected"),
    ("torch.empty((3 * out.shape[0], out.shape[1]), device=out.device)", "more than PyTorch's result would hold"),
    ("torch.empty((0, 1 << 50), device=out.device)", "output shape is (0, 1125899906842624), far larger"),
])
def test_an_output_the_channel_cannot_carry_fails_its_own_case_alone(graded_here, wrong, said):
    """A wrong dtype or shape, said as one, not a broken channel that ends the runner."""
    answer = solution_section("solutions/broadcast_add.py", "add") + f"""
_calls, _right = [0], add

def add(x, y):
    _calls[0] += 1
    out = _right(x, y)
    return {wrong} if _calls[0] == 2 else out
"""
    write_notebook(graded_here, answer)
    failed = [c for c in isolated().cases if not c.passed]
    assert len(failed) == 1 and said in failed[0].message, failed


def test_a_students_tests_share_a_compile_cache_of_their_own(graded_here):
    mark = "\nimport os\nopen(os.path.join(os.environ['TRITON_CACHE_DIR'], 'graded'), 'a').write('x')\n"
    write_notebook(graded_here, solution_section("solutions/broadcast_add.py", "add") + mark)
    assert isolated().correct and isolated().correct  # writable, confined or not
    cache = judging.compile_cache()
    assert (cache / "graded").read_text() == "xx" and not cache.is_relative_to(graded_here)


def test_no_input_crosses_the_channel(graded_here, monkeypatch):
    """The runner draws each case's inputs from the case and seed the judge sends (8192 × 8192
    float32 cases cost 0.5-0.9 s each in bytes on an H100); the reference passing shows it
    drew what the judge drew."""
    from autograder.grading import protocol
    sent, send = [], protocol.send
    monkeypatch.setattr(protocol, "send", lambda sock, header, tensors=(): (
        sent.append((header.get("op"), len(tensors))), send(sock, header, tensors))[-1])
    write_notebook(graded_here, solution_section("solutions/broadcast_add.py", "add"))
    result = isolated()
    calls = [n for op, n in sent if op == "call"]
    assert result.correct and len(calls) == len(result.cases) and not any(calls)


def test_the_judge_refuses_malformed_exported_outputs():
    """Outputs a runner says it left in GPU memory are read only once their description is sane."""
    good = {"handle": "ab" * 64, "offset": 0, "dtype": "float32", "size": [4]}
    for exported in (None, [1], [dict(good, dtype="object")], [dict(good, offset=1.5)], [dict(good, size=[-1])],
                     [dict(good, size=[0, 2**60])], [dict(good, size=[1] * 17)], [dict(good, handle=None)]):
        assert judging._mapped_outputs(exported, 1 << 20) == "the grading process sent no output for this case."
    assert judging._mapped_outputs([dict(good, size=[1 << 18, 2])], 1 << 20) == \
        "the outputs are larger than the reference's."


def test_a_case_may_send_back_no_more_than_its_references_outputs_in_float64():
    """PS5's reference reads its lengths from a tensor, so it has no shapes on the meta device."""
    varlen = exercises.get("ps5_varlen_attention")
    for case in varlen.visible_cases["cpu"][:3]:
        inputs = varlen.make_inputs(case, torch.Generator("cpu").manual_seed(0), "cpu")
        out, = varlen.call(varlen.reference, inputs)
        assert judging._output_bytes(varlen, inputs) == max(out.numel(), 1) * 8, case.label


def test_only_compiled_c_modules_are_kept_as_host_modules(tmp_path):
    from autograder.grading.host_modules import keep_host_modules
    cache, kept = tmp_path / "cache", tmp_path / "kept"
    for path in ("launcher/__triton_launcher.cpython-311-x86_64-linux-gnu.so", "kernel/add.cubin", "kernel/add.ttir",
                 "kernel/__grp__add.json"):
        (cache / path).parent.mkdir(parents=True, exist_ok=True)
        (cache / path).write_text(path)
    kept.mkdir()
    keep_host_modules(cache, kept)
    assert [p.relative_to(kept).as_posix() for p in kept.rglob("*") if p.is_file()] == [
        "launcher/__triton_launcher.cpython-311-x86_64-linux-gnu.so"]


@pytest.fixture
def host_modules_here(tmp_path, monkeypatch):
    """This machine's host modules in a folder of the test's own; the judge's compile cache made afresh."""
    from autograder.grading import host_modules
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    judging.clean_up()
    yield host_modules.folder()
    judging.clean_up()


def test_thousands_of_answer_cells_start_a_runner_all_the_same(monkeypatch):
    """The cells go in a file: 30,000 of them would not fit a command line."""
    from autograder.grading import sandbox
    started = []
    monkeypatch.setattr(sandbox, "Sandboxed", lambda cmd, **kwargs: started.append(cmd))
    runner = judging.Runner(ADD, (("answer-cell-1", "x = 1"),) * 30_000, time.monotonic() + 60, 60, begin=False)
    runner.channel.close()
    try:
        assert len(" ".join(started[0])) < 1000
        cells = json.loads((runner.folder / "work" / "cells.json").read_text())
        assert len(cells) == 30_000 and cells[0] == ["answer-cell-1", "x = 1"]
    finally:
        sandbox.remove_tree(runner.folder)


def test_a_cell_of_hundreds_of_magics_is_read_in_no_time():
    """IPython's transformer reads a whole cell again for each magic it turns into a call."""
    from autograder.grading.cells import as_python
    start = time.monotonic()
    python = as_python("x = 1\n" + "%time y = 2\n" * 2000)
    assert time.monotonic() - start < 5 and python.startswith("x = 1") and "%time" not in python
    start = time.monotonic()
    as_python("x = 1\n" + "".join(f"a{i} = %time 1\n" for i in range(2000)))  # magics not at a line's start
    assert time.monotonic() - start < 5


def test_the_baseline_runner_loads_nothing_from_a_cache_student_code_writes(monkeypatch):
    """The baseline's runner runs unconfined: a module a student's runner left in the cache it
    shares would run as the instructor."""
    from autograder.grading import sandbox
    caches = {}

    class Started:
        def __init__(self, cmd, *, cache, trusted, **kwargs):
            caches[trusted] = cache

    monkeypatch.setattr(sandbox, "Sandboxed", Started)
    for code in (None, (("answer-cell-1", "def add(x, y): pass"),)):
        runner = judging.Runner(ADD, code, time.monotonic() + 60, 60, begin=False)
        runner.channel.close()
        sandbox.remove_tree(runner.folder)
    assert caches[True] != caches[False] == judging.compile_cache()


def test_a_students_compile_cache_starts_with_host_modules_their_code_cannot_change(graded_here, host_modules_here):
    module = host_modules_here / "k" / "__triton_launcher.so"
    module.parent.mkdir(parents=True)
    module.write_text("built by the course")
    tamper = f"""
import os, pathlib
mine = pathlib.Path(os.environ["TRITON_CACHE_DIR"], "k", "__triton_launcher.so")
assert mine.read_text() == "built by the course"
mine.write_text("changed by a student")
try:
    pathlib.Path({str(module)!r}).write_text("changed by a student")
except OSError:
    pass
"""
    write_notebook(graded_here, solution_section("solutions/broadcast_add.py", "add") + tamper)
    assert isolated().correct  # the answer cells ran: their copy was there, and writable
    assert module.read_text() == "built by the course"
    assert (judging.compile_cache() / "k" / "__triton_launcher.so").read_text() == "changed by a student"


@pytest.mark.gpu
def test_a_reference_graded_with_the_machines_host_modules_builds_none(graded_here, host_modules_here):
    from autograder.grading import host_modules
    host_modules.ensure(ADD.name)
    built = {p.relative_to(host_modules_here) for p in host_modules_here.rglob("*.so")}
    assert len(built) >= 2, "cuda_utils and at least one launcher"
    write_notebook(graded_here, solution_section("solutions/broadcast_add.py", "add"))
    assert isolated().correct
    assert {p.relative_to(judging.compile_cache()) for p in judging.compile_cache().rglob("*.so")} == built


def test_a_rigged_checker_in_the_answer_cell_does_not_help(graded_here):
    write_notebook(graded_here, ZEROS + RIGGED_CHECKER)
    result = isolated()
    assert not any(c.passed for c in result.cases)
    assert "elements differ" in result.cases[-1].message


def test_an_import_hook_cannot_hand_over_a_rigged_checker(graded_here):
    write_notebook(graded_here, ZEROS + RIGGED_IMPORT)
    result = isolated()
    assert len(result.cases) > 1 and not any(c.passed for c in result.cases)


def test_a_rigged_checker_elsewhere_in_the_notebook_does_not_run(graded_here):
    write_notebook(graded_here, ZEROS, other=RIGGED_CHECKER)
    assert not isolated().correct


def test_a_crash_or_a_hang_fails_only_that_test(graded_here, monkeypatch):
    write_notebook(graded_here, "import os\ndef add(x, y):\n    os._exit(3)")
    result = isolated()
    assert "crashed the grading process (exit code 3)" in result.cases[0].message
    write_notebook(graded_here, "import time\ndef add(x, y):\n    time.sleep(600)")
    monkeypatch.setenv(judging.TIMEOUT_VAR, "20")
    result = isolated()
    assert "stopped after 20 s, the limit for one graded test" in result.cases[0].message
    assert all(c.message == result.cases[0].message for c in result.cases[1:])


@pytest.fixture
def started(monkeypatch):
    """The runners the judge starts, in order; ``reference`` marks the baseline's."""
    runners = []

    class Counted(judging.Runner):
        def __init__(self, exercise, code, *args, **kwargs):
            self.reference = code is None
            super().__init__(exercise, code, *args, **kwargs)
            runners.append(self)
    monkeypatch.setattr(judging, "Runner", Counted)
    return runners


def running(runner) -> bool:
    return runner.process.wait(0) is None


def students(runners) -> list:
    return [r for r in runners if not r.reference]


REFERENCE_ADD = solution_section("solutions/broadcast_add.py", "add")


def test_a_students_tests_share_one_runner_and_one_baseline(graded_here, started):
    write_notebook(graded_here, REFERENCE_ADD)
    assert isolated().correct and all(map(running, started))
    # on a GPU a baseline's runner too (calibrated while the student's runner waits to begin)
    assert sorted(r.reference for r in started) == ([False, True] if DEVICE.has_gpu else [False])
    assert isolated(cases="hidden").correct and len(started) == len(students(started)) + DEVICE.has_gpu
    assert all(map(running, started))  # the throughput test races them
    timed = judging.grade_notebook(ADD, cases="visible", measure_throughput=True)
    assert timed.correct and len(students(started)) == 1 and not any(map(running, started))
    assert timed.throughput.status == ("passed" if DEVICE.has_gpu else "not measured"), timed.throughput.message
    assert isolated().correct  # a new correctness test starts afresh
    assert len(students(started)) == 2 and not running(started[0])
    write_notebook(graded_here, REFERENCE_ADD + "\n# changed")  # other cells: nothing kept is taken
    assert isolated(cases="hidden").correct and len(students(started)) == 3
    kept = 1 + DEVICE.has_gpu  # for a throughput test: the new runner, and on a GPU its baseline
    assert not any(map(running, started[:-kept])) and all(map(running, started[-kept:]))


def test_a_runner_runs_no_student_code_before_it_begins(graded_here):
    """A student's runner imports while the judge calibrates the baseline, and waits."""
    cells = (("setup-cell", SETUP), ("answer-cell-1", "open('ran', 'w').close()\n" + REFERENCE_ADD))
    runner = judging.Runner(ADD, cells, time.monotonic() + 120, 120, begin=False)
    try:
        marker = runner.folder / "work" / "ran"
        time.sleep(5)  # time enough to import and run the cells, were it let
        assert not marker.exists()
        assert runner.begin().error is None and marker.exists()
    finally:
        runner.stop()


def test_a_failed_hidden_test_leaves_the_throughput_test_the_baseline_and_a_fresh_runner(graded_here, started):
    write_notebook(graded_here, AFTER_THE_VISIBLE_CASES.format(visible=len(ADD.cases("visible", DEVICE.device)),
                                                                then="return _add(x, y) + 1"))
    assert isolated().correct and not isolated(cases="hidden").correct
    assert len(students(started)) == 1 and not running(students(started)[0])
    assert [running(r) for r in started if r.reference] == ([True] if DEVICE.has_gpu else [])
    timed = judging.grade_notebook(ADD, cases="visible", measure_throughput=True)
    assert timed.correct and len(started) == (3 if DEVICE.has_gpu else 1)  # no second baseline
    assert not any(map(running, started))


def test_the_throughput_test_takes_the_correctness_tests_verdict_on_the_same_cells(graded_here, started):
    write_notebook(graded_here, REFERENCE_ADD.replace("a + b", "a - b"))
    visible = isolated()
    assert not any(map(running, started))  # a failed visible test keeps nothing
    assert not isolated(cases="hidden").correct
    # no race to come: the one baseline is the visible test's (on a GPU, calibrated before its verdict was known)
    assert sum(r.reference for r in started) == DEVICE.has_gpu and not any(map(running, started))
    timed = judging.grade_notebook(ADD, cases="visible", measure_throughput=True)
    assert len(students(started)) == 2 and not visible.correct  # no runner: the verdict is known
    assert not any(map(running, started))
    assert [(c.label, c.passed, c.message) for c in timed.cases] == [(c.label, c.passed, c.message) for c in visible.cases]
    assert timed.throughput.status == "not measured" and visible.throughput is None
    write_notebook(graded_here, REFERENCE_ADD)  # other cells: graded afresh
    assert judging.grade_notebook(ADD, cases="visible", measure_throughput=True).correct
    assert len(students(started)) == 3


def test_the_judge_records_each_tests_seed_for_the_instructor_and_hides_the_record_from_the_runner(
        graded_here, tmp_path, monkeypatch):
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv(settings.GRADING_RECORD.name, str(record))
    write_notebook(graded_here, REFERENCE_ADD)
    visible, hidden = isolated(), isolated(cases="hidden")
    judging.grade_notebook(ADD, cases="visible", measure_throughput=True)  # the correctness verdict's: no new line
    entries = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(e["exercise"], e["cases"], e["seed"]) for e in entries] == [
        (ADD.name, "visible", visible.seed), (ADD.name, "hidden", hidden.seed)]
    assert Path(entries[0]["notebook"]).parent == graded_here.resolve()
    write_notebook(graded_here, REFERENCE_ADD + f"""
import os
def add(x, y, _add=add):
    raise ValueError(f"record: {{os.environ.get('{settings.GRADING_RECORD.name}')}}")
""")
    assert "record: None" in isolated().cases[0].message


FAILS_ONCE = REFERENCE_ADD + '''
import os
_calls = []


def add(x, y, _add=add):  # the first call of each runner fails
    _calls.append(1)
    if len(_calls) == 1:
        {failure}
    return _add(x, y)
'''


@pytest.mark.parametrize("failure, words", [("raise ValueError('first call')", "`add` raised ValueError: first call"),
                                            ("os._exit(3)", "crashed the grading process (exit code 3)")])
def test_after_a_failure_the_next_test_starts_a_clean_runner(graded_here, started, failure, words):
    write_notebook(graded_here, FAILS_ONCE.format(failure=failure))
    for cases in ("visible", "hidden"):
        first = isolated(cases=cases).cases[0]
        assert words in first.message, first.message
    assert len(students(started)) == 2 and not running(students(started)[0])  # (on a GPU, a baseline's too)


AFTER_THE_VISIBLE_CASES = REFERENCE_ADD + '''
import time
_calls = []


def add(x, y, _add=add):  # right until the visible cases are done
    _calls.append(1)
    if len(_calls) > {visible}:
        {then}
    return _add(x, y)
'''


def test_a_hang_in_the_hidden_test_is_stopped_at_that_tests_own_limit(graded_here, started, monkeypatch):
    write_notebook(graded_here, AFTER_THE_VISIBLE_CASES.format(visible=len(ADD.cases("visible", DEVICE.device)),
                                                                then="time.sleep(600)"))
    monkeypatch.setenv(judging.TIMEOUT_VAR, "15")
    assert isolated().correct
    began = time.monotonic()
    result = isolated(cases="hidden")
    assert time.monotonic() - began > 15 and len(students(started)) == 1  # counted from the hidden test's start
    assert "stopped after 15 s, the limit for one graded test" in result.cases[0].message
    assert all(c.message == result.cases[0].message for c in result.cases[1:])


def test_a_kept_runner_ends_with_the_judge(graded_here):
    write_notebook(graded_here, REFERENCE_ADD)
    judge = ("from autograder import setup_device; setup_device(verbose=False)\n"
             "from autograder.assignments.ps1_broadcast_add import EXERCISE\n"
             "from autograder.grading import judge\n"
             "assert judge.grade_notebook(EXERCISE, cases='visible', measure_throughput=False).correct\n"
             "print(*(r.process.process.pid for k in judge._kept.values()\n"
             "        for r in (k.runner, k.baseline and k.baseline.reference) if r))")
    done = subprocess.run([sys.executable, "-c", judge], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    pids = done.stdout.split()  # the runners it kept: the student's, and on a GPU the baseline's
    assert len(pids) == 1 + DEVICE.has_gpu and not any(Path(f"/proc/{pid}").exists() for pid in pids)


FILLED_AFTER_THE_CALL = ZEROS + '''
_pending, _detach = [], torch.Tensor.detach


def _fill_then_detach(self):  # PyTorch's sums, once the call's watch has ended
    while _pending:
        x, y, out = _pending.pop()
        out.copy_(x + y)
    return _detach(self)


torch.Tensor.detach = _fill_then_detach


def add(x, y, _zeros=add):
    out = _zeros(x, y)
    _pending.append((x, y, out))
    return out
'''
THREAD_LEFT_RUNNING = ZEROS + '''
import threading, time
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
'''


CLASS_CHANGED = ZEROS + '''
_pending = []


class _Later(torch.Tensor):
    def __eq__(self, other):  # the grader compares the inputs, once the call's watch has ended
        while _pending:
            x, y, out = _pending.pop()
            x.__class__ = torch.Tensor
            out.copy_(x + y)
        return torch.Tensor.__eq__(self, other)

    __hash__ = torch.Tensor.__hash__


def add(x, y, _zeros=add):
    out = _zeros(x, y)
    _pending.append((x, y, out))
    x.__class__ = _Later
    return out
'''
SUMS_IN_THE_GRID = '''
@triton.jit
def nothing_kernel(out_ptr, BLOCK: tl.constexpr):
    pass


def add(x, y):
    out = torch.empty(torch.broadcast_shapes(x.shape, y.shape), dtype=x.dtype, device=x.device)

    def grid(meta):  # Python's arithmetic, value by value, while Triton launches
        xs, ys = x.expand(out.shape), y.expand(out.shape)
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[i, j] = float(xs[i, j]) + float(ys[i, j])
        return (1,)

    nothing_kernel[grid](out, BLOCK=16)
    return out
'''
PROFILER_LEFT = ZEROS + '''
import sys
sys.setprofile(lambda frame, event, arg: None)  # would run on every call the grader makes
'''
PYTHON_IN_THE_KERNEL = '''
def _sum(a, b):  # plain Python on the interpreter's NumPy arrays
    return a + b


@triton.jit
def python_kernel(x_ptr, y_ptr, out_ptr, n, N, sx0, sx1, sy0, sy1, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    row, col = i // N, i % N
    mask = i < n
    x = tl.load(x_ptr + row * sx0 + col * sx1, mask=mask)
    y = tl.load(y_ptr + row * sy0 + col * sy1, mask=mask)
    tl.store(out_ptr + i, _sum(x, y), mask=mask)


def add(x, y):
    y = y.expand(torch.broadcast_shapes(x.shape, y.shape))
    x = x.expand(y.shape)
    out = torch.empty(y.shape, dtype=x.dtype, device=x.device)
    python_kernel[(triton.cdiv(out.numel(), 256),)](x, y, out, out.numel(), out.shape[1], *x.stride(), *y.stride(),
                                                    BLOCK=256)
    return out
'''
PICKLED = ZEROS + '''
import io


def add(x, y, _zeros=add):
    torch.save((x, y), io.BytesIO())  # every byte, with no PyTorch op
    return _zeros(x, y)
'''


@pytest.mark.parametrize("answer, words", [
    (FILLED_AFTER_THE_CALL, "`add` replaced torch.Tensor.detach."),
    (THREAD_LEFT_RUNNING, "`add` left a thread running."),
    (CLASS_CHANGED, "`add` changed the class of input 0 to _Later"),
    (SUMS_IN_THE_GRID, "`add` copied data with PyTorch (aten.copy_.default"),  # and read 11,550 values one by one
    (PROFILER_LEFT, "`add` left code set to run later (sys.setprofile)."),
    (PICKLED, "`add` took data out of PyTorch for the host to compute with (Tensor.__reduce_ex__())."),
    pytest.param(PYTHON_IN_THE_KERNEL, "`add` launched python_kernel, which runs in Triton's interpreter but would not "
                 "compile for a GPU (line 7: NameError: Cannot access global variable _sum",
                 marks=pytest.mark.skipif(DEVICE.has_gpu, reason="on a GPU such a kernel does not compile at all")),
], ids=["library function replaced", "thread left running", "class changed", "sums in the grid's function",
        "profiler left", "pickled", "python in the kernel"])
def test_what_runs_around_the_call_breaks_the_rules(graded_here, answer, words):
    write_notebook(graded_here, answer)
    result = isolated()
    assert not result.correct and all(c.message.startswith(words) for c in result.cases), result.summary()


AUTOTUNED_ADD = """
@triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["M", "N"])
@triton.jit
def tuned_kernel(x_ptr, y_ptr, out_ptr, M, N, xs0, xs1, ys0, ys1, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < M * N
    row, col = offsets // N, offsets % N
    total = tl.load(x_ptr + row * xs0 + col * xs1, mask=inside) + tl.load(y_ptr + row * ys0 + col * ys1, mask=inside)
    tl.store(out_ptr + offsets, total, mask=inside)


def add(x, y):
    y = y.expand_as(x)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    M, N = x.shape
    tuned_kernel[lambda meta: (triton.cdiv(M * N, meta["BLOCK"]),)](x, y, out, M, N, *x.stride(), *y.stride())
    return out
"""


def test_an_autotuned_kernel_is_graded_on_the_cpu_too(graded_here):
    """In the interpreter the autotuner keeps its first configuration: there is nothing to time."""
    write_notebook(graded_here, AUTOTUNED_ADD)
    result = isolated()
    assert result.correct, result.summary()


def test_what_only_runs_in_the_students_notebook_is_explained(graded_here):
    """A name from a cell grading does not run, said with where grading looks; display() does
    nothing; timing on the CPU says it needs a GPU."""
    write_notebook(graded_here, "def add(x, y):\n    return helper(x, y)\n", other="def helper(x, y): return x + y")
    message = isolated().cases[0].message
    assert "`add` raised NameError" in message and "Define `helper` in an answer cell" in message, message
    write_notebook(graded_here, "TUNED = tuned_kernel\n" + AUTOTUNED_ADD)
    message = isolated().cases[0].message
    assert "raised NameError when run on their own" in message and "Define `tuned_kernel`" in message, message
    write_notebook(graded_here, AUTOTUNED_ADD + "\ndisplay('add is defined')\n")
    assert isolated().correct
    if not DEVICE.has_gpu:
        write_notebook(graded_here, AUTOTUNED_ADD + "\ntriton.testing.do_bench(lambda: add(torch.ones(4, 4), torch.ones(4)))\n")
        message = isolated().cases[0].message
        assert "when run on their own" in message and "has no GPU to time them" in message, message


def test_a_broken_answer_cell_is_explained(graded_here):
    write_notebook(graded_here, "import torch\n\ndef add(x, y)\n    return x")
    message = isolated().cases[0].message
    assert "raised SyntaxError when run on their own" in message and "(answer-cell-1, line 3)" in message, message
    write_notebook(graded_here, "def plus(x, y): return x")
    assert "define no function `add`" in isolated().cases[0].message


def test_a_traceback_names_the_cell_and_its_line(graded_here):
    # not the runner's own file: the cell the student wrote, its line counted as Jupyter counts it
    write_notebook(graded_here, "import torch\n\ndef add(x, y):\n    return x[10 ** 6]\n")
    message = isolated().cases[0].message
    assert 'File "<answer-cell-1>", line 4, in add' in message and "return x[10 ** 6]" in message, message



TELLS_ITS_INPUTS = REFERENCE_ADD + '''
import os
_calls = []


def add(x, y, _add=add):  # tells what it was given: raising, printing, crashing, a wrong answer
    _calls.append(1)
    told = f"x={tuple(x.shape)} {x.stride()} y={tuple(y.shape)} {y.stride()} {x.dtype}"
    print(told, flush=True)
    if len(_calls) % 3 == 1:
        raise ValueError(told)
    if len(_calls) > 6:
        os._exit(7)
    return _add(x, y).fill_(0.5) if len(_calls) % 3 == 0 else _add(x, y)
'''


def test_a_hidden_verdict_tells_nothing_of_the_hidden_cases(graded_here, capsys):
    hidden = ADD.cases("hidden", DEVICE.device)
    assert len(hidden) > 7  # raised, passed, wrong, raised, passed, wrong, crashed, not run
    write_notebook(graded_here, TELLS_ITS_INPUTS)
    assert 0 < grade(ADD.name, None, "hidden") < ADD.points["hidden"]
    shown = capsys.readouterr().out
    assert "`add` raised an exception." in shown and "elements differ" in shown
    assert "crashed the grading process (exit code 7)" in shown and f"hidden tests, 2/{len(hidden)} cases" in shown
    inputs = [ADD.make_inputs(case, torch.Generator().manual_seed(0), DEVICE.device) for case in hidden]
    told = {str(tuple(t.shape)) for tensors in inputs for t in tensors} | {str(t.stride()) for t in inputs[0]}
    for secret in told | {case.label for case in hidden} | {"seed", "x="}:
        assert secret not in shown, secret
    grade(ADD.name, None, "correctness")  # the visible test shows what the code said, shapes and all
    assert "x=(" in capsys.readouterr().out


FAULTING = '''
@triton.jit
def far_away_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs.to(tl.int64) + 2**40, 1.0, mask=offs < n)   # 4 TB past the output

def add(x, y):
    out = torch.empty_like(x)
    far_away_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
    return out
'''


FAULTS_ON = REFERENCE_ADD + '''

def add(x, y, _add=add):  # "faults" (as CUDA says it) on the shapes of x and y in FAULTS
    if (tuple(x.shape), tuple(y.shape)) in FAULTS:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    return _add(x, y)
'''


def test_a_cuda_fault_costs_its_own_case_only(graded_here):
    """Whether a stray access faults depends on what else the process has mapped: a new runner
    for the cases after a fault makes the verdict independent of that."""
    shapes = [(case.shape, case.y_shape) for case in ADD.cases("visible", DEVICE.device)]
    once = next(i for i, shape in enumerate(shapes) if i and shapes.count(shape) == 1)
    write_notebook(graded_here, f"FAULTS = {{{shapes[once]!r}}}\n" + FAULTS_ON)
    cases = isolated().cases
    assert [c.passed for c in cases] == [i != once for i in range(len(shapes))], cases
    assert "faulted on the GPU" in cases[once].message
    write_notebook(graded_here, f"FAULTS = {set(shapes)!r}\n" + FAULTS_ON)  # every case: restarts run out
    cases = isolated().cases
    assert all("faulted on the GPU" in c.message for c in cases[:judging.FAULT_RESTARTS + 1]), cases
    assert all(c.message.startswith("not run:") for c in cases[judging.FAULT_RESTARTS + 1:]), cases


@pytest.mark.gpu
def test_an_illegal_memory_access_costs_only_that_test(graded_here):
    import torch
    write_notebook(graded_here, FAULTING)
    cases = isolated().cases  # every case faults: a new runner for the next, FAULT_RESTARTS times
    faulted, rest = cases[:judging.FAULT_RESTARTS + 1], cases[judging.FAULT_RESTARTS + 1:]
    assert all("faulted on the GPU" in c.message and "restart the kernel" in c.message for c in faulted), cases
    assert rest and all(c.message.startswith("not run:") for c in rest)
    # this process's CUDA context, and the next submission's, are untouched
    assert torch.ones(4, device="cuda").sum().item() == 4
    write_notebook(graded_here, solution_section("solutions/broadcast_add.py", "add"))
    assert isolated().correct


def _as_root_with_nobody() -> bool:
    import os
    import pwd
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return False
    return os.geteuid() == 0


@pytest.fixture
def python_for_nobody(monkeypatch):
    """An interpreter `nobody` can run: this machine's course env may sit on a Python under /root,
    so make a venv from the system's python3 of the same version that sees the course env's
    packages, and grade with it."""
    import shutil
    import subprocess
    import sys
    import sysconfig
    import tempfile
    from pathlib import Path

    base = Path("/usr/bin/python3")
    if not base.exists() or subprocess.run([base, "-c", f"import sys; assert sys.version_info[:2] == {sys.version_info[:2]}"]).returncode:
        pytest.skip(f"needs /usr/bin/python3 of version {sys.version_info[0]}.{sys.version_info[1]}")
    folder = Path(tempfile.mkdtemp(prefix="python-for-nobody-"))
    folder.chmod(0o755)
    subprocess.run([base, "-m", "venv", "--without-pip", folder / "env"], check=True)
    site = next((folder / "env" / "lib").glob("python3*/site-packages"))
    (site / "course.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    (folder / "env" / "bin" / "alembic").symlink_to(Path(sys.executable).parent / "alembic")  # nbgrader calls it
    monkeypatch.setattr(sys, "executable", str(folder / "env" / "bin" / "python3"))
    yield
    shutil.rmtree(folder)


@pytest.mark.skipif(not _as_root_with_nobody(), reason="needs root and a `nobody` user")
def test_a_grading_user_cannot_read_what_is_closed_to_it(graded_here, monkeypatch, python_for_nobody):
    import tempfile
    from pathlib import Path
    from autograder.grading import confine, sandbox

    folder = Path(tempfile.mkdtemp(prefix="instructor-"))
    folder.chmod(0o755)
    (folder / "answers.txt").write_text("the hidden answers")
    (folder / "answers.txt").chmod(0o644)
    reference = solution_section("solutions/broadcast_add.py", "add")
    write_notebook(graded_here, reference + f"\nSTOLEN = open({str(folder / 'answers.txt')!r}).read()")
    monkeypatch.setenv(sandbox.GRADING_USER_VAR, "nobody")
    monkeypatch.setenv(confine.READABLE_VAR, str(folder))  # open to Landlock: only permissions decide
    result = isolated()
    assert result.correct, result.summary()  # readable by anyone: the grading user reads it too
    sandbox.close_to_others(folder)
    message = isolated().cases[0].message
    assert "raised PermissionError when run on their own" in message, message


def test_a_runner_that_ends_is_seen_to_end_though_its_child_holds_the_channel(graded_here):
    write_notebook(graded_here, """
def add(x, y):
    import os, time
    if os.fork() == 0:
        time.sleep(120)  # holds every descriptor the runner had, its channel to the judge among them
        os._exit(0)
    os._exit(3)
""")
    started = time.monotonic()
    message = isolated().cases[0].message
    assert "crashed the grading process (exit code 3" in message, message
    assert time.monotonic() - started < 30, "the judge waited for the child, not the runner"


FORKS = '''
def add(x, y):
    import os, time
    for started in range(200):
        try:
            pid = os.fork()
        except BlockingIOError:
            raise RuntimeError(f"fork refused after {started} processes") from None
        if pid == 0:
            time.sleep(60)
            os._exit(0)
    raise RuntimeError("forked 200 processes")
'''


@pytest.mark.skipif(not _as_root_with_nobody(), reason="needs root and a `nobody` user")
def test_the_grading_users_processes_are_capped(graded_here, monkeypatch, python_for_nobody):
    from autograder import settings
    from autograder.grading import sandbox

    monkeypatch.setenv(sandbox.GRADING_USER_VAR, "nobody")
    monkeypatch.setenv(settings.PROCESS_LIMIT.name, "100")
    write_notebook(graded_here, FORKS)
    before = _processes_of("nobody")
    message = isolated().cases[0].message
    refused = re.search(r"fork refused after (\d+) processes", message)
    assert refused and int(refused[1]) < 100, message
    assert _processes_of("nobody") <= before, "the runner's children outlived it"


def _processes_of(user: str) -> set[int]:
    import pwd
    from pathlib import Path
    uid = pwd.getpwnam(user).pw_uid
    return {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _owner(p) == uid}


def _owner(path) -> int | None:
    try:
        return path.stat().st_uid
    except OSError:
        return None


@pytest.mark.parametrize("user", [None, "nobody"])
def test_only_the_grading_users_runners_get_the_process_cap(graded_here, monkeypatch, user):
    """A cap on the grader's own user would count the instructor's every process too."""
    from autograder import settings
    from autograder.grading import sandbox

    started = []

    class Recorded(sandbox.Sandboxed):
        def __init__(self, cmd, **kwargs):
            started.append(cmd)
            super().__init__(cmd, **kwargs)
    monkeypatch.setattr(sandbox, "Sandboxed", Recorded)
    monkeypatch.setattr(sandbox, "grading_user", lambda: user)  # runs as us: only the command line is looked at
    monkeypatch.setattr(sandbox, "_as_grading_user", lambda *given: {})
    monkeypatch.setenv(settings.PROCESS_LIMIT.name, "321")
    write_notebook(graded_here, solution_section("solutions/broadcast_add.py", "add"))
    assert isolated().correct
    assert started and all(("--processes" in cmd) == (user is not None and "--reference" not in cmd) for cmd in started)
    assert user is None or any(cmd[cmd.index("--processes") + 1] == "321" for cmd in started if "--processes" in cmd)


def test_limit_resources_caps_the_processes_below_the_hard_limit_it_was_given():
    code = ("import resource; from autograder.grading import sandbox; "
            "resource.setrlimit(resource.RLIMIT_NPROC, (5000, 5000)); sandbox.limit_resources(77); "
            "print(*resource.getrlimit(resource.RLIMIT_NPROC)); sandbox.limit_resources(9000); "
            "print(*resource.getrlimit(resource.RLIMIT_NPROC))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.split() == ["77", "77", "77", "77"], done.stdout + done.stderr


@pytest.mark.skipif(not _as_root_with_nobody(), reason="needs root and a `nobody` user")
def test_a_grading_user_who_cannot_run_python_is_refused_clearly(graded_here, monkeypatch, tmp_path):
    import sys
    from autograder.grading import sandbox

    hidden = tmp_path / "closed"
    hidden.mkdir(mode=0o700)
    (hidden / "python").symlink_to(sys.executable)
    monkeypatch.setattr(sys, "executable", str(hidden / "python"))
    monkeypatch.setenv(sandbox.GRADING_USER_VAR, "nobody")
    write_notebook(graded_here, solution_section("solutions/broadcast_add.py", "add"))
    with pytest.raises(PermissionError, match="nobody: that user cannot run .*closed/python"):
        isolated()


# --- what the judge decides, however the runner's process is rigged (issue 18) ---------------
ATTACKS = {
    "writes_a_verdict_file_and_exits": '''
import json, os
for _name in ("result.json", "verdict.json", "../result.json"):
    try:
        open(_name, "w").write(json.dumps({"exercise": "ps1_broadcast_add", "seed": 0, "throughput": None,
                                           "cases": [{"label": "all", "passed": True, "message": ""}]}))
    except OSError:
        pass
os._exit(0)
''',
    "wraps_json_dumps": '''
import json
_dumps = json.dumps
def _passing(obj, *args, **kwargs):
    if isinstance(obj, dict):
        obj = dict(obj, problem=None, passed=True, error=None)
    return _dumps(obj, *args, **kwargs)
json.dumps = _passing
''',
    "wraps_the_comparison": '''
import functools, torch
import autograder.correctness as _c
_c.compare = functools.wraps(_c.compare)(lambda *args, **kwargs: None)
_c.judge_output = functools.wraps(_c.judge_output)(lambda *args, **kwargs: None)
torch.allclose = functools.wraps(torch.allclose)(lambda *args, **kwargs: True)
''',
    "leaves_a_dispatch_mode_that_says_yes": '''
from torch.utils._python_dispatch import TorchDispatchMode
class _Yes(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.all, torch.ops.aten.equal, torch.ops.aten.isclose):
            return torch.tensor(True)
        return func(*args, **(kwargs or {}))
_Yes().__enter__()
''',
    "rewrites_the_graders_code_objects": '''
import autograder.correctness as _c, autograder.guards as _g
_c.compare.__code__ = (lambda out, ref, atol, rtol: None).__code__
_c.judge_output.__code__ = (lambda exercise, case, inputs, out: None).__code__
_g.GuardZones.damage.__code__ = (lambda self: None).__code__
''',
    "fakes_the_autograder_package": '''
import sys, types
_fake = types.ModuleType("autograder")
_fake.__path__ = []
_fake.check = _fake.grade = _fake.judge = lambda *args, **kwargs: 3
for _name in [m for m in sys.modules if m.split(".")[0] == "autograder"]:
    sys.modules[_name] = _fake
''',
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_rigging_the_runner_earns_what_a_kernel_that_does_nothing_earns(graded_here, attack):
    write_notebook(graded_here, ZEROS + ATTACKS[attack])
    with pytest.raises(GradingFailure, match=f"0 / {ADD.points['correctness']:g} points"):
        grade(ADD.name, None, "correctness")


def test_the_same_rigging_leaves_an_honest_kernel_its_marks(graded_here, capsys):
    write_notebook(graded_here, solution_section("solutions/broadcast_add.py", "add") + ATTACKS["wraps_the_comparison"])
    full = ADD.points["correctness"]
    assert grade(ADD.name, None, "correctness") == full
    assert f"{full:g} / {full:g} points" in capsys.readouterr().out


COPY_KERNEL = '''
@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)

def copied_out(result):
    result = result.contiguous()
    out = torch.empty_like(result)
    copy_kernel[(triton.cdiv(result.numel(), 1024),)](result, out, result.numel(), BLOCK=1024)
    return out
'''
SOFTMAX_IN_A_THREAD = COPY_KERNEL + '''
import queue, threading
_jobs, _done = queue.Queue(), queue.Queue()

def _worker():
    while True:
        _done.put(torch.special.softmax(_jobs.get(), dim=-1))

threading.Thread(target=_worker, daemon=True).start()

def softmax(x):
    _jobs.put(x)
    return copied_out(_done.get())
'''
MATMUL_IN_NUMPY = COPY_KERNEL + '''
import numpy as np

def matmul(a, b):
    product = np.matmul(a.cpu().double().numpy(), b.cpu().double().numpy())
    return copied_out(torch.from_numpy(product).to(a.device, a.dtype))
'''


@pytest.mark.parametrize("exercise, answer, words", [
    ("fused_softmax", SOFTMAX_IN_A_THREAD, "handed work to another thread"),
    ("matmul", MATMUL_IN_NUMPY, "took data out of PyTorch for the host to compute with"),
])
def test_results_computed_elsewhere_and_copied_out_by_a_kernel_fail(graded_here, exercise, answer, words):
    spec = exercises.get(exercise)
    write_notebook(graded_here, answer, name=exercise)
    result = isolated(spec)
    assert not any(c.passed for c in result.cases), result.summary()
    assert words in result.cases[0].message, result.cases[0].message


def test_check_and_the_judge_agree_on_an_honest_kernel(graded_here):
    from autograder import check
    from solutions.broadcast_add import add
    write_notebook(graded_here, solution_section("solutions/broadcast_add.py", "add"))
    for cases in ("visible", "hidden"):
        mine = check(ADD, add, cases=cases, measure_throughput=False, verbose=False)
        judged = isolated(cases=cases)
        assert [(c.label, c.passed) for c in mine.cases] == [(c.label, c.passed) for c in judged.cases]


def test_the_judge_refuses_malformed_messages():
    import socket
    import time
    from autograder.grading import protocol
    for header in ({"tensors": [{"dtype": "object", "size": [1], "stride": [1], "offset": 0, "nbytes": 8}]},
                   {"tensors": [{"dtype": "float32", "size": [4], "stride": [1], "offset": 2, "nbytes": 16}]},
                   {"tensors": [{"dtype": "float32", "size": [-1], "stride": [1], "offset": 0, "nbytes": 4}]},
                   {"tensors": [{"dtype": "float32", "size": [2**20], "stride": [1], "offset": 0, "nbytes": 2**22}]},
                   # an empty tensor whose other sizes PyTorch cannot hold, or that claims 2**124 elements
                   {"tensors": [{"dtype": "float32", "size": [0, 10**30], "stride": [1, 1], "offset": 0, "nbytes": 0}]},
                   {"tensors": [{"dtype": "float32", "size": [0, 2**62, 2**62], "stride": [1, 1, 1], "offset": 0,
                                 "nbytes": 0}]},
                   {"tensors": [{"dtype": "float32", "size": [1] * 17, "stride": [1] * 17, "offset": 0, "nbytes": 4}]}):
        ours, theirs = socket.socketpair()
        body = __import__("json").dumps(header).encode()
        theirs.sendall(len(body).to_bytes(4, "big") + body)
        with pytest.raises(protocol.ProtocolError):
            protocol.recv(ours, time.monotonic() + 5, max_tensor_bytes=2**20)
    # JSON nested past Python's recursion limit, a dtype that is not a name, an integer of 5,000 digits
    for body in (b"[" * 100_000 + b"]" * 100_000,
                 b'{"tensors": [{"dtype": [], "size": [1], "stride": [1], "offset": 0, "nbytes": 4}]}',
                 b'{"seed": 1' + b"0" * 5000 + b"}"):
        ours, theirs = socket.socketpair()
        theirs.sendall(len(body).to_bytes(4, "big") + body)
        with pytest.raises(protocol.ProtocolError):
            protocol.recv(ours, time.monotonic() + 5, max_tensor_bytes=2**20)
    ours, theirs = socket.socketpair()
    theirs.sendall((2**31).to_bytes(4, "big"))
    with pytest.raises(protocol.ProtocolError, match="header of"):
        protocol.recv(ours, time.monotonic() + 5, max_tensor_bytes=0)


def test_a_failure_in_the_timed_runs_is_said_in_the_judges_words_in_every_language():
    """What the GPU's throughput verdict says of a runner that failed there (its own text could
    carry the hidden cases): the judge's sentence for the kind, and the public throughput case."""
    import types
    from autograder.grading import clock
    from autograder.language import set_language
    baseline = object.__new__(clock.Baseline)
    baseline.exercise = ADD
    failed = types.SimpleNamespace(ended=None)
    said = baseline._their_problem(failed, {"problem": "what the hidden cases were: 12345", "kind": "values"})
    assert said == (f"in the timed runs on {ADD.throughput.case.label}, elements differ from PyTorch's result by "
                    "more than the tolerance. Call `add` on inputs of that shape to see the whole error.")
    set_language("zh")
    try:
        said = baseline._their_problem(failed, {"problem": "what the hidden cases were: 12345", "kind": "raised"})
        assert ADD.throughput.case.label in said and "12345" not in said and "timed runs" not in said, said
    finally:
        set_language("en")


def test_text_from_a_runner_reaches_the_judge_as_text_it_can_print():
    """JSON may carry a lone surrogate, which Python cannot encode: printing the verdict would fail."""
    import socket
    import time
    from autograder.grading import protocol
    ours, theirs = socket.socketpair()
    body = b'{"problem": "bad \\ud800 news", "kind": "exception"}'
    theirs.sendall(len(body).to_bytes(4, "big") + body)
    header, _ = protocol.recv(ours, time.monotonic() + 5, max_tensor_bytes=0)
    assert header["problem"] == "bad ? news"


SENDS_ITS_OWN_MESSAGE = ZEROS + '''
import socket, sys

def add(x, y, _add=add):  # writes a reply of its own on the channel to the judge, then answers
    body = b"[" * 100_000 + b"]" * 100_000
    socket.socket(fileno=int(sys.argv[3])).sendall(len(body).to_bytes(4, "big") + body)
    return _add(x, y)
'''


def test_a_runner_that_sends_what_the_protocol_does_not_allow_fails_with_a_verdict(graded_here):
    write_notebook(graded_here, SENDS_ITS_OWN_MESSAGE)
    result = isolated()
    assert not any(c.passed for c in result.cases)
    assert "the grading process sent what the judge does not accept" in result.cases[0].message


VIEW_OF_A_WIDER_BUFFER = '''
@triton.jit
def add_into_kernel(x_ptr, y_ptr, out_ptr, M, N, sxm, sxn, sym, syn, out_row, BLOCK: tl.constexpr):
    r = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK))[:, None]
    c = (tl.program_id(1) * BLOCK + tl.arange(0, BLOCK))[None, :]
    inside = (r < M) & (c < N)
    total = tl.load(x_ptr + r * sxm + c * sxn, mask=inside) + tl.load(y_ptr + r * sym + c * syn, mask=inside)
    tl.store(out_ptr + r * out_row + c, total, mask=inside)


def add(x, y):  # the right values, returned as the first third of each row of a wider buffer
    M, N = x.shape
    y = y.expand(M, N)
    wide = torch.empty((M, 3 * N), dtype=x.dtype, device=x.device)
    add_into_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](x, y, wide, M, N, *x.stride(), *y.stride(), 3 * N,
                                                              BLOCK=32)
    return wide[:, :N]
'''
RAISES_MEGABYTES = """
def add(x, y):
    raise RuntimeError("A" * 2**21)
"""


VECTOR_IN_A_WIDER_BUFFER = '''
@triton.jit
def add_spread_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n
    tl.store(out_ptr + 2 * offs, tl.load(x_ptr + offs, mask=inside) + tl.load(y_ptr + offs, mask=inside), mask=inside)


def add(x, y):  # the right values, returned as every other element of a buffer twice as long
    wide = torch.empty(2 * x.numel(), dtype=x.dtype, device=x.device)
    add_spread_kernel[(triton.cdiv(x.numel(), 256),)](x, y, wide, x.numel(), BLOCK=256)
    return wide[::2]
'''


def test_a_right_answer_in_a_view_of_a_wider_buffer_passes_unless_a_new_contiguous_tensor_is_asked_for(graded_here):
    vector_add = exercises.get("vector_add")
    write_notebook(graded_here, VECTOR_IN_A_WIDER_BUFFER, name=vector_add.name)
    assert not vector_add.contiguous_output and isolated(vector_add).correct
    write_notebook(graded_here, VIEW_OF_A_WIDER_BUFFER)
    result = isolated()
    failed = [c for c in result.cases if not c.passed]
    assert ADD.contiguous_output and failed and all("not a contiguous layout" in c.message for c in failed)


def test_an_exception_of_megabytes_is_the_students_own_and_cut_short(graded_here):
    from autograder.grading.runner import MAX_MESSAGE_CHARS
    write_notebook(graded_here, RAISES_MEGABYTES)
    result = isolated()
    message = result.cases[0].message
    assert "raised RuntimeError" in message and "more characters)" in message and len(message) < 2 * MAX_MESSAGE_CHARS
    assert all("raised RuntimeError" in c.message for c in result.cases)  # the runner lived on: every case ran


# --- on a GPU: the judge's clock and guard zones (results/gpu/) ------------------------------
SLOW_ADD = REFERENCE_ADD + '''

def add(x, y, _add=add):  # the right answer with twice the memory traffic: half the reference's speed
    _add(x, y)
    return _add(x, y)
'''
TIMING_ATTACKS = {
    "patches_cuda_events_and_do_bench": SLOW_ADD + '''
import triton.testing
torch.cuda.Event.record = lambda self, stream=None: None
torch.cuda.Event.elapsed_time = lambda self, end: 1e-3
torch.cuda.Event.synchronize = lambda self: None
triton.testing.do_bench = lambda *args, **kwargs: 1e-3
''',
    "caches_on_the_inputs": SLOW_ADD + '''
_seen, _calls = {}, [0]

def add(x, y, _add=add):  # one timed call in three served from a cache keyed on the inputs
    _calls[0] += 1
    key = (x.data_ptr(), y.data_ptr(), x.shape)
    if x.numel() >= 2**24 and key in _seen and _calls[0] % 3 == 0:
        return _seen[key]
    _seen[key] = out = _add(x, y)
    return out
''',
    "answers_before_its_side_stream_is_done": SLOW_ADD + '''
_side = torch.cuda.Stream()
torch.cuda.synchronize = lambda device=None: None
torch.cuda.Stream.synchronize = lambda self: None

def add(x, y, _add=add):
    with torch.cuda.stream(_side):
        return _add(x, y)
''',
    "uses_pytorch_where_no_watch_is": SLOW_ADD + '''
from triton.runtime.jit import JITFunction
_run = JITFunction.run  # as Triton has it: a call's watch wraps it

def add(x, y, _add=add):
    return x + y if JITFunction.run is _run else _add(x, y)
''',
    "keeps_the_gpu_busy_for_the_baseline": SLOW_ADD + '''
_side = torch.cuda.Stream()
torch.cuda.synchronize = lambda device=None: None

def add(x, y, _add=add):
    out = _add(x, y)
    if x.numel() >= 2**24:
        with torch.cuda.stream(_side):
            torch.cuda._sleep(20_000_000)  # about 10 ms of a busy GPU after every timed call
    return out
''',
}


def graded_throughput(folder, answer):
    write_notebook(folder, answer)
    return judging.grade_notebook(ADD, cases="visible", measure_throughput=True)


@pytest.mark.gpu
def test_the_judge_times_the_reference_above_its_threshold(graded_here):
    result = graded_throughput(graded_here, REFERENCE_ADD)
    assert result.correct and result.throughput.passed, result.summary()
    assert ADD.throughput.threshold < result.throughput.ratio < 2, result.throughput.message


@pytest.mark.gpu
def test_a_slow_add_fails_its_threshold(graded_here):
    result = graded_throughput(graded_here, SLOW_ADD)
    assert result.correct and result.throughput.status == "failed", result.summary()
    assert 0.3 < result.throughput.ratio < ADD.throughput.threshold, result.throughput.message


@pytest.mark.gpu
@pytest.mark.parametrize("attack", sorted(TIMING_ATTACKS))
def test_a_slow_add_cannot_buy_speed(graded_here, attack):
    result = graded_throughput(graded_here, TIMING_ATTACKS[attack])
    assert result.throughput is not None and not result.throughput.passed, result.summary()


@pytest.mark.gpu
@pytest.mark.parametrize("failure, said", [
    ("raise RuntimeError('what the hidden cases were: 12345')", "`add` raised an exception."),
    ("return x + y + 0 * float(12345)", "`add` broke one of the exercise's rules on how an output is made."),
])
def test_a_failure_in_the_timed_runs_is_told_in_the_judges_words_only(graded_here, failure, said):
    """The runner timed is the one that ran the hidden cases: its own text could carry them."""
    after_the_cases = REFERENCE_ADD + f'''
_calls = [0]

def add(x, y, _add=add):
    _calls[0] += 1
    if _calls[0] > {len(ADD.visible_cases["cuda"])}:
        {failure}
    return _add(x, y)
'''
    result = graded_throughput(graded_here, after_the_cases)
    assert result.correct and result.throughput.status == "failed", result.summary()
    assert f"in the timed runs on {ADD.throughput.case.label}, {said}" in result.throughput.message
    assert "12345" not in result.throughput.message


@pytest.mark.gpu
def test_a_store_past_the_end_fails_on_a_gpu(graded_here):
    unmasked = REFERENCE_ADD.replace("tl.store(out_ptr + r * N + c, a + b, mask=in_bounds)",
                                     "tl.store(out_ptr + r * N + c, a + b)")
    assert unmasked != REFERENCE_ADD
    result = graded_throughput(graded_here, unmasked)
    # a tile past the last row or column of the output: its stores land past the end (the last
    # row's) or in the next row, where another program writes too
    ragged = [c for c in result.cases if any(int(n) % 64 for n in c.label.split()[0].split("×"))]
    assert ragged and not any(c.passed for c in ragged), result.summary()
    assert any("your kernel stored outside the tensor your function made" in c.message for c in ragged), (
        result.summary())
    assert all(c.passed for c in result.cases if c not in ragged)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(exercises.ASSIGNMENTS))
def test_every_reference_earns_full_marks_from_the_judge(graded_here, name):
    import os
    import shutil
    from conftest import ROOT
    spec = exercises.get(name)
    shutil.copy(ROOT / "source" / name / f"{name}.ipynb", graded_here)  # the reference, as released with solutions
    hidden = judging.grade_notebook(spec, cases="hidden", measure_throughput=False)
    timed = judging.grade_notebook(spec, cases="visible", measure_throughput=True)
    assert hidden.correct and timed.correct and timed.throughput.passed, (hidden.summary(), timed.summary())
    if record := os.environ.get("COURSE_JUDGE_RESULTS"):  # results/gpu/ keeps the figures
        with open(record, "a") as f:
            f.write(f"| {name} | {timed.throughput.message} |\n")


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(exercises.ASSIGNMENTS))
def test_every_timed_case_keeps_the_gpu_busier_than_the_python_that_feeds_it(name):
    """The judge times calls back to back by its own clock, so a call's Python (allocations,
    launches, autograd) counts; where it takes as long as the GPU's work, the verdict measures the
    CPU. Seen: PS6 at 16384 × 4096 issued a call in 0.99 of the time it ran (H100) and five verdicts
    on its reference spread over 0.74-1.16×; at 32768 × 8192, 0.38 (H100) to 0.72 (H200), the
    judge's rounds within ±3% and its verdicts 1.73× and 1.53×. PS2 at 4096 × 4096: three verdicts
    of 1.36-1.83× (H200); at 8192 × 8192 it issues a call in under half its run (H200). (The H100's
    figures were counted without the sleep below, ten calls issued then synchronised.)"""
    spec = exercises.get(name)
    issued, ran = _issued_and_ran_ms(spec)
    assert issued < 0.8 * ran, (f"{name}'s reference issues a call of {spec.throughput.case.label} in {issued:.3f} ms "
                                f"and runs it in {ran:.3f} ms: time a larger case")


def _issued_and_ran_ms(spec, calls: int = 10) -> tuple[float, float]:
    """Per call of the reference solution on the timed case: the milliseconds its Python takes to
    issue it (the GPU held busy meanwhile, so no call waits for another), and to run it, calls
    back to back (its tensors freed on return, whatever the test decides)."""
    import importlib
    fn = getattr(importlib.import_module(spec.solution), spec.function)
    inputs = spec.make_inputs(spec.throughput.case, torch.Generator().manual_seed(0), "cuda")
    for _ in range(3):  # compiled, and the allocator's cache warm
        spec.call(fn, inputs)
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # about a second of the GPU's clock
    start = time.perf_counter()
    for _ in range(calls):
        spec.call(fn, inputs)
    issued = time.perf_counter() - start
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        spec.call(fn, inputs)
    torch.cuda.synchronize()
    return issued / calls * 1e3, (time.perf_counter() - start) / calls * 1e3


def test_the_protocol_keeps_a_strided_views_layout_and_only_what_it_reaches():
    import socket
    import time
    import torch
    from autograder.grading import protocol
    wide = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    view = wide[1:4, 2:7]
    ours, theirs = socket.socketpair()
    protocol.send(theirs, {"op": "call"}, [view])
    header, (got,) = protocol.recv(ours, time.monotonic() + 5, max_tensor_bytes=4 * 25)
    assert header == {"op": "call"} and torch.equal(got, view) and got.stride() == view.stride()
    assert got.untyped_storage().nbytes() == 4 * (2 * 10 + 5)  # first to last element, gaps included


def test_autograde_without_the_course_settings_grades_nothing(graded_here, monkeypatch):
    from solutions.broadcast_add import add
    write_notebook(graded_here, solution_section("solutions/broadcast_add.py", "add"))
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # but the kernel holds the student's own `add`
    with pytest.raises(GradingFailure, match="nbgrader ran without the course's settings"):
        grade(ADD.name, add, "correctness")


def test_the_judges_weighted_sums_see_a_skipped_block_and_depend_on_the_key():
    import torch
    from autograder.grading.clock import _launch_sums, _totals
    out = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
    (plain, plain_abs), (again, _) = _totals(_launch_sums(out, key=7)), _totals(_launch_sums(out.clone(), key=7))
    assert plain == again and plain_abs >= abs(plain) and plain_abs > 0.5 * out.abs().sum().item()
    skipped = out.clone()
    skipped[4096:4096 + 512] = float("nan")  # one block of 512 never written (the runner's NaN)
    assert _totals(_launch_sums(skipped, key=7))[0] != _totals(_launch_sums(skipped, key=7))[0]  # NaN
    skipped[4096:4096 + 512] = 0  # or zeros: off by far more than float32's tolerance allows
    assert abs(_totals(_launch_sums(skipped, key=7))[0] - plain) > 10 * 2 * (1.5e-5 * 10_000 + 1.3e-6 * plain_abs)
    assert _totals(_launch_sums(out, key=8))[0] != plain  # a runner cannot know the weights


def test_the_grading_profile_times_each_step_of_a_reference():
    """scripts/profile_grading.py, which NOTES.md's per-student times come from."""
    done = subprocess.run([sys.executable, "scripts/profile_grading.py", "ps1_broadcast_add"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    steps = re.findall(r": (visible cases and throughput|visible cases again, warm cache|visible cases again, only the "
                       r"host-side modules|visible cases|hidden cases)(?: [^:]*)?: [\d.]+ s, (\d+)/(\d+) passed",
                       done.stdout)
    assert [s[0] for s in steps] == ["visible cases", "hidden cases", "visible cases and throughput",
                                     "visible cases again, warm cache",
                                     "visible cases again, only the host-side modules"], done.stdout
    assert all(passed == total != "0" for _, passed, total in steps), done.stdout
    # inside each test, the judge's steps: the runner's start and the calls, with their counts
    # the hidden test takes the kept runner, the throughput test the correctness test's verdict
    assert len(re.findall(r"\d+×  runner start", done.stdout)) == (6 if torch.cuda.is_available() else 3), done.stdout
    assert len(re.findall(r"\d+×  calls to the function in its runner; slowest: ", done.stdout)) == 4, done.stdout
