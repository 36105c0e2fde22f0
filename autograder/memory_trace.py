"""A memory trace of one kernel launch: every program's loads and stores, recorded by running
the launch in Triton's interpreter on copies of its arguments, and the numbers that explain a
kernel's speed: bytes moved against the fewest it had to move, lanes masked off, lanes out of
bounds, how well each access coalesces. :meth:`Trace.show` draws it.

    t = trace(add_kernel, (triton.cdiv(n, 1024),), x, y, out, n, BLOCK_SIZE=1024)  # n = 4000
    print(t)  # add_kernel[(4,)]: loaded 32.0 kB, stored 16.0 kB, fewest 48.0 kB (traffic ×1.00); 0 lanes
              # out of bounds; 2.3% of lanes masked off; coalescing 100%
    t.show()  # which program touched which element of x, y and out

Where it runs: anywhere. Each tensor argument is copied to the CPU (its whole storage, viewed
as the student's; arguments sharing a storage share the copy), so the student's tensors are
never touched. On a GPU machine the kernel, the ``@triton.jit`` functions of its module and
Triton's own (``tl.sum``, ``tl.max``) are swapped for interpreted ones while the trace runs and
put back after (a helper called as another module's attribute is not found: import it by
name). An autotuned kernel is traced bare: pass its meta-parameters (block sizes).

Which argument a lane belongs to is exact, not guessed from addresses: the kernel gets each
tensor argument at a made-up address in a window of its own, 2 TiB wide, so pointer arithmetic
that starts from ``x_ptr`` stays in x's window however far it strays. A lane is out of bounds
when it addresses no element of the tensor its pointer came from, even where that address
falls inside another argument (an unmasked store past ``x`` into ``y``, two views of one
buffer). Lanes outside their argument's storage are dropped, as if masked (a load gives
``other``, a store writes nothing), so a trace never touches memory it does not own; lanes
inside the storage but outside the view still run, on the copy.

What is counted: a masked-off lane moves nothing; an active lane moves its element's bytes,
out-of-bounds lanes included (a GPU moves them too); an atomic counts as a load and a store.
The fewest bytes: each element the launch loaded, counted once, plus each element it stored,
counted once (an element both read and written crosses twice). Covered: ``tl.load``/``tl.store``
through pointers, tensor descriptors (host ``TensorDescriptor`` and ``tl.make_tensor_descriptor``)
and block pointers where the Triton still has them, which the interpreter lowers to the same
masked loads and stores, and atomics (``atomic_cas`` has no mask, so a stray lane raises
:class:`~autograder.guards.OutOfBoundsAccess`). Not covered: pointers read from memory or made
from integers (they lie in no argument's window: counted out of bounds of no argument), and the
hardware itself: caches, the order programs run in, shared memory.

Why not triton-viz (PyPI ``triton-viz`` 3.0, read for this module): it records the same
interpreter operations, but shows them in a web page served by a Flask server
(``triton_viz.launch()``, by default through a Cloudflare tunnel, needing WebGL), so nothing is
drawn in the notebook itself. Its users report the view blank in Colab and in a remote
JupyterLab (gpu-mode/Triton-Puzzles#22, triton-viz#34) and the local server exiting at once
(triton-viz#198); it broke when Triton renamed an interpreter internal (Triton-Puzzles#5); its
byte counts sample blocks by default (``PROFILER_ENABLE_BLOCK_SAMPLING=1``); and it pulls in
Flask, z3, pyarrow and cairo, and patches the interpreter's launch loop wholesale, which would
fight the course's own hook (:mod:`autograder.guards`). A matplotlib figure shows wherever a
notebook runs, including static exports.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from . import device, guards
from .language import say

LOAD, STORE = "load", "store"
SECTOR = 32
"""Bytes a GPU moves between memory and cache at a time: an access's coalescing is the bytes
it asked for over the bytes of the 32-byte sectors it touched."""


@dataclass(frozen=True)
class Argument:
    """A tensor argument of the traced launch."""

    name: str
    """The kernel's parameter name; ``name[i]`` for the tensors of a tuple argument."""
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    """In elements, as ``tensor.stride()``."""
    dtype: str
    itemsize: int
    storage_offset: int
    """Where the view starts in its storage, in elements."""

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def elements(self, offsets: np.ndarray) -> np.ndarray:
        """The row-major index of the element each byte offset (from the first element)
        addresses; -1 where it addresses none of this view's elements."""
        rest, misaligned = np.divmod(np.asarray(offsets, dtype=np.int64), self.itemsize)
        inside = misaligned == 0
        flat = np.zeros_like(rest)
        row_major = np.cumprod((1,) + self.shape[:0:-1])[::-1]
        for dim in sorted(range(len(self.shape)), key=lambda d: -self.strides[d]):
            if self.shape[dim] == 1 or self.strides[dim] == 0:
                continue  # index 0; a broadcast dimension shows its first copy
            index = rest // self.strides[dim]
            inside &= (index >= 0) & (index < self.shape[dim])
            rest = rest - index * self.strides[dim]
            flat += index * row_major[dim]
        return np.where(inside & (rest == 0), flat, -1)


@dataclass(frozen=True)
class Access:
    """One load, store or atomic of one program: its lanes that point into one argument."""

    program: tuple[int, int, int]
    kind: str
    """``"load"``, ``"store"`` or ``"atomic"``."""
    argument: int
    """Index into :attr:`Trace.arguments` of the tensor its pointers were computed from; -1
    where they came from none."""
    offsets: np.ndarray
    """Each lane's byte offset from the argument's first element (flat, int64); its raw
    address where ``argument`` is -1."""
    mask: np.ndarray
    """True where the lane was active (not masked off)."""
    width: int
    """Bytes per lane."""


@dataclass
class Trace:
    """What one launch loaded and stored, program by program, and its totals."""

    kernel: str
    grid: tuple[int, int, int]
    arguments: list[Argument]
    """The launch's tensor arguments, in the kernel's parameter order."""
    accesses: list[Access]
    """Every access, in the order the programs made them."""
    lanes: dict[str, np.ndarray] = field(init=False, repr=False)
    """Every lane of every access as flat arrays: ``access`` (index into :attr:`accesses`),
    ``program`` (linear index), ``kind``, ``argument``, ``width``, ``offset``, ``active``, and
    ``element`` (row-major index into its argument; -1 where it addresses none)."""
    bytes_loaded: int = field(init=False)
    """Bytes of the active lanes of loads (and atomics)."""
    bytes_stored: int = field(init=False)
    """Bytes of the active lanes of stores (and atomics)."""
    out_of_bounds: int = field(init=False)
    """Active lanes that addressed no element of the tensor their pointer came from."""
    min_bytes: int = field(init=False)
    """The fewest bytes the launch had to move: each element it loaded, counted once, plus
    each element it stored, counted once."""
    traffic_ratio: float = field(init=False)
    """(bytes_loaded + bytes_stored) / min_bytes: 1.0 when nothing moves twice."""
    masked_waste: float = field(init=False)
    """The share of all lanes that were masked off."""
    coalescing: float = field(init=False)
    """The bytes of the distinct elements each access's in-bounds lanes asked for over the
    bytes of the 32-byte sectors that access touched, both summed over the accesses: 1.0 when
    every sector is fully used; 0.125 for float32 read down a column."""
    coalescing_by_program: np.ndarray = field(init=False, repr=False)
    """The same per program (by linear index; NaN where it made no access)."""

    def __post_init__(self):
        sizes = [a.offsets.size for a in self.accesses]

        def per_lane(values, dtype):
            return np.repeat(np.asarray(values, dtype=dtype), sizes)

        def joined(arrays, dtype):
            return np.concatenate([np.zeros(0, dtype)] + arrays).astype(dtype)

        lanes = {"access": per_lane(range(len(self.accesses)), np.int64),
                 "program": per_lane([self.program_index(a.program) for a in self.accesses], np.int64),
                 "kind": per_lane([a.kind for a in self.accesses], "U6"),
                 "argument": per_lane([a.argument for a in self.accesses], np.int64),
                 "width": per_lane([a.width for a in self.accesses], np.int64),
                 "offset": joined([a.offsets for a in self.accesses], np.int64),
                 "active": joined([a.mask for a in self.accesses], bool)}
        lanes["element"] = np.full(lanes["offset"].shape, -1, dtype=np.int64)
        for k, arg in enumerate(self.arguments):
            mine = lanes["argument"] == k
            lanes["element"][mine] = arg.elements(lanes["offset"][mine])
        self.lanes = lanes

        active, element = lanes["active"], lanes["element"]
        moved = np.where(active, lanes["width"], 0)
        reads, writes = lanes["kind"] != STORE, lanes["kind"] != LOAD
        used = active & (element >= 0)
        self.bytes_loaded = int(moved[reads].sum())
        self.bytes_stored = int(moved[writes].sum())
        self.out_of_bounds = int((active & (element < 0)).sum())
        self.min_bytes = self._distinct_bytes(used & reads) + self._distinct_bytes(used & writes)
        moved_total = self.bytes_loaded + self.bytes_stored
        self.traffic_ratio = moved_total / self.min_bytes if self.min_bytes else float("nan")
        self.masked_waste = float((~active).mean()) if active.size else 0.0
        self.coalescing_by_program, self.coalescing = self._coalescing(used)

    @property
    def programs(self) -> int:
        return int(np.prod(self.grid))

    def program_index(self, program: int | tuple[int, ...]) -> int:
        """The linear index of program ``(x, y, z)`` (x varies fastest); an int is one already."""
        if isinstance(program, (int, np.integer)):
            return int(program)
        x, y, z = tuple(program) + (0,) * (3 - len(program))
        return x + self.grid[0] * (y + self.grid[1] * z)

    def _distinct_bytes(self, lanes: np.ndarray) -> int:
        key = self.lanes["argument"][lanes] * (1 << 40) + self.lanes["element"][lanes]
        _, first = np.unique(key, return_index=True)
        return int(self.lanes["width"][lanes][first].sum())

    def _coalescing(self, used: np.ndarray) -> tuple[np.ndarray, float]:
        access, argument = self.lanes["access"][used], self.lanes["argument"][used]
        starts = np.array([a.storage_offset * a.itemsize for a in self.arguments], dtype=np.int64)
        address = self.lanes["offset"][used] + starts[argument]  # from the storage's start: its alignment
        n = len(self.accesses)
        distinct = np.bincount(np.unique(access * (1 << 40) + address) >> 40, minlength=n)
        sectors = np.bincount(np.unique(access * (1 << 40) + address // SECTOR) >> 40, minlength=n)
        width = np.array([a.width for a in self.accesses], dtype=np.int64)
        program = np.array([self.program_index(a.program) for a in self.accesses], dtype=np.int64)
        asked = np.bincount(program, distinct * width, minlength=self.programs)
        fetched = np.bincount(program, sectors * SECTOR, minlength=self.programs)
        with np.errstate(invalid="ignore", divide="ignore"):
            return asked / fetched, float(asked.sum() / fetched.sum()) if fetched.sum() else float("nan")

    def _launch_name(self) -> str:
        """``kernel[grid]``, the grid without its trailing 1s."""
        dims = max([1] + [i + 1 for i, n in enumerate(self.grid) if n > 1])
        return f"{self.kernel}[{self.grid[:dims]}]"

    def _totals(self) -> str:
        """The totals, without the launch."""
        return say("loaded {loaded}, stored {stored}, fewest {fewest} (traffic ×{ratio:.2f}); {out_of_bounds:,} "
                   "lanes out of bounds; {masked:.1%} of lanes masked off; coalescing {coalescing:.0%}",
                   loaded=format_bytes(self.bytes_loaded), stored=format_bytes(self.bytes_stored),
                   fewest=format_bytes(self.min_bytes), ratio=self.traffic_ratio, out_of_bounds=self.out_of_bounds,
                   masked=self.masked_waste, coalescing=self.coalescing)

    def summary(self) -> str:
        """One line: the launch and its totals."""
        return say("{launch}: {totals}", launch=self._launch_name(), totals=self._totals())

    __repr__ = summary

    def figure(self, program: int | tuple[int, ...] | None = None):
        """The matplotlib Figure :meth:`show` displays, closed in pyplot (``savefig`` works)."""
        from .memory_trace_plot import figure

        return figure(self, program)

    def show(self, program: int | tuple[int, ...] | None = None, widget: bool = False) -> None:
        """Draw the trace in the notebook: a panel per tensor argument, each element coloured
        by the program that touched it, masked lanes grey, out-of-bounds lanes red in a margin
        beyond the tensor, elements loaded more than once darker. ``program`` (linear index or
        ``(x, y, z)``) highlights one program. ``widget=True`` adds a program slider that
        redraws the figure; it needs a live kernel (a static export keeps no widget)."""
        from IPython.display import display

        from .memory_trace_plot import png, selector

        display(selector(self, program) if widget else png(self, program))


def trace(kernel, grid, *args, **meta) -> Trace:
    """Run ``kernel[grid](*args, **meta)`` in Triton's interpreter on copies of its arguments
    and record every program's loads and stores."""
    from triton.runtime.interpreter import interpreter_builder

    device._check_interpreter_versions()
    storages: dict[int, torch.UntypedStorage] = {}
    args = [_copy(a, storages) for a in args]
    meta = {name: _copy(value, storages) for name, value in meta.items()}
    grid = (grid,) if isinstance(grid, int) else grid if callable(grid) else tuple(grid)
    recorder = _Recorder()
    with _interpreted(kernel) as runnable, guards.interpreter_launches(recorder.launch):
        runnable.run(*args, grid=grid, warmup=False, **meta)
    return Trace(runnable.fn.__name__, tuple(interpreter_builder.grid_dim), recorder.arguments,
                 recorder.accesses)


def out_of_bounds_trace(error: guards.OutOfBoundsAccess) -> Trace | None:
    """The trace of the launch in which ``error`` happened (None if it kept no launch)."""
    if error.launch is None:
        return None
    kernel, grid, args, kwargs = error.launch
    return trace(kernel, grid, *args, **kwargs)


def _in_ipython() -> bool:
    from IPython import get_ipython

    return get_ipython() is not None


def show_out_of_bounds(error: guards.OutOfBoundsAccess) -> None:
    """In a notebook, below a failed check: the trace of the launch that strayed, the program
    that made the access highlighted. Nothing outside IPython (a script, a grader's log)."""
    if not _in_ipython() or (stray := out_of_bounds_trace(error)) is None:
        return
    print(say("The launch that strayed, traced: program {program} is highlighted, its lanes that fell outside a "
              "tensor are red ({count} such lanes in the whole launch).", program=error.program,
              count=stray.out_of_bounds))
    stray.show(program=error.program)


def count_bytes_moved(fn, *args, **kwargs) -> tuple[object, int]:
    """Call ``fn`` (which launches kernels, in the interpreter) and count the bytes its launches
    would move through a GPU's memory: its result and that count. Masked-off lanes move nothing,
    and lanes of one load that address the same element move it once. A program that loads an
    element again moves it again (three passes over a row, x read
    twice); an element that other programs of the launch loaded first costs nothing more (a
    bias, a broadcast row, a weight every row reads: a GPU serves those from its cache). Every
    stored lane counts. Unlike :func:`trace` it runs on the real arguments, bounds check on."""
    from triton.runtime.interpreter import interpreter_builder

    stored = 0
    loads: list[tuple[np.ndarray, int, int]] = []  # (addresses, program key, bytes each)
    launches = 0

    def on_launch(names, values):
        nonlocal launches
        values, check = guards.bounds_check(names, values)
        launch, launches = launches, launches + 1

        def counted(kind, ptrs, mask):
            nonlocal stored
            if check:
                ptrs, mask = check(kind, ptrs, mask)  # real addresses: arguments that share memory share them
            width = max(ptrs.get_element_ty().primitive_bitwidth // 8, 1)
            lanes = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(ptrs.data))
            if kind != "load":  # a store, or an atomic's write
                stored += int(lanes.sum()) * width
            if kind != "store":
                program = hash((launch, *(int(i) for i in interpreter_builder.grid_idx)))
                # lanes of one load that share an address are one transaction on a GPU
                loads.append((np.unique(np.asarray(ptrs.data, dtype=np.uint64)[lanes]), program, width))
            return ptrs, mask
        return values, counted

    with guards.interpreter_launches(on_launch):
        out = fn(*args, **kwargs)
    return out, stored + _first_readers_bytes(loads)


def _first_readers_bytes(loads: list[tuple[np.ndarray, int, int]]) -> int:
    """The bytes of the load lanes made by the first program to load each address."""
    if not loads:
        return 0
    addresses = np.concatenate([a for a, _, _ in loads])
    programs = np.concatenate([np.full(a.size, p, np.int64) for a, p, _ in loads])
    widths = np.concatenate([np.full(a.size, w, np.int64) for a, _, w in loads])
    _, first, inverse = np.unique(addresses, return_index=True, return_inverse=True)
    return int(widths[programs == programs[first][inverse]].sum())


class _Recorder:
    """Places the launch's tensor arguments in their windows (:class:`guards.Windows`) and
    records each access, dropping the lanes outside their argument's storage."""

    def __init__(self):
        self.arguments: list[Argument] = []
        self.accesses: list[Access] = []

    def launch(self, names: list[str], values: list):
        self.windows = guards.Windows(names, values)
        self.arguments = [Argument(t.name, tuple(t.tensor.shape), tuple(t.tensor.stride()),
                                   str(t.dtype).removeprefix("torch."), t.tensor.element_size(),
                                   t.tensor.storage_offset()) for t in self.windows.tensors]
        self.firsts = np.array([a.storage_offset * a.itemsize for a in self.arguments] + [0], dtype=np.int64)
        return self.windows.values, self.access

    def access(self, kind: str, ptrs, mask):
        from triton.runtime.interpreter import interpreter_builder

        lanes = self.windows.lanes(ptrs, mask)
        program = tuple(int(i) for i in interpreter_builder.grid_idx)
        for k in np.unique(lanes.argument):
            mine = lanes.argument == k
            self.accesses.append(Access(program, kind, int(k), lanes.offset[mine] - self.firsts[k],
                                        lanes.active[mine], lanes.width))
        return self.windows.real(lanes, ptrs)


@contextlib.contextmanager
def _interpreted(kernel):
    """``kernel`` as an interpreted function, and the ``@triton.jit`` functions it can call
    interpreted too until the block ends (on a GPU machine they were compiled for the GPU)."""
    import triton
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    while not isinstance(kernel, (JITFunction, InterpretedFunction)):
        if not hasattr(kernel, "fn"):
            raise TypeError(say("trace() takes a @triton.jit kernel, not {type}", type=type(kernel).__name__))
        kernel = kernel.fn  # an autotuner or heuristics around the kernel
    changes = device.reinterpret([kernel.fn.__globals__] + device.triton_language_namespaces())
    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    interpreting = getattr(runtime, "interpret", None)
    if runtime is not None:
        runtime.interpret = True  # a constexpr function reads it to return a plain value
    try:
        with device.language_restored():
            yield kernel if isinstance(kernel, InterpretedFunction) else InterpretedFunction(kernel.fn)
    finally:
        if runtime is not None:
            runtime.interpret = interpreting
        device.put_back(changes)


def _copy(value, storages: dict):
    """A CPU copy of a tensor argument: its whole storage, viewed as ``value`` is; arguments
    that share a storage share the copy."""
    from triton.runtime.jit import TensorWrapper
    from triton.tools.tensor_descriptor import TensorDescriptor

    if isinstance(value, TensorWrapper):
        return TensorWrapper(_copy(value.base, storages), value.dtype)
    if isinstance(value, TensorDescriptor):
        return dataclasses.replace(value, base=_copy(value.base, storages))
    if isinstance(value, tuple):
        return guards.retuple(value, [_copy(v, storages) for v in value])
    if not isinstance(value, torch.Tensor):
        return value
    storage = value.untyped_storage()
    if storage.data_ptr() not in storages:
        storages[storage.data_ptr()] = storage.cpu() if storage.device.type != "cpu" else storage.clone()
    copy = torch.empty(0, dtype=value.dtype)
    return copy.set_(storages[storage.data_ptr()], value.storage_offset(), value.size(), value.stride())


def format_bytes(n: int) -> str:
    """``n`` bytes in B, kB, MB or GB."""
    n = int(n)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
