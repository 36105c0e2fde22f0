"""On a GPU: each candidate tiling of PS4's and PS5's references timed alone, on the shapes
their autotuners tune, against the PyTorch baseline (the course's ``timing.median_ms``), with
the first call's time (its compile): ``bash scripts/gpu_run.sh tilings``. What chose the
references' lists (results/gpu/NOTES.md, 2026-12-06 (f), with plain ``do_bench`` medians), then
checked them in this form (2026-12-06 (g))."""
import time

import torch
import torch.nn.functional as F
import triton

from autograder.assignments.ps5_varlen_attention import case, varlen_inputs, varlen_reference
from autograder.timing import median_ms
from solutions import linear_silu as ps4, varlen_attention as ps5

PS4_CANDIDATES = [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 64, 8, 4),
                  (128, 128, 64, 4, 3), (64, 256, 64, 4, 4), (128, 64, 64, 4, 4), (64, 64, 64, 4, 4)]
"""(TILE_M, TILE_N, TILE_K, warps, stages)"""
PS5_CANDIDATES = [(64, 64, 4, 4), (128, 64, 4, 3), (128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 2), (128, 128, 8, 3)]
"""(BLOCK_M, BLOCK_N, warps, stages)"""


def row(label: str, baseline_ms: float, run) -> None:
    """One candidate: its median time, its ratio to the baseline, its first call."""
    try:
        start = time.monotonic()
        run()
        torch.cuda.synchronize()
        first = time.monotonic() - start
        ms = median_ms(run)
        print(f"  {label}: {ms:.3f} ms = {baseline_ms / ms:.3f}x (first call {first:.2f} s)")
    except Exception as error:  # e.g. more shared memory than an SM has
        print(f"  {label}: {type(error).__name__}: {str(error)[:120]}")


def linear_silu_rows() -> None:
    kernel = ps4.linear_silu_kernel.fn  # the JIT function under @autotune
    for (m, n, k), dtype, weight_t in [((4096, 4096, 4096), torch.float16, False), ((4096, 4096, 4096), torch.bfloat16, False),
                                       ((2048, 2048, 2048), torch.float16, False), ((8192, 1024, 4096), torch.float16, True)]:
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(k, n, device="cuda", dtype=dtype).t() if weight_t else torch.randn(n, k, device="cuda", dtype=dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        y = torch.empty(m, n, device="cuda", dtype=dtype)
        baseline = median_ms(lambda: F.silu(F.linear(x, w, b)))
        print(f"\nPS4 {m}×{n}×{k} {dtype} weight_t={weight_t}: F.silu(F.linear) {baseline:.3f} ms")
        for tm, tn, tk, warps, stages in PS4_CANDIDATES:
            grid = (triton.cdiv(m, tm) * triton.cdiv(n, tn),)
            row(f"{tm}×{tn}×{tk} w{warps} s{stages}", baseline, lambda: kernel[grid](
                x, w, b, y, m, n, k, *x.stride(), *w.stride(), b.stride(0), *y.stride(), GROUP_M=8,
                PRECISION="tf32", TILE_M=tm, TILE_N=tn, TILE_K=tk, num_warps=warps, num_stages=stages))


def varlen_rows() -> None:
    for batch in [case((4096,) * 4, (32, 8), 128, torch.bfloat16, causal=True),
                  case((8192, 100), (8, 1), 64, torch.bfloat16, causal=True), case((4096, 4096), (8, 8), 64, torch.float16)]:
        q, k, v, cu_seqlens, max_seqlen, causal = varlen_inputs(batch, torch.Generator("cuda").manual_seed(0), "cuda")
        baseline = median_ms(lambda: varlen_reference(q, k, v, cu_seqlens, max_seqlen, causal))
        print(f"\nPS5 {batch.label}: SDPA per sequence {baseline:.3f} ms")
        tokens, heads, head_dim = q.shape
        out = q.new_empty(q.shape)
        args = (out, q, k, v, cu_seqlens, *q.stride()[:2], *k.stride()[:2], *v.stride()[:2],
                head_dim ** -0.5 * ps5.LOG2_E, max_seqlen, (cu_seqlens.numel() - 1) * heads)
        meta = dict(GROUP=heads // k.shape[1], HEAD_DIM=head_dim, CAUSAL=causal)
        for bm, bn, warps, stages in PS5_CANDIDATES:
            grid = (triton.cdiv(max_seqlen, bm), heads, cu_seqlens.numel() - 1)
            row(f"{bm}×{bn} w{warps} s{stages}", baseline, lambda: ps5.varlen_kernel[grid](
                *args, **meta, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages))


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    linear_silu_rows()
    varlen_rows()
