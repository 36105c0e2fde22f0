"""Reference solution of lesson 5's exercise: merge two online-softmax states (m1, s1) and (m2, s2)."""
import torch
import triton
import triton.language as tl

# --- notebook cell: combine ---
@triton.jit
def combine_kernel(m1_ptr, s1_ptr, m2_ptr, s2_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    ### BEGIN SOLUTION
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    m1 = tl.load(m1_ptr + offsets, mask=mask).to(tl.float32)
    s1 = tl.load(s1_ptr + offsets, mask=mask).to(tl.float32)
    m2 = tl.load(m2_ptr + offsets, mask=mask).to(tl.float32)
    s2 = tl.load(s2_ptr + offsets, mask=mask).to(tl.float32)
    m = tl.maximum(m1, m2)
    # Two empty states (m = -inf, s = 0) merge into an empty one; shifting by -inf would
    # give exp(-inf - (-inf)) = nan, so shift by 0 there.
    shift = tl.where(m == float("-inf"), 0.0, m)
    s = s1 * tl.exp(m1 - shift) + s2 * tl.exp(m2 - shift)
    tl.store(out_ptr + offsets, s.to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def combine(m1: torch.Tensor, s1: torch.Tensor, m2: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
    """The sum s of the merge of states (m1, s1) and (m2, s2), element-wise; its max is
    max(m1, m2)."""
    ### BEGIN SOLUTION
    m1, s1, m2, s2 = (t.contiguous() for t in (m1, s1, m2, s2))
    out = torch.empty_like(s1)
    n = out.numel()
    combine_kernel[(triton.cdiv(n, 1024),)](m1, s1, m2, s2, out, n, BLOCK_SIZE=1024)
    return out
    ### END SOLUTION
