"""Answer cells an instructor should read: the course's rules on *how* an output is made (a
Triton kernel computed it, no PyTorch op did) run inside the student's own process, so code
that switches them off earns marks for correct outputs made any way. The judge's marks stay
as they are; :func:`review_notes` names what in the answer cells reaches for such a switch,
for ``grade_class``'s table and saved results. A name found is a reason to look, not proof:
an honest answer may use one, and a determined one may spell it so it is not found."""
from __future__ import annotations

import re
from pathlib import Path

from ..grading.cells import answer_code

REACHES = (
    (r"\bctypes\b|\bcffi\b|\bmmap\b|\b\w*dlpack\w*\b|\buntyped_storage\b|\.storage\(", "memory by address"),
    (r"_python_dispatch|_disable_current_modes|Dispatch(Mode|Key)|TorchFunctionMode|__torch_(function|dispatch)__"
     r"|torch\._C\b|torch\.ops\b|\baten\b|torch\.library\b|\bcustom_op\b|\bLibrary\s*\(",
     "PyTorch's dispatch internals, which record the ops it calls"),
    (r"\bautograder\b|\bsolutions\b|\bnbgrader\b", "the course's own grading code"),
    (r"\b(subprocess|multiprocessing|threading|signal|socket|asyncio|sysv_ipc|shmget|msgget|semget)\b"
     r"|os\.(fork\w*|system|popen|exec\w*|spawn\w*|posix_spawnp?|kill\w*)",
     "processes, threads, signals or sockets"),
    (r"\b(exec|eval|compile|__import__|getattr|setattr|globals|vars)\s*\(|\bimportlib\b|\bbuiltins\b"
     r"|__builtins__", "code or names built at run time"),
    (r"(?m)^[ \t]*(del[ \t]+)?(torch|triton|tl|np|numpy|F|JITFunction)(\.\w+)+[ \t]*(=(?!=)|$)",
     "a library's function replaced or removed"),  # a statement
    (r"\.__class__\s*=(?!=)", "an object's class changed"),
    (r"\btorch\.save\b|\bpickle\b|__reduce\w*|\bstruct\b|\bzipfile\b|\bio\.BytesIO\b", "a tensor's bytes serialised"),
    (r"__del__|\bweakref\b|\batexit\b|\bgc\.callbacks|addaudithook", "code that runs after a call returns"),
    (r"sys\.(argv|modules|_getframe|settrace|setprofile|exc_info)|\bsetitimer\b|/proc/|\bgc\.|\binspect\b|__code__|__globals__"
     r"|__traceback__|\btb_frame\b|\bf_back\b|\bf_locals\b|\bf_globals\b",
     "the process's internals"),
    (r"\b(fcntl|termios|pty|tty)\b|/dev/", "terminals and devices"),
    (r"\b(l?chmod|fchmod\w*|l?chown|fchown\w*|utime\w*|\w*setxattr|\w*removexattr|mq_open)\b",
     "a file's mode, owner, times or attributes, or a message queue"),
    (r"\.numpy\(|__array__|\.tolist\(|\bnumpy\b", "data taken to the host (NumPy, .tolist())"),
)
"""(pattern, what it reaches for): what the rules inside the student's process watch or rely on."""


MAX_REVIEWED_CHARS = 1_000_000
"""Of the answer cells, what is searched (each pattern reads it in linear time, in the
instructor's process, while a Ctrl-C waits): over 100 times the longest reference answer."""


def review_notes(notebooks: list[Path]) -> list[str]:
    """The notes for an instructor: one naming what the answer cells reach for, e.g. ``review by
    hand, the answer cells use: ctypes (memory by address)``, none when they reach for nothing
    listed in :data:`REACHES`; before it, one saying so when the cells were longer than
    :data:`MAX_REVIEWED_CHARS` and only their start was searched."""
    text = "\n".join(answer_code(path) for path in notebooks)
    partly = [f"answer cells of {len(text):,} characters: only the first {MAX_REVIEWED_CHARS:,} were searched "
              "for what to review"] if len(text) > MAX_REVIEWED_CHARS else []
    text, found = text[:MAX_REVIEWED_CHARS], []
    for pattern, what in REACHES:
        names = sorted({m.group(0).strip("(").strip() for m in re.finditer(pattern, text)})
        if names:
            found.append(f"{', '.join(names)} ({what})")
    return partly + (["review by hand, the answer cells use: " + "; ".join(found)] if found else [])
