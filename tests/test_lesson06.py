"""Lesson 6: the buggy add_bias the notebook hands out fails its check, and fixing exactly its
two bugs makes it pass; each bug alone also fails, and only on the cases it should."""
import inspect

import nbformat
import pytest
import torch

import solutions.add_bias as reference
from autograder import check
from autograder.exercises import get
from conftest import DEVICE, ROOT
from kit import NOTEBOOK_IMPORTS, edited, load_source

NOTEBOOK = ROOT / "notebooks" / "06_debugging_kernels.ipynb"
EXERCISE = "lesson6_add_bias"

# The two bugs of the stub, each as (buggy line, fixed line).
MASK_BUG = ("mask = cols < n_cols - 1  # the last column is n_cols - 1",
            "mask = cols < n_cols")
STRIDE_BUG = ("x = tl.load(x_ptr + row * n_cols + cols, mask=mask)",
              "x = tl.load(x_ptr + row * stride_x_row + cols, mask=mask)")


def stub_source() -> str:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    stubs = [c.source for c in nb.cells if "exercise-stub" in c.metadata.get("tags", [])]
    assert len(stubs) == 1, "the notebook needs exactly one cell tagged exercise-stub"
    return stubs[0]


def load(source: str, name: str):
    """``add_bias`` from ``source``, imported from a file (Triton reads a kernel's source)."""
    return load_source(NOTEBOOK_IMPORTS + source, name).add_bias


def fixed(source: str, *bugs) -> str:
    return edited(source, *bugs, what="the stub")


# A buggy kernel reads uninitialised memory (the gaps between a strided view's rows, unwritten
# output columns), which may hold NaN: NumPy warns about the arithmetic, the check reports it.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


def test_strided_cases_really_are_strided():
    exercise = get(EXERCISE)
    for case in exercise.cases("visible", DEVICE.device):
        x, bias = exercise.make_inputs(case, torch.Generator().manual_seed(0), DEVICE.device)
        assert x.shape == case.shape and x.dtype == case.dtype and bias.shape == (case.shape[1],)
        assert x.stride(0) == (3 if case.strided else 1) * case.shape[1], case.label


def run(fn):
    return check(EXERCISE, fn, seed=6, measure_throughput=False, verbose=False)


def test_the_stub_fails_every_case_with_a_mismatch_table():
    result = run(load(stub_source(), "stub"))
    assert not any(case.passed for case in result.cases), result.summary()
    assert all("elements differ" in case.message for case in result.cases), result.summary()


def test_fixing_the_two_bugs_passes():
    result = run(load(fixed(stub_source(), MASK_BUG, STRIDE_BUG), "stub_fixed"))
    assert result.correct, result.summary()


def test_the_mask_bug_alone_fails_every_case():
    result = run(load(fixed(stub_source(), STRIDE_BUG), "stub_mask_bug"))
    assert not any(case.passed for case in result.cases), result.summary()


def test_the_stride_bug_alone_fails_exactly_the_strided_cases():
    result = run(load(fixed(stub_source(), MASK_BUG), "stub_stride_bug"))
    strided = ["strided" in case.label for case in result.cases]
    passed = [case.passed for case in result.cases]
    assert any(strided) and passed == [not s for s in strided], result.summary()
    assert not any("stored contiguously" in case.message for case in result.cases)  # the check does not tell


def test_the_stub_differs_from_the_solution_only_by_its_bugs():
    # Both define the same kernel and wrapper; the solution's markers and comments aside.
    solution = inspect.getsource(reference)
    for buggy, good in (MASK_BUG, STRIDE_BUG):
        assert good.split("#")[0].strip() in solution
    stub = fixed(stub_source(), MASK_BUG, STRIDE_BUG)
    def code_lines(text):
        return [line.split("#")[0].rstrip() for line in text.splitlines()
                if line.split("#")[0].strip() and "BEGIN SOLUTION" not in line and "END SOLUTION" not in line]
    body = solution[solution.index("@triton.jit"):]
    assert code_lines(stub) == code_lines(body)


@pytest.mark.parametrize("bugs", [(), (MASK_BUG,), (STRIDE_BUG,)], ids=["both", "stride", "mask"])
def test_no_buggy_version_reaches_outside_its_tensors(bugs):
    # The stub also runs on a GPU, where nothing checks addresses: its bugs must stay in bounds.
    # In the interpreter the course's bounds check would turn a stray access into this message.
    result = run(load(fixed(stub_source(), *bugs), "stub_variant"))
    assert not any("out of bounds" in case.message for case in result.cases), result.summary()
