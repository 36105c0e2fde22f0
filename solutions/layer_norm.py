"""Reference for Problem set 6: LayerNorm, forward and backward, as one autograd operation.

Per row of x, with x̂ = (x − mean) · rstd and rstd = 1 / sqrt(var + eps)::

    y  = x̂ · w + b
    dx = rstd · (w·dy − x̂ · mean(x̂ · w·dy) − mean(w·dy))     row by row
    dw = Σ over rows of dy · x̂,   db = Σ over rows of dy     across programs

The forward is one program per row and saves mean and rstd (8 bytes a row). The backward gives
each of ``GROUPS`` programs a run of consecutive rows: it stores each row's dx and adds the rows'
dw and db terms in registers, then stores both sums once, in its own row of a (programs × 2N)
float32 buffer; ``column_sums_kernel`` adds up the buffer's rows. Everything is computed in
float32. ``HIDDEN_CASES`` are the cases only grading runs.
"""
import torch
import triton
import triton.language as tl

from autograder.spec import Case

_F16, _BF16 = torch.float16, torch.bfloat16

# The same case twice (3×7, fresh data each time); one column (x̂ = 0: dx and dw exactly 0, db =
# dy), one row of 4097 (db = dy: right without the cross-program sum); 257 rows, which leave the
# last backward program one row of its two; strided large float16 rows; and (GPU) long rows,
# many rows (a dozen a backward program) and bfloat16.
HIDDEN_CASES = {
    "cpu": (Case((2, 2000)), Case((9, 513), _F16, strided=True), Case((8, 777), _F16, values="large"),
            Case((5, 1), _F16), Case((1, 4097)), Case((257, 33)), Case((4, 65), strided=True, values="large"),
            Case((3, 7)), Case((3, 7))),
    "cuda": (Case((4096, 1000)), Case((333, 8191), _F16), Case((100, 5000), _BF16, values="large"),
             Case((64, 8191), strided=True), Case((2000, 3), _F16, values="large"), Case((1, 1), _BF16),
             Case((77, 4095), _F16, strided=True), Case((3000, 257), _BF16), Case((3, 7)), Case((3, 7))),
}

# --- notebook cell: layer_norm ---
EPS = 1e-5  # F.layer_norm's default
GROUPS = 256
"""Programs of the backward, each with cdiv(M, 256) consecutive rows: the partial buffer is then
256 × 2N float32, 16.8 MB at N = 8192, beside the 2.7 GB a 32768 × 8192 float16 step must move."""


def warps(block: int) -> int:
    """Warps for a program holding a whole row: 1 per 256 columns, from 1 to 8."""
    return min(max(block // 256, 1), 8)


@triton.jit
def layer_norm_fwd_kernel(y_ptr, mean_ptr, rstd_ptr, x_ptr, w_ptr, b_ptr, x_row_stride, n_cols, eps,
                          BLOCK_SIZE: tl.constexpr):
    """Program r: y[r] = (x[r] − mean) · rstd · w + b; saves mean[r] and rstd[r] for the backward."""
    ### BEGIN SOLUTION
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    inside = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=inside, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    # The variance of the centred row, whose padding lanes (0 − mean) are zeroed: mean(x²) − mean²
    # would cancel to rounding noise wherever |mean| is large against the spread.
    centred = tl.where(inside, x - mean, 0.0)
    rstd = tl.rsqrt(tl.sum(centred * centred, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + row * n_cols + cols, (centred * rstd * w + b).to(y_ptr.dtype.element_ty), mask=inside)
    ### END SOLUTION


@triton.jit
def layer_norm_bwd_kernel(dx_ptr, partial_ptr, x_ptr, dy_ptr, w_ptr, mean_ptr, rstd_ptr, x_row_stride,
                          dy_row_stride, n_rows, n_cols, rows_per_program, BLOCK_SIZE: tl.constexpr):
    """Program p, for its rows_per_program consecutive rows: each row's dx, then the sums of their
    dw terms (dy · x̂) and db terms (dy) in row p of partial, (programs × 2N): dw's, then db's."""
    ### BEGIN SOLUTION
    program = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    inside = cols < n_cols
    w = tl.load(w_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    dw_sum = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    db_sum = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    first = program.to(tl.int64) * rows_per_program
    for row in range(first, tl.minimum(first + rows_per_program, n_rows)):
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=inside, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=inside, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + row)
        x_hat = tl.where(inside, (x - tl.load(mean_ptr + row)) * rstd, 0.0)
        w_dy = w * dy  # 0 in the padding lanes, where w and dy load 0
        # Two reductions: x moves y through rstd (along x̂) and through the mean (all of the row alike).
        along_x_hat = tl.sum(x_hat * w_dy, axis=0) / n_cols
        dx = rstd * (w_dy - x_hat * along_x_hat - tl.sum(w_dy, axis=0) / n_cols)
        tl.store(dx_ptr + row * n_cols + cols, dx.to(dx_ptr.dtype.element_ty), mask=inside)
        dw_sum += dy * x_hat
        db_sum += dy
    # This program's own row of the buffer: no other program writes it, so no atomics are needed.
    sums = partial_ptr + program.to(tl.int64) * 2 * n_cols + cols
    tl.store(sums, dw_sum, mask=inside)
    tl.store(sums + n_cols, db_sum, mask=inside)
    ### END SOLUTION


@triton.jit
def column_sums_kernel(out_ptr, partial_ptr, n_rows, n_cols, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    """out[j] = Σ_i partial[i, j], BLOCK_COLS columns a program, BLOCK_ROWS rows at a time."""
    ### BEGIN SOLUTION
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    total = tl.zeros((BLOCK_COLS,), dtype=tl.float32)
    for first_row in range(0, n_rows, BLOCK_ROWS):
        rows = first_row + tl.arange(0, BLOCK_ROWS)
        tile = tl.load(partial_ptr + rows[:, None].to(tl.int64) * n_cols + cols[None, :],
                       mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols), other=0.0)
        total += tl.sum(tile, axis=0)
    tl.store(out_ptr + cols, total.to(out_ptr.dtype.element_ty), mask=cols < n_cols)
    ### END SOLUTION


class LayerNormFunction(torch.autograd.Function):
    """LayerNorm over the rows of a 2-D x, with the Triton kernels on both passes."""

    @staticmethod
    def forward(ctx, x, w, b):
        ### BEGIN SOLUTION
        x = x if x.stride(1) == 1 else x.contiguous()  # rows may be strided; a row's elements adjacent
        m, n = x.shape
        y = torch.empty((m, n), dtype=x.dtype, device=x.device)
        mean = torch.empty(m, dtype=torch.float32, device=x.device)
        rstd = torch.empty(m, dtype=torch.float32, device=x.device)
        block = triton.next_power_of_2(n)
        layer_norm_fwd_kernel[(m,)](y, mean, rstd, x, w, b, x.stride(0), n, EPS,
                                    BLOCK_SIZE=block, num_warps=warps(block))
        ctx.save_for_backward(x, w, mean, rstd)  # x̂ is rebuilt from these, never stored
        return y
        ### END SOLUTION

    @staticmethod
    def backward(ctx, dy):
        ### BEGIN SOLUTION
        x, w, mean, rstd = ctx.saved_tensors
        dy = dy if dy.stride(1) == 1 else dy.contiguous()
        m, n = x.shape
        rows_per_program = triton.cdiv(m, GROUPS)
        programs = triton.cdiv(m, rows_per_program)
        dx = torch.empty((m, n), dtype=x.dtype, device=x.device)
        partial = torch.empty((programs, 2 * n), dtype=torch.float32, device=x.device)
        block = triton.next_power_of_2(n)
        layer_norm_bwd_kernel[(programs,)](dx, partial, x, dy, w, mean, rstd, x.stride(0), dy.stride(0), m, n,
                                           rows_per_program, BLOCK_SIZE=block, num_warps=warps(block))
        # dw and db side by side: one second-stage launch adds up both, in float32, rounded once.
        sums = torch.empty(2 * n, dtype=w.dtype, device=w.device)
        column_sums_kernel[(triton.cdiv(2 * n, 64),)](sums, partial, programs, 2 * n, BLOCK_ROWS=32, BLOCK_COLS=64)
        return dx, sums[:n], sums[n:]
        ### END SOLUTION


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """LayerNorm over the last dimension of a 2-D x, with weight w and bias b (eps = 1e-5), as one
    autograd operation: y.backward(dy) runs LayerNormFunction.backward."""
    return LayerNormFunction.apply(x, w, b)
