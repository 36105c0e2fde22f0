"""Notebook kernels that talk over Unix sockets in a folder of their own, where there are some.

jupyter_client gives a kernel TCP ports that were free when it looked; a kernel started beside
it (grading workers, test workers) can bind one of them first, and this one then dies before
it replies ("Address already in use", seen once in the course's CI). Sockets named inside a
fresh folder cannot be taken by anyone else.
"""
from __future__ import annotations

import os
from pathlib import Path

_LONGEST_SOCKET_PATH = 100
"""Bytes, below the platforms' limits on a socket's path (104 on macOS, 108 on Linux), with
room for the ``-N`` jupyter_client appends."""


def on_unix_sockets(km, folder: str | Path) -> None:
    """Have the kernel manager ``km`` (not yet started) put its kernel's sockets in ``folder``,
    which nothing else uses; it keeps TCP where Unix sockets are missing (Windows) or the
    folder's path is too long for one."""
    base = os.path.join(os.path.abspath(folder), "kernel")
    if os.name == "posix" and len(os.fsencode(base)) + 3 <= _LONGEST_SOCKET_PATH:
        km.transport, km.ip = "ipc", base
