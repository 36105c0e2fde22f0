"""Lesson 3 (constexpr and JIT specialisation): its exercise rejects plausible wrong kernels."""
import pytest
import torch
import triton
import triton.language as tl

from autograder import check
from conftest import DEVICE
from solutions.even_relu import relu, relu_kernel

EXERCISE = "lesson3_even_relu"


def _launching(even_flag, programs):
    """A relu wrapper around the reference kernel with its own EVEN_N rule and grid."""
    def wrong_relu(x):
        out = torch.empty_like(x)
        n = out.numel()
        relu_kernel[(programs(n, 1024),)](x, out, n, EVEN_N=even_flag(n), BLOCK_SIZE=1024)
        return out
    return wrong_relu


@triton.jit
def _relu_kernel_unmasked_store(x_ptr, out_ptr, n_elements, EVEN_N: tl.constexpr,
                                BLOCK_SIZE: tl.constexpr):
    # The flag is ignored and the load is masked, but the store is not: on a ragged block
    # the lanes past the end write 0.0 past the output.
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0.0)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0))


def test_reference_passes():
    assert check(EXERCISE, relu, verbose=False, seed=0).correct


@pytest.mark.skipif(DEVICE.has_gpu, reason="this wrong kernel reads and writes past the tensors: "
                    "only the interpreter's bounds check stops it safely")
def test_flag_from_divisibility_by_16_fails():
    # Confusing Triton's own n % 16 specialisation with whole blocks: n = 2064 runs unmasked.
    wrong = _launching(lambda n: n % 16 == 0, triton.cdiv)
    result = check(EXERCISE, wrong, verbose=False, seed=0)
    assert not result.correct
    failed = {c.label for c in result.cases if not c.passed}
    assert "2064 float32" in failed and "out of bounds" in result.summary()
    assert "1024 float32" not in failed  # whole blocks are still right


@pytest.mark.skipif(DEVICE.has_gpu, reason="this wrong kernel writes past the output")
def test_unmasked_store_fails():
    def wrong(x):
        out = torch.empty_like(x)
        n = out.numel()
        _relu_kernel_unmasked_store[(triton.cdiv(n, 1024),)](x, out, n, EVEN_N=False, BLOCK_SIZE=1024)
        return out
    assert not check(EXERCISE, wrong, verbose=False, seed=0).correct


def test_floor_division_grid_fails():
    # n // BLOCK_SIZE programs leave the ragged tail (all of n = 1 or 127) unwritten.
    wrong = _launching(lambda n: n % 1024 == 0, lambda n, block: n // block)
    result = check(EXERCISE, wrong, verbose=False, seed=0)
    assert not result.correct
    assert {"127 float32", "5000 float32"} <= {c.label for c in result.cases if not c.passed}


def test_unwritten_stub_is_reported_not_raised():
    def stub(x):
        raise NotImplementedError("write me")
    result = check(EXERCISE, stub, verbose=False, seed=0)
    assert not result.correct and "not written yet" in result.summary()


@pytest.mark.gpu
def test_even_and_ragged_sizes_compile_two_variants():
    kernel = triton.jit(relu_kernel.fn)  # a fresh cache, whatever ran before
    for n in (4096, 8192, 5008, 5001):
        x = torch.randn(n, device="cuda")
        out = torch.empty_like(x)
        kernel[(triton.cdiv(n, 1024),)](x, out, n, EVEN_N=n % 1024 == 0, BLOCK_SIZE=1024)
        torch.testing.assert_close(out, torch.relu(x))
    # 4096 and 8192: EVEN_N=True, n % 16 == 0; 5008: False, n % 16 == 0 ('D'); 5001: False, no 'D'
    compiled = sum(len(entry[0]) for entry in kernel.device_caches.values())
    assert compiled == 3
