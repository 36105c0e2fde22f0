"""On a GPU: the memory trace runs on CUDA tensors (the kernel re-interpreted on CPU copies),
and what it predicts from bytes moved is set against the time the same kernels take on the
card. Each pair is a kernel that moves every byte once and a slower version of it; the trace's
traffic ratio bounds the slowdown a memory-bound kernel can have from its extra bytes, and the
card may do better than that bound when the compiler merges loads or the L2 cache serves a
re-read, never much worse. With COURSE_TRAFFIC_RESULTS set, each pair's prediction and
measurement are appended there as a Markdown table, and as ``figure:`` lines
(``traffic.<pair>.predicted`` and ``.measured``, in %) that ``python -m autograder.figures``
folds for the lessons to quote (results/gpu/: scripts/gpu_run.sh traffic)."""
import datetime
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import triton

from autograder import figures, timing, trace
from test_check import _add_reading_x_twice
from test_trace import softmax_one_pass, softmax_three_passes

pytestmark = pytest.mark.gpu
RESULTS_VAR = "COURSE_TRAFFIC_RESULTS"


@dataclass(frozen=True)
class Launch:
    """One kernel launch over a tensor set: x, y, out (add) or x, out (softmax, a row a program)."""

    kernel: object
    meta: dict

    def grid(self, args) -> tuple[int]:
        return (triton.cdiv(args[0].numel(), self.meta["BLOCK"]),) if len(args) == 3 else (args[0].shape[0],)

    def scalars(self, args) -> tuple[int]:
        return (args[0].numel(),) if len(args) == 3 else (args[0].shape[1],)

    def __call__(self, *args):
        self.kernel[self.grid(args)](*args, *self.scalars(args), **self.meta)

    def traffic_ratio(self, args) -> float:
        return trace(self.kernel, self.grid(args), *args, *self.scalars(args), **self.meta).traffic_ratio


def add(twice: bool) -> Launch:
    return Launch(_add_reading_x_twice, {"BLOCK": 1024, "TWICE": twice})


def softmax(passes: int, block: int) -> Launch:
    return Launch(softmax_one_pass if passes == 1 else softmax_three_passes, {"BLOCK": block, "num_warps": 8})


# name, its figures' name, (fast, slow), (rows, columns) to trace (small) and to time (a few hundred MB)
PAIRS = [
    ("add: x read twice", "add_x_twice", (add(False), add(True)), (1, 4096), (1, 2**26)),
    ("softmax 4096 columns: three passes", "softmax_4096_three_passes", (softmax(1, 4096), softmax(3, 1024)),
     (4, 4096), (16384, 4096)),
    ("softmax 16384 columns: three passes", "softmax_16384_three_passes", (softmax(1, 16384), softmax(3, 1024)),
     (2, 16384), (8192, 16384)),
]


def tensors(shape: tuple[int, int], name: str) -> tuple:
    """add: x, y, out of rows·columns elements; softmax: x, out of rows×columns."""
    x = torch.randn(shape, device="cuda")
    return (x.view(-1), torch.randn_like(x).view(-1), torch.zeros_like(x).view(-1)) if name.startswith("add") \
        else (x, torch.zeros_like(x))


def record(rows: list[str], percent: dict[str, float]) -> None:
    """The table, and each figure (in %) as a ``figure:`` line."""
    path = os.environ.get(RESULTS_VAR)
    if path:
        card, today = torch.cuda.get_device_name(), datetime.date.today().isoformat()
        lines = [f"{figures.LINE}{json.dumps(dict(name=f'traffic.{name}', value=value, unit='%', date=today, card=card))}"
                 for name, value in percent.items()]
        with Path(path).open("a") as f:
            f.write("\n".join([f"\n## {card}, torch {torch.__version__}, triton {triton.__version__}\n",
                               "| pair | traced traffic, slow / fast | predicted speed, every extra byte from memory | "
                               "measured speed (slow's time over fast's, inverted) |",
                               "|---|---|---|---|", *rows, "", *lines]) + "\n")


def test_the_trace_runs_on_cuda_tensors_and_its_prediction_is_set_against_the_card():
    rows, percent = [], {}
    for name, figure, (fast, slow), small, large in PAIRS:
        args = tensors(small, name)
        before = [a.clone() for a in args]
        ratios = [fast.traffic_ratio(args), slow.traffic_ratio(args)]
        assert all(torch.equal(a, b) for a, b in zip(args, before)), "the trace touched the caller's tensors"
        assert ratios[0] == pytest.approx(1.0)  # the fast kernel moves each byte once
        predicted = ratios[1] / ratios[0]
        big = [tensors(large, name) for _ in range(3)]
        speed = timing.compare(slow, fast, big).ratio
        fast(*big[0])
        expected = big[0][-1].clone()
        slow(*big[0])
        torch.testing.assert_close(big[0][-1], expected, msg=f"{name}: the two versions disagree")
        rows.append(f"| {name} | {predicted:.2f}× | {1 / predicted:.0%} | {speed:.0%} |")
        percent |= {f"{figure}.predicted": 100 / predicted, f"{figure}.measured": 100 * speed}
        assert predicted > 1.2, name  # every slow version moves more bytes in the trace
    record(rows, percent)
    # the extra bytes cost at most what the trace says (a cache may serve re-reads for less)
    assert all(percent[f"{f}.measured"] >= 0.9 * percent[f"{f}.predicted"] for _, f, *_ in PAIRS), percent
