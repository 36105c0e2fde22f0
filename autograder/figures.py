"""Figures measured on a GPU, by name, and the prose that quotes them.

Prose never types a measured figure: it marks it, ``<!--fig:copy_bandwidth-->4,027 GB/s<!--/fig-->``
(HTML comments, unseen in JupyterLab, Colab and on GitHub), and ``python -m autograder.instructor.sync``
(``triton-course sync``) rewrites the text between the markers from the record, in the lessons,
their translations and the README at once; ``--check`` reports a figure that drifted.
``<!--fig:NAME:SPEC-->`` formats the value with a format spec (``.3f``); ``SPEC`` = ``date`` gives
the day it was measured, ``card`` the GPU it was measured on.

Where the figures come from:

- ``results/gpu/results.json``, written by ``python -m autograder.bench``: ``copy_bandwidth``,
  ``matmul_float16``, ``matmul_bfloat16``; each sweep point's ``<sweep>.<size>.rate``, ``.pytorch``
  and ``.ratio`` (``vector_add.2^26.rate``, ``flash_attention.seq4096.ratio``); each graded
  reference's ``<exercise>.rate``, ``.pytorch`` and ``.ratio``; ``sweep_goals`` and ``sweep_goals_met``.
- ``results/gpu/figures.json``: what the lessons print on a GPU, and a few figures from GPU
  sessions' reports, each entry naming its source. A lesson cell hands its figures to
  :func:`record_figures`; on a GPU run of ``bash scripts/gpu_run.sh tests`` that appends a
  ``figure: {json}`` line each to the file named by ``TRITON_COURSE_NOTEBOOK_OUTPUTS``. Copy that file
  into ``results/gpu/`` and ``python -m autograder.figures results/gpu/notebook-outputs-DATE.txt``
  folds its figures into figures.json; then sync.
- :data:`DERIVED`: arithmetic on those (a ratio, a share of the copy bandwidth, the time some
  bytes take at a measured rate).
- the class tables of GPU sessions (``results/gpu/class-grading-*.md``): each problem set's
  reference as the judge timed it in every committed class run (:func:`class_runs`).
- the committed GPU runs of the lessons (``results/gpu/notebook-outputs-*.txt``): the range of each
  figure a lesson printed over all of them (:func:`lesson_runs`).
- the declarations, not a measurement: ``<exercise>.threshold``, the throughput threshold an
  exercise declares (``<!--fig:ps1_broadcast_add.threshold:g-->0.8×<!--/fig-->``), so prose that
  quotes a threshold follows a change to it in one sync.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import settings

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "gpu" / "results.json"
REGISTRY = ROOT / "results" / "gpu" / "figures.json"
LINE = "figure: "

MARKER = re.compile(r"<!--fig:(?P<name>[^:\s]+?)(?::(?P<spec>\S+?))?-->(?P<text>.*?)<!--/fig-->")
DEFAULT_SPEC = {"GB/s": ",.0f", "TFLOP/s": ",.0f", "µs": ",.0f", "ms": ".2f", "×": ".2f", "%": ".0f", "": ".0f"}


@dataclass(frozen=True)
class Figure:
    """One measured figure, or one computed from measured ones."""

    value: float
    unit: str
    """One of :data:`DEFAULT_SPEC`'s keys; ``""`` for a count."""
    date: str
    """The day it was measured, ``YYYY-MM-DD``."""
    card: str
    """The GPU it was measured on."""
    source: str
    """The file that holds the run, or the figures it was derived from."""

    def text(self, spec: str | None = None) -> str:
        """As prose quotes it: ``4,027 GB/s``, ``1.56×``, ``90%``; ``spec="date"``: the date;
        ``spec="card"``: the GPU, without its maker's name (``H100 80GB HBM3``)."""
        if spec == "date":
            return self.date
        if spec == "card":
            return self.card.removeprefix("NVIDIA ")
        number = format(self.value, spec or DEFAULT_SPEC[self.unit])
        return number + ("" if self.unit in ("×", "%", "") else " ") + self.unit


H200_DATASHEET_GBPS = 4800
"""NVIDIA's *H200 Tensor Core GPU* datasheet: 4.8 TB/s of HBM3e."""


def _ms(nbytes: float, gbps: float) -> float:
    return nbytes / gbps / 1e6


DERIVED: dict[str, tuple[str, Callable[[Callable[[str], float]], float]]] = {
    # lesson 1: softmax of 4096 × 4096 float32
    "ninja_gap.fused_of_copy": ("%", lambda v: 100 * v("ninja_gap.fused_triton") / v("copy_bandwidth")),
    "ninja_gap.fused_vs_torch": ("×", lambda v: v("ninja_gap.fused_triton") / v("ninja_gap.torch.softmax")),
    "ninja_gap.fused_vs_naive": ("×", lambda v: v("ninja_gap.fused_triton") / v("ninja_gap.naive_pytorch")),
    "ninja_gap.naive_cap": ("GB/s", lambda v: v("copy_bandwidth") / 4),  # 4× the minimal bytes
    # lessons 2, 3 and 6: vector add, 12 bytes per element
    "vector_add.2^26.ms": ("ms", lambda v: _ms(12 * 2**26, v("vector_add.2^26.rate"))),
    "vector_add.2^26.of_datasheet": ("%", lambda v: 100 * v("vector_add.2^26.rate") / H200_DATASHEET_GBPS),
    "vector_add.2^12.us": ("µs", lambda v: 1e3 * _ms(12 * 2**12, v("vector_add.2^12.rate"))),
    "vector_add.2^12.pytorch_us": ("µs", lambda v: 1e3 * _ms(12 * 2**12, v("vector_add.2^12.pytorch"))),
    # lesson 4: 4096 × 4096 float32 at the copy bandwidth, naive 32MN + 16M bytes, fused 8MN
    "fused_softmax.naive_ms": ("ms", lambda v: _ms(32 * 4096**2 + 16 * 4096, v("copy_bandwidth"))),
    "fused_softmax.fused_ms": ("ms", lambda v: _ms(8 * 4096**2, v("copy_bandwidth"))),
    # lesson 7: transpose of 4096 × 4096 float32
    "transpose.tiles_of_copy": ("%", lambda v: 100 * v("transpose.rate.tiles") / v("copy_bandwidth")),
    "transpose.rows_vs_tiles": ("×", lambda v: v("transpose.time.rows") / v("transpose.time.tiles")),
    "transpose.columns_vs_tiles": ("×", lambda v: v("transpose.time.columns") / v("transpose.time.tiles")),
    # lesson 8: the unfused score matrix, 2^32 bytes, written or read six times
    "attention.unfused_scores_ms": ("ms", lambda v: _ms(6 * 2**32, v("copy_bandwidth"))),
    # problem set 3: a copy of 4096 × 128,256 bfloat16 logits reads and writes 2.1 GB
    "ps3_cross_entropy.copy_rate": ("GB/s", lambda v: 2 * 2 * 4096 * 128256 / v("ps3_cross_entropy.copy_ms") / 1e6),
    "ps3_cross_entropy.torch_vs_copy": ("×", lambda v: v("ps3_cross_entropy.torch_ms") / v("ps3_cross_entropy.copy_ms")),
    "ps3_cross_entropy.speedup": ("×", lambda v: v("ps3_cross_entropy.torch_ms") / v("ps3_cross_entropy.fused_ms")),
}
"""Figures computed from recorded ones: name -> (unit, formula over ``v(name)``, a recorded value)."""


def _bench(results: dict, source: str) -> dict[str, Figure]:
    """The figures of a benchmark run (results.json)."""
    env = results["environment"]

    def fig(value, unit, run=None):
        run = run or env
        return Figure(value, unit, run["date"], run["card"], source)

    figs = {name.removeprefix("torch.").replace(" ", "_"): fig(c["value"], c["unit"])
            for name, c in results["ceilings"].items()}
    goals = [g for s in results["sweeps"] for g in s["goals"]]
    figs["sweep_goals"] = fig(len(goals), "")
    figs["sweep_goals_met"] = fig(sum(g["met"] is True for g in goals), "")
    for s in results["sweeps"]:
        series = (("rate", s["ours"], s["unit"], 1), ("pytorch", s["pytorch"], s["unit"], 1),
                  ("ratio", s["ratios"], "×", 1), ("of_ceiling", s.get("ceiling_fractions"), "%", 100))
        for i, label in enumerate(s["labels"]):
            key = f"{s['name']}.{label.replace(' ', '')}"
            figs |= {f"{key}.{suffix}": fig(scale * values[i], unit, s.get("run"))
                     for suffix, values, unit, scale in series if values and i < len(values)}
    for e in results["exercises"]:
        for suffix, key, unit in (("rate", "rate", e.get("unit")), ("pytorch", "baseline_rate", e.get("unit")),
                                  ("ratio", "median_ratio", "×")):
            if e.get(key) is not None:
                figs[f"{e['exercise']}.{suffix}"] = fig(e[key], unit, e.get("run"))
    return figs


@functools.cache
def recorded(results: Path = RESULTS, registry: Path = REGISTRY) -> dict[str, Figure]:
    """Every figure by name: the benchmark's, the registry's, then :data:`DERIVED`."""
    figs = _bench(json.loads(results.read_text()), _relative(results))

    def add(more: dict[str, Figure], source: str) -> None:  # a name given twice stops the record
        if taken := sorted(more.keys() & figs.keys()):
            raise ValueError(f"{', '.join(taken)}: from {source}, and already recorded elsewhere")
        figs.update(more)
    add({name: Figure(**entry) for name, entry in json.loads(registry.read_text()).items()}, _relative(registry))
    add(_declared(), "a declaration")
    add(class_runs(), "the class tables")
    add(lesson_runs(), "the lessons' runs")
    for name, (unit, formula) in DERIVED.items():
        used = []

        def value(input_name: str) -> float:
            used.append(input_name)
            return figs[input_name].value
        try:
            number = formula(value)
        except KeyError:  # an input not recorded (yet): a marker naming this figure says so
            continue
        inputs = [figs[n] for n in used]
        add({name: Figure(number, unit, max(f.date for f in inputs), inputs[0].card, "derived from " + ", ".join(used))},
            "figures.DERIVED")
    return figs


def _declared() -> dict[str, Figure]:
    """Each exercise's throughput threshold, as its declaration sets it."""
    from . import exercises

    return {f"{ex.name}.threshold": Figure(ex.throughput.threshold, "×", "declared", "any",
                                           f"the declaration of {ex.name}")
            for ex in exercises.EXERCISES.values() if ex.throughput is not None}


_TABLE_HEADING = re.compile(r"## (\S+): .*?\((NVIDIA [^,]+),")
_REFERENCE_ROW = re.compile(r"\| ref \| [\d.]+/[\d.]+ \| [\d.]+ \| all passed: (\S+) throughput: ([\d.]+)× "
                            r".*?\(needs ≥ [\d.]+×\) on (.+?): ")


def class_runs(folder: Path = REGISTRY.parent) -> dict[str, Figure]:
    """The judge's verdicts on each problem set's reference in the committed class tables
    (``class-grading-DATE*.md``, written by ``tests/test_class_on_gpu.py``), on the case its
    declaration times now: ``<exercise>.judge_low`` and ``.judge_high`` (ratios) and
    ``.judge_runs`` (how many verdicts), dated by the newest table, the cards named; and
    ``class_runs.tables``, how many tables there are, with every card they name."""
    from . import exercises

    runs: dict[str, list[tuple[float, str, str]]] = {}
    tables = sorted(folder.glob("class-grading-*.md"))
    for path in tables:
        date, card = re.search(r"\d{4}-\d{2}-\d{2}", path.name)[0], ""
        for line in path.read_text().splitlines():
            if heading := _TABLE_HEADING.match(line):
                card = heading[2].removeprefix("NVIDIA ")
            elif (row := _REFERENCE_ROW.match(line)) and row[1] in exercises.ASSIGNMENTS \
                    and row[3] == exercises.get(row[1]).throughput.case.label:
                runs.setdefault(row[1], []).append((float(row[2]), date, card))
    source, everything = f"{_relative(folder)}/class-grading-*.md", [run for seen in runs.values() for run in seen]
    if not everything:
        return {}
    figs = {"class_runs.tables": Figure(len(tables), "", max(d for _, d, _ in everything),
                                        ", ".join(sorted({c for _, _, c in everything})), source)}
    for name, seen in runs.items():
        ratios, date = [r for r, _, _ in seen], max(d for _, d, _ in seen)
        cards = ", ".join(sorted({c for _, _, c in seen}))
        figs |= {f"{name}.judge_low": Figure(min(ratios), "×", date, cards, source),
                 f"{name}.judge_high": Figure(max(ratios), "×", date, cards, source),
                 f"{name}.judge_runs": Figure(len(ratios), "", date, cards, source)}
    return figs


def lesson_runs(folder: Path = REGISTRY.parent) -> dict[str, Figure]:
    """Each figure the lessons printed, over every committed GPU run of them
    (``notebook-outputs-*.txt``): ``<name>.runs_low`` and ``.runs_high``, and ``.runs`` (how many
    files printed it: a run's outputs file may hold a figure twice, from the English and the
    Chinese notebook), dated by the newest run, the cards named. The runs span cards and versions
    of the course's code alike. Prose quotes these where one run's figure moves more between runs
    than the point it makes."""
    seen: dict[str, list[dict]] = {}
    for path in sorted(folder.glob("notebook-outputs-*.txt")):
        for line in path.read_text().splitlines():
            if line.startswith(LINE):
                entry = json.loads(line.removeprefix(LINE))
                seen.setdefault(entry["name"], []).append({**entry, "run": path.name})
    source, figs = f"{_relative(folder)}/notebook-outputs-*.txt", {}
    for name, entries in seen.items():
        values, date = [e["value"] for e in entries], max(e["date"] for e in entries)
        cards, unit = ", ".join(sorted({e["card"].removeprefix("NVIDIA ") for e in entries})), entries[-1]["unit"]
        figs |= {f"{name}.runs_low": Figure(min(values), unit, date, cards, source),
                 f"{name}.runs_high": Figure(max(values), unit, date, cards, source),
                 f"{name}.runs": Figure(len({e["run"] for e in entries}), "", date, cards, source)}
    return figs


def fill(text: str, figs: dict[str, Figure] | None = None, where: str = "") -> str:
    """``text`` with every marked figure's text rewritten from the record."""
    figs = recorded() if figs is None else figs

    def replace(m: re.Match) -> str:
        if m["name"] not in figs:
            raise KeyError(f"{where + ': ' if where else ''}<!--fig:{m['name']}--> names no recorded figure "
                           "(results/gpu/results.json, results/gpu/figures.json or autograder.figures.DERIVED)")
        return _marker(m, figs[m["name"]].text(m["spec"]))
    return MARKER.sub(replace, text)


def blank(text: str) -> str:
    """``text`` with the marked figures' text removed, markers kept: what a translation's digest
    is taken of, so that a new GPU run leaves translations current."""
    return MARKER.sub(lambda m: _marker(m, ""), text)


def _marker(m: re.Match, text: str) -> str:
    spec = f":{m['spec']}" if m["spec"] else ""
    return f"<!--fig:{m['name']}{spec}-->{text}<!--/fig-->"


def rendered(text: str) -> str:
    """``text`` as a reader sees it: markers gone, figures kept."""
    return MARKER.sub(lambda m: m["text"], text)


# A figure in a unit that only a measurement gives; a threshold or goal ("≥ 0.8×", "at least
# 0.75×") is a declaration, not a measurement. A ratio's × touches its number ("4096 × 4096" is a
# shape); 倍 is the Chinese "times" (倍数, "a multiple of", is not a ratio).
FIGURE = re.compile(r"(?P<lead>(?:≥|at least)\s*)?(?<![\w.,^])"
                    r"(?P<figure>\d[\d,]*(?:\.\d+)?(?:\s?(?:GB/s|TB/s|TFLOP/s|µs)|×(?![\w^(…])|\s?倍(?!数)))")

ALLOWED = {
    "4.8 TB/s": "NVIDIA's H200 datasheet: HBM3e bandwidth",
    "989 TFLOP/s": "the H200 datasheet: dense float16 tensor cores",
    "1,979 TFLOP/s": "the H200 datasheet: float16 with 2:4 sparsity",
    "1,000 TFLOP/s": "the H200 datasheet's dense bfloat16 rate, rounded (lesson 8)",
    "67 TFLOP/s": "NVIDIA's float32 FMA rate for the H100 SXM and H200",
    "2 µs": "arithmetic: 8.4 MB at the datasheet's 4.8 TB/s (lesson 4)",
    "28 µs": "arithmetic: 134 MB at the datasheet's 4.8 TB/s (lesson 7)",
    "139 µs": "arithmetic: 4096³ float16 at the datasheet's 989 TFLOP/s (problem set 4)",
    "14 µs": "arithmetic: 67 MB at the datasheet's 4.8 TB/s (problem set 4)",
    "4×": "counted: the naive softmax moves 4× the minimal bytes",
    "4.0×": "the same count, to one decimal (lesson 4)",
    "2.5×": "counted: the RMS norm chain's bytes over one fused kernel's (lesson 1)",
    "1.5×": "counted: the online softmax's 12 bytes per element over 8 (lesson 5)",
    # figures the English gives in words ("16 times"), which the Chinese writes with 倍
    "16×": "arithmetic: a 4 MiB row over an SM's 256 KB register file (lesson 5)",
    "18×": "arithmetic: a 4 MiB row over an SM's 227 KB of shared memory (lesson 5)",
    "500,000×": "order of magnitude: 1.7 ms per interpreted program against an H200 (lesson 6)",
    "100×": "the range quoted for compute-sanitizer's slowdown, 10 to 100 times (lesson 6)",
    "24×": "arithmetic: 1.61 GB of tile loads over 67 MB of inputs (lesson 7)",
    "8×": "arithmetic: bfloat16's rounding, 2^-8, over float16's 2^-11 (lesson 7)",
    "495 TFLOP/s": "NVIDIA's dense TF32 rate for the H100 SXM (lesson 7)",
    "7.4×": "arithmetic: e^2 (lesson 8)",
    "49×": "arithmetic: 26.3 GB over 0.54 GB (lesson 8)",
    "130×": "computed the same on any machine: FP8 errors over float16's with an outlier, rounded (lesson 11)",
    "250×": "the same computation, the other FP8 format (lesson 11)",
}
"""Figures that may be typed, each with the reason: datasheet values and arithmetic."""


def _key(figure: str) -> str:
    return re.sub(r"\s", "", figure).replace("倍", "×")


def unmarked(text: str) -> list[str]:
    """The measured-looking figures of ``text`` outside a marker and not in :data:`ALLOWED`."""
    allowed = {_key(f) for f in ALLOWED}
    return [m["figure"] for m in FIGURE.finditer(MARKER.sub("", text))
            if not m["lead"] and _key(m["figure"]) not in allowed]


def record_figures(prefix: str, values: dict[str, float], unit: str) -> None:
    """Keep a lesson's figures when the course's GPU run records the lessons: with
    ``TRITON_COURSE_NOTEBOOK_OUTPUTS`` set, append ``figure: {json}`` to that file for each value, named
    ``<prefix>.<key>`` (lower case, spaces as ``_``); without it, nothing. Call it on a GPU only."""
    target = settings.NOTEBOOK_OUTPUTS.get()
    if target is None:
        return
    from . import device
    card, today = device.current().name, datetime.date.today().isoformat()
    with open(target, "a") as f:
        for key, value in values.items():
            entry = {"name": f"{prefix}.{key.lower().replace(' ', '_')}", "value": value, "unit": unit,
                     "date": today, "card": card}
            f.write(LINE + json.dumps(entry, ensure_ascii=False) + "\n")


def ingest(outputs: Path, registry: Path = REGISTRY) -> list[str]:
    """Fold the ``figure:`` lines of a GPU run's outputs into ``registry`` (the last of a name
    wins), each with ``outputs`` as its source; the names."""
    table = json.loads(registry.read_text()) if registry.exists() else {}
    names = []
    for line in Path(outputs).read_text().splitlines():
        if line.startswith(LINE):
            entry = json.loads(line.removeprefix(LINE))
            names.append(name := entry.pop("name"))
            table[name] = {**entry, "source": _relative(Path(outputs))}
    registry.write_text(json.dumps(dict(sorted(table.items())), indent=2, ensure_ascii=False) + "\n")
    recorded.cache_clear()
    return names


def _relative(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="fold the figures a GPU run of the lessons recorded into "
                                                 "results/gpu/figures.json")
    parser.add_argument("outputs", type=Path, help="the file the run's lessons wrote their outputs to (settings.NOTEBOOK_OUTPUTS)")
    outputs = parser.parse_args(argv).outputs
    if not outputs.resolve().is_relative_to(ROOT):  # a figure's source must stay with the repository
        print(f"{outputs} is outside the repository: copy it into results/gpu/ (for example "
              f"results/gpu/notebook-outputs-DATE-CARD.txt), commit it, and fold that copy", file=sys.stderr)
        return 2
    names = ingest(outputs, REGISTRY)
    print(f"recorded {len(names)} figures: {', '.join(sorted(set(names)))}\nnow: triton-course sync")
    return 0


if __name__ == "__main__":
    sys.exit(main())
