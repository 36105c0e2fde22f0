"""The Triton course's grader: device selection, checks, benchmarks, quizzes, plots and traces."""
from .check import check, grade
from .device import setup_device
from .memory_trace import trace
from .language import say, set_language

__all__ = ["check", "grade", "say", "set_language", "setup_device", "trace"]
