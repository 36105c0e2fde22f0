"""PS6 throughput noise: in-process (self-check) and the judge's clock, round by round."""
import contextlib
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton.testing

ROOT = Path.cwd()
sys.path.insert(0, str(ROOT))
from autograder import exercises, timing  # noqa: E402
from autograder.grading import clock, ipc, judge  # noqa: E402

T0 = time.monotonic()
LIMIT = float(os.environ.get("DIAG_LIMIT", 540))
name = sys.argv[1] if len(sys.argv) > 1 else "ps6_layer_norm"
parts = sys.argv[2] if len(sys.argv) > 2 else "AB"


def left():
    return LIMIT - (time.monotonic() - T0)


def p(*a):
    print(f"[{time.monotonic() - T0:6.1f}s]", *a, flush=True)


ex = exercises.get(name)
fn = getattr(importlib.import_module(ex.solution), ex.function)
spec = ex.throughput
p(name, torch.cuda.get_device_name(), torch.__version__)

if "A" in parts:
    sets = [ex.make_inputs(spec.case, torch.Generator().manual_seed(k), "cuda") for k in range(3)]
    cand = timing.rotating(lambda *i: ex.call(fn, i), sets)
    base = timing.rotating(lambda *i: ex.call(ex.reference, i), sets)
    for _ in range(3):
        cand(), base()
    torch.cuda.synchronize()
    for label, f in (("solution", cand), ("reference", base)):
        t = time.perf_counter()
        for _ in range(20):
            f()
        enq = (time.perf_counter() - t) / 20
        torch.cuda.synchronize()
        total = (time.perf_counter() - t) / 20
        ts = sorted(triton.testing.do_bench(lambda: (f(), torch.cuda.synchronize()), warmup=25, rep=300,
                                             return_mode="all"))
        q = lambda x: ts[int(x * (len(ts) - 1))]
        p(f"A {label}: enqueue {enq*1e3:.3f} ms/call, wall {total*1e3:.3f} ms/call; do_bench n={len(ts)} "
          f"min {q(0):.3f} p10 {q(.1):.3f} p50 {q(.5):.3f} p90 {q(.9):.3f} max {q(1):.3f}")
    for pair, (x, y) in (("sol/ref", (cand, base)), ("ref/ref", (base, base))):
        for verdict in range(4):
            ours, theirs = [], []
            for _ in range(5):
                ours.append(timing.median_ms(x))
                theirs.append(timing.median_ms(y))
            p(f"A {pair} verdict {verdict}: ratio {statistics.median(theirs)/statistics.median(ours):.3f} "
              f"ours {[round(o, 3) for o in ours]} theirs {[round(o, 3) for o in theirs]}")
    del sets, cand, base
    torch.cuda.empty_cache()

if "C" in parts:  # the judge's checksum reads: their rate
    from autograder.grading.clock import _launch_sums
    for n, dt in ((1 << 26, torch.float16), (1 << 28, torch.float16), (1 << 26, torch.float32)):
        t = torch.randn(n, device="cuda").to(dt)
        ms = triton.testing.do_bench(lambda: _launch_sums(t, 12345), warmup=25, rep=200, return_mode="median")
        cp = triton.testing.do_bench(lambda: t.sum(dtype=torch.float32), warmup=25, rep=200, return_mode="median")
        p(f"C sums of {n} {dt}: {ms:.3f} ms = {t.numel()*t.element_size()/ms/1e6:.0f} GB/s; "
          f"torch.sum {cp:.3f} ms = {t.numel()*t.element_size()/cp/1e6:.0f} GB/s")
        del t
    torch.cuda.empty_cache()

if "D" in parts:  # each graded reference at its timed case: CPU time to issue a call against its wall time
    for ex2 in exercises.EXERCISES.values():
        if ex2.throughput is None or left() < 20:
            continue
        try:
            fn2 = getattr(importlib.import_module(ex2.solution), ex2.function)
            inputs = ex2.make_inputs(ex2.throughput.case, torch.Generator().manual_seed(0), "cuda")
            row = []
            for label, f in (("solution", lambda: ex2.call(fn2, inputs)), ("pytorch", lambda: ex2.call(ex2.reference, inputs))):
                for _ in range(3):
                    f()
                torch.cuda.synchronize()
                k = 10
                t = time.perf_counter()
                for _ in range(k):
                    f()
                enq = (time.perf_counter() - t) / k
                torch.cuda.synchronize()
                wall = (time.perf_counter() - t) / k
                gpu = timing.median_ms(f)
                row.append(f"{label} issue {enq*1e3:.3f} wall {wall*1e3:.3f} do_bench {gpu:.3f} ms")
            p(f"D {ex2.name} {ex2.throughput.case.label}: " + "; ".join(row))
            del inputs
            torch.cuda.empty_cache()
        except Exception as e:
            p(f"D {ex2.name}: {type(e).__name__}: {e}")

if "B" in parts:
    events, opens = [], []
    orig_timed, orig_over, orig_mapped = clock.Baseline._timed, clock.Baseline._overhead, ipc.mapped

    def timed(self, side, batch, trusted):
        s, prob = orig_timed(self, side, batch, trusted)
        events.append(("ref" if side is self.reference else "stu", round(s * 1e3, 3), opens[-1] if opens else None))
        return s, prob

    def overhead(self):
        s = orig_over(self)
        events.append(("ovh", round(s * 1e3, 3), opens[-1] if opens else None))
        return s

    @contextlib.contextmanager
    def mapped(handles):
        t = time.perf_counter()
        with orig_mapped(handles) as tensor:
            opens.append((len(set(handles)), round((time.perf_counter() - t) * 1e3, 3)))
            yield tensor

    clock.Baseline._timed, clock.Baseline._overhead, ipc.mapped = timed, overhead, mapped

    def stamped(owner, attr):
        orig = getattr(owner, attr)

        def wrapper(*a, **k):
            t = time.monotonic()
            try:
                return orig(*a, **k)
            finally:
                p(f"   {attr} took {time.monotonic() - t:.1f}s")
        setattr(owner, attr, wrapper)
    for owner, attr in ((judge.Runner, "__init__"), (judge, "run_cases"), (clock.Baseline, "__init__"),
                        (clock.Baseline, "race"), (clock.Baseline, "_calibrate"), (clock, "Batch")):
        stamped(owner, attr)
    folder = Path(tempfile.mkdtemp())
    shutil.copy(ROOT / "source" / name / f"{name}.ipynb", folder)
    os.chdir(folder)
    os.environ[judge.ISOLATE_VAR] = "1"
    g = 0
    while left() > 90 and g < int(os.environ.get("DIAG_GRADINGS", 4)):
        events.clear(), opens.clear()
        t = time.monotonic()
        r = judge.grade_notebook(ex, cases="visible", measure_throughput=True)
        p(f"B grading {g} ({time.monotonic()-t:.0f}s) correct={r.correct}: {r.throughput.message}")
        for e in events:
            print("   ", e)
        stu = [e[1] for e in events if e[0] == "stu"]
        ref = [e[1] for e in events if e[0] == "ref"]
        ovh = [e[1] for e in events if e[0] == "ovh"]
        p(f"B summary: stu {stu} ref {ref} ovh {ovh}")
        g += 1
p("done")
