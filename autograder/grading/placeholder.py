"""The name nbgrader's kernel holds for the function under test while it autogrades. A module
of its own, light to import: the kernel and a student's ``grade`` cell import it, and neither
needs nbgrader or nbformat (importing them costs about 2 s a student)."""
from __future__ import annotations

from ..language import say


class GradedElsewhere:
    """What nbgrader's kernel holds for the function under test while it autogrades: ``grade``
    takes the function from the notebook file instead."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return say("<{function}: graded from the notebook's answer cells, in a runner process>", function=self.name)

    def __call__(self, *args, **kwargs):
        raise RuntimeError(say("`{function}` does not run in nbgrader's kernel: only the graded cells do, and they "
                               "have the answer cells run in a runner process.", function=self.name))
