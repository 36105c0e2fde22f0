"""Benchmark the reference kernels against PyTorch on this GPU and record the results.

``python -m autograder.bench --out results/gpu`` measures the device's ceilings (the copy
bandwidth; the ``torch.matmul`` rate in float16 and bfloat16), runs every sweep of
:mod:`autograder.bench.sweeps` (a reference kernel against its PyTorch counterpart over sizes,
each with its goal), checks each reference solution as a student's self-check does
(:func:`autograder.check.check`: correctness on the GPU cases, then the throughput verdict
``REPEATS`` times to show its spread; in this process, timed by ``do_bench``, not by the judge's
clock, :mod:`autograder.grading.clock`), and writes ``RESULTS.md`` (the goals first),
``results.json`` (everything) and one plot per sweep. Both files are rewritten after each part,
so a run cut short keeps what it measured. ``--only softmax,ps1_broadcast_add`` runs a part:
sweeps by name or by solution module, gradings by exercise. Progress goes to stdout as it
happens, one line per sweep point.

Time on an H200, estimated, not yet measured (each part records its seconds): a function's
median is one or two ``do_bench`` runs of 25 ms warm-up + 100 ms (two when a call is under
``timing.BATCH_MS``), 0.13-0.26 s, so a sweep point of 3 rounds × 2 functions takes 0.8-1.6 s:
34 points, 0.5-1 minute. Compiling comes on top, before the first timing of each kernel: about
1-2 minutes, most of it the 8 configurations that matmul and attention each autotune over
(attention twice: causal is a constexpr). A grading is 7 correctness checks and 5 verdicts of
5 rounds (1.3-2.6 s each), 15-35 s once compiled. About 4-6 minutes in all, the least certain
part being the first compiles of the many case shapes ps4 and ps5 grade.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import itertools
import json
import platform
import shutil
import statistics
import time
import traceback
from pathlib import Path

import torch
from matplotlib.figure import Figure

from .. import device, exercises, plots, timing
from ..check import check
from ..spec import Exercise
from ..sweep import measure_sweep
from .sweeps import MATMUL_DTYPES, SWEEPS, Goal, Sweep, dtype_name, matmul_ceiling_name

REPEATS = 5
"""Throughput verdicts per exercise: the spread over these is the verdict's noise."""


def log(line: str) -> None:
    print(line, flush=True)  # under `| tee`, progress must not wait in a buffer


def environment() -> dict:
    import triton
    props = torch.cuda.get_device_properties(0)
    return {"card": props.name, "sms": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 1), "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "date": datetime.date.today().isoformat()}


def measure_ceilings() -> dict[str, dict]:
    """The device's ceilings by name, each ``{"value": ..., "unit": ...}``."""
    ceilings = {"copy bandwidth": {"value": timing.copy_bandwidth_gbps(), "unit": "GB/s"}}
    for dtype in MATMUL_DTYPES:
        ceilings[matmul_ceiling_name(dtype)] = {"value": timing.matmul_tflops(dtype), "unit": "TFLOP/s"}
    for name, c in ceilings.items():
        log(f"{name} (measured): {c['value']:,.0f} {c['unit']}")
    return ceilings


def select(only: list[str] | None) -> tuple[list[Sweep], list[Exercise]]:
    """The sweeps and the graded exercises that ``--only`` names (all of them for None)."""
    sweeps = list(SWEEPS.values())
    graded = [ex for ex in exercises.EXERCISES.values() if ex.throughput is not None]
    if only is None:
        return sweeps, graded
    known = {s.name for s in sweeps} | {s.group for s in sweeps} | {ex.name for ex in graded}
    unknown = [name for name in only if name not in known]
    if unknown:
        raise ValueError(f"--only {','.join(unknown)}: no such sweep, solution module or graded exercise; "
                         f"choose from {', '.join(sorted(known))}")
    return [s for s in sweeps if s.name in only or s.group in only], [ex for ex in graded if ex.name in only]


# --- sweeps ---

def series_label(sweep: Sweep) -> str:
    return f"Triton {sweep.function} ({sweep.path})"


def _rate(value: float, unit: str) -> str:
    return f"{value:,.1f}" if unit == "TFLOP/s" else f"{value:,.0f}"


def point_line(sweep: Sweep, n: int, ours: float, theirs: float, ceiling: float) -> str:
    """The progress line of one sweep point."""
    return (f"[{sweep.name}] {sweep.label(n)}: {_rate(ours, sweep.unit)} against {_rate(theirs, sweep.unit)} "
            f"{sweep.unit}, {ours / theirs:.3f}× {sweep.baseline}, {ours / ceiling:.1%} of {sweep.ceiling_name}")


def goal_text(sweep: Sweep, goal: Goal) -> str:
    text = f"≥ {goal.ratio:.2f}× {sweep.baseline}"
    if goal.ceiling_fraction is not None:
        text += f", ≥ {goal.ceiling_fraction:.0%} of {sweep.ceiling_name}"
    return text


def sweep_record(sweep: Sweep, ceiling: float, ours: list[float] | None = None,
                 theirs: list[float] | None = None, note: str | None = None) -> dict:
    """What results.json keeps of one sweep. ``ours``/``theirs``: rates at each size, or None
    when it was not measured, with ``note`` saying why."""
    measured = ours is not None
    ratios = [o / t for o, t in zip(ours, theirs)] if measured else None
    fractions = [o / ceiling for o in ours] if measured else None
    goals = []
    for goal in sweep.goals:
        entry = {"size": goal.size, "label": sweep.label(goal.size), "goal": goal_text(sweep, goal),
                 "goal_ratio": goal.ratio, "goal_ceiling_fraction": goal.ceiling_fraction,
                 "ratio": None, "ceiling_fraction": None, "met": None, "verdict": note}
        if measured:
            i = sweep.sizes.index(goal.size)
            short = goal.shortfalls(ratios[i], fractions[i])
            entry.update(ratio=ratios[i], ceiling_fraction=fractions[i], met=not short,
                         verdict="met" if not short else "missed by " + " and by ".join(short))
        goals.append(entry)
    work = {"bytes_moved": [sweep.bytes_moved(n) for n in sweep.sizes]} if sweep.flops is None \
        else {"flops": [sweep.flops(n) for n in sweep.sizes]}
    return {"name": sweep.name, "title": sweep.title, "solution": sweep.path, "function": sweep.function,
            "label": series_label(sweep), "baseline": sweep.baseline,
            "dtype": dtype_name(sweep.dtype), "unit": sweep.unit, "size_name": sweep.size_name,
            "ceiling_name": sweep.ceiling_name, "ceiling": ceiling, "rounds": sweep.rounds,
            "sizes": list(sweep.sizes), "labels": [sweep.label(n) for n in sweep.sizes], **work,
            "ours": ours, "pytorch": theirs, "ratios": ratios, "ceiling_fractions": fractions,
            "goals": goals, "plot": f"{sweep.name}_throughput.png" if measured else None, "note": note}


def plot_sweep(record: dict, card: str) -> Figure:
    """Ours and PyTorch's rate against size, the device's ceiling dashed."""
    return plots.throughput_vs_size(
        record["sizes"], {record["label"]: record["ours"], record["baseline"]: record["pytorch"]},
        title=f"{record['title']}\n{card}", x_unit=record["size_name"], unit=record["unit"],
        ceiling=record["ceiling"], ceiling_name=record["ceiling_name"])


def run_sweep(sweep: Sweep, ceiling: float, out: Path, card: str) -> dict:
    """Time one sweep, printing each point, and save its plot in ``out``; its record.

    A sweep that fails (a kernel that disagrees with PyTorch, out of memory) is recorded with
    the error and the benchmark goes on: one broken kernel must not cost the others' run.
    """
    start = time.perf_counter()
    try:
        fn = sweep.load()
        if fn is None:
            record = sweep_record(sweep, ceiling, note=f"skipped: {sweep.path} does not exist yet")
        else:
            log(f"[{sweep.name}] {sweep.title}: {len(sweep.sizes)} sizes, {sweep.rounds} rounds each")
            seeds = itertools.count()  # each input set its own values
            series = measure_sweep(
                fn, sweep.reference, lambda n: sweep.make_inputs(n, "cuda", next(seeds)), sweep.sizes,
                bytes_moved=sweep.bytes_moved, flops=sweep.flops, labels=(series_label(sweep), sweep.baseline),
                rounds=sweep.rounds, check=sweep.problem,
                progress=lambda n, ours, theirs: log(point_line(sweep, n, ours, theirs, ceiling)))
            record = sweep_record(sweep, ceiling, *series.values())
            plot_sweep(record, card).savefig(out / record["plot"], dpi=120)
    except Exception as error:  # recorded and printed; the run's exit status becomes 1
        traceback.print_exc()
        record = sweep_record(sweep, ceiling, note=f"error: {type(error).__name__}: {error}")
    finally:
        torch.cuda.empty_cache()  # hand the cached blocks of 1 GiB inputs back before the next sweep
    record["seconds"] = round(time.perf_counter() - start, 1)
    if record["note"]:
        log(f"[{sweep.name}] {record['note'].splitlines()[0]}")
    return record


# --- grading ---

def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def grade_solution(exercise: Exercise) -> dict:
    fn = getattr(importlib.import_module(exercise.solution), exercise.function)
    cases = check(exercise, fn, measure_throughput=False, verbose=False).cases
    if exercise.hidden_cases():  # a problem set's; a lesson's kernel has none
        cases += check(exercise, fn, cases="hidden", measure_throughput=False, verbose=False).cases
    verdicts = [check(exercise, fn, cases="visible", verbose=False).throughput for _ in range(REPEATS)]
    ratios = [v.ratio for v in verdicts if v.ratio is not None]
    return {
        "exercise": exercise.name,
        "correct": f"{sum(c.passed for c in cases)}/{len(cases)}",
        "failures": [c.message for c in cases if not c.passed],
        "baseline": exercise.throughput.baseline, "case": exercise.throughput.case.label,
        "threshold": exercise.throughput.threshold,
        "ratios": ratios, "median_ratio": _median(ratios),
        "unit": exercise.throughput.unit,
        "rate": _median(v.student_rate for v in verdicts),
        "baseline_rate": _median(v.baseline_rate for v in verdicts),
        "peak_fraction": _median(v.peak_fraction for v in verdicts),
        "verdicts": [v.status for v in verdicts],
        "messages": [v.message for v in verdicts],
    }


def run_grading(exercise: Exercise) -> dict:
    """:func:`grade_solution`, printing as it goes; an error is recorded as the sweeps' are."""
    log(f"[{exercise.name}] grading the reference: correctness, then {REPEATS} throughput verdicts")
    start = time.perf_counter()
    try:
        row = grade_solution(exercise)
    except Exception as error:  # as in run_sweep
        traceback.print_exc()
        row = {"exercise": exercise.name, "error": f"{type(error).__name__}: {error}"}
        log(f"[{exercise.name}] error: {row['error'].splitlines()[0]}")
    else:
        log(f"[{exercise.name}] {row['correct']} correct; ratios "
            f"{', '.join(f'{r:.3f}' for r in row['ratios']) or 'none'}; {', '.join(row['verdicts'])}")
    row["seconds"] = round(time.perf_counter() - start, 1)
    return row


# --- RESULTS.md ---

def _cell(text: str) -> str:
    """One line of ``text``, safe inside a Markdown table."""
    return text.splitlines()[0].replace("|", "\\|") if text else ""


def _or_dash(value, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def remeasured(r: dict) -> str:
    """`` (re-measured DATE, CARD)`` for a record a later ``--only`` run merged in, else ''."""
    return f" (re-measured {r['run']['date']}, {r['run']['card']})" if "run" in r else ""


def goals_table(records: list[dict]) -> list[str]:
    lines = ["| sweep | at | goal | measured | of ceiling | verdict |", "|---|---|---|---|---|---|"]
    for r in records:
        for g in r["goals"]:
            fraction = _or_dash(g["ceiling_fraction"], ".1%") if g["goal_ceiling_fraction"] is not None else "–"
            verdict = _cell(g["verdict"])
            if g["met"] is False:
                verdict = verdict.replace("missed", "**missed**", 1)
            measured = "–" if g["ratio"] is None else f"{g['ratio']:.3f}×"
            lines.append(f"| {r['name']}{remeasured(r)} | {g['label']} | {g['goal']} | {measured} | {fraction} | {verdict} |")
    return lines


def sweep_section(r: dict) -> list[str]:
    lines = [f"## {r['title']}", "",
             f"`{r['solution']}` `{r['function']}` against `{r['baseline']}`, {r['unit']} "
             + ("from the fewest bytes a call must move" if r["unit"] == "GB/s" else "from the FLOPs a call must do")
             + f"; medians of {r['rounds']} alternating rounds.", ""]
    if "run" in r:
        run = r["run"]
        lines += [f"Re-measured {run['date']} on an {run['card']} (torch {run['torch']}, triton {run['triton']}) by `--only`, "
                  f"against that run's {r['ceiling_name']}: {_rate(r['ceiling'], r['unit'])} {r['unit']}.", ""]
    if r["ours"] is None:
        return lines + [_cell(r["note"]), ""]
    lines += [f"![{r['title']}]({r['plot']})", "",
              f"| {r['size_name']} | {r['label']} | {r['baseline']} | ratio | of {r['ceiling_name']} |",
              "|---|---|---|---|---|"]
    for label, ours, theirs, ratio, fraction in zip(r["labels"], r["ours"], r["pytorch"], r["ratios"],
                                                   r["ceiling_fractions"]):
        lines.append(f"| {label} | {_rate(ours, r['unit'])} | {_rate(theirs, r['unit'])} | {ratio:.3f}× | {fraction:.1%} |")
    return lines + [""]


def grading_table(rows: list[dict]) -> list[str]:
    lines = ["Each reference solution checked as a student's self-check does (in-process, timed by do_bench, not "
             f"by the judge's clock): every correctness case on the GPU, then the throughput verdict {REPEATS} "
             "times; ratio = PyTorch time / solution time (medians of alternating rounds).", "",
             "| exercise | correct | case | threshold | median ratio | ratio range | solution | "
             "PyTorch | of ceiling | verdicts |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['exercise']} | error: {_cell(r['error'])} |" + " |" * 8)
            continue
        spread = f"{min(r['ratios']):.3f}–{max(r['ratios']):.3f}" if r["ratios"] else "–"
        rate = "–" if r["rate"] is None else f"{r['rate']:,.0f} {r['unit']}"
        baseline_rate = "–" if r["baseline_rate"] is None else f"{r['baseline_rate']:,.0f} {r['unit']}"
        lines.append(f"| {r['exercise']}{remeasured(r)} | {r['correct']} | {r['case']} | ≥ {r['threshold']:g}× {r['baseline']} | "
                     f"{_or_dash(r['median_ratio'], '.3f')} | {spread} | {rate} | {baseline_rate} | "
                     f"{_or_dash(r['peak_fraction'], '.1%')} | {', '.join(r['verdicts'])} |")
    return lines + [""]


def markdown(env: dict, ceilings: dict[str, dict], sweeps: list[dict], grading: list[dict],
             only: list[str] | None = None) -> str:
    copy = ceilings["copy bandwidth"]["value"]
    rates = ["`{}` {} {:,.0f} {}".format(*name.rsplit(" ", 1), c["value"], c["unit"])  # `torch.matmul` float16 ...
             for name, c in ceilings.items() if name != "copy bandwidth"]
    lines = [f"# GPU results: {env['card']}", "",
             f"{env['date']} · {env['card']} ({env['sms']} SMs, {env['memory_gib']} GiB) · "
             f"torch {env['torch']} · triton {env['triton']} · CUDA {env['cuda']} · Python {env['python']}", "",
             f"Measured ceilings: copy bandwidth (read + write, 1 GiB buffer) **{copy:,.0f} GB/s**"
             + (f"; matmul at 8192³: {', '.join(rates)}" if rates else "") + ".", ""]
    if only:
        lines += [f"Part of the benchmark only: `python -m autograder.bench --only {','.join(only)}`.", ""]
    if sweeps:
        lines += ["## Goals: reference kernels against PyTorch", "",
                  "Ratio = PyTorch's time / the reference's; of ceiling = the reference's rate over the "
                  "measured ceiling.", "", *goals_table(sweeps), ""]
    if grading:
        lines += ["## Reference solutions graded as submissions", "", *grading_table(grading)]
    for record in sweeps:
        lines += sweep_section(record)
    return "\n".join(lines).rstrip("\n") + "\n"


# --- the command ---

def save(out: Path, env: dict, ceilings: dict, sweeps: list[dict], grading: list[dict],
         only: list[str] | None) -> None:
    """Write results.json and RESULTS.md with everything measured so far."""
    (out / "results.json").write_text(json.dumps(
        {"environment": env, "only": only, "ceilings": ceilings, "sweeps": sweeps, "exercises": grading},
        indent=2))
    (out / "RESULTS.md").write_text(markdown(env, ceilings, sweeps, grading, only))


def merge(into: Path, partial: Path) -> list[str]:
    """Fold a partial run (``--only``, written to ``partial``) into the full one in ``into``: each
    of its sweeps and gradings replaces the one of the same name, keeping the date and versions
    of the run that measured it; plots are copied. Returns the names replaced."""
    base = json.loads((into / "results.json").read_text())
    part = json.loads((partial / "results.json").read_text())
    replaced = []
    for key, name in (("sweeps", "name"), ("exercises", "exercise")):
        index = {r[name]: i for i, r in enumerate(base[key])}
        for record in part[key]:
            record["run"] = part["environment"]
            if record[name] in index:
                base[key][index[record[name]]] = record
            else:
                base[key].append(record)
            replaced.append(record[name])
            if record.get("plot"):
                shutil.copyfile(partial / record["plot"], into / record["plot"])
    save(into, base["environment"], base["ceilings"], base["sweeps"], base["exercises"], base["only"])
    return replaced


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one name")
    return names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/gpu"))
    parser.add_argument("--only", type=_names, metavar="NAME[,NAME]",
                        help="run only these sweeps (by name or solution module) and gradings (by "
                             "exercise); RESULTS.md in --out then holds only them")
    parser.add_argument("--merge", type=Path, metavar="PARTIAL",
                        help="no measuring: fold the results of an --only run, written to PARTIAL, into "
                             "those in --out (no GPU needed)")
    args = parser.parse_args(argv)
    if args.merge:
        print("replaced: " + ", ".join(merge(args.out, args.merge)))
        return 0
    try:
        chosen_sweeps, chosen_exercises = select(args.only)
    except ValueError as error:
        parser.error(str(error))
    if not device.setup_device().has_gpu:
        raise SystemExit("the benchmark needs a CUDA GPU: kernels here run in Triton's interpreter.")
    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    env, ceilings = environment(), measure_ceilings()
    sweeps, grading = [], []
    for s in chosen_sweeps:
        sweeps.append(run_sweep(s, ceilings[s.ceiling_name]["value"], args.out, env["card"]))
        save(args.out, env, ceilings, sweeps, grading, args.only)
    for exercise in chosen_exercises:
        grading.append(run_grading(exercise))
        save(args.out, env, ceilings, sweeps, grading, args.only)
    print(markdown(env, ceilings, sweeps, grading, args.only))  # what the last save wrote
    log(f"benchmark done in {time.perf_counter() - start:.0f} s")
    failed = [r["name"] for r in sweeps if (r["note"] or "").startswith("error")] \
        + [r["exercise"] for r in grading if "error" in r]
    if failed:
        log(f"errors in: {', '.join(failed)} (tracebacks above)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
