"""Problem set 5: attention over a packed batch of sequences of different lengths, with
grouped-query heads, as an inference server runs prefill."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch
import torch.nn.functional as F

from ..spec import Case, Exercise, Throughput

_F16, _BF16 = torch.float16, torch.bfloat16

LARGE_SCORES = 50.0
"""What ``values="large"`` multiplies q by: scores reach ±200, and exp overflows float32 past
88.7, so a kernel that skips the running max returns inf / inf = NaN there."""


@dataclass(frozen=True)
class VarlenCase(Case):
    """A :class:`Case` whose ``shape`` is the sequence lengths, packed one after another (a
    length may be 0), with the heads and the flag that complete the call."""

    q_heads: int = 1
    kv_heads: int = 1
    """Query head h reads key/value head h // (q_heads // kv_heads)."""
    head_dim: int = 16
    causal: bool = False
    """Passed as ``causal``: token i of a sequence attends to tokens 0..i of the same sequence."""

    @property
    def lengths(self) -> tuple[int, ...]:
        return self.shape

    @property
    def label(self) -> str:
        lens = self.lengths
        same = len(lens) > 1 and len(set(lens)) == 1
        text = f"lens {len(lens)}×{lens[0]}" if same else "lens " + "+".join(map(str, lens))
        text += f" h{self.q_heads}/{self.kv_heads} d{self.head_dim} {str(self.dtype).removeprefix('torch.')}"
        extras = [self.strided and "strided", self.values != "normal" and self.values, self.causal and "causal"]
        return " ".join([text, *filter(None, extras)])


def case(lengths: tuple[int, ...], heads: tuple[int, int], head_dim: int, dtype=torch.float32, **extra) -> VarlenCase:
    """``case((1, 77, 300), (8, 2), 64, torch.float16, causal=True)``: heads is (q_heads, kv_heads)."""
    return VarlenCase(tuple(lengths), dtype, q_heads=heads[0], kv_heads=heads[1], head_dim=head_dim, **extra)


def varlen_reference(q, k, v, cu_seqlens, max_seqlen, causal=False) -> torch.Tensor:
    """SDPA once per sequence, on (1, heads, len, head_dim) views; ``enable_gqa`` (PyTorch 2.5,
    the course's floor) shares each key/value head among its group of query heads."""
    out = q.new_empty(q.shape)
    bounds = cu_seqlens.tolist()
    for start, stop in zip(bounds, bounds[1:]):
        if stop > start:
            q_s, k_s, v_s = (t[start:stop].transpose(0, 1)[None] for t in (q, k, v))
            attended = F.scaled_dot_product_attention(q_s, k_s, v_s, is_causal=causal, enable_gqa=True)
            out[start:stop] = attended[0].transpose(0, 1)
    return out


def varlen_inputs(case: VarlenCase, generator: torch.Generator, device: str):
    """(q, k, v, cu_seqlens, max_seqlen, causal): standard-normal q, k, v (q times
    ``LARGE_SCORES`` for ``values="large"``), cut from one (tokens, q_heads + 2·kv_heads,
    head_dim) tensor as a fused QKV projection returns them; contiguous copies unless
    ``strided``, where a token's row of q, k or v is (q_heads + 2·kv_heads)·head_dim apart."""
    qh, kvh, dim = case.q_heads, case.kv_heads, case.head_dim
    packed = torch.randn((sum(case.lengths), qh + 2 * kvh, dim), generator=generator, device=generator.device)
    if case.values == "large":
        packed[:, :qh] *= LARGE_SCORES
    elif case.values != "normal":
        raise ValueError(f"unknown values={case.values!r}")
    q, k, v = packed.to(device, case.dtype).split([qh, kvh, kvh], dim=1)
    if not case.strided:
        q, k, v = (t.contiguous() for t in (q, k, v))
    cu_seqlens = torch.tensor([0, *accumulate(case.lengths)], dtype=torch.int32, device=device)
    return q, k, v, cu_seqlens, max(case.lengths), case.causal


def varlen_flops(inputs, output) -> int:
    """4·Σ len²·q_heads·head_dim: Q·Kᵀ and P·V, 2·len²·head_dim each per head and sequence;
    half of it when causal."""
    q, cu_seqlens, causal = inputs[0], inputs[3], inputs[5]
    lengths = cu_seqlens.diff().tolist()
    flops = 4 * sum(n * n for n in lengths) * q.shape[1] * q.shape[2]
    return flops // 2 if causal else flops


# (atol, rtol) against float64 SDPA, those of lesson 8's kernel: a sequence here is one
# (batch, head) there, and a shared key/value head is read, not summed, so the error per
# output is the same. float32: a score is a float32 dot of up to 128 products and exp
# amplifies its rounding, so rtol is 1e-5, some 80 ulps; the large cases (scores of ±200,
# whose rounding alone moves exp by 1e-5) are float16. float16: the output's own rounding is
# 2**-11 = 4.9e-4 relative, and P is rounded to float16 for the P·V product, ±2**-11 of every
# weight, which leaves up to 3e-4 absolute on outputs near 0. bfloat16 keeps 8 bits: 2**-8
# relative for the output, and P's rounding up to 1.2e-3 absolute. Attending across a
# sequence boundary, to the wrong key/value head or past the diagonal is off by 1e-2 or more.
VARLEN_TOLERANCES = {torch.float32: (1e-5, 1e-5), _F16: (1e-3, 1e-3), _BF16: (5e-3, 1.6e-2)}

# The interpreter runs one program at a time, in blocks of 16: the CPU cases stay at a few
# hundred programs that do work (a program past its sequence's end returns at once). A single
# token; one sequence (lesson 8's case, seen through cu_seqlens); 1 + 77 + 300, lengths of
# one, five and nineteen blocks side by side, and 200 + 1 + 77, the longest first; an empty
# sequence and whole blocks (48); every head_dim; MHA (h2/2), GQA (h6/2) and MQA (h2/1,
# h4/1); causal and not; scores of ±200; the packed QKV views. Every visible case but the single sequences has two or more non-empty
# sequences, and every non-causal one a ragged sequence, where the mistakes show.
_CPU = (case((1,), (1, 1), 16), case((77,), (2, 2), 32, causal=True),
        case((1, 77, 300), (2, 1), 64, _F16, causal=True), case((200, 1, 77), (2, 2), 32, _F16),
        case((33, 0, 48, 5), (4, 1), 128, _F16), case((50, 31), (2, 2), 16, _F16, values="large", causal=True),
        case((20, 45, 17), (6, 2), 32, strided=True, causal=True), case((40, 9), (2, 1), 64, strided=True))
# The GPU's are 16-bit (tl.dot on float32 uses TF32 there) and reach 4096 tokens per sequence,
# with the CPU's edges at that size: a lone token, empty sequences, ragged ends, large scores.
_GPU = (case((1,), (2, 2), 64, _BF16), case((1, 77, 300), (8, 2), 64, _F16, causal=True),
        case((1000, 3000, 17, 4096), (16, 4), 128, _BF16, causal=True), case((4096, 4096), (8, 8), 64, _F16),
        case((513, 0, 2000), (8, 1), 128, _BF16), case((500, 700), (4, 2), 16, _BF16, values="large"),
        case((777, 1000, 1), (12, 4), 64, _F16, strided=True, causal=True),
        case((33, 1000, 257), (4, 4), 32, _BF16, strided=True))

EXERCISE = Exercise(
    name="ps5_varlen_attention",
    function="attention_varlen",
    signature="attention_varlen(q, k, v, cu_seqlens, max_seqlen, causal=False) -> torch.Tensor",
    reference=varlen_reference,
    make_inputs=varlen_inputs,
    solution="solutions.varlen_attention",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
    # Four prompts of 4096 tokens, Llama-3-8B's heads (32 query, 8 key/value, head_dim 128).
    # Causal: a kernel that computes the blocks past the diagonal and masks them does twice
    # the work, about 0.5× SDPA at best, under the threshold.
    throughput=Throughput(case=case((4096,) * 4, (32, 8), 128, _BF16, causal=True), threshold=0.6,
                          baseline="F.scaled_dot_product_attention per sequence", flops=varlen_flops),
    tolerances=VARLEN_TOLERANCES,
    edge=lambda case: max(case.lengths) <= 1,  # a lone token attends to itself: the output is v
    points={"correctness": 4, "hidden": 4, "throughput": 2},
)
