"""Reference for Problem set 5: FlashAttention over a packed batch of sequences of different
lengths (FlashAttention's "varlen" layout), with grouped-query heads.

q is (tokens, q_heads, head_dim), k and v (tokens, kv_heads, head_dim), the sequences one
after another; sequence b owns tokens cu_seqlens[b] .. cu_seqlens[b + 1] - 1. One program
handles one (query block, query head, sequence): it reads its sequence's bounds from
cu_seqlens itself, so the host never looks at them, and returns at once when the sequence is
shorter than its block's start. ``HIDDEN_CASES`` are the cases only grading runs.
"""
import torch
import triton
import triton.language as tl

from autograder.assignments.ps5_varlen_attention import case

_F16, _BF16 = torch.float16, torch.bfloat16

# Cases only grading runs. Each list has one shape twice (fresh data); on the GPU it is not the
# published throughput case (4 × 4096), which the rubric names. The CPU's move the
# visible edges: an empty first sequence, four sequences of one token under MQA, whole
# blocks only (16 + 32 + 48), a trailing empty sequence, 129 (one past eight blocks), large
# scores not causal, strided GQA with every kv head shared by four query heads.
HIDDEN_CASES = {
    "cpu": (case((30, 70), (4, 2), 32, _F16, causal=True), case((30, 70), (4, 2), 32, _F16, causal=True),
            case((0, 1), (2, 2), 64), case((1, 1, 1, 1), (4, 1), 16, _F16, causal=True),
            case((16, 32, 48), (2, 1), 128, _F16, causal=True), case((40, 0), (3, 3), 16),
            case((129,), (1, 1), 16), case((60, 13), (2, 1), 64, _F16, values="large"),
            case((25, 50, 9), (8, 2), 32, strided=True, causal=True)),
    "cuda": (case((4096, 3000, 1200, 4096), (32, 8), 128, _BF16, causal=True),
             case((4096, 3000, 1200, 4096), (32, 8), 128, _BF16, causal=True),
             case((1, 1, 1), (4, 1), 16, _F16, causal=True), case((2049, 1023, 0, 5), (8, 2), 64, _BF16),
             case((300,) * 8, (16, 16), 32, _F16, causal=True),
             case((1500, 2500), (8, 4), 128, _F16, values="large", causal=True),
             case((1000, 333), (6, 2), 64, _BF16, strided=True), case((8192, 100), (8, 1), 64, _BF16, causal=True)),
}

# --- notebook cell: attention_varlen ---
LOG2_E = 1.4426950408889634  # e^x = 2^(x·log2 e): the kernel works in base 2, the GPU's exp2


@triton.jit
def sweep_keys(o, top, denom, q, k_seq, v_seq, k_row, v_row, q_pos, first, last, seq_len, qk_scale,
               HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, EDGE: tl.constexpr, CAUSAL: tl.constexpr):
    """Fold keys first .. last - 1 of one sequence into a query block's running state, all
    float32: ``o`` (BLOCK_M × HEAD_DIM) = Σ 2^(x - top)·v, ``top`` the running row max of the
    base-2 scores x = q·k·qk_scale, ``denom`` = Σ 2^(x - top). k_seq and v_seq point at the
    sequence's first token in its key/value head, k_row and v_row are the token strides.
    Only EDGE blocks may hold keys past seq_len or (CAUSAL) after a query."""
    ### BEGIN SOLUTION
    d = tl.arange(0, HEAD_DIM)
    for n0 in range(first, last, BLOCK_N):
        pos = n0 + tl.arange(0, BLOCK_N)
        k_cols = k_seq + pos[None, :] * k_row + d[:, None]  # Kᵀ, HEAD_DIM × BLOCK_N
        v_rows = v_seq + pos[:, None] * v_row + d[None, :]
        if EDGE:
            k_t = tl.load(k_cols, mask=pos[None, :] < seq_len, other=0.0)
            v_blk = tl.load(v_rows, mask=pos[:, None] < seq_len, other=0.0)
        else:  # whole blocks of this sequence: no predicate
            k_t = tl.load(k_cols)
            v_blk = tl.load(v_rows)
        x = tl.dot(q, k_t)  # unscaled scores, float32
        if EDGE:
            # Keys past seq_len are the next sequence's tokens (or past the tensor): -inf.
            keep = pos[None, :] < seq_len
            if CAUSAL:
                keep &= pos[None, :] <= q_pos[:, None]
            x = tl.where(keep, x, -float("inf"))
        # qk_scale > 0: the max of the scaled scores is the scaled max, and x·qk_scale - top
        # is one fused multiply-add. Key 0 is in every row's first block: top is finite after it.
        new_top = tl.maximum(top, qk_scale * tl.max(x, axis=1))
        w = tl.exp2(x * qk_scale - new_top[:, None])
        shrink = tl.exp2(top - new_top)  # 0 on the first block (top = -inf): nothing to keep
        denom = denom * shrink + tl.sum(w, axis=1)
        # The weights go to the tensor cores in v's 16-bit type; the rescaled o is the dot's accumulator.
        o = tl.dot(w.to(v_blk.dtype), v_blk, o * shrink[:, None])
        top = new_top
    return o, top, denom
    ### END SOLUTION


# max_seqlen and programs (sequences × query heads) only key the autotuner; unspecialised,
# so that lengths 1 and multiples of 16 do not compile apart.
@triton.jit(do_not_specialize=["max_seqlen", "programs"])
def varlen_kernel(out_ptr, q_ptr, k_ptr, v_ptr, cu_seqlens_ptr, q_row, q_col, k_row, k_col, v_row, v_col,
                  qk_scale, max_seqlen, programs, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                  CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program (query block, query head, sequence): BLOCK_M rows of one head's output.
    ``*_row`` / ``*_col`` are each input's token and head strides; ``out`` is contiguous."""
    ### BEGIN SOLUTION
    seq, head = tl.program_id(2), tl.program_id(1)
    start = tl.load(cu_seqlens_ptr + seq)
    seq_len = tl.load(cu_seqlens_ptr + seq + 1) - start
    # Counted down: causal blocks late in a sequence fold the most keys, so they start first.
    q_first = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M
    if q_first >= seq_len:
        return  # the grid is sized for the longest sequence; this one ends earlier
    start = start.to(tl.int64)  # token · stride passes 2**31 in long batches
    kv_head = head // GROUP
    q_pos = q_first + tl.arange(0, BLOCK_M)
    d = tl.arange(0, HEAD_DIM)
    in_seq = q_pos[:, None] < seq_len
    q = tl.load(q_ptr + (start + q_pos[:, None]) * q_row + head * q_col + d[None, :], mask=in_seq, other=0.0)
    k_seq = k_ptr + start * k_row + kv_head * k_col
    v_seq = v_ptr + start * v_row + kv_head * v_col
    o = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    top = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    denom = tl.zeros([BLOCK_M], dtype=tl.float32)
    # Key blocks below `whole` are inside the sequence and (causal) before every query of
    # this block: no mask. From `whole` to `last` they are masked; causal stops after the
    # block's last query, so no key block past the diagonal is loaded.
    if CAUSAL:
        whole = q_first - q_first % BLOCK_N
        last = tl.minimum(q_first + BLOCK_M, seq_len)
    else:
        whole = seq_len - seq_len % BLOCK_N
        last = seq_len
    o, top, denom = sweep_keys(o, top, denom, q, k_seq, v_seq, k_row, v_row, q_pos, 0, whole, seq_len,
                               qk_scale, HEAD_DIM, BLOCK_N, False, CAUSAL)
    o, top, denom = sweep_keys(o, top, denom, q, k_seq, v_seq, k_row, v_row, q_pos, whole, last, seq_len,
                               qk_scale, HEAD_DIM, BLOCK_N, True, CAUSAL)
    out_row = tl.num_programs(1) * HEAD_DIM
    dest = out_ptr + (start + q_pos[:, None]) * out_row + head * HEAD_DIM + d[None, :]
    tl.store(dest, (o / denom[:, None]).to(out_ptr.dtype.element_ty), mask=in_seq)
    ### END SOLUTION


# On a GPU the launch times these on the first call of each (max_seqlen, sequences × heads,
# head_dim, causal) and keeps the fastest. On an H100 each was the fastest on one of three long
# batches (4 × 4096 at head_dim 128 causal, 8192 + 100 and 2 × 4096 at head_dim 64); blocks of
# 128 × 128, and 128 × 64 with 4 warps, never were.
GPU_CONFIGS = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
               for m, n, w, s in [(64, 64, 4, 4), (128, 64, 8, 3), (128, 64, 8, 4)]]
SHORT_CONFIG = triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4, num_stages=2)
TUNED_FROM = 1024
"""Batches shorter than this take SHORT_CONFIG untimed. Each configuration tried is one more
compile for every new dtype, head_dim, causal flag and group, and 32 × 32 blocks compile the
quickest: at head_dim 64 and 128, 0.6 s against 0.9-1.5 s for those above (on a 2-core CPU)."""


def untimed_when_short(configs, named_args, **kwargs):
    return configs if named_args["max_seqlen"] >= TUNED_FROM else [SHORT_CONFIG]


varlen_tuned = triton.autotune(GPU_CONFIGS, key=["max_seqlen", "programs", "HEAD_DIM", "CAUSAL"],
                               prune_configs_by={"early_config_prune": untimed_when_short})(varlen_kernel)
INTERPRETER_BLOCK = 16
"""The interpreter's blocks: small, so that short test sequences span several of them."""


def attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                     max_seqlen: int, causal: bool = False) -> torch.Tensor:
    """softmax(q·kᵀ/sqrt(head_dim))·v within each sequence of a packed batch: q is (tokens,
    q_heads, head_dim), k and v (tokens, kv_heads, head_dim), query head h reads key/value
    head h // (q_heads // kv_heads); sequence b is tokens cu_seqlens[b] .. cu_seqlens[b+1] - 1
    (int32), max_seqlen its longest length. causal: a token sees its sequence up to itself."""
    ### BEGIN SOLUTION
    tokens, q_heads, head_dim = q.shape
    kv_heads = k.shape[1]
    assert k.shape == v.shape == (tokens, kv_heads, head_dim), \
        f"k and v must be ({tokens}, kv_heads, {head_dim}), got {tuple(k.shape)} and {tuple(v.shape)}"
    assert q_heads % kv_heads == 0, f"q_heads ({q_heads}) must be a multiple of kv_heads ({kv_heads})"
    assert head_dim in (16, 32, 64, 128), f"head_dim must be 16, 32, 64 or 128, got {head_dim}"
    assert q.dtype == k.dtype == v.dtype, f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
    assert cu_seqlens.dtype == torch.int32 and cu_seqlens.ndim == 1, "cu_seqlens must be a 1-D int32 tensor"
    # Any token and head strides go to the kernel; only a head's own elements must be adjacent.
    q, k, v = (t if t.stride(2) == 1 else t.contiguous() for t in (q, k, v))
    out = q.new_empty((tokens, q_heads, head_dim))
    sequences = cu_seqlens.numel() - 1
    args = (out, q, k, v, cu_seqlens, *q.stride()[:2], *k.stride()[:2], *v.stride()[:2],
            head_dim ** -0.5 * LOG2_E, max_seqlen, sequences * q_heads)
    meta = dict(GROUP=q_heads // kv_heads, HEAD_DIM=head_dim, CAUSAL=bool(causal))
    if q.is_cuda:
        grid = lambda cfg: (triton.cdiv(max_seqlen, cfg["BLOCK_M"]), q_heads, sequences)
        varlen_tuned[grid](*args, **meta)
    else:
        grid = (triton.cdiv(max_seqlen, INTERPRETER_BLOCK), q_heads, sequences)
        varlen_kernel[grid](*args, **meta, BLOCK_M=INTERPRETER_BLOCK, BLOCK_N=INTERPRETER_BLOCK)
    return out
    ### END SOLUTION
