"""Drawing a :class:`~autograder.memory_trace.Trace`: a panel per tensor argument (2-D and higher as
an image of rows, 1-D as a strip, wrapped into rows of 1,024 when longer than 4,096), each
element coloured by the program that touched it. Every colour is computed for all elements at
once with numpy, so a few hundred thousand elements draw in about a second.
"""
from __future__ import annotations

import io
import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import to_rgb
from matplotlib.patches import Patch, Rectangle

from .language import say
from .memory_trace import LOAD, STORE, Argument, Trace, format_bytes
from .plots import MASKED_COLOUR, drawn, readable

STRIP, WRAP = 4096, 1024
"""1-D tensors up to STRIP elements are one strip; longer ones wrap into rows of WRAP."""
OUT_OF_BOUNDS = (0.85, 0.0, 0.0)
OUTSIDE = (0.92, 0.92, 0.92)
"""The margin around a tensor: memory beyond it, where stray and masked lanes point."""
PALETTE = np.array([c for i, c in enumerate(plt.get_cmap("tab20").colors) if i not in (6, 7, 14, 15)])
"""Program colours: tab20 without its reds and greys, which mean out of bounds and masked."""
FADE = 0.8
"""How far the programs not highlighted fade towards white."""
DARKEST = 0.55
"""The element loaded most often is drawn this much darker; once-loaded ones not at all."""


class _Layout:
    """Where one argument's elements, and lanes that address none of them, are drawn: the
    tensor's rows × columns and a margin around them (the cells are row-major, flat)."""

    def __init__(self, arg: Argument):
        self.arg, n = arg, arg.numel
        if len(arg.shape) >= 2:
            self.cols = max(arg.shape[-1], 1)
            self.rows = n // self.cols
            self.row_margin, self.col_margin = _margin(self.rows), _margin(self.cols)
        elif n <= STRIP:
            self.rows, self.cols = 1, max(n, 1)
            self.row_margin, self.col_margin = 0, _margin(n)
        else:
            self.rows, self.cols = -(-n // WRAP), WRAP
            self.row_margin, self.col_margin = _margin(self.rows), 0
        self.height = self.rows + 2 * self.row_margin
        self.width = self.cols + 2 * self.col_margin

    def cell(self, row: np.ndarray, col: np.ndarray) -> np.ndarray:
        return (row + self.row_margin) * self.width + col + self.col_margin

    def elements(self, element: np.ndarray) -> np.ndarray:
        return self.cell(*np.divmod(element, self.cols))

    def strays(self, offsets: np.ndarray) -> np.ndarray:
        """Cells for lanes that address no element: where their offset would be were the
        tensor larger, pushed into the margin."""
        arg = self.arg
        steps = offsets // arg.itemsize
        if len(arg.shape) >= 2:
            col_stride = arg.strides[-1] or 1
            row_stride = arg.strides[-2] or self.cols * col_stride
            row = steps // row_stride
            col = (steps - row * row_stride) // col_stride
        else:
            position = steps // (arg.strides[0] if arg.shape and arg.strides[0] > 0 else 1)
            row, col = (np.zeros_like(position), position) if self.rows == 1 else np.divmod(position, self.cols)
        row = np.clip(row, -self.row_margin, self.rows + self.row_margin - 1)
        col = np.clip(col, -self.col_margin, self.cols + self.col_margin - 1)
        on_tensor = (row >= 0) & (row < self.rows) & (col >= 0) & (col < self.cols) & (row * self.cols + col < arg.numel)
        if self.col_margin:
            col = np.where(on_tensor, self.cols, col)
        else:
            row = np.where(on_tensor, self.rows, row)
        return self.cell(row, col)


def _margin(cells: int) -> int:
    return max(1, math.ceil(0.05 * cells))


@drawn
def figure(trace: Trace, program: int | tuple[int, ...] | None = None):
    """The trace drawn, one panel per tensor argument; ``program`` highlighted if given."""
    if not trace.arguments:
        raise ValueError(say("{kernel} had no tensor arguments: nothing to draw", kernel=trace.kernel))
    highlight = None if program is None else trace.program_index(program)
    layouts = [_Layout(arg) for arg in trace.arguments]
    heights = [min(4.5, max(0.4, 9 * layout.height / layout.width)) + 0.5 for layout in layouts]
    fig = plt.figure(figsize=(9, sum(heights) + 1.2), layout="constrained")
    axes = fig.subplots(len(layouts), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for k, (ax, layout) in enumerate(zip(axes, layouts)):
        _panel(ax, trace, k, layout, highlight)
    title = say("{launch}:\n{totals}", launch=trace._launch_name(), totals=trace._totals())
    if highlight is not None:
        xyz = tuple(int(i) for i in np.unravel_index(highlight, trace.grid, order="F"))
        title += "\n" + say("program {program} {xyz} in colour, the others faded", program=highlight, xyz=xyz)
    fig.suptitle(title, fontsize=9)
    active = trace.lanes["active"]
    legend = [Patch(color=OUTSIDE, label=say("outside the tensor"))]
    if (~active).any():
        legend.append(Patch(color=MASKED_COLOUR, label=say("masked-off lane")))
    if trace.out_of_bounds:
        legend.append(Patch(color=OUT_OF_BOUNDS, label=say("out-of-bounds lane")))
    fig.legend(handles=legend, loc="outside lower center", ncols=len(legend), fontsize=8, frameon=False)
    readable(fig)
    plt.close(fig)  # shown once by whoever displays it (see autograder.plots)
    return fig


def _panel(ax, trace: Trace, k: int, layout: _Layout, highlight: int | None) -> None:
    arg, n = trace.arguments[k], trace.arguments[k].numel
    mine = trace.lanes["argument"] == k
    element, offset, active, program, kind, width = (
        trace.lanes[name][mine] for name in ("element", "offset", "active", "program", "kind", "width"))
    hit, used = element >= 0, active & (element >= 0)

    image = np.tile(np.array(OUTSIDE, dtype=np.float32), (layout.height * layout.width, 1))
    image[layout.elements(np.arange(n))] = 1.0
    cells = np.empty(element.shape, dtype=np.int64)
    cells[hit] = layout.elements(element[hit])
    cells[~hit] = layout.strays(offset[~hit])
    image[cells[~active]] = to_rgb(MASKED_COLOUR)

    owner = np.full(n, -1)
    owner[element[used]] = program[used]  # the last program to touch each element
    if highlight is not None:
        owner[element[used & (program == highlight)]] = highlight
    touched = np.flatnonzero(owner >= 0)
    colour = PALETTE[owner[touched] % len(PALETTE)]
    if highlight is not None:
        faded = owner[touched] != highlight
        colour[faded] += (1 - colour[faded]) * FADE
    loads = np.bincount(element[used & (kind != STORE)], minlength=n)
    most = int(loads.max(initial=0))
    if most > 1:
        colour *= 1 - DARKEST * (np.log(np.maximum(loads[touched], 1)) / np.log(most))[:, None]
    image[layout.elements(touched)] = colour
    strays = np.unique(cells[active & ~hit])
    image[strays] = OUT_OF_BOUNDS

    top, left = -layout.row_margin - 0.5, -layout.col_margin - 0.5
    ax.imshow(image.reshape(layout.height, layout.width, 3), interpolation="nearest", aspect="auto",
              extent=(left, left + layout.width, top + layout.height, top))
    if strays.size:  # markers keep a few stray cells visible in a large image
        row, col = np.divmod(strays, layout.width)
        ax.scatter(col + left + 0.5, row + top + 0.5, s=6, marker="s", color=OUT_OF_BOUNDS, linewidths=0)
    ax.add_patch(Rectangle((-0.5, -0.5), layout.cols, layout.rows, fill=False, linewidth=0.8, edgecolor="black"))
    _label(ax, arg, layout)

    moved = np.where(active, width, 0)
    ax.set_title(_panel_title(arg, format_bytes(moved[kind != STORE].sum()), format_bytes(moved[kind != LOAD].sum()),
                              most, int((active & ~hit).sum())), fontsize=9, loc="left")


def _panel_title(arg: Argument, loaded: str, stored: str, most: int, stray: int) -> str:
    """What a panel shows: the argument, its bytes, and how often it was reread or strayed past."""
    facts = {"name": arg.name, "shape": "×".join(map(str, arg.shape)) or say("scalar"), "dtype": arg.dtype,
             "loaded": loaded, "stored": stored, "most": most, "stray": stray}
    if most > 1 and stray:
        return say("{name}: {shape} {dtype}, loaded {loaded}, stored {stored}; read up to {most}× (darker: more); "
                   "{stray:,} lanes out of bounds", **facts)
    if most > 1:
        return say("{name}: {shape} {dtype}, loaded {loaded}, stored {stored}; read up to {most}× (darker: more)",
                   **facts)
    if stray:
        return say("{name}: {shape} {dtype}, loaded {loaded}, stored {stored}; {stray:,} lanes out of bounds", **facts)
    return say("{name}: {shape} {dtype}, loaded {loaded}, stored {stored}", **facts)


def _label(ax, arg: Argument, layout: _Layout) -> None:
    if len(arg.shape) >= 2:
        ax.set_xlabel(say("column (last dimension, {size})", size=arg.shape[-1]), fontsize=8)
        ax.set_ylabel(say("row") if len(arg.shape) == 2 else say("row (leading dimensions flattened)"), fontsize=8)
    elif layout.rows == 1:
        ax.set_xlabel(say("element"), fontsize=8)
        ax.set_yticks([])
    else:
        ax.set_xlabel(say("element % {wrap}", wrap=WRAP), fontsize=8)
        ax.set_ylabel(say("element // {wrap}", wrap=WRAP), fontsize=8)
    ax.tick_params(labelsize=7)


def png(trace: Trace, program: int | tuple[int, ...] | None = None):
    """The figure as a PNG for ``IPython.display``: shown by any notebook front end, kept in
    static exports, and independent of matplotlib's backend."""
    from IPython.display import Image

    png = io.BytesIO()
    figure(trace, program).savefig(png, format="png")
    return Image(data=png.getvalue())


def selector(trace: Trace, program: int | tuple[int, ...] | None = None):
    """A program slider (-1: all programs) above the figure, which it redraws."""
    import ipywidgets as widgets
    from IPython.display import display

    slider = widgets.IntSlider(value=-1 if program is None else trace.program_index(program), min=-1,
                               max=trace.programs - 1, description=say("program"), continuous_update=False)
    shown = widgets.Output()

    def draw(_=None):
        with shown:
            shown.clear_output(wait=True)
            display(png(trace, None if slider.value < 0 else slider.value))

    slider.observe(draw, names="value")
    draw()
    return widgets.VBox([widgets.HBox([slider, widgets.Label(say("-1: all programs"))]), shown])
