"""The Triton course's grader: device selection, checks, benchmarks, quizzes, plots and traces."""
from .check import check, grade
from .device import setup_device
from .memory_trace import trace

__all__ = ["check", "grade", "setup_device", "trace"]
