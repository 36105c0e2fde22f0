"""On a GPU: issue 25's 16-bit goal. Whether storing lesson 11's output tile in two halves (the
epilogue's shared-memory tile halves too, 32 KB instead of 64 KB at 128 × 256 in float16, so that
a fourth pipeline stage fits in 227 KB) brings ``tma_matmul`` to ``torch.matmul``: the same
persistent, descriptor-fed kernel with the store whole or halved, 3 or 4 stages, against
``torch.matmul`` side by side (``timing.compare``, 3 alternating rounds), at 4096³ and 8192³
float16, each checked against ``torch.matmul`` first: ``bash scripts/gpu_run.sh epilogue``. With
``TRITON_INTERPRET=1`` it checks the values of each variant on a small case instead
(tests/test_lesson11.py runs that). Results: results/gpu/NOTES.md."""
import os

import torch
import triton
import triton.language as tl

from autograder.kernels.matmul import tile_order
from autograder.timing import compare, tflops

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def subtiled_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr, HALVES: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N // HALVES])
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    store_tile = tl.program_id(axis=0) - NUM_PROGRAMS
    for tile in tl.range(tl.program_id(axis=0), tiles, NUM_PROGRAMS, flatten=True):
        row, col = tile_order(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            acc = tl.dot(a_desc.load([row * BLOCK_M, k]), b_desc.load([k, col * BLOCK_N]), acc)
        store_tile += NUM_PROGRAMS
        row, col = tile_order(store_tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        if HALVES == 2:  # the left and right halves of the tile, each stored on its own
            left, right = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            c_desc.store([row * BLOCK_M, col * BLOCK_N], left.to(c_desc.dtype))
            c_desc.store([row * BLOCK_M, col * BLOCK_N + BLOCK_N // 2], right.to(c_desc.dtype))
        else:
            c_desc.store([row * BLOCK_M, col * BLOCK_N], acc.to(c_desc.dtype))


def matmul(a, b, halves, stages, bm=128, bn=256, bk=64, warps=8, programs=None):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, dtype=a.dtype, device=a.device)
    programs = programs or torch.cuda.get_device_properties(a.device).multi_processor_count
    grid = (min(programs, triton.cdiv(M, bm) * triton.cdiv(N, bn)),)
    launch = {} if INTERPRET else dict(num_warps=warps, num_stages=stages)
    subtiled_kernel[grid](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, NUM_PROGRAMS=programs,
                          HALVES=halves, **launch)
    return c


def main():
    if INTERPRET:
        a, b = torch.randn(70, 48), torch.randn(48, 96)
        for halves in (1, 2):
            error = (matmul(a, b, halves, 1, bm=32, bn=32, bk=16, programs=3) - a @ b).abs().max().item()
            print(f"halves={halves}: max error {error:.2e}")
        return
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, device="cuda", dtype=torch.int8))
    print("card:", torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    for n in (4096, 8192):
        sets = [(torch.randn(n, n, device="cuda").half(), torch.randn(n, n, device="cuda").half()) for _ in range(2)]
        for halves, stages in ((1, 3), (2, 3), (2, 4)):
            a, b = sets[0]
            try:
                error = (matmul(a, b, halves, stages).float() - (a @ b).float()).abs().max().item()
            except Exception as failure:  # out of shared memory
                print(f"{n}³ halves={halves} stages={stages}: {type(failure).__name__}: {str(failure)[:120]}")
                continue
            timed = compare(lambda x, y: matmul(x, y, halves, stages), torch.matmul, sets, rounds=3)
            print(f"{n}³ halves={halves} stages={stages}: {timed.ratio:.3f}x torch.matmul "
                  f"({tflops(2 * n**3, timed.candidate_ms):,.0f} against {tflops(2 * n**3, timed.baseline_ms):,.0f} "
                  f"TFLOP/s), max error {error:.2e}", flush=True)


if __name__ == "__main__":
    main()
