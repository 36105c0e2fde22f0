"""Reference solution of lesson 9's exercise: the backward of lesson 1's RMS norm, no weight.

For y = x · r, r = 1 / sqrt(mean(x²) + eps) per row: dx = r · dy − x · r³ · mean(x · dy), the
lesson's dx with w = 1. Nothing was saved by a forward here, so each program recomputes its
row's r: one more reduction over a row it loads anyway.
"""
import torch
import triton
import triton.language as tl

# --- notebook cell: rms_norm_grad ---
@triton.jit
def rms_norm_grad_kernel(dx_ptr, x_ptr, dy_ptr, x_row_stride, dy_row_stride, dx_row_stride, n_cols, eps,
                         BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    # float32 sums: a float16 square overflows from |x| = 256 on.
    x_row = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dy_row = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    inv_rms = tl.rsqrt(tl.sum(x_row * x_row, axis=0) / n_cols + eps)
    mean_x_dy = tl.sum(x_row * dy_row, axis=0) / n_cols
    grad = inv_rms * dy_row - x_row * (inv_rms * inv_rms * inv_rms * mean_x_dy)
    tl.store(dx_ptr + row * dx_row_stride + cols, grad.to(dx_ptr.dtype.element_ty), mask=mask)


def rms_norm_grad(x: torch.Tensor, dy: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """dx of y = x / sqrt(mean(x²) + eps) (rows of a 2-D x) for the output gradient dy."""
    assert x.ndim == 2 and dy.shape == x.shape, f"x and dy are (M, N); got {tuple(x.shape)}, {tuple(dy.shape)}"
    x, dy = (t if t.stride(1) == 1 else t.contiguous() for t in (x, dy))
    n_rows, n_cols = x.shape
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    rms_norm_grad_kernel[(n_rows,)](dx, x, dy, x.stride(0), dy.stride(0), dx.stride(0), n_cols, eps,
                                    BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return dx
