"""Problem set 5, varlen attention: the reference against float64 SDPA on every case, the
declaration's inputs and labels, plausible wrong kernels failing exactly the cases that expose
them, host reads of cu_seqlens and PyTorch in the wrapper turned away, and (on a GPU) the
speed against SDPA per sequence."""
import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from autograder import check
from autograder.assignments.ps5_varlen_attention import EXERCISE, case, varlen_flops, varlen_inputs, varlen_reference
from solutions.varlen_attention import (GPU_CONFIGS, HIDDEN_CASES, INTERPRETER_BLOCK, LOG2_E, SHORT_CONFIG, TUNED_FROM,
                                       attention_varlen, untimed_when_short, varlen_kernel)

from conftest import DEVICE

DEV = DEVICE.device
# The wrong kernels' rows past a sequence's end divide 0 by 0 in the interpreter's NumPy (never stored).
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")


def inputs_of(c, seed=0, device=DEV):
    return varlen_inputs(c, torch.Generator().manual_seed(seed), device)


def starts(c):
    """(start, length) of every sequence of a case."""
    out, at = [], 0
    for n in c.lengths:
        out.append((at, n))
        at += n
    return out


# --- the declaration --------------------------------------------------------------------------

def test_label_reads_like_the_call():
    assert case((1, 77, 300), (8, 2), 64, torch.float16, causal=True).label == "lens 1+77+300 h8/2 d64 float16 causal"
    assert case((4096,) * 4, (32, 8), 128, torch.bfloat16).label == "lens 4×4096 h32/8 d128 bfloat16"
    assert case((5,), (2, 1), 16, strided=True, values="large").label == "lens 5 h2/1 d16 float32 strided large"


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
def test_inputs_are_packed_sequences_with_grouped_heads(strided):
    q, k, v, cu, max_seqlen, causal = inputs_of(case((3, 0, 20), (6, 2), 32, strided=strided, causal=True))
    assert q.shape == (23, 6, 32) and k.shape == v.shape == (23, 2, 32) and q.dtype == torch.float32
    assert cu.dtype == torch.int32 and cu.tolist() == [0, 3, 3, 23] and max_seqlen == 20 and causal is True
    if strided:  # the thirds of one (tokens, 6 + 2 + 2, 32) projection: every token row 320 elements apart
        assert all(t.stride() == (320, 32, 1) for t in (q, k, v))
        assert k.untyped_storage().data_ptr() == q.untyped_storage().data_ptr()
    else:
        assert all(t.is_contiguous() for t in (q, k, v))


def test_reference_is_block_diagonal_attention_over_all_tokens():
    # One attention over every token with a mask that keeps each token in its own sequence
    # (and, causal, before itself), the kv heads repeated for their query heads.
    for causal in (False, True):
        q, k, v, cu, max_seqlen, _ = (t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                                      for t in inputs_of(case((5, 0, 9, 1), (4, 2), 16), device="cpu"))
        seq_of = torch.repeat_interleave(torch.arange(4), cu.diff())
        pos = torch.arange(len(seq_of))
        allowed = seq_of[:, None] == seq_of[None, :]
        if causal:
            allowed &= pos[None, :] <= pos[:, None]
        heads_first = [t.transpose(0, 1) for t in (q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1))]
        expected = F.scaled_dot_product_attention(*heads_first, attn_mask=allowed).transpose(0, 1)
        torch.testing.assert_close(varlen_reference(q, k, v, cu, max_seqlen, causal), expected)


def test_flops_count_each_sequence_and_halve_when_causal():
    full = inputs_of(case((3, 0, 20), (6, 2), 32), device="cpu")
    causal = inputs_of(case((3, 0, 20), (6, 2), 32, causal=True), device="cpu")
    assert varlen_flops(full, None) == 4 * (9 + 400) * 6 * 32 == 2 * varlen_flops(causal, None)


def test_cases_cover_lengths_heads_and_head_dims():
    for device in ("cpu", "cuda"):
        for cases in (EXERCISE.cases("visible", device), HIDDEN_CASES[device]):
            assert {c.causal for c in cases} == {False, True}
            assert {c.kv_heads == c.q_heads for c in cases} == {False, True}  # MHA and grouped
            assert any(c.kv_heads == 1 < c.q_heads for c in cases)  # MQA
            assert any(0 in c.lengths for c in cases) and any(1 in c.lengths for c in cases)
            assert any(c.strided for c in cases) and any(c.values == "large" for c in cases)
            assert any(sum(n > 0 for n in c.lengths) > 1 and not c.causal and any(n % 16 for n in c.lengths)
                       for c in cases)
        assert {c.head_dim for c in EXERCISE.cases("visible", device)} == {16, 32, 64, 128}
    assert {c.dtype for c in EXERCISE.cases("visible", "cuda")} <= {torch.float16, torch.bfloat16}
    assert max(max(c.lengths) for c in EXERCISE.cases("visible", "cuda")) == 4096
    hidden = [c.label for c in HIDDEN_CASES["cpu"]]
    assert len(set(hidden)) < len(hidden)  # one shape twice, on fresh data
    assert "causal" in EXERCISE.throughput.case.label


def test_only_long_batches_are_tuned_and_short_ones_compile_small_blocks():
    assert untimed_when_short(GPU_CONFIGS, {"max_seqlen": TUNED_FROM - 1}) == [SHORT_CONFIG]
    assert untimed_when_short(GPU_CONFIGS, {"max_seqlen": TUNED_FROM}) == GPU_CONFIGS
    assert SHORT_CONFIG.kwargs == {"BLOCK_M": 32, "BLOCK_N": 32}  # tl.dot needs 16 or more


# --- the reference kernel ---------------------------------------------------------------------

@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_reference_passes_its_own_checks(which):
    result = check(EXERCISE, attention_varlen, cases=which, measure_throughput=False, verbose=False)
    assert result.correct, result.summary()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN arithmetic in the interpreter's NumPy
def test_a_sequence_never_loads_its_neighbours_tokens():
    # NaN in the keys and values of the first and last sequence: the middle one's outputs
    # stay right only if no program of it loads them (a masked score times NaN is still NaN).
    c = case((20, 37, 23), (2, 1), 32, torch.float16)
    q, k, v, cu, max_seqlen, _ = inputs_of(c)
    for t in (k, v):
        t[:20], t[57:] = float("nan"), float("nan")
    for causal in (False, True):
        out = attention_varlen(q, k, v, cu, max_seqlen, causal)[20:57]
        middle = (t[20:57].double() for t in (q, k, v))
        expected = varlen_reference(*middle, torch.tensor([0, 37], dtype=torch.int32), 37, causal)
        torch.testing.assert_close(out.double(), expected.to(out.device), atol=1e-3, rtol=1e-3)


# --- wrong kernels ------------------------------------------------------------------------------

# The mistakes students make here, on a plain kernel (every key block masked) that is right
# with every flag off: WHOLE_BATCH treats the packed tokens as one sequence, SAME_HEAD reads
# kv head h for query head h, GLOBAL_CAUSAL compares key positions within the sequence with
# the query's position in the whole batch, NO_KEY_MASK masks the loads past the sequence's end
# but not their scores (they count as 0).
@triton.jit
def _flawed_kernel(out_ptr, q_ptr, k_ptr, v_ptr, cu_ptr, q_row, k_row, v_row, tokens, qk_scale,
                   GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, BLOCK: tl.constexpr,
                   WHOLE_BATCH: tl.constexpr, SAME_HEAD: tl.constexpr, GLOBAL_CAUSAL: tl.constexpr,
                   NO_KEY_MASK: tl.constexpr):
    head = tl.program_id(1)
    if WHOLE_BATCH:
        start = 0
        seq_len = tokens
    else:
        start = tl.load(cu_ptr + tl.program_id(2))
        seq_len = tl.load(cu_ptr + tl.program_id(2) + 1) - start
    kv = head if SAME_HEAD else head // GROUP
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + (start + rows[:, None]) * q_row + head * HEAD_DIM + dims[None, :],
                mask=rows[:, None] < seq_len, other=0.0)
    acc = tl.zeros((BLOCK, HEAD_DIM), tl.float32)
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK,), tl.float32)
    stop = tl.minimum((tl.program_id(0) + 1) * BLOCK, seq_len) if CAUSAL else seq_len
    for first in range(0, stop, BLOCK):
        keys = first + tl.arange(0, BLOCK)
        inside = keys[:, None] < seq_len
        k = tl.load(k_ptr + (start + keys[:, None]) * k_row + kv * HEAD_DIM + dims[None, :], mask=inside, other=0.0)
        v = tl.load(v_ptr + (start + keys[:, None]) * v_row + kv * HEAD_DIM + dims[None, :], mask=inside, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        if not NO_KEY_MASK:
            s = tl.where(keys[None, :] < seq_len, s, float("-inf"))
        if CAUSAL:
            s = tl.where(keys[None, :] <= rows[:, None] + (start if GLOBAL_CAUSAL else 0), s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        l = l * tl.exp2(m - m_new) + tl.sum(p, axis=1)
        acc = acc * tl.exp2(m - m_new)[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    tl.store(out_ptr + (start + rows[:, None]) * (tl.num_programs(1) * HEAD_DIM) + head * HEAD_DIM + dims[None, :],
             (acc / l[:, None]).to(out_ptr.dtype.element_ty), mask=rows[:, None] < seq_len)


def flawed(**flaw):
    flags = {"WHOLE_BATCH": False, "SAME_HEAD": False, "GLOBAL_CAUSAL": False, "NO_KEY_MASK": False, **flaw}

    def attention_varlen(q, k, v, cu_seqlens, max_seqlen, causal=False):
        q, k, v = (t.contiguous() for t in (q, k, v))
        tokens, q_heads, head_dim = q.shape
        out = torch.empty_like(q)
        longest, sequences = (tokens, 1) if flags["WHOLE_BATCH"] else (max_seqlen, cu_seqlens.numel() - 1)
        grid = (triton.cdiv(longest, INTERPRETER_BLOCK), q_heads, sequences)
        _flawed_kernel[grid](out, q, k, v, cu_seqlens, q.stride(0), k.stride(0), v.stride(0), tokens,
                             head_dim ** -0.5 * LOG2_E, GROUP=q_heads // k.shape[1], HEAD_DIM=head_dim,
                             CAUSAL=causal, BLOCK=INTERPRETER_BLOCK, **flags)
        return out

    return attention_varlen


def reads_lengths_on_the_host(q, k, v, cu_seqlens, max_seqlen, causal=False):
    """Right, but works out the grid from cu_seqlens on the host: a GPU-to-CPU copy and a
    synchronisation per call, which the kernel does not need (it reads cu_seqlens itself)."""
    bounds = cu_seqlens.tolist()
    longest = max(b - a for a, b in zip(bounds, bounds[1:]))
    out = torch.empty_like(q.contiguous())
    q_heads, head_dim = q.shape[1:]
    varlen_kernel[(triton.cdiv(longest, 16), q_heads, len(bounds) - 1)](
        out, q, k, v, cu_seqlens, *q.stride()[:2], *k.stride()[:2], *v.stride()[:2], head_dim ** -0.5 * LOG2_E,
        longest, 0, GROUP=q_heads // k.shape[1], HEAD_DIM=head_dim, CAUSAL=causal, BLOCK_M=16, BLOCK_N=16)
    return out


def failed(fn) -> dict[str, str]:
    result = check(EXERCISE, fn, measure_throughput=False, verbose=False)
    return {c.label: c.message for c in result.cases if not c.passed}


def visible(condition) -> set[str]:
    """The labels of the visible cases that meet ``condition``: never none, or a flaw could hide."""
    labels = {c.label for c in EXERCISE.cases("visible", DEV) if condition(c)}
    assert labels, "no visible case to catch this flaw"
    return labels


def several_sequences(c) -> bool:
    return sum(n > 0 for n in c.lengths) > 1


cpu_only = pytest.mark.skipif(DEVICE.has_gpu, reason="the wrong kernels run in blocks of 16, the interpreter's")


@cpu_only
def test_the_flawed_kernel_with_nothing_switched_off_passes():
    assert failed(flawed()) == {}


@cpu_only
def test_one_attention_over_the_whole_batch_fails_every_case_of_several_sequences():
    assert failed(flawed(WHOLE_BATCH=True)).keys() == visible(several_sequences)


@cpu_only
def test_ignoring_the_head_groups_fails_the_gqa_and_mqa_cases():
    # Query head h ≥ kv_heads lands in other tokens' heads, or past the end of k: either a
    # mismatch or an out-of-bounds access.
    assert failed(flawed(SAME_HEAD=True)).keys() == visible(lambda c: c.kv_heads < c.q_heads)


@cpu_only
def test_a_causal_mask_on_batch_positions_fails_causal_cases_past_the_first_sequence():
    later = lambda c: any(start > 0 and n > 1 for start, n in starts(c))  # noqa: E731
    assert failed(flawed(GLOBAL_CAUSAL=True)).keys() == visible(lambda c: c.causal and later(c))


@cpu_only
def test_a_missing_key_mask_fails_the_ragged_cases_that_are_not_causal():
    # The keys past a sequence's end score q·0 = 0; a causal query never reaches them.
    assert failed(flawed(NO_KEY_MASK=True)).keys() == visible(lambda c: not c.causal and any(n % 16 for n in c.lengths))


def test_reading_cu_seqlens_on_the_host_is_reported():
    messages = failed(reads_lengths_on_the_host)
    assert messages.keys() == visible(lambda c: True)
    assert all("Tensor.tolist()" in m for m in messages.values()), messages


def test_sdpa_in_the_wrapper_is_rejected():
    messages = failed(varlen_reference)
    assert messages.keys() == visible(lambda c: True)
    assert all("computed with PyTorch" in m and "scaled_dot_product" in m for m in messages.values()), messages


# --- on a GPU: speed against SDPA per sequence ----------------------------------------------------

@pytest.mark.gpu
def test_reference_passes_the_gpu_cases_and_the_throughput_threshold():
    hidden = check(EXERCISE, attention_varlen, cases="hidden", measure_throughput=False, verbose=False)
    assert hidden.correct, hidden.summary()
    result = check(EXERCISE, attention_varlen, verbose=False)  # the visible cases, then the speed
    assert result.correct, result.summary()
    assert result.throughput.passed, result.throughput.message
