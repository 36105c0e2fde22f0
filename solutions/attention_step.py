"""Reference solution of lesson 8's exercise: one FlashAttention update of the output accumulator."""
import torch
import triton
import triton.language as tl

# --- notebook cell: attention_step ---
@triton.jit
def attention_step_kernel(out_ptr, m_ptr, acc_ptr, s_ptr, v_ptr, n_rows, HEAD_DIM: tl.constexpr,
                          KEYS: tl.constexpr, BLOCK_M: tl.constexpr):
    ### BEGIN SOLUTION
    rows = tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M)
    valid = rows < n_rows
    keys, dims = tl.arange(0, KEYS), tl.arange(0, HEAD_DIM)
    m = tl.load(m_ptr + rows, mask=valid, other=0.0)
    s = tl.load(s_ptr + rows[:, None] * KEYS + keys[None, :], mask=valid[:, None], other=0.0)
    acc = tl.load(acc_ptr + rows[:, None] * HEAD_DIM + dims[None, :], mask=valid[:, None], other=0.0)
    v = tl.load(v_ptr + keys[:, None] * HEAD_DIM + dims[None, :])
    m_new = tl.maximum(m, tl.max(s, axis=1))
    # The old terms were exp(s_old - m); exp(m - m_new) turns them into exp(s_old - m_new).
    # An empty state (m = -inf, acc = 0) gets the factor exp(-inf) = 0: nothing to keep.
    p = tl.exp(s - m_new[:, None])
    acc = acc * tl.exp(m - m_new)[:, None] + tl.dot(p.to(v.dtype), v)
    tl.store(out_ptr + rows[:, None] * HEAD_DIM + dims[None, :], acc, mask=valid[:, None])
    ### END SOLUTION


def attention_step(m: torch.Tensor, acc: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The accumulator after folding one block of keys: acc·exp(m - m_new) + exp(s - m_new)·v,
    with m_new = max(m, the row max of s)."""
    ### BEGIN SOLUTION
    n_rows, head_dim = acc.shape
    out = torch.empty_like(acc)
    attention_step_kernel[(triton.cdiv(n_rows, 16),)](out, m, acc, s, v, n_rows, HEAD_DIM=head_dim,
                                                     KEYS=s.shape[1], BLOCK_M=16)
    return out
    ### END SOLUTION
