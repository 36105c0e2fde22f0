"""Lesson 4's log-softmax exercise: wrong kernels fail it, the notebook's stub says "not written yet"."""
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from autograder import check
from autograder.lesson_exercises.l04_log_softmax import EXERCISE, LARGE_LOGIT

from conftest import DEVICE, ROOT
from kit import assert_not_written, load_stub, notebook_code

DEV = DEVICE.device
NOTEBOOK = ROOT / "notebooks" / "04_fused_softmax.ipynb"


@triton.jit
def _variant_kernel(out_ptr, x_ptr, x_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr,
                    PAD_ZERO: tl.constexpr, SUBTRACT_MAX: tl.constexpr, EXTRA_LANES: tl.constexpr,
                    FOLD_MAX: tl.constexpr, LOG_OF_SOFTMAX: tl.constexpr):
    """The reference kernel with one mistake switched on by each flag (or a correct rewrite)."""
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols + EXTRA_LANES
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0 if PAD_ZERO else -float("inf")).to(tl.float32)
    row_max = tl.max(x, axis=0) if SUBTRACT_MAX else 0.0
    numerator = tl.exp(x - row_max)
    log_sum = tl.log(tl.sum(numerator, axis=0))
    result = x - (row_max + log_sum) if FOLD_MAX else (x - row_max) - log_sum
    if LOG_OF_SOFTMAX:
        result = tl.log(numerator / tl.sum(numerator, axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, result.to(out_ptr.dtype.element_ty), mask=mask)


def variant(pad_zero=False, subtract_max=True, extra_lanes=0, fold_max=False, log_of_softmax=False):
    def log_softmax(x):
        x = x if x.stride(1) == 1 else x.contiguous()
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        _variant_kernel[(x.shape[0],)](out, x, x.stride(0), out.stride(0), x.shape[1],
                                       BLOCK_SIZE=triton.next_power_of_2(x.shape[1]), PAD_ZERO=pad_zero,
                                       SUBTRACT_MAX=subtract_max, EXTRA_LANES=extra_lanes,
                                       FOLD_MAX=fold_max, LOG_OF_SOFTMAX=log_of_softmax)
        return out
    return log_softmax


def run(fn):
    return check(EXERCISE, fn, seed=0, verbose=False)


def labels(cases):
    return {c.label for c in cases}


def has_padding(case):
    return case.shape[1] & (case.shape[1] - 1) != 0  # not a power of two: the block has spare lanes


def test_the_large_rows_overflow_an_unshifted_exp():
    (x,) = EXERCISE.make_inputs(EXERCISE.visible_cases["cpu"][1], torch.Generator().manual_seed(0), "cpu")
    assert torch.exp(x[0]).isinf().all() and not torch.exp(x[1]).isinf().any()
    assert x[0].min() > LARGE_LOGIT - 20


def test_skipping_the_max_fails_every_case_with_infinities():
    with np.errstate(over="ignore"):  # the interpreter's NumPy warns of the overflow under test
        result = run(variant(subtract_max=False))
    assert not any(c.passed for c in result.cases), result.summary()
    assert all("Inf" in c.message for c in result.cases)


def test_the_log_of_a_softmax_fails_where_a_score_lies_far_below_its_rows_max():
    # What the lesson warns of: exp(-120) underflows to 0 in float32, and log(0) = -inf.
    with np.errstate(divide="ignore"):
        result = run(variant(log_of_softmax=True))
    assert labels(c for c in result.cases if not c.passed) == labels(
        c for c in EXERCISE.cases("visible", DEV) if c.shape[0] > 1 and c.shape[1] > 1), result.summary()


def test_padding_with_zero_instead_of_minus_inf_fails_every_padded_case():
    # Only the unshifted rows notice: next to a max of ~100, exp(0 - 100) = 4e-44 is lost.
    result = run(variant(pad_zero=True))
    padded_with_a_plain_row = {c for c in EXERCISE.cases("visible", DEV) if has_padding(c) and c.shape[0] > 1}
    assert labels(padded_with_a_plain_row) <= labels(c for c in result.cases if not c.passed), result.summary()


@pytest.mark.skipif(DEVICE.has_gpu, reason="a mask one lane too wide stores past the output "
                    "buffer on a GPU and can poison the CUDA context for later tests")
def test_a_mask_one_lane_too_wide_fails_every_padded_case():
    result = run(variant(extra_lanes=1))
    failed = labels(c for c in result.cases if not c.passed)
    assert labels(c for c in EXERCISE.cases("visible", DEV) if has_padding(c)) <= failed, result.summary()


def test_an_equivalent_rewrite_passes():
    # x - (max + log_sum) rounds max + log_sum once more (half an ulp of ~110 is 7.6e-6):
    # the declaration's tolerances must still accept this correct formula.
    result = run(variant(fold_max=True))
    assert result.correct, result.summary()


def test_the_notebook_stub_reports_not_written_yet():
    assert_not_written(EXERCISE, load_stub(NOTEBOOK).log_softmax)


def test_the_notebook_does_not_contain_the_solution():
    code = "\n".join(notebook_code(NOTEBOOK))
    assert "tl.log(" not in code and "solutions.log_softmax" not in code
