"""Reference online softmax: rows too long for one block, streamed through in tiles.

``row_state`` is the online softmax itself: one pass over columns ``[start, stop)`` of a row
keeps a running maximum ``m`` and a running sum ``s`` of ``exp(x - m)``. Lesson 5 builds
``softmax_online_row`` on it, one program per row. ``combine`` is lesson 5's exercise: the
merge of two ``(m, s)`` states. ``softmax_online``, the reference of Problem set 3, puts the
two together: each row is split into chunks, one program per chunk, so that 64 rows keep
every SM busy; a second kernel merges the chunks' states of its row and writes its chunk.
"""
import torch
import triton
import triton.language as tl

# --- notebook cell: row_state ---
@triton.jit
def row_state(x_row, start, stop, BLOCK_SIZE: tl.constexpr):
    """(m, s) of columns [start, stop) of the row at x_row: the max and the sum of exp(x - m)."""
    ### BEGIN SOLUTION
    lanes = tl.arange(0, BLOCK_SIZE)
    # float32 state: a float16 s stops growing at 2048 (its spacing there is 2), and a row of
    # 2**20 columns sums to ~10**4 or more.
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    for tile in range(start, stop, BLOCK_SIZE):
        cols = tile + lanes
        x = tl.load(x_row + cols, mask=cols < stop, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # Shift by m_new, except while every value so far is -inf (a masked-out prefix of the
        # row): then shift by 0, since exp(-inf - (-inf)) = exp(nan) would poison s for good.
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        # The old terms were exp(x - m); exp(m - m_new) turns them into exp(x - m_new).
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new
    return m, s
    ### END SOLUTION


# --- notebook cell: softmax_online_row ---
@triton.jit
def softmax_row_kernel(out_ptr, x_ptr, x_row_stride, out_row_stride, n_cols,
                       BLOCK_SIZE: tl.constexpr):
    # int64 row offset: 64 rows of 2**25 columns already pass 2**31 elements.
    row = tl.program_id(axis=0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    # Pass 1: the row's max and sum, tile by tile.
    m, s = row_state(x_row, 0, n_cols, BLOCK_SIZE)
    # Pass 2: read the row again and write the normalised values in the input's dtype.
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(out_row + cols, (tl.exp(x - m) / s).to(out_ptr.dtype.element_ty), mask=mask)


def softmax_online_row(x: torch.Tensor, block_size: int | None = None) -> torch.Tensor:
    """Softmax over the last dim of a 2-D tensor, any row length: one program per row,
    the row read in tiles of ``block_size`` columns (default: up to 4096)."""
    assert x.ndim == 2, f"softmax_online_row takes a 2-D tensor, got shape {tuple(x.shape)}"
    if x.stride(1) != 1:
        x = x.contiguous()  # rows may be strided (a slice x[:, :n]), columns must be adjacent
    n_rows, n_cols = x.shape
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if block_size is None:
        # 4096 float32 = 16 KB per tile, 32 registers a thread for x at 4 warps: the tile
        # stays in registers however long the row is.
        block_size = min(triton.next_power_of_2(n_cols), 4096)
    softmax_row_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK_SIZE=block_size)
    return out


# --- notebook cell: softmax_online ---
@triton.jit
def chunk_state_kernel(m_ptr, s_ptr, x_ptr, x_row_stride, n_cols, chunk_cols, BLOCK_SIZE: tl.constexpr):
    """Program (row, chunk): the (m, s) state of its chunk, stored at [row, chunk]."""
    ### BEGIN SOLUTION
    row, chunk = tl.program_id(axis=0).to(tl.int64), tl.program_id(axis=1)
    start = chunk * chunk_cols
    m, s = row_state(x_ptr + row * x_row_stride, start, tl.minimum(start + chunk_cols, n_cols), BLOCK_SIZE)
    slot = row * tl.num_programs(axis=1) + chunk
    tl.store(m_ptr + slot, m)
    tl.store(s_ptr + slot, s)
    ### END SOLUTION


@triton.jit
def normalize_chunk_kernel(out_ptr, m_ptr, s_ptr, x_ptr, x_row_stride, out_row_stride, n_cols,
                           chunk_cols, n_chunks, CHUNKS: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """Program (row, chunk): merge the row's chunk states, then write exp(x - m) / s of its chunk."""
    ### BEGIN SOLUTION
    row, chunk = tl.program_id(axis=0).to(tl.int64), tl.program_id(axis=1)
    # All n_chunks states of the row at once (CHUNKS is n_chunks rounded up to a power of
    # two); the padding lanes are empty states (-inf, 0), which change nothing.
    lanes = tl.arange(0, CHUNKS)
    ms = tl.load(m_ptr + row * n_chunks + lanes, mask=lanes < n_chunks, other=float("-inf"))
    ss = tl.load(s_ptr + row * n_chunks + lanes, mask=lanes < n_chunks, other=0.0)
    m = tl.max(ms, axis=0)
    # The merge of lesson 5, over all chunks at once: each s_i rescaled to the row's max.
    s = tl.sum(ss * tl.exp(ms - tl.where(m == float("-inf"), 0.0, m)), axis=0)
    inv_s = 1.0 / s
    x_row, out_row = x_ptr + row * x_row_stride, out_ptr + row * out_row_stride
    start = chunk * chunk_cols
    stop = tl.minimum(start + chunk_cols, n_cols)
    for tile in range(start, stop, BLOCK_SIZE):
        cols = tile + tl.arange(0, BLOCK_SIZE)
        mask = cols < stop
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(out_row + cols, (tl.exp(x - m) * inv_s).to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def softmax_online(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a 2-D tensor, any row length, each row split over
    enough programs to keep the whole GPU busy."""
    ### BEGIN SOLUTION
    assert x.ndim == 2, f"softmax_online takes a 2-D tensor, got shape {tuple(x.shape)}"
    if x.stride(1) != 1:
        x = x.contiguous()  # rows may be strided (a slice x[:, :n]), columns must be adjacent
    n_rows, n_cols = x.shape
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    # Tiles of up to 4096 columns (16 KB of float32, 32 registers a thread at 4 warps); chunks
    # of whole tiles, enough of them for 4 programs per SM (528 on an H200's 132 SMs), since
    # 64 rows alone would leave half the SMs idle. In the interpreter, 8 programs: enough that
    # the CPU tests split rows too.
    block = min(triton.next_power_of_2(n_cols), 4096)
    programs = 4 * torch.cuda.get_device_properties(x.device).multi_processor_count if x.is_cuda else 8
    tiles = triton.cdiv(n_cols, block)
    tiles_per_chunk = triton.cdiv(tiles, min(tiles, triton.cdiv(programs, n_rows)))
    chunk_cols = tiles_per_chunk * block
    n_chunks = triton.cdiv(n_cols, chunk_cols)
    m = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x.device)
    s = torch.empty_like(m)
    grid = (n_rows, n_chunks)
    chunk_state_kernel[grid](m, s, x, x.stride(0), n_cols, chunk_cols, BLOCK_SIZE=block)
    normalize_chunk_kernel[grid](out, m, s, x, x.stride(0), out.stride(0), n_cols, chunk_cols, n_chunks,
                                 CHUNKS=triton.next_power_of_2(n_chunks), BLOCK_SIZE=block)
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
