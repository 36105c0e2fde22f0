"""Confine a grading process with Linux's Landlock: it may read the system's and Python's
files, write only its own scratch folder, open no device but the harmless ones and the GPU's,
open no TCP connection, and neither signal nor trace any process outside itself; then
(:func:`drop_privileges`) make no socket at all and hold no capability, even as root.

Landlock needs no root: a process restricts itself, for good, and everything it starts
inherits the restriction. :func:`confine` is called by the grading process before the
student's code runs, so that code cannot open the course's files (other submissions, the
source notebooks with their hidden tests, the gradebook, the reference solutions) even by
absolute path, cannot kill the grader (``os.kill(-1, SIGKILL)`` would otherwise end every
process of the grader's user) and cannot read its memory through ``/proc``.

Landlock is in Linux since 5.13 (2021) when the kernel enables it (``lsm=...,landlock``);
TCP rules need ABI 4 (Linux 6.7), signal scoping ABI 6 (6.12). Where it is missing,
:func:`abi` is 0 and grading runs unconfined, as :func:`summary` tells the instructor.
"""
from __future__ import annotations

import ctypes
import errno
import functools
import glob
import os
import platform
import shutil
import site
import sys
from pathlib import Path

from .. import settings

READABLE_VAR = settings.READABLE_PATHS.name
SYSTEM_FOLDERS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/proc", "/sys")
"""Read-only to the grading process: the operating system and its libraries (CUDA's driver among them)."""
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
"""The devices the grading process may read and write, with the GPU's (:data:`GPU_DEVICES`); not a
terminal (whose ioctls could type into the grader's shell) nor the kernel's log."""
GPU_DEVICES = "/dev/nvidia*"
"""The CUDA driver's device files, which it opens and drives by ioctl."""

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
# filesystem rights, by the ABI that introduced them (bits 0-12 in ABI 1)
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_RIGHTS = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_TRUNCATE, _IOCTL_DEV = 1 << 14, 1 << 15
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV
"""The rights that apply to a file (the others are about folders' entries)."""
_READ = _EXECUTE | _READ_FILE | _READ_DIR
_NET_TCP = 0b11  # bind and connect, ABI 4
_SCOPE_SIGNAL_AND_ABSTRACT_SOCKETS = 0b11  # ABI 6


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class ConfinementError(OSError):
    """Landlock is there but refused the rules: grading must not go on unconfined."""


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(number: int, *args) -> int:
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        error = ctypes.get_errno()
        raise ConfinementError(error, f"Landlock system call {number}: {os.strerror(error)}")
    return result


@functools.cache
def abi() -> int:
    """The Landlock ABI version this kernel offers; 0 when it has none (or it is disabled)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        return _syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except ConfinementError:
        return 0


def _handled_fs(version: int) -> int:
    return _FS_RIGHTS[max(v for v in _FS_RIGHTS if v <= version)]


def python_folders() -> list[Path]:
    """Where this interpreter and its packages live (a venv and the Python it was made from),
    and the autograder package's own folder."""
    import autograder
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages(),
               *(p for p in sys.path if p and Path(p).is_dir()), *autograder.__path__}
    return sorted({Path(f).resolve() for f in folders})


def tool_folders() -> list[Path]:
    """Where the C compiler Triton builds its GPU launcher with is installed (``/opt/gcc``
    for ``/opt/gcc/bin/gcc``), and the folders of the libraries this process has loaded
    (the CUDA driver's, wherever the machine keeps it: the compiler links against it)."""
    compilers = [shutil.which(name) for name in (os.environ.get("CC", ""), "cc", "gcc", "clang") if name]
    prefixes = {p.parent.parent if p.parent.name == "bin" and p.parent.parent != Path.home() else p.parent
                for p in (Path(c).resolve() for c in compilers if c)}  # ~/bin/gcc: ~/bin, not the home
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        maps = []
    libraries = {Path(line.split(maxsplit=5)[5]).parent for line in maps
                 if len(line.split(maxsplit=5)) == 6 and ".so" in line.rsplit("/", 1)[-1]}
    return sorted(prefixes | libraries)


def readable_folders() -> list[Path]:
    """Every folder the grading process may read: system, Python, tools, library paths and
    :data:`READABLE_VAR`; none that holds the course (but what :data:`READABLE_VAR` names)."""
    extra = [os.environ.get(name, "") for name in ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH")]
    found = [Path(p).resolve() for text in extra for p in text.split(os.pathsep) if p]
    course = _course_checkout()
    found = [f for f in [*python_folders(), *tool_folders(), *found]
             if course is None or (f != course and f not in course.parents)]
    listed = settings.READABLE_PATHS.get()
    return list(dict.fromkeys([*map(Path, SYSTEM_FOLDERS), *found, *listed]))


def _course_checkout() -> Path | None:
    """The course repository the autograder package was loaded from, if it was (not an install)."""
    import autograder
    root = Path(autograder.__path__[0]).resolve().parent
    return root if (root / "solutions").is_dir() else None


def confine(*writable: Path) -> int:
    """Restrict this process (and all it starts) for good: read :func:`readable_folders`,
    write the folders ``writable`` and the devices in ``/dev``, nothing else; no TCP, no signals or
    tracing beyond itself. Returns the ABI used; 0 (doing nothing) where Landlock is missing.
    Raises :class:`ConfinementError` when Landlock is there but the rules fail."""
    version = abi()
    if version == 0:
        return 0
    handled = _handled_fs(version)
    attr = _RulesetAttr(handled, _NET_TCP if version >= 4 else 0,
                        _SCOPE_SIGNAL_AND_ABSTRACT_SOCKETS if version >= 6 else 0)
    size = 8 if version < 4 else 16 if version < 6 else 24
    ruleset = _syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    try:
        rules = [(folder, _READ) for folder in readable_folders()]
        # nothing else in /dev can be opened, and nothing can be made there (/dev/shm)
        rules += [(Path(d), _READ_FILE | _WRITE_FILE) for d in DEVICES]
        rules += [(Path(d), _READ | _WRITE_FILE | _IOCTL_DEV) for d in sorted(glob.glob(GPU_DEVICES))]
        rules += [(w, handled) for w in writable]
        for path, rights in rules:
            _allow(ruleset, path, rights & handled)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise ConfinementError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        _syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return version


def _allow(ruleset: int, path: Path, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:  # a folder this machine does not have
        return
    try:
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            rights &= _FILE_RIGHTS
        rule = _PathBeneathAttr(rights, fd)
        _syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                 ctypes.c_uint32(0))
    finally:
        os.close(fd)


_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_SECCOMP_ALLOW, _SECCOMP_REFUSE = 0x7FFF0000, 0x00050000 | errno.EACCES
_BPF_LOAD_WORD, _BPF_JEQ, _BPF_JGE, _BPF_RETURN = 0x20, 0x15, 0x35, 0x06
_X32_CALLS = 0x40000000
_NEWER_CALLS = (452, 463, 466)  # fchmodat2, setxattrat, removexattrat: one number on every machine
_REFUSED = {
    "x86_64": (0xC000003E, (41, 425, 240, 90, 91, 268, 92, 93, 94, 260, 132, 235, 261, 280,
                            188, 189, 190, 197, 198, 199, 203, *_NEWER_CALLS)),
    "aarch64": (0xC00000B7, (198, 425, 180, 52, 53, 54, 55, 88, 5, 6, 7, 14, 15, 16, 122, *_NEWER_CALLS)),
}
"""By machine: its audit architecture, and the numbers of the calls a runner may not make:
``socket`` and ``io_uring_setup`` (an io_uring request can open a socket too), ``mq_open`` (a
POSIX message queue outlives its process, and is made even where opening it is refused), and
every call that changes a file's mode, owner, times or extended attributes (``chmod``,
``fchmod``, ``fchmodat``, ``chown``, ``fchown``, ``lchown``, ``fchownat``, ``utime``,
``utimes``, ``futimesat``, ``utimensat``, the ``*setxattr`` and ``*removexattr`` calls):
Landlock does not cover those, so a runner could open the gradebook or the hidden tests to
every user. ``ld`` ignores the refusal of its ``chmod`` of a library it links (a shared library
loads without its execute bits). And ``sched_setaffinity``: a worker's runners stay on the CPUs
it was given (:func:`~autograder.instructor.grade_workers.slots`), so busy processes a student
starts slow no one graded beside them."""
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _refusing_filter(machine: str) -> list[tuple[int, int, int, int]]:
    """A seccomp program refusing (EACCES) the calls of :data:`_REFUSED` and every call of a
    foreign ABI (32-bit calls from a 64-bit process, x32's); allowing the rest."""
    arch, numbers = _REFUSED[machine]
    checks = ([(_BPF_JGE, _X32_CALLS)] if machine == "x86_64" else []) + [(_BPF_JEQ, n) for n in numbers]
    program = [(_BPF_LOAD_WORD, 0, 0, 4), (_BPF_JEQ, 1, 0, arch), (_BPF_RETURN, 0, 0, _SECCOMP_REFUSE),
               (_BPF_LOAD_WORD, 0, 0, 0)]
    for i, (op, value) in enumerate(checks):
        program.append((op, len(checks) - i, 0, value))  # to the refusal after the allow below
    return program + [(_BPF_RETURN, 0, 0, _SECCOMP_ALLOW), (_BPF_RETURN, 0, 0, _SECCOMP_REFUSE)]


def drop_privileges() -> None:
    """For good, for this process and all it starts: no new socket (the judge's channel is
    inherited; a new one could reach a local service or send data off the machine, over UDP or a
    Unix socket, which Landlock does not cover), no change to any file's mode, owner, times or
    attributes, no POSIX message queue, no move to other CPUs (:data:`_REFUSED`), and no capability (root's would let
    the code type into any terminal or bypass file permissions). The calls stay allowed only on
    a machine other than x86-64 and ARM64, or a kernel without seccomp."""
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise ConfinementError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    for capability in range(64):  # the bounding set: what an exec could give back
        if _libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break  # past the last capability this kernel knows (EPERM: not root, holds none to drop)
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header, data = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0), (ctypes.c_uint32 * 6)()
    if _libc.capset(header, data) != 0:
        raise ConfinementError(ctypes.get_errno(), "capset failed: the grading process kept its capabilities")
    machine = platform.machine()
    if machine not in _REFUSED:
        return
    program = (_SockFilter * len(_refusing_filter(machine)))(*_refusing_filter(machine))
    prog = _SockFprog(len(program), program)
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        error = ctypes.get_errno()
        if error != errno.EINVAL:  # EINVAL: a kernel without seccomp filters
            raise ConfinementError(error, f"seccomp: {os.strerror(error)}")


def summary() -> str:
    """One line for the instructor: how the student's code is confined on this machine."""
    version = abi()
    if version == 0:
        return ("Student code is NOT confined: this kernel has no Landlock (Linux 5.13+ with landlock "
                "in lsm=), so it can read any file your user can by absolute path. Grade as root "
                f"with {settings.GRADING_USER.name}=nobody, or on a kernel with Landlock.")
    limits = ["reads only the system's, Python's, the compiler's and loaded libraries' folders",
              "writes only its scratch folder and Triton cache"]
    limits += ["opens no terminal or device but the GPU's", "makes no socket", "holds no capability"]
    limits += ["cannot signal the grader"] if version >= 6 else []
    text = f"Student code is confined by Landlock (ABI {version}): it " + ", ".join(limits) + "."
    if os.geteuid() == 0 and settings.GRADING_USER.get() is None:
        text += (f" It runs as root (without capabilities), so it can read root's own files in the folders it may "
                 f"read (/etc/shadow among them): set {settings.GRADING_USER.name}=nobody.")
    return text
