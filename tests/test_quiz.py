"""The quiz data, its schema, its agreement with the seed lesson, and the widgets driven from Python."""
from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import IPython
import IPython.display
import jsonschema
import pytest
import yaml

from autograder import language, quiz

SEED = Path(__file__).parents[2] / "shared/seed/triton_lesson_zh.txt"
QUESTION_IDS = list(quiz.load_quizzes()["questions"])
# The seed lesson's own questions; later lessons add theirs in other quizzes/*.yaml files.
SEED_QUESTION_IDS = list(yaml.safe_load(quiz.QUIZ_FILE.read_text(encoding="utf-8"))["questions"])
CASE_IDS = list(quiz.load_quizzes()["case_study"]["questions"])

# The seed does not mark the right options; this key was read off its explanations.
ANSWER_KEY = {
    "q1_ninja_gap": "The performance difference between high-level frameworks and hand-optimized low-level kernels.",
    "q2_block_model": "Triton is tile-centric; CUDA is thread-centric.",
    "q3_compiler_automates": "Shared memory (SRAM) allocation and synchronization.",
    "q4_constexpr": "It marks a value as a compile-time constant, allowing the compiler to optimize based on its value.",
    "q5_why_triton": "It allows them to write high-performance custom kernels without learning C++ or CUDA.",
}


@pytest.fixture
def seed_text() -> str:
    if not SEED.exists():
        pytest.skip(f"seed lesson not found at {SEED}")
    return SEED.read_text(encoding="utf-8")


def seed_questions(text: str) -> list[dict]:
    """The seed's five questions: 'QUESTION n', the question, its options, then both explanations."""
    part = text[text.index("QUESTION 1") : text.index("Case Study:")]
    questions = []
    for block in re.split(r"QUESTION \d+\n", part)[1:]:
        head, explanations = block.split("✅ Correct!\n")
        right, wrong = explanations.split("❌ Incorrect\n")
        question, *options = head.strip().split("\n")
        questions.append({"question": question, "options": options, "right": right.strip(), "wrong": wrong.strip()})
    return questions


def seed_case_study(text: str) -> tuple[dict, list[dict]]:
    """The seed's case-study intro and its questions, each solution given once."""
    intro, *blocks = re.split(r"Q\n(?=\d\. )", text[text.index("Case Study:") :])
    title, subtitle, scenario = intro.strip().split("\n")
    cases = []
    for block in blocks:
        question, solution = block.split("\nSolution:\n")
        # The seed prints every solution twice; Q2's first copy stops at "Triton's" and its
        # second runs on over a line break, so drop repeated lines and join what is left.
        lines = solution.strip().split("\n")
        kept = [line for i, line in enumerate(lines) if i == 0 or line != lines[i - 1]]
        cases.append({"question": re.sub(r"^\d\. ", "", question.strip()), "solution": " ".join(kept)})
    return {"title": title, "subtitle": subtitle, "scenario": scenario}, cases


# --- the data and its schema -------------------------------------------------------------


def schema_errors(data: dict) -> list:
    schema = json.loads(quiz.SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return list(jsonschema.Draft202012Validator(schema).iter_errors(data))


def test_seed_yaml_fits_schema():
    assert schema_errors(quiz.load_quizzes()) == []
    assert set(SEED_QUESTION_IDS) == set(ANSWER_KEY)
    assert CASE_IDS == ["cs1_fusion", "cs2_long_rows", "cs3_jit"]


def _drop_zh(data):
    del data["questions"]["q3_compiler_automates"]["zh"]


def _correct_out_of_range(data):
    data["questions"]["q3_compiler_automates"]["correct"] = 4


def _zh_option_missing(data):
    data["questions"]["q3_compiler_automates"]["zh"]["options"].pop()


def _empty_explanation(data):
    data["questions"]["q3_compiler_automates"]["en"]["wrong"] = "  "


def _one_option(data):
    for lang in language.LANGUAGES:
        del data["questions"]["q3_compiler_automates"][lang]["options"][1:]
    data["questions"]["q3_compiler_automates"]["correct"] = 0


def _case_without_zh(data):
    del data["case_study"]["questions"]["cs2_long_rows"]["zh"]


BREAKAGES = [_drop_zh, _correct_out_of_range, _zh_option_missing, _empty_explanation, _one_option, _case_without_zh]


@pytest.mark.parametrize("breakage", BREAKAGES, ids=lambda f: f.__name__.strip("_"))
def test_schema_rejects_broken_copy(breakage):
    data = copy.deepcopy(quiz.load_quizzes())
    breakage(data)
    assert schema_errors(data)
    offender = "cs2_long_rows" if breakage is _case_without_zh else "q3_compiler_automates"
    with pytest.raises(ValueError, match=offender):
        quiz.validate(data)


# --- agreement with the seed lesson ------------------------------------------------------


def test_english_matches_seed(seed_text):
    seeded = seed_questions(seed_text)
    assert len(seeded) == len(SEED_QUESTION_IDS) == 5
    for question_id, expected in zip(SEED_QUESTION_IDS, seeded):
        ours = {k: v for k, v in quiz.load_quizzes()["questions"][question_id]["en"].items() if k != "why_not"}
        assert ours == expected, question_id  # why_not is the course's own, beside the seed's words


def test_correct_answers_follow_the_key(seed_text):
    for question_id, seeded in zip(SEED_QUESTION_IDS, seed_questions(seed_text)):
        correct = quiz.load_quizzes()["questions"][question_id]["correct"]
        assert seeded["options"][correct] == ANSWER_KEY[question_id]


def test_case_study_matches_seed(seed_text):
    intro, cases = seed_case_study(seed_text)
    case_study = quiz.load_quizzes()["case_study"]
    assert case_study["intro"]["en"] == intro
    assert len(cases) == len(CASE_IDS)
    for case_id, expected in zip(CASE_IDS, cases):
        assert case_study["questions"][case_id]["en"] == expected, case_id
    assert "Triton's tl.load and tl.store with masks" in case_study["questions"]["cs2_long_rows"]["en"]["solution"]


# --- multiple-choice widgets -------------------------------------------------------------


def quiz_entry(question_id: str) -> dict:
    return quiz.load_quizzes()["questions"][question_id]


def shown(widget, stored: int) -> int:
    """Where the option stored at ``stored`` is shown to this student."""
    return widget.order.index(stored)


def test_options_are_shuffled_per_student_and_stay_put_for_one(monkeypatch):
    right = {}
    for student in ("ada", "bob", "cy", "dee", "eve", "fay", "gus", "hal"):
        monkeypatch.setenv(quiz.STUDENT_VAR, student)
        orders = [quiz.ask(q, rich=False).order for q in QUESTION_IDS]
        assert orders == [quiz.ask(q, rich=False).order for q in QUESTION_IDS]  # the same on every run
        right[student] = tuple(o.index(quiz_entry(q)["correct"]) for o, q in zip(orders, QUESTION_IDS))
    assert len(set(right.values())) > 1 and len({p for r in right.values() for p in r}) == 4
    assert all(quiz_entry(q)["correct"] == 1 for q in SEED_QUESTION_IDS)  # the data keep the seed's order (B)


@pytest.mark.parametrize("question_id", [q for q in QUESTION_IDS if q not in SEED_QUESTION_IDS])
def test_the_right_option_is_not_told_by_its_length(question_id):
    """Shuffling hides where the right option is; its length must not give it away either: it is
    neither much longer nor much shorter than the longest wrong one. (The seed's own options are
    kept as the seed wrote them.)"""
    entry = quiz_entry(question_id)
    for lang in ("en", "zh"):
        lengths = [len(option) for option in entry[lang]["options"]]
        right = lengths.pop(entry["correct"])
        assert 0.6 * max(lengths) <= right <= 1.25 * max(lengths), (lang, right, lengths)


@pytest.mark.parametrize("question_id", QUESTION_IDS)
def test_right_and_wrong_answers(question_id):
    entry = quiz_entry(question_id)
    widget = quiz.ask(question_id, rich=True)
    widget.select(shown(widget, entry["correct"]))
    assert widget.check() == quiz.QuizFeedback(True, f"✅ Correct!\n{entry['en']['right']}")
    for wrong in set(range(len(entry["en"]["options"]))) - {entry["correct"]}:
        widget.select(shown(widget, wrong))
        feedback = widget.check()
        why_not = entry["en"].get("why_not", [None] * len(entry["en"]["options"]))[wrong]
        assert feedback == quiz.QuizFeedback(False, "\n".join(["❌ Incorrect", *[why_not] * bool(why_not),
                                                                 entry["en"]["wrong"]]))
        assert widget.feedback is feedback


def test_widget_starts_unselected_and_asks_for_a_choice():
    widget = quiz.ask("q1_ninja_gap", rich=True)
    assert widget.options.index is None and widget.choice is None
    feedback = widget.check()
    assert not feedback.correct and feedback.text == "Choose an option first."


def test_clicks_go_through_the_same_code_path():
    entry = quiz_entry("q4_constexpr")
    widget = quiz.ask("q4_constexpr", rich=True)
    verdict = widget.widget.children[-1]
    assert verdict.value == ""
    widget.options.index = shown(widget, entry["correct"])  # what clicking a radio button does
    widget.button.click()
    assert widget.feedback.correct
    assert verdict.value.startswith("✅ Correct!<br>")
    assert "<code>tl.constexpr</code>" in verdict.value
    widget.options.index = shown(widget, (entry["correct"] + 1) % len(entry["en"]["options"]))
    widget.button.click()
    assert not widget.feedback.correct and verdict.value.startswith("❌ Incorrect<br>")


def test_select_rejects_a_missing_option():
    widget = quiz.ask("q1_ninja_gap", rich=False)
    with pytest.raises(IndexError, match="0..3"):
        widget.select(4)


def test_unknown_id_lists_the_known_ones():
    with pytest.raises(ValueError, match="q1_ninja_gap"):
        quiz.ask("q9_nope", rich=False)
    with pytest.raises(ValueError, match="cs1_fusion"):
        quiz.reveal("q1_ninja_gap", rich=False)


# --- languages ---------------------------------------------------------------------------


def test_language_switch_changes_text_and_labels():
    entry = quiz_entry("q2_block_model")
    assert language.get_language() == "en"
    english = quiz.ask("q2_block_model", rich=True)
    language.set_language("zh")
    chinese = quiz.ask("q2_block_model", rich=True)
    assert entry["en"]["question"] in english.widget.children[0].value
    assert entry["zh"]["question"] in chinese.widget.children[0].value
    assert chinese.options.options == tuple(entry["zh"]["options"][i] for i in chinese.order)
    assert (english.button.description, chinese.button.description) == ("Check", "检查")
    chinese.select(shown(chinese, entry["correct"]))
    assert chinese.check().text == f"✅ 正确！\n{entry['zh']['right']}"
    wrong = (entry["correct"] + 1) % len(entry["zh"]["options"])
    chinese.select(shown(chinese, wrong))
    assert chinese.check().text == f"❌ 不正确\n{entry['zh']['why_not'][wrong]}\n{entry['zh']['wrong']}"
    assert quiz.reveal("cs1_fusion", rich=True).button.description == "显示案例研究的答案"
    assert quiz.case_study_intro(rich=False).markdown.startswith("### 案例研究")


def test_environment_sets_the_default_language(monkeypatch):
    monkeypatch.setenv("TRITON_COURSE_LANG", "zh")
    assert language.get_language() == "zh"
    language.set_language("en")
    assert language.get_language() == "en"


def test_unknown_language_lists_the_valid_ones(monkeypatch):
    with pytest.raises(ValueError, match="en, zh"):
        language.set_language("fr")
    monkeypatch.setenv("TRITON_COURSE_LANG", "de")
    with pytest.raises(ValueError, match="TRITON_COURSE_LANG.*en, zh"):
        language.get_language()


# --- text fallback and display -----------------------------------------------------------


@pytest.mark.parametrize("lang", language.LANGUAGES)
@pytest.mark.parametrize("question_id", QUESTION_IDS)
def test_fallback_text_gives_no_answer_away(question_id, lang, capsys):
    language.set_language(lang)
    text = quiz_entry(question_id)[lang]
    widget = quiz.ask(question_id, rich=False)
    printed = capsys.readouterr().out
    assert widget.widget is None and printed == widget.text() + "\n"
    assert text["question"] in printed and all(f"] {option}\n" in printed for option in text["options"])
    assert ".check()" in printed
    for giveaway in ("✅", "❌", text["right"], text["wrong"]):
        assert giveaway not in printed
    widget.select(shown(widget, quiz_entry(question_id)["correct"]))
    assert widget.check().correct  # grading works without widgets too


def test_english_fallback_wording(capsys):
    widget = quiz.ask("q1_ninja_gap", rich=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "What is the 'Ninja Gap' in the context of GPU programming?"
    at = shown(widget, 1)
    assert lines[1 + at] == f"  [{at}] The performance difference between high-level frameworks and hand-optimized low-level kernels."
    assert lines[-1] == "Answer: run this cell in Jupyter, or call .check()"


def test_text_is_the_default_outside_a_kernel(capsys):
    assert not quiz.widgets_available()
    assert quiz.ask("q3_compiler_automates").widget is None
    assert "] The host-side CPU memory allocation." in capsys.readouterr().out


def test_widgets_need_a_kernel_and_ipywidgets(monkeypatch):
    monkeypatch.setattr(IPython, "get_ipython", lambda: SimpleNamespace(kernel=object()))
    assert quiz.widgets_available()
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # as if it were not installed
    assert not quiz.widgets_available()
    monkeypatch.setattr(IPython, "get_ipython", lambda: SimpleNamespace())  # a terminal IPython
    monkeypatch.delitem(sys.modules, "ipywidgets")
    assert not quiz.widgets_available()


def test_kernel_display_carries_the_fallback_as_plain_text(monkeypatch):
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda bundle, raw: shown.append(bundle))
    widget = quiz.ask("q5_why_triton", rich=True)
    intro = quiz.case_study_intro(rich=True)
    widget._ipython_display_()  # a cell ending in ask(...) must not show it twice
    assert len(shown) == 2
    assert shown[0]["text/plain"] == widget.text()
    assert shown[0]["application/vnd.jupyter.widget-view+json"]["model_id"] == widget.widget.model_id
    assert shown[1] == {"text/markdown": intro.markdown, "text/plain": intro.markdown}


# --- case study --------------------------------------------------------------------------


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_reveal_shows_the_solution_only_on_request(case_id, capsys):
    text = quiz.load_quizzes()["case_study"]["questions"][case_id]["en"]
    widget = quiz.reveal(case_id, rich=True)
    area = widget.widget.children[-1]
    assert widget.revealed is None and area.value == ""
    assert text["solution"] not in widget.text() and text["question"] in widget.text()
    widget.button.click()
    assert widget.revealed == text["solution"]
    assert area.value.startswith("<b>The case study&#x27;s answer:</b> ") or area.value.startswith(
        "<b>The case study's answer:</b> ")
    capsys.readouterr()
    plain = quiz.reveal(case_id, rich=False)
    printed = capsys.readouterr().out
    assert text["solution"] not in printed and printed.endswith("call .show()\n")
    assert plain.show() == text["solution"]


def test_case_study_intro_is_markdown(capsys):
    intro = quiz.case_study_intro(rich=False)
    assert intro.markdown.startswith("### Case Study: Optimizing Softmax with Triton\n\n*Analyzing")
    assert "(Read -> Max -> Read -> Exp/Sum -> Read -> Divide)" in intro.markdown
    assert capsys.readouterr().out == intro.markdown + "\n"


@pytest.mark.parametrize("question_id", [q for q in quiz.load_quizzes()["questions"] if q.startswith("q") and q[1] in "12345" and q[2] == "_"])
def test_each_wrong_option_of_the_seed_quiz_says_why_it_is_wrong_before_the_seeds_feedback(question_id):
    question = quiz.load_quizzes()["questions"][question_id]
    for lang in ("en", "zh"):
        text = question[lang]
        for choice in range(len(text["options"])):
            if choice == question["correct"]:
                continue
            lines = quiz.grade(question_id, choice, lang).text.splitlines()
            assert lines[1:] == [text["why_not"][choice], text["wrong"]], lines


def test_a_why_not_out_of_step_with_its_options_is_refused(tmp_path, monkeypatch):
    data = yaml.safe_load((quiz.QUIZ_DIR / "seed.yaml").read_text(encoding="utf-8"))
    data["questions"]["q1_ninja_gap"]["zh"]["why_not"].reverse()  # the null lands on a wrong option
    (tmp_path / "seed.yaml").write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    monkeypatch.setattr(quiz, "QUIZ_DIR", tmp_path)
    quiz.load_quizzes.cache_clear()
    try:
        with pytest.raises(ValueError, match="q1_ninja_gap's why_not \\(zh\\)"):
            quiz.load_quizzes()
    finally:
        quiz.load_quizzes.cache_clear()
