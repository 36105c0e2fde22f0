"""Watch what a student's function does: which Triton kernels it launches, which PyTorch
operations it calls, whether it finishes in time, and (in the interpreter) whether its
kernels touch memory outside the tensors they were given."""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
import types
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Operations that only allocate, move, reinterpret or read back data. A wrapper may use
# them freely; anything else computes, and the exercise decides which of those it allows.
DATA_MOVEMENT_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "zero_", "fill_", "full", "full_like", "new_zeros", "new_full",
    "copy_", "clone", "_to_copy", "to", "contiguous", "detach", "alias", "lift_fresh",
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "permute",
    "transpose", "t", "squeeze", "unsqueeze", "flatten", "slice", "select", "narrow",
    "unbind", "split", "set_", "resize_", "is_same_size", "_local_scalar_dense",
})


class Seal:
    """Attributes of ``namespaces`` as they were when the seal was made; by default the functions
    and classes a verdict relies on, in the builtins, ``torch`` (its ``Tensor``, ``cuda`` and
    ``testing``), ``triton.testing`` and every loaded ``autograder`` module. ``broken()`` names
    those replaced or removed since; ``restore()`` puts them back."""

    def __init__(self, namespaces=None, callables_only: bool = True):
        keep = _sealed if callables_only else (lambda value: True)
        self.saved = [(ns, {k: v for k, v in vars(ns).items() if keep(v)})
                      for ns in (_sealed_namespaces() if namespaces is None else namespaces)]

    def broken(self) -> list[str]:
        return [f"{getattr(ns, '__name__', ns)}.{name}" for ns, name, _ in self._changed()]

    def restore(self) -> None:
        for ns, name, original in self._changed():
            setattr(ns, name, original)

    def _changed(self) -> list[tuple]:
        # A decorator's wrapper around the original is PyTorch's own doing (the first use of
        # torch._dynamo wraps torch.manual_seed, for one): not counted.
        return [(ns, name, value) for ns, entries in self.saved for name, value in entries.items()
                if (now := vars(ns).get(name)) is not value and getattr(now, "__wrapped__", None) is not value]


def _sealed(value) -> bool:
    return callable(value) and not isinstance(value, types.ModuleType)


def _sealed_namespaces() -> list:
    import builtins
    import triton.testing
    return [builtins, torch, torch.Tensor, torch.cuda, torch.testing, triton.testing,
            *(m for name, m in sorted(sys.modules.items()) if name.split(".")[0] == "autograder" and m)]


class KernelTimeout(TimeoutError):
    """The student's function ran longer than its time limit."""


class OutOfBoundsAccess(IndexError):
    """A kernel run by the interpreter loaded or stored outside every tensor it was given."""


@dataclass
class CallRecord:
    """What one call of a student's function did."""

    launches: list[str] = field(default_factory=list)
    """Names of the Triton kernels launched, in order."""
    torch_ops: list[str] = field(default_factory=list)
    """PyTorch operations called that are not plain data movement (e.g. ``aten.add.Tensor``)."""


class _OpRecorder(TorchDispatchMode):
    def __init__(self, record: CallRecord, allowed: frozenset[str]):
        super().__init__()
        self.record, self.allowed = record, allowed

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ not in self.allowed:
            self.record.torch_ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _kernel_classes():
    from triton.runtime.jit import JITFunction
    classes = [JITFunction]
    with contextlib.suppress(ImportError):
        from triton.runtime.interpreter import InterpretedFunction
        classes.append(InterpretedFunction)
    return classes


@contextlib.contextmanager
def watch(allowed_ops: frozenset[str] = DATA_MOVEMENT_OPS):
    """Record the kernel launches and the computing PyTorch ops inside the ``with`` block.

    The launch counter wraps ``run`` of Triton's kernel classes rather than using
    ``triton.knobs.runtime.launch_enter_hook``: that hook is absent before Triton 3.4
    and never fires in the interpreter.
    """
    record = CallRecord()
    originals = {cls: cls.run for cls in _kernel_classes()}

    def counting(original):
        def run(self, *args, grid, warmup, **kwargs):
            if not warmup:
                record.launches.append(getattr(self, "__name__", "kernel"))
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        return run

    for cls, original in originals.items():
        cls.run = counting(original)
    try:
        with _OpRecorder(record, allowed_ops):
            yield record
    finally:
        for cls, original in originals.items():
            cls.run = original


@contextlib.contextmanager
def time_limit(seconds: float, what: str):
    """Raise :class:`KernelTimeout` if the block runs longer than ``seconds``.

    Uses SIGALRM, so it works in the main thread only (a notebook's cells run there);
    elsewhere the block runs unguarded. A GPU kernel that never ends blocks inside the
    driver, where no signal reaches; only a separate grading process can stop that.
    """
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def expire(signum, frame):
        raise KernelTimeout(f"{what} did not finish within {seconds:g} s. Look for a loop "
                            "whose bound never becomes false, or a grid far larger than intended.")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- interpreter bounds check -------------------------------------------------------------
# The interpreter dereferences raw host pointers, so a store past the end of a tensor
# corrupts the Python process (seen: "double free or corruption", then the kernel dies).
# We check every active address against the storages of the launch's tensor arguments.

@dataclass(frozen=True)
class _Region:
    name: str
    start: int
    end: int
    itemsize: int


_regions: list[_Region] | None = None


def _tensor_regions(names, args) -> list[_Region] | None:
    regions = []
    for name, arg in zip(names, args):
        if isinstance(arg, torch.Tensor):
            storage = arg.untyped_storage()
            regions.append(_Region(name, storage.data_ptr(), storage.data_ptr() + storage.nbytes(),
                                   arg.element_size()))
        elif hasattr(arg, "data_ptr") or isinstance(arg, tuple):
            return None  # descriptors and tuples of tensors: not tracked, so not checked
    return regions


def _check_addresses(kind: str, ptrs, mask) -> None:
    if not _regions:
        return
    addresses = np.asarray(ptrs.data, dtype=np.uint64)
    active = addresses[np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)]
    if active.size == 0:
        return
    width = max(ptrs.get_element_ty().primitive_bitwidth // 8, 1)
    inside = np.zeros(active.shape, dtype=bool)
    for r in _regions:
        inside |= (active >= r.start) & (active + width <= r.end)
    if inside.all():
        return
    from triton.runtime.interpreter import interpreter_builder

    first = int(active[~inside][0])
    nearest = max((r for r in _regions if r.start <= first), key=lambda r: r.start,
                  default=_regions[0])
    offset = (first - nearest.start) // nearest.itemsize
    size = (nearest.end - nearest.start) // nearest.itemsize
    raise OutOfBoundsAccess(
        f"out-of-bounds {kind} in program {tuple(interpreter_builder.grid_idx)}: "
        f"{int((~inside).sum())} of {active.size} active lanes fall outside the tensors passed "
        f"to the kernel; the first is element {offset} of `{nearest.name}`, whose memory holds "
        f"{size} element{'s' if size != 1 else ''}. Guard the access with a mask (e.g. tl.{kind}(..., "
        f"mask=offsets < n_elements)).")


def install_interpreter_bounds_check() -> None:
    """Make interpreted kernels raise :class:`OutOfBoundsAccess` instead of corrupting memory."""
    from triton.runtime import interpreter

    if getattr(interpreter, "_course_bounds_check", False):
        return
    executor = interpreter.GridExecutor
    original_init, original_call = executor._init_args_hst, executor.__call__

    def init_args(self, args_dev, kwargs):
        global _regions
        args_hst, kwargs_hst = original_init(self, args_dev, kwargs)
        names = self.arg_names[:len(args_hst)] + list(kwargs_hst)
        _regions = _tensor_regions(names, list(args_hst) + list(kwargs_hst.values()))
        return args_hst, kwargs_hst

    def call(self, *args_dev, **kwargs):
        global _regions
        previous = _regions
        try:
            return original_call(self, *args_dev, **kwargs)
        finally:
            _regions = previous

    builder = type(interpreter.interpreter_builder)
    original_load, original_store = builder.create_masked_load, builder.create_masked_store

    def masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        _check_addresses("load", ptrs, mask)
        return original_load(self, ptrs, mask, other, cache_policy, is_volatile)

    def masked_store(self, ptrs, value, mask, cache_policy):
        _check_addresses("store", ptrs, mask)
        return original_store(self, ptrs, value, mask, cache_policy)

    executor._init_args_hst, executor.__call__ = init_args, call
    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    interpreter._course_bounds_check = True
