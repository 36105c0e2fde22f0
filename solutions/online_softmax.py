"""Softmax for rows of any length, each row split over several programs: the benchmark's
long-row sweep. One kernel takes the (m, s) state of each chunk of a row with lesson 5's
``row_state``; a second merges the row's states (lesson 5's exercise, over all chunks at once)
and writes its chunk. On the instructor's side: it holds the exercise's answer.
"""
import torch
import triton
import triton.language as tl

from autograder.kernels.online_softmax import row_state

# --- notebook cell: softmax_online ---
@triton.jit
def chunk_state_kernel(m_ptr, s_ptr, x_ptr, x_row_stride, n_cols, chunk_cols, BLOCK_SIZE: tl.constexpr):
    """Program (row, chunk): the (m, s) state of its chunk, stored at [row, chunk]."""
    row, chunk = tl.program_id(axis=0).to(tl.int64), tl.program_id(axis=1)
    start = chunk * chunk_cols
    m, s = row_state(x_ptr + row * x_row_stride, start, tl.minimum(start + chunk_cols, n_cols), BLOCK_SIZE)
    slot = row * tl.num_programs(axis=1) + chunk
    tl.store(m_ptr + slot, m)
    tl.store(s_ptr + slot, s)


@triton.jit
def normalize_chunk_kernel(out_ptr, m_ptr, s_ptr, x_ptr, x_row_stride, out_row_stride, n_cols,
                           chunk_cols, n_chunks, CHUNKS: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """Program (row, chunk): merge the row's chunk states, then write exp(x - m) / s of its chunk."""
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


def softmax_online(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of a 2-D tensor, any row length, each row split over
    enough programs to keep the whole GPU busy."""
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
