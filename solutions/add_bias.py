"""Reference solution of lesson6_add_bias: out[i, j] = x[i, j] + bias[j], one program per row.

Lesson 6 hands students this kernel with two bugs in it: a mask one column short, and a
row offset computed as ``row * n_cols``, which is right only when ``x`` is contiguous. This
is the version with both fixed.
"""
import torch
import triton
import triton.language as tl

from autograder.language import say

# --- notebook cell: add_bias ---
@triton.jit
def add_bias_kernel(x_ptr, bias_ptr, out_ptr, n_cols, stride_x_row, stride_out_row,
                    BLOCK_COLS: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_COLS)
    ### BEGIN SOLUTION
    mask = cols < n_cols  # columns 0 .. n_cols - 1; the lanes past them are off
    # A slice such as qkv[:, d:2 * d] has rows 3 * d elements apart, not d: use the stride.
    x = tl.load(x_ptr + row * stride_x_row + cols, mask=mask)
    ### END SOLUTION
    bias = tl.load(bias_ptr + cols, mask=mask)
    tl.store(out_ptr + row * stride_out_row + cols, x + bias, mask=mask)


def add_bias(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """x + bias for x of shape (rows, cols) and bias of shape (cols,); a new (rows, cols) tensor."""
    assert x.ndim == 2 and bias.shape == (x.shape[1],), say("x is (rows, cols) and bias is (cols,)")
    assert x.stride(1) == 1 and bias.stride(0) == 1, say("each row of x, and bias, must be contiguous")
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    # One program per row, the whole row in one block: 4096 float32 columns are 16 KB per
    # program, 32 registers per thread for x over the default 128 threads.
    add_bias_kernel[(n_rows,)](x, bias, out, n_cols, x.stride(0), out.stride(0),
                               BLOCK_COLS=triton.next_power_of_2(n_cols))
    return out
