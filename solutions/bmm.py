"""Reference solution of lesson 7's exercise: a batched matmul, ``c[i] = a[i] @ b[i]``.

The matmul of ``autograder/kernels/matmul.py`` with a third grid axis for the batch: program
``(m, n, i)`` computes tile ``(m, n)`` of ``c[i]``, and only its base pointers move with ``i``.
"""
import torch
import triton
import triton.language as tl

# --- notebook cell: bmm ---
@triton.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
               stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn,
               stride_cb, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    batch = tl.program_id(axis=2)
    rows = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows[:, None] < M
    col_ok = cols[None, :] < N
    # The batch only moves the base pointers; within a matrix everything is as in matmul.
    a_ptrs = a_ptr + batch * stride_ab + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        k_ok = ks < K - step * BLOCK_K
        a = tl.load(a_ptrs, mask=row_ok & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok, other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")  # float32 in, float32 out, as torch.bmm
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + batch * stride_cb + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok & col_ok)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a[i] @ b[i] for a (B×M×K) and b (B×K×N) of one dtype; a new B×M×N tensor."""
    assert a.ndim == b.ndim == 3 and a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1], \
        f"bmm takes (B, M, K) and (B, K, N) tensors, got {tuple(a.shape)} and {tuple(b.shape)}"
    batches, M, K = a.shape
    N = b.shape[2]
    c = torch.empty((batches, M, N), dtype=a.dtype, device=a.device)
    # 32×32×32 tiles: small enough for the interpreter, and tl.dot's 16-wide minimum on a GPU.
    BLOCK = 32
    grid = (triton.cdiv(M, BLOCK), triton.cdiv(N, BLOCK), batches)
    bmm_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                     BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_K=BLOCK)
    return c
