"""The memory trace: exact byte counts on kernels whose traffic is known, stray lanes counted
against the tensor they came from and never run, the student's tensors untouched, and a
figure that shows all of it."""
import matplotlib

matplotlib.use("Agg")

import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from autograder import memory_trace_plot as plot  # noqa: E402
from autograder import trace  # noqa: E402
from conftest import DEVICE, ROOT, venv_env  # noqa: E402
from kit import copy_unmasked_store  # noqa: E402
from test_device import _interpreter_works  # noqa: E402

pytestmark = pytest.mark.skipif(not _interpreter_works(), reason="this Triton's interpreter breaks under this numpy")
DEV = DEVICE.device
F32 = 4


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def softmax_one_pass(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    row = tl.program_id(0) * n_cols
    x = tl.load(x_ptr + row + cols, mask=cols < n_cols, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


@triton.jit
def softmax_three_passes(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0) * n_cols
    highest = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        highest = tl.maximum(highest, tl.load(x_ptr + row + cols, mask=cols < n_cols, other=float("-inf")))
    m = tl.max(highest, axis=0)
    total = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        total += tl.exp(tl.load(x_ptr + row + cols, mask=cols < n_cols, other=float("-inf")) - m)
    s = tl.sum(total, axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row + cols, mask=cols < n_cols)
        tl.store(out_ptr + row + cols, tl.exp(x - m) / s, mask=cols < n_cols)


@triton.jit
def matmul_tiles(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def copy_column_to_row(x_ptr, out_ptr, n: tl.constexpr):
    j, i = tl.program_id(0), tl.arange(0, n)
    tl.store(out_ptr + j * n + i, tl.load(x_ptr + i * n + j))


@triton.jit
def copy_row(x_ptr, out_ptr, n: tl.constexpr):
    j, i = tl.program_id(0), tl.arange(0, n)
    tl.store(out_ptr + j * n + i, tl.load(x_ptr + j * n + i))


@triton.jit
def histogram(x_ptr, counts_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.atomic_add(counts_ptr + tl.load(x_ptr + offsets, mask=mask), 1, mask=mask)


@triton.jit
def copy_rows_by_descriptor(x_desc, out_ptr, M, N: tl.constexpr, BM: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    tile = x_desc.load([tl.program_id(0) * BM, 0])
    tl.store(out_ptr + rows * N + tl.arange(0, N)[None, :], tile, mask=rows < M)


def traced_add(n=1000, block=128):
    x, y, out = (torch.randn(n, device=DEV) for _ in range(3))
    return trace(add_kernel, (triton.cdiv(n, block),), x, y, out, n, BLOCK=block)


def test_masked_vector_add_moves_exactly_its_bytes():
    n, block = 1000, 128  # 8 programs, 24 lanes of the last masked off
    t = traced_add(n, block)
    assert (t.bytes_loaded, t.bytes_stored, t.out_of_bounds) == (2 * F32 * n, F32 * n, 0)
    assert t.min_bytes == 3 * F32 * n and t.traffic_ratio == 1.0
    assert t.masked_waste == (8 * block - n) / (8 * block)
    assert t.coalescing == 1.0 and t.grid == (8, 1, 1) and t.programs == 8
    assert [a.name for a in t.arguments] == ["x_ptr", "y_ptr", "out_ptr"]
    assert len(t.accesses) == 3 * 8 and {a.kind for a in t.accesses} == {"load", "store"}
    assert repr(t).startswith("add_kernel[(8,)]: loaded 8.0 kB, stored 4.0 kB, fewest 12.0 kB (traffic ×1.00); "
                              "0 lanes out of bounds; 2.3% of lanes masked off")


def test_the_students_tensors_are_untouched():
    x, y = torch.randn(300, device=DEV), torch.randn(300, device=DEV)
    out = torch.zeros(300, device=DEV)
    before = [x.clone(), y.clone()]
    trace(add_kernel, (3,), x, y, out, 300, BLOCK=128)
    assert torch.equal(x, before[0]) and torch.equal(y, before[1]) and not out.any()


def test_an_unmasked_store_counts_exactly_the_stray_lanes_and_runs_none():
    n, block = 1000, 256  # 4 programs: lanes 1000..1023 of the store are stray
    x, out = torch.randn(n, device=DEV), torch.zeros(n, device=DEV)
    t = trace(copy_unmasked_store, (4,), x, out, n, BLOCK=block)
    assert t.out_of_bounds == 4 * block - n
    assert t.bytes_stored == F32 * 4 * block  # a GPU writes the stray lanes too
    assert t.min_bytes == 2 * F32 * n


def test_a_stray_store_into_the_next_argument_still_counts_against_its_own():
    buffer = torch.zeros(2000, device=DEV)
    x, out, neighbour = torch.randn(1000, device=DEV), buffer[:1000], buffer[1000:]
    t = trace(copy_unmasked_store, (4,), x, out, 1000, BLOCK=256)
    assert t.out_of_bounds == 24  # they land inside `neighbour`'s memory, yet out of `out`
    stray = [a for a in t.accesses if a.kind == "store" and a.argument == 1 and (a.offsets >= 4000).any()]
    assert stray and all(a.offsets.max() == 4 * 1023 for a in stray)
    assert not buffer.any() and not neighbour.any()


def test_three_passes_over_a_row_load_it_three_times():
    rows, cols = 4, 100
    x, out = torch.randn(rows, cols, device=DEV), torch.empty(rows, cols, device=DEV)
    once = trace(softmax_one_pass, (rows,), x, out, cols, BLOCK=128)
    thrice = trace(softmax_three_passes, (rows,), x, out, cols, BLOCK=32)
    assert once.bytes_loaded == F32 * rows * cols and thrice.bytes_loaded == 3 * once.bytes_loaded
    assert once.bytes_stored == thrice.bytes_stored == F32 * rows * cols
    assert once.min_bytes == thrice.min_bytes == 2 * F32 * rows * cols
    assert thrice.traffic_ratio == 2.0  # (3 + 1) / (1 + 1)



@triton.jit
def add_row_bias(x_ptr, b_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    row = tl.program_id(0) * n_cols
    every_lane_reads_b0 = tl.load(b_ptr + cols * 0, mask=cols < n_cols)  # one address, BLOCK lanes
    x = tl.load(x_ptr + row + cols, mask=cols < n_cols)
    tl.store(out_ptr + row + cols, x + tl.load(b_ptr + cols, mask=cols < n_cols) + every_lane_reads_b0,
             mask=cols < n_cols)


@pytest.mark.skipif(not DEVICE.interpreted, reason="counts interpreted launches")
def test_the_bytes_a_gpu_would_move_count_a_programs_rereads_but_not_shared_operands():
    from autograder.memory_trace import count_bytes_moved
    rows, cols = 4, 100
    x, out = torch.randn(rows, cols), torch.empty(rows, cols)
    row_bytes = F32 * rows * cols
    _, once = count_bytes_moved(lambda: softmax_one_pass[(rows,)](x, out, cols, BLOCK=128))
    _, thrice = count_bytes_moved(lambda: softmax_three_passes[(rows,)](x, out, cols, BLOCK=32))
    assert (once, thrice) == (2 * row_bytes, 4 * row_bytes)  # a program's own re-reads cost again
    # b, read by every program, crosses once: a GPU's cache serves the others. b[0], which all
    # lanes of one load read, is one element; program 0 reads it in two loads, so twice.
    _, biased = count_bytes_moved(lambda: add_row_bias[(rows,)](x, torch.randn(cols), out, cols, BLOCK=128))
    assert biased == 2 * row_bytes + F32 * cols + F32

def test_a_matmul_tile_loop_rereads_its_operands_once_per_tile():
    M, N, K, BM, BN, BK = 32, 48, 64, 16, 16, 16
    a, b = torch.randn(M, K, device=DEV), torch.randn(K, N, device=DEV)
    c = torch.empty(M, N, device=DEV)
    t = trace(matmul_tiles, (M // BM, N // BN), a, b, c, M, N, K, BM=BM, BN=BN, BK=BK)
    # every (row tile, column tile) program reads a BM×K strip of A and a K×BN strip of B
    assert t.bytes_loaded == F32 * (M * K * (N // BN) + K * N * (M // BM))
    assert t.bytes_stored == F32 * M * N
    assert t.min_bytes == F32 * (M * K + K * N + M * N)
    assert t.grid == (2, 3, 1) and t.out_of_bounds == 0


def test_coalescing_is_low_down_a_column_and_full_along_a_row():
    n = 32
    x, out = torch.randn(n, n, device=DEV), torch.empty(n, n, device=DEV)
    column = trace(copy_column_to_row, (n,), x, out, n=n)
    row = trace(copy_row, (n,), x, out, n=n)
    # down a column each float32 lane is alone in its 32-byte sector; the row store is whole
    assert column.coalescing == pytest.approx((4 * n + 4 * n) / (32 * n + 4 * n))
    assert np.allclose(column.coalescing_by_program, column.coalescing)
    assert row.coalescing == 1.0


def test_an_atomic_counts_as_a_load_and_a_store():
    values = torch.randint(0, 4, (100,), dtype=torch.int32, device=DEV)
    counts = torch.zeros(4, dtype=torch.int32, device=DEV)
    t = trace(histogram, (2,), values, counts, 100, BLOCK=64)
    assert t.bytes_loaded == 4 * 100 + 4 * 100 and t.bytes_stored == 4 * 100
    assert not counts.any()


def test_a_host_tensor_descriptor_is_traced_as_its_base_tensor():
    x, out = torch.randn(10, 16, device=DEV), torch.empty(10, 16, device=DEV)
    t = trace(copy_rows_by_descriptor, (2,), TensorDescriptor.from_tensor(x, [8, 16]), out, 10, N=16, BM=8)
    assert t.arguments[0].name == "x_desc" and t.arguments[0].shape == (10, 16)
    assert (t.bytes_loaded, t.out_of_bounds) == (F32 * 160, 0)  # rows 10..15 masked by the descriptor


@pytest.mark.skipif(DEVICE.has_gpu, reason="interpreter only: on a GPU the bounds check does not run")
def test_after_a_trace_the_bounds_check_stops_stray_stores_again():
    traced_add()
    x, out = torch.randn(1000), torch.zeros(1000)
    with pytest.raises(Exception, match="out-of-bounds store"):
        copy_unmasked_store[(4,)](x, out, 1000, BLOCK=256)
    x_desc = TensorDescriptor.from_tensor(torch.randn(10, 16), [8, 16])
    copy_rows_by_descriptor[(2,)](x_desc, out, 10, N=16, BM=8)  # a descriptor's base is a checked tensor
    assert torch.equal(out[:160].view(10, 16), x_desc.base)


GPU_MACHINE = """
import torch, triton, triton.language as tl
from triton.runtime.jit import JITFunction
from autograder import trace

@triton.jit
def _double(v):
    return v * 2.0

@triton.jit
def row_max(x_ptr, out_ptr, N: tl.constexpr):
    v = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr + tl.program_id(0), _double(tl.max(v, axis=0)))

compiled = (row_max, _double, tl.max)
assert all(isinstance(f, JITFunction) for f in compiled)
x, out = torch.randn(16), torch.zeros(1)
t = trace(row_max, (1,), x, out, N=16)
assert (t.bytes_loaded, t.bytes_stored) == (64, 4), t
assert (row_max, _double, tl.max) == compiled and out.item() == 0
print("OK")
"""


def test_a_kernel_compiled_for_a_gpu_is_traced_in_the_interpreter_and_put_back(tmp_path):
    # as on a GPU machine: no TRITON_INTERPRET, so @triton.jit compiles for the device
    script = tmp_path / "gpu_machine.py"  # @triton.jit reads its kernel's source from a file
    script.write_text(GPU_MACHINE)
    env = venv_env()
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "OK", done.stderr[-3000:]


def panel_row(fig, k):
    """Row 0 of panel k's image: a 1-D strip's cells, margins included."""
    return fig.axes[k].images[0].get_array()[0]


def test_the_figure_has_a_panel_per_argument_coloured_by_program():
    t = traced_add(1000, 128)
    fig = t.figure()
    assert len(fig.axes) == 3
    assert [ax.get_title("left").split(":")[0] for ax in fig.axes] == ["x_ptr", "y_ptr", "out_ptr"]
    strip, margin = panel_row(fig, 2), plot._margin(1000)
    assert np.allclose(strip[margin], plot.PALETTE[0]) and np.allclose(strip[margin + 999], plot.PALETTE[7])
    assert np.allclose(strip[margin + 1010], to_rgb(plot.MASKED_COLOUR))  # the last program's masked lanes
    highlighted = panel_row(t.figure(program=7), 2)
    assert np.allclose(highlighted[margin + 999], plot.PALETTE[7])
    assert (highlighted[margin] > plot.PALETTE[0]).all()  # program 0 faded towards white


def red_pixels(fig, path) -> int:
    fig.savefig(path)
    rgb = matplotlib.image.imread(path)[..., :3]
    return int(((rgb[..., 0] > 0.7) & (rgb[..., 1] < 0.2) & (rgb[..., 2] < 0.2)).sum())


def test_out_of_bounds_lanes_are_red_in_the_margin(tmp_path):
    x, out = torch.randn(1000, device=DEV), torch.zeros(1000, device=DEV)
    t = trace(copy_unmasked_store, (4,), x, out, 1000, BLOCK=256)
    fig = t.figure()
    strip, margin = panel_row(fig, 1), plot._margin(1000)
    assert np.allclose(strip[margin + 1000:margin + 1024], plot.OUT_OF_BOUNDS)
    assert "24 lanes out of bounds" in fig.axes[1].get_title("left")
    assert red_pixels(fig, tmp_path / "stray.png") > 100
    assert red_pixels(traced_add().figure(), tmp_path / "clean.png") == 0


def test_elements_read_more_than_once_are_darker():
    M, N, K = 32, 48, 64
    a, b, c = torch.randn(M, K, device=DEV), torch.randn(K, N, device=DEV), torch.empty(M, N, device=DEV)
    fig = trace(matmul_tiles, (2, 3), a, b, c, M, N, K, BM=16, BN=16, BK=16).figure()
    assert "read up to 3× (darker: more)" in fig.axes[0].get_title("left")  # A, once per column tile
    assert "read up to 2×" in fig.axes[1].get_title("left")
    assert "read up to" not in fig.axes[2].get_title("left")
    assert fig.axes[0].images[0].get_array().shape[:2] == (M + 2 * plot._margin(M), K + 2 * plot._margin(K))


def test_show_displays_a_png_and_the_widget_redraws_per_program(monkeypatch):
    import IPython.display
    import ipywidgets

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    t = traced_add()
    t.show()
    assert isinstance(shown[-1], IPython.display.Image) and shown[-1].data.startswith(b"\x89PNG")
    t.show(program=(2, 0, 0), widget=True)
    box, drawn = shown[-1], len(shown)
    slider = box.children[0].children[0]
    assert isinstance(slider, ipywidgets.IntSlider) and (slider.min, slider.max, slider.value) == (-1, 7, 2)
    slider.value = 5
    assert len(shown) == drawn + 1 and isinstance(shown[-1], IPython.display.Image)


def test_a_300k_element_trace_draws_in_seconds(tmp_path):
    n = 300_000
    x, y, out = (torch.randn(n, device=DEV) for _ in range(3))
    start = time.perf_counter()
    t = trace(add_kernel, (triton.cdiv(n, 1024),), x, y, out, n, BLOCK=1024)
    traced = time.perf_counter()
    t.figure().savefig(tmp_path / "big.png")
    drawn = time.perf_counter()
    print(f"300k-element add: trace {traced - start:.2f} s, figure to PNG {drawn - traced:.2f} s")
    assert t.bytes_loaded == 8 * n and t.out_of_bounds == 0
    assert drawn - traced < 5 and drawn - start < 15  # measured: about 1 s and 0.5 s on one CPU core


def test_a_trace_leaves_triton_language_as_it_found_it():
    """Triton's interpreter leaves behind what a @triton.jit helper's call (here ``tl.max``)
    patched, ``tensor.__mul__`` among them; the trace takes it all back, or the kernel's next
    compile fails (on a GPU: its next launch). Seen on an H100 with Triton 3.6."""
    from autograder.cross_compile import compile_for
    owners = [tl, tl.core, tl.math, tl.core.tensor]
    before = [dict(vars(owner)) for owner in owners]
    x = torch.randn(2, 16, device=DEVICE.device)
    trace(softmax_three_passes, (2,), x, torch.empty_like(x), 16, BLOCK=8)
    assert [name for owner, was in zip(owners, before) for name in set(vars(owner)) | set(was)
            if vars(owner).get(name) is not was.get(name)] == []
    assert "ld.global" in compile_for(softmax_three_passes, x, torch.empty_like(x), 16, BLOCK=8).asm["ptx"]
