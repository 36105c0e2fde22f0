"""ps4_linear_silu: the reference, its inputs, and the mistakes of a fused linear + SiLU kernel
failing exactly the cases that expose them; GPU-only checks at the end."""
import pytest
import torch
import torch.nn.functional as F
import triton

from autograder import check
from autograder.assignments.ps4_linear_silu import EXERCISE, LARGE_X, LinearCase
from autograder.correctness import judge_output
from autograder.guards import watch
from solutions.linear_silu import SMALL_TILES, TILINGS, TUNED_FROM, linear_silu, linear_silu_kernel, tilings_for

from conftest import DEVICE
import kit

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
        assert TILINGS == [SMALL_TILES] and SMALL_TILES.kwargs["TILE_M"] <= 32


def test_only_large_products_are_tuned_and_small_ones_compile_small_tiles():
    configs = [triton.Config({"TILE_M": m, "TILE_N": n, "TILE_K": 64}) for m, n in [(128, 256), (128, 128), (64, 64)]]
    side = round(TUNED_FROM ** (1 / 3))
    for precision in ("tf32", "ieee"):
        small = dict(M=side - 1, N=side, K=side, PRECISION=precision)
        assert tilings_for(configs, small) == [SMALL_TILES], precision
    large = dict(M=side, N=side, K=side)
    assert tilings_for(configs, large, PRECISION="tf32") == configs
    assert tilings_for(configs, large, PRECISION="ieee") == configs[1:]  # IEEE float32: tiles of 128×128 and less


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


BIAS_ADD = "    z += tl.load(b_ptr + offs_n * stride_b, mask=in_n, other=0.0).to(tl.float32)[None, :]\n"
SILU = "    y = z * tl.where(z >= 0, 1.0, e) / (1.0 + e)\n"
WRONG = {  # the reference with one edit each
    "bias_along_m": [("tl.load(b_ptr + offs_n * stride_b, mask=in_n, other=0.0).to(tl.float32)[None, :]",
                      "tl.load(b_ptr + offs_m * stride_b, mask=in_m, other=0.0).to(tl.float32)[:, None]")],
    "bias_after_silu": [(BIAS_ADD, ""), (SILU, SILU + BIAS_ADD.replace("z +=", "y +="))],
    "no_bias": [(BIAS_ADD, "")],
    "weight_untransposed": [("offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn",  # reads weight as K×N
                             "offs_k[:, None] * stride_wn + offs_n[None, :] * stride_wk"),
                            ("wt_tile += TILE_K * stride_wk", "wt_tile += TILE_K * stride_wn")],
    "no_k_mask": [("in_k = offs_k < K - k0", "in_k = offs_k >= 0")],
    "fp16_accumulator": [("z = tl.dot(x_part, wt_part, z, input_precision=PRECISION)",
                          "z = (z.to(tl.float16) + tl.dot(x_part, wt_part, input_precision=PRECISION)"
                          ".to(tl.float16)).to(tl.float32)")],
    "exp_ratio_sigmoid": [("    e = tl.exp(-tl.abs(z))\n" + SILU,  # exp(z) / (1 + exp(z)): inf / inf past 88.7
                           "    e = tl.exp(z)\n    y = z * e / (1.0 + e)\n")],
    "tf32_for_float32": [('precision = "ieee" if x.dtype == torch.float32 else "tf32"', 'precision = "tf32"')],
    "rounded_before_silu": [("    e = tl.exp(-tl.abs(z))\n",  # as an unfused kernel stores the pre-activation
                             "    z = z.to(y_ptr.dtype.element_ty).to(tl.float32)\n    e = tl.exp(-tl.abs(z))\n")],
}


def wrong_linear_silu(mistake: str):
    return kit.mutant("linear_silu", *WRONG[mistake]).linear_silu


def test_bias_along_the_rows_fails_all_but_a_single_output():
    wrong = failed(wrong_linear_silu("bias_along_m"))
    assert set(wrong) == visible(lambda c: c.shape != (1, 1, 1))
    # where M > N, bias[m] reads past the bias: the interpreter stops it
    assert "out of bounds" in wrong["100×1×70 float32"] or DEVICE.has_gpu


def test_bias_after_the_activation_fails_every_case():
    assert set(failed(wrong_linear_silu("bias_after_silu"))) == visible(lambda c: True)


def test_no_bias_fails_every_case():
    assert set(failed(wrong_linear_silu("no_bias"))) == visible(lambda c: True)


def test_reading_weight_untransposed_fails_all_but_a_single_output():
    wrong = failed(wrong_linear_silu("weight_untransposed"))
    assert set(wrong) == visible(lambda c: c.shape != (1, 1, 1))


def test_no_k_mask_fails_exactly_the_ragged_k_cases():
    wrong = failed(wrong_linear_silu("no_k_mask"))
    assert set(wrong) == visible(lambda c: c.shape[2] % 32 != 0)
    assert all("out of bounds" in m or "elements differ" in m for m in wrong.values())


def test_a_float16_accumulator_fails_the_long_float16_sum():
    wrong = failed(wrong_linear_silu("fp16_accumulator"))
    assert "64×64×512 float16" in wrong and "17×33×130 float16" not in wrong
    assert "elements differ" in wrong["64×64×512 float16"]
    assert visible(lambda c: c.dtype == torch.float32 and c.shape[2] > 1) <= set(wrong)  # 11 bits of 24 kept


def test_tf32_for_float32_fails_the_float32_cases_on_the_cpu_as_on_a_gpu():
    # TF32 keeps 10 bits of float32's 23: products off by ~5e-4 relative, a sum of K of them
    # far past float32's atol of 1e-4 (the interpreter rounds as tensor cores do)
    wrong = failed(wrong_linear_silu("tf32_for_float32"))
    assert set(wrong) == visible(lambda c: c.dtype == torch.float32 and c.shape[2] > 1)


def test_an_overflowing_sigmoid_fails_the_large_cases_with_nan():
    wrong = failed(wrong_linear_silu("exp_ratio_sigmoid"))
    # and the longest sum: at K = 512, z is N(0, 22.6²) and a few of 4096 outputs pass 88.7
    assert set(wrong) == visible(lambda c: c.values == "large" or c.shape[2] >= 512)
    assert all("NaN" in m for m in wrong.values())


def test_rounding_before_the_activation_is_within_tolerance():
    """The unfused order of roundings, what F.silu(F.linear(...)) does in float16: the tolerance
    allows it (the two roundings use at most 0.36 of it), so fusing is graded by speed alone."""
    assert failed(wrong_linear_silu("rounded_before_silu")) == {}
    assert failed(wrong_linear_silu("rounded_before_silu"), "hidden") == {}


@pytest.mark.parametrize("cheat", [lambda x, w, b: F.silu(F.linear(x, w, b)),
                                   lambda x, w, b: linear_silu(x, w, b) * 0 + F.linear(x, w, b)],
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
