"""Lesson 7's transpose kernel against ``x.T``: ragged and whole tiles, strided and transposed
inputs, and the 5 × 7 example of the lesson with 4 × 4 tiles."""
import pytest
import torch

from autograder.kernels.transpose import transpose, transpose_kernel

from conftest import DEVICE

DEV = DEVICE.device


def layout(kind: str, rows: int, cols: int, dtype=torch.float32) -> torch.Tensor:
    """A (rows, cols) tensor laid out as ``kind`` says, with distinct values."""
    if kind == "contiguous":
        t = torch.randn(rows, cols)
    elif kind == "row slice":  # x[:, :cols] of a wider tensor: row stride cols + 13
        t = torch.randn(rows, cols + 13)[:, :cols]
    elif kind == "every other row":  # stride (2·cols, 1)
        t = torch.randn(2 * rows, cols)[::2]
    elif kind == "every third column":  # stride (3·cols, 3): no element is next to another
        t = torch.randn(rows, 3 * cols)[:, ::3]
    elif kind == "transposed":  # stride (1, rows): column-major
        t = torch.randn(cols, rows).T
    elif kind == "transposed slice":  # column-major and sliced: stride (1, rows + 5)
        t = torch.randn(cols, rows + 5)[:, :rows].T
    else:
        raise ValueError(kind)
    return t.to(DEV, dtype)


LAYOUTS = ["contiguous", "row slice", "every other row", "every third column", "transposed",
           "transposed slice"]
SHAPES = {"1x1": (1, 1), "ragged 33x65": (33, 65), "ragged 70x3": (70, 3), "whole tiles 64x96": (64, 96)}


@pytest.mark.parametrize("kind", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_matches_x_t(shape, kind):
    torch.manual_seed(0)
    x = layout(kind, *shape)
    out = transpose(x)
    assert out.shape == x.T.shape and out.dtype == x.dtype and out.is_contiguous()
    assert torch.equal(out, x.T)  # a copy: exact, bit for bit


def test_float16_and_integers():
    torch.manual_seed(0)
    for x in (layout("row slice", 45, 33, torch.float16), torch.arange(37 * 41, device=DEV).reshape(37, 41)):
        assert torch.equal(transpose(x), x.T)


def test_inputs_are_views_as_labelled():
    assert layout("row slice", 5, 7).stride() == (20, 1)
    assert layout("every third column", 5, 7).stride() == (21, 3)
    assert layout("transposed", 5, 7).stride() == (1, 5)
    assert layout("transposed slice", 5, 7).stride() == (1, 10)


@pytest.mark.parametrize("block", [(4, 4), (4, 8), (16, 2)], ids=lambda b: f"{b[0]}x{b[1]}")
def test_lessons_ragged_example_with_small_tiles(block):
    # The lesson's picture: 5 × 7 in 4 × 4 tiles is 2 × 2 programs, 35 of their 64 lanes real.
    x = torch.arange(35, dtype=torch.float32, device=DEV).reshape(5, 7)
    assert torch.equal(transpose(x, *block), x.T)


def test_masked_lanes_store_nothing():
    # The output sits at the front of a NaN-filled buffer: a lane past the edge that stored
    # anything would overwrite one of the NaNs behind it (or the front, out of place).
    x = torch.arange(35, dtype=torch.float32, device=DEV).reshape(5, 7)
    buffer = torch.full((35 + 64,), float("nan"), device=DEV)
    transpose_kernel[(2, 2)](x, buffer, 5, 7, x.stride(0), x.stride(1), BLOCK_M=4, BLOCK_N=4)
    assert torch.equal(buffer[:35].view(7, 5), x.T) and buffer[35:].isnan().all()
