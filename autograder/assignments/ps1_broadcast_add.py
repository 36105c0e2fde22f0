"""Problem set 1: x + y with PyTorch's broadcasting, read through strides, on a 2-D grid of tiles."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..guards import DATA_MOVEMENT_OPS
from ..references import bytes_elementwise
from ..spec import Case, Exercise, Throughput

_F16, _BF16 = torch.float16, torch.bfloat16

Y_FORMS = ("(M, N)", "(N,)", "(1, N)", "(M, 1)")
"""The shapes y may have, for an x of shape (M, N)."""


@dataclass(frozen=True)
class BroadcastCase(Case):
    """A :class:`Case` whose ``shape`` is x's (M, N); ``strided``: x and y are views whose
    elements are not packed (see :func:`broadcast_inputs`)."""

    y_form: str = "(M, N)"
    """y's shape, one of :data:`Y_FORMS`."""
    x_t: bool = False
    """x is ``t.T`` of an (N, M) tensor: stride (1, M), column-major."""
    y_t: bool = False
    """y is ``t.T`` of a tensor of the transposed shape (2-D forms only)."""

    def __post_init__(self):
        if self.y_form not in Y_FORMS:
            raise ValueError(f"y_form is one of {Y_FORMS}, not {self.y_form!r}")
        if self.y_t and self.y_form == "(N,)":
            raise ValueError("a 1-D y has nothing to transpose")
        if self.values != "normal":
            raise ValueError("broadcast add inputs are standard normal: values= does not apply")

    @property
    def y_shape(self) -> tuple[int, ...]:
        m, n = self.shape
        return {"(M, N)": (m, n), "(N,)": (n,), "(1, N)": (1, n), "(M, 1)": (m, 1)}[self.y_form]

    @property
    def label(self) -> str:
        flags = "".join(f" {name}" for name, on in (("x.T", self.x_t), ("y.T", self.y_t),
                                                    ("strided", self.strided)) if on)
        dims = "×".join(map(str, self.shape))
        return f"{dims} {str(self.dtype).removeprefix('torch.')} + {self.y_shape}{flags}"


def _view(shape: tuple[int, ...], transposed: bool, strided: bool, case: Case,
          generator: torch.Generator, device: str) -> torch.Tensor:
    """Standard-normal values in a tensor of ``shape``, laid out as asked: ``transposed``,
    ``t.T`` of the reversed shape; ``strided``, a 2-D ``t[:, :n]`` of a tensor 1.5·n + 3 wide
    (odd padding: rows start unaligned), a 1-D ``t[:, 0]`` of an (n, 3) tensor (stride 3)."""
    if len(shape) == 1:
        stored = (shape[0], 3) if strided else shape
    else:
        rows, cols = shape[::-1] if transposed else shape
        stored = (rows, cols + cols // 2 + 3 if strided else cols)
    t = torch.randn(stored, generator=generator, dtype=torch.float32, device=generator.device)
    t = t.to(device, case.dtype)
    if len(shape) == 1:
        return t[:, 0] if strided else t
    t = t[:, :cols]
    return t.T if transposed else t


def broadcast_inputs(case: BroadcastCase, generator: torch.Generator, device: str):
    """(x, y): x of shape (M, N), y of ``case.y_shape``, each laid out as the case says."""
    x = _view(case.shape, case.x_t, case.strided, case, generator, device)
    y = _view(case.y_shape, case.y_t, case.strided, case, generator, device)
    return x, y


# Ops that copy an input: `.contiguous()`, `.clone()`, `.to()`/`.float()` and a `reshape` or
# `flatten` that cannot be a view all reach the dispatcher as clone, _to_copy or copy_.
# (`contiguous` and `to` never reach it themselves; they are removed all the same, so the set
# says what it means. `reshape` stays: its copying form arrives as clone.) What stays is
# allocation (empty, zeros, fill_), views (expand, broadcast_to, T, permute, unsqueeze, view,
# as_strided: new sizes and strides over the same memory, 0 bytes moved) and `.item()`. A
# wrapper that copies an input writes and reads all of it once more.
COPY_OPS = frozenset({"copy_", "clone", "_to_copy", "to", "contiguous"})
BROADCAST_ADD_OPS = DATA_MOVEMENT_OPS - COPY_OPS

B = BroadcastCase
# Ragged edges: 77×150, 45×33, 300×500, ... leave the last tile in each dimension part empty
# for any power-of-two tile from 8 up (for the reference's 64 × 64, every case but 128×256);
# 128×256 is whole tiles for any tile up to 128 × 256, which a kernel without masks gets right
# by luck. Every y form, transposed and sliced x and y, and float16. The interpreter runs one
# program at a time, so CPU cases are a few hundred elements a side (at most 40 tiles of 64²).
_CPU = (B((1, 1), y_form="(N,)"),
        B((77, 150)), B((77, 150), y_form="(N,)"), B((77, 150), y_form="(1, N)"), B((77, 150), y_form="(M, 1)"),
        B((128, 256)), B((128, 256), _F16, y_form="(N,)"),
        B((300, 500), y_form="(N,)", x_t=True), B((100, 70), x_t=True), B((70, 100), y_t=True),
        B((60, 200), strided=True), B((90, 130), _F16, y_form="(N,)", x_t=True, strided=True),
        B((45, 33), _F16, y_form="(M, 1)", x_t=True, y_t=True))
# The GPU adds full-size matrices, ragged ones and bfloat16. No graded input spans more than
# about 1e8 elements: offsets fit int32 (2.1e9).
_GPU = _CPU + (B((1, 1), _BF16, y_form="(M, 1)"), B((8192, 8192), y_form="(N,)"),
               B((5000, 3001)), B((5000, 3001), _F16, y_form="(M, 1)", x_t=True),
               B((3001, 5000), _BF16, y_t=True), B((4096, 4096), _BF16, y_form="(N,)", x_t=True, strided=True),
               B((8192, 8192), _F16, x_t=True, y_t=True))

EXERCISE = Exercise(
    name="ps1_broadcast_add",
    function="add",
    signature="add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor",
    reference=torch.add,
    make_inputs=broadcast_inputs,
    solution="solutions.broadcast_add",
    visible_cases={"cpu": _CPU, "cuda": _GPU},
    # y is a (8192,) row: reading x and y once and writing the output is 2 × 256 MiB + 32 KiB.
    # bytes_elementwise counts y's 8192 elements once (y arrives unexpanded, so its numel is
    # what a kernel must read). On an H200 torch.add's broadcasting path reaches 2.7 TB/s and
    # the reference 3.7 TB/s (1.38×); a kernel that first writes y.expand(M, N) out in full
    # moves 2 × 256 MiB more and got 0.64×.
    throughput=Throughput(case=B((8192, 8192), y_form="(N,)"), threshold=0.8,
                          baseline="torch.add", bytes_moved=bytes_elementwise),
    # The default tolerances: out is one correctly rounded addition of two values the float64
    # reference holds exactly, so it is within half an ulp of the result, 2**-24 = 6e-8
    # (float32), 2**-11 = 4.9e-4 (float16), 2**-8 = 3.9e-3 (bfloat16) relative, under each
    # rtol (1.3e-6, 1e-3, 1.6e-2). A wrong element is off by about 1, a whole input's value.
    allowed_ops=BROADCAST_ADD_OPS,
    contiguous_output=True,  # the statement asks for a new contiguous tensor
    points={"correctness": 4, "hidden": 4, "throughput": 2},
)
