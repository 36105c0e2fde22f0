"""Random inputs for a :class:`~autograder.spec.Case`, shared by the exercise declarations."""
from __future__ import annotations

import torch

from .spec import Case


def random_tensors(case: Case, generator: torch.Generator, device: str, count: int):
    """``count`` random tensors for ``case``, drawn where ``generator`` lives (every draw of an
    exercise's inputs does so: a test checks): on a GPU, fast even for the largest cases."""
    return tuple(_random_tensor(case, generator, device) for _ in range(count))


def _random_tensor(case: Case, generator: torch.Generator, device: str) -> torch.Tensor:
    *outer, n = case.shape
    if case.strided and not outer:  # a vector: every other element, from the second
        width = 2 * n + 1
    else:
        width = n + n // 2 + 3 if case.strided else n  # odd padding: rows start unaligned
    t = torch.randn((*outer, width), generator=generator, dtype=torch.float32, device=generator.device)
    if case.values == "large":
        t *= 2e3 if case.dtype == torch.float16 else 1e4  # float16 overflows past 65504
    elif case.values == "neg_inf":
        holes = torch.rand(t.shape, generator=generator, device=generator.device) < 0.1
        holes[..., 1 if case.strided and not outer else 0] = False  # a row of only -inf has no softmax
        t[holes] = float("-inf")
    elif case.values != "normal":
        raise ValueError(f"unknown values={case.values!r}")
    t = t.to(device, case.dtype)
    if not case.strided:
        return t
    return t[1::2] if not outer else t[..., :n]


def one_random_tensor(case: Case, generator: torch.Generator, device: str) -> tuple[torch.Tensor]:
    """The input of a one-argument exercise."""
    return random_tensors(case, generator, device, count=1)
