"""ps4_linear_silu: the reference, its inputs, and the mistakes of a fused linear + SiLU kernel
failing exactly the cases that expose them; GPU-only checks at the end."""
import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from autograder import check
from autograder.assignments.ps4_linear_silu import EXERCISE, LARGE_X, LinearCase
from autograder.correctness import judge_output
from autograder.guards import watch
from solutions.linear_silu import TILINGS, linear_silu, linear_silu_kernel

from conftest import DEVICE

DEV = DEVICE.device
SEED = 0  # fixed inputs: which cases a wrong kernel fails must not depend on the draw


def failed(fn, which="visible"):
    result = check(EXERCISE, fn, cases=which, measure_throughput=False, verbose=False, seed=SEED)
    return {c.label: c.message for c in result.cases if not c.passed}


def visible(predicate):
    return {c.label for c in EXERCISE.cases("visible", DEV) if predicate(c)}


def inputs(case):
    return EXERCISE.make_inputs(case, torch.Generator().manual_seed(SEED), DEV)


# --- the reference ---------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_reference_passes_its_own_check(which):
    result = check(EXERCISE, linear_silu, cases=which, measure_throughput=False, verbose=False, seed=SEED)
    assert result.correct, result.summary()


def test_reference_reads_weight_transposed_without_a_copy():
    x, weight, bias = inputs(LinearCase((40, 24, 70), weight_t=True, strided=True))
    linear_silu(x, weight, bias)  # on a GPU the first call autotunes, which zeroes buffers to time
    with watch(frozenset({"empty"})) as record:  # any copy (contiguous, clone, .t() then copy_) is an op
        out = linear_silu(x, weight, bias)
    assert not record.torch_ops, record.torch_ops
    torch.testing.assert_close(out, F.silu(F.linear(x, weight, bias)), atol=1e-4, rtol=1e-5)


def test_interpreter_gets_one_small_tiling():
    if DEVICE.has_gpu:
        assert len(TILINGS) > 1
    else:
        assert len(TILINGS) == 1 and TILINGS[0].kwargs["TILE_M"] <= 32


# --- the declaration's inputs are what their labels say ---------------------------------------


def test_inputs_are_laid_out_as_labelled():
    for case in EXERCISE.cases("visible", DEV) + EXERCISE.cases("hidden", DEV):
        x, weight, bias = inputs(case)
        m, n, k = case.shape
        assert x.shape == (m, k) and weight.shape == (n, k) and bias.shape == (n,), case.label
        assert x.dtype == weight.dtype == bias.dtype == case.dtype
        if case.weight_t:
            assert weight.stride(0) == 1 and weight.t().shape == (k, n), case.label
        elif n > 1 and k > 1:
            assert weight.stride(1) == 1 and (weight.stride(0) > k) == case.strided, case.label
        if m > 1 and k > 1:
            assert (x.stride(0) > k) == case.strided, case.label


def test_large_cases_put_most_pre_activations_past_the_float32_exp_range():
    for case in visible(lambda c: c.values == "large"):
        case = next(c for c in EXERCISE.cases("visible", DEV) if c.label == case)
        x, weight, bias = (t.double() for t in inputs(case))
        z = F.linear(x, weight, bias)
        assert (z < -88.7).float().mean() > 0.3 and (z > 88.7).float().mean() > 0.3, case.label
        assert z.abs().max() < 65504 / 4, case.label  # the outputs fit float16 with room
    assert x.abs().max() > LARGE_X  # x was scaled


def test_the_unfused_order_of_roundings_passes_the_tolerance():
    """PyTorch's F.silu(F.linear(...)) rounds z to the case's dtype before the activation: with z
    itself exact, that order passes, so the tolerance does not fail the baseline's arithmetic.
    (cuBLAS's float16 sums themselves may not: with PyTorch's default reduced-precision
    reductions, 1427 outputs of 4097×511×1025 float16 were off by up to 0.045 on an H200.)"""
    for case in EXERCISE.cases("visible", DEV) + EXERCISE.cases("hidden", DEV):
        if case.dtype == torch.float32:
            continue
        x, weight, bias = inputs(case)
        z = F.linear(x.double(), weight.double(), bias.double()).to(case.dtype)
        assert judge_output(EXERCISE, case, (x, weight, bias), (F.silu(z),)) is None, case.label


# --- wrong kernels fail where they should -----------------------------------------------------


@triton.jit
def _variant_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk,
                    stride_ym, stride_yn, BLOCK: tl.constexpr, BIAS: tl.constexpr, MASK_K: tl.constexpr,
                    FP16_ACC: tl.constexpr, ROUND_FIRST: tl.constexpr, SIGMOID: tl.constexpr):
    rows = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.program_id(axis=1) * BLOCK + tl.arange(0, BLOCK)
    ks = tl.arange(0, BLOCK)
    row_ok = rows < M
    col_ok = cols < N
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float16 if FP16_ACC else tl.float32)
    for start in range(0, K, BLOCK):
        if MASK_K:
            k_ok = start + ks < K
        else:
            k_ok = ks >= 0  # every lane, past K too
        a = tl.load(x_ptr + rows[:, None] * stride_xm + (start + ks)[None, :] * stride_xk,
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_ptr + (start + ks)[:, None] * stride_wk + cols[None, :] * stride_wn,
                    mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc += tl.dot(a, b, input_precision="ieee").to(acc.dtype)
    z = acc.to(tl.float32)
    if BIAS == "n":
        z += tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    elif BIAS == "m":  # bias[m]: the row's entry, masked by M, not N
        z += tl.load(b_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)[:, None]
    if ROUND_FIRST:  # the pre-activation rounded to the output dtype, as an unfused kernel stores it
        z = z.to(y_ptr.dtype.element_ty).to(tl.float32)
    if SIGMOID == "stable":
        e = tl.exp(-tl.abs(z))
        y = z * tl.where(z >= 0, 1.0, e) / (1.0 + e)
    else:  # exp(z) / (1 + exp(z)): inf / inf = NaN past z = 88.7
        ez = tl.exp(z)
        y = z * ez / (1.0 + ez)
    if BIAS == "after":  # silu(x @ weight.T) + bias
        y += tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn, y.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])


def _variant(bias="n", mask_k=True, fp16_acc=False, round_first=False, sigmoid="stable", untransposed=False):
    def wrong_linear_silu(x, weight, bias_):
        M, K = x.shape
        N = weight.shape[0]
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        stride_wn, stride_wk = weight.stride()
        if untransposed:  # reads weight[k, n], as if it were the K×N operand already: x @ weight
            stride_wn, stride_wk = stride_wk, stride_wn
        _variant_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](
            x, weight, bias_, y, M, N, K, *x.stride(), stride_wn, stride_wk, *y.stride(), BLOCK=32, BIAS=bias,
            MASK_K=mask_k, FP16_ACC=fp16_acc, ROUND_FIRST=round_first, SIGMOID=sigmoid)
        return y
    return wrong_linear_silu


def test_the_variant_kernel_itself_is_right():
    assert failed(_variant()) == {}


def test_bias_along_the_rows_fails_all_but_a_single_output():
    wrong = failed(_variant(bias="m"))
    assert set(wrong) == visible(lambda c: c.shape != (1, 1, 1))
    # where M > N, bias[m] reads past the bias: the interpreter stops it
    assert "out of bounds" in wrong["100×1×70 float32"] or DEVICE.has_gpu


def test_bias_after_the_activation_fails_every_case():
    assert set(failed(_variant(bias="after"))) == visible(lambda c: True)


def test_no_bias_fails_every_case():
    assert set(failed(_variant(bias="none"))) == visible(lambda c: True)


def test_reading_weight_untransposed_fails_all_but_a_single_output():
    wrong = failed(_variant(untransposed=True))
    assert set(wrong) == visible(lambda c: c.shape != (1, 1, 1))


def test_no_k_mask_fails_exactly_the_ragged_k_cases():
    wrong = failed(_variant(mask_k=False))
    assert set(wrong) == visible(lambda c: c.shape[2] % 32 != 0)
    assert all("out of bounds" in m or "elements differ" in m for m in wrong.values())


def test_a_float16_accumulator_fails_the_long_float16_sum():
    wrong = failed(_variant(fp16_acc=True))
    assert "64×64×512 float16" in wrong and "17×33×130 float16" not in wrong
    assert "elements differ" in wrong["64×64×512 float16"]
    assert visible(lambda c: c.dtype == torch.float32 and c.shape[2] > 1) <= set(wrong)  # 11 bits of 24 kept


def test_an_overflowing_sigmoid_fails_the_large_cases_with_nan():
    wrong = failed(_variant(sigmoid="exp_ratio"))
    # and the longest sum: at K = 512, z is N(0, 22.6²) and a few of 4096 outputs pass 88.7
    assert set(wrong) == visible(lambda c: c.values == "large" or c.shape[2] >= 512)
    assert all("NaN" in m for m in wrong.values())


def test_rounding_before_the_activation_is_within_tolerance():
    """The unfused order of roundings, what F.silu(F.linear(...)) does in float16: the tolerance
    allows it (the two roundings use at most 0.36 of it), so fusing is graded by speed alone."""
    assert failed(_variant(round_first=True)) == {}
    assert failed(_variant(round_first=True), "hidden") == {}


@pytest.mark.parametrize("cheat", [lambda x, w, b: F.silu(F.linear(x, w, b)),
                                   lambda x, w, b: _variant()(x, w, b) * 0 + F.linear(x, w, b)],
                         ids=["F.linear", "kernel then F.linear"])
def test_pytorch_linear_is_rejected(cheat):
    result = check(EXERCISE, cheat, measure_throughput=False, verbose=False, seed=SEED)
    assert all("computed with PyTorch" in c.message for c in result.cases), result.summary()


# --- GPU only ----------------------------------------------------------------------------------


@pytest.mark.gpu
def test_reference_clears_the_throughput_threshold():
    result = check(EXERCISE, linear_silu, verbose=False)
    assert result.correct, result.summary()
    assert result.throughput.passed, result.throughput.message
    print(result.throughput.message, "tiles:", linear_silu_kernel.best_config)


@pytest.mark.gpu
def test_reference_passes_the_hidden_gpu_cases():
    result = check(EXERCISE, linear_silu, cases="hidden", measure_throughput=False, verbose=False)
    assert result.correct, result.summary()
