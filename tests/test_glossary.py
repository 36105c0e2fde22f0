"""The Chinese texts (translations, quizzes, messages, docs/*.zh.md) follow one glossary
(docs/glossary.yaml): no rendering it rules out, and no glossary term that no text uses."""
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = yaml.safe_load((ROOT / "docs" / "glossary.yaml").read_text())
CHINESE_FILES = sorted({*ROOT.glob("notebooks/zh/translations/*.yaml"), *ROOT.glob("student/zh/translations/*.yaml"),
                        *ROOT.glob("autograder/quizzes/*.yaml"), *ROOT.glob("autograder/messages/*.yaml")})


def strings(node) -> list[str]:
    if isinstance(node, dict):
        node = list(node.values())
    return [s for v in node for s in strings(v)] if isinstance(node, list) else [node] if isinstance(node, str) else []


def chinese(node) -> list[str]:
    """Every string under a ``zh`` key (or a code cell's ``comments``), at any depth."""
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (strings(v) if k in ("zh", "comments") else chinese(v))]
    return [s for v in node for s in chinese(v)] if isinstance(node, list) else []


TEXTS = {path.relative_to(ROOT).as_posix(): "\n".join(chinese(yaml.safe_load(path.read_text())))
         for path in CHINESE_FILES} | {path.relative_to(ROOT).as_posix(): path.read_text()
                                      for path in ROOT.glob("docs/*.zh.md")}


def test_every_file_with_chinese_is_read():
    assert len([t for t in TEXTS.values() if t]) >= 10, sorted(TEXTS)


@pytest.mark.parametrize("term", GLOSSARY, ids=lambda t: t["en"])
def test_no_text_uses_a_rendering_the_glossary_rules_out(term):
    found = [f"{name}: …{text[max(m.start() - 15, 0):m.end() + 15]}…"
             for pattern in term.get("avoid", ()) for name, text in TEXTS.items()
             if name not in term.get("except_in", ()) for m in re.finditer(pattern, text)]
    assert not found, f"'{term['en']}' is {term['zh']} in this course:\n" + "\n".join(found)


@pytest.mark.parametrize("term", GLOSSARY, ids=lambda t: t["en"])
def test_every_term_is_used(term):
    everything = "\n".join(TEXTS.values())
    assert all(part.strip() in everything for part in term["zh"].split("/")), term["zh"]


def test_the_check_sees_a_ruled_out_rendering():
    term = next(t for t in GLOSSARY if "封装函数" in t.get("avoid", ()))
    assert any(re.search(p, "补全下面的内核和封装函数") for p in term["avoid"])
