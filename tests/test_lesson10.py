"""Lesson 10: lesson 9's RMSNorm as a PyTorch operator (autograd against PyTorch, the fake
implementation on meta tensors, opcheck, torch.compile with fullgraph=True), the fused dropout
(reproducible for a seed, right in distribution), and the exercise: its backward, wrong versions
failing."""
import math
import warnings

import pytest
import torch
import triton
import triton.language as tl

from autograder import check, quiz
from autograder.kernels import rms_norm_op
from autograder.kernels.dropout import dropout, uniform
from autograder.kernels.rms_norm_backward import EPS, naive_rms_norm_layer, rms_norm_forward
from autograder.lesson_exercises.l10_dropout_backward import EXERCISE as DROPOUT_BACKWARD
from autograder.lesson_kernels.rms_norm_backward import DX_TOLERANCES
from solutions.dropout_backward import dropout_backward

from conftest import DEVICE, ROOT
from kit import assert_grads, assert_not_written, layer_inputs, load_stub, notebook_code

DEV = DEVICE.device
NOTEBOOK = ROOT / "notebooks" / "10_pytorch_ops.ipynb"
SHAPES = [(1, 1), (3, 7), (5, 129), (40, 33)]
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE.has_gpu else [])  # no bf16 in the interpreter
COMPILER = "inductor" if DEVICE.has_gpu else "aot_eager"


# --- the operator ---------------------------------------------------------------------------------

def test_the_pair_that_can_be_traced_is_chosen():
    assert rms_norm_op.INTERPRETED == (not DEVICE.has_gpu)
    expected = (rms_norm_op.rms_norm_fwd, rms_norm_op.rms_norm_bwd) if DEVICE.has_gpu else \
        (rms_norm_op.rms_norm_fwd_opaque, rms_norm_op.rms_norm_bwd_opaque)
    assert (rms_norm_op.FORWARD, rms_norm_op.BACKWARD) == expected


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_operator_under_autograd_matches_pytorch(shape, dtype):
    x, w, dy = layer_inputs(shape, dtype)
    x, w = x.requires_grad_(), w.requires_grad_()
    y = rms_norm_op.rms_norm(x, w)
    assert y.shape == x.shape and y.dtype == dtype
    torch.testing.assert_close(y.double(), naive_rms_norm_layer(x.detach().double(), w.detach().double()),
                               atol=DX_TOLERANCES[dtype][0], rtol=DX_TOLERANCES[dtype][1])
    assert_grads(*torch.autograd.grad(y, (x, w), dy), x.detach(), w.detach(), dy)


@pytest.mark.parametrize("pair", ["triton_op", "custom_op"])
def test_both_pairs_run_eagerly_on_strided_rows_and_an_expanded_dy(pair):
    forward = rms_norm_op.rms_norm_fwd if pair == "triton_op" else rms_norm_op.rms_norm_fwd_opaque
    x = torch.randn(12, 75, device=DEV)[:, 10:43].requires_grad_()  # rows 75 elements apart
    w = torch.randn(33, device=DEV, requires_grad=True)
    y, r = forward(x, w, EPS)
    assert r.shape == (12,) and r.dtype == torch.float32
    y.sum().backward()  # dy = ones, expanded: stride 0
    assert_grads(x.grad, w.grad, x.detach(), w.detach(), torch.ones(12, 33, device=DEV))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64], ids=str)
def test_the_fake_implementation_gives_shapes_and_dtypes_on_meta_tensors(dtype):
    x = torch.empty(4096, 1000, device="meta", dtype=dtype)
    w = torch.empty(1000, device="meta", dtype=dtype)
    y, r = rms_norm_op.rms_norm_fwd_opaque(x, w, EPS)
    accumulator = torch.float64 if dtype == torch.float64 else torch.float32
    assert (y.shape, y.dtype, y.device.type) == (x.shape, dtype, "meta")
    assert (r.shape, r.dtype, r.device.type) == ((4096,), accumulator, "meta")
    dx, dw = rms_norm_op.rms_norm_bwd_opaque(x, w, r, torch.empty_like(x))
    assert (dx.shape, dx.dtype, dw.shape, dw.dtype) == (x.shape, dtype, w.shape, dtype)
    assert rms_norm_op.rms_norm(x, w).shape == x.shape  # the pair rms_norm calls meets meta tensors too


def test_the_fake_agrees_with_the_real_forward():
    x, w, _ = layer_inputs((5, 129), torch.float16)
    real = rms_norm_op.rms_norm_fwd_opaque(x, w, EPS)
    fake = rms_norm_op.rms_norm_fwd_opaque(x.to("meta"), w.to("meta"), EPS)
    for a, b in zip(real, fake):
        assert (a.shape, a.dtype, a.stride()) == (b.shape, b.dtype, b.stride())


@pytest.mark.skipif(DEVICE.has_gpu, reason="on a GPU wrap_triton traces the launch, and the triton_op meets meta tensors")
def test_in_the_interpreter_the_triton_op_cannot_meet_meta_tensors():
    x, w, _ = layer_inputs((3, 7), torch.float32)
    y, _ = rms_norm_op.rms_norm_fwd(x, w, EPS)  # eager works
    torch.testing.assert_close(y, naive_rms_norm_layer(x, w))
    with warnings.catch_warnings(), pytest.raises(Exception):
        warnings.simplefilter("ignore")
        rms_norm_op.rms_norm_fwd(x.to("meta"), w.to("meta"), EPS)


@pytest.mark.skipif(not DEVICE.has_gpu, reason="the triton_op's fake run needs wrap_triton's traceable launch (a GPU)")
def test_on_a_gpu_the_triton_op_meets_meta_tensors():
    y, r = rms_norm_op.rms_norm_fwd(torch.empty(64, 100, device="meta"), torch.empty(100, device="meta"), EPS)
    assert (y.shape, r.shape, r.dtype) == ((64, 100), (64,), torch.float32)


def test_opcheck_passes_the_custom_op_pair():
    x = torch.randn(4, 40, device=DEV, requires_grad=True)
    w = torch.randn(40, device=DEV, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.library.opcheck(rms_norm_op.rms_norm_fwd_opaque, (x, w, EPS))
        _, r = rms_norm_forward(x.detach(), w.detach())
        torch.library.opcheck(rms_norm_op.rms_norm_bwd_opaque, (x.detach(), w.detach(), r, torch.randn(4, 40, device=DEV)))


def test_compiled_with_fullgraph_it_matches_eager_both_ways():
    def scaled(x, w):
        return rms_norm_op.rms_norm(x, w) * 2

    x, w, dy = layer_inputs((6, 50), torch.float32)
    x, w = x.requires_grad_(), w.requires_grad_()
    torch._dynamo.reset()
    compiled = torch.compile(scaled, fullgraph=True, backend=COMPILER)
    eager, traced = scaled(x, w), compiled(x, w)
    torch.testing.assert_close(traced, eager)
    for a, b in zip(torch.autograd.grad(traced, (x, w), dy), torch.autograd.grad(eager, (x, w), dy)):
        torch.testing.assert_close(a, b)


@torch.library.custom_op("triton_course_test::rms_norm_no_fake", mutates_args=())
def _no_fake(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return rms_norm_forward(x, w)[0]


@pytest.mark.parametrize("fullgraph", [False, True])
def test_without_a_fake_implementation_compile_fails_with_or_without_fullgraph(fullgraph):
    x, w, _ = layer_inputs((3, 7), torch.float32)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="no fake impl"):
        torch.compile(lambda a, b: _no_fake(a, b) * 2, fullgraph=fullgraph, backend="aot_eager")(x, w)


# --- dropout ------------------------------------------------------------------------------------

def test_uniform_numbers_are_in_zero_one_and_look_uniform():
    n = 2**14
    u = uniform(n, 5, device=DEV).cpu().double()
    assert u.dtype == torch.float64 and 0 <= u.min() and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 5 * math.sqrt(1 / 12 / n)
    counts = torch.histc(u, bins=10, min=0, max=1)
    assert ((counts - n / 10).abs() < 5 * math.sqrt(n * 0.1 * 0.9)).all()


def test_the_same_seed_gives_the_same_mask_and_another_seed_another():
    x = torch.randn(5000, device=DEV)
    a, b, c = dropout(x, 0.4, 11), dropout(x, 0.4, 11), dropout(x, 0.4, 12)
    assert torch.equal(a, b)
    changed = ((a != 0) != (c != 0)).double().mean().item()
    assert abs(changed - 2 * 0.4 * 0.6) < 5 * math.sqrt(0.48 * 0.52 / 5000)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_the_kept_fraction_is_within_five_standard_deviations_and_kept_values_are_scaled(p):
    n = 2**15
    x = torch.randn(n, device=DEV) + 3  # never 0: a zero output means dropped
    y = dropout(x, p, 2026)
    kept = y != 0
    z = (kept.sum().item() - n * (1 - p)) / math.sqrt(n * p * (1 - p))
    assert abs(z) < 5, z
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    assert torch.equal(kept.cpu(), (uniform(n, 2026, device=DEV) >= p).cpu())  # what the exercise's reference redraws


def test_float16_gets_the_same_mask_and_a_2d_input_its_row_major_offsets():
    x = torch.randn(7, 300, device=DEV) + 3
    y32, y16 = dropout(x, 0.3, 9), dropout(x.half(), 0.3, 9)
    assert y16.dtype == torch.float16 and torch.equal(y16 != 0, y32 != 0)
    torch.testing.assert_close(y16.float(), y32, atol=0, rtol=1e-3)
    strided = torch.randn(7, 450, device=DEV)[:, :300]
    assert torch.equal(dropout(strided, 0.3, 9) != 0, y32 != 0)


def test_p_zero_keeps_everything_and_p_one_is_refused():
    x = torch.randn(100, device=DEV)
    assert torch.equal(dropout(x, 0.0, 3), x)
    with pytest.raises(AssertionError):
        dropout(x, 1.0, 3)


# --- the exercise ---------------------------------------------------------------------------------

def test_the_answer_is_the_gradient_autograd_computes_through_the_forward():
    x = (torch.randn(6, 77, device=DEV) + 3).requires_grad_()
    dy = torch.randn(6, 77, device=DEV)
    keep = uniform(x.numel(), 31, device=DEV).view(x.shape) >= 0.25
    y = torch.where(keep, x / 0.75, torch.zeros_like(x))  # the forward as PyTorch operations
    torch.testing.assert_close(dropout(x.detach(), 0.25, 31), y)
    torch.testing.assert_close(dropout_backward(dy, 0.25, 31), torch.autograd.grad(y, x, dy)[0])


@triton.jit
def _variant_kernel(dx_ptr, dy_ptr, dy_row_stride, n_cols, p, seed, BLOCK_SIZE: tl.constexpr,
                    OFFSETS: tl.constexpr, SCALE: tl.constexpr, KEEP_ABOVE: tl.constexpr):
    """The backward with one mistake switched on. OFFSETS: 0 row-major (right), 1 each row from 0,
    2 the element's address (with the row stride)."""
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    inside = cols < n_cols
    dy = tl.load(dy_ptr + row.to(tl.int64) * dy_row_stride + cols, mask=inside, other=0.0).to(tl.float32)
    if OFFSETS == 0:
        offsets = row * n_cols + cols
    elif OFFSETS == 1:
        offsets = cols
    else:
        offsets = row * dy_row_stride + cols
    u = tl.rand(seed, offsets)
    if KEEP_ABOVE:
        keep = u >= p
    else:
        keep = u < p
    if SCALE:
        dx = tl.where(keep, dy / (1 - p), 0.0)
    else:
        dx = tl.where(keep, dy, 0.0)
    tl.store(dx_ptr + row.to(tl.int64) * n_cols + cols, dx.to(dx_ptr.dtype.element_ty), mask=inside)


def variant(offsets=0, scale=True, keep_above=True, seed_shift=0, copy=False, torch_mask=False):
    def backward(dy, p, seed):
        if copy:
            dy = dy.contiguous()
        dx = torch.empty(dy.shape, dtype=dy.dtype, device=dy.device)
        if torch_mask:  # the mask drawn by PyTorch, in the wrapper
            dy = dy * (torch.rand(dy.shape, device=dy.device) >= p)
        _variant_kernel[(dy.shape[0],)](dx, dy, dy.stride(0), dy.shape[1], p, seed + seed_shift,
                                        BLOCK_SIZE=triton.next_power_of_2(dy.shape[1]), OFFSETS=offsets,
                                        SCALE=scale, KEEP_ABOVE=keep_above)
        return dx
    return backward


CASES = DROPOUT_BACKWARD.cases("visible", DEV)


def failed(fn):
    result = check(DROPOUT_BACKWARD, fn, seed=0, verbose=False)
    return {c.label for c in result.cases if not c.passed}, result


def labels(cases):
    return {c.label for c in cases}


def test_the_answer_and_a_right_rewrite_pass():
    assert check(DROPOUT_BACKWARD, dropout_backward, seed=0, verbose=False).correct
    assert not failed(variant())[0]


def test_every_row_drawing_row_zeros_numbers_fails_every_case_of_more_than_one_row():
    bad, result = failed(variant(offsets=1))
    assert bad == labels(c for c in CASES if c.shape[0] > 1), result.summary()


def test_numbers_drawn_for_addresses_fail_exactly_the_strided_cases():
    bad, result = failed(variant(offsets=2))
    assert bad == labels(c for c in CASES if c.strided), result.summary()


@pytest.mark.parametrize("mistake", [dict(seed_shift=1), dict(scale=False), dict(keep_above=False)],
                         ids=["another seed", "no 1/(1-p)", "keeps where u < p"])
def test_a_wrong_seed_scale_or_comparison_fails_every_case_of_a_hundred_elements(mistake):
    bad, result = failed(variant(**mistake))
    assert labels(c for c in CASES if math.prod(c.shape) >= 100) <= bad, result.summary()


def test_a_copy_of_a_strided_dy_or_a_mask_from_pytorch_is_reported():
    bad, result = failed(variant(copy=True))
    assert bad == labels(c for c in CASES if c.strided), result.summary()
    assert all("copied data" in c.message for c in result.cases if not c.passed)
    bad, result = failed(variant(torch_mask=True))
    assert bad == labels(CASES) and all("computed with PyTorch" in c.message for c in result.cases)


# --- the notebook ---------------------------------------------------------------------------------

def test_the_notebook_stub_reports_not_written_yet():
    assert_not_written(DROPOUT_BACKWARD, load_stub(NOTEBOOK).dropout_backward)


def test_the_notebook_does_not_contain_the_solution():
    code = "\n".join(notebook_code(NOTEBOOK))
    lines = {line.strip() for line in code.splitlines()}
    body = (ROOT / "solutions" / "dropout_backward.py").read_text().split("# --- notebook cell: dropout_backward ---")[1]
    arithmetic = [line.strip() for line in body.splitlines()
                  if any(op in line for op in ("tl.rand", "tl.where", "tl.store", "tl.load", "dropout_backward_kernel["))]
    assert len(arithmetic) >= 5 and not [line for line in arithmetic if line in lines]
    assert "solutions.dropout_backward" not in code
    assert "row * n_cols + cols" not in code  # the step the exercise asks for


def test_the_notebook_asks_every_lesson_ten_question():
    code = "\n".join(notebook_code(NOTEBOOK))
    ours = [q for q in quiz.load_quizzes()["questions"] if q.startswith("q10")]
    assert len(ours) >= 3 and all(f'ask("{q}")' in code for q in ours)
