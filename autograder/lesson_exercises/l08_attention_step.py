"""Lesson 8's exercise: one step of FlashAttention's rescaled accumulator, in Triton.

A query row's state after some key blocks is its running max m and its accumulator
acc = Σ exp(s_j - m)·v_j over the keys so far. Folding in one more block of ``KEYS`` scores s
and values v gives m_new = max(m, max_j s_j) and acc·exp(m - m_new) + Σ_j exp(s_j - m_new)·v_j;
students return that accumulator.
"""
from __future__ import annotations

import torch

from ..spec import Case, Exercise

KEYS = 32
"""Keys in the block being folded in: s is (rows, KEYS), v is (KEYS, head_dim)."""


def attention_step_reference(m: torch.Tensor, acc: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    m_new = torch.maximum(m, s.amax(dim=1))
    return acc * torch.exp(m - m_new)[:, None] + torch.exp(s - m_new[:, None]) @ v


def _state_and_block(case: Case, generator: torch.Generator, device: str):
    """(m, acc, s, v) for ``case.shape = (rows, head_dim)``: m, acc and s in float32, v in
    float16, as in the attention kernel. Maxima and scores are N(0, 2²), so the new block
    raises the max of about half the rows, by up to ~8, where a missing or inverted rescale
    is off by factors of e^8. Every 4th row, and the last, is the empty state (m = -inf,
    acc = 0) that a row holds before its first block."""
    rows, head_dim = case.shape
    m = 2 * torch.randn(rows, generator=generator, device=generator.device)
    acc = 3 * torch.randn(rows, head_dim, generator=generator, device=generator.device)
    s = 2 * torch.randn(rows, KEYS, generator=generator, device=generator.device)
    v = torch.randn(KEYS, head_dim, generator=generator, device=generator.device)
    empty = (torch.arange(rows) % 4 == 1) | (torch.arange(rows) == rows - 1)
    m[empty], acc[empty] = float("-inf"), 0.0
    return m.to(device), acc.to(device), s.to(device), v.to(device, torch.float16)


# 1 row (the empty state alone); 16, one whole block of rows; 37 and 100, a ragged last block
# of 16 rows; every head_dim of the attention kernel. The GPU adds a few thousand rows.
_CPU = (Case((1, 16)), Case((16, 32)), Case((37, 64)), Case((100, 128)), Case((5, 16)))
_GPU = _CPU + (Case((4096, 64)), Case((1000, 128)))

EXERCISE = Exercise(
    name="lesson8_attention_step",
    function="attention_step",
    signature="attention_step(m: torch.Tensor, acc: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor",
    reference=attention_step_reference,
    make_inputs=_state_and_block,
    solution="solutions.attention_step",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
    # P is rounded to float16 for tl.dot (v's type), ±2**-12 of each weight ≤ 1: over 32 keys
    # of N(0, 1) values that is up to ~2e-3 absolute. A missing or inverted rescale is off by
    # factors, not by parts per thousand.
    tolerances={torch.float32: (4e-3, 1e-3)},
)
