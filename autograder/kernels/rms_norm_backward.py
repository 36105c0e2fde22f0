"""Lesson 9's RMSNorm layer: the forward, the backward, and three ways to reduce the weight's gradient.

For a row ``x`` of N values, the weight ``w`` (N values shared by every row) and
``r = 1 / sqrt(mean(x²) + eps)``, one number per row::

    y  = x · r · w
    dx = r · (w · dy) − x · r³ · mean(x · w · dy)      row by row, like the forward
    dw = Σ over rows of dy · x · r                      a sum over every row: across programs

The forward saves ``r`` (4 bytes a row) for the backward. ``rms_norm_backward`` reduces ``dw``
in two stages: each program adds up the ``dw`` terms of its own rows into one row of a
(programs × N) buffer, then ``sum_rows_kernel`` adds the buffer's rows. With one row per
program that is the lesson's strategy (a); with a few hundred groups of rows, strategy (c).
``rms_norm_backward_atomic`` is strategy (b): every program ``tl.atomic_add``s its row's
contribution into one vector. ``RMSNorm`` is the layer as an ``nn.Module`` whose autograd runs
these kernels; ``naive_rms_norm_layer`` is the same layer as PyTorch operations.
"""
import torch
import triton
import triton.language as tl

from autograder.language import say


def rms_norm_dx(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx of the layer at (x, w) for the output gradient dy: the forward (for r), then the backward.
    What :mod:`autograder.lesson_kernels.rms_norm_backward` checks."""
    _, r = rms_norm_forward(x, w)
    return rms_norm_backward(x, w, r, dy)[0]


def rms_norm_dw(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, strategy: str = "grouped") -> torch.Tensor:
    """dw likewise, reduced ``"grouped"`` (c), ``"per_row"`` (a) or ``"atomic"`` (b)."""
    _, r = rms_norm_forward(x, w)
    if strategy == "atomic":
        return rms_norm_backward_atomic(x, w, r, dy)[1]
    if strategy not in ("grouped", "per_row"):
        raise ValueError(say("strategy is 'grouped', 'per_row' or 'atomic', not {strategy!r}", strategy=strategy))
    return rms_norm_backward(x, w, r, dy, groups=GROUPS if strategy == "grouped" else None)[1]


# --- notebook cell: rms_norm_forward ---
EPS = 1e-6  # as in LLaMA: it only matters where a row's mean square is near 0 (all-zero padding rows)


def accumulator_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the kernels compute in: float64 for float64 inputs (gradcheck), else float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def num_warps_for(block_size: int) -> int:
    """Warps for a program that holds a whole row: 1 per 256 columns, from 1 to 8 (4096 float32
    columns on 8 warps of 32 threads are 16 values per thread and tensor)."""
    return min(max(block_size // 256, 1), 8)


@triton.jit
def rms_norm_fwd_kernel(y_ptr, r_ptr, x_ptr, w_ptr, x_row_stride, y_row_stride, n_cols, eps,
                        BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    # r's dtype is the arithmetic's: float32, or float64 for float64 inputs (gradcheck).
    acc = r_ptr.dtype.element_ty
    # Padding lanes load 0: they add nothing to the sum of squares.
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(acc)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(acc)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)  # the mean over n_cols, not BLOCK_SIZE
    tl.store(r_ptr + row, r)  # saved for the backward: 4 bytes a row
    tl.store(y_ptr + row * y_row_stride + cols, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


def rms_norm_forward(x: torch.Tensor, w: torch.Tensor, eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """y = x · r · w for each row of a 2-D ``x``, and ``r`` (one per row) for the backward."""
    assert x.ndim == 2 and w.shape == (x.shape[1],), say("x is (M, N) and w is (N,); got {x}, {w}", x=tuple(x.shape), w=tuple(w.shape))
    if "meta" in (x.device.type, w.device.type):  # launched, a kernel would read address 0 and fault
        raise NotImplementedError(say("a Triton kernel reads its tensors' memory, and meta tensors have none"))
    if x.stride(1) != 1:
        x = x.contiguous()  # rows may be strided (a slice x[:, :n]); columns must be adjacent
    n_rows, n_cols = x.shape
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    r = torch.empty(n_rows, dtype=accumulator_dtype(x), device=x.device)
    block = triton.next_power_of_2(n_cols)
    rms_norm_fwd_kernel[(n_rows,)](y, r, x, w, x.stride(0), y.stride(0), n_cols, eps,
                                   BLOCK_SIZE=block, num_warps=num_warps_for(block))
    return y, r


# --- notebook cell: backward_row ---
@triton.jit
def backward_row(dx_ptr, x_ptr, dy_ptr, r_ptr, w, row, x_row_stride, dy_row_stride, dx_row_stride,
                 cols, mask, n_cols):
    """Store one row's dx; return the row's contribution to dw, dy · x · r (a block of N values)."""
    acc = r_ptr.dtype.element_ty
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(acc)
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(acc)
    r = tl.load(r_ptr + row)  # saved by the forward: no sum of squares here
    w_dy = w * dy
    # The backward's one reduction: mean(x · w · dy), over the n_cols real lanes (padding is 0).
    c = tl.sum(x * w_dy, axis=0) / n_cols
    dx = r * w_dy - x * (r * r * r * c)
    tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    return dy * x * r


# --- notebook cell: rms_norm_backward ---
GROUPS = 256
"""Programs of the grouped backward, strategy (c): each takes M / 256 rows. Its partial buffer has
256 rows: at N = 4096 in float32, written once and read once, 8.4 MB on top of the 201 MB the
backward must move (4%), where one buffer row per row of 4096 adds 134 MB (67%)."""


@triton.jit
def rms_norm_bwd_kernel(dx_ptr, dw_partial_ptr, x_ptr, w_ptr, r_ptr, dy_ptr,
                        x_row_stride, dy_row_stride, dx_row_stride, n_rows, n_cols, rows_per_program,
                        BLOCK_SIZE: tl.constexpr):
    program = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    acc = r_ptr.dtype.element_ty
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(acc)  # once per program, not once per row
    dw = tl.zeros((BLOCK_SIZE,), dtype=acc)  # this program's rows' share of dw, in registers
    first = program.to(tl.int64) * rows_per_program
    for row in range(first, tl.minimum(first + rows_per_program, n_rows)):
        dw += backward_row(dx_ptr, x_ptr, dy_ptr, r_ptr, w, row, x_row_stride, dy_row_stride,
                           dx_row_stride, cols, mask, n_cols)
    # One row of the (programs × N) buffer per program: no other program writes it.
    tl.store(dw_partial_ptr + program.to(tl.int64) * n_cols + cols, dw, mask=mask)


@triton.jit
def sum_rows_kernel(out_ptr, partial_ptr, n_rows, n_cols, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    """out[j] = Σ_i partial[i, j]: one program per BLOCK_COLS columns, down all the rows."""
    cols = tl.program_id(axis=0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    total = tl.zeros((BLOCK_ROWS, BLOCK_COLS), dtype=partial_ptr.dtype.element_ty)
    for start in range(0, n_rows, BLOCK_ROWS):
        rows = start + tl.arange(0, BLOCK_ROWS)
        inside = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        total += tl.load(partial_ptr + rows[:, None].to(tl.int64) * n_cols + cols[None, :], mask=inside, other=0.0)
    tl.store(out_ptr + cols, tl.sum(total, axis=0).to(out_ptr.dtype.element_ty), mask=cols < n_cols)


def rms_norm_backward(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, dy: torch.Tensor,
                      groups: int | None = GROUPS) -> tuple[torch.Tensor, torch.Tensor]:
    """dx and dw of y = x · r · w. dw in two stages: ``groups`` programs each sum their rows'
    share into a (programs × N) buffer, then ``sum_rows_kernel`` adds its rows up.
    ``groups=None``: one program per row, an M × N buffer (strategy (a))."""
    x, dy = (t if t.stride(1) == 1 else t.contiguous() for t in (x, dy))
    n_rows, n_cols = x.shape
    rows_per_program = 1 if groups is None else triton.cdiv(n_rows, groups)
    programs = triton.cdiv(n_rows, rows_per_program)
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    partial = torch.empty((programs, n_cols), dtype=r.dtype, device=x.device)  # float32 (or 64) sums
    block = triton.next_power_of_2(n_cols)
    rms_norm_bwd_kernel[(programs,)](dx, partial, x, w, r, dy, x.stride(0), dy.stride(0), dx.stride(0),
                                     n_rows, n_cols, rows_per_program,
                                     BLOCK_SIZE=block, num_warps=num_warps_for(block))
    dw = torch.empty_like(w)
    sum_rows_kernel[(triton.cdiv(n_cols, 64),)](dw, partial, programs, n_cols, BLOCK_ROWS=32, BLOCK_COLS=64)
    return dx, dw


# --- notebook cell: rms_norm_backward_atomic ---
@triton.jit
def rms_norm_bwd_atomic_kernel(dx_ptr, dw_ptr, x_ptr, w_ptr, r_ptr, dy_ptr,
                               x_row_stride, dy_row_stride, dx_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(r_ptr.dtype.element_ty)
    dw_row = backward_row(dx_ptr, x_ptr, dy_ptr, r_ptr, w, row, x_row_stride, dy_row_stride,
                          dx_row_stride, cols, mask, n_cols)
    # Every program adds into the same N addresses: M read-modify-writes each, in arrival order.
    tl.atomic_add(dw_ptr + cols, dw_row, mask=mask)


def rms_norm_backward_atomic(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor,
                             dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """dx and dw of y = x · r · w, one program per row, dw by atomic adds (strategy (b))."""
    x, dy = (t if t.stride(1) == 1 else t.contiguous() for t in (x, dy))
    n_rows, n_cols = x.shape
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    dw = torch.zeros(n_cols, dtype=r.dtype, device=x.device)  # the atomics add into it: start at 0
    block = triton.next_power_of_2(n_cols)
    rms_norm_bwd_atomic_kernel[(n_rows,)](dx, dw, x, w, r, dy, x.stride(0), dy.stride(0), dx.stride(0),
                                          n_cols, BLOCK_SIZE=block, num_warps=num_warps_for(block))
    return dx, dw.to(w.dtype)  # summed in float32; rounded to w's dtype once, at the end


# --- notebook cell: autograd ---
class RMSNormFunction(torch.autograd.Function):
    """y = x · r · w with the Triton kernels on both passes. x is 2-D (M, N), w is (N,)."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        y, r = rms_norm_forward(x, weight, eps)
        ctx.save_for_backward(x, weight, r)  # r: 4 bytes a row, so the backward needs no sum of squares
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, r = ctx.saved_tensors
        dx, dw = rms_norm_backward(x, weight, r, dy)
        return dx, dw, None  # one gradient per argument of forward; eps has none


class RMSNorm(torch.nn.Module):
    """RMSNorm over the last dimension, with a learned weight, like ``torch.nn.RMSNorm``."""

    def __init__(self, dim: int, eps: float = EPS, device=None, dtype=None):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim, device=device, dtype=dtype))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])  # (..., N) as (M, N): a view when x is contiguous
        return RMSNormFunction.apply(rows, self.weight, self.eps).view(x.shape)


# --- notebook cell: naive_rms_norm_layer ---
def naive_rms_norm_layer(x: torch.Tensor, w: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """The same layer as PyTorch operations (LLaMA's way: 16-bit inputs normalised in float32).
    Autograd records each operation and writes its own backward from them."""
    h = x.float() if x.element_size() < 4 else x
    return (h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps)).to(x.dtype) * w
