"""Lesson 2's exercise: the check fails the classic mistakes and the notebook's stub says so."""
import pytest
import torch
import triton
import triton.language as tl

from autograder import check
from autograder.lesson_exercises.l02_reverse import EXERCISE
from conftest import DEVICE, ROOT
from kit import assert_not_written, load_stub, notebook_stub

NOTEBOOK = ROOT / "notebooks" / "02_block_programming_model.ipynb"


@triton.jit
def _reverse_variant(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr, SHIFT: tl.constexpr,
                     MASKED: tl.constexpr, DOUBLED: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    if MASKED:
        x = tl.load(x_ptr + (n_elements - SHIFT - offsets), mask=mask)
    else:
        x = tl.load(x_ptr + (n_elements - SHIFT - offsets))
    tl.store(out_ptr + offsets, x + x if DOUBLED else x, mask=mask)


def _variant(shift=1, masked=True, contiguous=True, doubled=False):
    def reverse(x):
        x = x.contiguous() if contiguous else x
        out = torch.empty_like(x)
        _reverse_variant[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK_SIZE=1024,
                                                          SHIFT=shift, MASKED=masked, DOUBLED=doubled)
        return out
    return reverse


def result(fn):
    return check(EXERCISE, fn, verbose=False)


def test_the_variant_kernel_itself_is_right():
    assert result(_variant()).correct


@pytest.mark.skipif(DEVICE.has_gpu, reason="an off-by-one load reads x[n] on a GPU: past the buffer")
def test_off_by_one_fails_every_case():
    assert not any(c.passed for c in result(_variant(shift=0)).cases)


@pytest.mark.skipif(DEVICE.has_gpu, reason="unmasked mirrored loads read before x[0] on a GPU")
def test_an_unmasked_load_is_caught_on_ragged_sizes_only():
    cases = result(_variant(masked=False)).cases
    assert {c.label for c in cases if not c.passed} == \
        {c.label for c in EXERCISE.cases("visible", DEVICE.device) if c.shape[0] % 1024}
    assert all("out of bounds" in c.message for c in cases if not c.passed)


def test_a_wrapper_that_passes_a_strided_x_as_it_is_fails_the_strided_case_only():
    cases = result(_variant(contiguous=False)).cases
    assert [c.label for c in cases if not c.passed] == \
        [c.label for c in EXERCISE.cases("visible", DEVICE.device) if c.strided] != []
    assert all("read as if x (a view with strides (2,)) were stored contiguously" in c.message
               for c in cases if not c.passed)


def test_a_mistake_that_is_not_a_misread_stride_is_not_called_one():
    cases = result(_variant(doubled=True)).cases  # stores 2·x: wrong values in every case, strided or not
    assert not any(c.passed for c in cases) and all("elements differ" in c.message for c in cases)
    assert not any("stored contiguously" in c.message for c in cases)


def test_the_notebook_stub_is_reported_as_not_written():
    assert_not_written(EXERCISE, load_stub(NOTEBOOK).reverse)
    assert "n_elements - 1 - offsets" not in notebook_stub(NOTEBOOK)  # the answer stays out of the notebook
