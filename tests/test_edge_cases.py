"""Edge cases (a vocabulary of one, every row ignored, a lone token) count only beside another
passed case: a function that does nothing scores 0, and each declaration names exactly the
cases such a function passes."""
import pytest
import torch
import triton
import triton.language as tl

from autograder import check, grading
from autograder.correctness import judge_output, readable_on_the_host
from autograder.exercises import EXERCISES
from autograder.guards import MAX_SCALAR_READS
from autograder.report import CaseResult, CheckResult
from conftest import DEVICE

SMALL = 500_000
"""Elements: a GPU case larger than this is not drawn on the CPU here (its reference would take minutes)."""


def _zeros(exercise, inputs, expected):
    return tuple(torch.zeros_like(e) for e in expected)


def _values(exercise, inputs, expected):  # attention's output where each query sees only its own key: v
    q, _, v = inputs[:3]
    return (v.repeat_interleave(q.shape[1] // v.shape[1], dim=1).to(expected[0].dtype),)


def _bias_and_copies(exercise, inputs, expected):  # y = b, dx = dw = 0, db = the first row of dy
    x, _, b, dy = inputs
    return (b.expand_as(x).to(expected[0].dtype), torch.zeros_like(expected[1]), torch.zeros_like(expected[2]),
            dy[0].to(expected[3].dtype))


NO_WORK = {"ps2_softmax_backward": _zeros, "ps3_cross_entropy": _zeros, "ps5_varlen_attention": _values,
           "ps6_layer_norm": _bias_and_copies}
"""For each problem set with edge cases, an answer that computes nothing: zeros or copies of inputs."""


def _cases(exercise):
    for which in ("visible", "hidden"):
        for kind in ("cpu", "cuda"):
            for case in exercise.cases(which, kind):
                generator = torch.Generator().manual_seed(0)
                inputs = exercise.make_inputs(case, generator, "cpu")
                if kind == "cuda" and sum(t.numel() for t in inputs if isinstance(t, torch.Tensor)) > SMALL:
                    continue
                yield case, inputs


@pytest.mark.parametrize("name", sorted(NO_WORK))
def test_the_edge_cases_are_exactly_those_an_answer_that_computes_nothing_passes(name):
    exercise = EXERCISES[name]
    seen = {True: 0, False: 0}
    for case, inputs in _cases(exercise):
        expected = exercise.call(exercise.reference, inputs)
        passed = judge_output(exercise, case, inputs, NO_WORK[name](exercise, inputs, expected)) is None
        assert passed == exercise.is_edge(case), f"{case.label}: passed={passed}, edge={exercise.is_edge(case)}"
        seen[passed] += 1
    assert seen[True] and seen[False], seen


def test_no_problem_set_without_edge_cases_is_passed_by_zeros():
    for name, exercise in EXERCISES.items():
        if exercise.edge is None and name.startswith("ps"):
            for case, inputs in _cases(exercise):
                expected = exercise.call(exercise.reference, inputs)
                assert judge_output(exercise, case, inputs, _zeros(exercise, inputs, expected)) is not None, case.label


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_set_of_cases_holds_one_that_counts_on_its_own(name):
    # were every case an edge case, a right answer would score nothing
    exercise = EXERCISES[name]
    for which in ("visible", "hidden") if exercise.hidden_cases() else ("visible",):
        for kind in ("cpu", "cuda"):
            assert any(not (exercise.is_edge(case) or readable_on_the_host(
                exercise.make_inputs(case, torch.Generator().manual_seed(0), "meta")))
                for case in exercise.cases(which, kind)), (which, kind)


def _verdict(*cases, hidden=False):
    return CheckResult("ps3_cross_entropy", seed=0, hidden=hidden,
                       cases=[CaseResult(label, passed, "" if passed else "wrong", "" if passed else "wrong", edge=edge)
                              for label, passed, edge in cases])


def test_edge_cases_alone_earn_nothing_and_say_why_and_beside_another_they_count():
    exercise = EXERCISES["ps3_cross_entropy"]
    alone = _verdict(("4×1", True, True), ("4×100", False, False), ("4×3000 all ignored", True, True))
    assert alone.fraction_passed == 0 and grading.points(exercise, "correctness", alone) == 0
    assert "Only edge cases passed (4×1, 4×3000 all ignored)" in alone.summary()
    assert grading.why_nothing(alone, "correctness").startswith("only edge cases passed")
    assert "wrong" in grading.why_nothing(alone, "correctness")
    hidden = _verdict(("4×1", True, True), ("4×100", False, False), hidden=True)
    assert "Only edge cases passed. Such a case" in hidden.summary() and "4×1" not in hidden.summary()
    beside = _verdict(("4×1", True, True), ("4×100", True, False), ("4×200", False, False))
    assert beside.fraction_passed == pytest.approx(2 / 3) and "edge" not in beside.summary()


@triton.jit
def _store_zeros(out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.zeros((BLOCK,), dtype=out_ptr.dtype.element_ty), mask=offsets < n)


def test_a_kernel_that_writes_zeros_scores_nothing_on_cross_entropy():
    exercise = EXERCISES["ps3_cross_entropy"]

    def loss(logits, target):
        out = torch.empty(logits.shape[0], dtype=logits.dtype, device=logits.device)
        _store_zeros[(triton.cdiv(out.numel(), 64),)](out, out.numel(), BLOCK=64)
        return out

    result = check(exercise, loss, measure_throughput=False, verbose=False)
    edges = {c.label for c in exercise.visible_cases[DEVICE.device] if exercise.is_edge(c)}
    assert edges and {c.label for c in result.cases if c.passed} == edges
    assert grading.points(exercise, "correctness", result) == 0


def test_cases_small_enough_to_work_out_on_the_host_count_only_beside_another():
    # Up to MAX_SCALAR_READS values may be read one at a time: enough to answer a case this small
    # on the host, launching a kernel that does nothing. Such cases alone earn nothing.
    exercise = EXERCISES["ps1_broadcast_add"]

    def broadcast_add(x, y):
        shape = torch.broadcast_shapes(x.shape, y.shape)
        out = x.new_empty(shape)
        _store_zeros[(1,)](out, 0, BLOCK=64)  # a launch that writes nothing
        if x.numel() + y.numel() <= MAX_SCALAR_READS:
            xs, ys = x.expand(shape), y.expand(shape)
            for i in range(shape[0]):
                for j in range(shape[1]):
                    out[i, j].fill_(float(xs[i, j]) + float(ys[i, j]))
        return out

    result = check(exercise, broadcast_add, measure_throughput=False, verbose=False)
    small = {c.label for c in exercise.visible_cases[DEVICE.device]
             if sum(t.numel() for t in exercise.make_inputs(c, torch.Generator().manual_seed(0), "cpu")) <= MAX_SCALAR_READS}
    assert small and {c.label for c in result.cases if c.passed} == small
    assert result.edges_alone and grading.points(exercise, "correctness", result) == 0
    assert "work the answer out on the host" in result.summary()
