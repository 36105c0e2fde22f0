"""Verdicts as small dataclasses, and the one renderer that turns them into text."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CaseResult:
    """The verdict on one correctness case."""

    label: str
    """Shape and dtype, e.g. ``1025 float16``."""
    passed: bool
    message: str = ""
    """Why it failed, written for the student; empty when it passed."""


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

    @property
    def fraction_passed(self) -> float:
        return sum(c.passed for c in self.cases) / len(self.cases) if self.cases else 0.0

    @property
    def correct(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def passed(self) -> bool:
        return self.correct and (self.throughput is None or self.throughput.passed)

    def summary(self) -> str:
        ok = sum(c.passed for c in self.cases)
        lines = [f"{self.exercise}: correctness {ok}/{len(self.cases)} cases passed (seed {self.seed})"]
        previous = ""
        for c in self.cases:
            lines.append(f"  {'✅' if c.passed else '❌'} {c.label}")
            text = "(same as above)" if c.message and c.message == previous else c.message
            lines.extend("     " + line for line in text.splitlines())
            previous = c.message
        if self.throughput is not None:
            mark = {"passed": "✅", "failed": "❌"}.get(self.throughput.status, "⚠️")
            lines.append(f"  {mark} throughput: {self.throughput.message}")
        return "\n".join(lines)

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
