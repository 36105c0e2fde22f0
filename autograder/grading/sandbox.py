"""A process for a student's code: a scratch folder to run in, a scrubbed environment, a
memory cap, a time limit, and a bounded copy of what it prints.

This is what one machine can do without containers. The student's code runs as the grader's
user; what this module removes is every *easy* way in: the working folder, the variables
nbgrader and Jupyter set, a Triton cache shared with other students' code, and the
``solutions`` package (blocked in :mod:`autograder.isolation`). Reading the course's files by
absolute path is stopped by Landlock where the kernel has it (:mod:`autograder.confine`, which
the grading process applies to itself). When grading runs as root, :data:`GRADING_USER_VAR`
names an unprivileged user (``nobody``) to run the student's code as as well: then only what
that user may read is readable, and the instructor's folders (submissions, sources, the
gradebook) are closed to it with ordinary permissions (:func:`close_to_others`).
"""
from __future__ import annotations

import codecs
import errno
import functools
import os
import pwd
import re
import resource
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from .. import settings
from ..language import say

MEMORY_LIMIT_VAR = settings.MEMORY_LIMIT_GB.name
KEPT_VARIABLES = frozenset({"PATH", "LANG", "TZ", "LD_LIBRARY_PATH", "PYTHONPATH", "CC", "CXX"})
KEPT_PREFIXES = ("LC_", "TRITON_", "CUDA_", "NVIDIA_", "OMP_", "MKL_")
"""Locale, Triton's and CUDA's own settings and thread counts; nothing nbgrader or Jupyter set."""
GRADING_USER_VAR = settings.GRADING_USER.name
KEPT_OUTPUT_CHARS = 4000
"""Characters kept from each end of what the process printed; the middle is dropped."""
_MEMORY_ERRORS = re.compile(r"MemoryError|can't allocate memory|Cannot allocate memory|out of memory")


@dataclass
class Finished:
    """How a sandboxed process ended."""

    returncode: int | None
    """The exit status (negative: killed by that signal); None when stopped at the time limit."""
    output: str
    """stdout and stderr together, the middle left out past ``2 * KEPT_OUTPUT_CHARS`` characters."""


def memory_limit_bytes() -> int | None:
    """The cap from :data:`MEMORY_LIMIT_VAR` (by default half the physical memory); None for no cap."""
    gib = settings.MEMORY_LIMIT_GB.get()
    return int(gib * 2**30) if gib > 0 else None


def clean_environment(scratch: Path, hide: tuple[str, ...] = (), cache: Path | None = None) -> dict[str, str]:
    """The variables a grading process needs, none of nbgrader's or Jupyter's, nor those in
    ``hide``; home and temporary files are in ``scratch``, Triton's cache is ``cache`` (default:
    in ``scratch``), so nothing one student's code compiles or leaves behind reaches the next."""
    env = {k: v for k, v in os.environ.items()
           if (k in KEPT_VARIABLES or k.startswith(KEPT_PREFIXES)) and k not in hide}
    env.update(TMPDIR=str(scratch), HOME=str(scratch), TRITON_CACHE_DIR=str(cache or scratch / ".triton"))
    return env


FILE_LIMIT_BYTES = 1 << 30
"""The largest file a grading process may write (``RLIMIT_FSIZE``): a kernel's compiled files
take megabytes. Past it a write fails with ``OSError: File too large``."""


def limit_resources(processes: int | None = None) -> None:
    """Cap this process's memory (:data:`MEMORY_LIMIT_VAR`) and the size of each file it writes
    (:data:`FILE_LIMIT_BYTES`), and, where given, its user's ``processes`` and threads (the
    kernel never holds root to that): the grading process calls it on itself first thing, so an
    allocation, a file or a fork past its cap fails instead of exhausting the machine."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT_BYTES, FILE_LIMIT_BYTES))
    if processes is not None:  # no higher than the hard limit it was given (a container's, systemd's)
        hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        processes = processes if hard == resource.RLIM_INFINITY else min(processes, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    # RLIMIT_DATA, not RLIMIT_AS: it counts heap and private writable mappings only, so the
    # interpreter's 1 GB of mapped libraries and a CUDA driver's address-space reservations
    # (tens of GB, never writable) are not charged against the cap.
    limit = memory_limit_bytes()
    if limit is not None:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    try:  # if the machine runs short anyway, the kernel's OOM killer takes this process first
        Path("/proc/self/oom_score_adj").write_text("1000")
    except OSError:
        pass


def grading_user() -> pwd.struct_passwd | None:
    """The account of :data:`GRADING_USER_VAR`, or None when it is unset."""
    name = settings.GRADING_USER.get()
    if name is None:
        return None
    if os.geteuid() != 0:
        raise PermissionError(f"{GRADING_USER_VAR}={name}: only a grader running as root can run the "
                              "student's code as another user; unset it, or grade as root.")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise KeyError(f"{GRADING_USER_VAR}={name}: no such user on this machine") from None


def remove_tree(top: Path) -> None:
    """Remove a folder that a student's code wrote in (or sent), whatever it left inside: a
    folder made read-only (which keeps its files from ``rm`` unless the grader is root), a
    tree thousands of folders deep. Call it once that code has stopped. Links are removed,
    never followed; it never raises. coreutils' ``chmod -R`` and ``rm -r`` walk a tree of any
    depth; Python 3.11's ``shutil.rmtree`` and ``os.walk`` recurse once per level and raise
    ``RecursionError`` past about a thousand (``ignore_errors`` does not catch it)."""
    top = Path(top)
    if not top.is_dir() or top.is_symlink():
        return
    for cmd in (["chmod", "-R", "u+rwx", "--", str(top)], ["rm", "-rf", "--one-file-system", "--", str(top)]):
        subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def close_to_others(*paths: Path) -> None:
    """Take every permission of "others" off ``paths`` (folders recursively), so that the
    grading user cannot read them."""
    for top in paths:
        found = [top] + [Path(folder, name) for folder, dirs, files in os.walk(top) for name in dirs + files]
        for path in found:  # a worker's copy of the course may come or go meanwhile
            try:
                if not path.is_symlink():
                    path.chmod(path.stat().st_mode & ~0o007)
            except FileNotFoundError:
                pass


def _as_grading_user(*given: Path) -> dict:
    """Popen arguments that run as the grading user, who is given the folders ``given``."""
    user = grading_user()
    if user is None:
        return {}
    check_interpreter_runs_as(user, sys.executable)
    for path in [p for folder in given for p in [folder, *folder.rglob("*")]]:
        os.chown(path, user.pw_uid, user.pw_gid)
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


@functools.cache
def check_interpreter_runs_as(user: pwd.struct_passwd, python: str) -> None:
    """Raise PermissionError, with a sentence, when ``user`` cannot run ``python`` with the course."""
    try:
        done = subprocess.run([python, "-c", "import autograder"], user=user.pw_uid, group=user.pw_gid,
                              extra_groups=[], cwd="/", capture_output=True, text=True)
        why = done.stderr.strip().splitlines()[-1] if done.returncode else None
    except OSError as error:
        why = str(error)
    if why:
        raise PermissionError(f"{GRADING_USER_VAR}={user.pw_name}: that user cannot run {python} with the "
                              f"course package ({why}); install the course environment where it can "
                              "read it (not under /root).")


class Sandboxed:
    """A process started in a scratch folder with a clean environment (less ``hide``; Triton's
    cache ``cache``), as the grading user where one is set (unless ``trusted``); what it
    prints is read as it comes and only its two ends are kept, so printing gigabytes costs
    neither memory nor disk. :meth:`stop` kills it and anything it started."""

    def __init__(self, cmd: list[str], *, cwd: Path, hide: tuple[str, ...] = (), cache: Path | None = None,
                 pass_fds: tuple[int, ...] = (), trusted: bool = False):
        env = clean_environment(cwd, hide, cache)
        as_user = {} if trusted else _as_grading_user(cwd, *([cache] if cache else []))
        self.process = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, start_new_session=True, pass_fds=pass_fds,
                                        **as_user)
        self.uid = as_user.get("user", os.geteuid())
        self.memory_before = shared_memory()
        _live.add(self.process.pid)
        _started.add(self.process.pid)
        _scratch.add(Path(cwd).resolve())
        self.head, self.tail, self.dropped = "", "", 0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while chunk := self.process.stdout.read1(65536):
            text = decoder.decode(chunk)
            if len(self.head) < KEPT_OUTPUT_CHARS:
                take = KEPT_OUTPUT_CHARS - len(self.head)
                self.head, text = self.head + text[:take], text[take:]
            self.tail += text
            if len(self.tail) > KEPT_OUTPUT_CHARS:
                self.dropped += len(self.tail) - KEPT_OUTPUT_CHARS
                self.tail = self.tail[-KEPT_OUTPUT_CHARS:]

    def pause(self) -> None:
        """Stop every process of the group (SIGSTOP): none of them runs until :meth:`resume`."""
        _signal_group(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        _signal_group(self.process.pid, signal.SIGCONT)

    def wait(self, timeout_s: float) -> int | None:
        """The exit status once it has ended within ``timeout_s``, else None."""
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> Finished:
        """Kill the process and everything it started; how it had ended, and its output."""
        returncode = self.process.poll()
        _signal_group(self.process.pid, signal.SIGKILL)
        self.process.wait()
        _live.discard(self.process.pid)
        reap_orphans()
        remove_shared_memory_left(self.memory_before, self.uid)
        self.reader.join(timeout=10)  # a grandchild that left the group may hold the pipe open
        middle = "\n" + say("[... {count} characters of output left out ...]", count=self.dropped) + "\n" \
            if self.dropped else ""
        return Finished(returncode, self.head + middle + self.tail)


_IPC_RMID = 0


def shared_memory() -> dict[int, dict[str, int]]:
    """The machine's System V shared-memory segments by id, each with the fields
    ``/proc/sysvipc/shm`` gives it (``cuid``, the creator's user; ``nattch``, how many
    processes have it attached)."""
    try:
        header, *rows = Path("/proc/sysvipc/shm").read_text().splitlines()
    except OSError:
        return {}
    names = header.split()
    return {fields["shmid"]: fields for fields in (dict(zip(names, map(int, row.split()))) for row in rows)}


def remove_shared_memory_left(before: dict, uid: int) -> None:
    """Remove the System V shared-memory segments that ``uid`` made since
    :func:`shared_memory` gave ``before`` and that nothing has attached: what a stopped
    process's code left. Such memory outlives every process and counts against no memory cap.
    The calls that make it stay open to the runner (whether the CUDA driver needs them is not
    known), so it is cleaned up instead; another program of the same user making a segment
    meanwhile and leaving it unattached loses it too: grade as a user of its own
    (:data:`GRADING_USER_VAR`). Semaphores and message queues, a few bytes each, are left."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    for ident, fields in shared_memory().items():
        if ident not in before and fields.get("cuid") == uid and not fields.get("nattch"):
            libc.shmctl(ident, _IPC_RMID, None)


_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Make processes our sandboxed ones start, and leave behind by starting a session of
    their own, our children when their parent dies, so :func:`reap_orphans` can end them."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


_live: set[int] = set()
"""Processes this one started as :class:`Sandboxed` and has not stopped yet."""
_started: set[int] = set()
_scratch: set[Path] = set()


def _seccomp_filters(pid: int | str) -> int:
    """How many seccomp filters a process runs under: a runner adds one
    (:func:`.confine.drop_privileges`) that it and all it starts keep for good."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    counts = [int(line.split()[1]) for line in status.splitlines() if line.startswith("Seccomp_filters:")]
    return counts[0] if counts else 0


def _tasks() -> dict[int, tuple[int, bool]]:
    """Every process: its parent, and whether a student's code left it (see :func:`reap_orphans`)."""
    mine, tasks = _seccomp_filters("self"), {}
    for task in Path("/proc").glob("[0-9]*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        cwd, too_deep = None, False
        try:
            cwd = None if fields[0] == "Z" else Path(os.readlink(task / "cwd"))  # a zombie has none
        except OSError as error:  # gone, or working in a folder too deep to name: only a student's code goes there
            too_deep = error.errno == errno.ENAMETOOLONG
        in_scratch = too_deep or cwd is not None and any(cwd == f or f in cwd.parents for f in _scratch)
        left_behind = int(fields[3]) in _started or in_scratch or _seccomp_filters(task.name) > mine
        tasks[int(task.name)] = (int(fields[1]), left_behind)
    return tasks


_REAP_ROUNDS = 50


def reap_orphans() -> None:
    """Kill what a student's code left behind, and all it started: processes reparented to us
    (see :func:`become_subreaper`) that run under a runner's seccomp filter, or whose session was
    a :class:`Sandboxed` one, or that work in a sandbox's scratch folder. They are stopped first,
    tree by tree, until no new one appears (a stopped process forks no more), then killed.
    Nothing else of ours is touched."""
    me, stopped = os.getpid(), set()
    for _ in range(_REAP_ROUNDS):
        tasks = _tasks()
        doomed = {pid for pid, (parent, left) in tasks.items() if parent == me and pid not in _live and left}
        while grown := {pid for pid, (parent, _) in tasks.items() if parent in doomed} - doomed:
            doomed |= grown
        if not doomed - stopped:
            break
        for pid in doomed - stopped:
            _signal_group(pid, signal.SIGSTOP, group=False)
        stopped |= doomed
    for pid in stopped:
        _signal_group(pid, signal.SIGKILL, group=False)
    for pid in stopped:  # ours, or ours once its parent is gone (we are their subreaper)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def ran_out_of_memory(text: str) -> bool:
    """Whether an error message or output says an allocation failed."""
    return bool(_MEMORY_ERRORS.search(text))


def memory_note() -> str:
    """What a student's code did that ran out of memory, to follow "your code" in a sentence."""
    limit = memory_limit_bytes()
    if limit:
        return say("ran out of memory (a grading process may use {limit:g} GiB)", limit=limit / 2**30)
    return say("ran out of memory")


def memory_noted(text: str) -> bool:
    """Whether ``text`` already says, in English or the language in use, that the code ran out of memory."""
    return "ran out of memory" in text or say("ran out of memory") in text


def describe_exit(returncode: int) -> str:
    """Why a process ended, for a student: ``exit code 1``, ``SIGSEGV: a segmentation fault``..."""
    if returncode >= 0:
        return say("exit code {code}", code=returncode)
    if -returncode not in signal.valid_signals():
        return say("killed by signal {number}", number=-returncode)
    name = signal.Signals(-returncode).name
    why = {"SIGSEGV": say("a segmentation fault: memory read or written through a bad pointer"),
           "SIGBUS": say("a bus error: memory read or written through a bad pointer"),
           "SIGABRT": say("aborted, often by a failed check in C code or corrupted memory"),
           "SIGKILL": say("killed, most likely by the kernel for running out of memory")}.get(name)
    return say("{signal}: {why}", signal=name, why=why) if why else say("killed by {signal}", signal=name)


def _signal_group(pid: int, sig: int, group: bool = True) -> None:
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
