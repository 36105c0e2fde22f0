"""CUDA memory shared between processes on one GPU, through the driver's IPC handles.

A runner exports the outputs of a timed batch (:func:`export`); the judge maps them
(:func:`mapped`) and reads them with its own kernels, so what it checks is the memory the
student's kernels wrote, not a runner's account of it. PyTorch's own sharing
(``torch.multiprocessing``) needs a file in /dev/shm, which a confined runner may not create;
the driver's handles need nothing but the GPU's device files.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools

import torch

from ..language import say

_IPC_HANDLE_BYTES = 64
_LAZY_ENABLE_PEER_ACCESS = 1


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * _IPC_HANDLE_BYTES)]


class IpcError(RuntimeError):
    """The driver refused to export or map memory."""


@functools.cache
def _driver():
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                                            ctypes.c_uint64]
    lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_Handle), ctypes.c_uint64]
    lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), _Handle, ctypes.c_uint]
    lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
    return lib


def _check(result: int, what: str) -> None:
    if result != 0:
        raise IpcError(say("{call} failed with CUDA error {code}", call=what, code=result))


def export(t: torch.Tensor) -> dict:
    """How another process maps ``t`` (contiguous, on the GPU): its allocation's handle, and
    where ``t`` starts in it; an empty ``t`` has no memory, and an empty handle."""
    if not t.numel():
        return {"handle": "", "offset": 0, "dtype": str(t.dtype).removeprefix("torch."), "size": list(t.shape)}
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(_driver().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), t.data_ptr()),
           "cuMemGetAddressRange")
    handle = _Handle()
    _check(_driver().cuIpcGetMemHandle(ctypes.byref(handle), base), "cuIpcGetMemHandle")
    return {"handle": bytes(handle).hex(), "offset": t.data_ptr() - base.value,
            "dtype": str(t.dtype).removeprefix("torch."), "size": list(t.shape)}


def is_export(description) -> bool:
    """Whether a runner's ``description`` of an output has the form :func:`export` gives (its
    sizes bounded as :mod:`.protocol` bounds a tensor's): nothing about the memory it names."""
    from .protocol import DTYPES, MAX_DIMS, MAX_LAYOUT_VALUE
    size = description.get("size") if isinstance(description, dict) else None
    return (isinstance(size, list) and len(size) <= MAX_DIMS
            and all(type(n) is int and 0 <= n < MAX_LAYOUT_VALUE for n in size)
            and description.get("dtype") in DTYPES and isinstance(description.get("handle"), str)
            and type(description.get("offset")) is int)


class _Memory:
    """A device pointer PyTorch can wrap (``__cuda_array_interface__``), as bytes."""

    def __init__(self, pointer: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (pointer, False),
                                         "version": 3}


@contextlib.contextmanager
def mapped(handles: list[str]):
    """Map each exported allocation once (several outputs may share one); yields a function
    ``tensor(handle, offset, dtype, size)`` that checks the view fits its allocation (an empty
    handle: an empty tensor)."""
    lib, bases, sizes = _driver(), {}, {}
    try:
        for text in dict.fromkeys(filter(None, handles)):
            raw = bytes.fromhex(text)
            if len(raw) != _IPC_HANDLE_BYTES:
                raise IpcError(say("a memory handle of the wrong size"))
            pointer = ctypes.c_uint64()
            _check(lib.cuIpcOpenMemHandle_v2(ctypes.byref(pointer), _Handle.from_buffer_copy(raw),
                                             _LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")
            bases[text] = pointer.value
            base, size = ctypes.c_uint64(), ctypes.c_size_t()
            _check(lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), pointer.value),
                   "cuMemGetAddressRange")
            sizes[text] = size.value - (pointer.value - base.value)

        def tensor(handle: str, offset: int, dtype: torch.dtype, size: list[int]) -> torch.Tensor:
            nbytes = dtype.itemsize * (int(torch.Size(size).numel()) if size else 1)
            if not handle:
                if nbytes:
                    raise IpcError(say("an output of {nbytes} bytes without memory", nbytes=nbytes))
                return torch.empty(size, dtype=dtype, device="cuda")
            if not 0 <= offset <= sizes[handle] - nbytes:
                raise IpcError(say("an output that reaches past its allocation ({offset} + {nbytes} > {size})",
                                   offset=offset, nbytes=nbytes, size=sizes[handle]))
            memory = torch.as_tensor(_Memory(bases[handle] + offset, nbytes), device="cuda")
            return memory.view(dtype).view(size)

        yield tensor
    finally:
        torch.cuda.synchronize()  # nothing may read the memory once it is unmapped
        for pointer in bases.values():
            lib.cuIpcCloseMemHandle(pointer)
