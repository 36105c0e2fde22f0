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
