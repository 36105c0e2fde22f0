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


def test_a_rigged_checker_in_the_answer_cell_does_not_help(graded_here):
    write_notebook(graded_here, ZEROS + RIGGED_CHECKER)
    result = isolated()
    assert not any(c.passed for c in result.cases)
    assert "elements differ" in result.cases[-1].message


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
    write_notebook(graded_here, reference + "\nimport os\nif 'NBGRADER_EXECUTION' in os.environ or "
                   f"'{isolation.ISOLATE_VAR}' in os.environ:\n    add = None")
    assert isolated().correct
