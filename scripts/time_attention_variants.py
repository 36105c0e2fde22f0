"""On a GPU: issue 25's attention goal. What tensor descriptors and warp specialisation buy lesson
8's FlashAttention forward on Hopper: lesson 8's autotuned kernel and a descriptor-fed variant in
several configurations, each against ``F.scaled_dot_product_attention`` side by side (the
course's ``timing.median_ms``), at 4×32×4096×128 bfloat16, causal and not, each checked against
SDPA first:
``bash scripts/gpu_run.sh attention``. With ``TRITON_INTERPRET=1`` it checks the variant's
values on a small case instead (tests/test_flash_attention.py runs that).
Results: results/gpu/NOTES.md, 2026-12-06 (g), timed then with plain ``do_bench`` medians."""
import os
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from autograder.kernels.flash_attention import LOG2_E, attention
from autograder.timing import median_ms

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _fold(acc, m, l, q, k_desc, v_desc, base, rows, lo, hi, qk_scale,
          BLOCK_N: tl.constexpr, MASKED: tl.constexpr, WS: tl.constexpr):
    for start in tl.range(lo, hi, BLOCK_N, warp_specialize=WS):
        k = k_desc.load([base + start, 0])
        s = tl.dot(q, k.T)
        if MASKED:
            keys = start + tl.arange(0, BLOCK_N)
            s = tl.where(keys[None, :] <= rows[:, None], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1) * qk_scale)
        rescale = tl.exp2(m - m_new)
        p = tl.exp2(s * qk_scale - m_new[:, None])
        l = l * rescale + tl.sum(p, axis=1)
        v = v_desc.load([base + start, 0])
        acc = tl.dot(p.to(v.dtype), v, acc * rescale[:, None])
        m = m_new
    return acc, m, l


@triton.jit
def desc_attention_kernel(out_ptr, q_ptr, k_ptr, v_ptr, seq_len, rows_total, qk_scale, HEAD_DIM: tl.constexpr,
                          CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WS: tl.constexpr):
    """seq_len a multiple of BLOCK_M, BLOCK_M a multiple of BLOCK_N: each head is rows
    [head*seq, (head+1)*seq) of one (B*H*seq, HEAD_DIM) matrix, and no block crosses into the
    next head or (causal) past the diagonal unmasked."""
    q_desc = tl.make_tensor_descriptor(q_ptr, shape=[rows_total, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, HEAD_DIM])
    k_desc = tl.make_tensor_descriptor(k_ptr, shape=[rows_total, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(v_ptr, shape=[rows_total, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, HEAD_DIM])
    o_desc = tl.make_tensor_descriptor(out_ptr, shape=[rows_total, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, HEAD_DIM])
    q_block = tl.num_programs(0) - 1 - tl.program_id(0)
    base = tl.program_id(1) * seq_len
    rows = q_block * BLOCK_M + tl.arange(0, BLOCK_M)
    q = q_desc.load([base + q_block * BLOCK_M, 0])
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    if CAUSAL:
        acc, m, l = _fold(acc, m, l, q, k_desc, v_desc, base, rows, 0, q_block * BLOCK_M, qk_scale,
                          BLOCK_N, False, WS)
        acc, m, l = _fold(acc, m, l, q, k_desc, v_desc, base, rows, q_block * BLOCK_M, (q_block + 1) * BLOCK_M,
                          qk_scale, BLOCK_N, True, WS)
    else:
        acc, m, l = _fold(acc, m, l, q, k_desc, v_desc, base, rows, 0, seq_len, qk_scale, BLOCK_N, False, WS)
    o_desc.store([base + q_block * BLOCK_M, 0], (acc / l[:, None]).to(o_desc.dtype))


def desc_attention(q, k, v, causal, bm, bn, warps, stages, ws):
    batch, heads, seq, d = q.shape
    out = torch.empty_like(q)
    if not INTERPRET:
        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, device=q.device, dtype=torch.int8))
    grid = (seq // bm, batch * heads)
    kw = {} if INTERPRET else dict(num_warps=warps, num_stages=stages)
    desc_attention_kernel[grid](out, q, k, v, seq, batch * heads * seq, d ** -0.5 * LOG2_E, HEAD_DIM=d,
                                CAUSAL=causal, BLOCK_M=bm, BLOCK_N=bn, WS=ws, **kw)
    return out


def main():
    dev = "cpu" if INTERPRET else "cuda"
    if INTERPRET:
        shape, dtype, configs = (1, 2, 64, 32), torch.float16, [(32, 16, 4, 2, False), (32, 32, 4, 2, True)]
    else:
        shape, dtype = (4, 32, 4096, 128), torch.bfloat16
        configs = [(bm, bn, w, s, False) for bm, bn, w, s in
                   [(128, 64, 8, 3), (128, 64, 8, 4), (128, 128, 8, 2), (128, 128, 8, 3), (128, 64, 4, 3),
                    (128, 128, 4, 3), (64, 64, 4, 4)]]
        configs += [(bm, bn, 4, s, True) for bm, bn, s in [(128, 64, 3), (128, 128, 2), (128, 128, 3), (128, 64, 4)]]
        print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, flush=True)
    g = torch.Generator(dev).manual_seed(0)
    q, k, v = (torch.randn(shape, generator=g, device=dev).to(dtype) for _ in range(3))
    for causal in (False, True):
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal).to(dtype) \
            if INTERPRET else F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        b, h, n, d = shape
        flops = 4 * b * h * n * n * d // (2 if causal else 1)
        sdpa = None if INTERPRET else median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        print(f"\ncausal={causal}" + ("" if INTERPRET else f": SDPA {sdpa:.3f} ms = {flops / sdpa / 1e9:.0f} TFLOP/s"),
              flush=True)
        if not INTERPRET:
            attention(q, k, v, causal)  # tune
            ours = median_ms(lambda: attention(q, k, v, causal))
            sdpa = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            print(f"  lesson 8 (pointers, autotuned): {ours:.3f} ms = {sdpa / ours:.3f}x SDPA ({sdpa:.3f} ms)",
                  flush=True)
        for bm, bn, w, s, ws in configs:
            name = f"desc {bm}x{bn} w{w} s{s} ws={ws}"
            try:
                t0 = time.perf_counter()
                out = desc_attention(q, k, v, causal, bm, bn, w, s, ws)
                first = time.perf_counter() - t0
                err = (out.float() - ref.float()).abs().max().item()
                if not err <= 2e-2:  # NaN too
                    print(f"  {name}: WRONG, max error {err:.3g}", flush=True)
                    continue
                if INTERPRET:
                    print(f"  {name}: max error {err:.2g}", flush=True)
                    continue
                t = median_ms(lambda: desc_attention(q, k, v, causal, bm, bn, w, s, ws))
                sdpa = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                print(f"  {name}: {t:.3f} ms = {sdpa / t:.3f}x SDPA ({sdpa:.3f} ms), err {err:.2g}, "
                      f"first call {first:.2f} s", flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"  {name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)


if __name__ == "__main__":
    main()
