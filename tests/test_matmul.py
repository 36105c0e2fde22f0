"""The reference matmul, the ps4_matmul checks against the classic matmul mistakes, lesson 7's
batched exercise, its quiz and the roofline figure; GPU-only rules at the end."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

from autograder import check, language, plots, quiz  # noqa: E402
from autograder.lesson_kernels.matmul import EXERCISE as MATMUL, MATMUL_TOLERANCES  # noqa: E402
from autograder.lesson_exercises.l07_bmm import EXERCISE as BMM  # noqa: E402
from solutions.bmm import bmm, bmm_kernel  # noqa: E402
from autograder.kernels.matmul import CONFIGS, launch_order, matmul, matmul_kernel  # noqa: E402

from conftest import DEVICE, ROOT  # noqa: E402
import kit  # noqa: E402

DEV = DEVICE.device
SEED = 0  # fixed inputs: which cases a wrong kernel fails must not depend on the draw
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE.has_gpu else [])  # no bf16 in the interpreter


# --- the reference ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1, 1), (33, 65, 17), (64, 64, 64), (130, 3, 257)],
                         ids=lambda s: "x".join(map(str, s)))
def test_reference_matches_float64(shape, dtype):
    m, n, k = shape
    torch.manual_seed(0)
    a, b = torch.randn(m, k, device=DEV).to(dtype), torch.randn(k, n, device=DEV).to(dtype)
    out = matmul(a, b)
    assert out.shape == (m, n) and out.dtype == dtype
    torch.testing.assert_close(out.double(), a.double() @ b.double(), atol=MATMUL_TOLERANCES[dtype][0],
                               rtol=MATMUL_TOLERANCES[dtype][1])


def test_reference_reads_strided_and_transposed_operands():
    torch.manual_seed(0)
    wide = torch.randn(40, 100, device=DEV)
    wide[:, 70:] = float("nan")  # a kernel reading past column 70 of a row turns NaN
    a = wide[:, :70]             # row stride 100
    b = torch.randn(50, 70, device=DEV).t()  # column-major: stride (1, 70)
    torch.testing.assert_close(matmul(a, b), a @ b, atol=1e-4, rtol=1e-5)


def test_a_dtype_tl_dot_does_not_multiply_is_refused_with_a_sentence():
    a = torch.ones(4, 4, dtype=torch.float64, device=DEVICE.device)
    with pytest.raises(AssertionError, match=r"matmul takes float16/bfloat16/float32, got torch.float64"):
        matmul(a, a)


@pytest.mark.parametrize("group_m", [1, 2, 3, 8])
def test_launch_order_visits_every_tile_once(group_m):
    order = launch_order(10 * 32 - 5, 7 * 32, 32, 32, group_m)  # 10 × 7 tiles, a short last band
    assert sorted(order.flatten().tolist()) == list(range(70))
    if group_m == 1:
        assert order.flatten().tolist() == list(range(70))  # plain row-major
    else:
        assert order[:group_m, 0].tolist() == list(range(group_m))  # down the first column of a band


def test_program_order_changes_nothing_in_the_result():
    torch.manual_seed(0)
    a, b = torch.randn(300, 70, device=DEV), torch.randn(70, 90, device=DEV)
    assert torch.equal(matmul(a, b, group_m=1), matmul(a, b, group_m=8))


def test_interpreter_gets_one_small_config():
    if DEVICE.has_gpu:
        assert len(CONFIGS) > 1 and {c.num_warps for c in CONFIGS} >= {4, 8}
    else:
        assert len(CONFIGS) == 1 and CONFIGS[0].kwargs["BLOCK_M"] <= 32


def test_reference_passes_its_own_check():
    result = check(MATMUL, matmul, measure_throughput=False, verbose=False, seed=SEED)
    assert result.correct, result.summary()


# --- wrong kernels fail where they should -----------------------------------------------------


WRONG = {  # lesson 7's kernel with one edit each
    "no_k_mask": [("k_ok = ks < K - step * BLOCK_K", "k_ok = ks >= 0  # every lane, past K too")],
    "fp16_accumulator": [("acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)",
                          "acc = (acc.to(tl.float16) + tl.dot(a, b, input_precision=INPUT_PRECISION)"
                          ".to(tl.float16)).to(tl.float32)")],
    "b_read_transposed": [("b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn",
                           "b_ptrs = b_ptr + ks[:, None] * stride_bn + cols[None, :] * stride_bk"),
                          ("b_ptrs += BLOCK_K * stride_bk", "b_ptrs += BLOCK_K * stride_bn")],
}


def wrong_matmul(mistake: str):
    return kit.mutant(str(ROOT / "autograder" / "kernels" / "matmul.py"), *WRONG[mistake]).matmul


def failed(fn, exercise=MATMUL):
    result = check(exercise, fn, measure_throughput=False, verbose=False, seed=SEED)
    return {c.label: c.message for c in result.cases if not c.passed}, result


def visible(predicate, exercise=MATMUL):
    return {c.label for c in exercise.cases("visible", DEV) if predicate(c)}


def test_no_k_mask_fails_exactly_the_ragged_k_cases():
    wrong, _ = failed(wrong_matmul("no_k_mask"))
    # on the CPU the padding lies past the end of a or b (the bounds check stops it); on a GPU
    # it reads the next row's values or whatever follows the tensor
    assert set(wrong) == visible(lambda c: c.shape[2] % 32 != 0)
    assert all("out of bounds" in m or "elements differ" in m for m in wrong.values())


def test_a_float16_accumulator_fails_the_long_float16_sum():
    wrong, _ = failed(wrong_matmul("fp16_accumulator"))
    assert "64×64×512 float16" in wrong and "17×33×130 float16" not in wrong
    assert "elements differ" in wrong["64×64×512 float16"]
    assert visible(lambda c: c.dtype == torch.float32 and c.shape[2] > 1) <= set(wrong)  # 11 bits of 24 kept


def test_reading_b_transposed_fails_everything_but_a_single_product():
    wrong, _ = failed(wrong_matmul("b_read_transposed"))
    assert set(wrong) == visible(lambda c: c.shape != (1, 1, 1))


@pytest.mark.parametrize("cheat", [lambda a, b: torch.matmul(a, b), lambda a, b: matmul(a, b) * 0 + a @ b,
                                   lambda a, b: torch.einsum("mk,kn->mn", a, b)],
                         ids=["torch.matmul", "kernel then a @ b", "einsum"])
def test_pytorch_matmuls_are_rejected(cheat):
    _, result = failed(cheat)
    assert all("computed with PyTorch" in c.message for c in result.cases), result.summary()


def test_an_n_by_m_result_fails_on_its_shape():
    wrong, _ = failed(lambda a, b: matmul(b.t(), a.t()))  # (a @ b).T, N×M
    for case in MATMUL.cases("visible", DEV):
        m, n, _ = case.shape
        if m != n:
            assert f"output shape is {(n, m)}, expected {(m, n)}" in wrong[case.label]


# --- lesson 7's exercise: a batched matmul ----------------------------------------------------


def test_bmm_reference_passes():
    result = check(BMM, bmm, verbose=False, seed=SEED)
    assert result.correct, result.summary()


def test_bmm_ignoring_the_batch_stride_of_b_fails_the_batched_cases():
    def bmm_one_b(a, b):
        batches, M, K = a.shape
        N = b.shape[2]
        c = torch.empty((batches, M, N), dtype=a.dtype, device=a.device)
        strides = (0, *b.stride()[1:])  # every batch multiplies by b[0]
        bmm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32), batches)](
            a, b, c, M, N, K, *a.stride(), *strides, *c.stride(), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
        return c

    wrong, _ = failed(bmm_one_b, BMM)
    assert set(wrong) == visible(lambda c: c.shape[0] > 1, BMM)


# --- the quiz ------------------------------------------------------------------------------


def test_quiz_questions_are_in_the_lesson_and_their_answers_hold():
    questions = quiz.load_quizzes()["questions"]
    assert {"q71_tile_intensity", "q72_k_mask", "q73_group_order"} <= set(questions)
    intensity = questions["q71_tile_intensity"]
    flops, loaded = 2 * 128 * 128 * 64, (128 * 64 + 64 * 128) * 2
    for lang in language.LANGUAGES:
        assert float(intensity[lang]["options"][intensity["correct"]]) == flops / loaded == 64
    k_mask = questions["q72_k_mask"]["en"]
    assert k_mask["options"][questions["q72_k_mask"]["correct"]].startswith("Both")
    # q73 quotes the tiles the first 132 programs need at 8192² with 128×256 tiles
    needed = {}
    for group_m in (1, 8):
        wave = (launch_order(8192, 8192, 128, 256, group_m) < 132).nonzero()
        needed[group_m] = (wave[:, 0].unique().numel(), wave[:, 1].unique().numel())
    assert needed == {8: (8, 17), 1: (5, 32)}
    assert "need 8 tiles of A and 17 of B" in questions["q73_group_order"]["en"]["right"]
    assert "need 5 of A and all 32 of B" in questions["q73_group_order"]["en"]["right"]


# --- the roofline figure --------------------------------------------------------------------


def test_roofline_draws_the_roof_the_ridge_and_the_points():
    fig = plots.roofline(800.0, 4000.0, {"tile 128×128": (64.0, None), "matmul 4096³": (1365.0, 650.0)})
    (ax,) = fig.axes
    roof = ax.get_lines()[0]
    x, y = roof.get_xdata(), roof.get_ydata()
    assert y[0] == pytest.approx(x[0] * 4.0) and y[-1] == 800.0  # GB/s · FLOPs/byte = 1e9 FLOP/s
    labels = [line.get_label() for line in ax.get_lines()]
    assert "ridge point: 200 FLOPs/byte" in labels
    (point,) = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert (point.get_xdata()[0], point.get_ydata()[0]) == (1365.0, 650.0)
    assert any(label.startswith("tile 128×128: 64.0") for label in labels)
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert not matplotlib.pyplot.get_fignums()  # closed: a notebook shows it once


# --- GPU only ----------------------------------------------------------------------------------


@pytest.mark.gpu
def test_autotune_picks_one_of_the_configs():
    a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.float16) for _ in range(2))
    matmul(a, b)
    assert matmul_kernel.best_config in CONFIGS
    print("chosen at 4096³ float16:", matmul_kernel.best_config)


@pytest.mark.gpu
def test_reference_clears_the_throughput_threshold():
    result = check(MATMUL, matmul, verbose=False)
    assert result.correct, result.summary()
    assert result.throughput.passed, result.throughput.message
    assert 0.5 < result.throughput.peak_fraction < 1.25


@pytest.mark.gpu
def test_tf32_is_faster_and_far_less_exact_than_ieee():
    from autograder import timing

    torch.manual_seed(0)
    a, b = (torch.randn(4096, 4096, device="cuda") for _ in range(2))
    exact = a.double() @ b.double()
    # root-mean-square error over the root-mean-square output: float32 rounding of a
    # 4096-term sum is ~2e-6 of it; TF32 keeps 10 of float32's 23 fraction bits, ~4e-4
    errors = {tf32: ((matmul(a, b, allow_tf32=tf32).double() - exact).square().mean().sqrt()
                     / exact.square().mean().sqrt()).item() for tf32 in (False, True)}
    assert errors[False] < 1e-5 and errors[True] > 1e-4, errors
    timed = timing.compare(lambda x, y: matmul(x, y, allow_tf32=True), matmul, [(a, b)])
    assert timed.ratio > 2, timed
