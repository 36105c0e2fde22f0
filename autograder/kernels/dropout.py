"""Lesson 10's random numbers in a kernel: fused dropout with ``tl.rand`` (Philox).

``tl.rand(seed, offsets)`` gives each offset a uniform number in [0, 1) that depends on
``(seed, offset)`` and nothing else: no state is carried from one launch to the next, so the same
seed gives the same numbers on every launch, on every GPU and in the interpreter, and a backward
can draw the forward's mask again instead of storing it. ``dropout`` keeps each element with
probability 1 − p and scales what it keeps by 1 / (1 − p), so that the expected value of every
output equals its input; ``uniform`` stores the numbers themselves.
"""
import torch
import triton
import triton.language as tl

from autograder.language import say


# --- notebook cell: uniform ---
BLOCK_SIZE = 1024  # elements per program, as in lesson 2's vector add


@triton.jit
def uniform_kernel(out_ptr, n_elements, seed, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    # Philox: 10 rounds of 32-bit multiplications and XORs of (seed, offset); no state in memory.
    tl.store(out_ptr + offsets, tl.rand(seed, offsets), mask=offsets < n_elements)


def uniform(n: int, seed: int, device="cpu") -> torch.Tensor:
    """n float32 numbers in [0, 1): number i is tl.rand(seed, i)."""
    out = torch.empty(n, dtype=torch.float32, device=device)
    uniform_kernel[(triton.cdiv(n, BLOCK_SIZE),)](out, n, seed, BLOCK_SIZE=BLOCK_SIZE)
    return out


# --- notebook cell: dropout ---
@triton.jit
def dropout_kernel(y_ptr, x_ptr, n_elements, p, seed, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    # Element i's fate is decided by tl.rand(seed, i): the mask is computed, never stored.
    keep = tl.rand(seed, offsets) >= p  # true with probability 1 - p
    y = tl.where(keep, x.to(tl.float32) / (1 - p), 0.0)
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


def dropout(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """Zero each element of x with probability p, scale the rest by 1 / (1 - p). The mask is a
    function of (seed, element index in x's logical order): the same seed, the same mask."""
    assert 0 <= p < 1, say("p is a probability below 1, got {p}", p=p)
    x = x.contiguous()  # element i of the flat, row-major order is offset i
    y = torch.empty_like(x)
    n = x.numel()
    dropout_kernel[(triton.cdiv(n, BLOCK_SIZE),)](y, x, n, p, seed, BLOCK_SIZE=BLOCK_SIZE)
    return y
