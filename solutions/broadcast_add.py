"""Reference for Problem set 1: x + y with PyTorch's broadcasting, read in place through strides.

``y.expand(M, N)`` turns every y form into an (M, N) view whose broadcast dimension has
stride 0; one kernel, on a 2-D grid of BLOCK_M × BLOCK_N tiles, then reads x and that view
at row·stride_m + col·stride_n, whatever their layout. ``HIDDEN_CASES`` are the cases only
grading runs.
"""
import torch
import triton
import triton.language as tl

from autograder.assignments.ps1_broadcast_add import BroadcastCase as B

_F16, _BF16 = torch.float16, torch.bfloat16

# Like the visible cases: ragged and whole tiles, every y form and layout, one row, one column,
# and one shape twice (fresh data each time: a result cached by shape fails the second).
HIDDEN_CASES = {
    "cpu": (B((1, 1), _F16, y_form="(M, 1)"), B((1, 300), y_form="(N,)"), B((300, 1), y_form="(M, 1)"),
            B((65, 129), y_form="(N,)", strided=True), B((65, 129), x_t=True, y_t=True),
            B((65, 129), x_t=True, y_t=True), B((128, 64), _F16, y_form="(M, 1)", y_t=True),
            B((33, 257), y_form="(1, N)", x_t=True, strided=True), B((200, 97), _F16, x_t=True, strided=True)),
    "cuda": (B((1, 1), _BF16), B((1, 65_537), y_form="(N,)"), B((65_537, 1), _F16, y_form="(M, 1)"),
             B((4097, 4095), x_t=True, y_t=True), B((4097, 4095), x_t=True, y_t=True),
             B((8192, 8192), _BF16, y_form="(M, 1)", strided=True), B((2048, 6144), _F16, y_form="(1, N)", x_t=True),
             B((3000, 5001), y_form="(N,)", strided=True), B((128, 64), _F16, y_form="(M, 1)", y_t=True),
             B((200, 97), _BF16, x_t=True, strided=True)),
}


# --- notebook cell: add ---
@triton.jit
def broadcast_add_kernel(x_ptr, y_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_ym, stride_yn,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program (i, j) writes the tile of rows i·BLOCK_M … (i+1)·BLOCK_M - 1 and columns
    j·BLOCK_N … (j+1)·BLOCK_N - 1 of the contiguous (M, N) output. Element (r, c) of x is
    r·stride_xm + c·stride_xn elements after x_ptr, and likewise for y."""
    ### BEGIN SOLUTION
    r = (tl.program_id(axis=0) * BLOCK_M + tl.arange(0, BLOCK_M))[:, None]  # a column of row indices
    c = (tl.program_id(axis=1) * BLOCK_N + tl.arange(0, BLOCK_N))[None, :]  # a row of column indices
    in_bounds = (r < M) & (c < N)  # (BLOCK_M, BLOCK_N): the edge tiles hang over in both directions
    # int32 offsets are enough here: the largest graded input, an 8192 × 8192 slice of an
    # 8192 × 12,291 tensor, spans 1.0e8 elements, far below 2**31 = 2.1e9 (past that,
    # r.to(tl.int64) before multiplying).
    a = tl.load(x_ptr + r * stride_xm + c * stride_xn, mask=in_bounds)
    b = tl.load(y_ptr + r * stride_ym + c * stride_yn, mask=in_bounds)  # stride 0: a re-read row or column
    tl.store(out_ptr + r * N + c, a + b, mask=in_bounds)
    ### END SOLUTION


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y as PyTorch broadcasts it, for x of shape (M, N) and y of shape (M, N), (N,),
    (1, N) or (M, 1), either possibly a strided view: a new contiguous (M, N) tensor."""
    ### BEGIN SOLUTION
    assert x.ndim == 2 and x.dtype == y.dtype, "x must be 2-D, and x and y of one dtype"
    M, N = x.shape
    y_mn = y.expand(M, N)  # a view: sizes (M, N), stride 0 along each dimension y broadcasts
    result = torch.empty((M, N), dtype=x.dtype, device=x.device)
    # 64 × 64 tiles: 16 KB of float32 per input per program. A square tile reads runs of 64
    # elements whichever dimension is the contiguous one; on an H200 it was 8% faster than
    # 32 × 64 on transposed float16 inputs, and as fast elsewhere.
    tiles = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    broadcast_add_kernel[tiles](x, y_mn, result, M, N, x.stride(0), x.stride(1),
                                y_mn.stride(0), y_mn.stride(1), BLOCK_M=64, BLOCK_N=64)
    return result
    ### END SOLUTION
