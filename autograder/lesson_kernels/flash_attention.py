"""Lesson 8's FlashAttention forward, causal and not, for any sequence length."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..spec import Case, Exercise, Throughput

_F16, _BF16 = torch.float16, torch.bfloat16

LARGE_SCORES = 50.0
"""What ``values="large"`` multiplies q by: scores reach ±200, and exp overflows float32 past
88.7, so a kernel that skips the running max returns inf / inf = NaN there."""


@dataclass(frozen=True)
class AttentionCase(Case):
    """A :class:`Case` whose ``shape`` is (batch, heads, seq, head_dim), with the two
    arguments that follow q, k and v in the call."""

    causal: bool = False
    """Passed as ``causal``: query i attends to keys 0..i only."""
    sm_scale: float | None = None
    """Passed as ``sm_scale``; None means the default, 1/sqrt(head_dim)."""

    @property
    def label(self) -> str:
        scale = "" if self.sm_scale is None else f" sm_scale={self.sm_scale:g}"
        return super().label + (" causal" if self.causal else "") + scale


def attention_reference(q, k, v, causal: bool, sm_scale: float | None) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)


def attention_inputs(case: AttentionCase, generator: torch.Generator, device: str):
    """(q, k, v, causal, sm_scale): standard-normal q, k, v (q times ``LARGE_SCORES`` for
    ``values="large"``); ``strided``: q, k and v are the thirds of one packed
    (..., 3·head_dim) tensor, as a fused QKV projection returns them, so their rows are
    3·head_dim elements apart."""
    batch, heads, seq, head_dim = case.shape
    packed = torch.randn((batch, heads, seq, 3 * head_dim), generator=generator, device=generator.device)
    if case.values == "large":
        packed[..., :head_dim] *= LARGE_SCORES
    elif case.values != "normal":
        raise ValueError(f"unknown values={case.values!r}")
    q, k, v = packed.to(device, case.dtype).chunk(3, dim=-1)
    if not case.strided:
        q, k, v = (t.contiguous() for t in (q, k, v))
    return q, k, v, case.causal, case.sm_scale


def attention_flops(inputs, output) -> int:
    """4·B·H·S²·D: two matmuls (Q·Kᵀ and P·V) of 2·S²·D each per head; half of it when causal."""
    q, causal = inputs[0], inputs[3]
    batch, heads, seq, head_dim = q.shape
    flops = 4 * batch * heads * seq * seq * head_dim
    return flops // 2 if causal else flops


# (atol, rtol) against float64 SDPA; the reference kernel used at most 0.4 of each over 40
# seeds of the CPU cases. float32: a score is a float32 dot of up to 128 products and exp
# amplifies its rounding, so rtol is 1e-5, some 80 ulps; the large cases (scores of ±200,
# whose rounding alone moves exp by 1e-5) are float16. float16: the output's own rounding is
# 2**-11 = 4.9e-4 relative, and P is rounded to float16 for the P·V product, ±2**-11 of
# every weight, which leaves up to 3e-4 absolute on outputs near 0. bfloat16 keeps 8 bits:
# 2**-8 relative for the output, and P's rounding, emulated on the CPU, up to 1.2e-3
# absolute. A missing rescale, an off-by-one causal mask or a missing sequence mask is off
# by 1e-2 or far more.
ATTENTION_TOLERANCES = {torch.float32: (1e-5, 1e-5), _F16: (1e-3, 1e-3), _BF16: (5e-3, 1.6e-2)}

C = AttentionCase
# The interpreter runs one program at a time, so CPU cases stay at a few hundred programs:
# seq 1, ragged lengths (33, 45, 77, 129: the last key block part empty) and whole blocks
# (48, 64), every head_dim the kernel takes, causal and not. The GPU cases are float16 and
# bfloat16 only: tl.dot on float32 inputs uses TF32 there (10 significant bits).
_CPU = (C((1, 1, 1, 16)), C((1, 2, 77, 32)), C((1, 2, 77, 32), causal=True),
        C((2, 1, 64, 64), _F16, causal=True), C((1, 1, 40, 128), _F16),
        C((1, 2, 50, 16), _F16, values="large", causal=True), C((1, 1, 33, 32), strided=True, sm_scale=0.3))
_GPU = (C((1, 2, 1, 64), _BF16), C((1, 2, 1, 128), _F16, causal=True), C((2, 4, 77, 32), _F16, causal=True),
        C((2, 4, 1000, 64), _BF16, causal=True), C((1, 4, 1000, 128), _F16),
        C((1, 2, 4096, 128), _BF16, causal=True), C((2, 2, 4096, 64), _F16),
        C((1, 4, 500, 16), _BF16, values="large"), C((1, 2, 777, 64), _F16, strided=True, causal=True, sm_scale=0.1))

EXERCISE = Exercise(
    name="flash_attention",
    function="attention",
    signature="attention(q, k, v, causal=False, sm_scale=None) -> torch.Tensor",
    reference=attention_reference,
    make_inputs=attention_inputs,
    solution="autograder.kernels.flash_attention",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
    throughput=Throughput(case=C((4, 16, 4096, 64), _BF16, causal=True), threshold=0.6,
                          baseline="F.scaled_dot_product_attention", flops=attention_flops),
    tolerances=ATTENTION_TOLERANCES,
)
