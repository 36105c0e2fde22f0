"""Reference solution of lesson 10's exercise: the backward of the lesson's dropout.

y = x · mask / (1 − p) is linear in x, so dx = dy · mask / (1 − p): the same mask, drawn again
from the same seed. Element (i, j) of the forward's 2-D x had offset i·N + j (row-major order);
dy may be a row slice of a wider matrix, so its address is i·stride + j: the random offset and
the memory offset are two different things.
"""
import torch
import triton
import triton.language as tl

# --- notebook cell: dropout_backward ---
@triton.jit
def dropout_backward_kernel(dx_ptr, dy_ptr, dy_row_stride, n_cols, p, seed, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    inside = cols < n_cols
    grad = tl.load(dy_ptr + row.to(tl.int64) * dy_row_stride + cols, mask=inside, other=0.0)
    # The forward's number for element (row, col) came from its row-major index, not its address.
    kept = tl.rand(seed, row * n_cols + cols) >= p
    scaled = tl.where(kept, grad.to(tl.float32) / (1 - p), 0.0)
    tl.store(dx_ptr + row.to(tl.int64) * n_cols + cols, scaled.to(dx_ptr.dtype.element_ty), mask=inside)


def dropout_backward(dy: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """dx of y = dropout(x, p, seed) for the output gradient dy (2-D, rows possibly strided)."""
    assert dy.ndim == 2 and dy.stride(1) == 1, "dy is (M, N) with adjacent columns"
    n_rows, n_cols = dy.shape
    dx = torch.empty((n_rows, n_cols), dtype=dy.dtype, device=dy.device)
    dropout_backward_kernel[(n_rows,)](dx, dy, dy.stride(0), n_cols, p, seed,
                                       BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return dx
