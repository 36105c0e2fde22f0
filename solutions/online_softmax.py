"""Reference online softmax: rows too long for one block, streamed through in tiles.

``softmax_online`` is the reference of Problem set 3. One program owns one row and walks it
twice: the first pass keeps a running maximum ``m`` and a running sum ``s`` of
``exp(x - m)``; the second writes ``exp(x - m) / s``. ``combine`` is lesson 5's exercise: the
merge of two such ``(m, s)`` states, which a kernel that splits one row over several programs
needs at the end.
"""
import torch
import triton
import triton.language as tl

# --- notebook cell: softmax_online ---
@triton.jit
def softmax_online_kernel(out_ptr, x_ptr, x_row_stride, out_row_stride, n_cols,
                          BLOCK_SIZE: tl.constexpr):
    ### BEGIN SOLUTION
    # int64 row offset: 64 rows of 2**25 columns already pass 2**31 elements.
    row = tl.program_id(axis=0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    lanes = tl.arange(0, BLOCK_SIZE)

    # Pass 1: running max m and running sum s = sum of exp(x - m) over the tiles seen so far.
    # float32 state: a float16 s stops growing at 2048 (its spacing there is 2), and a row of
    # 2**20 columns sums to ~10**4 or more.
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + lanes
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # Shift by m_new, except while every value so far is -inf (a masked-out prefix of the
        # row): then shift by 0, since exp(-inf - (-inf)) = exp(nan) would poison s for good.
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        # The old terms were exp(x - m); exp(m - m_new) turns them into exp(x - m_new).
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new

    # Pass 2: read the row again and write the normalised values in the input's dtype.
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + lanes
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - m) / s
        tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def softmax_online(x: torch.Tensor, block_size: int | None = None) -> torch.Tensor:
    """Softmax over the last dim of a 2-D tensor, any row length: one program per row,
    the row read in tiles of ``block_size`` columns (default: up to 4096)."""
    ### BEGIN SOLUTION
    assert x.ndim == 2, f"softmax_online takes a 2-D tensor, got shape {tuple(x.shape)}"
    if x.stride(1) != 1:
        x = x.contiguous()  # rows may be strided (a slice x[:, :n]), columns must be adjacent
    n_rows, n_cols = x.shape
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if block_size is None:
        # 4096 float32 = 16 KB per tile, 32 registers a thread for x at 4 warps: the tile
        # stays in registers however long the row is.
        block_size = min(triton.next_power_of_2(n_cols), 4096)
    softmax_online_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols,
                                     BLOCK_SIZE=block_size)
    return out
    ### END SOLUTION


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
