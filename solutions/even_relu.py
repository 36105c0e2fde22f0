"""Reference solution of lesson3_even_relu: out = max(x, 0), the mask compiled in only when needed.

``EVEN_N`` is a ``tl.constexpr`` flag: the wrapper sets it when ``BLOCK_SIZE`` divides ``n``,
so every block is full and the kernel is compiled without the compare and the predicated
loads and stores. Any other ``n`` gets the masked variant. The two are separate entries in
the kernel's cache, compiled once each.
"""
import torch
import triton
import triton.language as tl

# --- notebook cell: even_relu ---
@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, EVEN_N: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    ### BEGIN SOLUTION
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    # A constexpr `if`: only the taken branch is compiled, the other does not exist in the IR.
    if EVEN_N:
        x = tl.load(x_ptr + offsets)
        tl.store(out_ptr + offsets, tl.maximum(x, 0.0))
    else:
        mask = offsets < n_elements
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)
    ### END SOLUTION


def relu(x: torch.Tensor) -> torch.Tensor:
    """max(x, 0) element-wise in a Triton kernel; a new tensor of x's shape and dtype."""
    ### BEGIN SOLUTION
    x = x.contiguous()
    out = torch.empty_like(x)
    n = out.numel()
    BLOCK_SIZE = 1024
    # Divisibility by the block, not by 16: Triton already specialises n % 16 == 0 by itself,
    # but n = 2064 is a multiple of 16 whose third block still has 1008 lanes past the end.
    even = n % BLOCK_SIZE == 0
    relu_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, EVEN_N=even, BLOCK_SIZE=BLOCK_SIZE)
    return out
    ### END SOLUTION
