"""The language the course speaks to a student, and its sentences in each language.

Every sentence a student reads (check and grading verdicts, hints, the device banner, plot
titles and labels) is written in English in the code and passed through :func:`say`, which
looks it up in the catalogue, ``autograder/messages/*.yaml``: lists of ``{en, zh}`` pairs, one
file per part of the course, placeholders in ``str.format``'s syntax. The lessons' own figures
label themselves through :func:`autograder.plots.label`, from the same catalogue
(``messages/lessons.yaml``); the notebooks print through :func:`say`
(``messages/notebook_output.yaml``). tests/test_messages.py fails when a sentence given to
:func:`say` or ``label`` has no Chinese, or its Chinese drops or adds a placeholder. (Not
gettext: its .mo files need a build step, and this catalogue is read and checked like the
course's other translation tables, glossary included.)
"""
from __future__ import annotations

import contextlib
import functools
import re
import unicodedata
from pathlib import Path
from typing import Callable

import yaml

from . import settings

LANGUAGES = settings.LANGUAGES
CATALOGUE_DIR = Path(__file__).with_name("messages")

_language: str | None = None
"""Set by :func:`set_language`; None until then, so TRITON_COURSE_LANG decides."""


_followers: list[Callable[[str], None]] = []
"""Called with the language each time :func:`set_language` sets one."""


def set_language(lang: str) -> None:
    """Use ``lang`` ("en" or "zh") for everything shown from now on: quizzes, checks, hints."""
    global _language
    if lang not in LANGUAGES:
        raise ValueError(f"unknown language {lang!r} passed to set_language(); "
                         f"choose one of: {', '.join(LANGUAGES)}")
    _language = lang
    for follow in _followers:
        follow(lang)


def follow_language(follow: Callable[[str], None]) -> None:
    """Call ``follow`` with the language in use now, and again whenever :func:`set_language` changes it."""
    _followers.append(follow)
    follow(get_language())


def get_language() -> str:
    """The language in use: the last :func:`set_language`, else $TRITON_COURSE_LANG, else "en"."""
    return _language if _language is not None else settings.LANG.get()


@contextlib.contextmanager
def speaking(lang: str):
    """Inside the block, :func:`say` speaks ``lang``; the language in use before comes back after."""
    global _language
    before, _language = _language, lang
    try:
        yield
    finally:
        _language = before


@functools.cache
def catalogue() -> dict[str, dict[str, str]]:
    """English sentence → its other languages, from every file of the catalogue."""
    entries = [e for path in sorted(CATALOGUE_DIR.glob("*.yaml")) for e in yaml.safe_load(path.read_text()) or []]
    return {e["en"]: {lang: text for lang, text in e.items() if lang != "en"} for e in entries}


class Spoken(str):
    """A sentence :func:`say` returns. Formatted to a width (``f"{say('step'):>10}"``) it pads by
    the columns a terminal gives it, where a Chinese character takes two, so tables line up in
    every language."""

    _WIDTH = re.compile(r"^((?:.?[<>=^])?[-+ ]?z?#?0?)(\d+)")

    def __format__(self, spec: str) -> str:
        wide = sum(unicodedata.east_asian_width(c) in "WF" for c in self)
        match = self._WIDTH.match(spec)
        if wide and match:
            spec = f"{match[1]}{max(int(match[2]) - wide, 0)}{spec[match.end():]}"
        return format(str(self), spec)


def say(template: str, /, **values) -> Spoken:
    """``template`` in the language in use, its placeholders filled from ``values``. A sentence
    the catalogue lacks stays English (a test keeps the catalogue complete)."""
    return Spoken(translated(template, get_language()).format(**values))


def translated(template: str, lang: str) -> str:
    """``template`` (English, placeholders unfilled) in ``lang``, from the catalogue."""
    return template if lang == "en" else catalogue().get(template, {}).get(lang, template)
