"""The declaration of an exercise: what students write, how it is checked, what it earns.

One :class:`Exercise` per assignment, in :mod:`autograder.exercises`; notebooks, nbgrader
test cells, the test suite and the benchmarks all read that one declaration.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Callable

import torch

from .guards import DATA_MOVEMENT_OPS
from .language import say

Tolerance = tuple[float, float]
"""``(atol, rtol)``: an element passes when ``|out - ref| <= atol + rtol * |ref|``."""

# Per-dtype defaults, against a float64 reference. float16 keeps 11 significant bits, so
# one correctly rounded operation is off by up to 2**-11 = 4.9e-4 of the result.
DEFAULT_TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: (1e-5, 1.3e-6),
    torch.float16: (1e-5, 1e-3),
    torch.bfloat16: (1e-5, 1.6e-2),
}


@dataclass(frozen=True)
class Case:
    """One input configuration."""

    shape: tuple[int, ...]
    """Shape of each input tensor, unless the exercise's ``make_inputs`` says otherwise (a
    matmul's case is ``(M, N, K)``)."""
    dtype: torch.dtype = torch.float32
    """Element type of the inputs (and of the expected output, unless the exercise gives
    ``output_dtype``)."""
    strided: bool = False
    """Pass a strided view where the exercise allows it: ``x[..., :n]`` of a wider tensor, or for
    a vector every other element of a longer one (``x[1::2]``)."""
    values: str = "normal"
    """What the random values look like: ``normal`` (standard normal), ``large`` (magnitudes
    around 10^4, 2·10^3 in float16) or ``neg_inf`` (about one entry in ten -inf, never a
    whole row)."""

    @property
    def label(self) -> str:
        dims = "×".join(map(str, self.shape))
        extras = (" strided" if self.strided else "") + ("" if self.values == "normal" else f" {self.values}")
        return f"{dims} {str(self.dtype).removeprefix('torch.')}{extras}"


@dataclass(frozen=True)
class Throughput:
    """The speed requirement, measured on a GPU against PyTorch in the same process.

    Give ``bytes_moved`` for a memory-bound operation (reported in GB/s against the measured
    copy bandwidth) or ``flops`` for a compute-bound one (TFLOP/s against the measured
    ``torch.matmul`` rate in the case's dtype), not both. Either is called with a case's inputs
    and the function's output; for an exercise with gradients the timed call is the forward
    and the backward (:meth:`Exercise.call`).
    """

    case: Case
    """The input the timing uses."""
    threshold: float
    """Pass when PyTorch's time / the student's time is at least this."""
    baseline: str
    """The PyTorch operation it is compared with, as students know it (e.g. ``torch.add``)."""
    bytes_moved: Callable[[tuple[torch.Tensor, ...], torch.Tensor], int] | None = None
    """The fewest bytes the operation must read and write, for GB/s figures."""
    flops: Callable[[tuple[torch.Tensor, ...], torch.Tensor], int] | None = None
    """The floating-point operations it must do (2·M·N·K for a matmul), for TFLOP/s figures."""

    def __post_init__(self):
        if (self.bytes_moved is None) == (self.flops is None):
            raise ValueError("Throughput takes exactly one of bytes_moved= and flops=")

    @property
    def unit(self) -> str:
        return "GB/s" if self.flops is None else "TFLOP/s"


@dataclass(frozen=True)
class Exercise:
    """Everything that decides an exercise's verdict."""

    name: str
    """Assignment id, as in ``source/<name>/`` (e.g. ``ps1_broadcast_add``)."""
    function: str
    """The function students write, e.g. ``add``."""
    signature: str
    """Its signature as shown to students."""
    reference: Callable[..., torch.Tensor]
    """The PyTorch reference; called on float64 copies for correctness, natively for timing."""
    make_inputs: Callable[[Case, torch.Generator, str], tuple]
    """Builds fresh random inputs for a case on a device from a seeded CPU generator: tensors,
    and any plain values the call takes after them (attention's ``causal``), passed as they are."""
    solution: str
    """Module of the reference solution: in ``solutions/`` (the instructor's side, never given
    to students) for an exercise, in ``autograder.kernels`` for a lesson's live kernel. A
    graded exercise's module also holds its hidden cases, ``HIDDEN_CASES``, by device kind."""
    visible_cases: dict[str, tuple[Case, ...]]
    """Cases the students' self-check runs, by device kind (``"cpu"`` or ``"cuda"``)."""
    throughput: Throughput | None = None
    """The speed requirement (GPU only); None for an exercise graded on correctness alone."""
    points: dict[str, float] = field(default_factory=dict)
    """Points of each graded part: ``correctness`` (visible cases), ``hidden`` (cases only
    grading runs, shared out by the fraction passed) and ``throughput`` (all or nothing)."""
    output_dtype: torch.dtype | None = None
    """The output's dtype where it is not the inputs' (an FP8 matmul writes float16); None: the case's."""
    tolerances: dict[torch.dtype, Tolerance] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    """Per-dtype ``(atol, rtol)`` against the float64 reference."""
    allowed_ops: frozenset[str] = DATA_MOVEMENT_OPS
    """PyTorch operations the student's wrapper may call; anything else is reported."""
    time_limit_s: float = 120.0
    """Longest a single call may take (first calls include JIT compilation)."""
    edge: Callable[[Case], bool] | None = None
    """Which cases' answers take no real work (a vocabulary of one, every row ignored, a lone
    token: the answer is a constant or a copy of an input). In a verdict, such cases count only
    beside a passed case that is not one, so a function that does nothing scores 0. None: no case is.
    (A case whose inputs are few enough to work out on the host counts the same way, whatever this
    says: :func:`autograder.correctness.readable_on_the_host`.)"""
    contiguous_output: bool = False
    """Whether the statement asks for a contiguous output (``y``), as a new tensor of the output's
    shape would be, whatever the inputs' layout; False: any layout PyTorch would accept."""
    diagnoses: bool = True
    """Whether a failed case's message may say what the mistake most likely is (inputs read as if
    contiguous); False where finding the mistake is the exercise (lesson 6's debugging)."""
    gradients: dict[str, dict[torch.dtype, Tolerance]] = field(default_factory=dict)
    """For an exercise graded on its backward pass too: the arguments whose gradients are judged,
    by their names in ``signature`` (whose every parameter then has a type), each with its
    per-dtype ``(atol, rtol)``. ``make_inputs`` appends the output's gradient dy to the
    arguments (see :meth:`call`)."""

    @property
    def parameters(self) -> list[str]:
        """The names of ``signature``'s parameters that are written with a type."""
        return re.findall(r"(\w+)\s*:", self.signature.split("(", 1)[1].split(")", 1)[0])

    @property
    def outputs(self) -> dict[str, dict[torch.dtype, Tolerance]]:
        """What a call is judged on, by name, each with its tolerances: the function's output
        ``y``, then the gradient of each argument in ``gradients`` (``dx`` for ``x``)."""
        return {"y": self.tolerances, **{f"d{name}": tol for name, tol in self.gradients.items()}}

    def is_edge(self, case: Case) -> bool:
        """Whether ``case`` is one of :attr:`edge`'s."""
        return self.edge is not None and self.edge(case)

    def arguments(self, inputs: tuple) -> tuple:
        """The function's arguments among a case's inputs: all of them, but dy for an exercise
        with gradients."""
        return inputs[:-1] if self.gradients else inputs

    def call(self, fn, inputs: tuple) -> tuple:
        """What one call of ``fn`` (the student's function, or the reference) on a case's inputs
        is judged on, in the order of :attr:`outputs`: the function's output and, with
        ``gradients``, the gradient that ``backward(dy)`` leaves on each of those arguments, passed
        as leaves that require grad (None where none arrives)."""
        args = self.arguments(inputs)
        if not self.gradients:
            return (fn(*args),)
        leaves = {name: a.detach().requires_grad_() for name, a in zip(self.parameters, args) if name in self.gradients}
        with torch.enable_grad():
            y = fn(*(leaves.get(name, a) for name, a in zip(self.parameters, args)))
            if isinstance(y, torch.Tensor) and y.requires_grad:
                y.backward(inputs[-1])
        return (y.detach() if isinstance(y, torch.Tensor) else y, *(leaves[name].grad for name in self.gradients))

    def cases(self, which: str, device: str) -> tuple[Case, ...]:
        """The ``"visible"`` or ``"hidden"`` cases for ``device``."""
        if which == "visible":
            return self.visible_cases[device]
        if which != "hidden":
            raise ValueError(say("cases are 'visible' or 'hidden', not {which!r}", which=which))
        return self.hidden_cases()[device]

    def hidden_cases(self) -> dict[str, tuple[Case, ...]]:
        """``HIDDEN_CASES`` of the solution module: on the instructor's side only."""
        try:
            module = importlib.import_module(self.solution)
        except ModuleNotFoundError as error:
            if not self.solution.startswith(str(error.name)):
                raise
            raise LookupError(say("{name}'s hidden tests run only when your work is graded: this copy of the "
                                  "course does not have them.", name=self.name)) from None
        return getattr(module, "HIDDEN_CASES", {})
