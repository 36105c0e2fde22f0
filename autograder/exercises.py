"""The course's exercises, declared once: one module each in ``assignments`` (the nbgrader
problem sets), ``lesson_exercises`` (the lessons' practice) and ``lesson_kernels`` (what the
lessons' own kernels are checked against). Look one up with :func:`get`."""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from . import assignments, lesson_exercises, lesson_kernels
from .language import say
from .spec import Exercise


def _declared_in(package: ModuleType) -> list[Exercise]:
    """``EXERCISE`` of every module of ``package``, in name order."""
    return [importlib.import_module(f"{package.__name__}.{m.name}").EXERCISE
            for m in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name)]


ASSIGNMENTS = {ex.name: ex for ex in _declared_in(assignments)}
EXERCISES = {**ASSIGNMENTS, **{ex.name: ex for package in (lesson_exercises, lesson_kernels)
                              for ex in _declared_in(package)}}


def get(name: str | Exercise) -> Exercise:
    """The exercise called ``name`` (or ``name`` itself if it is one), with a helpful typo error."""
    if isinstance(name, Exercise):
        return name
    try:
        return EXERCISES[name]
    except KeyError:
        raise KeyError(say("no exercise {name!r}; the course has: {names}", name=name,
                           names=", ".join(EXERCISES))) from None
