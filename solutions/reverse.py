"""Reference solution of lesson 2's exercise: out[i] = x[n - 1 - i], one program per block."""
import torch
import triton
import triton.language as tl

# --- notebook cell: reverse ---
@triton.jit
def reverse_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    ### BEGIN SOLUTION
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements  # the same mask guards both sides: n-1-offsets >= 0 exactly when offsets < n
    x = tl.load(x_ptr + (n_elements - 1 - offsets), mask=mask)
    tl.store(out_ptr + offsets, x, mask=mask)
    ### END SOLUTION


def reverse(x: torch.Tensor) -> torch.Tensor:
    """x[::-1] for a 1-D tensor, in a Triton kernel; a new tensor."""
    ### BEGIN SOLUTION
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    reverse_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
    return out
    ### END SOLUTION
