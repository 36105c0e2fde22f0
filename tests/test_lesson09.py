"""Lesson 9's RMSNorm backward: every kernel against PyTorch's autograd on awkward shapes,
gradcheck in float64, wrong backwards failing the declared checks, and the exercise."""
import functools

import numpy as np
import pytest
import torch
import triton

from autograder import check, quiz
from autograder.kernels import rms_norm_backward as lesson
from autograder.kernels.rms_norm_backward import (EPS, GROUPS, RMSNorm, RMSNormFunction, naive_rms_norm_layer,
                                                  rms_norm_backward, rms_norm_backward_atomic, rms_norm_dw,
                                                  rms_norm_dx, rms_norm_forward, sum_rows_kernel)
from autograder.lesson_exercises.l09_rms_norm_grad import EXERCISE as GRAD
from autograder.lesson_kernels.rms_norm_backward import DX_TOLERANCES, EXERCISE as DX
from autograder.lesson_kernels.rms_norm_backward_dw import DW_TOLERANCES, EXERCISE as DW

from solutions import rms_norm_grad as grad_reference

import kit
from conftest import DEVICE, ROOT
from kit import assert_grads, assert_not_written, layer_inputs, load_stub, notebook_code

DEV = DEVICE.device
NOTEBOOK = ROOT / "notebooks" / "09_backward_passes.ipynb"
# One row, one column, row lengths around the power-of-two blocks, more rows than columns.
SHAPES = [(1, 1), (1, 7), (3, 1000), (5, 129), (40, 33)]
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE.has_gpu else [])  # no bf16 in the interpreter
STRATEGIES = {  # name -> the backward, (x, w, r, dy) -> (dx, dw)
    "(a) a row per program": functools.partial(rms_norm_backward, groups=None),
    "(c) one program": functools.partial(rms_norm_backward, groups=1),
    "(c) 3 groups": functools.partial(rms_norm_backward, groups=3),
    "(c) default groups": rms_norm_backward,
    "(b) atomics": rms_norm_backward_atomic,
}


# --- the lesson's kernels ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_matches_pytorch_and_saves_r(shape, dtype):
    x, w, _ = layer_inputs(shape, dtype)
    y, r = rms_norm_forward(x, w)
    expected_r = torch.rsqrt(x.double().pow(2).mean(dim=1) + EPS)
    assert y.dtype == dtype and r.dtype == torch.float32 and r.shape == (shape[0],)
    torch.testing.assert_close(r.double(), expected_r, atol=0, rtol=1e-6)
    torch.testing.assert_close(y.double(), naive_rms_norm_layer(x.double(), w.double()),
                               atol=DX_TOLERANCES[dtype][0], rtol=DX_TOLERANCES[dtype][1])


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_way_of_reducing_dw_matches_autograd(strategy, dtype):
    for shape in SHAPES:
        x, w, dy = layer_inputs(shape, dtype, seed=shape[1])
        _, r = rms_norm_forward(x, w)
        assert_grads(*STRATEGIES[strategy](x, w, r, dy), x, w, dy)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_rows_of_wider_tensors_and_a_broadcast_dy(strategy):
    wide = torch.randn(12, 75, device=DEV)
    x = wide[:, 10:43]  # rows 75 elements apart
    dy = torch.randn(12, 40, device=DEV)[:, :33]
    w = torch.randn(33, device=DEV)
    _, r = rms_norm_forward(x, w)
    assert_grads(*STRATEGIES[strategy](x, w, r, dy), x, w, dy)
    ones = torch.ones(1, 1, device=DEV).expand(12, 33)  # what y.sum().backward() hands over: stride 0
    assert_grads(*STRATEGIES[strategy](x, w, r, ones), x, w, ones)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (3, 65), (33, 64), (100, 3), (65, 200)], ids=str)
def test_the_second_stage_sums_the_buffer_rows(shape, dtype):
    partial = torch.randn(shape, device=DEV, dtype=dtype)
    out = torch.empty(shape[1], device=DEV, dtype=dtype)
    sum_rows_kernel[(triton.cdiv(shape[1], 64),)](out, partial, shape[0], shape[1], BLOCK_ROWS=32, BLOCK_COLS=64)
    torch.testing.assert_close(out, partial.sum(dim=0))


def test_the_grouped_backward_repeats_bit_for_bit():
    x, w, dy = layer_inputs((600, 100), torch.float32)  # 256 groups of 3 rows, the last ones short
    _, r = rms_norm_forward(x, w)
    first = rms_norm_backward(x, w, r, dy)
    for _ in range(3):
        again = rms_norm_backward(x, w, r, dy)
        assert torch.equal(again[0], first[0]) and torch.equal(again[1], first[1])
    assert_grads(*first, x, w, dy)
    assert triton.cdiv(600, triton.cdiv(600, GROUPS)) == 200  # rows_per_program = 3, 200 programs


@pytest.mark.skipif(DEVICE.has_gpu, reason="on a GPU atomics arrive in a different order from run to run")
def test_in_the_interpreter_atomics_repeat_bit_for_bit():
    x, w, dy = layer_inputs((64, 50), torch.float32)
    _, r = rms_norm_forward(x, w)
    runs = [rms_norm_backward_atomic(x, w, r, dy)[1] for _ in range(3)]
    assert all(torch.equal(run, runs[0]) for run in runs)


@pytest.mark.skipif(DEVICE.has_gpu, reason="float64 gradcheck runs in the interpreter (tl.rsqrt is approximate on a GPU)")
def test_gradcheck_in_float64():
    # float64 loads, stores and math in the interpreter: the forward matches PyTorch to rounding
    x = torch.randn(3, 7, dtype=torch.float64)
    w = torch.randn(7, dtype=torch.float64)
    y, r = rms_norm_forward(x, w)
    assert r.dtype == torch.float64
    torch.testing.assert_close(y, naive_rms_norm_layer(x, w), atol=1e-14, rtol=1e-14)
    inputs = (x.requires_grad_(), w.requires_grad_())
    assert torch.autograd.gradcheck(lambda a, b: RMSNormFunction.apply(a, b, EPS), inputs)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_the_module_matches_torch_nn_rmsnorm(dtype):
    torch.manual_seed(0)
    ours, theirs = RMSNorm(33).to(DEV, dtype), torch.nn.RMSNorm(33, eps=EPS).to(DEV, dtype)
    with torch.no_grad():
        ours.weight.normal_(1.0, 0.5)
        theirs.weight.copy_(ours.weight)
    x = torch.randn(2, 5, 33, device=DEV).to(dtype)  # any leading dims
    dy = torch.randn(2, 5, 33, device=DEV).to(dtype)
    grads = []
    for layer in (ours, theirs):
        xs = x.clone().requires_grad_()
        y = layer(xs)
        assert y.shape == x.shape and y.dtype == dtype
        grads.append(torch.autograd.grad(y, (xs, layer.weight), dy))
    (dx, dw), (dx_ref, dw_ref) = grads
    torch.testing.assert_close(dx.double(), dx_ref.double(), atol=DX_TOLERANCES[dtype][0] * 10, rtol=DX_TOLERANCES[dtype][1] * 2)
    torch.testing.assert_close(dw.double(), dw_ref.double(), atol=DW_TOLERANCES[dtype][0], rtol=DW_TOLERANCES[dtype][1] * 2)


@pytest.mark.parametrize("strategy", ["grouped", "per_row", "atomic"])
def test_the_reference_passes_the_declared_checks(strategy):
    assert check(DW, functools.partial(rms_norm_dw, strategy=strategy), seed=1, verbose=False).correct
    if strategy == "grouped":
        assert check(DX, rms_norm_dx, seed=1, verbose=False).correct


# --- wrong backwards must fail ------------------------------------------------------------------

LESSON_KERNELS = str(ROOT / "autograder" / "kernels" / "rms_norm_backward.py")
MEAN = "c = tl.sum(x * w_dy, axis=0) / n_cols"
WRONG = {  # the lesson's backward with one edit each
    "no_mean_term": [("dx = r * w_dy - x * (r * r * r * c)", "dx = r * w_dy")],
    "mean_over_block": [(MEAN, "c = tl.sum(x * w_dy, axis=0) / cols.shape[0]")],  # padding lanes counted
    "mean_without_w": [(MEAN, "c = tl.sum(x * dy, axis=0) / n_cols")],
    "dw_stored_not_added": [("tl.atomic_add(dw_ptr + cols, dw_row, mask=mask)",  # the last program's row stays
                             "tl.store(dw_ptr + cols, dw_row, mask=mask)")],
}


def variant(mistake: str | None = None):
    """The lesson's kernels, with one mistake (or none)."""
    return kit.mutant(LESSON_KERNELS, *WRONG[mistake]) if mistake else lesson


def failed(exercise, kernels, output):
    """Labels of the cases where ``output`` (0: dx, 1: dw by atomics) of ``kernels`` fails, and the result."""
    fn = kernels.rms_norm_dx if output == 0 else functools.partial(kernels.rms_norm_dw, strategy="atomic")
    result = check(exercise, fn, seed=0, verbose=False)
    return {c.label for c in result.cases if not c.passed}, result


def labels(cases):
    return {c.label for c in cases}


CASES = DX.cases("visible", DEV)


def test_a_correct_rewrite_passes_both_checks():
    assert not failed(DX, variant(), 0)[0] and not failed(DW, variant(), 1)[0]


def test_a_dx_without_the_mean_term_fails_every_case():
    bad, result = failed(DX, variant("no_mean_term"), 0)
    assert bad == labels(CASES), result.summary()


def test_a_mean_over_the_padding_lanes_fails_every_row_length_that_is_not_a_power_of_two():
    # Not in the large float16 case: there dx is ~4e-4 and the mean term ~2e-6, so dividing by 512
    # instead of 500 moves dx by under 4e-6, inside float16's atol of 1e-5. Every other padded case fails.
    bad, result = failed(DX, variant("mean_over_block"), 0)
    padded = {c for c in CASES if c.shape[1] & (c.shape[1] - 1) and c.values == "normal"}
    assert labels(padded) <= bad <= labels(c for c in CASES if c.shape[1] & (c.shape[1] - 1)), result.summary()


def test_a_mean_term_without_the_weight_fails_every_case():
    bad, result = failed(DX, variant("mean_without_w"), 0)
    assert bad == labels(CASES), result.summary()


def test_a_dw_without_the_cross_program_reduction_fails_every_case_of_more_than_one_row():
    bad, result = failed(DW, variant("dw_stored_not_added"), 1)
    assert bad == labels(c for c in CASES if c.shape[0] > 1), result.summary()
    assert bad != labels(CASES)  # one row has nothing to reduce: right by luck


# --- the exercise ---------------------------------------------------------------------------

def grad_variant(eps=EPS, mean_term=True):
    """The exercise's reference, with ``eps`` and without the mean term if asked."""
    module = kit.mutant("rms_norm_grad", ("grad = inv_rms * dy_row - x_row * (inv_rms * inv_rms * inv_rms * mean_x_dy)",
                                          "grad = inv_rms * dy_row")) if not mean_term else grad_reference
    return functools.partial(module.rms_norm_grad, eps=eps)


def test_the_exercise_catches_a_missing_eps_and_a_missing_mean_term():
    assert check(GRAD, grad_variant(), seed=0, verbose=False).correct  # the harness accepts a right kernel
    with np.errstate(divide="ignore", invalid="ignore"):  # the interpreter's NumPy warns of 1 / sqrt(0)
        no_eps = check(GRAD, grad_variant(eps=0.0), seed=0, verbose=False)
    zero_rows = {c.label for c in GRAD.cases("visible", DEV) if c.shape[0] > 2}  # rows 2, 5, ... are zeros
    assert zero_rows <= {c.label for c in no_eps.cases if not c.passed}, no_eps.summary()
    no_mean = check(GRAD, grad_variant("no_mean_term"), seed=0, verbose=False)
    assert not any(c.passed for c in no_mean.cases), no_mean.summary()


def test_the_notebook_stub_reports_not_written_yet():
    assert_not_written(GRAD, load_stub(NOTEBOOK).rms_norm_grad)


def test_the_notebook_does_not_contain_the_solution():
    code = "\n".join(notebook_code(NOTEBOOK))
    lines = {line.strip() for line in code.splitlines()}
    solution = (ROOT / "solutions" / "rms_norm_grad.py").read_text()
    body = solution.split("# --- notebook cell: rms_norm_grad ---")[1]
    arithmetic = [line.strip() for line in body.splitlines()
                  if any(op in line for op in ("tl.rsqrt", "tl.sum", "tl.store", "tl.load", "= inv_rms"))]
    assert len(arithmetic) >= 5 and not [line for line in arithmetic if line in lines]
    assert "solutions.rms_norm_grad" not in code


def test_the_notebook_asks_every_lesson_nine_question():
    code = "\n".join(notebook_code(NOTEBOOK))
    ours = [q for q in quiz.load_quizzes()["questions"] if q.startswith("q9")]
    assert len(ours) >= 3 and all(f'ask("{q}")' in code for q in ours)


def test_the_forward_refuses_meta_tensors_instead_of_launching_at_address_0():
    # On a GPU a launch on meta tensors faults and ends every later CUDA call (lesson 10's meta line).
    with pytest.raises(NotImplementedError, match="meta tensors have none"):
        lesson.rms_norm_forward(torch.empty(4, 8, device="meta"), torch.empty(8, device="meta"))
