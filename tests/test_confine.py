"""Confinement of the grading process: a confined process still imports torch and Triton and
runs a kernel, and cannot read the course, list it, write outside its scratch folder, make
files in /dev/shm, open a terminal or the kernel's log, make a socket of any kind, hold a
capability, or signal or trace the grader."""
import time
import json
import os
import socket
import subprocess
import sys

import pytest

from autograder.grading import confine, protocol, runner, sandbox
from conftest import DEVICE, ROOT

needs_landlock = pytest.mark.skipif(confine.abi() == 0, reason="this kernel has no Landlock")

PROBE = '''
import json, os, socket, sys
from pathlib import Path
from autograder import device
from autograder.grading import confine
if device.setup_device(verbose=False).has_gpu:
    device.start_cuda()  # as the grading process does
abi = confine.confine(Path.cwd())
confine.drop_privileges()
import torch, triton, triton.language as tl

@triton.jit
def double(x, y, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offsets, 2 * tl.load(x + offsets, mask=offsets < n), mask=offsets < n)

x = torch.arange(10.0, device=device.current().device)  # compiled into the scratch folder on a GPU
y = torch.empty_like(x)
double[(1,)](x, y, 10, BLOCK=16)
secret, shared, port = sys.argv[1], sys.argv[2], int(sys.argv[3])


def message_queue(name):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mq_open(name.encode(), os.O_CREAT | os.O_RDWR, 0o600, None) == -1:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    libc.mq_unlink(name.encode())


attempts = {
    "read the course": lambda: open(secret).read(),
    "list the course": lambda: os.listdir(os.path.dirname(secret)),
    "read a solution": lambda: open(os.path.join(sys.argv[4], "solutions", "broadcast_add.py")).read(),
    "list the checkout": lambda: os.listdir(sys.argv[4]),
    "write a shared folder": lambda: open(os.path.join(shared, "planted"), "w").close(),
    "make a file in /dev/shm": lambda: open(f"/dev/shm/planted-{os.getpid()}", "w").close(),
    "read the grader's memory": lambda: open(f"/proc/{os.getppid()}/mem", "rb").close(),
    "connect over TCP": lambda: socket.create_connection(("127.0.0.1", port), timeout=5).close(),
    "send over UDP": lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", port)),
    "make a Unix socket": lambda: socket.socket(socket.AF_UNIX).close(),
    "open a new terminal": lambda: os.close(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)),
    "write the kernel's log": lambda: os.close(os.open("/dev/kmsg", os.O_WRONLY)),
    "write /dev/null": lambda: open("/dev/null", "w").write("ok"),
    "signal the grader": lambda: os.kill(os.getppid(), 0),
    "read a shared folder": lambda: os.listdir(shared),
    "read the checker": lambda: open(Path(confine.__file__)).read(),
    "write the scratch folder": lambda: Path("written").write_text("ok"),
    "change a file's mode": lambda: os.chmod(secret, 0o666),
    "change a file's owner": lambda: os.chown(secret, -1, -1),
    "change a file's times": lambda: os.utime(secret, (0, 0)),
    "set a file's attribute": lambda: os.setxattr(secret, "user.planted", b"1"),
    "make a message queue": lambda: message_queue(f"/planted-{os.getpid()}"),
    "move to other CPUs": lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)),
}
outcome = {}
for name, attempt in attempts.items():
    try:
        attempt()
        outcome[name] = "allowed"
    except OSError as error:
        outcome[name] = type(error).__name__
capabilities = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff:"))
print(json.dumps({"abi": abi, "doubled": y.tolist(), "outcome": outcome, "capabilities": int(capabilities, 16),
                  "compiled": sorted(p.name for p in Path(".triton").glob("*/*.cubin"))}))
'''


def probe(tmp_path, **env) -> dict:
    """Run PROBE confined in a scratch folder, with a secret course file and an open TCP port nearby."""
    course, shared, scratch = tmp_path / "course", tmp_path / "shared", tmp_path / "scratch"
    for folder in (course, shared, scratch):
        folder.mkdir()
    (course / "gradebook.db").write_text("every student's grades")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        (scratch / "probe.py").write_text(PROBE)  # a file: compiling a kernel needs its source
        done = subprocess.run([sys.executable, "probe.py", str(course / "gradebook.db"), str(shared), str(port),
                               str(ROOT)], cwd=scratch, capture_output=True, text=True, timeout=300,
                              env=dict(sandbox.clean_environment(scratch), **env))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_landlock
def test_a_confined_process_runs_kernels_but_reaches_nothing_of_the_course(tmp_path):
    result = probe(tmp_path)
    assert result["doubled"] == [2.0 * i for i in range(10)]
    denied = ["read the course", "list the course", "read a solution", "list the checkout",
              "write a shared folder", "make a file in /dev/shm", "read the grader's memory", "read a shared folder"]
    denied += ["connect over TCP", "send over UDP", "make a Unix socket", "open a new terminal", "write the kernel's log"]
    denied += ["change a file's mode", "change a file's owner", "change a file's times", "set a file's attribute",
               "make a message queue", "move to other CPUs"]
    denied += ["signal the grader"] if result["abi"] >= 6 else []
    assert {k: v for k, v in result["outcome"].items() if k in denied} == dict.fromkeys(denied, "PermissionError")
    assert result["outcome"]["read the checker"] == result["outcome"]["write the scratch folder"] == "allowed"
    assert result["outcome"]["write /dev/null"] == "allowed"
    assert result["capabilities"] == 0  # even where the grader runs as root
    assert (tmp_path / "scratch" / "written").read_text() == "ok"
    assert (tmp_path / "course" / "gradebook.db").stat().st_mode & 0o777 != 0o666
    assert len(result["compiled"]) == DEVICE.has_gpu  # on a GPU, Triton compiled into the scratch folder


@needs_landlock
def test_readable_paths_open_a_folder_for_reading_only(tmp_path):
    outcome = probe(tmp_path, **{confine.READABLE_VAR: str(tmp_path / "shared")})["outcome"]
    assert outcome["read a shared folder"] == "allowed"
    assert outcome["write a shared folder"] == outcome["read the course"] == "PermissionError"


@needs_landlock
def test_the_course_checkout_stays_closed_when_it_is_on_the_python_path(tmp_path):
    outcome = probe(tmp_path, PYTHONPATH=str(ROOT))["outcome"]
    assert outcome["read a solution"] == outcome["list the checkout"] == "PermissionError"
    assert outcome["read the checker"] == "allowed"


def test_without_landlock_nothing_is_restricted_and_the_instructor_is_told(monkeypatch, tmp_path):
    monkeypatch.setattr(confine, "abi", lambda: 0)
    assert confine.confine(tmp_path) == 0
    assert "NOT confined" in confine.summary() and sandbox.GRADING_USER_VAR in confine.summary()


@needs_landlock
def test_the_summary_names_what_is_confined(monkeypatch):
    monkeypatch.delenv(sandbox.GRADING_USER_VAR, raising=False)
    text = confine.summary()
    assert f"ABI {confine.abi()}" in text and "writes only its scratch folder" in text
    assert ("cannot signal the grader" in text) == (confine.abi() >= 6)
    assert ("/etc/shadow" in text) == (os.geteuid() == 0)  # root's own files: a grading user of its own


def test_when_confinement_fails_none_of_the_students_code_runs(monkeypatch, tmp_path):
    def refuse(*writable):
        raise confine.ConfinementError(22, "Landlock system call 445: Invalid argument")

    monkeypatch.setattr(confine, "confine", refuse)
    monkeypatch.setattr(sandbox, "limit_resources", lambda processes=None: None)  # not on the test process
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cells.json").write_text(json.dumps([["answer-cell-1", "open('ran', 'w').close()\n"]]))
    ours, theirs = socket.socketpair()
    protocol.send(ours, {"op": "begin"})  # as the judge says once it has calibrated the baseline
    runner.main(["cells.json", "ps1_broadcast_add", str(theirs.fileno())])
    message = protocol.recv(ours, time.monotonic() + 5, 0)[0]["error"]
    assert "could not confine your code" in message and "Invalid argument" in message
    assert not (tmp_path / "ran").exists()
