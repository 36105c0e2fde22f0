"""PyTorch references, tolerances and byte counts that several declarations share."""
from __future__ import annotations

import torch


def bytes_elementwise(inputs, output) -> int:
    """Bytes an element-wise or row-wise kernel must move: every input read once, the output written once."""
    return sum(t.numel() * t.element_size() for t in (*inputs, output))


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


# Softmax outputs are small (about 1/n_cols: 1.2e-4 at 8192 columns), so the default float32
# atol of 1e-5 would forgive a 7% error there: one stray exp(0 - max) ≈ 0.02 added to a sum
# of ~300 (a masked lane loaded as 0) hides under it. The atols below sit under the
# smallest outputs that matter; rtol 1e-5 is 40 float32 ulps, room for the GPU's approximate
# exp and a 2^20-term sum.
SOFTMAX_TOLERANCES = {torch.float32: (1e-8, 1e-5), torch.float16: (1e-7, 1e-3),
                      torch.bfloat16: (1e-8, 1.6e-2)}
