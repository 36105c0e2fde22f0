"""What a student's own code prints during ``check``, kept to its first lines.

``tl.device_print`` in Triton's interpreter prints a line for every lane of every program, so
one check of a kernel left with a debugging print writes hundreds of thousands of lines, more
than a notebook's browser tab can hold. Lines past :data:`MAX_LINES` are counted, not shown.
"""
from __future__ import annotations

import contextlib
import sys

from .language import say

MAX_LINES = 200


class _FirstLines:
    """A text stream that passes the first ``limit`` lines on to ``stream`` and counts the rest."""

    def __init__(self, stream, limit: int):
        self.stream, self.room, self.newlines_left_out, self.unfinished = stream, limit, 0, False

    def write(self, text: str) -> int:
        written = len(text)
        if self.room > 0:
            lines = text.split("\n")
            shown = "\n".join(lines[:self.room]) + ("\n" if len(lines) > self.room else "")
            self.stream.write(shown)
            self.room -= shown.count("\n")
            text = text[len(shown):]
        if text:
            self.newlines_left_out += text.count("\n")
            self.unfinished = not text.endswith("\n")
        return written

    @property
    def left_out(self) -> int:
        """Lines not shown, a last one without its newline included."""
        return self.newlines_left_out + self.unfinished

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name):  # isatty, encoding, ... as the stream has them
        return getattr(self.stream, name)


@contextlib.contextmanager
def first_lines(limit: int = MAX_LINES):
    """Within the block, ``sys.stdout`` shows ``limit`` lines; then one line says how many more
    were left out."""
    kept = _FirstLines(sys.stdout, limit)
    with contextlib.redirect_stdout(kept):
        yield
    if kept.left_out:
        print(say("({count:,} more lines that your code printed are left out; the first {limit} are above.)",
                  count=kept.left_out, limit=limit))


def aside(text: str) -> None:
    """Print the course's own ``text`` now, past :func:`first_lines`' limit and count."""
    print(text, file=sys.stdout.stream if isinstance(sys.stdout, _FirstLines) else sys.stdout, flush=True)
