"""Where kernels run: the GPU when PyTorch sees one, Triton's interpreter on the CPU otherwise.

Call :func:`setup_device` once, at the top of a notebook, before any ``@triton.jit``:
Triton reads ``TRITON_INTERPRET`` when a kernel is decorated, not when it is launched.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from . import settings
from .language import say


@dataclass(frozen=True)
class DeviceChoice:
    """The device the course runs on, as chosen by :func:`setup_device`."""

    device: str
    """Where tensors live: ``"cuda"`` or ``"cpu"``."""
    interpreted: bool
    """True when kernels run in Triton's interpreter (NumPy, one program at a time)."""
    name: str
    """The card's name, or ``"CPU"``."""

    @property
    def has_gpu(self) -> bool:
        return not self.interpreted

    def describe(self) -> str:
        if self.interpreted:
            return say("Triton course: {name}, kernels run in Triton's interpreter (TRITON_INTERPRET=1). Results "
                       "are exact but slow, bfloat16 is not supported, and throughput checks need a GPU.",
                       name=self.name)
        return say("Triton course: GPU {name}; kernels are compiled to machine code and throughput checks are live.",
                   name=self.name)


_choice: DeviceChoice | None = None


def setup_device(verbose: bool = True) -> DeviceChoice:
    """Pick the GPU or the interpreter (once per process), print one line, return the choice."""
    global _choice
    if _choice is None:
        _choice = _choose()
        if _choice.interpreted:
            from .guards import install_interpreter_hooks
            install_interpreter_hooks()
    if verbose:
        print(_choice.describe())
    return _choice


def start_cuda() -> None:
    """Create this process's CUDA context now: the driver opens its device files and reads its
    settings here, so a process that then confines itself (:mod:`autograder.grading.confine`) keeps the GPU."""
    import torch

    torch.cuda.init()
    torch.empty(1, device="cuda")


def current() -> DeviceChoice:
    """The choice made by :func:`setup_device`, making it silently if nobody has yet."""
    return _choice or setup_device(verbose=False)


def _choose() -> DeviceChoice:
    import torch

    wanted, var = settings.DEVICE.get(), settings.DEVICE.name
    if os.environ.get("TRITON_INTERPRET") == "1" and wanted == "auto":
        wanted = "cpu"  # the user already asked Triton for its interpreter
    gpu = torch.cuda.is_available()
    if wanted == "gpu" and not gpu:
        raise RuntimeError(say("{var}=gpu, but PyTorch sees no CUDA GPU (torch {version}). Unset {var} to run on "
                               "the CPU.", var=var, version=torch.__version__))
    if gpu and wanted != "cpu":
        if os.environ.get("TRITON_INTERPRET") == "1":
            raise RuntimeError(say("TRITON_INTERPRET=1 is set but {var}=gpu: unset one of them.", var=var))
        return DeviceChoice("cuda", False, torch.cuda.get_device_name())
    _check_interpreter_versions()
    os.environ["TRITON_INTERPRET"] = "1"
    _set_interpret_knob()
    _reinterpret_triton_language()
    return DeviceChoice("cpu", True, "CPU")


def _set_interpret_knob() -> None:
    """Recent Triton caches the variable in ``triton.knobs``; older versions read it directly."""
    import triton

    knobs = getattr(triton, "knobs", None)
    if knobs is not None and hasattr(knobs.runtime, "interpret"):
        knobs.runtime.interpret = True


def _reinterpret_triton_language() -> None:
    """Rebuild Triton's own ``@jit`` helpers (``tl.max``, ``tl.sum``, ...) for the interpreter.

    They are made when ``triton.language`` is imported; if that happened before the switch
    they are compiled-mode functions, which the interpreter refuses to call.
    """
    reinterpret(triton_language_namespaces())


@contextlib.contextmanager
def language_restored():
    """While inside, Triton's interpreter may patch ``triton.language`` as it likes; afterwards
    every attribute of the modules and classes it patches is what it was before. (Triton 3.6's
    interpreter restores its patches after a launch, but not those a ``@triton.jit`` helper's
    call makes, such as ``tensor.__mul__``: left there, they break the next compile of any
    kernel on a GPU: ``'ir.value' object has no attribute 'dtype'``.)"""
    import triton.language as tl

    patched = [tl, tl.core, tl.math, tl.core.tensor, *filter(None, [getattr(tl.core, "tensor_descriptor_base", None)])]
    before = [dict(vars(owner)) for owner in patched]
    missing = object()
    try:
        yield
    finally:
        for owner, saved in zip(patched, before):
            now = vars(owner)
            for name in [name for name in now if name not in saved]:
                delattr(owner, name)
            for name, value in saved.items():
                if now.get(name, missing) is not value:
                    setattr(owner, name, value)


def triton_language_namespaces() -> list[dict]:
    """The globals of every loaded ``triton.language`` module."""
    import sys

    return [vars(module) for name, module in list(sys.modules.items())
            if name.startswith("triton.language") and module is not None]


def reinterpret(namespaces: list[dict]) -> list[tuple[dict, str, object]]:
    """Swap each compiled-mode ``@triton.jit`` function in ``namespaces`` (module globals), and
    in the globals of those it can call, for an interpreted one; return what was swapped as
    (namespace, name, original), to put back."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return swap_kernels(namespaces, JITFunction, InterpretedFunction)


def put_back(changes: list[tuple[dict, str, object]]) -> None:
    """Undo :func:`swap_kernels` (or :func:`reinterpret`): each name holds its original again."""
    for namespace, name, original in reversed(changes):
        namespace[name] = original


def swap_kernels(namespaces: list[dict], kind: type, make: type) -> list[tuple[dict, str, object]]:
    """Swap each function of ``kind`` in ``namespaces`` (module globals), and in the globals of
    those it can call, for ``make`` of its Python function (one each, however often it is named);
    return what was swapped as (namespace, name, original), to put back."""
    swapped: dict[int, object] = {}
    changes, pending, visited = [], list(namespaces), set()
    while pending:
        namespace = pending.pop()
        if id(namespace) in visited:
            continue
        visited.add(id(namespace))
        for name, value in list(namespace.items()):
            if isinstance(value, kind):
                if id(value) not in swapped:
                    swapped[id(value)] = make(value.fn)
                    pending.append(value.fn.__globals__)
                changes.append((namespace, name, value))
                namespace[name] = swapped[id(value)]
    return changes


def _check_interpreter_versions() -> None:
    import numpy
    import triton

    def major_minor(version: str) -> tuple[int, int]:
        major, minor = version.split(".")[:2]
        return int(major), int(minor)

    if major_minor(triton.__version__) < (3, 9) and major_minor(numpy.__version__) >= (2, 4):
        raise RuntimeError(say(
            "Triton {triton}'s interpreter breaks under numpy {numpy} (a `for` loop over a runtime bound fails). "
            "Install triton>=3.9 (pip install 'triton>=3.9,<3.10') or numpy<2.4 (pip install 'numpy<2.4').",
            triton=triton.__version__, numpy=numpy.__version__))
