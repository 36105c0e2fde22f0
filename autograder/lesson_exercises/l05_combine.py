"""Lesson 5's exercise: merge two partial softmax states (m1, s1) and (m2, s2) in Triton.

A state (m, s) summarises a stretch of a row: m is its maximum and s = Σ exp(x - m). The
merged state has m = max(m1, m2) and s = s1·exp(m1 - m) + s2·exp(m2 - m); students return s.
"""
from __future__ import annotations

import torch

from ..spec import DEFAULT_TOLERANCES, Case, Exercise


def combine_reference(m1: torch.Tensor, s1: torch.Tensor, m2: torch.Tensor, s2: torch.Tensor) -> torch.Tensor:
    """The merged sum; where both states are empty (m = -inf, s = 0) it is 0, not NaN."""
    m = torch.maximum(m1, m2)
    shift = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    return s1 * torch.exp(m1 - shift) + s2 * torch.exp(m2 - shift)


def _states(case: Case, generator: torch.Generator, device: str):
    """Two states per element. Maxima are N(0, 4²), so exp(m1 - m) spans e^0 to about e^-20 and a
    missing rescale is off by far more than any tolerance. Sums lie in [1, 1001): a tile's
    s counts exp(0) = 1 for its own maximum. A fixed pattern adds the awkward states: every
    3rd element has m1 = m2 (a tie), every 5th has state 1 empty, every 7th state 2 empty,
    and the last element has both empty (s = 0 there, where the unguarded formula gives NaN)."""
    (n,) = case.shape
    m1, m2 = (4 * torch.randn(n, generator=generator, device=generator.device, dtype=torch.float64) for _ in range(2))
    s1, s2 = (1 + 1000 * torch.rand(n, generator=generator, device=generator.device, dtype=torch.float64) for _ in range(2))
    i = torch.arange(n)
    m2[i % 3 == 0] = m1[i % 3 == 0]
    for m, s, empty in ((m1, s1, (i % 5 == 1) | (i == n - 1)), (m2, s2, (i % 7 == 2) | (i == n - 1))):
        m[empty], s[empty] = float("-inf"), 0.0
    return tuple(t.to(device, case.dtype) for t in (m1, s1, m2, s2))


# 1 is a lone both-empty element; 127 and 1025 end in a ragged block of 1024 (1025: one past),
# 4096 is whole blocks, which a kernel without a mask gets right by luck. The interpreter
# runs ~2 ms per program, so CPU sizes stay small; the GPU adds a size past 2**20.
_CPU = tuple(Case((n,), dt) for dt in (torch.float32, torch.float16) for n in (1, 127, 1025, 4096))
_GPU = _CPU + tuple(Case((1_048_577,), dt) for dt in (torch.float32, torch.float16))

EXERCISE = Exercise(
    name="lesson5_combine",
    function="combine",
    signature="combine(m1: torch.Tensor, s1: torch.Tensor, m2: torch.Tensor, s2: torch.Tensor) -> torch.Tensor",
    reference=combine_reference,
    make_inputs=_states,
    solution="solutions.combine",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
    # float32 rtol 4e-6, not 1.3e-6: on a GPU tl.exp is ex2.approx of x·log2(e), and rounding
    # that product alone costs |x|·1.44·2**-24 relative, 1.7e-6 at x = -20. A missing rescale
    # or a missing -inf guard is off by factors, not by parts per million.
    tolerances={**DEFAULT_TOLERANCES, torch.float32: (1e-5, 4e-6)},
)
