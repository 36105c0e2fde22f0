"""Problem set 1, broadcast add: the reference passes every case, the inputs are laid out as
their labels say, and the usual mistakes fail exactly the cases that expose them."""
import pytest
import torch
import triton
import triton.language as tl

from autograder.assignments.ps1_broadcast_add import (BROADCAST_ADD_OPS, EXERCISE, BroadcastCase,
                                                      broadcast_inputs)
from solutions.broadcast_add import add, broadcast_add_kernel
from conftest import DEVICE
import kit

DEV = DEVICE.device
TILE = 64  # the reference's BLOCK_M and BLOCK_N, which the wrong versions below keep


def visible():
    return EXERCISE.cases("visible", DEV)


def failed_labels(fn, cases="visible"):
    return kit.failed_labels(EXERCISE, fn, cases, seed=None)


def labels(predicate):
    """Labels of the visible cases whose (case, x, y) satisfy ``predicate``."""
    g = torch.Generator().manual_seed(0)
    return kit.labels(visible(), lambda case: predicate(case, *EXERCISE.make_inputs(case, g, DEV)))


# --- the reference -----------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_reference_passes_every_case(which):
    # (in the interpreter each launch copies its arguments with copy_: not the wrapper's copies)
    failed, result = failed_labels(add, which)
    assert result.cases and failed == set(), [c.message for c in result.cases if not c.passed]


def test_hidden_cases_repeat_a_shape_and_cover_every_y_form():
    for cases in EXERCISE.hidden_cases().values():
        assert len({c.label for c in cases}) < len(cases)  # one case twice: fresh data each time
        assert {c.y_form for c in cases} == {"(M, N)", "(N,)", "(1, N)", "(M, 1)"}


# --- the inputs are what the labels say ----------------------------------------------------------


@pytest.mark.parametrize("case", EXERCISE.cases("visible", "cpu") + EXERCISE.hidden_cases()["cpu"],
                         ids=lambda c: c.label)
def test_inputs_are_laid_out_as_labelled(case):
    x, y = broadcast_inputs(case, torch.Generator().manual_seed(0), "cpu")
    m, n = case.shape
    assert x.shape == (m, n) and y.shape == case.y_shape and x.dtype == y.dtype == case.dtype
    if case.x_t and m > 1 and n > 1:
        assert x.stride(0) == 1 and not x.is_contiguous()
    if case.strided:  # a slice of a wider tensor (one row of it is packed all the same)
        assert x.untyped_storage().nbytes() > x.numel() * x.element_size()
        assert m == 1 or not x.is_contiguous()
        assert y.shape[0] == 1 < y.ndim or not y.is_contiguous()
    if case.y_t and case.y_form == "(M, N)":
        assert y.stride(0) == 1
    if not (case.x_t or case.y_t or case.strided):
        assert x.is_contiguous() and y.is_contiguous()
    assert torch.broadcast_shapes(x.shape, y.shape) == (m, n)


def test_labels_read_like_the_call():
    assert BroadcastCase((300, 500), y_form="(N,)", x_t=True).label == "300×500 float32 + (500,) x.T"
    assert (BroadcastCase((45, 33), torch.float16, y_form="(M, 1)", y_t=True, strided=True).label
            == "45×33 float16 + (45, 1) y.T strided")
    with pytest.raises(ValueError):
        BroadcastCase((4, 4), y_form="(N,)", y_t=True)
    with pytest.raises(ValueError):
        BroadcastCase((4, 4), y_form="(4,)")
    with pytest.raises(ValueError):
        BroadcastCase((4, 4), values="large")


def test_only_views_and_allocations_are_allowed():
    assert {"expand", "permute", "transpose", "unsqueeze", "view", "as_strided", "empty"} <= BROADCAST_ADD_OPS
    assert not {"contiguous", "clone", "copy_", "_to_copy", "to"} & BROADCAST_ADD_OPS


def test_throughput_bytes_count_the_broadcast_row_once():
    spec = EXERCISE.throughput
    case = BroadcastCase((64, 128), y_form="(N,)")
    x, y = broadcast_inputs(case, torch.Generator().manual_seed(0), "cpu")
    assert spec.bytes_moved((x, y), torch.empty(64, 128)) == (2 * 64 * 128 + 128) * 4
    assert spec.case.y_form == "(N,)" and not (spec.case.x_t or spec.case.strided)


# --- wrong versions ------------------------------------------------------------------------------


@triton.jit
def _row_mask_only_kernel(x_ptr, y_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_ym, stride_yn,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    r = (tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M))[:, None]
    c = (tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N))[None, :]
    rows_in = r < M  # no column mask: the last column of tiles runs past the end of each row
    a = tl.load(x_ptr + r * stride_xm + c * stride_xn, mask=rows_in)
    b = tl.load(y_ptr + r * stride_ym + c * stride_yn, mask=rows_in)
    tl.store(out_ptr + r * N + c, a + b, mask=rows_in)


def _launch(kernel, x, y, x_strides, y_strides, out=None):
    m, n = x.shape
    out = torch.empty((m, n), dtype=x.dtype, device=x.device) if out is None else out
    kernel[(triton.cdiv(m, TILE), triton.cdiv(n, TILE))](x, y, out, m, n, *x_strides, *y_strides,
                                                         BLOCK_M=TILE, BLOCK_N=TILE)
    return out


def ignores_strides(x, y):
    """Offsets as if x and y were packed: row r starts at r·N, whatever the strides say."""
    y_full = y.expand(x.shape)
    packed = torch.empty(y.shape, dtype=y.dtype).expand(x.shape).stride()  # y's strides were it contiguous
    return _launch(broadcast_add_kernel, x, y_full, (x.shape[1], 1), packed)


def row_mask_only(x, y):
    y_full = y.expand(x.shape)
    return _launch(_row_mask_only_kernel, x, y_full, x.stride(), y_full.stride())


def assumes_y_is_a_row(x, y):
    """y[c] for every row, the (N,) case: a (M, 1) y is read along the wrong dimension."""
    return _launch(broadcast_add_kernel, x, y, x.stride(), (0, y.stride(-1)))


def output_like_x(x, y):
    """torch.empty_like(x) keeps a transposed x's column-major strides; the kernel stores row-major."""
    y_full = y.expand(x.shape)
    return _launch(broadcast_add_kernel, x, y_full, x.stride(), y_full.stride(), out=torch.empty_like(x))


def test_ignoring_strides_fails_exactly_the_non_contiguous_inputs():
    failed, _ = failed_labels(ignores_strides)
    expected = labels(lambda case, x, y: not (x.is_contiguous() and y.is_contiguous()))
    assert expected and failed == expected


def test_a_row_mask_alone_fails_exactly_the_ragged_widths():
    failed, result = failed_labels(row_mask_only)
    assert failed == {c.label for c in visible() if c.shape[1] % TILE}
    if not DEVICE.has_gpu:  # the last row's store runs past the output
        assert any("out of bounds" in c.message for c in result.cases)


def test_assuming_y_is_a_row_fails_exactly_the_column_and_full_forms():
    failed, _ = failed_labels(assumes_y_is_a_row)
    assert failed == {c.label for c in visible() if c.y_form in ("(M, N)", "(M, 1)") and c.shape[0] > 1}


def test_an_output_shaped_like_a_transposed_x_fails_the_transposed_cases():
    failed, _ = failed_labels(output_like_x)
    assert failed == {c.label for c in visible() if c.x_t and min(c.shape) > 1}


def test_right_values_in_a_transposed_layout_fail_as_the_statement_asks_for_a_contiguous_output():
    def transposed_output(x, y):  # x.t() + y.t(), written contiguously, then returned transposed
        y_full = y.expand(x.shape)
        return _launch(broadcast_add_kernel, x.t(), y_full.t(), x.t().stride(), y_full.t().stride()).t()

    failed, result = failed_labels(transposed_output)
    assert failed == {c.label for c in visible() if min(c.shape) > 1}
    assert all("not a contiguous layout" in c.message for c in result.cases if not c.passed)


def _packed_add(x, y):
    """Lesson 2's way: both inputs packed into (M, N) first, then one flat index."""
    m, n = x.shape
    return _launch(broadcast_add_kernel, x, y, (n, 1), (n, 1))


@pytest.mark.parametrize("copy", [
    lambda x, y: _packed_add(x.contiguous(), y.expand(x.shape).contiguous()),
    lambda x, y: _packed_add(x.clone(), y.expand(x.shape).clone()),
    lambda x, y: _packed_add(torch.empty_like(x, memory_format=torch.contiguous_format).copy_(x),
                             torch.empty(x.shape, dtype=y.dtype, device=y.device).copy_(y.expand(x.shape))),
    lambda x, y: _packed_add(x.reshape(-1).view(x.shape), y.expand(x.shape).reshape(-1).view(x.shape)),
], ids=["contiguous", "clone", "copy_", "reshape"])
def test_a_wrapper_that_copies_is_told_why(copy):
    failed, result = failed_labels(copy)
    must_copy = labels(lambda case, x, y: not x.is_contiguous() or tuple(y.shape) != tuple(x.shape)
                       or not y.is_contiguous())
    assert must_copy - {"1×1 float32 + (1,)"} <= failed  # expanding a (1,) y to (1, 1) is a view
    for c in result.cases:
        assert c.passed or ("copied data" in c.message and "strides" in c.message), c.message


def test_an_upcast_copy_is_reported_as_a_copy():
    _, result = failed_labels(lambda x, y: add(x.float(), y.float()).to(x.dtype))
    messages = {c.message for c in result.cases if not c.passed}
    assert messages and all("copied data" in m and "_to_copy" in m for m in messages)
    assert {c.label for c in result.cases if not c.passed} == {c.label for c in visible() if c.dtype != torch.float32}
