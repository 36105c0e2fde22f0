"""Benchmark every reference solution against PyTorch on this GPU and record the results.

``python -m autograder.bench --out results/gpu`` measures the copy bandwidth, grades each
reference solution exactly as a student's submission is graded (correctness on the GPU
cases, the throughput verdict, repeated to show the spread), sweeps vector add over sizes,
and writes ``RESULTS.md``, ``results.json`` and the plots.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import platform
import statistics
from pathlib import Path

import torch

from . import device, exercises, plots, sweep, timing
from .check import check

REPEATS = 5
"""Throughput verdicts per exercise: the spread over these is the verdict's noise."""
SWEEP_SIZES = [2**k for k in range(12, 29, 2)]


def environment() -> dict:
    import triton
    props = torch.cuda.get_device_properties(0)
    return {"card": props.name, "sms": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 1), "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "date": datetime.date.today().isoformat()}


def grade_solution(exercise) -> dict:
    fn = getattr(importlib.import_module(exercise.solution), exercise.function)
    visible = check(exercise, fn, measure_throughput=False, verbose=False)
    hidden = check(exercise, fn, cases="hidden", measure_throughput=False, verbose=False)
    verdicts = [check(exercise, fn, cases="visible", verbose=False).throughput for _ in range(REPEATS)]
    ratios = [v.ratio for v in verdicts if v.ratio is not None]
    return {
        "exercise": exercise.name,
        "correct": f"{sum(c.passed for c in visible.cases + hidden.cases)}/{len(visible.cases + hidden.cases)}",
        "failures": [c.message for c in visible.cases + hidden.cases if not c.passed],
        "baseline": exercise.throughput.baseline, "case": exercise.throughput.case.label,
        "threshold": exercise.throughput.threshold,
        "ratios": ratios, "median_ratio": statistics.median(ratios) if ratios else None,
        "unit": exercise.throughput.unit,
        "rate": statistics.median(v.student_rate for v in verdicts if v.student_rate),
        "baseline_rate": statistics.median(v.baseline_rate for v in verdicts if v.baseline_rate),
        "peak_fraction": statistics.median(v.peak_fraction for v in verdicts if v.peak_fraction),
        "verdicts": [v.status for v in verdicts],
        "messages": [v.message for v in verdicts],
    }


def vector_add_sweep(out: Path, ceiling: float) -> dict:
    from solutions.vector_add import add

    def make(n):
        return (torch.randn(n, device="cuda"), torch.randn(n, device="cuda"))

    series = sweep.measure_sweep(add, torch.add, make, SWEEP_SIZES, lambda n: 12 * n,
                                 labels=("Triton add (solutions/vector_add.py)", "torch.add"))
    fig = plots.throughput_vs_size(SWEEP_SIZES, series, ceiling_gbps=ceiling,
                                   title=f"Vector add, float32, {torch.cuda.get_device_name()}")
    fig.savefig(out / "vector_add_throughput.png", dpi=120)
    return {"sizes": SWEEP_SIZES, **series}


def markdown(env: dict, ceiling: float, rows: list[dict], sweep_data: dict) -> str:
    lines = [f"# GPU results: {env['card']}", "",
             f"{env['date']} · {env['card']} ({env['sms']} SMs, {env['memory_gib']} GiB) · "
             f"torch {env['torch']} · triton {env['triton']} · CUDA {env['cuda']} · Python {env['python']}",
             "", f"Measured copy bandwidth (read + write, 1 GiB buffer): **{ceiling:,.0f} GB/s**.", "",
             "Reference solutions graded as submissions; throughput ratio = PyTorch time / solution time "
             f"(medians of alternating rounds), {REPEATS} verdicts each.", "",
             "| exercise | correct | case | threshold | median ratio | ratio range | solution | "
             "PyTorch | of ceiling | verdicts |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        spread = f"{min(r['ratios']):.3f}–{max(r['ratios']):.3f}" if r["ratios"] else "–"
        lines.append(f"| {r['exercise']} | {r['correct']} | {r['case']} | ≥ {r['threshold']:g}× {r['baseline']} | "
                     f"{r['median_ratio']:.3f} | {spread} | {r['rate']:,.0f} {r['unit']} | {r['baseline_rate']:,.0f} {r['unit']} | "
                     f"{r['peak_fraction']:.1%} | {', '.join(r['verdicts'])} |")
    lines += ["", "## Vector add against size (float32)", "", "![vector add throughput](vector_add_throughput.png)", "",
              "| elements | " + " | ".join(k for k in sweep_data if k != "sizes") + " |",
              "|---|" + "---|" * (len(sweep_data) - 1)]
    names = [k for k in sweep_data if k != "sizes"]
    for i, n in enumerate(sweep_data["sizes"]):
        lines.append(f"| 2^{n.bit_length() - 1} | " + " | ".join(f"{sweep_data[k][i]:,.0f}" for k in names) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/gpu"))
    args = parser.parse_args(argv)
    if not device.setup_device().has_gpu:
        raise SystemExit("the benchmark needs a CUDA GPU: kernels here run in Triton's interpreter.")
    args.out.mkdir(parents=True, exist_ok=True)
    env, ceiling = environment(), timing.copy_bandwidth_gbps()
    rows = [grade_solution(ex) for ex in exercises.EXERCISES.values() if ex.throughput is not None]
    sweep_data = vector_add_sweep(args.out, ceiling)
    (args.out / "results.json").write_text(json.dumps(
        {"environment": env, "copy_bandwidth_gbps": ceiling, "exercises": rows, "vector_add_sweep": sweep_data},
        indent=2))
    report = markdown(env, ceiling, rows, sweep_data)
    (args.out / "RESULTS.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
