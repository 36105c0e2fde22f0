"""Figures the lessons and the benchmark share: throughput against the device's ceiling (the
measured copy bandwidth, or the measured matmul rate), and how a launch cuts a vector into
programs.

Every function returns its Figure already closed in pyplot: a notebook cell that ends with
the call shows it exactly once (an open figure would be shown a second time when the cell
ends), and a script that draws hundreds keeps none of them in memory. ``fig.savefig`` still
works on a closed figure.

Titles, labels and legends are in the language in use when the figure is drawn
(:mod:`autograder.language`), and so are those of a lesson's own figures (:func:`label`);
Chinese needs a font with CJK glyphs (:func:`readable`), and without one the figures stay
English (:func:`drawn`) rather than show boxes.
"""
from __future__ import annotations

import functools
from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import font_manager
from matplotlib.figure import Figure
from matplotlib.text import Text

from .language import follow_language, get_language, say, speaking, translated

CEILING_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1}
MASKED_COLOUR = "lightgrey"
CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei",
             "Droid Sans Fallback", "Microsoft YaHei", "SimHei", "PingFang SC", "Hiragino Sans GB", "Heiti SC",
             "Arial Unicode MS")
"""Fonts with Chinese glyphs, in order of preference; matplotlib's own DejaVu Sans has none."""


def _installed() -> set[str]:
    return {font.name for font in font_manager.fontManager.ttflist}


def cjk_fonts() -> list[str]:
    """The fonts of :data:`CJK_FONTS` that matplotlib finds on this machine, fonts installed since
    matplotlib cached its list included (:func:`_add_uncached_fonts`)."""
    found = [name for name in CJK_FONTS if name in _installed()]
    if not found and _add_uncached_fonts():
        found = [name for name in CJK_FONTS if name in _installed()]
    return found


@functools.cache
def _add_uncached_fonts() -> int:
    """Add to matplotlib's font list the system's fonts that it lacks, and return how many.
    matplotlib reads its list from a cache made the first time it ran, so a font installed later
    (``apt-get install fonts-noto-cjk`` in a course already used) is invisible until that cache is
    rebuilt. Once per process, and only where a CJK font is wanted and none is known."""
    known = {font.fname for font in font_manager.fontManager.ttflist}
    added = 0
    for path in font_manager.findSystemFonts():
        if path not in known:
            try:
                font_manager.fontManager.addfont(path)
                added += 1
            except (OSError, RuntimeError, ValueError):  # a file matplotlib cannot read: its own scan skips those too
                continue
    return added


def readable(fig: Figure) -> Figure:
    """In a language other than English, every text of ``fig`` in the usual font with an
    installed CJK font behind it, which draws the glyphs the usual one lacks (only installed
    names: matplotlib logs each missing one). Without a CJK font, matplotlib warns of missing
    glyphs and draws boxes: install one (Debian's fonts-noto-cjk, for example)."""
    fonts = cjk_fonts() if get_language() != "en" else []
    if fonts:
        installed = _installed()
        family = [name for name in plt.rcParams["font.sans-serif"] if name in installed][:1] + fonts
        for text in fig.findobj(Text):
            text.set_fontfamily(family)
    return fig


@functools.cache
def _english_figures_said() -> None:
    print(say("Figures need a font with Chinese glyphs and this machine has none (fonts-noto-cjk, for "
              "example), so their labels are in English."))


def figure_language() -> str:
    """The language figures are labelled in: the one in use, unless no installed font draws it."""
    lang = get_language()
    if lang != "en" and not cjk_fonts():
        _english_figures_said()
        return "en"
    return lang


def label(text: str, /, **values) -> str:
    """A text of a lesson's own figure (a title, an axis, a legend entry): ``text`` (English, with
    ``str.format`` placeholders filled from ``values``) in :func:`figure_language`, from the
    message catalogue."""
    return translated(text, figure_language()).format(**values)


def _fonts_for(lang: str) -> None:
    """In a language other than English, every figure made from now on falls back to an installed
    CJK font for the glyphs its usual font lacks (a lesson's own figures included; matplotlib
    fixes a text's fonts when the text is made, so this cannot wait for :func:`label`)."""
    fonts = cjk_fonts() if lang != "en" else []
    if fonts and fonts[0] not in plt.rcParams["font.family"]:
        installed = _installed()
        usual = [name for name in plt.rcParams["font.sans-serif"] if name in installed][:1]
        plt.rcParams["font.family"] = usual + fonts


follow_language(_fonts_for)


def drawn(draw):
    """Decorator: ``draw`` labels its figure in :func:`figure_language`."""
    @functools.wraps(draw)
    def in_a_readable_language(*args, **kwargs):
        with speaking(figure_language()):
            return draw(*args, **kwargs)
    return in_a_readable_language


def _ceiling(ax, value: float | None, name: str | None = None, unit: str = "GB/s") -> None:
    if value is not None:
        name = say("copy bandwidth") if name is None else name
        ax.axhline(value, label=say("{name} (measured): {value:,.0f} {unit}", name=name, value=value, unit=unit),
                   **CEILING_STYLE)


def _done(fig: Figure) -> Figure:
    readable(fig)
    fig.tight_layout()
    plt.close(fig)
    return fig


@drawn
def throughput_vs_size(sizes: Sequence[int], series: Mapping[str, Sequence[float]],
                       ceiling_gbps: float | None = None, title: str | None = None,
                       x_unit: str | None = None, *, unit: str = "GB/s", ceiling: float | None = None,
                       ceiling_name: str | None = None) -> Figure:
    """One line per entry of ``series`` (name -> ``unit`` at each of ``sizes``), log2 x-axis.

    ``ceiling_gbps``: the device's measured copy bandwidth, drawn as a dashed line with its
    value in the legend. For any other ceiling give ``ceiling`` in ``unit`` and its
    ``ceiling_name`` (a TFLOP/s sweep: ``unit="TFLOP/s", ceiling=<measured torch.matmul
    rate>, ceiling_name="torch.matmul float16"``). ``x_unit`` names what ``sizes`` count
    ("elements", "bytes", "columns of 4096 rows"). Left out, ``title``, ``x_unit`` and
    ``ceiling_name`` are "Throughput against size", "elements" and "copy bandwidth", in the
    language in use.
    """
    if ceiling_gbps is not None:
        if ceiling is not None or unit != "GB/s":
            raise ValueError("ceiling_gbps= is the copy bandwidth of a GB/s plot; "
                             "give ceiling= (in unit=) otherwise, not both")
        ceiling = ceiling_gbps
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, values in series.items():
        if len(values) != len(sizes):
            raise ValueError(f"series {name!r} has {len(values)} values for {len(sizes)} sizes")
        ax.plot(sizes, values, marker="o", label=name)
    _ceiling(ax, ceiling, ceiling_name, unit)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(say("size ({unit}, log2 scale)", unit=say("elements") if x_unit is None else x_unit))
    ax.set_ylabel(unit)
    # The top quarter kept clear for the legend: a TFLOP/s curve can start near its peak.
    highest = max([*(v for values in series.values() for v in values), ceiling or 0.0])
    ax.set_ylim(0, 1.35 * highest if highest > 0 else None)
    ax.set_title(say("Throughput against size") if title is None else title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left")
    return _done(fig)


@drawn
def bar_gbps(values: Mapping[str, float], ceiling_gbps: float | None = None,
             title: str | None = None) -> Figure:
    """One bar per entry of ``values`` (name -> GB/s), each labelled with its value; ``title``
    "Throughput" (in the language in use) when left out."""
    fig, ax = plt.subplots(figsize=(7, 4))
    bars = ax.bar(list(values), list(values.values()))
    ax.bar_label(bars, fmt="{:,.0f}")
    _ceiling(ax, ceiling_gbps)
    ax.set_ylabel("GB/s")
    ax.set_title(say("Throughput") if title is None else title)
    if ceiling_gbps is not None:
        ax.legend(loc="lower right")
    return _done(fig)


@drawn
def program_blocks(offsets, mask, title: str | None = None) -> Figure:
    """The elements each program touches: row ``p`` is program ``p``'s ``BLOCK_SIZE`` lanes,
    each showing its offset, coloured by program, grey where the mask is False.

    ``offsets`` and ``mask`` are (programs, BLOCK_SIZE) arrays, e.g. what a kernel stored.
    """
    offsets, mask = np.asarray(offsets), np.asarray(mask, dtype=bool)
    if offsets.shape != mask.shape or offsets.ndim != 2:
        raise ValueError(f"offsets {offsets.shape} and mask {mask.shape} must be one (programs, "
                         "BLOCK_SIZE) shape")
    programs, block = offsets.shape
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(1 + 0.6 * block, 0.5 + 0.6 * programs))
    for p in range(programs):
        for lane in range(block):
            active = mask[p, lane]
            ax.add_patch(plt.Rectangle((lane, p), 0.95, 0.9, edgecolor="white",
                                       facecolor=colours(p % 10) if active else MASKED_COLOUR))
            ax.text(lane + 0.475, p + 0.45, str(offsets[p, lane]), ha="center", va="center",
                    color="white" if active else "dimgrey")
    ax.set_xlim(0, block)
    ax.set_ylim(programs, 0)  # program 0 on top
    ax.set_xticks(np.arange(block) + 0.475, [str(i) for i in range(block)])
    ax.set_yticks(np.arange(programs) + 0.45, [say("program {number}", number=p) for p in range(programs)])
    ax.set_xlabel(say("lane (tl.arange(0, BLOCK_SIZE)); grey: masked off"))
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    n = int(mask.sum())
    ax.set_title(title or say("{elements} elements, BLOCK_SIZE={block}: {programs} programs, {masked} lanes masked",
                              elements=n, block=block, programs=programs, masked=mask.size - n))
    return _done(fig)


@drawn
def roofline(peak_tflops: float, bandwidth_gbps: float, points: Mapping[str, tuple[float, float | None]],
             title: str | None = None, peak_label: str | None = None,
             bandwidth_label: str | None = None) -> Figure:
    """Attainable TFLOP/s against arithmetic intensity (FLOPs per byte moved), log-log.

    The roof is ``min(peak_tflops, intensity · bandwidth)``: sloped where bytes set the rate,
    flat where arithmetic does, the two meeting at the ridge point ``peak / bandwidth``.
    ``points`` maps a name to ``(FLOPs per byte, TFLOP/s)``; a rate of None draws only a
    dotted vertical line at that intensity (where a kernel would sit, nothing measured). Left
    out, ``title``, ``peak_label`` and ``bandwidth_label`` are "Roofline", "matmul rate
    (measured)" and "copy bandwidth (measured)", in the language in use.
    """
    title = say("Roofline") if title is None else title
    peak_label = say("matmul rate (measured)") if peak_label is None else peak_label
    bandwidth_label = say("copy bandwidth (measured)") if bandwidth_label is None else bandwidth_label
    ridge = peak_tflops * 1e3 / bandwidth_gbps  # TFLOP/s over GB/s, in FLOPs per byte
    spots = [x for x, _ in points.values()] + [ridge]
    x = np.logspace(np.log10(min(spots) / 4), np.log10(max(spots) * 4), 200)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(x, np.minimum(peak_tflops, x * bandwidth_gbps / 1e3), color="black", linewidth=2,
            label=say("roof: {bandwidth_label} {bandwidth:,.0f} GB/s, {peak_label} {peak:,.0f} TFLOP/s",
                      bandwidth_label=bandwidth_label, bandwidth=bandwidth_gbps, peak_label=peak_label,
                      peak=peak_tflops))
    ax.axvline(ridge, color="grey", linestyle="--", linewidth=1,
               label=say("ridge point: {ridge:,.0f} FLOPs/byte", ridge=ridge))
    colours = plt.get_cmap("tab10")
    for i, (name, (intensity, rate)) in enumerate(points.items()):
        if rate is None:
            ax.axvline(intensity, color=colours(i % 10), linestyle=":",
                       label=say("{name}: {intensity:,.1f} FLOPs/byte", name=name, intensity=intensity))
        else:
            ax.plot([intensity], [rate], marker="o", linestyle="none", color=colours(i % 10),
                    label=say("{name}: {rate:,.0f} TFLOP/s at {intensity:,.0f} FLOPs/byte", name=name, rate=rate,
                              intensity=intensity))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(say("arithmetic intensity (FLOPs per byte moved, log scale)"))
    ax.set_ylabel(say("TFLOP/s (log scale)"))
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _done(fig)
