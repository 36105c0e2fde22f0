"""The grading engine against deliberately wrong, cheating and hanging submissions."""
import dataclasses
import signal
import subprocess
import sys
import time
import warnings

import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from autograder import check, grade, printed
from autograder.check import GradingFailure
from autograder.assignments.ps1_broadcast_add import EXERCISE as PS1
from autograder.lesson_kernels.vector_add import EXERCISE as VECTOR_ADD
from autograder.kernels.vector_add import add, add_kernel

from conftest import DEVICE
from kit import copy_unmasked_store

DEV = DEVICE.device


def _launch(x, y, out, block=1024):
    """The reference kernel, writing x + y into any ``out`` at least as large as x."""
    add_kernel[(triton.cdiv(x.numel(), block),)](x, y, out, x.numel(), BLOCK_SIZE=block)
    return out


@triton.jit
def _unmasked_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))


def add_unmasked(x, y):
    out = torch.empty_like(x)
    _unmasked_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK_SIZE=1024)
    return out


def failures(result):
    return [c for c in result.cases if not c.passed]


# lesson 2's vector add, graded like a problem set: the engine's tests below use its 1-D cases
GRADED_ADD = dataclasses.replace(VECTOR_ADD, points={"correctness": 3, "hidden": 3, "throughput": 2})


def test_reference_passes_every_case():
    result = check(VECTOR_ADD, add, verbose=False)
    assert result.correct, result.summary()
    assert len(result.cases) == len(VECTOR_ADD.cases("visible", DEV))


@pytest.mark.parametrize("make", [torch.empty_like, torch.zeros_like, torch.ones_like, lambda x: x.new_ones(x.shape),
                                  lambda x: torch.ones(x.shape, dtype=x.dtype, device=x.device),
                                  lambda x: torch.full_like(x, 7.0)],
                         ids=["empty_like", "zeros_like", "ones_like", "new_ones", "ones", "full_like"])
def test_a_wrapper_may_allocate_its_output_any_way_that_computes_nothing(make):
    result = check(VECTOR_ADD, lambda x, y: _launch(x, y, make(x)), measure_throughput=False, verbose=False)
    assert result.correct, result.summary()


cpu_only = pytest.mark.skipif(DEVICE.has_gpu, reason="an unmasked kernel on a GPU writes past its "
                              "buffer and can poison the CUDA context for every later test")


@cpu_only
def test_missing_mask_fails_ragged_sizes_with_a_clear_message():
    result = check(VECTOR_ADD, add_unmasked, measure_throughput=False, verbose=False)
    failed = failures(result)
    assert {c.label for c in failed} == {c.label for c in VECTOR_ADD.cases("visible", DEV) if c.shape[0] % 1024}
    if DEVICE.interpreted:
        assert all("out of bounds" in c.message and "mask" in c.message for c in failed)


@triton.jit
def _store_unmasked(out_ptr, offsets, values):  # a helper that a kernel calls: one more interpreter wrapper
    tl.store(out_ptr + offsets, values)


@triton.jit
def _unmasked_through_a_helper(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    _store_unmasked(out_ptr, offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask))


@pytest.mark.skipif(not DEVICE.interpreted, reason="the interpreter's bounds check")
def test_a_stray_store_in_a_helper_function_is_named_like_one_in_the_kernel():
    def add_through_a_helper(x, y):
        out = torch.empty_like(x)
        _unmasked_through_a_helper[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK_SIZE=1024)
        return out
    failed = failures(check(VECTOR_ADD, add_through_a_helper, measure_throughput=False, verbose=False))
    assert failed and all(c.message.startswith("your kernel accessed memory out of bounds: out-of-bounds store")
                          and "InterpreterError" not in c.message for c in failed), failed[0].message
    assert failed[0].message.splitlines()[-1].strip().startswith("in _store_unmasked, line "), failed[0].message


@torch.library.custom_op("course_test::clone", mutates_args=())
def _added_in_an_op_of_ones_own(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """PyTorch's add behind an op named like one a wrapper may call (aten::clone)."""
    return x + y


@pytest.mark.parametrize("cheat, phrase", [
    (lambda x, y: x + y, "computed with PyTorch (aten.add.Tensor)"),
    (lambda x, y: torch.add(x, y), "computed with PyTorch"),
    (lambda x, y: _launch(x, y, torch.empty_like(x)) * 1, "aten.mul"),
    (lambda x, y: torch.empty_like(x), "without launching a Triton kernel"),
    (torch.compile(lambda x, y: x + y, backend="eager"), "computed with PyTorch"),  # compiled: still seen
    (lambda x, y: (_launch(x, y, torch.empty_like(x)), _added_in_an_op_of_ones_own(x, y))[1],
     "computed with PyTorch (course_test.clone.default)"),
])
def test_pytorch_shortcuts_and_missing_launches_fail(cheat, phrase):
    result = check(VECTOR_ADD, cheat, measure_throughput=False, verbose=False)
    assert not result.correct
    assert all(phrase in c.message for c in result.cases), result.summary()


@triton.jit
def _overflowing(x_ptr, out_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.exp(x) + (x - x) / (x - x))


@pytest.mark.skipif(not DEVICE.interpreted, reason="the interpreter computes with NumPy")
def test_an_interpreted_kernel_overflows_and_divides_by_zero_silently_as_on_a_gpu():
    x, out = torch.full((8,), 1000.0), torch.empty(8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's RuntimeWarning, once a case, above every verdict
        _overflowing[(1,)](x, out, BLOCK=8)
    assert torch.isnan(out).all()


@triton.jit
def _endless(out_ptr, n):
    i = 0
    while i < n:
        i = i * 1
    tl.store(out_ptr, i)


@pytest.mark.skipif(not DEVICE.interpreted, reason="an interpreted launch")
def test_an_interrupted_launch_says_which_kernel_it_stopped_in():
    previous = signal.signal(signal.SIGALRM, signal.default_int_handler)  # Kernel > Interrupt, in 0.5 s
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(KeyboardInterrupt) as stop:
            _endless[(1,)](torch.zeros(1, dtype=torch.int32), 5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    said = str(stop.value).splitlines()
    assert said[0].startswith("interrupted inside `_endless`, in Triton's interpreter") and "_endless, line" in said[1]


def test_a_library_function_replaced_fails_every_case(monkeypatch):
    monkeypatch.setattr(torch.Tensor, "detach", lambda t: t)
    result = check(VECTOR_ADD, lambda x, y: _launch(x, y, torch.empty_like(x)), measure_throughput=False,
                   verbose=False)
    assert all(c.message.startswith("`add` replaced torch.Tensor.detach.") for c in result.cases), result.summary()


@pytest.mark.skipif(DEV != "cpu", reason="numpy takes only host memory through DLPack")
def test_data_taken_out_through_dlpack_is_noted():
    import numpy as np

    def add_in_numpy(x, y):
        _launch(x, y, torch.empty_like(x))
        return torch.from_numpy(np.from_dlpack(x) + np.from_dlpack(y))
    result = check(VECTOR_ADD, add_in_numpy, measure_throughput=False, verbose=False)
    assert not result.correct
    assert all("took data out of PyTorch" in c.message and "Tensor.__dlpack__()" in c.message for c in result.cases)


def test_arithmetic_on_values_read_one_at_a_time_is_noted():
    def add_on_the_host(x, y):
        out = _launch(x, y, torch.empty_like(x)).view(-1)
        for i in range(min(out.numel(), 65)):
            out[i] = float(x.view(-1)[i]) + float(y.view(-1)[i])
        return out.view(x.shape)
    result = check(VECTOR_ADD, add_on_the_host, measure_throughput=False, verbose=False)
    sizes = [case.shape[0] for case in VECTOR_ADD.visible_cases[DEV]]
    assert [c.passed for c in result.cases] == [n * 2 <= 64 for n in sizes], result.summary()
    assert all("more than 64 values read one at a time" in c.message for c in failures(result))


def test_the_rules_cost_no_dynamo_import():
    """PyTorch wraps a dispatch mode's handler to keep Dynamo out unless the mode opts out; the
    wrapper imports torch._dynamo (about a second) on the mode's first op, in every grading runner."""
    code = ("import sys, torch\nfrom autograder.guards import watch\nx = torch.ones(4)\n"
            "with watch() as record:\n    x + 1\nassert record.torch_ops, record\n"
            "print('torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["False"], done.stderr


def test_wrong_output_is_named():
    cases = {
        "dtype": lambda x, y: _launch(x, y, torch.empty_like(x, dtype=torch.float64)),
        "shape": lambda x, y: _launch(x, y, torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)),
        "torch.Tensor": lambda x, y: (_launch(x, y, torch.empty_like(x)),),
    }
    for word, fn in cases.items():
        result = check(VECTOR_ADD, fn, measure_throughput=False, verbose=False)
        assert all(word in c.message for c in result.cases), (word, result.summary())


def test_a_tensor_subclass_with_rigged_comparisons_fails():
    class AlwaysEqual(torch.Tensor):
        def __eq__(self, other):
            return True

    result = check(VECTOR_ADD, lambda x, y: _launch(x, y, torch.empty_like(x)).as_subclass(AlwaysEqual),
                   verbose=False)
    assert all("returned an object of class AlwaysEqual: return a plain torch.Tensor." in c.message
               for c in result.cases), result.summary()


def test_wrong_values_get_a_mismatch_table():
    def off_by_one_element(x, y):
        out = _launch(x, y, torch.empty_like(x))
        out.view(-1)[-1:].fill_(float("nan"))  # fill_ is data movement, so only the values fail
        return out

    result = check(VECTOR_ADD, off_by_one_element, measure_throughput=False, verbose=False)
    first = failures(result)[0]
    assert "1 of 1 elements differ" in first.message
    assert "1 NaN and 0 Inf where the reference has none" in first.message
    assert "yours" in first.message and "expected" in first.message


@triton.jit
def _square_root_of_a_negative(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.sqrt(-1.0 - x * x), mask=mask)


def test_elements_never_written_are_told_apart_from_a_nan_the_kernel_computed():
    def grid_too_small(x, y):  # the last, partial block is never launched
        out = torch.empty_like(x)
        add_kernel[(x.numel() // 1024,)](x, y, out, x.numel(), BLOCK_SIZE=1024)
        return out

    def computes_a_nan(x, y):
        out = torch.empty_like(x)
        _square_root_of_a_negative[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK_SIZE=1024)
        return out

    def on_the_case(fn, label="1025 float32"):
        result = check(VECTOR_ADD, fn, measure_throughput=False, verbose=False)
        return next(c.message for c in result.cases if c.label == label)

    unwritten = on_the_case(grid_too_small)
    assert "your kernel never wrote 1 of the output's elements" in unwritten, unwritten
    assert "where the reference has none" not in unwritten, unwritten
    computed = on_the_case(computes_a_nan)
    assert "1025 NaN and 0 Inf where the reference has none" in computed and "never wrote" not in computed, computed


def test_changing_an_input_fails():
    result = check(VECTOR_ADD, lambda x, y: _launch(x, y, x), measure_throughput=False, verbose=False)
    assert all("input 0 was changed" in c.message for c in failures(result))
    assert failures(result)


def test_a_changed_input_is_found_beside_a_nan_that_stayed():
    from autograder.correctness import _changed_inputs
    before = torch.tensor([float("nan"), 1.0])
    assert _changed_inputs([before], [before.clone()]) is None
    assert "input 0 was changed" in _changed_inputs([before], [torch.tensor([float("nan"), 2.0])])


def test_returning_a_cached_buffer_fails():
    cache = {}

    def cached(x, y):
        out = cache.setdefault((x.shape, x.dtype), torch.empty_like(x))
        return _launch(x, y, out)

    ex = dataclasses.replace(VECTOR_ADD, visible_cases={DEV: (VECTOR_ADD.visible_cases[DEV][0],) * 2})
    result = check(ex, cached, measure_throughput=False, verbose=False)
    assert [c.passed for c in result.cases] == [True, False]
    assert "same buffer an earlier call returned" in result.cases[1].message


def test_exceptions_get_a_one_line_explanation_above_the_traceback():
    def unwritten(x, y):
        raise NotImplementedError()

    def broken(x, y):
        return {}["missing"]

    class Half:
        @staticmethod
        def forward(x, y):
            raise NotImplementedError("your code goes here")

    def add(x, y):  # the function written, a part it calls not yet
        return Half.forward(x, y)

    msg = check(VECTOR_ADD, unwritten, verbose=False).cases[0].message
    assert msg.startswith("`add` is not written yet") and "raise NotImplementedError()" in msg
    msg = check(VECTOR_ADD, add, verbose=False).cases[0].message
    assert msg.splitlines()[0] == ("`add` is not written yet: `test_exceptions_get_a_one_line_explanation_above_"
                                        "the_traceback.<locals>.Half.forward` raised NotImplementedError.")
    msg = check(VECTOR_ADD, broken, verbose=False).cases[0].message
    assert msg.splitlines()[0] == "`add` raised KeyError: 'missing'"
    assert "autograder" not in msg  # the grader's own frames are cut



def test_a_cuda_fault_is_named_and_stops_the_remaining_cases():
    # The error text is PyTorch's; on a GPU, tests/test_isolation.py makes a real one.
    calls = []

    def faulting(x, y):
        calls.append(1)
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    result = check(VECTOR_ADD, faulting, verbose=False)
    first, *rest = result.cases
    assert first.message.startswith("your kernel faulted on the GPU (illegal memory access)")
    assert "restart the kernel" in first.message and "TRITON_INTERPRET=1" in first.message
    assert rest and all(c.message.startswith("not run: an earlier case broke") for c in rest)
    assert len(calls) == 1

def test_wrong_signature_is_explained():
    result = check(VECTOR_ADD, lambda x: x, verbose=False)
    assert "cannot be called as `add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor`" in result.cases[0].message


def test_a_hanging_call_is_stopped():
    ex = dataclasses.replace(VECTOR_ADD, time_limit_s=0.5)
    start = time.monotonic()
    result = check(ex, lambda x, y: time.sleep(60), verbose=False)
    assert time.monotonic() - start < 10
    first, *rest = result.cases  # the next case would wait as long: not run
    assert f"`add` on {first.label} did not finish within 0.5 s" in first.message
    assert rest and all(c.message.startswith("not run: an earlier case did not finish") for c in rest), rest
    assert "in <lambda>, line" in first.message  # where it was stopped


@pytest.mark.skipif(not DEVICE.interpreted, reason="an interpreted launch")
def test_a_launch_stopped_at_the_time_limit_says_how_many_programs_it_had_and_where():
    ex = dataclasses.replace(VECTOR_ADD, time_limit_s=0.5)
    endless = lambda x, y: _endless[(3, 2)](torch.zeros(1, dtype=torch.int32), 5)  # noqa: E731
    message = check(ex, endless, verbose=False).cases[0].message
    assert "stopped in `_endless`, a launch of 6 programs" in message and "in _endless, line" in message, message


@triton.jit
def _plain(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):  # @triton.jit stripped below: the usual slip
    pass


@triton.jit
def _sum_with_dim(x_ptr, out_ptr, BLOCK: tl.constexpr):
    tl.store(out_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, BLOCK)), dim=0))


@triton.jit
def _with_libdevice(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, libdevice.exp(tl.load(x_ptr + offsets)))


@triton.jit
def _with_torch(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, torch.exp(tl.load(x_ptr + offsets)))


def _first_message(kernel, block=1):  # the first case has one element
    def launch(x, y):
        out = torch.empty_like(x)
        kernel[(1,)](x, out, BLOCK=block)
        return out
    return check(VECTOR_ADD, launch, measure_throughput=False, verbose=False).cases[0].message


@pytest.mark.skipif(DEV != "cpu", reason="numpy takes host memory only")
def test_a_numpy_array_returned_is_named_as_what_was_returned():
    result = check(VECTOR_ADD, lambda x, y: _launch(x, y, torch.empty_like(x)).numpy(), measure_throughput=False,
                   verbose=False)
    assert result.cases[0].message == "`add` returned ndarray, expected a torch.Tensor.", result.cases[0].message


def test_the_usual_slips_are_named_beside_the_error():
    def unjitted(x, y):
        out = torch.empty_like(x)
        _plain.fn[(1,)](x, y, out, x.numel(), BLOCK=8)
        return out

    def silent(x, y):
        raise ValueError()

    said = check(VECTOR_ADD, unjitted, measure_throughput=False, verbose=False).cases[0].message
    assert "needs `@triton.jit` on the line above its `def`" in said, said
    said = check(VECTOR_ADD, silent, measure_throughput=False, verbose=False).cases[0].message
    assert said.startswith("`add` raised ValueError: (no message)"), said


@pytest.mark.skipif(not DEVICE.interpreted, reason="the interpreter's own errors")
def test_the_usual_slips_in_an_interpreted_kernel_are_named_with_their_line():
    said = _first_message(_sum_with_dim)
    assert "take `axis=` where PyTorch's take `dim=`" in said and "in _sum_with_dim, line" in said, said
    said = _first_message(_with_libdevice)
    assert "cannot run libdevice functions" in said and "in _with_libdevice, line" in said, said
    said = _first_message(_with_torch)
    assert "A kernel called a PyTorch function" in said and "in _with_torch, line" in said, said


@triton.jit
def _range_of_a_runtime_length(x_ptr, out_ptr, n):
    offsets = tl.arange(0, n)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))


@pytest.mark.skipif(DEV != "cpu", reason="on a GPU this is Triton's CompilationError")
def test_an_error_inside_an_interpreted_kernel_shows_the_kernels_line():
    def add(x, y):
        out = torch.empty_like(x)
        _range_of_a_runtime_length[(1,)](x, out, x.numel())
        return out
    message = check(VECTOR_ADD, add, verbose=False).cases[0].message
    assert message.splitlines()[0].startswith("`add` raised ValueError in the kernel: arange's arguments"), message
    assert message.splitlines()[1].startswith("  in _range_of_a_runtime_length, line ") and \
        message.splitlines()[1].endswith(": offsets = tl.arange(0, n)"), message


def test_a_traceback_shows_the_students_lines_not_the_libraries():
    def add(x, y):
        out = torch.empty_like(x)
        add_kernel[(1,)](x, y, out, BLOCK_SIZE=1024)  # n_elements left out
        return out
    message = check(VECTOR_ADD, add, verbose=False).cases[0].message
    assert "add_kernel[(1,)](x, y, out, BLOCK_SIZE=1024)" in message and "site-packages" not in message, message


def test_a_function_that_returns_nothing_is_told_so():
    result = check(VECTOR_ADD, lambda x, y: (_launch(x, y, torch.empty_like(x)), None)[1], verbose=False)
    assert all(c.message == "`add` returned None: end it by returning the output tensor (e.g. `return out`)." for c in result.cases)


def test_seed_replays_the_same_inputs():
    seen = []

    def spy(x, y):
        seen.append(x.clone())
        return add(x, y)

    replay = dict(seed=1234, measure_throughput=False, verbose=False)
    check(VECTOR_ADD, spy, **replay)
    first, seen[:] = list(seen), []
    check(VECTOR_ADD, spy, **replay)
    assert len(seen) == len(first) and all(torch.equal(a, b) for a, b in zip(first, seen))
    check(VECTOR_ADD, spy, seed=4321, measure_throughput=False, verbose=False)
    assert not torch.equal(first[-1], seen[-1])


def test_throughput_is_never_passed_silently_without_a_gpu(monkeypatch, capsys):
    if DEVICE.has_gpu:
        pytest.skip("a GPU measures throughput; this test is about the CPU")
    result = check(VECTOR_ADD, add, verbose=False)
    assert result.throughput.status == "not measured" and "needs a GPU" in result.throughput.message
    assert not result.passed
    assert grade(GRADED_ADD, add, "throughput") == 0  # no error: nothing could be timed
    assert "needs a GPU" in capsys.readouterr().out
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")  # a correct notebook validates on a CPU
    assert grade(GRADED_ADD, add, "throughput") is None
    assert "Timed on a GPU when your work is graded" in capsys.readouterr().out
    monkeypatch.delenv("NBGRADER_EXECUTION")
    monkeypatch.setenv("TRITON_COURSE_CPU_THROUGHPUT", "award")
    assert grade(GRADED_ADD, add, "throughput") == GRADED_ADD.points["throughput"]
    assert "awarded without a GPU" in capsys.readouterr().out
    wrong = lambda x, y: _launch(x, y, torch.zeros_like(x))[:0]  # noqa: E731
    assert grade(GRADED_ADD, wrong, "throughput") == 0  # "award" never pays an incorrect kernel


def test_grade_gives_full_points_to_the_reference():
    from solutions.broadcast_add import add as ps1_add
    assert grade(PS1.name, ps1_add, "correctness") == PS1.points["correctness"]
    assert grade(PS1.name, ps1_add, "hidden") == PS1.points["hidden"]


@cpu_only
def test_grade_shares_points_by_the_fraction_passed():
    cases = VECTOR_ADD.cases("visible", DEV)
    whole_blocks = sum(c.shape[0] % 1024 == 0 for c in cases)
    expected = round(GRADED_ADD.points["correctness"] * whole_blocks / len(cases), 2)
    assert 0 < grade(GRADED_ADD, add_unmasked, "correctness") == expected
    with pytest.raises(GradingFailure, match="vector_add correctness: 0 / 3 points.*no case passed"):
        grade(GRADED_ADD, lambda x, y: x + y, "correctness")


def test_grading_failure_hides_the_traceback():
    assert GradingFailure("verdict")._render_traceback_() == ["GradingFailure: verdict"]


def test_guard_zones_find_a_store_past_either_end_and_nothing_else():
    from autograder.guards import GuardZones
    for offset, where in ((100, "past the end"), (-3, "before the start")):
        zones = GuardZones()
        x = zones.place(torch.arange(100, dtype=torch.float32)[10:90], "the output")
        assert x.tolist() == list(range(10, 90))
        x.add_(1)
        assert zones.damage() is None  # writes inside the tensor's storage are its own
        torch.as_strided(x, (1,), (1,), x.storage_offset() - 10 + offset).fill_(7.0)  # as a kernel without a mask would
        message = zones.damage()
        assert message and where in message and "the output (80 float32)" in message and "4 bytes" in message


def test_the_summary_shows_every_mismatch_since_how_many_elements_differ_tells_bugs_apart():
    from autograder.report import CaseResult, CheckResult
    differ = "{} of {} elements differ (atol=1e-05, rtol=1e-05); worst abs error 1, worst rel error 1\n  index  yours"
    result = CheckResult("add_bias", 7, [CaseResult("8×64 float32", False, differ.format(8, 512), kind="values"),
                                         CaseResult("7×33 float32 strided", False, differ.format(199, 231),
                                                    kind="values")])
    text = result.summary()
    assert "8 of 512 elements differ" in text and "199 of 231 elements differ" in text and "same failure" not in text


def test_the_summary_says_passed_and_failed_in_words_and_names_a_repeated_failure_once():
    from autograder.report import CaseResult, CheckResult, ThroughputResult
    stray = "out-of-bounds store in program ({},): {} of 1024 active lanes fall outside the tensors"
    result = CheckResult("add", 7, [CaseResult("10 float32", True),
                                    CaseResult("1025 float32", False, stray.format(1, 1)),
                                    CaseResult("4097 float32", False, stray.format(4, 1023)),
                                    CaseResult("7 float16", False, "`add` raised ValueError: no")],
                         ThroughputResult("not measured", "not measured: needs a GPU"))
    text = result.summary()
    assert "✅ passed 10 float32" in text and "❌ failed 1025 float32" in text and "❌ failed 7 float16" in text
    assert text.count("out-of-bounds store") == 1 and "the same failure as the 1025 float32 case above" in text
    assert "`add` raised ValueError: no" in text
    assert text.splitlines()[-1] == "  ⚠️ throughput not measured: needs a GPU"



def test_a_verdict_on_hidden_cases_counts_them_and_shows_only_the_judges_briefs():
    from autograder.report import CaseResult, CheckResult
    raised = "`add` raised ValueError: x is (4099, 3)"
    brief = "`add` raised an exception."
    result = CheckResult("add", 123456, [CaseResult("4099×3 float16", False, raised, brief),
                                         CaseResult("1×1 float32", True),
                                         CaseResult("77×5 float32", False, raised.replace("4099, 3", "77, 5"), brief),
                                         CaseResult("2×2 float32", False, "3 of 4 elements differ: ...", "differ")],
                         hidden=True)
    text = result.summary()
    assert text.splitlines()[0] == "add: hidden tests, 1/4 cases passed"
    assert "❌ failed 2 of 4 cases\n     " + brief in text and "❌ failed 1 of 4 cases\n     differ" in text
    for secret in ("4099", "77", "2×2", "1×1", "123456", "elements differ", "seed"):
        assert secret not in text, secret
    result.hidden = False  # the same verdict for the instructor's own check: in full
    assert "4099×3 float16" in result.summary() and raised in result.summary()


def test_a_kind_the_judge_does_not_know_reads_as_an_exception():
    from autograder.correctness import brief
    assert brief("values", "add") == "elements differ from PyTorch's result by more than the tolerance."
    assert brief("x=(4099, 3)", "add") == brief("None", "add") == "`add` raised an exception."


@triton.jit
def _reads_one_ahead(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets + 1, mask=offsets < n), mask=offsets < n)


@triton.jit
def _reads_backwards_too_far(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + n - 9 - offsets), mask=offsets < n)


def _side_by_side(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two tensors of ``n`` float32 with storages of their own that lie back to back in memory:
    element ``n`` of the first is element 0 of the second."""
    memory = bytearray(8 * n)
    first, second = (torch.frombuffer(memoryview(memory)[i * 4 * n:(i + 1) * 4 * n], dtype=torch.float32)
                     for i in (0, 1))
    assert second.data_ptr() == first.data_ptr() + 4 * n
    return first, second


@pytest.mark.skipif(not DEVICE.interpreted, reason="the interpreter's bounds check")
@pytest.mark.parametrize("kernel, memory, words", [
    (_reads_one_ahead, "apart", "1 of 2 active lanes fall outside `x_ptr`, the tensor their pointer was computed "
                                "from; the first is element 10 of `x_ptr`, whose memory holds 10 elements."),
    (_reads_one_ahead, "side by side", "1 of 2 active lanes fall outside `x_ptr`"),  # x[10] is out[0]'s memory
    (_reads_backwards_too_far, "apart", "2 of 2 active lanes fall outside `x_ptr`, the tensor their pointer was "
                                        "computed from; the first is element -1 of `x_ptr`, 1 before its start, "
                                        "whose memory holds 10")])
def test_an_out_of_bounds_access_names_the_tensor_its_pointer_was_computed_from(kernel, memory, words):
    from autograder.guards import OutOfBoundsAccess
    x, out = _side_by_side(10) if memory == "side by side" else (torch.randn(10), torch.empty(10))
    with pytest.raises(OutOfBoundsAccess) as raised:  # itself, not inside Triton's InterpreterError
        kernel[(5,)](x, out, 10, BLOCK=2)
    assert words in str(raised.value)


@triton.jit
def _adds_without_a_mask(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr + offsets, 1.0)


@triton.jit
def _reads_through_a_descriptor_too_long(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    x = tl.make_tensor_descriptor(x_ptr, shape=[n + 8], strides=[1], block_shape=[16])
    offsets = tl.arange(0, 16)
    tl.store(out_ptr + offsets, x.load([0]), mask=offsets < n)


@pytest.mark.skipif(not DEVICE.interpreted, reason="the interpreter's bounds check")
@pytest.mark.parametrize("kernel, advice", [
    (_reads_one_ahead, "Its mask let these lanes through: the mask must be false wherever the pointer falls"),
    (_reads_backwards_too_far, "It has no mask: lanes outside the data need one (e.g. tl.load(..., mask=offsets < "
                               "n_elements)), or the offset is wrong."),
    (copy_unmasked_store, "It has no mask: lanes outside the data need one (e.g. tl.store("),
    (_adds_without_a_mask, "The offset is wrong, or lanes past the data need a mask (e.g. tl.atomic_add("),
    (_reads_through_a_descriptor_too_long, "It went through a tensor descriptor, whose shape or strides reach past")])
def test_an_out_of_bounds_access_says_whether_it_had_a_mask(kernel, advice):
    from autograder.guards import OutOfBoundsAccess
    with pytest.raises(OutOfBoundsAccess) as raised:  # 6 programs of 2 lanes for 10 elements
        kernel[(6,)](torch.randn(10), torch.empty(10), 10, BLOCK=2)
    assert advice in str(raised.value)
    assert sum(start in str(raised.value) for start in ("It has no mask", "Its mask", "The offset is wrong",
                                                         "It went through")) == 1


@triton.jit
def _load_from_an_integer(out_ptr):
    tl.store(out_ptr, tl.load(tl.full((), 4096, tl.int64).to(tl.pointer_type(tl.float32))))


@pytest.mark.skipif(not DEVICE.interpreted, reason="the interpreter's bounds check")
def test_a_pointer_made_from_an_integer_addresses_no_tensor():
    from autograder.guards import OutOfBoundsAccess
    with pytest.raises(OutOfBoundsAccess, match="1 of 1 active lanes address no tensor passed to the kernel"):
        _load_from_an_integer[(1,)](torch.empty(1))


@pytest.mark.skipif(not DEVICE.interpreted, reason="the interpreter's bounds check")
def test_a_notebook_shows_an_out_of_bounds_access_as_the_sentence_and_the_kernels_line():
    from autograder.guards import OutOfBoundsAccess
    with pytest.raises(OutOfBoundsAccess) as raised:
        _reads_one_ahead[(5,)](torch.randn(10), torch.empty(10), 10, BLOCK=2)
    first, where = raised.value._render_traceback_()  # what IPython prints instead of the traceback
    assert first.startswith("OutOfBoundsAccess: out-of-bounds load in program (4, 0, 0): 1 of 2 active lanes")
    assert where.startswith("  in _reads_one_ahead, line ") and "tl.load(x_ptr + offsets + 1" in where




@pytest.mark.skipif(not DEVICE.interpreted, reason="the interpreter's bounds check and trace")
def test_in_a_notebook_a_stray_access_is_drawn_below_the_check(monkeypatch):
    import IPython.display
    from autograder import memory_trace
    from autograder.guards import OutOfBoundsAccess
    shown = []
    monkeypatch.setattr(memory_trace, "_in_ipython", lambda: True)
    monkeypatch.setattr(IPython.display, "display", shown.append)

    def add(x, y):
        out = torch.empty_like(x)
        _reads_one_ahead[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
        return out + y

    check("vector_add", add, verbose=True)
    image, = shown  # one picture for the check, however many cases strayed
    assert image.data.startswith(b"\x89PNG")
    with pytest.raises(OutOfBoundsAccess) as raised:
        add(torch.randn(100), torch.randn(100))
    stray = memory_trace.out_of_bounds_trace(raised.value)
    assert raised.value.program == (1, 0, 0) and stray.kernel == "_reads_one_ahead"
    assert stray.out_of_bounds == 1  # the last lane of program 1 reads x[100]

@triton.jit
def _adds_mismatched_shapes(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets) + tl.zeros([BLOCK // 2], tl.float32))


@pytest.mark.skipif(not DEVICE.interpreted, reason="the interpreter's errors")
def test_a_notebook_shows_any_error_inside_an_interpreted_kernel_in_two_lines():
    from triton.runtime.errors import InterpreterError
    with pytest.raises(InterpreterError) as raised:  # the type stays: code that catches it still does
        _adds_mismatched_shapes[(1,)](torch.zeros(8), BLOCK=8)
    first, where = raised.value._render_traceback_()
    assert first == "ValueError in the kernel: Cannot make_shape_compatible: incompatible dimensions at index 0: 8 and 4"
    assert where.startswith("  in _adds_mismatched_shapes, line ") and "tl.zeros([BLOCK // 2]" in where

@triton.jit
def _writes_into_the_next_block_of_x(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    total = tl.load(x_ptr + offsets, mask=offsets < n) + tl.load(y_ptr + offsets, mask=offsets < n)
    tl.store(out_ptr + offsets, total, mask=offsets < n)
    tl.store(x_ptr + offsets + BLOCK, total, mask=offsets + BLOCK < n)


@pytest.mark.skipif(not DEVICE.interpreted, reason="the interpreter's race check")
def test_a_kernel_writing_into_an_input_is_told_so_not_that_it_races():
    def add(x, y):
        out = torch.empty_like(x)
        _writes_into_the_next_block_of_x[(triton.cdiv(x.numel(), 8),)](x, y, out, x.numel(), BLOCK=8)
        return out

    messages = {c.message for c in check(VECTOR_ADD, add, measure_throughput=False, verbose=False).cases
                if not c.passed and "same failure" not in c.message}
    assert messages == {"input 0 was changed by the call: write results to a new tensor, not into the inputs."}, messages


def test_an_infinite_output_is_said_to_be_infinitely_wrong():
    from autograder.correctness import compare
    table = compare(torch.tensor([float("inf"), 1.0]), torch.tensor([1.0, 1.0]), 1e-6, 1e-6)
    assert "worst abs error inf, worst rel error inf" in table.splitlines()[0], table


def test_a_mismatch_shows_the_inputs_at_the_index_beside_the_values():
    from autograder.correctness import compare
    x, y = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([10.0, 20.0])
    table = compare(x - y, x + y, 1e-6, 1e-6, inputs={"x": x, "y": y, "w": torch.ones(3, 3)})
    header, first = table.splitlines()[1:3]
    assert header.split() == ["index", "x", "y", "yours", "expected"]  # w does not broadcast: left out
    assert first.split() == ["(0,", "0)", "1", "10", "-9", "11"]


@triton.jit
def _add_reading_x_twice(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, TWICE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if TWICE:  # a second, useless read of x: 4 bytes moved per 3 needed
        x = (x + tl.load(x_ptr + offsets, mask=mask)) * 0.5
    tl.store(out_ptr + offsets, x + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@pytest.mark.skipif(not DEVICE.interpreted, reason="the interpreter's traffic count (no GPU)")
@pytest.mark.parametrize("twice, words", [(False, "1.00x, each byte once"),
                                          (True, "1.33x; where the extra bytes come from GPU memory, it runs at 75% of the speed")])
def test_without_a_gpu_the_throughput_line_counts_the_bytes_the_kernels_moved(twice, words):
    def add(x, y):
        out = torch.empty_like(x)
        _add_reading_x_twice[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256, TWICE=twice)
        return out

    message = check("vector_add", add, verbose=False).throughput.message
    assert message.startswith("not measured: needs a GPU") and words in message


@pytest.mark.skipif(not DEVICE.interpreted, reason="the interpreter's traffic count (no GPU)")
def test_an_exercise_with_gradients_gets_no_traffic_note():
    # its partial sums' buffer is small next to the rows at a GPU's sizes, not at the CPU's
    from autograder import exercises, throughput
    from solutions.layer_norm import layer_norm
    spec = exercises.get("ps6_layer_norm")
    assert spec.gradients and throughput.traffic_note(spec, layer_norm, 0, spec.cases("visible", "cpu")[-1]) == ""


def test_code_left_to_run_later_is_seen_on_every_signal_a_handler_can_take():
    """The real-time signals have no name in ``signal.Signals``; a handler there runs outside any watch too."""
    import signal as signals

    from autograder.guards import later_code
    before = later_code()
    number = signals.SIGRTMIN + 3
    previous = signals.signal(number, lambda *_: None)
    try:
        changed = [name for name, value in later_code().items() if before.get(name) != value]
    finally:
        signals.signal(number, previous)
    assert changed == [f"signal.signal({int(number)})"]


def test_a_check_in_a_process_whose_cuda_context_broke_earlier_says_to_restart_the_kernel():
    """A fault in an earlier check leaves a sticky CUDA error: the next check's inputs cannot be
    drawn. Each remaining case says why, in a sentence, instead of a traceback from PyTorch."""
    draws = []

    def broken_after_one(case, generator, device):
        draws.append(case)
        if len(draws) > 1:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return VECTOR_ADD.make_inputs(case, generator, device)

    exercise = dataclasses.replace(VECTOR_ADD, make_inputs=broken_after_one)
    result = check(exercise, add, measure_throughput=False, verbose=False)
    assert [c.passed for c in result.cases] == [True] + [False] * (len(result.cases) - 1)
    assert len(draws) == 2 and "Restart the kernel" in result.cases[1].message

    def other_error(case, generator, device):
        raise RuntimeError("no GPU here")

    with pytest.raises(RuntimeError, match="no GPU here"):  # any other error is the grader's own: raised
        check(dataclasses.replace(VECTOR_ADD, make_inputs=other_error), add, measure_throughput=False, verbose=False)


def test_a_check_shows_the_first_lines_a_function_prints_and_counts_the_rest(capsys):
    calls = []

    def chatty(x, y):
        calls.append(1)
        for i in range(100):
            print(f"debug {i}")
        return _launch(x, y, torch.empty_like(x))

    result = check(VECTOR_ADD, chatty, measure_throughput=False)
    shown = capsys.readouterr().out.splitlines()
    from_the_function = [line for line in shown if line.startswith("debug ")]
    assert from_the_function == [f"debug {i % 100}" for i in range(printed.MAX_LINES)], from_the_function[-3:]
    left_out = 100 * len(calls) - printed.MAX_LINES
    assert f"({left_out:,} more lines that your code printed are left out; the first 200 are above.)" in shown
    assert result.correct and shown[-1].strip().startswith("✅ passed")  # the summary itself is never cut


def test_a_call_still_running_is_noticed_once_and_still_stopped_at_its_limit(capsys):
    from autograder.guards import KernelTimeout, time_limit
    with time_limit(5, "`add` on 4 float32", notice_after=0.1):
        time.sleep(0.4)
    out = capsys.readouterr().out
    assert out.count("still running") == 1 and "`add` on 4 float32 is still running after 0.1" in out
    assert "the check stops it at 5 s" in out
    start = time.monotonic()
    with pytest.raises(KernelTimeout, match="did not finish within 0.5 s"):
        with time_limit(0.5, "`add` on 4 float32", notice_after=0.1):
            time.sleep(3)
    assert time.monotonic() - start < 0.9  # the notice did not push the limit back


def test_the_notice_is_shown_past_the_limit_on_what_the_students_code_prints(capsys):
    from autograder.guards import time_limit
    with printed.first_lines(limit=2):
        print("\n".join(map(str, range(10))))
        with time_limit(5, "`add` on 4 float32", notice_after=0.05):
            time.sleep(0.2)
    out = capsys.readouterr().out
    assert "is still running after" in out and "(8 more lines that your code printed" in out


@triton.jit
def _counts_slowly(out_ptr, n):
    total = 0
    for _ in range(n):
        total += 1
    tl.store(out_ptr + tl.program_id(0), total)


@pytest.mark.skipif(not DEVICE.interpreted, reason="the interpreter runs programs one after another")
def test_a_kernel_still_running_in_the_interpreter_is_named_with_its_programs(capsys):
    from autograder.guards import time_limit
    _counts_slowly[(1,)](torch.zeros(1, dtype=torch.int32), 1)  # the interpreter's first launch sets itself up
    with time_limit(60, "`count` on 3 programs", notice_after=0.3):
        _counts_slowly[(3,)](torch.zeros(3, dtype=torch.int32), 10_000)
    assert "inside `_counts_slowly`, whose 3 programs Triton's interpreter runs one after another" in \
        capsys.readouterr().out
    with pytest.raises(Exception, match="cannot be interpreted as an integer"):  # a launch that fails: no kernel left under way
        _counts_slowly[(3,)](torch.zeros(3, dtype=torch.int32), "not a number")
    with time_limit(60, "`add` on 4 float32", notice_after=0.05):
        time.sleep(0.2)
    assert "inside" not in capsys.readouterr().out


def test_only_a_students_own_check_says_a_call_is_still_running(monkeypatch, capsys):
    """A graded cell's check (verbose=False) prints nothing of the kind."""
    from autograder import correctness

    def slow_add(x, y):
        time.sleep(0.3)
        return x + y
    monkeypatch.setattr(correctness, "STILL_RUNNING_NOTICE_S", 0.05)
    check("vector_add", slow_add, cases="visible", verbose=False)
    assert "still running" not in capsys.readouterr().out
    check("vector_add", slow_add, cases="visible")
    assert "is still running after 0.05" in capsys.readouterr().out


def test_the_untimed_autotuner_is_the_interpreters_alone(monkeypatch):
    """The course's interpreter hooks make an autotuner keep its first configuration untimed, but
    only while every kernel is interpreted: trace() installs them on a GPU too, where lesson 7 then
    autotunes for real."""
    from triton.runtime.autotuner import Autotuner

    from autograder import guards

    guards.install_interpreter_hooks()
    tuner = Autotuner.__new__(Autotuner)
    tuner._do_bench = timer = lambda kernel_call, quantiles: [1.0] * len(quantiles)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert tuner.do_bench is guards._no_timing
    monkeypatch.delenv("TRITON_INTERPRET")
    assert tuner.do_bench is timer
