"""Lesson 3's exercise: ReLU whose mask is compiled in only when a constexpr flag asks for it."""
import torch

from ..inputs import one_random_tensor
from ..spec import Case, Exercise


# Sizes against a 1024 block: 1024 and 4096 take the unmasked branch (EVEN_N); 1, 127, 1025
# and 5000 need the mask; 2064 = 129 x 16 is a multiple of 16 but not of 1024, so a flag
# computed as `n % 16 == 0` sends its ragged third block down the unmasked branch.
_CPU = (tuple(Case((n,)) for n in (1, 127, 1024, 2064, 4096, 5000))
        + tuple(Case((n,), torch.float16) for n in (1025, 4096)))
_GPU = _CPU + tuple(Case((n,), dt) for dt in (torch.float32, torch.float16)
                    for n in (2**20, 2**20 + 16, 2**24 + 1))

EXERCISE = Exercise(
    name="lesson3_even_relu",
    function="relu",
    signature="relu(x: torch.Tensor) -> torch.Tensor",
    reference=torch.relu,
    make_inputs=one_random_tensor,
    solution="solutions.even_relu",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
)
