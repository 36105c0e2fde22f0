"""Multiple-choice quizzes and case-study questions, in English or Chinese.

:func:`ask`, :func:`reveal` and :func:`case_study_intro` show their content as soon as they
are called: as ipywidgets in a Jupyter kernel, as plain text anywhere else. They return an
object that can be driven from Python the way a click drives it. :func:`grade` holds the
grading and knows nothing about widgets.
"""
from __future__ import annotations

import hashlib
import html
import importlib.util
import json
import random
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jsonschema
import yaml

from . import settings
from .language import get_language
QUIZ_DIR = Path(__file__).with_name("quizzes")
QUIZ_FILE = QUIZ_DIR / "seed.yaml"
"""The seed lesson's quiz and case study; lessons beyond the seed add ``<topic>.yaml`` files."""
SCHEMA_FILE = QUIZ_DIR / "schema.json"

_LABELS = {
    "en": {
        "check": "Check",
        "show": "Show the case study's answer",
        "right": "✅ Correct!",
        "wrong": "❌ Incorrect",
        "choose": "Choose an option first.",
        "solution": "The case study's answer:",
        "check_later": "Answer: run this cell in Jupyter, or call .check()",
        "show_later": "The case study's answer: run this cell in Jupyter, or call .show()",
    },
    "zh": {
        "check": "检查",
        "show": "显示案例研究的答案",
        "right": "✅ 正确！",
        "wrong": "❌ 不正确",
        "choose": "请先选择一个选项。",
        "solution": "案例研究给出的答案：",
        "check_later": "答案：请在 Jupyter 中运行此单元格，或调用 .check()",
        "show_later": "案例研究给出的答案：请在 Jupyter 中运行此单元格，或调用 .show()",
    },
}

STUDENT_VAR = settings.STUDENT.name

def validate(data: object, source: str = QUIZ_FILE.name) -> None:
    """Raise ValueError, naming the offending question id, unless ``data`` fits schema.json."""
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is not None:
        where = "/".join(map(str, error.absolute_path)) or "the top level"
        raise ValueError(f"{source}: invalid at {where}: {error.message}")


@cache
def load_quizzes() -> dict:
    """Every quiz file of ``quizzes/``, each validated, merged: ``{questions: ..., case_study: ...}``."""
    merged: dict = {"questions": {}}
    for path in sorted(QUIZ_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        validate(data, path.name)
        clash = merged["questions"].keys() & data["questions"].keys()
        if clash or ("case_study" in data and "case_study" in merged):
            raise ValueError(f"{path.name} repeats {', '.join(sorted(clash)) or 'case_study'}, "
                             "already defined in another quiz file")
        for name, question in data["questions"].items():
            for lang in ("en", "zh"):
                why_not = question[lang].get("why_not")
                if why_not is not None and (len(why_not) != len(question[lang]["options"])
                                            or [i for i, why in enumerate(why_not) if not why] != [question["correct"]]):
                    raise ValueError(f"{path.name}: {name}'s why_not ({lang}) needs one text per wrong option, "
                                     "in the options' order, and null for the right one")
        merged["questions"].update(data["questions"])
        if "case_study" in data:
            merged["case_study"] = data["case_study"]
    return merged


def _entry(table: dict, key: str) -> dict:
    if key not in table:
        raise ValueError(f"no quiz item {key!r}; known: {', '.join(table)}")
    return table[key]


@dataclass(frozen=True)
class QuizFeedback:
    """What Check says about one answer."""

    correct: bool
    """True only when the chosen option is the right one."""
    text: str
    """The verdict line and its explanation, or a request to choose an option first."""


def grade(question_id: str, choice: int | None, lang: str) -> QuizFeedback:
    """The feedback on choosing option ``choice`` (0-based; None: nothing chosen)."""
    question = _entry(load_quizzes()["questions"], question_id)
    labels, text = _LABELS[lang], question[lang]
    if choice is None:
        return QuizFeedback(False, labels["choose"])
    if choice == question["correct"]:
        return QuizFeedback(True, f"{labels['right']}\n{text['right']}")
    why_not = text.get("why_not", [None] * len(text["options"]))[choice]
    return QuizFeedback(False, "\n".join([labels["wrong"], *([why_not] if why_not else []), text["wrong"]]))


def shown_order(question_id: str, count: int) -> tuple[int, ...]:
    """The order this student sees the options of ``question_id`` in, as indices into the stored
    options: shuffled by the student's name and the question, so the same on every run and
    different between students (all five of the seed's right answers are its second option)."""
    student = settings.STUDENT.get()
    seed = int.from_bytes(hashlib.sha256(f"{student}/{question_id}".encode()).digest()[:8], "big")
    order = list(range(count))
    random.Random(seed).shuffle(order)
    return tuple(order)


def widgets_available() -> bool:
    """True inside a Jupyter kernel with ipywidgets installed: there the frontend draws widgets."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    # A kernel's shell has a .kernel; a terminal IPython or plain python has none.
    in_kernel = getattr(get_ipython(), "kernel", None) is not None
    return in_kernel and importlib.util.find_spec("ipywidgets") is not None


def _html(text: str) -> str:
    """Plain text as HTML, with `code` spans and line breaks kept."""
    escaped = html.escape(text, quote=False)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped).replace("\n", "<br>")


class _Shown:
    """Base of what ask(), reveal() and case_study_intro() return: shown once, when made."""

    rich: bool
    """True: shown as widgets (or Markdown); False: printed as :meth:`text`."""
    _shown = False

    def text(self) -> str:
        """The readable plain-text form: printed outside Jupyter, kept by static exports."""
        raise NotImplementedError

    def _rich_bundle(self) -> dict:
        raise NotImplementedError

    def _show(self) -> None:
        self._shown = True
        if not self.rich:
            print(self.text())
            return
        from IPython.display import display

        # text/plain is what an export without widget state (nbconvert, GitHub) shows.
        display({**self._rich_bundle(), "text/plain": self.text()}, raw=True)

    def _ipython_display_(self) -> None:
        # A cell that ends in ask(...) would otherwise show the same quiz twice.
        if not self._shown:
            self._show()


class QuizWidget(_Shown):
    """One multiple-choice question; :meth:`select` and :meth:`check` do what the clicks do."""

    def __init__(self, question_id: str, lang: str, rich: bool):
        self.question_id, self.lang, self.rich = question_id, lang, rich
        self._text = _entry(load_quizzes()["questions"], question_id)[lang]
        self.order = shown_order(question_id, len(self._text["options"]))
        """The stored index of each option, in the order shown."""
        self.choice: int | None = None
        """The stored index of the selected option; None until one is selected."""
        self.feedback: QuizFeedback | None = None
        """The last :meth:`check`'s feedback."""
        self.widget = self._build() if rich else None
        """The ipywidgets container; None when shown as text."""

    def _build(self):
        import ipywidgets as w

        labels = _LABELS[self.lang]
        self.options = w.RadioButtons(options=self._shown_options(), index=None, layout={"width": "max-content"})
        """The options in the order shown (widgets only); nothing is selected at first."""
        self.options.observe(lambda change: setattr(self, "choice", None if change["new"] is None
                                                    else self.order[change["new"]]), names="index")
        self.button = w.Button(description=labels["check"], button_style="primary")
        """The Check button (widgets only); a click calls :meth:`check`."""
        self.button.on_click(lambda _button: self.check())
        self._verdict = w.HTML()
        question = w.HTML(f"<b>{_html(self._text['question'])}</b>")
        return w.VBox([question, self.options, self.button, self._verdict])

    def _shown_options(self) -> list[str]:
        return [self._text["options"][i] for i in self.order]

    def select(self, index: int) -> None:
        """Select the option shown at ``index`` (0-based, as numbered in :meth:`text`)."""
        if not 0 <= index < len(self._text["options"]):
            raise IndexError(f"{self.question_id} has options 0..{len(self._text['options']) - 1}, not {index}")
        self.choice = self.order[index]
        if self.widget is not None:
            self.options.index = index

    def check(self) -> QuizFeedback:
        """Grade the selected option and show the feedback under the question."""
        self.feedback = grade(self.question_id, self.choice, self.lang)
        if self.widget is not None:
            self._verdict.value = _html(self.feedback.text)
        return self.feedback

    def text(self) -> str:
        options = [f"  [{i}] {option}" for i, option in enumerate(self._shown_options())]
        return "\n".join([self._text["question"], *options, _LABELS[self.lang]["check_later"]])

    def _rich_bundle(self) -> dict:
        return self.widget._repr_mimebundle_()

    def __repr__(self) -> str:
        return f"<QuizWidget {self.question_id} ({self.lang})>"


class SolutionWidget(_Shown):
    """One case-study question whose worked solution appears on :meth:`show` or a click."""

    def __init__(self, case_id: str, lang: str, rich: bool):
        self.case_id, self.lang, self.rich = case_id, lang, rich
        self._text = _entry(load_quizzes()["case_study"]["questions"], case_id)[lang]
        self.revealed: str | None = None
        """The solution once shown; None before."""
        self.widget = self._build() if rich else None
        """The ipywidgets container; None when shown as text."""

    def _build(self):
        import ipywidgets as w

        self.button = w.Button(description=_LABELS[self.lang]["show"])
        """The Show solution button (widgets only); a click calls :meth:`show`."""
        self.button.on_click(lambda _button: self.show())
        self._solution = w.HTML()
        question = w.HTML(f"<b>{_html(self._text['question'])}</b>")
        return w.VBox([question, self.button, self._solution])

    def show(self) -> str:
        """Reveal the solution and return it."""
        self.revealed = self._text["solution"]
        if self.widget is not None:
            self._solution.value = f"<b>{_LABELS[self.lang]['solution']}</b> {_html(self.revealed)}"
        return self.revealed

    def text(self) -> str:
        return f"{self._text['question']}\n{_LABELS[self.lang]['show_later']}"

    def _rich_bundle(self) -> dict:
        return self.widget._repr_mimebundle_()

    def __repr__(self) -> str:
        return f"<SolutionWidget {self.case_id} ({self.lang})>"


class CaseStudyIntro(_Shown):
    """The case study's title, subtitle and scenario, as Markdown."""

    def __init__(self, lang: str, rich: bool):
        self.lang, self.rich = lang, rich
        intro = load_quizzes()["case_study"]["intro"][lang]
        self.markdown = f"### {intro['title']}\n\n*{intro['subtitle']}*\n\n{intro['scenario']}"

    def text(self) -> str:
        return self.markdown

    def _rich_bundle(self) -> dict:
        return {"text/markdown": self.markdown}

    def __repr__(self) -> str:
        return f"<CaseStudyIntro ({self.lang})>"


def ask(question_id: str, *, rich: bool | None = None) -> QuizWidget:
    """Show multiple-choice question ``question_id`` in the current language.

    ``rich``: True for widgets, False for plain text, None to use widgets where
    :func:`widgets_available` says they can be drawn.
    """
    quiz = QuizWidget(question_id, get_language(), _rich(rich))
    quiz._show()
    return quiz


def reveal(case_id: str, *, rich: bool | None = None) -> SolutionWidget:
    """Show case-study question ``case_id`` with a button that reveals its solution."""
    case = SolutionWidget(case_id, get_language(), _rich(rich))
    case._show()
    return case


def case_study_intro(*, rich: bool | None = None) -> CaseStudyIntro:
    """Show the case study's scenario as Markdown."""
    intro = CaseStudyIntro(get_language(), _rich(rich))
    intro._show()
    return intro


def _rich(rich: bool | None) -> bool:
    return widgets_available() if rich is None else rich
