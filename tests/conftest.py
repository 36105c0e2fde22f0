"""Shared set-up: pick the device before any kernel is defined (interpreter on the CPU), and
share the machine between pytest-xdist's workers (`make test` runs modules side by side)."""
import contextlib
import fcntl
import os
import sys
import tempfile
from pathlib import Path

import pytest

import autograder

ROOT = Path(__file__).resolve().parents[1]
DEVICE = autograder.setup_device(verbose=False)


def pytest_collection_modifyitems(config, items):
    _hand_out_modules(items)
    if DEVICE.has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run on the device machine (results/gpu/)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _hand_out_modules(items) -> None:
    """The order pytest-xdist (``--dist loadfile``: each module whole to one worker) hands
    modules out in: those with a ``slow`` test first, ``alone`` modules last, each module's tests
    in order, so the run neither ends on a long module nor leaves a core idle early while an
    ``alone`` module waits for the machine."""
    rank = {}
    for item in items:
        module = item.module.__name__
        rank[module] = min(rank.get(module, 1), 0 if item.get_closest_marker("slow") else 1)
        if item.get_closest_marker("alone"):
            rank[module] = 2
    items.sort(key=lambda item: rank[item.module.__name__])  # stable: order within a rank kept


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """With pytest-xdist's workers (``-n``), each module goes whole to one worker (``--dist
    loadfile``, whatever ``--dist`` said): module fixtures build shared things once (a course,
    a virtual environment) and would collide if two workers built them side by side. The
    modules go out in :func:`_hand_out_modules`' order, not re-sorted by how many tests each
    has (pytest-xdist's ``--loadscope-reorder``, on by default since 3.7)."""
    if getattr(config.option, "numprocesses", None) and config.option.dist in ("no", "load"):
        config.option.dist = "loadfile"
    if config.option.dist == "loadfile":
        config.option.loadscopereorder = False


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker per CPU core, at most four; none on a GPU, whose timings must not
    share the card with another test."""
    return 0 if DEVICE.has_gpu else min(4, len(os.sched_getaffinity(0)))


@pytest.fixture(scope="module", autouse=True)
def machine_share(request, tmp_path_factory):
    """Under pytest-xdist, a module marked ``alone`` (it times something on this machine) runs
    with no other module beside it; the others share the machine. A waiting ``alone`` module
    holds the turnstile, so modules that start later queue behind it instead of starving it."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    locks = tmp_path_factory.getbasetemp().parent  # one folder for all of the run's workers
    alone = request.node.get_closest_marker("alone") is not None
    with contextlib.ExitStack() as held:  # closing a file releases its lock
        turnstile = held.enter_context(open(locks / "turnstile.lock", "a"))
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        machine = held.enter_context(open(locks / "machine.lock", "a"))
        fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield


def venv_env(**extra) -> dict:
    """The environment for subprocesses: this interpreter's bin first on PATH (nbgrader
    calls `alembic`, nbclient starts `python -m ipykernel`)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.update(extra)
    return env


def execute_notebook(nb, folder: Path, **options) -> None:
    """Run ``nb`` in place, top to bottom, in a fresh kernel started in ``folder`` (nbclient's
    ``options``), its sockets in a folder of their own (:mod:`autograder.grading.kernel_sockets`)."""
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    from autograder.grading.kernel_sockets import on_unix_sockets

    with tempfile.TemporaryDirectory(prefix="kernel-") as sockets:
        km = AsyncKernelManager(kernel_name="python3")
        on_unix_sockets(km, sockets)
        client = NotebookClient(nb, km=km, timeout=600, resources={"metadata": {"path": str(folder)}}, **options)
        client.execute(cleanup_kc=True)  # the kernel ends with the run


@pytest.fixture(autouse=True)
def gpu_memory_is_released():
    """On a GPU, a test whose tensors outlive it would starve every later one: fail it."""
    if not DEVICE.has_gpu:
        yield
        return
    import gc
    import torch
    gc.collect()
    before = torch.cuda.memory_allocated()
    yield
    gc.collect()
    leaked = torch.cuda.memory_allocated() - before
    assert leaked < 2**28, f"{leaked / 2**30:.1f} GiB of GPU memory still allocated after the test"


@pytest.fixture(autouse=True)
def english_unless_a_test_says_otherwise(monkeypatch):
    """Messages are in the language last set: no test's choice leaks into the next."""
    from autograder import language
    monkeypatch.setattr(language, "_language", None)
    monkeypatch.delenv("TRITON_COURSE_LANG", raising=False)


@pytest.fixture(autouse=True)
def no_runner_is_kept():
    """A runner the judge keeps for a student's next test ends with the test that kept it."""
    yield
    from autograder.grading import judge
    judge.stop_kept()
