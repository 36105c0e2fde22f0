"""Every declared exercise: its reference solution passes its own checks, its declaration is whole."""
import importlib

import pytest

from autograder import check, exercises, figures
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
        for which in (exercise.visible_cases, exercise.hidden_cases()):  # edge cases count only beside another
            assert all(any(not exercise.is_edge(c) for c in cases) for cases in which.values())
    else:
        assert not exercise.hidden_cases() and not exercise.points
    if assignment.exists() or name.startswith("lesson"):  # students write it: the answer is the instructor's
        assert exercise.solution.startswith("solutions."), "answers live in solutions/ (autograder.instructor.distribution)"


def _declared_by(exercise) -> str:
    """The module that declares ``exercise``, as ``package.stem``."""
    return next(m.__name__ for m in map(importlib.import_module, (
        f"autograder.{p}.{s.stem}" for p in ("assignments", "lesson_exercises", "lesson_kernels")
        for s in sorted((ROOT / "autograder" / p).glob("[!_]*.py"))))
        if getattr(m, "EXERCISE", None) is exercise).removeprefix("autograder.")


@pytest.mark.parametrize("name", EXERCISES)
def test_one_name_from_declaration_to_solution(name):
    """A kernel keeps its name everywhere: ps4_linear_silu is autograder/assignments/ps4_linear_silu.py,
    solutions/linear_silu.py, source/ps4_linear_silu/ and tests/test_ps4_linear_silu.py; lesson4_log_softmax
    is lesson_exercises/l04_log_softmax.py and solutions/log_softmax.py; a lesson's kernel
    fused_softmax is lesson_kernels/fused_softmax.py and kernels/fused_softmax.py (a name may add
    a suffix: rms_norm_backward_dx is declared in lesson_kernels/rms_norm_backward.py, and both
    it and rms_norm_backward_dw are solved in kernels/rms_norm_backward.py)."""
    exercise = EXERCISES[name]
    package, stem = _declared_by(exercise).split(".")
    solved_in = exercise.solution.rsplit(".", 1)[-1]
    if package == "assignments":
        number, task = name.removeprefix("ps").split("_", 1)
        assert stem == name and number.isdigit() and solved_in == task
        assert (ROOT / "source" / name).is_dir() and (ROOT / "tests" / f"test_{name}.py").exists()
    elif package == "lesson_exercises":
        number, task = name.removeprefix("lesson").split("_", 1)
        assert stem == f"l{int(number):02d}_{task}" and solved_in == task
    else:
        assert name.startswith(stem) and stem.startswith(solved_in), (stem, solved_in)


def test_every_sweep_is_named_for_its_exercise():
    from autograder.bench.sweeps import SWEEPS
    for sweep in SWEEPS.values():
        assert sweep.exercise in EXERCISES and sweep.name.startswith(sweep.exercise), sweep.name


def test_every_random_draw_happens_where_its_generator_lives():
    """The judge draws a case's inputs with a generator on the case's device (a CPU draw of an
    8192 × 8192 case took 0.2 s of a GPU grading); a call that takes a ``generator`` and no
    ``device`` draws on the CPU, and with a CUDA generator raises."""
    import ast
    strays = []
    for path in sorted((ROOT / "autograder").rglob("*.py")) + sorted((ROOT / "solutions").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            keywords = {k.arg for k in getattr(node, "keywords", ())} if isinstance(node, ast.Call) else set()
            if "generator" in keywords and "device" not in keywords:
                strays.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not strays, strays


THRESHOLD_MARGIN = 0.9
"""A problem set's throughput threshold is at most this share of the slowest ratio the judge
gave its reference in a committed class run: one reference's verdicts spread by about a tenth
between runs and cards (PS4's 0.80-0.89× on H100s), and a student as fast as the reference
must pass on every card the course was graded on."""


@pytest.mark.parametrize("name", sorted(exercises.ASSIGNMENTS))
def test_every_threshold_leaves_the_reference_a_margin_on_every_card_it_was_graded_on(name):
    slowest = figures.class_runs()[f"{name}.judge_low"]  # KeyError: no class run of it committed
    threshold = exercises.get(name).throughput.threshold
    assert threshold <= THRESHOLD_MARGIN * slowest.value, (
        f"{name}'s threshold {threshold:g}× leaves less than {1 - THRESHOLD_MARGIN:.0%} below the judge's "
        f"slowest verdict on its reference, {slowest.value:g}× ({slowest.card}, results/gpu/class-grading-*.md)")
