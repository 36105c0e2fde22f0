"""Shared set-up: pick the device before any kernel is defined (interpreter on the CPU)."""
import os
import sys
from pathlib import Path

import pytest

import autograder

ROOT = Path(__file__).resolve().parents[1]
DEVICE = autograder.setup_device(verbose=False)


def pytest_collection_modifyitems(config, items):
    if DEVICE.has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run on the device machine (results/gpu/)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def venv_env(**extra) -> dict:
    """The environment for subprocesses: this interpreter's bin first on PATH (nbgrader
    calls `alembic`, nbclient starts `python -m ipykernel`)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.update(extra)
    return env


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
def no_runner_is_kept():
    """A runner the judge keeps for a student's next test ends with the test that kept it."""
    yield
    from autograder.grading import judge
    judge.stop_kept()
