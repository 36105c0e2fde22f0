"""Reference for Problem set 2: the backward pass of softmax over the last dimension.

For y = softmax(x) and the incoming gradient dy, dx = y ⊙ (dy - Σ_j y_j·dy_j), row by row:
one program per row loads y and dy once, reduces their product in float32 and stores dx
once. ``HIDDEN_CASES`` are the cases only grading runs.
"""
import torch
import triton
import triton.language as tl

from autograder.spec import Case

_F16, _BF16 = torch.float16, torch.bfloat16

# Same shape twice with fresh data (3×7, 3×7), one-element rows, strided rows in each dtype,
# peaked and -inf rows, and (GPU) long rows and many of them. No case rests on a few rows that
# chance can make easy: dropping Σ y·dy passes a 4097-column float32 row whenever that sum lands
# within about 2e-4 of 0 (61 draws in 10,000, float64 simulation), hence two such rows; and reading
# y for dy passes a peaked row whose runner-up is under 1e-6 (all 4 rows of 65 in 34 draws of
# 4,000; all 16 in none), hence 16. Each earned a wrong kernel a hidden case once in CI.
HIDDEN_CASES = {
    "cpu": (Case((2, 2000)), Case((9, 513), _F16, strided=True), Case((8, 777), _F16, values="large"),
            Case((8, 777), values="neg_inf"), Case((5, 1), _F16), Case((2, 4097)),
            Case((16, 65), strided=True, values="large"), Case((3, 7)), Case((3, 7))),
    "cuda": (Case((4096, 1000)), Case((333, 8191), _F16, values="neg_inf"),
             Case((100, 5000), _BF16, values="large"), Case((64, 8191), strided=True),
             Case((2000, 3), _F16, values="large"), Case((1, 1), _BF16), Case((77, 4095), _F16, strided=True),
             Case((3, 7)), Case((3, 7))),
}

# --- notebook cell: softmax_backward ---
@triton.jit
def softmax_backward_kernel(dx_ptr, y_ptr, dy_ptr, y_stride, dy_stride, dx_stride, n_cols,
                            BLOCK_SIZE: tl.constexpr):
    """Program r: dx[r] = y[r] * (dy[r] - sum(y[r] * dy[r]))."""
    ### BEGIN SOLUTION
    r = tl.program_id(0).to(tl.int64)  # int64: r * stride passes 2**31 in big tensors
    lanes = tl.arange(0, BLOCK_SIZE)
    valid = lanes < n_cols
    # Padding lanes load 0, so their product y·dy adds 0 to the sum (the forward's -inf
    # would make it 0·(-inf) = NaN). y and dy have their own row strides.
    p = tl.load(y_ptr + r * y_stride + lanes, mask=valid, other=0.0).to(tl.float32)
    g = tl.load(dy_ptr + r * dy_stride + lanes, mask=valid, other=0.0).to(tl.float32)
    # float32 sum: in float16 its rounding (2**-11 of the sum) swamps a result that cancels.
    dot = tl.sum(p * g, axis=0)
    tl.store(dx_ptr + r * dx_stride + lanes, (p * (g - dot)).to(dx_ptr.dtype.element_ty), mask=valid)
    ### END SOLUTION


def softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx of softmax over the last dim of 2-D tensors, from its output y and the gradient dy."""
    ### BEGIN SOLUTION
    assert y.ndim == 2 and y.shape == dy.shape, f"expected two equal 2-D shapes, got {y.shape} and {dy.shape}"
    assert y.dtype == dy.dtype, f"y and dy must share a dtype, got {y.dtype} and {dy.dtype}"
    # A row's elements must be adjacent; rows may be any distance apart, each tensor its own.
    y, dy = (t if t.stride(1) == 1 else t.contiguous() for t in (y, dy))
    rows, n_cols = y.shape
    dx = torch.empty((rows, n_cols), dtype=y.dtype, device=y.device)
    # The whole row in one block; on an H200, 2 to 16 warps ran 4096 float32 columns equally fast.
    block = triton.next_power_of_2(n_cols)
    softmax_backward_kernel[(rows,)](dx, y, dy, y.stride(0), dy.stride(0), dx.stride(0), n_cols,
                                     BLOCK_SIZE=block)
    return dx
    ### END SOLUTION

