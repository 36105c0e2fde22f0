"""The plot helpers draw what they claim; the sweep refuses the CPU and measures on a GPU."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from autograder import plots  # noqa: E402
from autograder.device import current  # noqa: E402
from autograder.sweep import measure_sweep  # noqa: E402

SIZES = [2**12, 2**16, 2**20]
SERIES = {"Triton": [10.0, 900.0, 3800.0], "PyTorch": [12.0, 950.0, 3900.0]}


def dashed(ax):
    return [line for line in ax.get_lines() if line.get_linestyle() == "--"]


def test_throughput_vs_size_draws_one_line_per_series_and_the_ceiling():
    fig = plots.throughput_vs_size(SIZES, SERIES, ceiling_gbps=4321.0, title="add")
    (ax,) = fig.axes
    solid = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
    assert [line.get_label() for line in solid] == ["Triton", "PyTorch"]
    assert list(solid[0].get_xdata()) == SIZES and list(solid[1].get_ydata()) == SERIES["PyTorch"]
    (ceiling,) = dashed(ax)
    assert set(ceiling.get_ydata()) == {4321.0}
    assert "4,321 GB/s" in ceiling.get_label()
    assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
    assert ax.get_xlabel().startswith("size (elements") and ax.get_ylabel() == "GB/s"
    assert ax.get_title() == "add"
    assert "4,321 GB/s" in [t.get_text() for t in ax.get_legend().get_texts()][-1]


def test_throughput_vs_size_without_ceiling_and_in_bytes():
    ax = plots.throughput_vs_size(SIZES, SERIES, x_unit="bytes").axes[0]
    assert dashed(ax) == [] and "bytes" in ax.get_xlabel()


def test_throughput_vs_size_rejects_a_series_of_the_wrong_length():
    with pytest.raises(ValueError, match="'Triton' has 2 values for 3 sizes"):
        plots.throughput_vs_size(SIZES, {"Triton": [1.0, 2.0]})


def test_bar_gbps_draws_one_labelled_bar_per_entry_and_the_ceiling():
    values = {"torch.add": 3900.0, "Triton add": 3800.0, "copy": 4300.0}
    ax = plots.bar_gbps(values, ceiling_gbps=4300.0).axes[0]
    assert [bar.get_height() for bar in ax.patches] == list(values.values())
    assert [t.get_text() for t in ax.get_xticklabels()] == list(values)
    assert [t.get_text() for t in ax.texts] == ["3,900", "3,800", "4,300"]
    (ceiling,) = dashed(ax)
    assert set(ceiling.get_ydata()) == {4300.0}
    assert ax.get_ylabel() == "GB/s"


def test_program_blocks_greys_exactly_the_masked_lanes():
    n, block = 10, 4
    offsets = np.arange(12).reshape(3, block)
    fig = plots.program_blocks(offsets, offsets < n)
    ax = fig.axes[0]
    grey = matplotlib.colors.to_rgba(plots.MASKED_COLOUR)
    colours = [patch.get_facecolor() for patch in ax.patches]
    assert len(colours) == 12 and colours.count(grey) == 2
    assert colours[10] == colours[11] == grey  # the two lanes past element 9
    assert len({c for c in colours if c != grey}) == 3  # one colour per program
    assert [t.get_text() for t in ax.texts] == [str(i) for i in range(12)]
    assert "3 programs, 2 lanes masked" in ax.get_title()


def test_program_blocks_rejects_mismatched_arrays():
    with pytest.raises(ValueError, match="one \\(programs, BLOCK_SIZE\\) shape"):
        plots.program_blocks(np.zeros((3, 4)), np.ones((3, 2)))


def test_figures_come_back_closed():
    before = plt.get_fignums()
    plots.throughput_vs_size(SIZES, SERIES)
    plots.bar_gbps({"a": 1.0})
    assert plt.get_fignums() == before


def _add_inputs(n):
    return (torch.randn(n, device="cuda"), torch.randn(n, device="cuda"))


@pytest.mark.skipif(current().has_gpu, reason="checks the refusal where kernels run in the interpreter")
def test_measure_sweep_refuses_without_a_gpu():
    called = []
    with pytest.raises(RuntimeError, match="measure_sweep times kernels on a GPU.*interpreter"):
        measure_sweep(lambda x, y: called.append(1), torch.add, _add_inputs, [1024], lambda n: 12 * n)
    assert called == []  # refused before running anything


@pytest.mark.gpu
def test_measure_sweep_on_a_gpu():
    from autograder.kernels.vector_add import add

    sizes = [2**12, 2**20]
    result = measure_sweep(add, torch.add, _add_inputs, sizes, lambda n: 12 * n, rounds=1)
    assert list(result) == ["Triton", "PyTorch"]
    assert all(len(v) == len(sizes) and all(g > 0 for g in v) for v in result.values())


@pytest.mark.gpu
def test_measure_sweep_rejects_a_wrong_kernel():
    with pytest.raises(AssertionError, match="at size 4096, Triton disagrees with PyTorch"):
        measure_sweep(torch.sub, torch.add, _add_inputs, [2**12], lambda n: 12 * n, rounds=1)
