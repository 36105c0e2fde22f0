"""The online softmaxes against torch in float64 (lesson 5's one program per row, Problem set
3's rows split over programs), and lesson 5's combine exercise: its solution passes,
plausible wrong versions fail."""
import warnings

import pytest
import torch
import triton
import triton.language as tl

from autograder import check
from autograder.lesson_exercises.l05_combine import EXERCISE
import solutions.online_softmax as online
from autograder.kernels.online_softmax import softmax_online_row
from solutions.combine import combine
from solutions.online_softmax import softmax_online

import kit
from conftest import DEVICE

DEV = DEVICE.device

# (dtype, atol, rtol) against torch.softmax in float64. float32: the row sum adds one tile
# total per tile, ~10 roundings of 6e-8 at these sizes. float16: rounding the output alone
# costs up to 2**-11 = 4.9e-4 relative, and outputs under 6.1e-5 are subnormal, spaced
# 2**-24 = 6e-8 apart, so atol is that spacing. bfloat16 is GPU-only (no interpreter support).
TOLERANCES = [
    (torch.float32, 1e-8, 1e-5),
    (torch.float16, 2**-24, 1e-3),
]
# At 2**20 columns a row sum adds 256 tile totals one after another: up to 256 roundings of
# 6e-8 = 1.5e-5 in the worst case, and tl.exp on a GPU is ex2.approx. bfloat16 keeps 8
# significant bits: output rounding alone is 2**-9 = 2e-3 relative.
GPU_TOLERANCES = [
    (torch.float32, 1e-10, 3e-5),
    (torch.float16, 2**-24, 1e-3),
    (torch.bfloat16, 1e-10, 1.6e-2),
]


def assert_matches(out: torch.Tensor, x: torch.Tensor, atol: float, rtol: float) -> None:
    assert out.dtype == x.dtype and out.shape == x.shape
    torch.testing.assert_close(out.double(), torch.softmax(x.double(), dim=-1), atol=atol, rtol=rtol)


def awkward_rows(dtype, n_cols=1000) -> torch.Tensor:
    """Six rows that a tiled kernel can get wrong, for tiles of 64 (16 tiles, the last ragged)."""
    torch.manual_seed(0)
    x = torch.randn(6, n_cols)
    x[0, -1] = 30.0            # the max in the last, ragged tile: s must be rescaled at the end
    x[1] = torch.linspace(-5, 5, n_cols)  # a new max in every tile: a rescale at each step
    x[2, :300] = float("-inf")  # whole tiles of -inf first: exp(-inf - (-inf)) must not reach s
    x[2, 500::7] = float("-inf")
    x[3] *= 1e4                # spread over +-1e4: a few columns take nearly everything
    x[4] += 1e4                # all near 1e4: exp without the max subtracted is inf
    x[5] -= 1e4                # all near -1e4: exp without it is 0, and 0 / 0 is NaN
    return x.to(dtype=dtype, device=DEV)


@pytest.mark.parametrize("dtype, atol, rtol", TOLERANCES)
@pytest.mark.parametrize("shape, block_size", [((1, 1), None), ((1, 1), 16), ((3, 1000), 64),
                                               ((3, 1000), None), ((5, 4096), 1024), ((2, 4097), 1024)],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else f"block{v}")
def test_random_rows(shape, block_size, dtype, atol, rtol):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype, device=DEV)
    assert_matches(softmax_online_row(x, block_size=block_size), x, atol, rtol)


@pytest.mark.parametrize("dtype, atol, rtol", TOLERANCES)
def test_awkward_rows_over_many_tiles(dtype, atol, rtol):
    x = awkward_rows(dtype)
    out = softmax_online_row(x, block_size=64)
    assert_matches(out, x, atol, rtol)
    assert torch.all(out[2, :300] == 0) and torch.all(out[2, 500::7] == 0)


def test_a_row_of_only_minus_infinity_is_nan_like_torch():
    x = torch.full((2, 100), float("-inf"), device=DEV)
    x[1, 50] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the interpreter's NumPy: -inf - -inf
        out = softmax_online_row(x, block_size=16)
    torch.testing.assert_close(out, torch.softmax(x, dim=-1), equal_nan=True)
    assert out[0].isnan().all()


@pytest.mark.parametrize("dtype, atol, rtol", TOLERANCES)
def test_row_strided_slice_reads_only_its_columns(dtype, atol, rtol):
    x = kit.rows_with_a_trap_past_them(dtype, DEV)
    assert_matches(softmax_online_row(x, block_size=64), x, atol, rtol)


def test_column_strided_input_is_accepted():
    torch.manual_seed(0)
    x = torch.randn(4, 600, device=DEV)[:, ::2]
    assert_matches(softmax_online_row(x, block_size=64), x, *TOLERANCES[0][1:])


@pytest.mark.parametrize("dtype, atol, rtol", TOLERANCES)
def test_split_rows_merge_every_chunk(dtype, atol, rtol, monkeypatch):
    grids = []
    real = online.normalize_chunk_kernel
    monkeypatch.setattr(online, "normalize_chunk_kernel", type("Spy", (), {
        "__getitem__": lambda self, grid: grids.append(grid) or real[grid]})())
    x = awkward_rows(dtype, n_cols=20_000)
    x[0, :16_384] = float("-inf")  # row 0: its first chunk empty, its max in the last one
    out = softmax_online(x)
    assert len(grids) == 1 and grids[0][1] > 1, f"rows were not split: grid {grids}"
    assert_matches(out, x, atol, rtol)
    assert torch.all(out[0, :16_384] == 0)


# A plausible wrong online softmax: it keeps the running max but never rescales s.
@triton.jit
def _no_rescale_kernel(out_ptr, x_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    lanes = tl.arange(0, BLOCK_SIZE)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        x = tl.load(x_ptr + row * n_cols + start + lanes, mask=start + lanes < n_cols, other=float("-inf"))
        m = tl.maximum(m, tl.max(x, axis=0))
        s += tl.sum(tl.exp(x - m), axis=0)  # old terms stay relative to the old max
    for start in range(0, n_cols, BLOCK_SIZE):
        mask = start + lanes < n_cols
        x = tl.load(x_ptr + row * n_cols + start + lanes, mask=mask)
        tl.store(out_ptr + row * n_cols + start + lanes, tl.exp(x - m) / s, mask=mask)


def test_the_awkward_rows_catch_a_missing_rescale():
    x = awkward_rows(torch.float32)[:2].contiguous()  # rows 0-1 have no -inf
    out = torch.empty_like(x)
    _no_rescale_kernel[(2,)](out, x, x.shape[1], BLOCK_SIZE=64)
    with pytest.raises(AssertionError):
        assert_matches(out, x, *TOLERANCES[0][1:])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, atol, rtol", GPU_TOLERANCES)
def test_rows_of_a_million_columns(dtype, atol, rtol):
    torch.manual_seed(0)
    x = torch.randn(64, 2**20, dtype=dtype, device="cuda")
    x[0, -1] = 20.0  # the max in the very last tile
    assert_matches(softmax_online(x), x, atol, rtol)
    assert_matches(softmax_online_row(x), x, atol, rtol)


# --- lesson5_combine ------------------------------------------------------------------------

def test_combine_solution_passes():
    result = check("lesson5_combine", combine, measure_throughput=False, verbose=False)
    assert result.correct, result.summary()


def _launcher(kernel):
    def run(m1, s1, m2, s2):
        out = torch.empty_like(s1)
        kernel[(triton.cdiv(out.numel(), 1024),)](m1, s1, m2, s2, out, out.numel(), BLOCK_SIZE=1024)
        return out
    return run


@triton.jit
def _unguarded_kernel(m1_ptr, s1_ptr, m2_ptr, s2_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    m1, m2 = tl.load(m1_ptr + offs, mask=mask).to(tl.float32), tl.load(m2_ptr + offs, mask=mask).to(tl.float32)
    s1, s2 = tl.load(s1_ptr + offs, mask=mask).to(tl.float32), tl.load(s2_ptr + offs, mask=mask).to(tl.float32)
    m = tl.maximum(m1, m2)  # two empty states: exp(-inf - (-inf)) = NaN
    tl.store(out_ptr + offs, (s1 * tl.exp(m1 - m) + s2 * tl.exp(m2 - m)).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _unscaled_kernel(m1_ptr, s1_ptr, m2_ptr, s2_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    s1, s2 = tl.load(s1_ptr + offs, mask=mask), tl.load(s2_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, s1 + s2, mask=mask)  # sums relative to different maxima


@triton.jit
def _half_precision_kernel(m1_ptr, s1_ptr, m2_ptr, s2_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    m1, m2 = tl.load(m1_ptr + offs, mask=mask), tl.load(m2_ptr + offs, mask=mask)
    s1, s2 = tl.load(s1_ptr + offs, mask=mask), tl.load(s2_ptr + offs, mask=mask)
    m = tl.maximum(m1, m2)
    shift = tl.where(m == float("-inf"), 0.0, m).to(m.dtype)  # right, but in the inputs' dtype
    tl.store(out_ptr + offs, s1 * tl.exp(m1 - shift) + s2 * tl.exp(m2 - shift), mask=mask)


@triton.jit
def _unmasked_kernel(m1_ptr, s1_ptr, m2_ptr, s2_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    m1, m2 = tl.load(m1_ptr + offs).to(tl.float32), tl.load(m2_ptr + offs).to(tl.float32)
    s1, s2 = tl.load(s1_ptr + offs).to(tl.float32), tl.load(s2_ptr + offs).to(tl.float32)
    m = tl.maximum(m1, m2)
    shift = tl.where(m == float("-inf"), 0.0, m)
    tl.store(out_ptr + offs, (s1 * tl.exp(m1 - shift) + s2 * tl.exp(m2 - shift)).to(out_ptr.dtype.element_ty))


def _failures(kernel) -> list[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy under the interpreter: nan, inf
        result = check("lesson5_combine", _launcher(kernel), measure_throughput=False, verbose=False)
    return [c.label for c in result.cases if not c.passed]


LABELS = [case.label for case in EXERCISE.cases("visible", DEV)]


def test_combine_without_the_minus_infinity_guard_fails_every_case():
    assert _failures(_unguarded_kernel) == LABELS  # each case ends in two empty states: NaN


def test_combine_without_rescaling_fails_all_but_the_lone_empty_pair():
    # 0 + 0 is right for the 1-element cases, whose only element is two empty states
    assert _failures(_unscaled_kernel) == [label for label in LABELS if not label.startswith("1 ")]


def test_combine_in_float16_arithmetic_fails_float16_cases_only():
    # interpreter: wrong by tenths of a percent; GPU: tl.exp refuses float16 when compiling,
    # which the check reports as a failed case all the same
    failed = _failures(_half_precision_kernel)
    assert failed and all("float16" in label for label in failed)


@pytest.mark.skipif(DEVICE.has_gpu, reason="on a GPU the unmasked store would write past the "
                    "output silently and corrupt other tensors; the interpreter's bounds check stops it")
def test_combine_without_a_mask_is_stopped_by_the_bounds_check():
    result = check("lesson5_combine", _launcher(_unmasked_kernel), measure_throughput=False, verbose=False)
    messages = {c.label: c.message for c in result.cases}
    assert "out of bounds" in messages["1025 float32"]
    assert messages["4096 float32"] == ""  # whole blocks: right by luck, as the declaration says
