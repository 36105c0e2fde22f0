"""Every notebook runs top to bottom, is committed clean, and is in step with its sources."""
import re
import time
from pathlib import Path

import nbformat
import pytest

from autograder import settings
from autograder.instructor import sync, translation
import kit
from conftest import DEVICE, ROOT, execute_notebook, venv_env

NOTEBOOKS = sync.all_notebooks()
BUDGET_S = 300 if DEVICE.has_gpu else 120
"""Longest a notebook may take top to bottom: on a GPU real kernels compile and autotune (lesson
11 took 210 s on an H100 on 2026-12-05, its FP8 and TMA sweeps most of it)."""


def test_there_are_notebooks_in_both_folders():
    assert {p.relative_to(ROOT).parts[0] for p in NOTEBOOKS} == {"notebooks", "source"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_without_outputs_and_in_sync(path):
    assert sync.sync(path, write=False) == []


# The Chinese lessons run in test_colab_like (as a student there would open them): their code
# cells are the English ones plus set_language("zh"), and each lesson's code runs twice, not three times.
EXECUTED_HERE = [p for p in NOTEBOOKS if sync.ZH_DIR not in p.parents]


@pytest.mark.slow
@pytest.mark.parametrize("path", EXECUTED_HERE, ids=lambda p: str(p.relative_to(ROOT)))
def test_executes_top_to_bottom(path, monkeypatch):
    # Without a GPU a throughput test cell scores 0 by default (test_nbgrader_pipeline checks
    # that); here the instructor's "award" setting is on, as on a CPU-only course.
    for key, value in venv_env(TRITON_COURSE_CPU_THROUGHPUT="award").items():
        monkeypatch.setenv(key, value)
    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    execute_notebook(nb, path.parent)
    if (outputs := settings.NOTEBOOK_OUTPUTS.get()) is not None:
        _append_text_outputs(nb, path, outputs)
    assert time.monotonic() - start < BUDGET_S


def test_a_notebook_run_here_leaves_no_kernel_behind(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os; print(os.getpid())")])
    execute_notebook(nb, tmp_path)
    kernel = int(nb.cells[0].outputs[0]["text"])
    for _ in range(50):  # it is killed as the run ends; its exit may lag a moment
        if not Path(f"/proc/{kernel}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{kernel}").exists(), "the kernel outlived the notebook's run"


def _append_text_outputs(nb, path, target) -> None:
    lines = [f"===== {path.relative_to(ROOT)}"]
    for i, cell in enumerate(nb.cells):
        texts = [o.get("text") or o.get("data", {}).get("text/plain", "") for o in cell.get("outputs", [])]
        if any(texts):
            lines += [f"--- cell {i}", *[t.rstrip() for t in texts if t]]
    with open(target, "a") as f:
        f.write("\n".join(lines) + "\n")


def test_sync_detects_a_drifted_solution(tmp_path, monkeypatch):
    def edit_by_hand(nb):
        cell = next(c for c in nb.cells if c.metadata.get("course", {}).get("role") == "solution")
        cell.source += "\n# edited by hand"
    changes = kit.sync_of_a_changed_copy(next(p for p in NOTEBOOKS if p.parts[-3] == "source"), edit_by_hand)
    assert any("(solution)" in c for c in changes)


def test_chinese_notebooks_follow_their_english_and_flag_stale_translations(tmp_path, monkeypatch):
    import yaml

    english = ROOT / "notebooks" / "01_ninja_gap.ipynb"
    cells = [c for c in nbformat.read(english, as_version=4).cells
             if c.cell_type == "markdown" and "role" not in c.metadata.get("course", {})]
    table = {c.id: {"en": translation.source_digest(c.source), "zh": f"中文 {c.id}"} for c in cells}
    monkeypatch.setattr(sync, "TRANSLATIONS", tmp_path)

    def translate():
        (tmp_path / english.name.replace(".ipynb", ".yaml")).write_text(yaml.safe_dump(table, allow_unicode=True))
        return sync.translated(english)

    zh = translate()
    assert [c.source for c in zh.cells if c.id in table] == [f"中文 {c.id}" for c in cells]
    assert sum('set_language("zh")' in c.source for c in zh.cells) == 1
    table[cells[0].id]["en"] = "0" * 12
    with pytest.raises(ValueError, match="stale"):
        translate()
    del table[cells[0].id]
    with pytest.raises(KeyError, match="no Chinese"):
        translate()


ENGLISH_LESSONS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("english", ENGLISH_LESSONS, ids=lambda p: p.name)
def test_a_chinese_lesson_runs_the_english_code_commented_in_chinese(english):
    """Every code cell of the Chinese lesson is its English cell's code, token for token, and every
    comment a student reads in it is Chinese (the generated kernels' too), but for pragmas and
    notation without a word of English (``noqa: E731``, ``c[0] .. c[4]``)."""
    chinese = {c.id: c for c in nbformat.read(sync.ZH_DIR / english.name, as_version=4).cells}
    english_left = []
    for cell in nbformat.read(english, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        zh = chinese[cell.id].source
        assert kit.code_tokens(zh) == kit.code_tokens(cell.source), cell.id
        english_left += [f"{cell.id} (en: {translation.source_digest(cell.source)}): {c.text!r}" for c in translation.comments(zh)
                         if not kit.CJK.search(c.text) and not UNTRANSLATED_COMMENT.fullmatch(c.text)]
    assert not english_left, f"{english.name}: comments still in English:\n" + "\n".join(english_left)


UNTRANSLATED_COMMENT = re.compile(r"noqa: [A-Z]\d+|[^A-Za-z]*(\b[a-z]\b[^A-Za-z]*)*")
"""What a Chinese comment may keep as it is: a pragma, or notation (numbers, one-letter names)."""


def test_a_code_cells_comments_are_replaced_in_order_and_its_code_never():
    source = ("def f(x):\n    # first, then\n    #   the second line\n    y = x + 1  # after code\n\n"
              "    # another run\n    return y\n")
    assert [c.text for c in translation.comments(source)] == ["first, then\n  the second line", "after code",
                                                             "another run"]
    zh = translation.with_comments(source, ["一\n二\n三", "代码之后", "另一段"], "test")
    assert zh == ("def f(x):\n    # 一\n    # 二\n    # 三\n    y = x + 1  # 代码之后\n\n"
                  "    # 另一段\n    return y\n")
    answer = ('s = "a\x0cb"  # a form feed in a string\n### BEGIN SOLUTION\n# the answer\n### END SOLUTION\n'
              "### BEGIN HIDDEN TESTS\n# a hidden case\n### END HIDDEN TESTS\n")
    assert [c.text for c in translation.comments(answer)] == ["a form feed in a string"]  # what students read
    assert translation.with_comments(answer, ["字符串中的换页符"], "test") == answer.replace("a form feed in a string",
                                                                                          "字符串中的换页符")
    for chinese, words in ((["一", "二"], "2 Chinese comments for 3"),
                           (["一", "代码\n之后", "另一段"], "after code takes one line"),
                           (["一", "x\n    return 0  #", "另一段"], "after code takes one line")):
        with pytest.raises(ValueError, match=words):
            translation.with_comments(source, chinese, "test")


def test_every_lesson_reads_in_chinese_too():  # as README says
    chinese = {p.name for p in sync.ZH_DIR.glob("*.ipynb")}
    english = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert len(english) >= 11 and english == chinese


LESSON_LINK = re.compile(r"\]\((\.\./)?(\d\d_\w+\.ipynb)\)")
NOTEBOOK_LINK = re.compile(r"\]\((?!https?:)([^)\s]+\.ipynb)\)")


@pytest.mark.parametrize("path", sorted(sync.ZH_DIR.glob("*.ipynb")), ids=lambda p: p.name)
def test_a_chinese_lesson_links_to_chinese_lessons(path):
    text = "".join(c.source for c in nbformat.read(path, as_version=4).cells)
    links = LESSON_LINK.findall(text)
    assert all(up == "" and (sync.ZH_DIR / name).exists() for up, name in links), links
    notebooks = [(path.parent / link).resolve() for link in NOTEBOOK_LINK.findall(text)]
    assert all(n.exists() and "zh" in n.relative_to(ROOT).parts for n in notebooks), notebooks


INSTRUCTORS_ONLY = re.compile(r"^\s*(?:from|import)\s+(solutions|autograder\.(?:grading|instructor|bench))\b", re.M)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_notebook_imports_only_what_a_student_may_use(path):
    """Lessons and assignments import the package's top level: not the grader, the instructor's
    tools, the benchmark or the answers (the students' copy has no solutions/)."""
    code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    assert not INSTRUCTORS_ONLY.findall(code)
