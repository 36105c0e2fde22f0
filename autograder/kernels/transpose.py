"""Transpose, ``out = x.T`` as a new contiguous tensor: lesson 7's first 2-D tiling.

The grid is 2-D: program ``(p, q)`` owns the ``BLOCK_M × BLOCK_N`` tile of ``x`` that starts at
row ``p·BLOCK_M`` and column ``q·BLOCK_N``. It finds every element through ``x``'s two strides
(a slice or a transposed view works as it is, nothing is copied first), masks the rows and
columns that hang past the edges, and writes the tile, turned over, into the output at tile
row ``q`` and tile column ``p``.
"""
import torch
import triton
import triton.language as tl

from autograder.language import say

# --- notebook cell: transpose ---
@triton.jit
def transpose_kernel(src_ptr, dst_ptr, src_rows, src_cols, row_step, col_step,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Which rows and columns of x this program owns: two index vectors, not two numbers.
    tile_rows = BLOCK_M * tl.program_id(axis=0) + tl.arange(0, BLOCK_M)
    tile_cols = BLOCK_N * tl.program_id(axis=1) + tl.arange(0, BLOCK_N)
    # Broadcasting a column of row indices against a row of column indices gives the tile.
    down, across = tile_rows[:, None], tile_cols[None, :]
    inside = (down < src_rows) & (across < src_cols)  # edge tiles hang over in both directions
    # x[r, c] lives r·row_step + c·col_step elements past src_ptr, whatever x's layout.
    block = tl.load(src_ptr + down * row_step + across * col_step, mask=inside)
    # out is (src_cols × src_rows), contiguous: out[c, r] lives c·src_rows + r elements in.
    tl.store(dst_ptr + across * src_rows + down, block, mask=inside)


def transpose(x: torch.Tensor, block_m: int = 32, block_n: int = 32) -> torch.Tensor:
    """x.T of a 2-D tensor of any strides, as a new contiguous tensor; one tile per program."""
    assert x.ndim == 2, say("{name} takes a 2-D tensor, got shape {shape}", name="transpose", shape=tuple(x.shape))
    src_rows, src_cols = x.shape
    flipped = torch.empty((src_cols, src_rows), dtype=x.dtype, device=x.device)
    # (tile rows, tile columns) of x; 32 × 32 float32 tiles are 4 KB, 8 elements per thread.
    grid = (triton.cdiv(src_rows, block_m), triton.cdiv(src_cols, block_n))
    transpose_kernel[grid](x, flipped, src_rows, src_cols, x.stride(0), x.stride(1),
                           BLOCK_M=block_m, BLOCK_N=block_n)
    return flipped
