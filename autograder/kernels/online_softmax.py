"""Lesson 5's online softmax: rows too long for one block, streamed through in tiles.

``row_state`` is the online softmax itself: one pass over columns ``[start, stop)`` of a row
keeps a running maximum ``m`` and a running sum ``s`` of ``exp(x - m)``. Lesson 5 builds
``softmax_online_row`` on it, one program per row.
"""
import torch
import triton
import triton.language as tl

from autograder.language import say

# --- notebook cell: row_state ---
@triton.jit
def row_state(x_row, start, stop, BLOCK_SIZE: tl.constexpr):
    """(m, s) of columns [start, stop) of the row at x_row: the max and the sum of exp(x - m)."""
    lanes = tl.arange(0, BLOCK_SIZE)
    # float32 state: a float16 s stops growing at 2048 (its spacing there is 2), and a row of
    # 2**20 columns sums to ~10**4 or more.
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    for tile in range(start, stop, BLOCK_SIZE):
        cols = tile + lanes
        x = tl.load(x_row + cols, mask=cols < stop, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # Shift by m_new, except while every value so far is -inf (a masked-out prefix of the
        # row): then shift by 0, since exp(-inf - (-inf)) = exp(nan) would poison s for good.
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        # The old terms were exp(x - m); exp(m - m_new) turns them into exp(x - m_new).
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new
    return m, s


# --- notebook cell: softmax_online_row ---
@triton.jit
def softmax_row_kernel(out_ptr, x_ptr, x_row_stride, out_row_stride, n_cols,
                       BLOCK_SIZE: tl.constexpr):
    # int64 row offset: with 2**25 columns, row 64 starts at 2**31, past int32.
    row = tl.program_id(axis=0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    # Pass 1: the row's max and sum, tile by tile.
    m, s = row_state(x_row, 0, n_cols, BLOCK_SIZE)
    # Pass 2: read the row again and write the normalised values in the input's dtype.
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(out_row + cols, (tl.exp(x - m) / s).to(out_ptr.dtype.element_ty), mask=mask)


def softmax_online_row(x: torch.Tensor, block_size: int | None = None) -> torch.Tensor:
    """Softmax over the last dim of a 2-D tensor, any row length: one program per row,
    the row read in tiles of ``block_size`` columns (default: up to 4096)."""
    assert x.ndim == 2, say("{name} takes a 2-D tensor, got shape {shape}", name="softmax_online_row",
                            shape=tuple(x.shape))
    if x.stride(1) != 1:
        x = x.contiguous()  # rows may be strided (a slice x[:, :n]), columns must be adjacent
    n_rows, n_cols = x.shape
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if block_size is None:
        # 4096 float32 = 16 KB per tile, 32 registers a thread for x at 4 warps: the tile
        # stays in registers however long the row is.
        block_size = min(triton.next_power_of_2(n_cols), 4096)
    softmax_row_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK_SIZE=block_size)
    return out
