"""Problem sets ask for more than the lessons print, and what students get holds no answer.

A solution line is a line of an nbgrader solution region of a problem set's source notebook,
stripped, longer than 12 characters and not a comment; it is "printed" when a lesson notebook
(English or Chinese) has the same stripped line in any cell.
"""
import re
import subprocess
import sys
import zipfile
from functools import cache
from pathlib import Path

import nbformat
import pytest

from autograder import exercises
from autograder.instructor import distribution
from conftest import ROOT, venv_env

MAX_PRINTED = 0.20
ASSIGNMENTS = sorted(p.name for p in (ROOT / "source").iterdir() if (p / f"{p.name}.ipynb").exists())


def substantive(lines) -> list[str]:
    return [s for s in (line.strip() for line in lines) if len(s) > 12 and not s.startswith("#")]


def solution_lines(text: str) -> list[str]:
    """The substantive lines between ``### BEGIN SOLUTION`` and ``### END SOLUTION``."""
    inside, kept = False, []
    for line in text.splitlines():
        if line.strip() in ("### BEGIN SOLUTION", "### END SOLUTION"):
            inside = line.strip() == "### BEGIN SOLUTION"
        elif inside:
            kept.append(line)
    return substantive(kept)


def notebook_text(path: Path) -> str:
    return "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells)


@cache
def lesson_lines() -> frozenset[str]:
    lessons = sorted((ROOT / "notebooks").rglob("*.ipynb"))
    assert len(lessons) >= 8
    return frozenset(line.strip() for path in lessons for line in notebook_text(path).splitlines())


def test_the_problem_sets_are_numbered_from_1_without_a_gap():
    assert [int(name[2:].split("_")[0]) for name in ASSIGNMENTS] == list(range(1, len(ASSIGNMENTS) + 1))
    assert set(ASSIGNMENTS) == set(exercises.ASSIGNMENTS)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_lessons_print_at_most_a_fifth_of_a_problem_sets_answer(assignment):
    lines = solution_lines(notebook_text(ROOT / "source" / assignment / f"{assignment}.ipynb"))
    printed = [line for line in lines if line in lesson_lines()]
    assert len(lines) >= 10, f"{assignment}: only {len(lines)} solution lines"
    assert len(printed) <= MAX_PRINTED * len(lines), (
        f"{assignment}: {len(printed)} of {len(lines)} solution lines are printed in a lesson:\n" + "\n".join(printed))


@pytest.fixture(scope="module")
def students_copy(tmp_path_factory) -> Path:
    return distribution.build(tmp_path_factory.mktemp("dist") / "course")


def answers() -> dict[str, list[str]]:
    """Every answer's lines that no lesson prints and that say something of their own (over 20
    characters: ``return result`` is everyone's): the solution modules and the source notebooks."""
    found = {str(p.relative_to(ROOT)): solution_lines(p.read_text()) or substantive(p.read_text().splitlines())
             for p in sorted((ROOT / "solutions").glob("*.py")) if p.name != "__init__.py"}
    found |= {f"source/{a}": solution_lines(notebook_text(ROOT / "source" / a / f"{a}.ipynb")) for a in ASSIGNMENTS}
    return {name: [line for line in lines if line not in lesson_lines() and len(line) > 20]
            for name, lines in found.items()}


def test_the_students_copy_holds_no_answer_and_no_hidden_case(students_copy):
    top = {p.name for p in students_copy.iterdir()}
    assert top.isdisjoint(distribution.INSTRUCTOR_ONLY), top & set(distribution.INSTRUCTOR_ONLY)
    assert {"autograder", "notebooks", "student", "README.md", "pyproject.toml"} <= top
    text = "\n".join(p.read_text(errors="replace") for p in students_copy.rglob("*") if p.is_file())
    copy_lines = {line.strip() for line in text.splitlines()}
    leaked = {name: [line for line in lines if line in copy_lines] for name, lines in answers().items()}
    assert not any(leaked.values()), {name: lines for name, lines in leaked.items() if lines}
    assert "HIDDEN_CASES =" not in text
    assert not [p for p in students_copy.rglob("*.ipynb") if "BEGIN HIDDEN TESTS" in p.read_text()]


def test_the_students_copy_has_its_readme_in_english_and_chinese_saying_the_same_things(students_copy):
    english, chinese = ((students_copy / name).read_text() for name in ("README.md", "README.zh.md"))
    assert "(README.zh.md)" in english and "(README.md)" in chinese

    def found(pattern, flags=0):
        return [re.findall(pattern, text, flags) for text in (english, chinese)]

    names, names_zh = found(r"`([^`\n]+)`")  # every command, folder and name the English one gives
    assert set(names) <= set(names_zh), set(names) - set(names_zh)
    blocks, blocks_zh = found(r"```.*?```", re.S)
    assert blocks == blocks_zh
    for pattern in (r"^#+ ", r"^\|"):  # headings, table rows
        en, zh = found(pattern, re.M)
        assert len(en) == len(zh), pattern


def test_the_students_copy_checks_visible_cases_and_says_hidden_ones_are_graded_elsewhere(students_copy):
    # as on a student's machine: the copy alone, without this repository's editable install
    probe = ("import sys\n"
             "sys.meta_path[:] = [f for f in sys.meta_path if not f.__module__.startswith('__editable__')]\n"
             "from autograder import exercises\n"
             f"for name in {ASSIGNMENTS!r}:\n"
             "    exercise = exercises.get(name)\n"
             "    assert exercise.cases('visible', 'cpu')\n"
             "    try:\n"
             "        exercise.hidden_cases()\n"
             "    except LookupError as error:\n"
             "        print(error)\n"
             "import solutions\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=students_copy, capture_output=True, text=True,
                          env=venv_env(PYTHONPATH=str(students_copy)), timeout=300)
    assert "No module named 'solutions'" in done.stderr, done.stdout + done.stderr
    assert done.stdout.count("hidden tests run only when your work is graded") == len(ASSIGNMENTS), done.stdout


@pytest.mark.slow
def test_the_package_built_from_the_students_copy_is_the_runtime_alone(students_copy, tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "-w", str(tmp_path), str(students_copy)], check=True, env=venv_env(), timeout=600)
    wheel, = tmp_path.glob("triton_course-*.whl")
    packages = {Path(name).parts[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {p for p in packages if not p.endswith(".dist-info")} == {"autograder"}, packages


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_one_answer_cell_is_named_for_the_function_it_defines(assignment):
    """nbgrader's grade id of the solution cell is the function's name, as the tests and
    graders look it up; there is one such cell."""
    cells = [c for c in nbformat.read(ROOT / "source" / assignment / f"{assignment}.ipynb", as_version=4).cells
             if c.metadata.get("nbgrader", {}).get("solution")]
    assert [c.metadata.nbgrader.grade_id for c in cells] == [exercises.get(assignment).function]
