"""Verdicts as small dataclasses, and the one renderer that turns them into text."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .language import say

NUMBER = re.compile(r"[-+]?(?:\d[\d,.]*(?:e[-+]?\d+)?|inf|nan)")
"""What two failures of one kind differ in: program ids, elements, counts, values."""


def case_mark(passed: bool) -> str:
    """How a case's verdict begins its line in :meth:`CheckResult.summary`."""
    return say("✅ passed") if passed else say("❌ failed")


def status_word(status: str) -> str:
    """A throughput status (``passed``, ``failed``, ``not measured``) in the language in use."""
    return {"passed": say("passed"), "failed": say("failed"), "not measured": say("not measured")}[status]


@dataclass
class CaseResult:
    """The verdict on one correctness case."""

    label: str
    """Shape and dtype, e.g. ``1025 float16``."""
    passed: bool
    message: str = ""
    """Why it failed, written for the student; empty when it passed."""
    brief: str = ""
    """Why it failed in the judge's words alone: nothing of the case's inputs (no shape, index or
    value) and nothing the student's code wrote or raised. A verdict on hidden cases shows this."""
    edge: bool = False
    """A case that shows nothing on its own: its answer takes no real work
    (:attr:`autograder.spec.Exercise.edge`), or its inputs are few enough to work it out on the host
    (:func:`autograder.correctness.readable_on_the_host`). It counts only beside a passed case that is not one."""
    kind: str = ""
    """What failed, as :func:`autograder.correctness.brief` names it (``values``, ``raised``, ...)."""


@dataclass
class ThroughputResult:
    """The verdict on speed against PyTorch."""

    status: str
    """``passed``, ``failed`` or ``not measured``."""
    message: str
    ratio: float | None = None
    """PyTorch's time / the student's time (above 1: faster than PyTorch)."""
    threshold: float | None = None
    student_rate: float | None = None
    """The student's GB/s (memory-bound exercises) or TFLOP/s (compute-bound ones)."""
    baseline_rate: float | None = None
    """PyTorch's, in the same unit."""
    peak_fraction: float | None = None
    """The student's rate over the device's ceiling: the measured copy bandwidth, or the
    measured ``torch.matmul`` rate for TFLOP/s."""
    unit: str = "GB/s"

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclass
class CheckResult:
    """Everything one check found; ``str()`` gives the summary students read."""

    exercise: str
    seed: int
    """Base seed of the random inputs: ``check(..., seed=...)`` replays them."""
    cases: list[CaseResult] = field(default_factory=list)
    throughput: ThroughputResult | None = None
    hidden: bool = False
    """A verdict on hidden cases: its summary counts them and gives their brief reasons, never
    a label, a seed or a case's own message (nbgrader's feedback lands on the student's disk)."""

    @property
    def edges_alone(self) -> bool:
        """Whether the cases that passed are all edge cases, which count for nothing on their own."""
        passed = [c for c in self.cases if c.passed]
        return bool(passed) and all(c.edge for c in passed)

    @property
    def fraction_passed(self) -> float:
        """The share of cases passed, 0 when only edge cases did."""
        if not self.cases or self.edges_alone:
            return 0.0
        return sum(c.passed for c in self.cases) / len(self.cases)

    @property
    def correct(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def passed(self) -> bool:
        return self.correct and (self.throughput is None or self.throughput.passed)

    def summary(self) -> str:
        """One line per case, its verdict in a mark and a word (fonts without emoji show the word),
        then why it failed; a failure like an earlier one (the same message but for its numbers:
        another program, element or value) is named once and then referred to. Hidden cases are
        counted, not listed (:attr:`hidden`)."""
        lines = self._hidden_lines() if self.hidden else self._case_lines()
        if self.throughput is not None:
            status = self.throughput.status
            mark = {"passed": "✅", "failed": "❌"}.get(status, "⚠️")
            message = self.throughput.message  # it may begin with its status, in either language
            for said in (status + ": ", status_word(status) + "："):
                message = message.removeprefix(said)
            lines.append(f"  {mark} " + say("throughput {status}: {message}", status=status_word(status), message=message))
        return "\n".join(lines)

    def _case_lines(self) -> list[str]:
        ok = sum(c.passed for c in self.cases)
        lines = [say("{exercise}: correctness {passed}/{cases} cases passed (seed {seed})",
                     exercise=self.exercise, passed=ok, cases=len(self.cases), seed=self.seed)]
        first_seen: dict[str, str] = {}
        for c in self.cases:
            lines.append(f"  {case_mark(c.passed)} {c.label}")
            if not c.message:
                continue
            kind = " ".join(NUMBER.sub("#", c.message).split())
            if kind in first_seen and c.kind != "values":  # how many elements differ, and where, tells bugs apart
                lines.append("     " + say("the same failure as the {label} case above", label=first_seen[kind]))
                continue
            first_seen[kind] = c.label
            lines.extend("     " + line for line in c.message.splitlines())
        if self.edges_alone:
            lines.append("  " + say("Only edge cases passed ({labels}). Such a case shows nothing on its own (its answer "
                                    "takes no real work, or its inputs are few enough to read one at a time and "
                                    "work the answer out on the host), so it counts only once another case passes too.",
                                    labels=", ".join(c.label for c in self.cases if c.passed)))
        return lines

    def _hidden_lines(self) -> list[str]:
        """How many hidden cases passed; each reason for the others once, with how many it took."""
        ok = sum(c.passed for c in self.cases)
        lines = [say("{exercise}: hidden tests, {passed}/{cases} cases passed",
                     exercise=self.exercise, passed=ok, cases=len(self.cases))]
        reasons: dict[str, int] = {}
        for c in self.cases:
            if not c.passed:
                reasons[c.brief] = reasons.get(c.brief, 0) + 1
        for brief, count in reasons.items():
            lines.append(f"  {case_mark(False)} " + say("{count} of {cases} cases", count=count, cases=len(self.cases)))
            lines.extend("     " + line for line in brief.splitlines())
        if self.edges_alone:
            lines.append("  " + say("Only edge cases passed. Such a case shows nothing on its own (its answer takes no "
                                    "real work, or its inputs are few enough to read one at a time and work the answer "
                                    "out on the host), so it counts only once another case passes too."))
        if reasons:
            lines.append("  " + say("Hidden cases stay hidden, and so does what went wrong in them. Try your "
                                    "function on shapes of your own: sizes that are not a multiple of your block "
                                    "size, a single element or row, the largest sizes you expect."))
        return lines

    __str__ = summary

    def __repr__(self) -> str:
        speed = f", throughput {self.throughput.status}" if self.throughput else ""
        ok = sum(c.passed for c in self.cases)
        return f"<CheckResult {self.exercise}: {ok}/{len(self.cases)} correct{speed}>"


def to_json(result: CheckResult) -> str:
    """The result as JSON, to cross a process boundary."""
    import dataclasses
    import json
    return json.dumps(dataclasses.asdict(result))


def from_json(text: str) -> CheckResult:
    import json
    data = json.loads(text)
    speed = data.pop("throughput")
    return CheckResult(cases=[CaseResult(**c) for c in data.pop("cases")],
                       throughput=ThroughputResult(**speed) if speed else None, **data)
