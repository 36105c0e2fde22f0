"""Problem set 2, softmax backward: the reference passes its cases, the inputs are what their
labels say, and the classic mistakes fail exactly the cases that expose them."""
import pytest
import torch
import triton
import triton.language as tl

from autograder.assignments.ps2_softmax_backward import (EXERCISE, PEAK_SCALE, softmax_backward_inputs,
                                                         softmax_backward_reference)
from autograder.spec import Case
from solutions.softmax_backward import HIDDEN_CASES, softmax_backward
from conftest import DEVICE
import kit

DEV = DEVICE.device
SEED = 0  # fixed inputs: which cases a wrong kernel fails must not depend on the draw
VISIBLE = EXERCISE.cases("visible", DEV)


def failed_labels(fn, which="visible"):
    return kit.failed_labels(EXERCISE, fn, which, seed=SEED)


def labels(pick, cases=VISIBLE):
    return kit.labels(cases, pick)


# --- the reference ---------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_reference_passes_every_case(which):
    failed, result = failed_labels(softmax_backward, which)
    assert not failed, result.summary()


def test_hidden_cases_repeat_a_shape_and_cover_every_kind():
    for device in ("cpu", "cuda"):
        hidden = HIDDEN_CASES[device]
        assert len(hidden) > len(set(hidden))  # the same case twice: fresh data each time
        assert {c.values for c in hidden} == {"normal", "large", "neg_inf"}
        assert any(c.strided for c in hidden) and {torch.float32, torch.float16} <= {c.dtype for c in hidden}
    assert torch.bfloat16 not in {c.dtype for c in (*EXERCISE.visible_cases["cpu"], *HIDDEN_CASES["cpu"])}


def test_reference_matches_autograd():
    x = torch.randn(5, 37, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(5, 37, dtype=torch.float64)
    y = torch.softmax(x, dim=-1)
    y.backward(dy)
    torch.testing.assert_close(softmax_backward_reference(y.detach(), dy), x.grad, rtol=0, atol=0)
    torch.testing.assert_close(softmax_backward(y.detach().float().to(DEV), dy.float().to(DEV)).cpu().double(),
                               x.grad, rtol=1e-5, atol=1e-6)


# --- the inputs are what the labels say ------------------------------------------------------


def test_y_is_a_softmax_output_and_strided_inputs_have_different_row_strides():
    y, dy = softmax_backward_inputs(Case((6, 50), strided=True), torch.Generator().manual_seed(0), DEV)
    assert y.shape == dy.shape == (6, 50) and y.stride(1) == dy.stride(1) == 1
    assert y.stride(0) == 50 + 25 + 3 and dy.stride(0) == 2 * 50 + 5
    torch.testing.assert_close(y.sum(dim=1).cpu(), torch.ones(6), rtol=0, atol=1e-6)
    assert (y >= 0).all()


def test_large_rows_are_peaked_and_neg_inf_rows_have_exact_zeros():
    y, _ = softmax_backward_inputs(Case((64, 1000), torch.float16, values="large"),
                                   torch.Generator().manual_seed(0), DEV)
    assert (y == 0).float().mean() > 0.95  # exp(-17) is below float16's smallest subnormal
    assert (y == 1).any(dim=1).float().mean() > 0.25, f"PEAK_SCALE={PEAK_SCALE}: few rows peak at exactly 1"
    y, dy = softmax_backward_inputs(Case((8, 777), values="neg_inf"), torch.Generator().manual_seed(0), DEV)
    zeros = y == 0
    assert 0.05 < zeros.float().mean() < 0.15
    assert (softmax_backward(y, dy)[zeros] == 0).all()  # 0 · finite: exactly 0, not just small


# --- wrong versions ------------------------------------------------------------------------

# What the kernel subtracts from dy (constexpr globals: a kernel may read no other kind).
SUM_OF_Y_DY, NO_SUM, SUM_OF_DY = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)


@triton.jit
def _variant_kernel(dx_ptr, y_ptr, dy_ptr, y_stride, dy_stride, dx_stride, n_cols, BLOCK: tl.constexpr,
                    SUM: tl.constexpr, FLOAT32: tl.constexpr, Y_PAD: tl.constexpr, DY_PAD: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    y = tl.load(y_ptr + r * y_stride + cols, mask=inside, other=Y_PAD)
    dy = tl.load(dy_ptr + r * dy_stride + cols, mask=inside, other=DY_PAD)
    if FLOAT32:
        y, dy = y.to(tl.float32), dy.to(tl.float32)
    if SUM == SUM_OF_Y_DY:
        dx = y * (dy - tl.sum(y * dy, axis=0))
    elif SUM == SUM_OF_DY:
        dx = y * (dy - tl.sum(dy, axis=0))
    else:
        dx = y * dy
    tl.store(dx_ptr + r * dx_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=inside)


def _variant(sum_of=SUM_OF_Y_DY, float32=True, pad=(0.0, 0.0), dy_stride_of_y=False):
    def softmax_backward(y, dy):
        dx = torch.empty(y.shape, dtype=y.dtype, device=y.device)
        dy_stride = y.stride(0) if dy_stride_of_y else dy.stride(0)
        _variant_kernel[(y.shape[0],)](dx, y, dy, y.stride(0), dy_stride, dx.stride(0), y.shape[1],
                                       BLOCK=triton.next_power_of_2(y.shape[1]), SUM=sum_of.value, FLOAT32=float32,
                                       Y_PAD=pad[0], DY_PAD=pad[1])
        return dx
    return softmax_backward


def test_the_variant_kernel_itself_is_right():
    assert failed_labels(_variant())[0] == set()


def test_dropping_the_sum_fails_every_case():
    # dx = y·dy: off by y·Σ y·dy, and a one-element row (y = 1) must give exactly 0.
    assert failed_labels(_variant(sum_of=NO_SUM))[0] == labels(lambda c: True)


def test_summing_dy_instead_of_y_dy_fails_all_but_one_element_rows():
    # Σ dy ~ N(0, n) against Σ y·dy, a weighted mean; with one column they are the same number.
    assert failed_labels(_variant(sum_of=SUM_OF_DY))[0] == labels(lambda c: c.shape[1] > 1)


def test_using_y_row_stride_for_dy_fails_exactly_the_strided_cases():
    failed, _ = failed_labels(_variant(dy_stride_of_y=True))
    assert failed == labels(lambda c: c.strided)


def test_a_16_bit_sum_fails_the_16_bit_peaked_rows():
    # In a peaked float16 row Σ y·dy ≈ dy at the peak, up to 4: float16's spacing there is
    # 2**-9 to 2**-8, far above the small dx = dy - Σ that remains. float32 inputs are unchanged.
    failed, _ = failed_labels(_variant(float32=False))
    assert labels(lambda c: c.dtype != torch.float32 and c.values == "large") <= failed
    assert not failed & labels(lambda c: c.dtype == torch.float32)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's NumPy
@pytest.mark.parametrize("pad", [(float("-inf"), 0.0), (float("-inf"), float("-inf")), (1.0, 1.0)],
                         ids=["y=-inf", "both=-inf", "both=1"])
def test_padding_that_is_not_zero_in_the_product_fails_every_ragged_row(pad):
    # The forward's -inf copied over: -inf·0 = NaN, or -inf·-inf = inf, makes Σ y·dy NaN or
    # inf and so every dx of the row. 1.0 adds (block - n) to it. A one-element row has no padding.
    failed, result = failed_labels(_variant(pad=pad))
    assert failed == labels(lambda c: c.shape[1] != triton.next_power_of_2(c.shape[1]))
    if pad[0] == float("-inf"):
        message = next(c.message for c in result.cases if not c.passed)
        assert "NaN" in message and "where the reference has none" in message


@pytest.mark.parametrize("cheat", [lambda y, dy: softmax_backward_reference(y, dy),
                                   lambda y, dy: y * (dy - (y * dy).sum(dim=-1, keepdim=True))])
def test_pytorch_shortcuts_fail(cheat):
    _, result = failed_labels(cheat)
    assert all("computed with PyTorch" in c.message for c in result.cases)
