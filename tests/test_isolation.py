"""Grading in a clean process: tricks in the notebook cannot reach the checker."""
import nbformat
import pytest

from autograder import isolation
from autograder.check import GradingFailure, grade
from autograder.assignments.ps1_vector_add import EXERCISE as VECTOR_ADD
from autograder.notebook_sync import solution_section

SETUP = "import torch\nimport triton\nimport triton.language as tl\nfrom autograder import check, grade, setup_device\ndevice = setup_device()"
ZEROS = '''
@triton.jit
def zero_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), dtype=out_ptr.dtype.element_ty), mask=offs < n)

def add(x, y):
    out = torch.empty_like(x)
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


def write_notebook(folder, answer: str, other: str = "") -> None:
    def cell(source, **nbgrader):
        c = nbformat.v4.new_code_cell(source)
        c.metadata["nbgrader"] = nbgrader
        return c
    nb = nbformat.v4.new_notebook(cells=[
        cell(SETUP, grade_id="setup", solution=False),
        cell(answer, grade_id="add", solution=True),
        cell(other + "\n%timeit 1", grade_id="try_code", solution=False),
    ])
    nbformat.write(nb, folder / f"{VECTOR_ADD.name}.ipynb")


@pytest.fixture
def graded_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(isolation.ISOLATE_VAR, "1")
    return tmp_path


def isolated(**kw):
    return isolation.check_in_subprocess(VECTOR_ADD.name, "add", cases="visible", measure_throughput=False, **kw)


def test_only_setup_and_answer_cells_run(graded_here):
    write_notebook(graded_here, "def add(x, y): pass", other="raise SystemExit('never run')")
    code = isolation.student_code(graded_here / f"{VECTOR_ADD.name}.ipynb")
    assert "never run" not in code and "def add" in code and "setup_device()" in code


def test_the_reference_passes_in_a_clean_process(graded_here):
    write_notebook(graded_here, solution_section("solutions/vector_add.py", "add"))
    assert isolated().correct


def test_a_students_tests_share_a_compile_cache_of_their_own(graded_here):
    mark = "\nimport os\nopen(os.path.join(os.environ['TRITON_CACHE_DIR'], 'graded'), 'a').write('x')\n"
    write_notebook(graded_here, solution_section("solutions/vector_add.py", "add") + mark)
    assert isolated().correct and isolated().correct  # writable, confined or not
    cache = isolation.compile_cache()
    assert (cache / "graded").read_text() == "xx" and not cache.is_relative_to(graded_here)


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


def test_grade_uses_the_clean_process(graded_here, monkeypatch):
    import torch
    import autograder.correctness
    write_notebook(graded_here, ZEROS)
    # rigged here, in the grading process itself: the clean process never sees it
    monkeypatch.setattr(autograder.correctness, "compare", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch, "equal", lambda a, b: True)
    with pytest.raises(GradingFailure, match="no case passed"):
        grade(VECTOR_ADD.name, None, "correctness")


def test_a_crash_or_a_hang_fails_only_that_test(graded_here):
    write_notebook(graded_here, "import os\ndef add(x, y):\n    os._exit(3)")
    result = isolated()
    assert "crashed the grading process (exit code 3)" in result.cases[0].message
    write_notebook(graded_here, "import time\ndef add(x, y):\n    time.sleep(600)")
    result = isolated(timeout_s=20)
    assert "stopped after 20 s" in result.cases[0].message


def test_a_broken_answer_cell_is_explained(graded_here):
    write_notebook(graded_here, "def add(x, y)\n    return x")
    assert "raised SyntaxError when run on their own" in isolated().cases[0].message
    write_notebook(graded_here, "def plus(x, y): return x")
    assert "define no function `add`" in isolated().cases[0].message


def test_the_answer_cannot_see_that_it_is_graded(graded_here, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    reference = solution_section("solutions/vector_add.py", "add")
    write_notebook(graded_here, reference + "\nimport os, sys\nif 'NBGRADER_EXECUTION' in os.environ or "
                   f"'{isolation.ISOLATE_VAR}' in os.environ or __name__ != '__main__' or '__file__' in "
                   "globals() or 'autograder' in ' '.join(sys.argv) or 'hidden' in sys.argv or "
                   "'grad' in os.getcwd() or 'answer' in add.__code__.co_filename:\n    add = None")
    assert isolated().correct


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


@pytest.mark.gpu
def test_an_illegal_memory_access_costs_only_that_test(graded_here):
    import torch
    write_notebook(graded_here, FAULTING)
    first, *rest = isolated().cases
    assert "faulted on the GPU" in first.message and "restart the kernel" in first.message, first.message
    assert all(c.message.startswith("not run:") for c in rest)
    # this process's CUDA context, and the next submission's, are untouched
    assert torch.ones(4, device="cuda").sum().item() == 4
    write_notebook(graded_here, solution_section("solutions/vector_add.py", "add"))
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
    from autograder import confine, sandbox

    folder = Path(tempfile.mkdtemp(prefix="instructor-"))
    folder.chmod(0o755)
    (folder / "answers.txt").write_text("the hidden answers")
    (folder / "answers.txt").chmod(0o644)
    reference = solution_section("solutions/vector_add.py", "add")
    write_notebook(graded_here, reference + f"\nSTOLEN = open({str(folder / 'answers.txt')!r}).read()")
    monkeypatch.setenv(sandbox.GRADING_USER_VAR, "nobody")
    monkeypatch.setenv(confine.READABLE_VAR, str(folder))  # open to Landlock: only permissions decide
    assert isolated().correct  # readable by anyone: the grading user reads it too
    sandbox.close_to_others(folder)
    message = isolated().cases[0].message
    assert "raised PermissionError when run on their own" in message, message


@pytest.mark.skipif(not _as_root_with_nobody(), reason="needs root and a `nobody` user")
def test_a_grading_user_who_cannot_run_python_is_refused_clearly(graded_here, monkeypatch, tmp_path):
    import sys
    from autograder import sandbox

    hidden = tmp_path / "closed"
    hidden.mkdir(mode=0o700)
    (hidden / "python").symlink_to(sys.executable)
    monkeypatch.setattr(sys, "executable", str(hidden / "python"))
    monkeypatch.setenv(sandbox.GRADING_USER_VAR, "nobody")
    write_notebook(graded_here, solution_section("solutions/vector_add.py", "add"))
    with pytest.raises(PermissionError, match="nobody: that user cannot run .*closed/python"):
        isolated()
