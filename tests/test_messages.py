"""The message catalogue: every sentence the course gives to ``say`` has its Chinese, with the
same placeholders, and the catalogue keeps no sentence the code no longer says."""
import ast
import re
import string
from pathlib import Path

import nbformat
import pytest

from autograder import language
from autograder.language import say, set_language
import kit

PACKAGE = Path(language.__file__).parent
ROOT = PACKAGE.parent


def notebook_code() -> list[tuple[str, ast.Module]]:
    """(where, syntax tree) of every code cell of the English lessons and problem sets (the Chinese
    ones run the same code), IPython's magics turned into Python."""
    from IPython.core.inputtransformer2 import TransformerManager
    cells = []
    for path in [*sorted((ROOT / "notebooks").glob("*.ipynb")), *sorted((ROOT / "source").glob("*/*.ipynb"))]:
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code":
                cells.append((f"{path.name} cell {i}", ast.parse(TransformerManager().transform_cell(cell.source))))
    return cells


def calls_of(name: str, trees) -> list[tuple[str, ast.expr | None]]:
    """(where, first argument) of every call of ``name`` (a function or a method) in ``trees``."""
    return [(f"{where}:{node.lineno}", node.args[0] if node.args else None)
            for where, tree in trees for node in ast.walk(tree)
            if isinstance(node, ast.Call) and name in (getattr(node.func, "id", None), getattr(node.func, "attr", None))]


NOTEBOOKS = notebook_code()
PACKAGE_CODE = [(str(path.relative_to(PACKAGE)), ast.parse(path.read_text())) for path in sorted(PACKAGE.rglob("*.py"))]
CALLS = calls_of("say", PACKAGE_CODE) + calls_of("say", NOTEBOOKS) + calls_of("label", NOTEBOOKS)
"""Every sentence the catalogue must hold: the package's say(), the notebooks' say() and label()."""


def placeholders(text: str) -> set[tuple[str, str]]:
    return {(name, spec) for _, name, spec, _ in string.Formatter().parse(text) if name is not None}


def test_the_course_speaks_through_say():
    assert len(CALLS) >= 20, CALLS


def test_every_sentence_given_to_say_is_a_literal():
    loose = [where for where, arg in CALLS if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str))]
    assert not loose, f"say() and label() need the sentence itself (the catalogue is keyed by it), at: {loose}"


FIGURE_TEXT_METHODS = {"set_title", "set_xlabel", "set_ylabel", "suptitle", "text", "annotate"}
WORD = re.compile(r"[A-Za-z]{3,}")


def _typed(node: ast.expr) -> list[str]:
    """The string literals with a word in them that ``node`` shows as typed, not through say() or label()."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) and WORD.search(node.value) else []
    parts = {ast.JoinedStr: lambda n: n.values, ast.FormattedValue: lambda n: [n.value],
             ast.BinOp: lambda n: [n.left, n.right], ast.IfExp: lambda n: [n.body, n.orelse]}.get(type(node))
    if parts is None and isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("format", "join"):
        parts = lambda n: [n.func.value]  # noqa: E731 - "...".format(...), ", ".join(...)
    return [text for part in parts(node) for text in _typed(part)] if parts else []


def test_every_text_of_a_lessons_own_figure_goes_through_label():
    typed = [f"{where}:{node.lineno}" for where, tree in NOTEBOOKS for node in ast.walk(tree) if isinstance(node, ast.Call)
             for arg in [*(node.args if getattr(node.func, "attr", None) in FIGURE_TEXT_METHODS else ()),
                         *(k.value for k in node.keywords if k.arg and (k.arg.endswith(("label", "title")) or
                                                                        k.arg in ("x_unit", "ceiling_name")))]
             if _typed(arg)]
    assert not typed, ("a figure text typed in English stays English in the Chinese lesson: pass it through "
                       f"autograder.plots.label (and give it its Chinese in autograder/messages/lessons.yaml) at: {typed}")


def test_every_sentence_a_notebook_prints_goes_through_say():
    typed = [f"{where}:{node.lineno} {texts}" for where, tree in NOTEBOOKS for node in ast.walk(tree)
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print"
             for texts in [[text for arg in node.args for text in _typed(arg)]] if texts]
    assert not typed, ("a sentence a notebook prints in English stays English in its Chinese version: pass it through "
                       "autograder.language.say (its Chinese in autograder/messages/notebook_output.yaml) at:\n"
                       + "\n".join(typed))


def test_every_refusal_a_lesson_raises_goes_through_say():
    # raise X("...") and assert ..., "..." in the lessons' code: what a student passing a wrong input reads
    # (a problem set's own are in its solution regions, which its students never see)
    typed = [f"{where}:{node.lineno} {texts}" for where, tree in NOTEBOOKS if not where.startswith("ps")
             for node in ast.walk(tree)
             for message in ([node.msg] if isinstance(node, ast.Assert) and node.msg is not None else
                             node.exc.args if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) else [])
             for texts in [_typed(message)] if texts]
    assert not typed, "a refusal typed in English stays English in the Chinese lesson: pass it through say() at:\n" + \
        "\n".join(typed)


def test_a_spoken_sentence_keeps_its_columns_in_every_language(monkeypatch):
    monkeypatch.setattr(language, "catalogue", lambda: {"step": {"zh": "步骤"}})
    english = f"{say('step'):>8}|{say('step'):<6}|"
    set_language("zh")
    assert (english, f"{say('step'):>8}|{say('step'):<6}|") == ("    step|step  |", "    步骤|步骤  |")


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




def test_a_check_reads_in_chinese_once_the_language_is_chinese():
    from autograder import check
    wrong = lambda x, y: x - y  # noqa: E731 - a vector add that subtracts
    english = check("vector_add", wrong, measure_throughput=False, verbose=False).summary()
    set_language("zh")
    chinese = check("vector_add", wrong, measure_throughput=False, verbose=False).summary()
    assert not kit.CJK.search(english) and kit.CJK.search(chinese), chinese


def test_without_a_chinese_font_figures_stay_english_and_say_so_once(monkeypatch, capsys):
    from autograder import plots
    monkeypatch.setattr(plots, "cjk_fonts", lambda: [])
    plots._english_figures_said.cache_clear()
    set_language("zh")
    for _ in range(2):
        fig = plots.bar_gbps({"a": 1.0, "b": 2.0}, ceiling_gbps=3.0)
    texts = " ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))
    assert "copy bandwidth" in texts and not kit.CJK.search(texts), texts
    assert capsys.readouterr().out.count("fonts-noto-cjk") == 1
    assert say("✅ passed") != "✅ passed"  # the rest still speaks Chinese


def test_with_a_chinese_font_figures_are_labelled_in_chinese(monkeypatch):
    from autograder import plots
    monkeypatch.setattr(plots, "cjk_fonts", lambda: ["Noto Sans CJK SC"])
    set_language("zh")
    fig = plots.bar_gbps({"a": 1.0, "b": 2.0}, ceiling_gbps=3.0)
    assert kit.CJK.search(" ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))))


def test_a_font_installed_after_matplotlib_cached_its_list_is_found(monkeypatch):
    # as after `apt-get install fonts-noto-cjk` on a machine where matplotlib already ran; played
    # with matplotlib's own DejaVu Sans, so that it runs where no CJK font is installed (CI)
    from matplotlib import font_manager
    from autograder import plots
    bundled = font_manager.findfont("DejaVu Sans")
    monkeypatch.setattr(font_manager.fontManager, "ttflist",
                        [f for f in font_manager.fontManager.ttflist if f.name != "DejaVu Sans"])
    monkeypatch.setattr(font_manager, "findSystemFonts", lambda: [bundled])
    monkeypatch.setattr(plots, "CJK_FONTS", ("DejaVu Sans",))
    plots._add_uncached_fonts.cache_clear()
    try:
        assert plots.cjk_fonts() == ["DejaVu Sans"]
    finally:
        plots._add_uncached_fonts.cache_clear()


def test_a_lessons_own_figure_text_follows_the_language_and_the_fonts(monkeypatch):
    import matplotlib
    from autograder import plots
    monkeypatch.setattr(plots, "cjk_fonts", lambda: [])
    set_language("zh")
    assert plots.label("tile {i}", i=3) == "tile 3"  # boxes otherwise
    monkeypatch.setattr(plots, "cjk_fonts", lambda: ["Noto Sans CJK SC"])
    with matplotlib.rc_context():
        set_language("zh")  # before the figures are made: a text's fonts are fixed when it is
        assert plots.label("tile {i}", i=3) == "分块 3"
        assert matplotlib.rcParams["font.family"][-1] == "Noto Sans CJK SC"  # for the glyphs DejaVu Sans lacks


def test_no_lesson_cell_rebinds_label_where_later_cells_would_see_it():
    scoped = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
              ast.DictComp, ast.GeneratorExp)

    def bound(node) -> list[int]:
        if isinstance(node, scoped):
            return []
        here = [node.lineno] if isinstance(node, ast.Name) and node.id == "label" and isinstance(node.ctx, ast.Store) else []
        return here + [line for child in ast.iter_child_nodes(node) for line in bound(child)]

    rebound = [f"{where}:{line}" for where, tree in NOTEBOOKS for line in bound(tree)]
    assert not rebound, f"a notebook-level `label` hides autograder.plots.label from the cells after it: {rebound}"
