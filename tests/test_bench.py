"""The benchmark without a GPU: the sweeps as declared (sizes, bytes and FLOPs, goals), the goals'
verdicts, RESULTS.md, results.json and the plots from synthetic measurements, ``--only``, and
the refusal to time anything where kernels run in the interpreter."""
import dataclasses
import json
import types

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from autograder import exercises, plots  # noqa: E402
from autograder.bench import run, sweeps  # noqa: E402
from autograder.bench.sweeps import SWEEPS, Goal  # noqa: E402
from autograder.device import current  # noqa: E402
from autograder.sweep import measure_sweep  # noqa: E402

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
GiB = 2**30

# name: (solution, function, baseline, dtype, sizes, goals as (size, ratio, fraction of ceiling))
ISSUE = {
    "vector_add": ("autograder.kernels.vector_add", "add", "torch.add", F32, [2**k for k in range(12, 29, 2)],
                   [(2**28, 0.97, 0.95)]),
    "fused_softmax_float32": ("autograder.kernels.fused_softmax", "softmax", "torch.softmax", F32, [1024, 4096, 16384],
                        [(1024, 1.0, None), (4096, 1.0, None), (16384, 1.0, None)]),
    "fused_softmax_bfloat16": ("autograder.kernels.fused_softmax", "softmax", "torch.softmax", BF16, [1024, 4096, 16384],
                         [(1024, 1.0, None), (4096, 1.0, None), (16384, 1.0, None)]),
    "online_softmax": ("solutions.online_softmax", "softmax_online", "torch.softmax", F32,
                       [2**k for k in range(14, 21)], [(2**20, 1.0, None)]),
    "matmul": ("autograder.kernels.matmul", "matmul", "torch.matmul", F16, [1024, 2048, 4096, 8192],
               [(4096, 0.9, None), (8192, 0.9, None)]),
    "tma_matmul_float16": ("autograder.kernels.tma_matmul", "tma_matmul", "torch.matmul", F16,
                           [1024, 2048, 4096, 8192], [(4096, 1.0, None), (8192, 1.0, None)]),
    "tma_matmul_bfloat16": ("autograder.kernels.tma_matmul", "tma_matmul", "torch.matmul", BF16,
                            [1024, 2048, 4096, 8192], [(4096, 1.0, None), (8192, 1.0, None)]),
    "tma_matmul_fp8": ("autograder.kernels.tma_matmul", "fp8_matmul", "torch._scaled_mm", torch.float8_e4m3fn,
                   [1024, 2048, 4096, 8192], [(8192, 1.0, None)]),
    "flash_attention": ("autograder.kernels.flash_attention", "attention", "F.scaled_dot_product_attention", BF16,
                        [512, 1024, 2048, 4096], [(4096, 0.8, None), (4096, 0.95, None)]),
    "flash_attention_causal": ("autograder.kernels.flash_attention", "attention", "F.scaled_dot_product_attention",
                               BF16, [512, 1024, 2048, 4096], [(4096, 0.8, None), (4096, 0.95, None)]),
}

ENV = {"card": "NVIDIA H200", "sms": 132, "memory_gib": 139.8, "torch": "2.11.0", "triton": "3.6.0",
       "cuda": "13.0", "python": "3.12.3", "date": "2026-12-03"}
CEILINGS = {"copy bandwidth": {"value": 4000.0, "unit": "GB/s"},
            "torch.matmul float16": {"value": 700.0, "unit": "TFLOP/s"},
            "torch.matmul bfloat16": {"value": 680.0, "unit": "TFLOP/s"},
            "torch._scaled_mm float8_e4m3fn": {"value": 1300.0, "unit": "TFLOP/s"}}


def swept_as(monkeypatch, sweep: str, **changes) -> "sweeps.Sweep":
    """``SWEEPS[sweep]`` timing a changed copy of its declaration (``solution=``, ...), registered
    under the name ``changed_<exercise>`` for the test."""
    base = SWEEPS[sweep]
    name = f"changed_{base.exercise}"
    monkeypatch.setitem(exercises.EXERCISES, name, dataclasses.replace(base.declared, name=name, **changes))
    return dataclasses.replace(base, exercise=name)


# --- the declarations ---

def test_the_sweeps_are_the_issues_with_their_goals():
    assert list(SWEEPS) == list(ISSUE)  # also the order they run in
    for name, (solution, function, baseline, dtype, sizes, goals) in ISSUE.items():
        s = SWEEPS[name]
        assert (s.solution, s.function, s.baseline, s.dtype) == (solution, function, baseline, dtype), name
        assert list(s.sizes) == sizes, name
        assert [(g.size, g.ratio, g.ceiling_fraction) for g in s.goals] == goals, name


def test_the_units_and_ceilings_follow_from_bytes_or_flops():
    units = {name: (s.unit, s.ceiling_name) for name, s in SWEEPS.items()}
    assert units == {
        "vector_add": ("GB/s", "copy bandwidth"), "fused_softmax_float32": ("GB/s", "copy bandwidth"),
        "fused_softmax_bfloat16": ("GB/s", "copy bandwidth"), "online_softmax": ("GB/s", "copy bandwidth"),
        "matmul": ("TFLOP/s", "torch.matmul float16"), "tma_matmul_float16": ("TFLOP/s", "torch.matmul float16"),
        "tma_matmul_bfloat16": ("TFLOP/s", "torch.matmul bfloat16"),
        "tma_matmul_fp8": ("TFLOP/s", "torch._scaled_mm float8_e4m3fn"),
        "flash_attention": ("TFLOP/s", "torch.matmul bfloat16"),
        "flash_attention_causal": ("TFLOP/s", "torch.matmul bfloat16")}
    # the benchmark measures exactly the matmul rates these ceilings name
    assert sweeps.MATMUL_DTYPES == (F16, BF16, torch.float8_e4m3fn)


def test_bytes_and_flops_at_the_goal_sizes():
    assert SWEEPS["vector_add"].bytes_moved(2**28) == 3 * GiB  # 1 GiB read twice, written once
    assert SWEEPS["fused_softmax_float32"].bytes_moved(16384) == 2 * GiB  # a 1 GiB matrix read and written
    assert SWEEPS["fused_softmax_bfloat16"].bytes_moved(16384) == GiB
    assert SWEEPS["online_softmax"].bytes_moved(2**20) == GiB // 2  # 64×2^20 float32 is 256 MiB
    assert SWEEPS["matmul"].flops(4096) == 2 * 4096**3
    full = 4 * 4 * 32 * 4096**2 * 128  # 4·B·H·S²·D
    assert SWEEPS["flash_attention"].flops(4096) == full == 2**40  # 1.1 TFLOP a call
    assert SWEEPS["flash_attention_causal"].flops(4096) == full // 2


@pytest.mark.parametrize("name", list(SWEEPS))
def test_a_sweep_counts_what_its_declaration_counts_on_its_own_inputs(name):
    s = SWEEPS[name]
    n = s.sizes[0]
    inputs = s.make_inputs(n, "cpu")
    # the operands; an FP8 matmul's one-element scales are float32
    assert all(t.dtype == s.dtype for t in inputs if isinstance(t, torch.Tensor) and t.dim() > 0)
    throughput = s.declared.throughput
    if s.flops is None:  # every input read once, the output written once
        assert s.bytes_moved(n) == throughput.bytes_moved(inputs, s.reference(*inputs))
    else:  # the count needs the inputs' shapes only
        assert s.flops(n) == throughput.flops(inputs, None)


def test_the_compute_bound_sweeps_inputs_have_the_shapes_their_flops_count():
    a, b = SWEEPS["matmul"].make_inputs(1024, "cpu")
    assert a.shape == b.shape == (1024, 1024) and a.dtype == b.dtype == F16
    for name, masked in (("flash_attention", False), ("flash_attention_causal", True)):
        q, k, v, causal, scale = SWEEPS[name].make_inputs(512, "cpu")
        assert q.shape == k.shape == v.shape == (4, 32, 512, 128) and q.dtype == BF16
        assert causal is masked and scale is None  # both sides get these arguments


def test_the_attention_sweeps_ask_both_sides_for_the_same_masking():
    assert SWEEPS["flash_attention"].case(512).causal is False
    assert SWEEPS["flash_attention_causal"].case(512).causal is True
    q, k, v = (torch.randn(1, 2, 8, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    scores = q @ k.transpose(-1, -2) / 4.0  # 1/sqrt(16), SDPA's default scale
    future = torch.ones(8, 8, dtype=torch.bool).triu(1)
    causal = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v
    full = torch.softmax(scores, dim=-1) @ v
    torch.testing.assert_close(SWEEPS["flash_attention_causal"].reference(q, k, v, True, None), causal)
    torch.testing.assert_close(SWEEPS["flash_attention"].reference(q, k, v, False, None), full)
    assert SWEEPS["matmul"].reference is torch.matmul and SWEEPS["vector_add"].reference is torch.add


def test_every_lesson_kernel_timed_against_pytorch_has_a_sweep():
    swept = {(s.solution, s.function) for s in SWEEPS.values()}
    timed = {(ex.solution, ex.function) for ex in exercises.EXERCISES.values()
             if ex.throughput is not None and not ex.points}  # the lessons' kernels, drawn in the lessons
    assert timed and timed <= swept


@pytest.mark.parametrize("name", list(SWEEPS))
def test_a_sweep_loads_its_kernel_or_says_it_is_not_written_yet(name):
    s = SWEEPS[name]
    fn = s.load()
    try:
        __import__(s.solution)
    except ModuleNotFoundError:
        assert fn is None  # matmul and attention, while their lessons are being written
    else:
        assert callable(fn)


def test_load_finds_the_declared_kernel_and_tells_a_missing_module_from_a_broken_one(tmp_path, monkeypatch):
    (tmp_path / "bench_fake_kernel.py").write_text("def attention(q, k, v, causal, scale):\n    return 'mine'\n")
    (tmp_path / "bench_broken_kernel.py").write_text("import bench_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert swept_as(monkeypatch, "flash_attention_causal", solution="bench_fake_kernel").load()(*"qkv", 1, 2) == "mine"
    assert swept_as(monkeypatch, "flash_attention_causal", solution="solutions.no_such_kernel").load() is None
    with pytest.raises(ModuleNotFoundError, match="bench_no_such_dependency"):
        swept_as(monkeypatch, "flash_attention_causal", solution="bench_broken_kernel").load()


def test_a_sweep_declaration_is_checked():
    base = SWEEPS["vector_add"]
    with pytest.raises(ValueError, match="every goal's size must be one of its sizes"):
        dataclasses.replace(base, goals=(Goal(3, ratio=1.0),))
    with pytest.raises(ValueError, match="exactly one of bytes_moved= and flops="):
        dataclasses.replace(base, flops=lambda n: n)
    with pytest.raises(ValueError, match="exactly one of bytes_moved= and flops="):
        dataclasses.replace(base, bytes_moved=None)
    with pytest.raises(ValueError, match="count what vector_add's throughput counts"):
        dataclasses.replace(base, bytes_moved=None, flops=lambda n: n)
    with pytest.raises(ValueError, match="'no_such_kernel' is no exercise with a throughput measure"):
        dataclasses.replace(base, exercise="no_such_kernel")


# --- goals ---

def test_a_goal_says_by_how_much_it_was_missed():
    goal = Goal(2**28, ratio=0.97, ceiling_fraction=0.95)
    assert goal.shortfalls(0.98, 0.96) == []
    assert goal.shortfalls(0.97, 0.95) == []  # exactly on the goal meets it
    assert goal.shortfalls(0.95, 0.96) == ["0.020× (2.1%)"]
    assert goal.shortfalls(0.98, 0.90) == ["5.0 points of the ceiling"]
    assert goal.shortfalls(0.95, 0.90) == ["0.020× (2.1%)", "5.0 points of the ceiling"]
    assert Goal(4096, ratio=1.0).shortfalls(1.01, 0.2) == []  # no ceiling requirement


# --- records, RESULTS.md, plots from synthetic measurements ---

def _record(name, ours, theirs, **kwargs):
    s = SWEEPS[name]
    return run.sweep_record(s, CEILINGS[s.ceiling_name]["value"], ours, theirs, **kwargs)


def _synthetic_records():
    va = SWEEPS["vector_add"]
    ours = [4000.0 * min(1.0, n / 2**24) * 0.96 for n in va.sizes]  # 96% of the copy bandwidth at the top
    return [
        _record("vector_add", ours, [o / 0.99 for o in ours]),  # 0.99×, but 96% of the ceiling
        _record("fused_softmax_float32", [3600.0, 3600.0, 3200.0], [3000.0, 3600.0, 3300.0]),
        _record("matmul", None, None, note="skipped: autograder/kernels/matmul.py does not exist yet"),
        _record("flash_attention", [300.0, 420.0, 500.0, 544.0], [320.0, 450.0, 560.0, 640.0]),
        _record("flash_attention_causal", None, None,
                note="error: AssertionError: at size 512, q|k disagree\nMismatched elements: 9 / 100"),
    ]


GRADED = {"exercise": "ps1_vector_add", "correct": "20/20", "failures": [], "baseline": "torch.add",
          "case": "67108864 float32", "threshold": 0.8, "ratios": [0.98, 0.996, 0.99], "median_ratio": 0.99,
          "unit": "GB/s", "rate": 4250.0, "baseline_rate": 4257.0, "peak_fraction": 1.057,
          "verdicts": ["passed"] * 3, "messages": ["..."] * 3}
UNMEASURED = {**GRADED, "exercise": "ps3_online_softmax", "correct": "16/17", "ratios": [], "median_ratio": None,
              "rate": None, "baseline_rate": None, "peak_fraction": None, "verdicts": ["not measured"] * 3}


def test_a_record_keeps_every_figure_and_judges_each_goal():
    va, sm, mm, fa, fac = _synthetic_records()
    json.dumps([va, sm, mm, fa, fac])  # results.json takes them as they are
    assert va["bytes_moved"][-1] == 3 * GiB and "flops" not in va
    assert fa["flops"] == [SWEEPS["flash_attention"].flops(n) for n in (512, 1024, 2048, 4096)]
    assert va["ratios"] == pytest.approx([0.99] * 9) and va["ceiling_fractions"][-1] == pytest.approx(0.96)
    assert va["plot"] == "vector_add_throughput.png" and mm["plot"] is None
    (goal,) = va["goals"]
    assert goal["met"] and goal["verdict"] == "met" and goal["label"] == "2^28"
    assert [g["met"] for g in sm["goals"]] == [True, True, False]
    assert sm["goals"][2]["verdict"] == "missed by 0.030× (3.0%)"
    assert fa["goals"][0]["verdict"] == "met" and fa["goals"][0]["ratio"] == pytest.approx(0.85)
    assert [g["verdict"] for g in mm["goals"]] == ["skipped: autograder/kernels/matmul.py does not exist yet"] * 2
    assert mm["goals"][0]["met"] is None and mm["ours"] is None


def test_results_md_puts_the_goals_first_then_the_grading_then_each_sweep():
    report = run.markdown(ENV, CEILINGS, _synthetic_records(), [GRADED, UNMEASURED,
                                                                 {"exercise": "ps4_matmul", "error": "KeyError: 'x'"}])
    lines = report.splitlines()
    assert lines[0] == "# GPU results: NVIDIA H200"
    assert ("Measured ceilings: copy bandwidth (read + write, 1 GiB buffer) **4,000 GB/s**; matmul at 8192³: "
            "`torch.matmul` float16 700 TFLOP/s, `torch.matmul` bfloat16 680 TFLOP/s, `torch._scaled_mm` "
            "float8_e4m3fn 1,300 TFLOP/s.") in lines
    headings = [line for line in lines if line.startswith("## ")]
    assert headings == ["## Goals: reference kernels against PyTorch", "## Reference solutions graded as submissions",
                        "## Vector add, float32", "## Fused softmax, 16384 rows, float32", "## Matmul, float16, square",
                        "## FlashAttention forward, bfloat16, non-causal (B=4, H=32, D=128)",
                        "## FlashAttention forward, bfloat16, causal (B=4, H=32, D=128)"]
    goals = lines[lines.index(headings[0]) + 4:lines.index(headings[1]) - 1]
    assert goals == [
        "| sweep | at | goal | measured | of ceiling | verdict |", "|---|---|---|---|---|---|",
        "| vector_add | 2^28 | ≥ 0.97× torch.add, ≥ 95% of copy bandwidth | 0.990× | 96.0% | met |",
        "| fused_softmax_float32 | 16384×1024 | ≥ 1.00× torch.softmax | 1.200× | – | met |",
        "| fused_softmax_float32 | 16384×4096 | ≥ 1.00× torch.softmax | 1.000× | – | met |",
        "| fused_softmax_float32 | 16384×16384 | ≥ 1.00× torch.softmax | 0.970× | – | **missed** by 0.030× (3.0%) |",
        "| matmul | 4096³ | ≥ 0.90× torch.matmul | – | – | skipped: autograder/kernels/matmul.py does not exist yet |",
        "| matmul | 8192³ | ≥ 0.90× torch.matmul | – | – | skipped: autograder/kernels/matmul.py does not exist yet |",
        "| flash_attention | seq 4096 | ≥ 0.80× F.scaled_dot_product_attention | 0.850× | – | met |",
        "| flash_attention | seq 4096 | ≥ 0.95× F.scaled_dot_product_attention | 0.850× | – | **missed** by 0.100× "
        "(10.5%) |",
        "| flash_attention_causal | seq 4096 | ≥ 0.80× F.scaled_dot_product_attention | – | – | "
        "error: AssertionError: at size 512, q\\|k disagree |",
        "| flash_attention_causal | seq 4096 | ≥ 0.95× F.scaled_dot_product_attention | – | – | "
        "error: AssertionError: at size 512, q\\|k disagree |"]
    assert ("| ps1_vector_add | 20/20 | 67108864 float32 | ≥ 0.8× torch.add | 0.990 | 0.980–0.996 | 4,250 GB/s | "
            "4,257 GB/s | 105.7% | passed, passed, passed |") in lines
    assert ("| ps3_online_softmax | 16/17 | 67108864 float32 | ≥ 0.8× torch.add | – | – | – | – | – | "
            "not measured, not measured, not measured |") in lines
    assert "| ps4_matmul | error: KeyError: 'x' | | | | | | | | |" in lines
    assert "Part of the benchmark only" not in report


def test_results_md_tables_each_sweep_with_its_plot():
    lines = run.markdown(ENV, CEILINGS, _synthetic_records(), []).splitlines()
    assert "## Reference solutions graded as submissions" not in lines  # nothing graded
    start = lines.index("## Fused softmax, 16384 rows, float32")
    assert lines[start + 2] == ("`autograder/kernels/fused_softmax.py` `softmax` against `torch.softmax`, GB/s from the fewest "
                                "bytes a call must move; medians of 3 alternating rounds.")
    assert lines[start + 4] == "![Fused softmax, 16384 rows, float32](fused_softmax_float32_throughput.png)"
    assert lines[start + 6:start + 11] == [
        "| columns of 16384 rows | Triton softmax (autograder/kernels/fused_softmax.py) | torch.softmax | ratio | of copy bandwidth |",
        "|---|---|---|---|---|",
        "| 16384×1024 | 3,600 | 3,000 | 1.200× | 90.0% |",
        "| 16384×4096 | 3,600 | 3,600 | 1.000× | 90.0% |",
        "| 16384×16384 | 3,200 | 3,300 | 0.970× | 80.0% |"]
    assert "| seq 4096 | 544.0 | 640.0 | 0.850× | 80.0% |" in lines  # TFLOP/s to a tenth, of the bf16 rate
    matmul = lines.index("## Matmul, float16, square")
    assert lines[matmul + 4] == "skipped: autograder/kernels/matmul.py does not exist yet"
    assert not any(line.startswith("![Matmul") for line in lines)
    causal = lines.index("## FlashAttention forward, bfloat16, causal (B=4, H=32, D=128)")
    assert lines[causal + 4:] == ["error: AssertionError: at size 512, q\\|k disagree"]


def test_results_md_says_when_only_part_ran():
    report = run.markdown(ENV, CEILINGS, [], [GRADED], only=["ps1_vector_add"])
    assert "Part of the benchmark only: `python -m autograder.bench --only ps1_vector_add`." in report
    assert "## Goals" not in report and "| ps1_vector_add | 20/20 |" in report


def test_progress_lines_give_both_rates_the_ratio_and_the_ceiling_fraction():
    line = run.point_line(SWEEPS["fused_softmax_bfloat16"], 4096, 3500.0, 2800.0, 4000.0)
    assert line == ("[fused_softmax_bfloat16] 16384×4096: 3,500 against 2,800 GB/s, 1.250× torch.softmax, "
                    "87.5% of copy bandwidth")
    line = run.point_line(SWEEPS["matmul"], 8192, 630.0, 700.0, 700.0)
    assert line == "[matmul] 8192³: 630.0 against 700.0 TFLOP/s, 0.900× torch.matmul, 90.0% of torch.matmul float16"


def _dashed(ax):
    return [line for line in ax.get_lines() if line.get_linestyle() == "--"]


def test_a_sweeps_plot_draws_both_rates_and_the_measured_ceiling(tmp_path):
    va, _, _, fa, _ = _synthetic_records()
    ax = run.plot_sweep(fa, "NVIDIA H200").axes[0]
    solid = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
    assert [line.get_label() for line in solid] == ["Triton attention (autograder/kernels/flash_attention.py)",
                                                    "F.scaled_dot_product_attention"]
    assert list(solid[0].get_xdata()) == [512, 1024, 2048, 4096] and list(solid[1].get_ydata())[-1] == 640.0
    (ceiling,) = _dashed(ax)
    assert set(ceiling.get_ydata()) == {680.0}
    assert ceiling.get_label() == "torch.matmul bfloat16 (measured): 680 TFLOP/s"
    assert ax.get_ylabel() == "TFLOP/s" and ax.get_xlabel() == "size (sequence length, log2 scale)"
    assert ax.get_title() == "FlashAttention forward, bfloat16, non-causal (B=4, H=32, D=128)\nNVIDIA H200"
    fig = run.plot_sweep(va, "NVIDIA H200")
    (ceiling,) = _dashed(fig.axes[0])
    assert ceiling.get_label() == "copy bandwidth (measured): 4,000 GB/s" and fig.axes[0].get_ylabel() == "GB/s"
    fig.savefig(tmp_path / va["plot"])
    assert (tmp_path / va["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_throughput_vs_size_takes_one_ceiling_and_leaves_room_for_the_legend():
    sizes, series = [2**10, 2**12], {"ours": [600.0, 650.0]}
    with pytest.raises(ValueError, match="not both"):
        plots.throughput_vs_size(sizes, series, ceiling_gbps=4000.0, ceiling=4000.0)
    with pytest.raises(ValueError, match="not both"):
        plots.throughput_vs_size(sizes, series, ceiling_gbps=700.0, unit="TFLOP/s")
    ax = plots.throughput_vs_size(sizes, series, unit="TFLOP/s", ceiling=700.0, ceiling_name="peak").axes[0]
    assert ax.get_ylim() == pytest.approx((0, 1.35 * 700.0))
    assert _dashed(ax)[0].get_label() == "peak (measured): 700 TFLOP/s"


# --- choosing parts, and the CPU ---

def test_only_selects_sweeps_by_name_or_module_and_gradings_by_exercise():
    sweeps, graded = run.select(None)
    assert sweeps == list(SWEEPS.values())
    assert [ex.name for ex in graded] == [ex.name for ex in exercises.EXERCISES.values() if ex.throughput]
    sweeps, graded = run.select(["fused_softmax"])  # one name: the module's sweeps and the declaration's grading
    assert [s.name for s in sweeps] == ["fused_softmax_float32", "fused_softmax_bfloat16"]
    assert [ex.name for ex in graded] == ["fused_softmax"]
    sweeps, graded = run.select(["ps1_broadcast_add", "flash_attention_causal"])
    assert [s.name for s in sweeps] == ["flash_attention_causal"] and [ex.name for ex in graded] == ["ps1_broadcast_add"]
    with pytest.raises(ValueError, match="--only sofmax: no such sweep.*choose from .*fused_softmax_bfloat16"):
        run.select(["fused_softmax", "sofmax"])


@pytest.mark.parametrize("only", ["sofmax", " , "])
def test_a_bad_only_is_refused_before_anything_runs(only, capsys):
    with pytest.raises(SystemExit) as exit_:
        run.main(["--only", only])
    assert exit_.value.code == 2
    assert "--only" in capsys.readouterr().err


@pytest.mark.skipif(current().has_gpu, reason="checks the refusal where kernels run in the interpreter")
def test_the_benchmark_refuses_the_cpu_and_writes_nothing(tmp_path):
    with pytest.raises(SystemExit, match="the benchmark needs a CUDA GPU"):
        run.main(["--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(current().has_gpu, reason="checks the refusal where kernels run in the interpreter")
def test_measure_sweep_refuses_a_registered_sweep_without_a_gpu(tmp_path):
    s = SWEEPS["vector_add"]
    made = []
    with pytest.raises(RuntimeError, match="measure_sweep times kernels on a GPU.*interpreter"):
        measure_sweep(s.load(), s.reference, made.append, s.sizes, bytes_moved=s.bytes_moved)
    assert made == []  # refused before making any input
    record = run.run_sweep(s, 4000.0, tmp_path, "CPU")  # what the benchmark would record
    assert record["note"].startswith("error: RuntimeError: measure_sweep times kernels on a GPU")
    assert record["ours"] is None and list(tmp_path.iterdir()) == []


# --- the whole command, its measurements faked ---

@pytest.fixture
def fake_gpu(monkeypatch):
    """main() as on a GPU, with made-up measurements; the calls to measure_sweep are recorded."""
    calls = []

    def fake_measure_sweep(fn, reference, make_inputs, sizes, bytes_moved=None, labels=("Triton", "PyTorch"),
                           rounds=3, flops=None, atol=None, rtol=None, check=None, progress=None):
        calls.append({"fn": fn, "reference": reference, "sizes": sizes, "labels": labels, "check": check})
        if len(calls) == 2:  # the second sweep's kernel disagrees with PyTorch
            raise AssertionError("at size 1024, Triton softmax disagrees with torch.softmax")
        ours = [3000.0 + i for i in range(len(sizes))]
        theirs = [2900.0] * len(sizes)
        for n, o, t in zip(sizes, ours, theirs):
            progress(n, o, t)
        return {labels[0]: ours, labels[1]: theirs}

    monkeypatch.setattr(run.device, "setup_device",
                        lambda verbose=True: types.SimpleNamespace(has_gpu=True))
    monkeypatch.setattr(run, "environment", lambda: ENV)
    monkeypatch.setattr(run.timing, "copy_bandwidth_gbps", lambda: 4000.0)
    monkeypatch.setattr(run.timing, "matmul_tflops", lambda dtype: {F16: 700.0, BF16: 680.0, torch.float8_e4m3fn: 1300.0}[dtype])
    monkeypatch.setattr(run, "measure_sweep", fake_measure_sweep)
    monkeypatch.setitem(SWEEPS, "missing_kernel", dataclasses.replace(
        swept_as(monkeypatch, "matmul", solution="solutions.no_such_kernel"), name="missing_kernel"))
    return calls


def test_main_runs_the_chosen_sweeps_printing_each_point_and_saving_as_it_goes(fake_gpu, tmp_path, capsys):
    from autograder.kernels.fused_softmax import softmax

    assert run.main(["--out", str(tmp_path), "--only", "fused_softmax_float32,fused_softmax_bfloat16,missing_kernel"]) == 1  # an error: exit 1
    out = capsys.readouterr().out
    assert [c["fn"] for c in fake_gpu] == [softmax, softmax] and fake_gpu[0]["sizes"] == (1024, 4096, 16384)
    assert fake_gpu[0]["labels"] == ("Triton softmax (autograder/kernels/fused_softmax.py)", "torch.softmax")
    first, sweep = fake_gpu[0], SWEEPS["fused_softmax_float32"]  # judged as a submission is, against float64
    assert first["check"] == sweep.problem and first["reference"] is sweep.reference
    inputs = sweep.make_inputs(1024, "cpu")
    assert first["check"](1024, inputs, torch.softmax(inputs[0], dim=-1)) is None
    assert "16777216 of 16777216 elements differ" in first["check"](1024, inputs, inputs[0])
    progress = [line for line in out.splitlines() if line.startswith("[")]
    assert progress == [
        "[fused_softmax_float32] Fused softmax, 16384 rows, float32: 3 sizes, 3 rounds each",
        "[fused_softmax_float32] 16384×1024: 3,000 against 2,900 GB/s, 1.034× torch.softmax, 75.0% of copy bandwidth",
        "[fused_softmax_float32] 16384×4096: 3,001 against 2,900 GB/s, 1.035× torch.softmax, 75.0% of copy bandwidth",
        "[fused_softmax_float32] 16384×16384: 3,002 against 2,900 GB/s, 1.035× torch.softmax, 75.0% of copy bandwidth",
        "[fused_softmax_bfloat16] Fused softmax, 16384 rows, bfloat16: 3 sizes, 3 rounds each",
        "[fused_softmax_bfloat16] error: AssertionError: at size 1024, Triton softmax disagrees with torch.softmax",
        "[missing_kernel] skipped: solutions/no_such_kernel.py does not exist yet"]
    assert "copy bandwidth (measured): 4,000 GB/s" in out and "torch.matmul bfloat16 (measured): 680 TFLOP/s" in out
    assert "torch._scaled_mm float8_e4m3fn (measured): 1,300 TFLOP/s" in out
    assert "errors in: fused_softmax_bfloat16" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["RESULTS.md", "fused_softmax_float32_throughput.png",
                                                          "results.json"]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["only"] == ["fused_softmax_float32", "fused_softmax_bfloat16", "missing_kernel"] and saved["exercises"] == []
    assert saved["ceilings"]["torch.matmul float16"] == {"value": 700.0, "unit": "TFLOP/s"}
    assert [r["name"] for r in saved["sweeps"]] == ["fused_softmax_float32", "fused_softmax_bfloat16", "missing_kernel"]
    assert saved["sweeps"][0]["ours"] == [3000.0, 3001.0, 3002.0] and saved["sweeps"][0]["seconds"] >= 0
    report = (tmp_path / "RESULTS.md").read_text()
    assert "| fused_softmax_float32 | 16384×16384 | ≥ 1.00× torch.softmax | 1.035× | – | met |" in report
    assert "| fused_softmax_bfloat16 | 16384×1024 | ≥ 1.00× torch.softmax | – | – | error: AssertionError" in report
    assert "--only fused_softmax_float32,fused_softmax_bfloat16,missing_kernel" in report


def test_main_grades_a_chosen_exercise_and_records_a_grading_that_fails(fake_gpu, tmp_path, monkeypatch, capsys):
    def grade(exercise):
        if exercise.name == "ps2_softmax_backward":
            raise KeyError("no cases")
        return {**GRADED, "exercise": exercise.name}

    monkeypatch.setattr(run, "grade_solution", grade)
    assert run.main(["--out", str(tmp_path), "--only", "ps1_broadcast_add,ps2_softmax_backward"]) == 1
    out = capsys.readouterr().out
    assert "[ps1_broadcast_add] 20/20 correct; ratios 0.980, 0.996, 0.990; passed, passed, passed" in out
    assert "[ps2_softmax_backward] error: KeyError: 'no cases'" in out
    assert fake_gpu == []  # no sweep was chosen
    saved = json.loads((tmp_path / "results.json").read_text())
    assert [r["exercise"] for r in saved["exercises"]] == ["ps1_broadcast_add", "ps2_softmax_backward"]
    assert saved["exercises"][1]["error"] == "KeyError: 'no cases'"
    assert "| ps2_softmax_backward | error: KeyError: 'no cases' |" in (tmp_path / "RESULTS.md").read_text()


def test_merge_folds_a_partial_run_into_the_full_one(tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    full.mkdir(), part.mkdir()
    va, sm, mm, fa, fac = _synthetic_records()
    run.save(full, ENV, CEILINGS, [va, sm, fa], [GRADED], None)
    new_fa = _record("flash_attention", [310.0, 430.0, 520.0, 600.0], [320.0, 450.0, 560.0, 640.0])
    (part / new_fa["plot"]).write_bytes(b"png")
    run.save(part, {**ENV, "date": "2026-12-24"}, CEILINGS, [new_fa], [UNMEASURED], ["flash_attention"])
    assert run.main(["--out", str(full), "--merge", str(part)]) == 0
    merged = json.loads((full / "results.json").read_text())
    assert [r["name"] for r in merged["sweeps"]] == ["vector_add", "fused_softmax_float32", "flash_attention"]
    assert merged["sweeps"][2]["ours"][-1] == 600.0 and merged["sweeps"][2]["run"]["date"] == "2026-12-24"
    assert "run" not in merged["sweeps"][0] and merged["environment"] == ENV and merged["only"] is None
    assert [r["exercise"] for r in merged["exercises"]] == ["ps1_vector_add", "ps3_online_softmax"]
    assert (full / new_fa["plot"]).read_bytes() == b"png"
    report = (full / "RESULTS.md").read_text()
    # the goals' rows name the card and date of a re-measured sweep, as its section does
    assert ("| flash_attention (re-measured 2026-12-24, NVIDIA H200) | seq 4096 | ≥ 0.80× F.scaled_dot_product_attention "
            "| 0.938× | – | met |") in report
    assert "| vector_add | 2^28 |" in report
    assert "Re-measured 2026-12-24 on an NVIDIA H200 (torch" in report  # the card of each run
    assert "| ps3_online_softmax (re-measured 2026-12-24, NVIDIA H200) | 16/17 |" in report
    assert "| ps1_vector_add | 20/20 |" in report
