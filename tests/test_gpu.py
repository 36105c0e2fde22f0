"""GPU-only rules, run on the device machine (results in results/gpu/); skipped on the CPU."""
import pytest
import torch

from autograder import check, timing
from autograder.lesson_kernels.vector_add import EXERCISE as VECTOR_ADD
from autograder.kernels.vector_add import add

pytestmark = pytest.mark.gpu


def test_reference_solution_clears_the_throughput_threshold():
    result = check(VECTOR_ADD, add, verbose=False)
    assert result.correct, result.summary()
    assert result.throughput.passed, result.throughput.message
    assert 0.5 < result.throughput.peak_fraction < 1.25


def test_work_on_a_side_stream_does_not_escape_the_clock():
    x, y = (torch.randn(2**24, device="cuda") for _ in range(2))
    side = torch.cuda.Stream()
    cycles = 50_000_000  # ~25 ms at ~2 GHz, far longer than the add itself

    def add_then_sleep_on_a_side_stream(a, b):
        out = add(a, b)
        with torch.cuda.stream(side):
            torch.cuda._sleep(cycles)
        return out

    plain = timing.median_ms(lambda: add(x, y))
    hidden = timing.median_ms(lambda: add_then_sleep_on_a_side_stream(x, y))
    assert hidden > plain + 10, (plain, hidden)


def test_timed_outputs_are_checked():
    calls = {"n": 0}

    def right_then_wrong(a, b):
        calls["n"] += 1
        out = add(a, b)
        if calls["n"] > len(VECTOR_ADD.cases("visible", "cuda")):
            out.zero_()  # wrong only once the timing starts
        return out

    result = check(VECTOR_ADD, right_then_wrong, verbose=False)
    assert result.correct and result.throughput.status == "failed"
    assert "outputs of the timed runs are wrong" in result.throughput.message


def test_a_slow_submission_fails_the_threshold():
    def add_four_times(a, b):  # right answer, four times the memory traffic
        for _ in range(3):
            add(a, b)
        return add(a, b)

    result = check(VECTOR_ADD, add_four_times, verbose=False)
    assert result.correct and result.throughput.status == "failed"
    assert result.throughput.ratio < 0.4, result.throughput.message


def test_an_implausible_speed_up_is_flagged():
    from autograder import throughput

    answers = {}

    def add_memoised(a, b):  # right outputs, but the timed calls only look them up
        key = (a.data_ptr(), b.data_ptr())
        if key not in answers:
            answers[key] = add(a, b)
        return answers[key]

    result = throughput.measure(VECTOR_ADD, add_memoised, seed=0)
    assert result.status == "failed" and "the timing was fooled" in result.message, result.message
    assert result.peak_fraction > throughput.SUSPICIOUS_PEAK_FRACTION
