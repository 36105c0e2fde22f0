"""Triton's floor: the course's two kernel patterns under triton 3.6.0, the oldest release
pyproject.toml allows, run in the CPU interpreter.

The floor is installed once into .venv/triton-floor with `pip install --target` and put first
on PYTHONPATH of a subprocess, so the main env (newest triton) stays as it is.
"""

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
FLOOR = "3.6.0"
# 3.6's interpreter breaks under numpy>=2.4: a `for` over a runtime bound raises
# "only 0-dimensional arrays can be converted to Python scalars" (fixed in 3.9).
PINS = [f"triton=={FLOOR}", "numpy<2.4"]
CACHE = ROOT / ".venv" / "triton-floor"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

CHECK = textwrap.dedent(
    """
    import numpy, torch, triton
    import triton.language as tl

    print("triton", triton.__version__, "from", triton.__file__)
    print("numpy", numpy.__version__)

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)

    @triton.jit
    def row_sum_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):  # runtime bound: what numpy 2.4 broke
            cols = start + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + row, tl.sum(acc, axis=0))

    torch.manual_seed(0)
    n = 1025  # one past a multiple of the block: the last program is mostly masked
    x, y = torch.randn(n), torch.randn(n)
    out = torch.empty(n)
    add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    torch.testing.assert_close(out, x + y)
    print("vector add ok")

    m = torch.randn(6, 1000)  # 1000 = 7 full chunks of 128 and one of 104
    sums = torch.empty(6)
    row_sum_kernel[(6,)](m, sums, m.shape[1], m.stride(0), BLOCK=128)
    torch.testing.assert_close(sums, m.sum(dim=1))
    print("row sum ok")
    """
)


def install_floor() -> Path:
    """Install PINS into CACHE unless an earlier run did; skip or fail when pip cannot."""
    done = CACHE / ".installed"
    if done.is_file() and done.read_text() == " ".join(PINS):
        return CACHE
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade",
           "--target", str(CACHE), *PINS]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        reason = f"pip could not install {' '.join(PINS)} (is PyPI reachable?): {proc.stderr[-1500:]}"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    done.write_text(" ".join(PINS))
    return CACHE


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_kernels_run_on_the_triton_floor():
    target = install_floor()
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", CHECK], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    report = f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, report
    assert f"triton {FLOOR} from {target}" in proc.stdout, report
    assert "vector add ok" in proc.stdout and "row sum ok" in proc.stdout, report


def test_installed_triton_is_in_the_declared_range():
    import triton

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = next(r for r in map(Requirement, pyproject["project"]["dependencies"])
                    if r.name == "triton")
    assert declared.specifier.contains(triton.__version__, prereleases=True), (
        f"triton {triton.__version__} is installed, pyproject.toml asks for {declared}"
    )
