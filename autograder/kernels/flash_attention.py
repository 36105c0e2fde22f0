"""Lesson 8's FlashAttention forward: softmax(Q·Kᵀ·scale)·V without the scores leaving the chip.

``naive_attention`` is the unfused PyTorch version: it writes the (seq × seq) score matrix of
every head to memory and reads it back. ``attention`` never stores it: one program owns a block of ``BLOCK_M`` queries of one
(batch, head) and loops over blocks of ``BLOCK_N`` keys, keeping lesson 5's online softmax for
every query row (a running max ``m``, a running sum ``l`` of exp(s - m)) and an output
accumulator rescaled by exp(m_old - m_new) whenever the max grows. Causal attention stops the
loop at the diagonal.
"""
import torch
import triton
import triton.language as tl

from autograder.language import say

# --- notebook cell: naive_attention ---
def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """softmax(q·kᵀ / sqrt(head_dim))·v in four PyTorch operations, each its own kernel.

    For (batch, heads, seq, head_dim) inputs, B·H·seq² scores pass through memory six
    times: the matmul writes them, the scaling reads and writes them, the softmax reads them
    and writes the probabilities, and the second matmul reads those (causal: the mask adds
    another read and write).
    """
    scores = q @ k.transpose(-2, -1)
    scores = scores * q.shape[-1] ** -0.5
    if causal:
        seq = q.shape[-2]
        future = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


# --- notebook cell: attention ---
LOG2_E = 1.4426950408889634  # exp(x) = exp2(x·log2 e), and exp2 is the GPU's native instruction


@triton.jit
def fold_key_blocks(acc, m, l, q, k_head, v_head, rows, start, stop, seq_len, qk_scale,
                    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                    CAUSAL: tl.constexpr):
    """Fold keys [start, stop) into one query block's state: the output accumulator ``acc``
    (BLOCK_M × HEAD_DIM), the running max ``m`` and sum ``l`` (one per query row), all float32
    and in base 2. Only MASKED blocks may hold keys past seq_len or (CAUSAL) after a query."""
    dims = tl.arange(0, HEAD_DIM)
    for block in range(start, stop, BLOCK_N):
        keys = block + tl.arange(0, BLOCK_N)
        offsets = keys[:, None] * HEAD_DIM + dims[None, :]
        if MASKED:
            k = tl.load(k_head + offsets, mask=keys[:, None] < seq_len, other=0.0)
        else:
            k = tl.load(k_head + offsets)  # no predicate: these blocks are whole
        s = tl.dot(q, tl.trans(k))  # raw scores, float32 (tl.dot accumulates in it)
        if MASKED:
            visible = keys[None, :] < seq_len
            if CAUSAL:
                visible = visible & (keys[None, :] <= rows[:, None])
            s = tl.where(visible, s, float("-inf"))
        # Lesson 5's update, once per query row, in base 2: qk_scale = sm_scale·log2(e) > 0,
        # so the max of the scaled scores is the scaled max, and s·qk_scale - m_new is one
        # fused multiply-add per score. Key 0 is in the first block every row folds, so m is
        # finite from then on: no -inf guard is needed.
        m_new = tl.maximum(m, tl.max(s, axis=1) * qk_scale)
        rescale = tl.exp2(m - m_new)  # 0 on the first block, where m = -inf
        p = tl.exp2(s * qk_scale - m_new[:, None])
        l = l * rescale + tl.sum(p, axis=1)
        if MASKED:
            v = tl.load(v_head + offsets, mask=keys[:, None] < seq_len, other=0.0)
        else:
            v = tl.load(v_head + offsets)
        # acc holds Σ exp(s - m)·v: the same rescale as l. P goes to the tensor cores in the
        # inputs' 16-bit type, as FlashAttention does; the rescaled acc is the dot's float32
        # accumulator, so the tensor cores add the product into it in place.
        acc = tl.dot(p.to(v.dtype), v, acc * rescale[:, None])
        m = m_new
    return acc, m, l


# seq_len and batch_heads unspecialised: Triton would otherwise compile apart values divisible
# by 16 and the rest (and 1), doubling what the tuner compiles; the addresses' alignment comes
# from HEAD_DIM, a constexpr, alone.
@triton.jit(do_not_specialize=["seq_len", "batch_heads"])
def attention_kernel(out_ptr, q_ptr, k_ptr, v_ptr, seq_len, batch_heads, qk_scale, HEAD_DIM: tl.constexpr,
                     CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program (query block, batch·head): BLOCK_M rows of the output of one head.

    ``batch_heads`` (batch × heads, the grid's second axis) is read only by the autotuner's key."""
    # Causal query blocks differ in work (block i folds i + 1 key blocks): counting them down
    # starts the longest first, so the GPU ends on short programs.
    q_block = tl.num_programs(0) - 1 - tl.program_id(0)
    # int64: at batch 16, 32 heads, seq 65,536 and head_dim 128, offsets reach 2**32.
    head = tl.program_id(1).to(tl.int64) * seq_len * HEAD_DIM
    rows = q_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offsets = rows[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    q = tl.load(q_ptr + head + offsets, mask=rows[:, None] < seq_len, other=0.0)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)
    # Keys below `split` need no mask: they exist, and (causal) come before every query of
    # the block. From `split` to `stop` masks apply. Causal blocks stop after the block's
    # last query: the key blocks past the diagonal are never loaded.
    if CAUSAL:
        split = (q_block * BLOCK_M) // BLOCK_N * BLOCK_N
        stop = tl.minimum((q_block + 1) * BLOCK_M, seq_len)
    else:
        split = seq_len // BLOCK_N * BLOCK_N
        stop = seq_len
    acc, m, l = fold_key_blocks(acc, m, l, q, k_ptr + head, v_ptr + head, rows, 0, split, seq_len,
                                qk_scale, HEAD_DIM, BLOCK_N, False, CAUSAL)
    acc, m, l = fold_key_blocks(acc, m, l, q, k_ptr + head, v_ptr + head, rows, split, stop, seq_len,
                                qk_scale, HEAD_DIM, BLOCK_N, True, CAUSAL)
    out = acc / l[:, None]
    tl.store(out_ptr + head + offsets, out.to(out_ptr.dtype.element_ty), mask=rows[:, None] < seq_len)


# On a GPU the launch picks the fastest of these per (seq_len, batch·heads, head_dim, causal),
# timing each on the first call: the best tiles for 2 heads (a few dozen programs on 132 SMs)
# are not the best for 128, so the number of heads is in the key. Larger blocks reuse each
# loaded K/V block for more queries, but 128 × 128 at head_dim 128 with several stages may want
# more than an SM's 228 KB of shared memory: the tuner skips a configuration that does not fit.
GPU_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages)
               for bm, bn, warps, stages in [(64, 64, 4, 4), (128, 64, 4, 3), (128, 64, 8, 3), (128, 64, 8, 4),
                                             (128, 128, 8, 2), (128, 128, 8, 3)]]
TUNED_FROM_SEQ = 1024
"""Shorter sequences take the first configuration untimed: their launch is too short for the
choice to matter, and each configuration tried is one more compile (seconds) per head_dim,
dtype and causal flag, which a correctness check over many small cases would pay in full."""


def short_sequences_untuned(configs, named_args, **kwargs):
    return configs if named_args["seq_len"] >= TUNED_FROM_SEQ else configs[:1]


attention_tuned = triton.autotune(GPU_CONFIGS, key=["seq_len", "batch_heads", "HEAD_DIM", "CAUSAL"],
                                  prune_configs_by={"early_config_prune": short_sequences_untuned})(attention_kernel)
INTERPRETER_BLOCK = 16
"""The interpreter's one configuration: timing configurations there would time NumPy, and
small blocks put several blocks, and so several rescales, into short test sequences."""


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              sm_scale: float | None = None) -> torch.Tensor:
    """softmax(q·kᵀ·sm_scale)·v for (batch, heads, seq, head_dim) tensors, sm_scale defaulting
    to 1/sqrt(head_dim); causal: query i attends to keys 0..i only."""
    assert q.ndim == 4 and q.shape == k.shape == v.shape, say(
        "q, k, v must share one (batch, heads, seq, head_dim) shape, got {q}, {k}, {v}", q=q.shape, k=k.shape, v=v.shape)
    assert q.dtype == k.dtype == v.dtype, say("q, k, v must share a dtype, got {q}, {k}, {v}",
                                              q=q.dtype, k=k.dtype, v=v.dtype)
    batch, heads, seq_len, head_dim = q.shape
    assert head_dim in (16, 32, 64, 128), say("head_dim must be 16, 32, 64 or 128, got {head_dim}", head_dim=head_dim)
    q, k, v = (t.contiguous() for t in (q, k, v))  # each head one (seq, head_dim) block, rows adjacent
    out = torch.empty_like(q)
    scale = head_dim ** -0.5 if sm_scale is None else sm_scale
    assert scale > 0, say("sm_scale must be positive, got {sm_scale}", sm_scale=sm_scale)
    args = (out, q, k, v, seq_len, batch * heads, scale * LOG2_E)
    if q.is_cuda:
        grid = lambda meta: (triton.cdiv(seq_len, meta["BLOCK_M"]), batch * heads)
        attention_tuned[grid](*args, HEAD_DIM=head_dim, CAUSAL=bool(causal))
    else:
        grid = (triton.cdiv(seq_len, INTERPRETER_BLOCK), batch * heads)
        attention_kernel[grid](*args, HEAD_DIM=head_dim, CAUSAL=bool(causal),
                               BLOCK_M=INTERPRETER_BLOCK, BLOCK_N=INTERPRETER_BLOCK)
    return out
