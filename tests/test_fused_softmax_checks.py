"""The fused softmax checks (lesson 4's kernel) catch the classic softmax mistakes, each on the cases that expose it."""
import pytest
import torch
import triton
import triton.language as tl

from autograder import check
from autograder.lesson_kernels.fused_softmax import EXERCISE as FUSED_SOFTMAX
from conftest import DEVICE
import kit


@triton.jit
def _softmax_variant(out_ptr, x_ptr, x_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr,
                     SUBTRACT_MAX: tl.constexpr, MASKED: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf") if MASKED else 0.0)
    x = x.to(tl.float32)
    if SUBTRACT_MAX:
        x = x - tl.max(x, axis=0)
    numerator = tl.exp(x)
    tl.store(out_ptr + row * out_row_stride + cols,
             (numerator / tl.sum(numerator, axis=0)).to(out_ptr.dtype.element_ty), mask=mask)


def _variant(subtract_max=True, masked=True, row_stride=None):
    def softmax(x):
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        stride = x.stride(0) if row_stride is None else row_stride(x)
        _softmax_variant[(x.shape[0],)](out, x, stride, out.stride(0), x.shape[1],
                                        BLOCK_SIZE=triton.next_power_of_2(x.shape[1]),
                                        SUBTRACT_MAX=subtract_max, MASKED=masked)
        return out
    return softmax


def failed_labels(fn):
    return kit.failed_labels(FUSED_SOFTMAX, fn, seed=None)


def test_the_variant_kernel_itself_is_right():
    assert failed_labels(_variant())[0] == set()


def test_skipping_the_max_fails_exactly_the_large_rows():
    failed, result = failed_labels(_variant(subtract_max=False))
    assert failed == {c.label for c in FUSED_SOFTMAX.cases("visible", DEVICE.device) if c.values == "large"}
    assert "NaN" in next(c.message for c in result.cases if not c.passed)


def test_masked_lanes_loaded_as_zero_fail_every_ragged_row():
    failed, _ = failed_labels(_variant(masked=False))
    # (rows around 10^4 hide it: exp(0 - max) underflows to 0 there)
    ragged = {c.label for c in FUSED_SOFTMAX.cases("visible", DEVICE.device)
              if c.shape[1] != triton.next_power_of_2(c.shape[1]) and c.values != "large"}
    assert ragged and ragged <= failed


def test_ignoring_the_row_stride_fails_the_strided_views():
    failed, _ = failed_labels(_variant(row_stride=lambda x: x.shape[1]))
    assert failed == {c.label for c in FUSED_SOFTMAX.cases("visible", DEVICE.device) if c.strided}


@pytest.mark.parametrize("cheat", [lambda x: torch.softmax(x, dim=-1), lambda x: _variant()(torch.exp(x).log()),
                                   lambda x: torch.ops.aten._softmax(x, -1, False)])  # by its ATen name
def test_pytorch_shortcuts_fail(cheat):
    _, result = failed_labels(cheat)
    assert all("computed with PyTorch" in c.message for c in result.cases)


def test_online_softmax_without_the_rescale_fails_only_multi_tile_rows():
    from autograder.lesson_kernels.online_softmax import EXERCISE as ONLINE_SOFTMAX
    from test_online_softmax import _no_rescale_kernel

    def softmax_online(x):
        x = x.contiguous()
        out = torch.empty_like(x)
        _no_rescale_kernel[(x.shape[0],)](out, x, x.shape[1], BLOCK_SIZE=1024)
        return out

    # Without the rescale a multi-tile row is still right when its largest value lies in its first
    # tile: both rows of 2×5000 do so in about 4% of draws (CI met one). A fixed draw, where they do not.
    result = check(ONLINE_SOFTMAX, softmax_online, measure_throughput=False, verbose=False, seed=0)
    passed = {c.label: c.passed for c in result.cases}
    assert passed["1×1 float32"] and passed["3×1000 float32"]  # one tile: nothing to rescale
    assert not passed["2×5000 float32"] and not passed["3×9000 float32 strided"]
