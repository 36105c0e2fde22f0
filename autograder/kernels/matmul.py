"""Lesson 7's matrix multiplication: ``c = a @ b`` for 2-D tensors, one output tile per program.

Each program owns a ``BLOCK_M × BLOCK_N`` tile of ``c``. It walks the shared dimension K in
steps of ``BLOCK_K``, multiplying a ``BLOCK_M × BLOCK_K`` tile of ``a`` by a
``BLOCK_K × BLOCK_N`` tile of ``b`` with ``tl.dot`` (tensor cores on a GPU) and adding the
product into a float32 accumulator; the tile is rounded to the output's dtype once, at the
store. ``tile_order`` maps a program id to its tile, in groups of ``GROUP_M`` tile rows so
that programs running at the same time share their tiles of ``a`` and ``b`` in L2. On a GPU
``triton.autotune`` picks the block sizes, warps and pipeline stages per shape; the
interpreter gets one small configuration (it would time every candidate in NumPy).
"""
import os

import torch
import triton
import triton.language as tl

from autograder.language import say

# --- notebook cell: tile_order ---
@triton.jit
def tile_order(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(row, column) of the output tile that program ``pid`` computes, in grouped order."""
    tile_rows = tl.cdiv(M, BLOCK_M)
    tile_cols = tl.cdiv(N, BLOCK_N)
    # Programs are numbered down the columns of a band of GROUP_M tile rows, then band by band:
    # GROUP_M consecutive programs share one tile column of b, and a band's tiles of a are
    # reused by every column. GROUP_M = 1 is plain row-major order.
    per_band = GROUP_M * tile_cols
    first_row = (pid // per_band) * GROUP_M
    band_rows = tl.minimum(tile_rows - first_row, GROUP_M)  # the last band may be shorter
    row = first_row + (pid % per_band) % band_rows
    col = (pid % per_band) // band_rows
    return row, col


# --- notebook cell: matmul ---
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

if INTERPRETED:
    # The interpreter runs one program at a time in NumPy: one configuration, no timing.
    CONFIGS = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32})]
else:
    # Hopper-sized tiles first. A 128×256 tile with BLOCK_K = 64 does 2·128·256·64 FLOPs per
    # step on (128 + 256)·64 16-bit elements: 85 FLOPs per byte loaded. Each pipeline stage
    # buffers (BLOCK_M + BLOCK_N)·BLOCK_K elements in shared memory: 48 KB at 128×256×64 in
    # float16, so 4 stages (192 KB) still fit an H100/H200's 227 KB per program. The small
    # tiles are for small or ragged shapes, where big tiles leave most SMs idle.
    CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=warps, num_stages=stages)
               for bm, bn, bk, warps, stages in ((128, 256, 64, 8, 3), (128, 256, 64, 8, 4),
                                                 (256, 128, 64, 8, 3), (128, 128, 64, 8, 4),
                                                 (128, 128, 64, 4, 4), (128, 64, 64, 4, 4),
                                                 (64, 128, 64, 4, 4), (64, 64, 64, 4, 4))]


def fewer_tiles_for_ieee(configs, named_args, **kwargs):
    """IEEE float32 dots run on the FMA units at a fraction of the tensor cores' rate; the large
    tiles, made for tensor cores, would only lengthen the autotuning (each one is compiled and
    timed), so for them the autotuner tries only the small ones."""
    args = {**named_args, **kwargs}
    if args["a_ptr"].dtype == torch.float32 and args["INPUT_PRECISION"] == "ieee":
        return [c for c in configs if c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] <= 64 * 128]
    return configs


@triton.jit
def matmul_tile(a_ptr, b_ptr, c_ptr, row, col, M, N, K,
                stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                INPUT_PRECISION: tl.constexpr):
    """Tile (row, col) of c: the K loop over tiles of a and b, then one store."""
    rows = row * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = col * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    # Rows past M and columns past N only feed outputs that the store drops: their masks just
    # keep the loads inside a and b.
    row_ok = rows[:, None] < M
    col_ok = cols[None, :] < N
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    # float32 accumulator whatever the inputs: a sum of 4096 products of N(0, 1) values grows
    # to ~64, where float16's spacing is 0.06.
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        # A ragged K edge is different: its padding is summed into every output, so both tiles
        # load it as 0 (a 0 on one side is not enough: 0 · NaN = NaN).
        k_ok = ks < K - step * BLOCK_K
        a = tl.load(a_ptrs, mask=row_ok & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok & col_ok)


# INPUT_PRECISION is in the key: the best tiles for IEEE float32 are not the best for TF32.
@triton.autotune(configs=CONFIGS, key=["M", "N", "K", "INPUT_PRECISION"],
                 prune_configs_by={"early_config_prune": fewer_tiles_for_ieee})
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    row, col = tile_order(tl.program_id(axis=0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    matmul_tile(a_ptr, b_ptr, c_ptr, row, col, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, INPUT_PRECISION)


def matmul(a: torch.Tensor, b: torch.Tensor, group_m: int = 8, allow_tf32: bool = False) -> torch.Tensor:
    """a @ b for a (M×K) and b (K×N) of one dtype; a new M×N tensor of that dtype.

    ``group_m``: tile rows per band of the launch order (1: row-major). ``allow_tf32``: let
    float32 inputs use TF32 tensor cores, as ``torch.backends.cuda.matmul.allow_tf32`` does;
    off by default, like PyTorch's, so float32 results are IEEE float32.
    """
    assert a.ndim == b.ndim == 2 and a.shape[1] == b.shape[0], say(
        "{name} takes a (M, K) and a (K, N) tensor, got shapes {a} and {b}", name="matmul", a=tuple(a.shape), b=tuple(b.shape))
    assert a.dtype == b.dtype, say("{name}: a and b need one dtype, got {a} and {b}",
                                   name="matmul", a=a.dtype, b=b.dtype)
    assert a.dtype in (torch.float16, torch.bfloat16, torch.float32), say(  # what tl.dot multiplies
        "{name} takes {dtypes}, got {a} and {b}", name="matmul", dtypes="float16/bfloat16/float32", a=a.dtype, b=b.dtype)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)

    def grid(meta):  # one program per output tile; the tile sizes are the autotuner's choice
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    # "tf32" is Triton's default and changes only float32 dots: 16-bit products are exact in
    # float32 either way.
    precision = "ieee" if a.dtype == torch.float32 and not allow_tf32 else "tf32"
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), GROUP_M=group_m, INPUT_PRECISION=precision)
    return c


# --- notebook cell: launch_order ---
@triton.jit
def launch_order_kernel(rows_ptr, cols_ptr, programs, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        GROUP_M: tl.constexpr, BLOCK: tl.constexpr):
    # tile_order is integer arithmetic, so it maps a whole block of program ids at once. Ids
    # past the last program are clamped to it (past the last band they would divide by 0).
    pids = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    row, col = tile_order(tl.minimum(pids, programs - 1), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    tl.store(rows_ptr + pids, row, mask=pids < programs)
    tl.store(cols_ptr + pids, col, mask=pids < programs)


def launch_order(M: int, N: int, block_m: int, block_n: int, group_m: int) -> torch.Tensor:
    """Which program computes each output tile: a (tile rows × tile columns) tensor of program ids."""
    tiles = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    programs = tiles[0] * tiles[1]
    rows, cols = (torch.empty(programs, dtype=torch.int32, device="cpu" if INTERPRETED else "cuda")
                  for _ in range(2))
    launch_order_kernel[(triton.cdiv(programs, 1024),)](rows, cols, programs, M, N, BLOCK_M=block_m,
                                                          BLOCK_N=block_n, GROUP_M=group_m, BLOCK=1024)
    order = torch.full(tiles, -1, dtype=torch.int64)
    order[rows.long().cpu(), cols.long().cpu()] = torch.arange(programs)
    return order
