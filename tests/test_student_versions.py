"""The committed student versions (student/, student/zh/) are what nbgrader releases, and run top
to bottom."""
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import nbformat
import pytest

from autograder.instructor import student_versions, sync, translation
import kit
from conftest import ROOT, execute_notebook, venv_env

ASSIGNMENTS = student_versions.assignments()
VERSIONS = student_versions.versions()


def version_id(version) -> str:
    return "-".join(version)


def test_every_assignment_has_a_student_version_in_english_and_chinese():
    assert ASSIGNMENTS and all(student_versions.student_path(a).exists() for a in ASSIGNMENTS)
    assert sorted(p.name for p in student_versions.STUDENT_DIR.iterdir()) == sorted([*ASSIGNMENTS, "zh"])
    assert sorted(a for a, lang in VERSIONS if lang == "zh") == ASSIGNMENTS


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS, ids=version_id)
def test_the_student_version_is_nbgraders_release(version):
    assert not student_versions.sync(*version, write=False), \
        f"{student_versions.student_path(*version)} is stale: run `python -m autograder.instructor.student_versions`"


@pytest.mark.parametrize("version", VERSIONS, ids=version_id)
def test_the_badge_opens_the_student_version(version):
    assignment, language = version
    path = student_versions.student_path(*version)
    sources = [ROOT / "source" / assignment / f"{assignment}.ipynb"] if language == "en" else []
    for notebook in (*sources, path):
        badge = nbformat.read(notebook, as_version=4).cells[0].source
        assert badge == sync.colab_badge(path)
        assert badge.endswith(f"/blob/main/{path.relative_to(ROOT).as_posix()})"), badge


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_comment_a_chinese_student_reads_is_in_chinese(assignment):
    """In every code cell but the graded ones (the hidden test's comment), whose checksums stay
    the English ones so that one gradebook grades both languages."""
    nb = nbformat.read(student_versions.student_path(assignment, "zh"), as_version=4)
    english = [(c.id, comment.text) for c in nb.cells if c.cell_type == "code"
               and not c.metadata.get("nbgrader", {}).get("grade") for comment in translation.comments(c.source)
               if not kit.CJK.search(comment.text)]
    assert not english, english


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_both_languages_grade_the_same_cells_for_the_same_points(assignment, monkeypatch):
    def stub(language) -> list[str]:
        monkeypatch.setenv("TRITON_COURSE_LANG", language)
        return translation.code_stub()["python"].splitlines()

    def english(source: str, language: str) -> str:  # the answer cells' stub speaks the student's language
        for theirs, ours in zip(stub(language), stub("en")):
            source = source.replace(theirs, ours)
        return source

    def graded(language):  # an answer cell's checksum follows its stub and comments; autograde reads it only in graded cells
        nb = nbformat.read(student_versions.student_path(assignment, language), as_version=4)
        return [(c.cell_type, kit.code_tokens(english(c.source, language)) if c.cell_type == "code" else "",
                 {k: v for k, v in c.metadata["nbgrader"].items() if k != "checksum" or c.metadata["nbgrader"].get("grade")})
                for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") or c.metadata.get("nbgrader", {}).get("solution")]

    def code(language):  # every code cell a student runs, the same code whatever its comments say
        nb = nbformat.read(student_versions.student_path(assignment, language), as_version=4)
        return {c.id: kit.code_tokens(english(c.source, language)) for c in nb.cells
                if c.cell_type == "code" and c.source != translation.ZH_LANGUAGE_CELL}
    assert stub("zh") != stub("en") and graded("en") == graded("zh") and code("en") == code("zh")


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS, ids=version_id)
def test_the_student_version_runs_and_only_its_tests_fail(version, monkeypatch):
    # Unsolved, every graded cell fails with the grader's verdict, and the only other errors are
    # the student's own calls of the unwritten function.
    for key, value in venv_env().items():
        monkeypatch.setenv(key, value)
    assignment, language = version
    path = student_versions.student_path(*version)
    nb = nbformat.read(path, as_version=4)
    execute_notebook(nb, path.parent, allow_errors=True)
    failed = {c.metadata.get("nbgrader", {}).get("grade_id"): next(o for o in c.outputs if o.output_type == "error")
              for c in nb.cells if c.cell_type == "code" and any(o.output_type == "error" for o in c.outputs)}
    graded = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.cell_type == "code"
              and c.metadata.get("nbgrader", {}).get("grade")
              and any(not line.startswith("#") for line in c.source.splitlines() if line.strip())}
    hidden = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_hidden")
    assert hidden.startswith("# Hidden tests:") and "grade(" not in hidden  # it says what it is, and no more
    # without a GPU the throughput cell only says so (tests/test_check.py), every other one fails
    assert graded and graded - {"test_throughput"} <= set(failed), {k: v.evalue for k, v in failed.items()}
    assert all(e.ename == ("GradingFailure" if name in graded else "NotImplementedError")
               for name, e in failed.items()), {k: v.ename for k, v in failed.items()}
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert ("your code goes here" if language == "en" else "请在这里写你的代码") in printed  # the stub's sentence
    if language == "en":
        assert "not written yet" in printed and "needs a GPU" in printed
    else:  # the check's and the grader's verdicts in the student's language
        assert kit.CJK.search(printed) and "not written yet" not in printed, printed


def test_a_release_is_made_once_for_the_same_inputs_and_again_when_one_changes(tmp_path, monkeypatch):
    made = []
    monkeypatch.setattr(student_versions, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(student_versions, "_release", lambda a, lang: made.append((a, lang)) or f"{a} {lang} {len(made)}")
    first = ASSIGNMENTS[0]
    assert student_versions.released(first, "zh") == student_versions.released(first, "zh") == f"{first} zh 1"
    assert made == [(first, "zh")]
    keys = {student_versions.release_key(a, lang) for a, lang in VERSIONS}
    assert len(keys) == len(VERSIONS)  # each assignment and language its own
    # a copy of the course whose translation table changes: a new key, so a new release
    for name in ("nbgrader_config.py", "pyproject.toml"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    shutil.copytree(ROOT / "source" / first, tmp_path / "source" / first)
    table = tmp_path / translation.ASSIGNMENT_TABLES / f"{first}.yaml"
    table.parent.mkdir(parents=True)
    table.write_bytes((ROOT / translation.ASSIGNMENT_TABLES / f"{first}.yaml").read_bytes())
    monkeypatch.setattr(student_versions, "ROOT", tmp_path)
    monkeypatch.setattr(student_versions, "SOURCE_DIR", tmp_path / "source")
    before = student_versions.release_key(first, "zh")
    assert before in keys  # the same inputs in another folder: the same release
    table.write_text(table.read_text().replace("习题集", "练习", 1))
    assert student_versions.release_key(first, "zh") != before
    assert student_versions.released(first, "zh") == f"{first} zh 2"


def test_a_release_asked_for_twice_at_once_is_made_once(tmp_path, monkeypatch):
    # the test workers, and sync's threads, ask for the same release side by side: 5 s of nbgrader each
    made = []

    def release(assignment, language):
        made.append(assignment)
        time.sleep(0.5)
        return f"{assignment} {language}"

    monkeypatch.setattr(student_versions, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(student_versions, "_release", release)
    with ThreadPoolExecutor(max_workers=3) as pool:
        texts = list(pool.map(lambda _: student_versions.released(ASSIGNMENTS[0], "zh"), range(3)))
    assert texts == [f"{ASSIGNMENTS[0]} zh"] * 3 and made == [ASSIGNMENTS[0]]
