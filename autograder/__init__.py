"""The Triton course's grader: device selection, checks, benchmarks, quizzes and plots."""
from .check import check, grade
from .device import setup_device

__all__ = ["check", "grade", "setup_device"]
