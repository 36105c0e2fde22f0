"""Lesson 2's exercise: reverse a vector, where the mask must guard the mirrored loads too."""
import torch

from ..inputs import one_random_tensor
from ..spec import Case, Exercise


def _flip(x: torch.Tensor) -> torch.Tensor:
    return torch.flip(x, dims=(-1,))


# 1 and 127 fit in one block; 1025 and 5000 end in a ragged block whose masked lanes would
# read before x[0] without the mask; 1024 and 4096 are whole blocks. A strided x (every other
# element of a longer vector) is read wrong by a kernel that assumes its elements are adjacent.
_CPU = (tuple(Case((n,)) for n in (1, 127, 1024, 1025, 5000))
        + tuple(Case((n,), torch.float16) for n in (1000, 4096)) + (Case((3000,), strided=True),))
_GPU = _CPU + tuple(Case((n,), dt) for dt in (torch.float32, torch.float16) for n in (2**20 + 1, 2**24))

EXERCISE = Exercise(
    name="lesson2_reverse",
    function="reverse",
    signature="reverse(x: torch.Tensor) -> torch.Tensor",
    reference=_flip,
    make_inputs=one_random_tensor,
    solution="solutions.reverse",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
)
