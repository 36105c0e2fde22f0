"""The runner: the one process that runs a student's code while it is graded.

It caps its memory and imports the course; then (a student's runner, once the judge says
``begin``: the judge may be timing the baseline meanwhile) creates its CUDA context,
confines itself (:mod:`.confine`), runs the notebook's setup and answer cells, and then
serves the judge over the channel it was given: each request names inputs by a case and a
seed (the runner draws them as the judge drew its own: no input crosses the channel), the
runner calls the student's function on them under the course's rules
(:func:`autograder.correctness.call_student`) and sends back the outputs (with the
gradients, for an exercise that has them): their bytes, or on a GPU their device memory
(:mod:`.ipc`). It decides nothing: whatever it sends is checked by the judge, and anything
it leaves out is a failure.

``python -m autograder.grading.runner CELLS.json EXERCISE FD`` is its entry point (the cells as
:func:`.cells.graded_cells` gives them), the channel being file descriptor FD; with
``--reference`` it serves the exercise's PyTorch reference instead of any student's code,
which the judge times as the baseline.
"""
from __future__ import annotations

import __future__
import argparse
import functools
import itertools
import json
import linecache
import operator
import os
import socket
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

from ..language import say
from . import confine, protocol, sandbox
from .cells import PYTHON_MAGICS, as_python

HIDDEN_PACKAGES = ("solutions",)
"""Not importable by the student's code while it is graded: the reference kernels."""
READY_TIMEOUT_S = 3600
"""How long the runner waits for the judge's next request before it gives up and exits."""
MAX_MESSAGE_CHARS = 4000
"""The most of a message the runner sends the judge (an exception's, say): the rest is cut."""


def clipped(reply: dict) -> dict:
    """``reply`` with its messages for the student (``problem``, ``error``) cut to
    :data:`MAX_MESSAGE_CHARS`: a message of megabytes would be more than the judge accepts."""
    def clip(text):
        if not isinstance(text, str) or len(text) <= MAX_MESSAGE_CHARS:
            return text
        return text[:MAX_MESSAGE_CHARS] + say("… ({more:,} more characters)", more=len(text) - MAX_MESSAGE_CHARS)
    return {key: clip(value) if key in ("problem", "error") else value for key, value in reply.items()}


class _HiddenPackages:
    """An import hook that refuses :data:`HIDDEN_PACKAGES`, wherever they are installed."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in HIDDEN_PACKAGES:
            raise ModuleNotFoundError(say("No module named {module!r}: the reference solutions cannot be imported "
                                          "while your work is graded", module=name), name=name)
        return None


class NoShell:
    """What ``get_ipython()`` gives the answer cells in a runner, which is no IPython: the
    magics and shell lines a notebook may hold reach it as calls (:func:`.cells.answer_cells`).
    The Python of :data:`.cells.PYTHON_MAGICS` (``%time out = f(x)``, a ``%%capture`` cell) runs
    once, untimed, in ``__main__``, as Jupyter would run it; anything else (``%matplotlib
    inline``, ``!pip list``, a ``%%bash`` cell) does nothing while the cells are graded."""

    def run_line_magic(self, name: str, line: str, *args, **kwargs):
        if name not in PYTHON_MAGICS:
            return None
        code = as_python(line)
        name, namespace = _filed(code), vars(sys.modules["__main__"])
        try:  # an expression gives its value (``out = %time f(x)``), a statement runs
            return eval(_compiled(code, name, "eval"), namespace)
        except SyntaxError:
            exec(_compiled(code, name), namespace)
            return None

    def run_cell_magic(self, name: str, line: str, cell: str, *args, **kwargs) -> None:
        if name in PYTHON_MAGICS:
            code = as_python(cell)
            exec(_compiled(code, _filed(code)), vars(sys.modules["__main__"]))

    def _nothing(self, *args, **kwargs) -> None:
        return None

    system = getoutput = _nothing


def shown_nowhere(*objects, **options) -> None:
    """IPython's ``display()``, which every notebook cell can call: while the cells are graded
    their output is not kept, so it shows nothing."""


_MAGICS_RUN = itertools.count()


_FUTURE_FLAGS = functools.reduce(operator.or_, (getattr(__future__, feature).compiler_flag
                                                for feature in __future__.all_feature_names))
_futures_in_force = 0


def _compiled(source: str, filename: str, mode: str = "exec"):
    """``source`` compiled as IPython compiles a cell: with the ``from __future__`` imports of the
    cells before it, and none of this module's own (``compile`` would inherit them)."""
    global _futures_in_force
    code = compile(source, filename, mode, flags=_futures_in_force, dont_inherit=True)
    _futures_in_force |= code.co_flags & _FUTURE_FLAGS
    return code


def _filed(code: str, name: str | None = None) -> str:
    """The name ``code`` is filed under in ``linecache`` (``name`` in angle brackets, else one of
    its own), as IPython files a cell: Triton reads a kernel's source through ``inspect``, which
    finds it there, and a traceback shows its lines."""
    name = f"<{name}>" if name else f"<answer magic {next(_MAGICS_RUN)}>"
    linecache.cache[name] = (len(code), None, code.splitlines(keepends=True), name)
    return name


def run_answer(cells: list[tuple[str, str]]) -> tuple[dict, str | None]:
    """Run the setup and answer cells, each a name and its Python, as a notebook would (module
    ``__main__``), each compiled on its own under its name (a traceback says ``answer-cell-2``,
    line 3), a ``from __future__`` import in force from its cell on (:func:`_compiled`); their
    namespace, and why they failed if they did."""
    module = types.ModuleType("__main__")
    module.get_ipython, module.display = NoShell, shown_nowhere
    sys.modules["__main__"] = module
    sys.meta_path.insert(0, _HiddenPackages)
    try:
        for name, source in cells:
            exec(_compiled(source, _filed(source, name)), vars(module))
        return vars(module), None
    except Exception as exc:  # the answer cells fail when run on their own
        from ..correctness import where_it_ran
        detail = (say("{message}: `{line}` ({cell}, line {number})", message=exc.msg, line=exc.text.strip(),
                      cell=exc.filename.strip("<>"), number=exc.lineno)
                  if isinstance(exc, SyntaxError) and exc.text and exc.filename else exc)
        error = "\n".join([say("your answer cells raised {error_type} when run on their own: {detail}",
                                error_type=type(exc).__name__, detail=detail), *where_it_ran(exc)])
        if sandbox.ran_out_of_memory(error):
            error = say("your code {memory}: {error}", memory=sandbox.memory_note(), error=error)
        return vars(module), error


@dataclass
class Surroundings:
    """What runs beside a call, taken before the answer cells run: Python threads, and code
    set to run later (:func:`~autograder.guards.later_code`)."""

    threads: set[int]
    later: dict[str, object]

    @classmethod
    def now(cls) -> Surroundings:
        from ..guards import later_code
        return cls(set(sys._current_frames()), later_code())


def interference(exercise, before: Surroundings) -> dict | None:
    """A reply saying what the student's code did around its calls that the runner cannot vouch
    for (a library function replaced; a Python thread left running that was not there before the
    answer cells ran, which the call's watch does not see; code set to run later, where no watch
    is), or None. Asked after the outputs are made, just before they are sent."""
    from ..correctness import library_problem
    from ..guards import later_code
    if problem := library_problem(exercise):
        return {"problem": problem, "kind": "rule"}
    if set(sys._current_frames()) - before.threads:
        return {"problem": say("`{function}` left a thread running. Grading watches the calling thread only: "
                               "compute in your Triton kernel, launched from it.", function=exercise.function),
                "kind": "rule"}
    if changed := [name for name, value in later_code().items() if before.later.get(name) != value]:
        return {"problem": say("`{function}` left code set to run later ({names}). Grading watches your "
                               "function while it runs: compute in your Triton kernel, launched from it.",
                               function=exercise.function, names=", ".join(changed[:3])), "kind": "rule"}
    return None


def unsendable(exercise, case, outs: tuple, max_bytes: int | None = None) -> dict | None:
    """A reply for outputs the channel cannot carry (:data:`.protocol.DTYPES`, at most
    :data:`.protocol.MAX_DIMS` dimensions, sizes below :data:`.protocol.MAX_LAYOUT_VALUE`, at
    most ``max_bytes`` in all, the judge's bound from PyTorch's result), worded as the judge
    words a wrong dtype or shape; else None. Sent, they would end the runner, and with it every
    case after this one."""
    held = sum(out.numel() * out.element_size() for out in outs)
    if max_bytes is not None and held > max_bytes:
        return {"problem": say("the outputs hold {got:,} bytes, more than PyTorch's result would hold even in "
                               "float64 ({want:,}): check the output's shape.", got=held, want=max_bytes),
                "kind": "shape"}
    for out in outs:
        if any(n >= protocol.MAX_LAYOUT_VALUE for n in out.shape):
            return {"problem": say("output shape is {got}, far larger than PyTorch's result.", got=tuple(out.shape)),
                    "kind": "shape"}
        if str(out.dtype).removeprefix("torch.") not in protocol.DTYPES:
            got = out.dtype
            message = (say("output dtype is {got}, expected {want}.", got=got, want=exercise.output_dtype)
                       if exercise.output_dtype else
                       say("output dtype is {got}, expected {want} (the inputs' dtype).", got=got, want=case.dtype))
            return {"problem": message, "kind": "dtype"}
        if out.dim() > protocol.MAX_DIMS:
            return {"problem": say("the output has {count} dimensions, more than PyTorch's result has.",
                                   count=out.dim()), "kind": "shape"}
    return None


def fresh_copy(t):
    """``t``'s elements, contiguous, through PyTorch's own methods (``TensorBase``'s, which no
    Python code can replace), not ``torch.Tensor``'s."""
    import torch

    return torch._C.TensorBase.contiguous(torch._C.TensorBase.detach(t))


class Server:
    """The requests a runner answers: ``call`` (one correctness case), ``prepare`` and
    ``run`` (a timed batch), ``ping``."""

    def __init__(self, exercise, fn, device: str, before: Surroundings, judged: bool = True):
        self.exercise, self.fn, self.device, self.before = exercise, fn, device, before
        self.judged = judged
        """False for the PyTorch baseline, whose batches are watched only to cost what the student's do."""
        self.earlier, self.batch, self.outputs = [], [], []
        self.handed = []
        """The last case's outputs, while the judge may still be reading them."""

    def call(self, header: dict, tensors: list):
        """Draw the case's inputs from the judge's seed, as the judge drew its own; call the
        function on them. The outputs go back as bytes, or on a GPU as device memory the judge
        maps (:mod:`.ipc`), kept until the next request."""
        import pickle

        import torch

        from ..correctness import GuardZones, call_student, copy_input
        from . import ipc
        case = pickle.loads(bytes.fromhex(header["case"]))  # written by the judge
        inputs = self.exercise.make_inputs(case, torch.Generator(self.device).manual_seed(header["seed"]),
                                           self.device)
        zones = GuardZones() if self.device == "cuda" else None
        given = tuple(copy_input(t, zones) if isinstance(t, torch.Tensor) else t for t in inputs)
        outs, problem = call_student(self.exercise, self.fn, given, case.label, self.device, self.earlier, zones,
                                     all_threads=True)
        if problem is not None:
            return {"problem": problem.message, "kind": problem.kind}, []
        if reply := unsendable(self.exercise, case, outs, header.get("max_bytes")):
            return reply, []
        if self.device != "cuda":  # the elements alone: a view sends every byte its strides span
            handed = [fresh_copy(o) for o in outs]
            return interference(self.exercise, self.before) or {"problem": None}, handed
        self.handed = [fresh_copy(o) for o in outs]
        torch.cuda.synchronize()
        return (interference(self.exercise, self.before)
                or {"problem": None, "outputs": [ipc.export(o) for o in self.handed]}), []

    def prepare(self, header: dict, tensors: list):
        """Make a batch's inputs from the judge's seeds, where the timed case lives."""
        import torch

        case = self.exercise.throughput.case
        self.outputs = []
        self.batch = [self.exercise.make_inputs(case, torch.Generator(self.device).manual_seed(seed), self.device)
                      for seed in header["seeds"]]
        torch.cuda.synchronize()
        return {}, []

    def run(self, header: dict, tensors: list):
        """Call the function on every prepared input, back to back; hand over the outputs, call
        by call (each call's in the order of the exercise's ``outputs``)."""
        import torch

        from ..correctness import integrity_problem
        from ..guards import watch
        from . import ipc
        if header.get("again"):  # the last batch's outputs, handed over once more (the baseline's)
            return {"outputs": [ipc.export(o) for o in self.outputs]}, []
        self.outputs = []
        # Every batch under the rules, the baseline's too (the same cost on both sides of the race):
        # a function that could tell a watched batch from a timed one would compute with PyTorch in
        # the timed ones. Fresh tensors are not filled with NaN here, which would add a write of
        # each output to the time; the judge checks every call's outputs instead.
        with watch(self.exercise.allowed_ops, all_threads=True, fill=False) as record:
            outs = [o for inputs in self.batch for o in self.exercise.call(self.fn, inputs)]
            plain = all(type(o) is torch.Tensor and o.is_cuda and o.numel() for o in outs)
            with record.graders_own():
                self.outputs = [fresh_copy(o) for o in outs] if plain else []
        if self.judged and (problem := integrity_problem(self.exercise, record)) is not None:
            return {"problem": problem, "kind": "rule"}, []
        if not plain:
            return {"problem": say("`{function}` did not return a tensor on the GPU",
                                   function=self.exercise.function), "kind": "not_on_gpu"}, []
        torch.cuda.synchronize()
        if self.judged and (problem := interference(self.exercise, self.before)):
            return problem, []
        return {"outputs": [ipc.export(o) for o in self.outputs]}, []

    def ping(self, header: dict, tensors: list):
        return {}, []


def serve(channel: socket.socket, server: Server) -> None:
    """Answer requests until the judge says ``quit`` or goes away. A request's failure that is
    the student's (an exception in their function) is a reply, never an exit."""
    from ..correctness import explain_exception
    while True:
        try:
            header, tensors = protocol.recv(channel, time.monotonic() + READY_TIMEOUT_S, 1 << 40, server.device)
        except protocol.ProtocolError:
            return
        op = header.get("op")
        if op == "quit":
            return
        try:
            reply, out = getattr(server, op)(header, tensors)
        except Exception as error:  # the student's function failed outside call_student's guard
            problem = explain_exception(server.exercise, error)
            reply, out = {"problem": problem.message, "kind": problem.kind}, []
        protocol.send(channel, clipped(reply), out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="run a student's answer cells for the judge (internal)")
    parser.add_argument("cells", type=Path, help="the setup and answer cells: a JSON list of [name, Python]")
    parser.add_argument("exercise")
    parser.add_argument("fd", type=int, help="the channel to the judge")
    parser.add_argument("--reference", action="store_true", help="serve the PyTorch reference instead")
    parser.add_argument("--processes", type=int, help="the most processes and threads of this user (given to "
                                                      "the grading user's runners)")
    args = parser.parse_args(argv)
    channel = socket.socket(fileno=args.fd)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # CPU ops on the calling thread only

    sandbox.limit_resources(args.processes)
    from .. import device, exercises, guards
    where = device.setup_device(verbose=False)  # before the student's @triton.jit
    exercise = exercises.get(args.exercise)
    if not args.reference:  # the judge may be timing the baseline: no CUDA context, no student code yet
        try:
            header, _ = protocol.recv(channel, time.monotonic() + READY_TIMEOUT_S, 0)
        except protocol.ProtocolError:
            return 0
        if header.get("op") != "begin":
            return 0
    if where.has_gpu:
        device.start_cuda()  # and before confining: the driver opens its files here
    if args.reference:
        protocol.send(channel, {"error": None})
        serve(channel, Server(exercise, exercise.reference, where.device, Surroundings.now(), judged=False))
        return 0
    cache = os.environ.get("TRITON_CACHE_DIR")  # this student's own (judge.compile_cache)
    try:
        confine.confine(Path.cwd(), *([Path(cache)] if cache else []))  # before anything of the student's is read
        confine.drop_privileges()
    except confine.ConfinementError as error:
        protocol.send(channel, {"error": say("grading could not confine your code ({error}), so none of it ran: "
                                             "tell your instructor.", error=error)})
        return 0
    guards.count_audit_hooks()
    before = Surroundings.now()
    from .. import correctness
    correctness.ANSWER_CELLS_ALONE = True  # a missing name is then most likely one from another cell
    namespace, error = run_answer([(str(name), str(source)) for name, source in json.loads(args.cells.read_text())])
    fn = namespace.get(exercise.function)
    if error is None and fn is None:
        error = say("your answer cells define no function `{function}`.", function=exercise.function)
    protocol.send(channel, clipped({"error": error}))
    if error is None:
        serve(channel, Server(exercise, fn, where.device, before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
