"""Reference solution of lesson 4's exercise: row-wise log-softmax, one program per row.

``log_softmax(x)[i, j] = x[i, j] - m_i - log(sum_k exp(x[i, k] - m_i))`` with ``m_i`` the
row maximum: the same single read and single write as the fused softmax, and no division.
"""
import torch
import triton
import triton.language as tl

# --- notebook cell: log_softmax ---
@triton.jit
def log_softmax_kernel(out_ptr, x_ptr, x_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    # -inf in the padding lanes: it never wins the max, and exp(-inf) = 0 leaves the sum alone.
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    shifted = x - tl.max(x, axis=0)  # every exponent <= 0, so exp() cannot overflow
    # The sum is >= 1 (the max's own term is exp(0)), so its log is finite and >= 0.
    log_sum = tl.log(tl.sum(tl.exp(shifted), axis=0))
    tl.store(out_ptr + row * out_row_stride + cols, (shifted - log_sum).to(out_ptr.dtype.element_ty), mask=mask)


def log_softmax(x: torch.Tensor) -> torch.Tensor:
    """Log-softmax over the last dim of a 2-D tensor; the whole row in one block."""
    assert x.ndim == 2, f"log_softmax takes a 2-D tensor, got shape {tuple(x.shape)}"
    if x.stride(1) != 1:
        x = x.contiguous()  # rows may be strided (a slice x[:, :n]); columns must be adjacent
    n_rows, n_cols = x.shape
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    log_softmax_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols,
                                  BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return out
