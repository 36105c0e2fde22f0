"""The message catalogue: every sentence the course gives to ``say`` has its Chinese, with the
same placeholders, and the catalogue keeps no sentence the code no longer says."""
import ast
import re
import string
from pathlib import Path

import pytest

from autograder import language
from autograder.language import say, set_language

PACKAGE = Path(language.__file__).parent


def said() -> list[tuple[str, ast.expr | None]]:
    """(where, first argument) of every call of ``say`` in the package."""
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and "say" in (getattr(node.func, "id", None), getattr(node.func, "attr", None)):
                calls.append((f"{path.relative_to(PACKAGE)}:{node.lineno}", node.args[0] if node.args else None))
    return calls


CALLS = said()


def placeholders(text: str) -> set[tuple[str, str]]:
    return {(name, spec) for _, name, spec, _ in string.Formatter().parse(text) if name is not None}


def test_the_course_speaks_through_say():
    assert len(CALLS) >= 20, CALLS


def test_every_sentence_given_to_say_is_a_literal():
    loose = [where for where, arg in CALLS if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str))]
    assert not loose, f"say() needs the sentence itself (the catalogue is keyed by it), at: {loose}"


@pytest.mark.parametrize("lang", [lang for lang in language.LANGUAGES if lang != "en"])
def test_every_sentence_has_a_translation_with_the_same_placeholders(lang):
    catalogue = language.catalogue()
    missing = [f"{where}: {arg.value!r}" for where, arg in CALLS if lang not in catalogue.get(arg.value, {})]
    assert not missing, f"no {lang} in autograder/messages/ for:\n" + "\n".join(missing)
    differ = [en for en, other in catalogue.items() if placeholders(en) != placeholders(other[lang])]
    assert not differ, f"placeholders differ between English and {lang}: {differ}"


def test_the_catalogue_holds_no_sentence_the_code_no_longer_says():
    stale = set(language.catalogue()) - {arg.value for _, arg in CALLS}
    assert not stale, stale


def test_say_fills_placeholders_in_the_language_in_use(monkeypatch):
    monkeypatch.setattr(language, "catalogue", lambda: {"{n} cases passed": {"zh": "通过了 {n} 个用例"}})
    assert say("{n} cases passed", n=3) == "3 cases passed"
    set_language("zh")
    assert say("{n} cases passed", n=3) == "通过了 3 个用例"
    assert say("not in the catalogue: {x}", x=1) == "not in the catalogue: 1"


CJK = re.compile(r"[\u4e00-\u9fff]")


def test_a_check_reads_in_chinese_once_the_language_is_chinese():
    from autograder import check
    wrong = lambda x, y: x - y  # noqa: E731 - a vector add that subtracts
    english = check("vector_add", wrong, measure_throughput=False, verbose=False).summary()
    set_language("zh")
    chinese = check("vector_add", wrong, measure_throughput=False, verbose=False).summary()
    assert not CJK.search(english) and CJK.search(chinese), chinese


def test_without_a_chinese_font_figures_stay_english_and_say_so_once(monkeypatch, capsys):
    from autograder import plots
    monkeypatch.setattr(plots, "cjk_fonts", lambda: [])
    plots._english_figures_said.cache_clear()
    set_language("zh")
    for _ in range(2):
        fig = plots.bar_gbps({"a": 1.0, "b": 2.0}, ceiling_gbps=3.0)
    texts = " ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))
    assert "copy bandwidth" in texts and not CJK.search(texts), texts
    assert capsys.readouterr().out.count("fonts-noto-cjk") == 1
    assert say("✅ passed") != "✅ passed"  # the rest still speaks Chinese


def test_with_a_chinese_font_figures_are_labelled_in_chinese(monkeypatch):
    from autograder import plots
    monkeypatch.setattr(plots, "cjk_fonts", lambda: ["Noto Sans CJK SC"])
    set_language("zh")
    fig = plots.bar_gbps({"a": 1.0, "b": 2.0}, ceiling_gbps=3.0)
    assert CJK.search(" ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))))
