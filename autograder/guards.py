"""Watch what a student's function does: which Triton kernels it launches, which PyTorch
operations it calls, whether it hands work to other threads or to NumPy, whether it finishes
in time, and whether its kernels store outside the tensors they were given (in the
interpreter, at the faulty access; on a GPU, through guard zones checked after the call).

All of this runs in the process that runs the student's code, so a determined student can
switch it off: it explains honest mistakes, and grading's points never rest on it alone
(:mod:`autograder.grading`)."""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import signal
import _thread
import os
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .language import say

# Operations that only allocate, move, reinterpret or read back data. A wrapper may use
# them freely; anything else computes, and the exercise decides which of those it allows.
DATA_MOVEMENT_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "zero_", "fill_", "full", "full_like", "new_zeros", "new_full", "ones", "ones_like", "new_ones",
    "copy_", "clone", "_to_copy", "to", "contiguous", "detach", "alias", "lift_fresh",
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "permute",
    "transpose", "t", "squeeze", "unsqueeze", "flatten", "slice", "select", "narrow",
    "unbind", "split", "set_", "resize_", "is_same_size", "_local_scalar_dense",
})


class KernelTimeout(TimeoutError):
    """The student's function ran longer than its time limit."""

    launch: tuple[str, int] | None = None
    """The interpreted launch it stopped in: the kernel's name and its number of programs."""


class OutOfBoundsAccess(IndexError):
    """A kernel run by the interpreter loaded or stored outside the tensor its pointer was
    computed from (even where another argument's memory lies there). It
    reaches the caller itself, not wrapped in Triton's ``InterpreterError``, and a notebook shows
    it in two lines: the sentence, then the kernel's line that made the access."""

    program: tuple[int, int, int] | None = None
    """The program that made the access."""
    launch: tuple | None = None
    """``(kernel, grid, args, kwargs)`` of the launch it happened in, to trace it again."""

    def _render_traceback_(self):  # IPython prints this instead of ~50 lines of interpreter frames
        return [f"OutOfBoundsAccess: {self}", *kernel_line(self.__traceback__)]


class DataRace(RuntimeError):
    """A program of an interpreted launch loaded an element that another program of the same launch
    had stored, without atomics. The interpreter runs programs one at a time, so the values come
    out right there; on a GPU they run at the same time and one program's update can be lost. A
    launch that uses atomics (or a lock built on them) is not checked."""

    def _render_traceback_(self):
        return [f"DataRace: {self}", *kernel_line(self.__traceback__)]


LIBRARY_DIRS = tuple({os.path.dirname(os.path.abspath(__file__)),
                      *(sysconfig.get_paths()[key] for key in ("stdlib", "purelib", "platlib"))})
"""Where the frames of Python's, Triton's, PyTorch's and the course's own code live."""


def kernel_line(tb) -> list[str]:
    """``  in kernel, line N: source`` for the innermost frame of ``tb`` outside the libraries
    and the course: the student's kernel, or their wrapper."""
    import traceback

    ours = [f for f in traceback.extract_tb(tb) if not f.filename.startswith(LIBRARY_DIRS)
            and f"{os.sep}triton{os.sep}" not in f.filename and f"{os.sep}autograder{os.sep}" not in f.filename]
    ours = [f for f in ours if f.line] or ours  # not code made at run time (a dataclass's __init__ has no source)
    if not ours:
        return []
    frame = ours[-1]
    if frame.line:
        return ["  " + say("in {function}, line {line}: {source}", function=frame.name, line=frame.lineno,
                           source=frame.line)]
    return ["  " + say("in {function}, line {line}", function=frame.name, line=frame.lineno)]


def kernel_line_of(error: BaseException) -> list[str]:
    """:func:`kernel_line` for what a kernel raised: from the innermost exception of the
    interpreter's chain (:func:`raised_inside`) outwards, the first whose traceback reaches the
    student's code (a bad call of a ``@triton.jit`` function, ``tl.sum(x, dim=0)``, fails in the
    interpreter's frame, and only its wrapper's traceback holds the kernel's line)."""
    chain = [error]
    while type(chain[-1]).__name__ == "InterpreterError" and chain[-1].__cause__ is not None:
        chain.append(chain[-1].__cause__)
    return next((line for e in reversed(chain) if (line := kernel_line(e.__traceback__))), [])


def raised_inside(error: BaseException) -> BaseException:
    """What a kernel raised, under the interpreter's wrappers: an ``InterpreterError`` for the
    launch, and one more for each ``@triton.jit`` function it was in when it raised."""
    while type(error).__name__ == "InterpreterError" and error.__cause__ is not None:
        error = error.__cause__
    return error


def shorten(error: Exception) -> None:
    """Give Triton's ``InterpreterError`` a two-line form for IPython: what went wrong in the
    kernel, then the kernel's line (the type stays, so code that catches it still does)."""
    cause = raised_inside(error) if error.__cause__ is not None else None
    if cause is not None and not hasattr(error, "_render_traceback_"):
        error._render_traceback_ = lambda: [say("{error} in the kernel: {message}", error=type(cause).__name__,
                                                message=cause),
                                            *kernel_line_of(error)]


@dataclass
class CallRecord:
    """What one call of a student's function did."""

    launches: list[str] = field(default_factory=list)
    """Names of the Triton kernels launched, in order."""
    torch_ops: list[str] = field(default_factory=list)
    """PyTorch operations called that are not plain data movement (e.g. ``aten.add.Tensor``)."""
    host: list[str] = field(default_factory=list)
    """Ways data left PyTorch for the host's own arithmetic: ``Tensor.numpy()``, ``tolist()``,
    a copy from the GPU to the CPU."""
    threads: list[str] = field(default_factory=list)
    """Threads started during the call, or other threads that ran while it did."""
    uncompilable: list[tuple[str, str]] = field(default_factory=list)
    """Interpreted kernels Triton's compiler would refuse, with its reason (the interpreter runs
    a kernel's body as plain Python)."""
    graders_own: Callable[[], contextlib.AbstractContextManager] = field(default=contextlib.nullcontext, repr=False,
                                                                       compare=False)
    """A block in which the grader's own PyTorch ops go unrecorded (its copies of the outputs)."""


ALLOCATING_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                            "zeros", "zeros_like", "new_zeros", "full", "full_like", "new_full",
                            "ones", "ones_like", "new_ones"})
"""Operations that make a fresh tensor: where an output is allocated."""
_UNINITIALISED = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})

_UNWRITTEN = {torch.float16: (torch.int16, 0x7E5A), torch.bfloat16: (torch.int16, 0x7FDA),
              torch.float32: (torch.int32, 0x7FC05A5A), torch.float64: (torch.int64, 0x7FF805A5A5A5A5A5)}
"""The NaN, as raw bits, that a function's uninitialised allocations are filled with: an element
that still holds it was never written. A NaN from arithmetic has other bits (a GPU makes only
the canonical one, a CPU its default or an operand's)."""


def fill_unwritten(t: torch.Tensor) -> None:
    """Fill ``t`` with the marked NaN of its dtype (plain NaN for other floats, -1 for integers)."""
    if t.dtype in _UNWRITTEN:
        t.view(_UNWRITTEN[t.dtype][0]).fill_(_UNWRITTEN[t.dtype][1])
    else:
        t.fill_(float("nan") if t.is_floating_point() else -1)


def unwritten(t: torch.Tensor) -> int:
    """How many elements of ``t`` still hold :func:`fill_unwritten`'s marked NaN."""
    if t.dtype not in _UNWRITTEN:
        return 0
    as_int, bits = _UNWRITTEN[t.dtype]
    return int((t.detach().view(as_int) == bits).sum())


MAX_SCALAR_READS = 64
"""Values a call may read from its tensors one at a time (a length, a flag): more is arithmetic
done on the host, element by element."""


class _OpRecorder(TorchDispatchMode):
    def __init__(self, record: CallRecord, allowed: frozenset[str], zones: GuardZones | None, fill: bool):
        super().__init__()
        self.record, self.allowed, self.zones, self.fill = record, allowed, zones, fill
        self.scalar_reads = 0
        self.launching = 0
        """The interpreter copying a launch's arguments to the host and back (copy_, set_):
        Triton's data movement, not the wrapper's. The kernel's body and the grid's function
        run outside it, watched like the wrapper."""
        self.exempt = 0
        """The grader's own copies of a call's outputs, made before the watch ends."""

    @contextlib.contextmanager
    def exempting(self):
        self.exempt += 1
        try:
            yield
        finally:
            self.exempt -= 1

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No: PyTorch would wrap ``__torch_dispatch__`` to keep Dynamo out of it, a wrapper that
        imports ``torch._dynamo`` on the first op it sees (1.1 s of a grading runner's first call
        on the CPU). A function compiled with ``torch.compile`` still shows its ops here (a test checks)."""
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # PyTorch's own ops by name; an op from any other namespace (torch.library's, whose
        # Python body would run unseen below this mode) always counts, whatever its name.
        name = func.overloadpacket.__name__ if func.namespace == "aten" else None
        if self.exempt:
            return func(*args, **(kwargs or {}))
        if name not in self.allowed and not (self.launching and name in DATA_MOVEMENT_OPS):
            self.record.torch_ops.append(str(func))
        if name == "_local_scalar_dense" and not self.launching:
            self.scalar_reads += 1
            if self.scalar_reads == MAX_SCALAR_READS + 1:
                self.record.host.append(say("more than {count} values read one at a time (.item(), float(), int())",
                                            count=MAX_SCALAR_READS))
        out = func(*args, **(kwargs or {}))
        if name in ("_to_copy", "copy_") and out.device.type == "cpu" and any(
                isinstance(a, torch.Tensor) and a.is_cuda for a in args):
            self.record.host.append(say("a copy from the GPU to the CPU ({op})", op=func))
        if name in ALLOCATING_OPS and isinstance(out, torch.Tensor):
            if name in _UNINITIALISED and self.fill:  # never-written elements then read NaN, not a stale answer
                fill_unwritten(out)
            if self.zones is not None and out.is_cuda:
                out = self.zones.place(out, say("the tensor your function made with torch.{op}", op=name))
        return out


class GuardZones:
    """Tensors placed between two zones of a known byte pattern: a store past either end of
    the tensor changes the pattern, which :meth:`damage` finds after the call. On a GPU such a
    store lands silently in memory the caching allocator hands out next; nothing faults."""

    BYTES = 64 * 1024
    """Each zone: 16 blocks of 1,024 float32 past the end, more than a missing mask writes."""
    PATTERN = 0x5A

    def __init__(self):
        self.placed: list[tuple[torch.Tensor, str, torch.Tensor, int]] = []

    def place(self, t: torch.Tensor, label: str) -> torch.Tensor:
        """A copy of ``t`` (its whole storage, viewed like ``t``) between two guard zones."""
        nbytes = t.untyped_storage().nbytes()
        body = -(-nbytes // 512) * 512  # the allocator's rounding, which a missing mask writes into
        buffer = torch.full((2 * self.BYTES + body,), self.PATTERN, dtype=torch.uint8, device=t.device)
        inside = buffer[self.BYTES:self.BYTES + nbytes]
        inside.copy_(torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()))
        start = self.BYTES // t.element_size() + t.storage_offset()  # as_strided counts from the buffer's start
        placed = inside.view(t.dtype).as_strided(t.size(), t.stride(), start)
        self.placed.append((buffer, label, placed, nbytes))
        return placed

    def damage(self) -> str | None:
        """A sentence on the first tensor whose guard zones were written, or None."""
        for buffer, label, placed, nbytes in self.placed:
            before = buffer[:self.BYTES] != self.PATTERN
            after = buffer[self.BYTES + nbytes:] != self.PATTERN
            if bool(before.any()) or bool(after.any()):
                found = {"tensor": label, "shape": "×".join(map(str, placed.shape)) or say("scalar"),
                         "dtype": str(placed.dtype).removeprefix("torch."),
                         "count": int(before.sum()) + int(after.sum())}
                if bool(after.any()):
                    return say("your kernel stored outside {tensor} ({shape} {dtype}): {count:,} bytes past the end "
                               "of it changed. On a GPU such a store lands silently in memory another tensor gets "
                               "next. Mask the store (e.g. mask=offsets < n_elements); run it with "
                               "TRITON_INTERPRET=1 to see the program and lane.", **found)
                return say("your kernel stored outside {tensor} ({shape} {dtype}): {count:,} bytes before the start "
                           "of it changed. On a GPU such a store lands silently in memory another tensor gets "
                           "next. Mask the store (e.g. mask=offsets < n_elements); run it with "
                           "TRITON_INTERPRET=1 to see the program and lane.", **found)
        return None


def _kernel_classes():
    from triton.runtime.jit import JITFunction
    classes = [JITFunction]
    with contextlib.suppress(ImportError):
        from triton.runtime.interpreter import InterpretedFunction
        classes.append(InterpretedFunction)
    return classes


def _marshalling_methods() -> list[tuple[type, str]]:
    """The interpreter's methods that copy a launch's arguments to the host and back."""
    with contextlib.suppress(ImportError):
        from triton.runtime.interpreter import GridExecutor
        return [(GridExecutor, name) for name in ("_init_args_hst", "_restore_args_dev") if hasattr(GridExecutor, name)]
    return []


@contextlib.contextmanager
def watch(allowed_ops: frozenset[str] = DATA_MOVEMENT_OPS, zones: GuardZones | None = None,
          all_threads: bool = False, fill: bool = True):
    """Record, inside the ``with`` block, the kernel launches, the computing PyTorch ops, data
    handed to the host's arithmetic and threads started; with ``fill``, fill fresh ``torch.empty``
    tensors with NaN; given ``zones``, place the GPU tensors made in the block in them. ``all_threads``:
    also count every other thread that uses CPU meanwhile (a grading runner has none of its own;
    a Jupyter kernel has several, so a notebook's self-check leaves this off).

    The launch counter wraps ``run`` of Triton's kernel classes rather than using
    ``triton.knobs.runtime.launch_enter_hook``: that hook is absent before Triton 3.4
    and never fires in the interpreter. Only the interpreter's copies of a launch's arguments
    are Triton's own work; a grid's function and an interpreted kernel's body are watched like
    the wrapper. PyTorch's dispatch modes see only the thread that entered them, so threads are
    watched apart: any started in the block, and the CPU time of those already running.
    """
    record = CallRecord()
    recorder = _OpRecorder(record, allowed_ops, zones, fill)
    record.graders_own = recorder.exempting

    def counting(original):
        def run(self, *args, grid, warmup, **kwargs):
            if not warmup:
                record.launches.append(getattr(self, "__name__", "kernel"))
                if type(self).__name__ == "InterpretedFunction":
                    from .cross_compile import front_end_problem
                    if (why := front_end_problem(self, args, kwargs)) is not None:
                        record.uncompilable.append((record.launches[-1], why))
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        return run

    def marshalling(original):
        def method(*args, **kwargs):
            recorder.launching += 1
            try:
                return original(*args, **kwargs)
            finally:
                recorder.launching -= 1
        return method

    originals = [(cls, "run", cls.run, counting) for cls in _kernel_classes()]
    originals += [(cls, name, getattr(cls, name), marshalling) for cls, name in _marshalling_methods()]
    for cls, name, original, wrap in originals:
        setattr(cls, name, wrap(original))
    patched = _patch_host_and_threads(record)
    busy = _other_threads_cpu_ns() if all_threads else None
    try:
        with recorder:
            yield record
    finally:
        for cls, name, original, _ in originals:
            setattr(cls, name, original)
        for owner, name, original, own in patched:  # an inherited method is inherited again
            setattr(owner, name, original) if own else delattr(owner, name)
        if busy is not None:
            record.threads += _threads_that_ran(busy)


OTHER_THREAD_CPU_NS = 20_000
"""CPU time another thread may use during a call before it counts as doing the call's work:
an idle thread uses none; taking a job from a queue and launching one PyTorch op costs more."""


def _patch_host_and_threads(record: CallRecord) -> list[tuple]:
    """Make ``Tensor.numpy``/``tolist``/``__array__``/``__dlpack__``, pickling a tensor
    (``torch.save``), reading a storage's bytes in Python, and thread starts leave a note in ``record``."""
    def noting(original, note, target):
        def wrapper(*args, **kwargs):
            if note not in target:  # once: a storage's bytes may be read one by one
                target.append(note)
            return original(*args, **kwargs)
        return wrapper

    replaced = [(torch.Tensor, name, f"Tensor.{name}()", record.host)
                for name in ("numpy", "tolist", "__array__", "__dlpack__", "__reduce_ex__")]
    replaced += [(torch.UntypedStorage, name, f"UntypedStorage.{name}()", record.host)
                 for name in ("__getitem__", "tolist", "_write_file")]
    replaced += [(owner, name, say("a thread started during the call"), record.threads)  # 3.12 renamed one
                 for owner, name in ((_thread, "start_new_thread"), (_thread, "start_joinable_thread"),
                                     (threading, "_start_new_thread"), (threading, "_start_joinable_thread"))]
    patched = []
    for owner, name, note, target in replaced:
        original = getattr(owner, name, None)
        if original is not None:
            patched.append((owner, name, original, name in vars(owner)))
            setattr(owner, name, noting(original, note, target))
    return patched


def _other_threads_cpu_ns() -> dict[int, int]:
    """CPU nanoseconds used so far by each Python thread but this one."""
    times = {}
    for ident in sys._current_frames():
        if ident != threading.get_ident():
            try:
                times[ident] = time.clock_gettime_ns(time.pthread_getcpuclockid(ident))
            except (OSError, OverflowError):
                pass  # it ended meanwhile
    return times


def _threads_that_ran(before: dict[int, int]) -> list[str]:
    now = _other_threads_cpu_ns()
    names = {t.ident: t.name for t in threading.enumerate()}
    return [say("thread {name} ran for {microseconds:,.0f} µs of CPU", name=repr(names.get(ident, ident)),
                microseconds=(now[ident] - before.get(ident, 0)) / 1e3)
            for ident in now if now[ident] - before.get(ident, 0) > OTHER_THREAD_CPU_NS]


def _watched() -> dict[str, object]:
    """What the rules, ``check`` and the runner call on a call's inputs and outputs once its watch
    has ended: ``torch.Tensor``'s methods and operators, and ``torch.cuda.synchronize``, by name.
    Replaced, one would run the student's code where nothing watches it (``torch.Tensor.detach``
    filling the output with ``x + y``)."""
    return {f"torch.Tensor.{name}": value for name, value in vars(torch.Tensor).items()} | {
        "torch.cuda.synchronize": torch.cuda.synchronize}


_INSTALLED = _watched()
"""Those as installed, taken when the course is imported: before any student's code."""


def replaced_functions() -> list[str]:
    """The names of :func:`_watched` replaced, or added to ``torch.Tensor``, since the course was
    imported, e.g. ``['torch.Tensor.detach']``."""
    return [name for name, value in _watched().items() if _INSTALLED.get(name) is not value]


_audit_hooks_added = 0


def _count_audit_hooks(event: str, args) -> None:
    global _audit_hooks_added
    if event == "sys.addaudithook":
        _audit_hooks_added += 1


def count_audit_hooks() -> None:
    """From now on, count the audit hooks added (a process's own hook is never removed)."""
    sys.addaudithook(_count_audit_hooks)


def later_code() -> dict[str, object]:
    """What Python would run outside any call's watch, by name: trace and profile functions,
    signal handlers and interval timers, the garbage collector's callbacks, audit hooks added
    since :func:`count_audit_hooks`. A grading runner compares it before the student's cells
    run and after each call."""
    state = {"sys.settrace": sys.gettrace(), "sys.setprofile": sys.getprofile(),
             "threading.settrace": getattr(threading, "gettrace", lambda: None)(),
             "threading.setprofile": getattr(threading, "getprofile", lambda: None)(),
             "gc.callbacks": tuple(gc.callbacks), "sys.addaudithook": _audit_hooks_added}
    names = {int(sig): sig.name for sig in signal.Signals}
    for number in signal.valid_signals():  # the real-time ones too, which have no name
        with contextlib.suppress(ValueError, OSError):
            state[f"signal.signal({names.get(int(number), int(number))})"] = signal.getsignal(number)
    for timer in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF"):
        state[f"signal.setitimer({timer})"] = signal.getitimer(getattr(signal, timer)) != (0.0, 0.0)
    return state


@contextlib.contextmanager
def time_limit(seconds: float, what: str, notice_after: float | None = None):
    """Raise :class:`KernelTimeout` if the block runs longer than ``seconds``; with
    ``notice_after`` (fewer seconds), first print once that the block is still running, and why
    that is likely (:func:`still_running`), so that a student does not wait minutes in silence.

    Uses SIGALRM, so it works in the main thread only (a notebook's cells run there);
    elsewhere the block runs unguarded. A GPU kernel that never ends blocks inside the
    driver, where no signal reaches; only a separate grading process can stop that.
    """
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return
    noticed = not notice_after or notice_after >= seconds
    start = time.monotonic()

    def expire(signum, frame):
        nonlocal noticed
        left = start + seconds - time.monotonic()
        if not noticed and left > 0:  # a signal handled late still keeps the limit
            noticed = True
            from .printed import aside
            aside(still_running(what, time.monotonic() - start, seconds))
            signal.setitimer(signal.ITIMER_REAL, left)
            return
        raise KernelTimeout(say("{what} did not finish within {seconds:g} s. Look for a loop whose bound never "
                                "becomes false, or a grid far larger than intended.", what=what, seconds=seconds))

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds if noticed else notice_after)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def still_running(what: str, after: float, limit: float) -> str:
    """A note that ``what`` has run ``after`` seconds of its ``limit``: in Triton's interpreter,
    with the kernel under way and how many programs it runs one after another."""
    programs = 0
    if _launching is not None:
        from triton.runtime import interpreter
        programs = math.prod(interpreter.interpreter_builder.grid_dim)  # 0: the launch has not begun its programs
    if not programs:
        return say("({what} is still running after {after:.3g} s; Kernel > Interrupt stops it, and the check stops it "
                   "at {limit:g} s.)", what=what, after=after, limit=limit)
    if programs == 1:
        return say("({what} is still running after {after:.3g} s, inside `{kernel}`, which runs one program: a loop "
                   "that never ends? Kernel > Interrupt stops it, and the check stops it at {limit:g} s.)",
                   what=what, after=after, kernel=_launching, limit=limit)
    return say("({what} is still running after {after:.3g} s, inside `{kernel}`, whose {programs:,} programs Triton's "
               "interpreter runs one after another: a grid far larger than intended, or a loop that never ends? "
               "Kernel > Interrupt stops it, and the check stops it at {limit:g} s.)",
               what=what, after=after, kernel=_launching, programs=programs, limit=limit)


# --- interpreter hooks ---------------------------------------------------------------------
# The interpreter dereferences raw host pointers, so a store past the end of a tensor
# corrupts the Python process (seen: "double free or corruption", then the kernel dies).
# One patch of the interpreter shows each launch's host arguments, then each of its loads,
# stores and atomics, to a watcher: by default the bounds check below, which gives each tensor
# argument an address window of its own and checks every active lane against the tensor its
# pointer was computed from; while :func:`autograder.trace` runs, its recorder
# (:mod:`autograder.memory_trace`), on the same windows.

def window(k: int) -> int:
    """Where tensor argument ``k``'s storage starts for the kernel: 1 TiB of free addresses on
    either side, and no window at or near address 0 (a null pointer belongs to no argument)."""
    return (2 * k + 3) << 40


@dataclass(frozen=True)
class Placed:
    """A tensor argument of an interpreted launch, as its window shows it to the kernel."""

    name: str
    """The kernel's parameter name; ``name[i]`` for the tensors of a tuple argument."""
    tensor: torch.Tensor
    """The real tensor, whose storage the kernel's accesses are translated to."""
    dtype: torch.dtype
    """The dtype the kernel sees (a reinterpreting wrapper's, else the tensor's)."""

    @property
    def storage(self) -> torch.UntypedStorage:
        return self.tensor.untyped_storage()


@dataclass(frozen=True)
class Lanes:
    """One access's lanes (flat), each attributed to the argument whose window it lies in."""

    argument: np.ndarray
    """Index into :attr:`Windows.tensors`; -1 for a lane in no argument's window."""
    offset: np.ndarray
    """Bytes from the start of that argument's storage (the raw address where -1)."""
    active: np.ndarray
    """Not masked off."""
    inside: np.ndarray
    """Within its argument's storage: the lanes that may run."""
    width: int
    """Bytes per lane."""


class Windows:
    """Each tensor argument of one interpreted launch at an address window of its own
    (:func:`window`), 2 TiB from the next: the kernel's pointer arithmetic runs on window
    addresses, and each access is translated back to the storage of the argument it was
    computed from. A lane that strays past its tensor lands in no argument's memory, even where
    the real storages lie side by side, so it is caught where a check of real addresses would
    find it inside a neighbour."""

    def __init__(self, names: list[str], values: list):
        self.tensors: list[Placed] = []
        self.values = [self._place(name, value) for name, value in zip(names, values)]
        # one entry per argument, and a last one (index -1) for lanes in no argument's window
        self._windows = np.array([window(k) for k in range(len(self.tensors))] + [0], dtype=np.int64)
        self._starts = np.array([t.storage.data_ptr() for t in self.tensors] + [0], dtype=np.int64)
        self._sizes = np.array([t.storage.nbytes() for t in self.tensors] + [0], dtype=np.int64)

    def _place(self, name: str, value):
        from triton.runtime.jit import TensorWrapper
        from triton.tools.tensor_descriptor import TensorDescriptor

        if isinstance(value, TensorDescriptor):  # its loads and stores address the base tensor
            return dataclasses.replace(value, base=self._place(name, value.base))
        if isinstance(value, tuple):
            return retuple(value, [self._place(f"{name}[{i}]", v) for i, v in enumerate(value)])
        if not hasattr(value, "data_ptr"):
            return value
        tensor = value.base if isinstance(value, TensorWrapper) else value
        self.tensors.append(Placed(name, tensor, value.dtype))
        placed = TensorWrapper(tensor, value.dtype)
        address = window(len(self.tensors) - 1) + tensor.storage_offset() * tensor.element_size()
        placed.data_ptr = lambda: address  # what the kernel's pointer arithmetic starts from
        return placed

    def lanes(self, ptrs, mask) -> Lanes:
        address = np.asarray(ptrs.data, dtype=np.uint64).ravel()
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(ptrs.data)).ravel()
        width = max(ptrs.get_element_ty().primitive_bitwidth // 8, 1)
        argument = (address >> 41).astype(np.int64) - 1  # the inverse of window()
        argument[(argument < 0) | (argument >= len(self.tensors))] = -1
        offset = address.astype(np.int64) - self._windows[argument]
        inside = (argument >= 0) & (offset >= 0) & (offset + width <= self._sizes[argument])
        return Lanes(argument, offset, active, inside, width)

    def real(self, lanes: Lanes, ptrs):
        """The pointers and mask to run with: real addresses, and the lanes outside their
        argument masked off."""
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        shape = np.shape(ptrs.data)
        address = np.where(lanes.inside, self._starts[lanes.argument] + lanes.offset, 0).astype(np.uint64)
        return (TensorHandle(address.reshape(shape), ptrs.dtype),
                TensorHandle((lanes.active & lanes.inside).reshape(shape), tl.int1))


def retuple(original: tuple, items: list) -> tuple:
    """``items`` as a tuple of ``original``'s kind (a named tuple stays one)."""
    return type(original)(*items) if hasattr(original, "_fields") else tuple(items)


class _Stores:
    """Which program of one launch last stored each element of its tensor arguments: a load of an
    element another program stored is a race (:class:`DataRace`)."""

    def __init__(self, windows: Windows):
        self.windows, self.owners, self.programs, self.atomics = windows, {}, {}, False

    def see(self, kind: str, lanes: Lanes) -> None:
        from triton.runtime.interpreter import interpreter_builder

        self.atomics |= kind == "atomic"  # atomics order programs in ways this does not follow
        if self.atomics:
            return
        program = tuple(int(i) for i in interpreter_builder.grid_idx)
        me = self.programs.setdefault(program, len(self.programs))
        for k in np.unique(lanes.argument[lanes.active]):
            placed = self.windows.tensors[k]
            itemsize = placed.tensor.element_size()
            elements = lanes.offset[lanes.active & (lanes.argument == k)] // itemsize
            key = placed.storage.data_ptr()  # by storage: two arguments may view the same memory
            if kind == "store":
                if key not in self.owners:
                    self.owners[key] = np.full(placed.storage.nbytes() // itemsize, -1, np.int32)
                self.owners[key][elements] = me
                continue
            if key not in self.owners:
                continue
            others = self.owners[key][elements]
            clash = np.flatnonzero((others >= 0) & (others != me))
            if clash.size:
                writer = list(self.programs)[others[clash[0]]]
                raise DataRace(say(
                    "program {program} loaded element {element} of `{name}`, which program {writer} of the same "
                    "launch had stored ({lanes} such lanes in this load). On a GPU a launch's programs run at the "
                    "same time, in no set order, so that load may see the value before the store or after it: "
                    "when it feeds a store of its own (load, add, store) one program's update is lost. The "
                    "interpreter runs programs one at a time, which hides it. Combine programs' results with "
                    "tl.atomic_add, or through a buffer with a row per program and a second kernel.",
                    program=program, element=int(elements[clash[0]]), name=placed.name, writer=writer,
                    lanes=clash.size))


_MASK_EXAMPLES = {"load": "tl.load(..., mask=offsets < n_elements)",
                  "store": "tl.store(..., mask=offsets < n_elements)",
                  "atomic": "tl.atomic_add(..., mask=offsets < n_elements)"}


def _out_of_bounds(windows: Windows, kind: str, lanes: Lanes, how: str | None) -> OutOfBoundsAccess:
    """The error for an access with stray lanes; ``how`` it was made (:data:`_access_how`)."""
    from triton.runtime.interpreter import interpreter_builder

    stray = lanes.active & ~lanes.inside
    first = int(np.flatnonzero(stray)[0])
    k = int(lanes.argument[first])
    count = {"stray": int(stray.sum()), "active": int(lanes.active.sum())}
    if k < 0:
        where = say("{stray} of {active} active lanes address no tensor passed to the kernel (the first, "
                    "{address:#x}, lies far from every argument: a pointer made from an integer, or an offset of "
                    "terabytes)", address=int(lanes.offset[first]), **count)
    else:
        placed = windows.tensors[k]
        itemsize = placed.tensor.element_size()
        found = {"name": placed.name, "offset": int(lanes.offset[first]) // itemsize,
                 "size": placed.storage.nbytes() // itemsize, **count}
        if found["offset"] >= 0 and found["size"] != 1:
            where = say("{stray} of {active} active lanes fall outside `{name}`, the tensor their pointer was "
                        "computed from; the first is element {offset} of `{name}`, whose memory holds {size} "
                        "elements", **found)
        elif found["offset"] >= 0:
            where = say("{stray} of {active} active lanes fall outside `{name}`, the tensor their pointer was "
                        "computed from; the first is element {offset} of `{name}`, whose memory holds {size} "
                        "element", **found)
        elif found["size"] != 1:
            where = say("{stray} of {active} active lanes fall outside `{name}`, the tensor their pointer was "
                        "computed from; the first is element {offset} of `{name}`, {before} before its start, "
                        "whose memory holds {size} elements", before=-found["offset"], **found)
        else:
            where = say("{stray} of {active} active lanes fall outside `{name}`, the tensor their pointer was "
                        "computed from; the first is element {offset} of `{name}`, {before} before its start, "
                        "whose memory holds {size} element", before=-found["offset"], **found)
    program = tuple(interpreter_builder.grid_idx)
    if kind == "load":
        head = say("out-of-bounds load in program {program}: {where}.", program=program, where=where)
    elif kind == "store":
        head = say("out-of-bounds store in program {program}: {where}.", program=program, where=where)
    else:
        head = say("out-of-bounds atomic in program {program}: {where}.", program=program, where=where)
    if how == "no mask":
        advice = say("It has no mask: lanes outside the data need one (e.g. {example}), or the offset is wrong.",
                     example=_MASK_EXAMPLES[kind])
    elif how == "descriptor":
        advice = say("It went through a tensor descriptor, whose shape or strides reach past the tensor it was made "
                     "from: give the descriptor the tensor's own shape and strides.")
    elif kind == "atomic":  # Triton gives an atomic without a mask one that is true everywhere
        advice = say("The offset is wrong, or lanes past the data need a mask (e.g. {example}).",
                     example=_MASK_EXAMPLES[kind])
    else:
        advice = say("Its mask let these lanes through: the mask must be false wherever the pointer falls outside "
                     "the tensor, so compare it with the offsets added to the pointer.")
    message = f"{head} {advice}"
    error = OutOfBoundsAccess(message)
    error.program = tuple(int(i) for i in interpreter_builder.grid_idx)
    return error


def bounds_check(names: list[str], values: list):
    """The default watcher of interpreted launches (below): each tensor argument in a window of
    its own, each access checked against the tensor it was computed from, and each load against
    the other programs' stores."""
    windows = Windows(names, values)
    if not windows.tensors:
        return values, None
    stores = _Stores(windows)

    def check(kind: str, ptrs, mask):
        lanes = windows.lanes(ptrs, mask)
        if not (lanes.inside | ~lanes.active).all():
            raise _out_of_bounds(windows, kind, lanes, _access_how)
        stores.see(kind, lanes)
        return windows.real(lanes, ptrs)
    return windows.values, check


_on_launch = bounds_check
"""Sees each interpreted launch: called with its argument names and host values, it returns
the values the kernel runs with and the function that sees each access, or None."""
_on_access = None
"""That function for the launch under way: called with the kind ("load", "store" or
"atomic"), the pointers and the mask, it returns the pointers and mask to run with."""
_access_how: str | None = None
"""How the interpreted access under way was written, when not a masked pointer access: "no mask"
(``tl.load``/``tl.store`` without one) or "descriptor" (a tensor descriptor's)."""
_launching: str | None = None
"""The name of the interpreted kernel under way, or None (:func:`still_running`)."""
_tf32 = False
"""Whether interpreted dots round float32 operands as a GPU does (:func:`gpu_dot_precision`)."""


@contextlib.contextmanager
def gpu_dot_precision(on: bool = True):
    """In the block, an interpreted ``tl.dot`` of float32 operands with ``input_precision="tf32"``
    (Triton's default) rounds them to TF32 first, as a GPU's tensor cores do: 10 bits of mantissa
    where float32 has 23. The interpreter alone multiplies in full float32, so a kernel that
    misses float32's tolerance on a GPU would pass on the CPU."""
    global _tf32
    if on:
        install_interpreter_hooks()
    previous, _tf32 = _tf32, on
    try:
        yield
    finally:
        _tf32 = previous


def round_to_tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest TF32 value (ties to even); inf and NaN as they are."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0xFFF) + ((bits >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000))
    return np.where(np.isfinite(x), rounded.view(np.float32), x)


@contextlib.contextmanager
def interpreter_launches(on_launch):
    """Show the interpreted launches in the block to ``on_launch`` instead of the bounds check."""
    global _on_launch
    install_interpreter_hooks()
    previous, _on_launch = _on_launch, on_launch
    try:
        yield
    finally:
        _on_launch = previous


def _no_timing(kernel_call, quantiles) -> list[float]:
    """An interpreted autotuner's timer: on the CPU there is nothing to time, so every
    configuration ties and the autotuner keeps the first."""
    return [0.0] * len(quantiles)


def install_interpreter_hooks() -> None:
    """Patch the interpreter (once) so that its launches and accesses reach ``_on_launch``:
    interpreted kernels raise :class:`OutOfBoundsAccess` instead of corrupting memory, and refuse
    bfloat16 tensors, whose arithmetic the interpreter gets wrong silently (Triton 3.9: an add of two
    bfloat16 vectors of standard normal values was off by 3e38). In a process interpreting every
    kernel (``TRITON_INTERPRET=1``; :func:`autograder.trace` interprets one kernel on a GPU too),
    an autotuner with several configurations runs its first, untimed: Triton's own would ask for a
    GPU to time them on ("0 active drivers"), so a kernel tuned on a GPU still runs, and is
    graded, on the CPU."""
    import triton.language as tl
    from triton.runtime import interpreter
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.errors import InterpreterError

    if getattr(interpreter, "_course_hooks", False):
        return
    timed = Autotuner.do_bench  # the property: a GPU's timer, for a process that also runs on a GPU
    Autotuner.do_bench = property(lambda self: _no_timing if os.environ.get("TRITON_INTERPRET") == "1"
                                  else timed.__get__(self))
    executor = interpreter.GridExecutor
    original_init, original_call = executor._init_args_hst, executor.__call__

    def init_args(self, args_dev, kwargs):
        global _on_access
        if any(getattr(a, "dtype", None) == torch.bfloat16 for a in (*args_dev, *kwargs.values())):
            raise TypeError(say("Triton's interpreter has no bfloat16: it would compute on the raw bits and return "
                                "wrong values without an error. On the CPU use float16 or float32; bfloat16 runs on "
                                "a GPU."))
        args_hst, kwargs_hst = original_init(self, args_dev, kwargs)
        names = self.arg_names[:len(args_hst)] + list(kwargs_hst)
        values, _on_access = _on_launch(names, list(args_hst) + list(kwargs_hst.values()))
        return values[:len(args_hst)], dict(zip(kwargs_hst, values[len(args_hst):]))

    def call(self, *args_dev, **kwargs):
        global _on_access, _launching
        previous, outer = _on_access, _launching
        _launching = getattr(self.fn, "__name__", "the kernel")
        interpreter.interpreter_builder.set_grid_dim(0, 0, 0)  # until this launch sets its own
        try:
            with np.errstate(all="ignore"):  # overflow to inf, 0/0 to NaN: IEEE arithmetic, silent as on a GPU
                return original_call(self, *args_dev, **kwargs)
        except Exception as error:
            stray = raised_inside(error)
            if isinstance(stray, KernelTimeout) and stray.launch is None:
                programs = math.prod(getattr(interpreter.interpreter_builder, "grid_dim", (0,)))
                stray.launch = (getattr(self.fn, "__name__", "the kernel"), programs)
            if isinstance(stray, OutOfBoundsAccess) and stray.launch is None:
                stray.launch = (interpreter.InterpretedFunction(self.fn), self.grid, args_dev, kwargs)
            if stray is not error and isinstance(stray, (OutOfBoundsAccess, DataRace)):
                raise stray from None  # the finding itself, not Triton's wrapper
            if isinstance(error, InterpreterError):
                shorten(error)
            raise
        except KeyboardInterrupt as stop:  # Kernel > Interrupt, during a launch that ran too long
            raise KeyboardInterrupt("\n".join([
                say("interrupted inside `{kernel}`, in Triton's interpreter, which runs one program after another: "
                    "look for a loop whose bound never becomes false, or try a smaller input on the CPU.",
                    kernel=getattr(self.fn, "__name__", "the kernel")),
                *kernel_line(stop.__traceback__)])) from None
        finally:
            _on_access, _launching = previous, outer

    def seen(kind, ptrs, mask):
        return (ptrs, mask) if _on_access is None else _on_access(kind, ptrs, mask)

    builder = type(interpreter.interpreter_builder)
    load, store, dot = builder.create_masked_load, builder.create_masked_store, builder.create_dot
    rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas

    def marked(original, how: str):
        """``original``, with :data:`_access_how` saying ``how`` while it runs."""
        def access(self, *args, **kwargs):
            global _access_how
            outer, _access_how = _access_how, how
            try:
                return original(self, *args, **kwargs)
            finally:
                _access_how = outer
        return access

    def masked_load(self, ptrs, mask, *rest, **options):
        return load(self, *seen("load", ptrs, mask), *rest, **options)

    def masked_store(self, ptrs, value, mask, *rest, **options):
        ptrs, mask = seen("store", ptrs, mask)
        return store(self, ptrs, value, mask, *rest, **options)

    def atomic_rmw(self, op, ptr, val, mask, *rest, **options):
        ptr, mask = seen("atomic", ptr, mask)
        return rmw(self, op, ptr, val, mask, *rest, **options)

    def atomic_cas(self, ptr, *rest, **options):
        everywhere = interpreter.TensorHandle(np.ones(np.shape(ptr.data), dtype=bool), tl.int1)
        ptr, mask = seen("atomic", ptr, everywhere)
        if not np.all(mask.data):  # it has no mask: a lane cannot be left out
            raise OutOfBoundsAccess(say("an atomic_cas outside its tensor: give every lane a valid address."))
        return cas(self, ptr, *rest, **options)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if _tf32 and getattr(input_precision, "name", None) == "TF32" and a.dtype == b.dtype == tl.float32:
            a, b = (interpreter.TensorHandle(round_to_tf32(t.data), t.dtype) for t in (a, b))
        return dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    executor._init_args_hst, executor.__call__ = init_args, call
    builder.create_dot = create_dot
    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder.create_load = marked(builder.create_load, "no mask")  # both call create_masked_*, above
    builder.create_store = marked(builder.create_store, "no mask")
    for name in ("create_descriptor_load", "create_descriptor_store"):  # so do these, with the descriptor's mask
        if hasattr(builder, name):
            setattr(builder, name, marked(getattr(builder, name), "descriptor"))
    builder.create_atomic_rmw, builder.create_atomic_cas = atomic_rmw, atomic_cas
    interpreter._course_hooks = True
