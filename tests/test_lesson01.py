"""Lesson 1's RMS-norm exercise: the classic mistakes fail it, the notebook's stub says "not written yet"."""
import nbformat
import numpy as np
import torch
import triton
import triton.language as tl

from autograder import check
from autograder.lesson_exercises.l01_rms_norm import EXERCISE
from conftest import DEVICE, ROOT
from kit import assert_not_written, labels, load_stub

NOTEBOOK = ROOT / "notebooks" / "01_ninja_gap.ipynb"
CASES = EXERCISE.cases("visible", DEVICE.device)


@triton.jit
def _variant_kernel(out_ptr, x_ptr, x_row_stride, out_row_stride, n_cols, eps, BLOCK_SIZE: tl.constexpr,
                    MEAN_OVER_BLOCK: tl.constexpr, IN_FLOAT32: tl.constexpr):
    """The reference kernel, with one mistake switched on by each flag (eps=0 is the third)."""
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0)
    if IN_FLOAT32:
        x = x.to(tl.float32)
    mean_square = tl.sum(x * x, axis=0) / (BLOCK_SIZE if MEAN_OVER_BLOCK else n_cols)
    result = x * tl.rsqrt(mean_square + eps)
    tl.store(out_ptr + row * out_row_stride + cols, result.to(out_ptr.dtype.element_ty), mask=mask)


def variant(mean_over_block=False, in_float32=True, eps=1e-6, row_stride=True):
    def rms_norm(x):
        x = x if x.stride(1) == 1 else x.contiguous()
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        _variant_kernel[(x.shape[0],)](out, x, x.stride(0) if row_stride else x.shape[1], out.stride(0), x.shape[1], eps,
                                       BLOCK_SIZE=triton.next_power_of_2(x.shape[1]),
                                       MEAN_OVER_BLOCK=mean_over_block, IN_FLOAT32=in_float32)
        return out
    return rms_norm


def failed(fn):
    # The interpreter's NumPy warns of the overflow and the 0 / 0 that the wrong versions make.
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        result = check(EXERCISE, fn, seed=0, verbose=False)
    return {c.label: c.message for c in result.cases if not c.passed}


def test_the_variant_kernel_itself_is_right():
    assert failed(variant()) == {}


def test_a_mean_over_the_block_fails_exactly_the_cases_with_padding_lanes():
    padded = {c.label for c in CASES if c.shape[1] & (c.shape[1] - 1)}  # not a power of two
    assert padded and set(failed(variant(mean_over_block=True))) == padded


def test_no_eps_gives_nan_on_the_zero_rows():
    with_zero_rows = {c.label for c in CASES if c.shape[0] >= 3}  # rows 2, 5, ... are zero
    wrong = failed(variant(eps=0.0))
    assert with_zero_rows and set(wrong) == with_zero_rows
    assert all("NaN" in message for message in wrong.values())


def test_squares_left_in_float16_fail_the_large_float16_case():
    wrong = failed(variant(in_float32=False))
    large = {c.label for c in CASES if c.dtype == torch.float16 and c.values == "large"}
    assert large and large <= set(wrong)
    assert not {c.label for c in CASES if c.dtype == torch.float32} & set(wrong)


def test_rows_read_as_if_contiguous_fail_the_strided_cases_and_are_named():
    wrong = failed(variant(row_stride=False))
    strided = {c.label for c in CASES if c.strided}
    assert strided and set(wrong) == strided
    assert all("read as if x (a view with strides" in message and "were stored contiguously" in message
               for message in wrong.values()), wrong


def test_the_notebook_stub_is_reported_as_not_written():
    result = assert_not_written(EXERCISE, load_stub(NOTEBOOK).rms_norm)
    assert labels(result.cases) == labels(CASES)
    # The answer stays out of the notebook.
    assert not any("tl.sum(x * x, axis=0) / n_cols" in c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells)
