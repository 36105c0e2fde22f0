"""Lesson 10: lesson 9's RMSNorm kernels shipped as PyTorch operators.

Two operations, the forward ``(x, w, eps) -> (y, r)`` and the backward ``(x, w, r, dy) -> (dx, dw)``,
registered two ways:

- ``torch.library.triton_op`` (``triton_course::rms_norm_fwd`` and ``..._bwd``): every kernel is
  launched through ``torch.library.wrap_triton``, so ``torch.compile`` sees the kernels inside the
  operator; its fake implementation is the function itself, run on fake tensors, where a wrapped
  launch does nothing. In Triton's interpreter ``wrap_triton`` hands back the kernel unwrapped, and
  the interpreter reads the data of the tensors it is given, which fake tensors do not have: there
  the operator runs eagerly, but nothing can trace it.
- ``torch.library.custom_op`` (``triton_course::rms_norm_fwd_opaque`` and ``..._bwd_opaque``):
  lesson 9's wrappers as they are, opaque to the compiler, with a fake implementation written by
  hand. They work on any device; the CPU uses them.

Both get the same backward with ``register_autograd``. :func:`rms_norm` calls the pair that suits
the device. The kernels are lesson 9's, imported.
"""
import torch
import triton
from triton.runtime.jit import JITFunction


# --- notebook cell: triton_op ---
from torch.library import triton_op, wrap_triton

from autograder.kernels.rms_norm_backward import (EPS, GROUPS, accumulator_dtype, num_warps_for, rms_norm_backward,
                                                  rms_norm_bwd_kernel, rms_norm_forward, rms_norm_fwd_kernel,
                                                  sum_rows_kernel)


@triton_op("triton_course::rms_norm_fwd", mutates_args=())
def rms_norm_fwd(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """y = x · r · w and r (one per row) of a 2-D x: lesson 9's forward kernel, launched through wrap_triton."""
    if x.stride(1) != 1:
        x = x.contiguous()
    n_rows, n_cols = x.shape
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    r = torch.empty(n_rows, dtype=accumulator_dtype(x), device=x.device)
    block = triton.next_power_of_2(n_cols)
    wrap_triton(rms_norm_fwd_kernel)[(n_rows,)](y, r, x, w, x.stride(0), y.stride(0), n_cols, eps,
                                                BLOCK_SIZE=block, num_warps=num_warps_for(block))
    return y, r


@triton_op("triton_course::rms_norm_bwd", mutates_args=())
def rms_norm_bwd(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor,
                 dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """dx and dw: lesson 9's grouped backward (strategy (c)), both launches through wrap_triton."""
    if x.stride(1) != 1:
        x = x.contiguous()
    if dy.stride(1) != 1:
        dy = dy.contiguous()  # y.sum().backward() hands over an expanded dy: stride 0
    n_rows, n_cols = x.shape
    rows_per_program = triton.cdiv(n_rows, GROUPS)
    programs = triton.cdiv(n_rows, rows_per_program)
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    partial = torch.empty((programs, n_cols), dtype=r.dtype, device=x.device)
    block = triton.next_power_of_2(n_cols)
    wrap_triton(rms_norm_bwd_kernel)[(programs,)](dx, partial, x, w, r, dy, x.stride(0), dy.stride(0),
                                                  dx.stride(0), n_rows, n_cols, rows_per_program,
                                                  BLOCK_SIZE=block, num_warps=num_warps_for(block))
    dw = torch.empty_like(w)
    wrap_triton(sum_rows_kernel)[(triton.cdiv(n_cols, 64),)](dw, partial, programs, n_cols,
                                                             BLOCK_ROWS=32, BLOCK_COLS=64)
    return dx, dw


# --- notebook cell: custom_op ---
@torch.library.custom_op("triton_course::rms_norm_fwd_opaque", mutates_args=())
def rms_norm_fwd_opaque(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The same forward through lesson 9's wrapper, unchanged: a black box to the compiler."""
    return rms_norm_forward(x, w, eps)


@rms_norm_fwd_opaque.register_fake
def _(x, w, eps):
    # What the outputs look like, for tensors without data: no kernel runs.
    torch._check(x.ndim == 2 and w.shape == (x.shape[1],), lambda: "x is (M, N) and w is (N,)")
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            x.new_empty(x.shape[0], dtype=accumulator_dtype(x)))


@torch.library.custom_op("triton_course::rms_norm_bwd_opaque", mutates_args=())
def rms_norm_bwd_opaque(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor,
                        dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return rms_norm_backward(x, w, r, dy)


@rms_norm_bwd_opaque.register_fake
def _(x, w, r, dy):
    return torch.empty_like(x, memory_format=torch.contiguous_format), torch.empty_like(w)


# --- notebook cell: register_autograd ---
def save_for_backward(ctx, inputs, output):
    """After the forward: keep x, w and r (lesson 9's choice: 4 bytes a row beyond the inputs)."""
    x, w, eps = inputs
    y, r = output
    ctx.save_for_backward(x, w, r)


def backward_through(backward_op):
    """The autograd formula of the forward: one gradient per input (x, w, eps), from backward_op."""
    def backward(ctx, dy, dr):  # dr: r is an output too, but nothing downstream uses it
        x, w, r = ctx.saved_tensors
        dx, dw = backward_op(x, w, r, dy)
        return dx, dw, None
    return backward


rms_norm_fwd.register_autograd(backward_through(rms_norm_bwd), setup_context=save_for_backward)
rms_norm_fwd_opaque.register_autograd(backward_through(rms_norm_bwd_opaque), setup_context=save_for_backward)

# --- notebook cell: rms_norm ---
INTERPRETED = not isinstance(rms_norm_fwd_kernel, JITFunction)
"""True when Triton's interpreter runs the kernels (TRITON_INTERPRET=1): ``@triton.jit`` then
makes an ``InterpretedFunction``, not a ``JITFunction``."""
# (The lesson writes this choice with device.has_gpu.) In the interpreter only the custom_op pair
# can meet fake tensors (meta, torch.compile).
FORWARD, BACKWARD = (rms_norm_fwd_opaque, rms_norm_bwd_opaque) if INTERPRETED else (rms_norm_fwd, rms_norm_bwd)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """RMSNorm of the rows of a 2-D x, as a PyTorch operator: autograd, meta tensors and
    torch.compile(fullgraph=True) all know it."""
    return FORWARD(x, w, eps)[0]
