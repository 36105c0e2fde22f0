"""What the judge and a runner say to each other: a JSON header, then the raw bytes of the
tensors it lists. Never a pickle: the judge decodes what a runner sends without running any
of it, and checks every size, dtype and layout before it builds a tensor from the bytes."""
from __future__ import annotations

import json
import re
import socket
import time
from typing import Callable

import torch

from ..language import say

MAX_HEADER_BYTES = 1 << 20
MAX_LAYOUT_VALUE, MAX_DIMS = 1 << 48, 16
"""The largest size, stride, offset or byte count a tensor description may hold, and its most dimensions."""
ALIVE_CHECK_S = 0.5
"""How long a wait for the peer goes before asking whether its process still runs."""
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""JSON's escape of a UTF-16 surrogate (U+D800 to U+DFFF), alone or one of a pair."""
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool)}


class ProtocolError(Exception):
    """A message that is not what the protocol allows."""


class PeerGone(ProtocolError):
    """The other end closed the channel (the runner ended)."""


class TimedOut(ProtocolError):
    """No whole message came before the deadline."""


def send(sock: socket.socket, header: dict, tensors=()) -> None:
    """Send ``header`` and, for each of ``tensors`` (on any device), the bytes its view
    reaches, from its first element to its last: a strided view keeps its gaps."""
    metas, blobs = [], []
    base = torch._C.TensorBase  # its methods, which no Python code can replace (the sender may run a student's)
    for t in tensors:
        span = 1 + sum((n - 1) * step for n, step in zip(t.shape, base.stride(t))) if base.numel(t) else 0
        reached = base.contiguous(base.as_strided(t, (span,), (1,), base.storage_offset(t)))
        metas.append({"dtype": str(t.dtype).removeprefix("torch."), "size": list(t.shape),
                      "stride": list(base.stride(t)), "offset": 0, "nbytes": span * base.element_size(t)})
        blobs.append(memoryview(base.numpy(base.cpu(base.view(reached, torch.uint8)))) if span else b"")
    body = json.dumps(dict(header, tensors=metas)).encode()
    sock.sendall(len(body).to_bytes(4, "big") + body)
    for blob in blobs:
        sock.sendall(blob)


def recv(sock: socket.socket, deadline: float, max_tensor_bytes: int,
         device: str = "cpu", alive: Callable[[], bool] = lambda: True) -> tuple[dict, list[torch.Tensor]]:
    """The next message: its header and its tensors (built on ``device``), checked against the
    protocol; at most ``max_tensor_bytes`` of tensor data, and all of it before ``deadline``
    (a ``time.monotonic()`` value). ``alive``: whether the peer's process still runs, asked
    whenever nothing has come for :data:`ALIVE_CHECK_S` (a child it started may hold the channel
    open after it ended)."""
    size = int.from_bytes(_read(sock, 4, deadline, alive), "big")
    if size > MAX_HEADER_BYTES:
        raise ProtocolError(say("a header of {size} bytes", size=size))
    data = _read(sock, size, deadline, alive)
    try:  # ValueError: not JSON, or an integer of thousands of digits; RecursionError: nested too deep
        header = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise ProtocolError(say("a header that is not JSON ({error})", error=str(error)[:200])) from None
    if _SURROGATE_ESCAPE.search(data):  # a lone one is text the judge could not print: "?" instead
        header = json.loads(json.dumps(header, ensure_ascii=False).encode(errors="replace"))
    if not isinstance(header, dict) or not isinstance(header.get("tensors", []), list):
        raise ProtocolError(say("a header that is not a JSON object with a list of tensors"))
    tensors, budget = [], max_tensor_bytes
    for meta in header.pop("tensors", []):
        nbytes = _layout(meta)
        if nbytes > budget:
            raise ProtocolError(say("{nbytes:,} bytes of tensor data, more than the {expected:,} expected",
                                    nbytes=nbytes, expected=max_tensor_bytes))
        budget -= nbytes
        tensors.append(_tensor(meta, _read(sock, nbytes, deadline, alive), device))
    return header, tensors


def _layout(meta) -> int:
    """The byte count of a tensor's description, once it is known to be a possible tensor."""
    if not isinstance(meta, dict) or not isinstance(meta.get("dtype"), str) or meta["dtype"] not in DTYPES:
        raise ProtocolError(say("a tensor description that is not allowed: {description}", description=str(meta)[:200]))
    size, stride, offset, nbytes = (meta.get(k) for k in ("size", "stride", "offset", "nbytes"))
    if not (isinstance(size, list) and isinstance(stride, list) and len(size) == len(stride) <= MAX_DIMS
            and all(type(n) is int and 0 <= n < MAX_LAYOUT_VALUE for n in [*size, *stride, offset, nbytes])):
        raise ProtocolError(say("a tensor layout that is not allowed: {description}", description=str(meta)[:200]))
    itemsize = DTYPES[meta["dtype"]].itemsize
    last = offset + sum((s - 1) * st for s, st in zip(size, stride)) if all(size) else -1
    if nbytes % itemsize or (last + 1) * itemsize > nbytes:
        raise ProtocolError(say("a tensor whose layout reaches past its {nbytes} bytes", nbytes=nbytes))
    return nbytes


def _tensor(meta: dict, data: bytearray, device: str) -> torch.Tensor:
    flat = torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    try:
        return flat.to(device).view(DTYPES[meta["dtype"]]).as_strided(meta["size"], meta["stride"], meta["offset"])
    except (RuntimeError, ValueError, TypeError, OverflowError) as error:  # a layout PyTorch refuses
        raise ProtocolError(say("a tensor layout that is not allowed: {description}",
                                description=f"{str(meta)[:200]} ({type(error).__name__})")) from None


def _read(sock: socket.socket, n: int, deadline: float, alive: Callable[[], bool]) -> bytearray:
    """Exactly ``n`` bytes, received straight into one buffer (a tensor's bytes are copied once)."""
    data = bytearray(n)
    view, got = memoryview(data), 0
    while got < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimedOut(f"waited for {n} bytes")
        sock.settimeout(min(remaining, ALIVE_CHECK_S))
        try:
            chunk = sock.recv_into(view[got:], min(n - got, 1 << 22))
        except socket.timeout:
            if alive():
                continue
            sock.setblocking(False)  # what it sent before it ended is read still
            try:
                chunk = sock.recv_into(view[got:], min(n - got, 1 << 22))
            except BlockingIOError:
                raise PeerGone("the runner ended; a process it started holds the channel") from None
        except OSError as error:
            raise PeerGone(str(error)) from None
        if not chunk:
            raise PeerGone("the runner closed the channel")
        got += chunk
    return data
