"""Every declared exercise: its reference solution passes its own checks, its declaration is whole."""
import importlib

import pytest

from autograder import check
from autograder.exercises import EXERCISES
from conftest import DEVICE, ROOT


@pytest.mark.parametrize("name", EXERCISES)
def test_reference_solution_passes_its_own_checks(name):
    exercise = EXERCISES[name]
    fn = getattr(importlib.import_module(exercise.solution), exercise.function)
    for which, cases in (("visible", exercise.visible_cases), ("hidden", exercise.hidden_cases())):
        if DEVICE.device in cases:
            result = check(exercise, fn, cases=which, measure_throughput=False, verbose=False)
            assert result.correct, result.summary()


@pytest.mark.parametrize("name", EXERCISES)
def test_declaration_is_complete(name):
    exercise = EXERCISES[name]
    assert set(exercise.visible_cases) == {"cpu", "cuda"}
    assert all(exercise.visible_cases.values())
    assert {case.dtype for cases in exercise.visible_cases.values() for case in cases} <= set(exercise.tolerances)
    assignment = ROOT / "source" / name
    if assignment.exists():  # a graded assignment: hidden tests, a throughput goal, points
        assert set(exercise.hidden_cases()) == {"cpu", "cuda"} and exercise.throughput is not None
        assert set(exercise.points) == {"correctness", "hidden", "throughput"}
    else:
        assert not exercise.hidden_cases() and not exercise.points
    if assignment.exists() or name.startswith("lesson"):  # students write it: the answer is the instructor's
        assert exercise.solution.startswith("solutions."), "answers live in solutions/ (autograder.instructor.distribution)"
