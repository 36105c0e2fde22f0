"""Device selection: the GPU when there is one, the interpreter otherwise, forced by a variable."""
import subprocess
import sys

import numpy
import pytest
import triton

from autograder import device
from conftest import DEVICE, venv_env

REDUCTION_AFTER_IMPORT = """
import torch, triton, triton.language as tl   # triton first, as students often do
from autograder import setup_device
choice = setup_device()
@triton.jit
def row_stats(x_ptr, out_ptr, N: tl.constexpr):
    v = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr, tl.max(v, axis=0) + tl.sum(v, axis=0))
x = torch.randn(16, device=choice.device)
out = torch.empty(1, device=choice.device)
row_stats[(1,)](x, out, N=16)
torch.testing.assert_close(out[0], x.max() + x.sum())
try:  # its arithmetic on bfloat16 would be silently wrong
    row_stats[(1,)](x.bfloat16(), out, N=16)
except TypeError as refusal:
    print(refusal)
print("OK", choice.device)
"""


def run(code: str, **env) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter, without the TRITON_INTERPRET this process set."""
    full = venv_env(**env)
    full.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300)


def _interpreter_works() -> bool:
    try:
        device._check_interpreter_versions()
    except RuntimeError:
        return False
    return True


@pytest.mark.skipif(not _interpreter_works(), reason="this Triton's interpreter breaks under this numpy")
def test_cpu_choice_prints_one_line_runs_reductions_after_a_late_switch_and_refuses_bfloat16():
    done = run(REDUCTION_AFTER_IMPORT, TRITON_COURSE_DEVICE="cpu")
    assert done.returncode == 0, done.stderr
    first, refusal, last = done.stdout.strip().splitlines()
    assert "interpreter" in first and "throughput checks need a GPU" in first and "bfloat16" in first
    assert refusal.startswith("Triton's interpreter has no bfloat16: it would compute on the raw bits")
    assert last == "OK cpu"


@pytest.mark.skipif(DEVICE.has_gpu, reason="this machine has a GPU")
def test_forcing_the_gpu_without_one_says_so():
    done = run("import autograder; autograder.setup_device()", TRITON_COURSE_DEVICE="gpu")
    assert done.returncode != 0
    assert "TRITON_COURSE_DEVICE=gpu, but PyTorch sees no CUDA GPU" in done.stderr


def test_a_misspelt_choice_is_refused():
    done = run("import autograder; autograder.setup_device()", TRITON_COURSE_DEVICE="gpuu")
    assert "TRITON_COURSE_DEVICE='gpuu': use one of auto, gpu, cpu; unset means auto." in done.stderr


def test_the_broken_interpreter_pair_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(numpy, "__version__", "2.4.1")
    with pytest.raises(RuntimeError, match=r"triton>=3.9.*numpy<2.4"):
        device._check_interpreter_versions()
    monkeypatch.setattr(numpy, "__version__", "2.3.5")
    device._check_interpreter_versions()


def test_the_choice_matches_what_torch_sees():
    import torch
    assert DEVICE.has_gpu == torch.cuda.is_available()
    assert DEVICE.device == ("cuda" if DEVICE.has_gpu else "cpu")
