"""Every environment variable the course reads, each declared once: name, meaning, values, default.

``settings.DEVICE.get()`` reads a variable when called, never at import, so one set later (by
a test, or a notebook's ``%env``) counts; a value it does not accept raises ValueError with a
sentence naming the variable and what it accepts. Other programs' variables (``TRITON_INTERPRET``,
``NBGRADER_EXECUTION``, ``CUDA_VISIBLE_DEVICES``, ...) are read where they are used.

``triton-course sync`` writes the table of them in docs/instructor-guide.md; ``--check`` only
reports whether it drifted.
"""
from __future__ import annotations

import getpass
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable."""

    name: str
    """The variable, ``TRITON_COURSE_...``."""
    meaning: str
    """What it does, in one sentence."""
    values: str
    """What it accepts, in words: the guide's table shows it, a bad value's error advises it."""
    default: str
    """What unset (or blank) means, in words."""
    parse: Callable[[str], T]
    """The value of the variable's stripped text (``""``: unset); ValueError for a bad one."""

    def get(self) -> T:
        """The value now."""
        text = os.environ.get(self.name, "").strip()
        try:
            return self.parse(text)
        except ValueError:
            raise ValueError(f"{self.name}={text!r}: use {self.values}; unset means {self.default}.") from None


def _choice(name: str, meaning: str, *choices: str) -> Setting[str]:
    """A setting that is one of ``choices``, in any case; unset: the first."""
    def parse(text: str) -> str:
        if (value := text.lower() or choices[0]) not in choices:
            raise ValueError(value)
        return value
    return Setting(name, meaning, "one of " + ", ".join(choices), choices[0], parse)


TEST_LIMIT_S = 240
"""A class-sized limit for one graded test: the slowest reference test (PS4's, first compile and
autotuning included) took 77 s on the H200; nbgrader's own cell limit (nbgrader_config.py) is above it."""


def _seconds(text: str) -> float:
    seconds = float(text or TEST_LIMIT_S)
    if not 0 < seconds < math.inf:
        raise ValueError(text)
    return seconds


PROCESSES = 4096
"""The grading user's processes and threads, every runner together: a student's runner had at most
3 threads grading PS1 on the CPU (CUDA adds a few of its own on a GPU), so this leaves room for
hundreds of runners and stops a fork bomb at an eighth of Linux's smallest default table of
process ids (32,768)."""


def _count(text: str) -> int:
    count = int(text or PROCESSES)
    if count < 1:
        raise ValueError(text)
    return count


def _gib(text: str) -> float:
    if not text:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2 / 2**30
    gib = float(text)
    if not 0 <= gib < math.inf:
        raise ValueError(text)
    return gib


DEVICE = _choice(
    "TRITON_COURSE_DEVICE",
    "Where kernels run: `gpu` (compiled), `cpu` (Triton's interpreter) or `auto`, the GPU when PyTorch sees one.",
    "auto", "gpu", "cpu")
CPU_THROUGHPUT = _choice(
    "TRITON_COURSE_CPU_THROUGHPUT",
    "What a throughput test scores when grading has no GPU: `fail` 0 points, `award` full points "
    "to a submission whose correctness cases all pass.",
    "fail", "award")
LANGUAGES = ("en", "zh")
"""The languages the quizzes are written in."""
LANG = _choice(
    "TRITON_COURSE_LANG",
    "The language of quizzes, checks, grading verdicts and plots, until a notebook calls `set_language`; "
    "at `nbgrader generate_assignment`, the language the problem set is released in.",
    *LANGUAGES)
STUDENT = Setting(
    "TRITON_COURSE_STUDENT",
    "Whose option order the quizzes show (shuffled per student and question).",
    "any name", "the login name (a JupyterHub user's)",
    lambda text: text or getpass.getuser())
ISOLATE = _choice(
    "TRITON_COURSE_ISOLATE",
    "`1` grades with the judge (the student's code in a confined process) outside nbgrader too; "
    "nbgrader's autograde always does.",
    "0", "1")
GRADING_TIMEOUT_S = Setting(
    "TRITON_COURSE_GRADING_TIMEOUT_S",
    "Seconds one graded test may take, the runner's start and the timing included.",
    "a number of seconds above 0", str(TEST_LIMIT_S), _seconds)
MEMORY_LIMIT_GB = Setting(
    "TRITON_COURSE_MEMORY_LIMIT_GB",
    "Most memory (GiB, `RLIMIT_DATA`) one grading process may use.",
    "a number of GiB, 0 for no cap", "half the machine's memory", _gib)
GRADING_USER = Setting(
    "TRITON_COURSE_GRADING_USER",
    "An unprivileged account (e.g. `nobody`) to run the student's code as, when grading runs as root.",
    "an account name", "the grader's own user",
    lambda text: text or None)
PROCESS_LIMIT = Setting(
    "TRITON_COURSE_PROCESS_LIMIT",
    "Most processes and threads the grading user may have at once (`RLIMIT_NPROC`), every runner "
    "of a class run together; binds only where a grading user is set.",
    "a whole number above 0", str(PROCESSES), _count)
READABLE_PATHS = Setting(
    "TRITON_COURSE_READABLE_PATHS",
    "More folders a grading process may read under Landlock, for libraries installed off the usual "
    "places (a CUDA toolkit under `/opt`).",
    "folders separated by `:`", "none",
    lambda text: [Path(p) for p in text.split(os.pathsep) if p])
NOTEBOOK_OUTPUTS = Setting(
    "TRITON_COURSE_NOTEBOOK_OUTPUTS",
    "A file the test suite appends every lesson's text outputs and measured figures to "
    "(`scripts/gpu_run.sh` sets it; `python -m autograder.figures FILE` reads the figures back).",
    "a file path", "nothing recorded",
    lambda text: Path(text) if text else None)
GRADING_RECORD = Setting(
    "TRITON_COURSE_GRADING_RECORD",
    "A file the judge appends each graded test's seed to (a JSON line: notebook, exercise, cases, seed), kept from "
    "the student's code; `check(EXERCISE, fn, cases=..., seed=...)` replays those inputs. `grade_class` "
    "sets it and saves the seeds with each student's grade.",
    "a file path", "nothing recorded",
    lambda text: Path(text) if text else None)
WORKER_CPUS = Setting(
    "TRITON_COURSE_WORKER_CPUS",
    "The CPUs a grading worker's nbgrader, kernels and runners keep to: `grade_class` shares the machine's out "
    "when each of several workers gets two or more, so that busy processes one student's code starts slow no "
    "one graded beside them (a runner may not move).",
    "CPU numbers separated by `,`", "every CPU this process may use",
    lambda text: {int(cpu) for cpu in text.split(",")} if text else None)
SETTINGS = (DEVICE, CPU_THROUGHPUT, LANG, STUDENT, ISOLATE, GRADING_TIMEOUT_S, MEMORY_LIMIT_GB,
            GRADING_USER, PROCESS_LIMIT, READABLE_PATHS, NOTEBOOK_OUTPUTS, GRADING_RECORD, WORKER_CPUS)

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "instructor-guide.md"
BEGIN = "<!-- settings table: generated from autograder/settings.py by `triton-course sync` -->"
END = "<!-- end of settings table -->"


def table() -> str:
    """The guide's Markdown table of every setting."""
    rows = [f"| `{s.name}` | {s.default} | {s.values} | {s.meaning} |" for s in SETTINGS]
    return "\n".join(["| Variable | Unset | Values | What it does |", "|---|---|---|---|", *rows])


def sync_guide(write: bool = True) -> list[str]:
    """Put :func:`table` between the guide's markers; return what was (or would be) changed."""
    text = GUIDE.read_text(encoding="utf-8")
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not (begin and end):
        raise ValueError(f"{GUIDE} has no '{BEGIN}' ... '{END}' block for the settings table")
    new = f"{head}{BEGIN}\n{table()}\n{END}{tail}"
    if new == text:
        return []
    if write:
        GUIDE.write_text(new, encoding="utf-8")
    return [f"{GUIDE.name}: the settings table"]


def main(argv: list[str]) -> int:
    """``triton-course sync``'s last step: write the guide's table; ``--check``: exit 1 if it drifted."""
    check = "--check" in argv
    changes = sync_guide(write=not check)
    for change in changes:
        print(("drifted: " if check else "updated: ") + change)
    return 1 if (changes and check) else 0
