"""The reference fused softmax, and the naive one lesson 1 measures, against torch in float64."""
import pytest
import torch

from autograder.kernels.fused_softmax import naive_softmax, softmax

import kit
from conftest import DEVICE

DEV = DEVICE.device

# (dtype, atol, rtol). float16: rounding the output alone costs up to 2**-11 = 4.9e-4 relative.
# float32: a 1025-term sum adds ~10 roundings of 6e-8. bfloat16 is left out: no interpreter.
TOLERANCES = [
    (torch.float32, 1e-6, 1e-5),
    (torch.float16, 1e-5, 1e-3),
]
SHAPES = [(1, 1), (3, 7), (17, 1000), (4, 1025)]


def expected(x: torch.Tensor) -> torch.Tensor:
    """torch.softmax of the same values in float64, rounded to x's dtype only at the end."""
    return torch.softmax(x.double(), dim=-1)


def assert_matches(out: torch.Tensor, x: torch.Tensor, atol: float, rtol: float) -> None:
    assert out.dtype == x.dtype and out.shape == x.shape
    torch.testing.assert_close(out.double(), expected(x), atol=atol, rtol=rtol)


def awkward_rows(dtype) -> torch.Tensor:
    """4 x 1025 (one column past a power of two): values the naive formula cannot take."""
    torch.manual_seed(0)
    x = torch.randn(4, 1025)
    x[0] *= 1e4                  # spread over +-1e4: one or two columns take nearly everything
    x[1] += 1e4                  # all near 1e4: exp without the max subtracted is inf
    x[2] -= 1e4                  # all near -1e4: exp without it is 0, and 0 / 0 is NaN
    x[3, ::3] = float("-inf")    # a third of the row impossible: exactly 0 out
    return x.to(dtype=dtype, device=DEV)


@pytest.mark.parametrize("dtype, atol, rtol", TOLERANCES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_random_rows(shape, dtype, atol, rtol):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype, device=DEV)
    assert_matches(softmax(x), x, atol, rtol)


@pytest.mark.parametrize("dtype, atol, rtol", TOLERANCES)
def test_large_magnitudes_and_minus_infinity(dtype, atol, rtol):
    x = awkward_rows(dtype)
    out = softmax(x)
    assert_matches(out, x, atol, rtol)
    assert torch.all(out[3, ::3] == 0)


@pytest.mark.parametrize("dtype, atol, rtol", TOLERANCES)
def test_row_strided_slice_reads_only_its_columns(dtype, atol, rtol):
    x = kit.rows_with_a_trap_past_them(dtype, DEV)
    assert_matches(softmax(x), x, atol, rtol)


def test_naive_softmax_agrees():
    atol, rtol = TOLERANCES[0][1:]
    for shape in SHAPES:
        x = torch.randn(shape, device=DEV)
        assert_matches(naive_softmax(x), x, atol, rtol)
    x = awkward_rows(torch.float32)
    assert_matches(naive_softmax(x), x, atol, rtol)
