"""Correctness against the PyTorch reference, with failures a student can act on."""
from __future__ import annotations

import functools
import inspect
import linecache
import re
import traceback
from typing import NamedTuple

import torch

from .guards import (DATA_MOVEMENT_OPS, LIBRARY_DIRS, MAX_SCALAR_READS, DataRace, GuardZones, KernelTimeout,
                     OutOfBoundsAccess, gpu_dot_precision, kernel_line, kernel_line_of, raised_inside,
                     replaced_functions, time_limit, unwritten, watch)
from .language import say
from .report import CaseResult
from .spec import Case, Exercise

_INVALID_GRADIENT = re.compile(r"invalid gradient at index (\d+) - got \[([^\]]*)\] but expected shape compatible "
                               r"with \[([^\]]*)\]")
"""PyTorch's autograd, on a backward that returned a gradient of the wrong shape."""
SHOWN_MISMATCHES = 5
STILL_RUNNING_NOTICE_S = 15.0
"""After this long, a self-check says that a call is still running, and what is likely (``check``
only: a graded cell must print nothing unexpected)."""
_CUDA_FAULT = re.compile(r"illegal memory access|misaligned address|unspecified launch failure"
                         r"|device-side assert|illegal instruction", re.IGNORECASE)
"""CUDA errors after which the process's CUDA context is unusable: every later call fails."""


class Problem(NamedTuple):
    """Why a case failed: the message a student reads in their own check and the visible tests,
    and its kind, all that a verdict on hidden cases says of it (:func:`brief`)."""

    message: str
    kind: str


def brief(kind: str, function: str) -> str:
    """The judge's own sentence for a kind of failure: nothing of the case's inputs and nothing
    the student's code wrote. A kind it does not know (a runner may send anything) reads as
    ``raised``."""
    sentences = {
        "shape": say("the output's shape is not the shape of PyTorch's result."),
        "dtype": say("the output's dtype is not the inputs' dtype."),
        "values": say("elements differ from PyTorch's result by more than the tolerance."),
        "signature": say("`{function}` cannot be called with the exercise's arguments.", function=function),
        "not_written": say("`{function}` is not written yet (it raised NotImplementedError).", function=function),
        "compile": say("Triton could not compile your kernel."),
        "out_of_bounds": say("your kernel accessed memory outside the tensors: a missing or wrong mask?"),
        "race": say("your kernel has a race: a program read an element that another program of the same launch "
                    "wrote."),
        "cuda_fault": say("your kernel faulted on the GPU, most often from an address outside every tensor."),
        "time": say("`{function}` did not finish within the time limit of one call.", function=function),
        "rule": say("`{function}` broke one of the exercise's rules on how an output is made.", function=function),
        "not_on_gpu": say("`{function}` did not return a tensor on the GPU.", function=function),
    }
    return sentences.get(kind) or say("`{function}` raised an exception.", function=function)


def not_run_after_fault() -> str:
    """Why a case after a CUDA fault was not run, in the language in use."""
    return say("not run: an earlier case broke this process's CUDA context (see that case).")


def signature_problem(exercise: Exercise, fn, args) -> str | None:
    """A sentence saying why ``fn`` cannot be called with ``args``, or None."""
    if not callable(fn):
        return say("expected a function `{signature}`, got {type}.", signature=exercise.signature,
                   type=type(fn).__name__)
    try:
        inspect.signature(fn).bind(*args)
    except TypeError:
        return say("`{name}` cannot be called as `{signature}`.", name=getattr(fn, '__name__', fn),
                   signature=exercise.signature)
    except ValueError:
        pass  # no introspectable signature (a builtin): the call itself will tell
    return None


def run_cases(exercise: Exercise, call, cases: tuple[Case, ...], seed: int, device: str) -> list[CaseResult]:
    """Make fresh inputs for every case (drawn on ``device``: on a GPU, a seed gives the same
    inputs on the same kind of GPU and PyTorch), have ``call(case, seed, inputs)`` run the
    student's function on them (in this process, :class:`InProcess`, or in a runner, which
    draws the same inputs from the case and seed, :mod:`autograder.grading`) and judge what
    comes back against the reference. ``call`` returns ``(outputs, problem)``, the
    outputs those of :meth:`~autograder.spec.Exercise.call`;
    ``problem`` a :class:`Problem`; after a problem that ends the process (``call.ended``, in brief
    ``call.ended_brief``), the remaining cases are not run, nor after a CUDA fault unless
    ``call.restart()`` gives them a new process, nor after a call that ran out of time, nor
    once this process's CUDA context is found broken (a fault in an earlier check). Every
    failure also gets its brief (:attr:`CaseResult.brief`)."""
    results, ended = [], None
    for i, case in enumerate(cases):
        if ended:
            results.append(CaseResult(case.label, False, *ended, edge=exercise.is_edge(case)))
            continue
        try:
            inputs = exercise.make_inputs(case, torch.Generator(device).manual_seed(seed + i), device)
        except RuntimeError as error:  # a sticky CUDA error: nothing can run on this GPU in this process
            if not is_cuda_fault(str(error)):
                raise
            ended = (say("not run: this process's CUDA context was broken by an earlier fault on the GPU, perhaps in "
                         "an earlier check. Restart the kernel (Kernel > Restart) and check again."),) * 2
            results.append(CaseResult(case.label, False, *ended, edge=exercise.is_edge(case)))
            continue
        outs, problem = call(case, seed + i, inputs)
        if problem is None:
            problem = judge_output(exercise, case, inputs, outs)
        edge = exercise.is_edge(case) or readable_on_the_host(inputs)
        if problem is None:
            results.append(CaseResult(case.label, True, edge=edge))
            continue
        said = call.ended_brief if call.ended else brief(problem.kind, exercise.function)
        results.append(CaseResult(case.label, False, problem.message, said, edge=edge, kind=problem.kind))
        if call.ended:
            ended = (call.ended, call.ended_brief)
        elif problem.kind == "cuda_fault" and not call.restart():
            ended = (not_run_after_fault(),) * 2
        elif problem.kind == "time":  # in this process: the next case would most likely wait as long
            ended = (say("not run: an earlier case did not finish within the time limit of one call (see that "
                         "case)."),) * 2
    return results


def readable_on_the_host(inputs: tuple) -> bool:
    """Whether a case's inputs hold so few values that a function may read them all one at a
    time (:data:`~autograder.guards.MAX_SCALAR_READS`) and work the answer out on the host: such
    a case, like an :attr:`~autograder.spec.Exercise.edge` one, counts only beside another."""
    return sum(t.numel() for t in inputs if isinstance(t, torch.Tensor)) <= MAX_SCALAR_READS


def is_cuda_fault(text: str) -> bool:
    """Whether an error message is a CUDA fault that leaves the context unusable."""
    return _CUDA_FAULT.search(text) is not None


class InProcess:
    """Calls the student's function in this process: the self-check's way, best effort (the
    function could change anything here, the checker included)."""

    ended = ended_brief = None
    """Never set: a crash here ends the notebook's kernel, not one case."""
    stray: OutOfBoundsAccess | None = None
    """The first out-of-bounds access a case made, with its launch (``check`` draws its trace)."""

    def __init__(self, exercise: Exercise, fn, device: str, notice: bool = False):
        """``notice``: print a note when a call has run :data:`STILL_RUNNING_NOTICE_S`."""
        self.exercise, self.device, self.earlier = exercise, device, []
        self.notice_after = STILL_RUNNING_NOTICE_S if notice else None
        self.fn = functools.wraps(fn)(self._keeping_stray(fn)) if callable(fn) else fn

    def _keeping_stray(self, fn):
        def call(*args):
            try:
                return fn(*args)
            except OutOfBoundsAccess as error:
                self.stray = self.stray or error
                raise
        return call

    @staticmethod
    def restart() -> bool:
        """Never: a CUDA fault here breaks the notebook's own CUDA context."""
        return False

    def __call__(self, case: Case, seed: int, inputs):
        zones = GuardZones() if self.device == "cuda" else None
        given = tuple(copy_input(t, zones) if isinstance(t, torch.Tensor) else t for t in inputs)
        return call_student(self.exercise, self.fn, given, case.label, self.device, self.earlier, zones,
                            notice_after=self.notice_after)


def copy_input(t: torch.Tensor, zones: GuardZones | None = None) -> torch.Tensor:
    """A copy of ``t``'s whole storage, viewed like ``t`` (a kernel that strays into the gaps
    between strided rows reads what it would have read in the original), in guard zones if given."""
    if zones is not None:
        return zones.place(t, say("an input"))
    flat = torch.empty(t.untyped_storage().nbytes() // t.element_size(), dtype=t.dtype, device=t.device)
    flat.untyped_storage().copy_(t.untyped_storage())
    return flat.as_strided(t.size(), t.stride(), t.storage_offset())


def call_student(exercise: Exercise, fn, given: tuple, label: str, device: str, earlier: list,
                 zones: GuardZones | None = None, all_threads: bool = False,
                 notice_after: float | None = None) -> tuple[tuple | None, Problem | None]:
    """Call ``fn`` on ``given`` (the case ``label``) under the course's rules, its backward too
    for an exercise with gradients (:meth:`~autograder.spec.Exercise.call`): ``(outputs, None)``,
    or ``(None, why not)`` when it raised, broke a rule, or returned no fresh tensor. ``earlier`` keeps the
    outputs of earlier calls (a reused buffer is refused); ``all_threads``: see
    :func:`~autograder.guards.watch`; ``notice_after``: see :func:`~autograder.guards.time_limit`."""
    if (problem := signature_problem(exercise, fn, exercise.arguments(given))) is not None:
        return None, Problem(problem, "signature")
    before = [t.clone() for t in _tensors(given)]
    what = say("`{function}` on {label}", function=exercise.function, label=label)  # for the time limit's message
    # float32 graded on a GPU: its tl.dot's default precision is TF32 there, and here too
    tf32 = device == "cpu" and any(c.dtype == torch.float32 for c in exercise.visible_cases.get("cuda", ()))
    try:
        with time_limit(exercise.time_limit_s, what, notice_after), gpu_dot_precision(tf32), \
                watch(exercise.allowed_ops, zones, all_threads) as record:
            made = exercise.call(fn, given)
            if device == "cuda":
                torch.cuda.synchronize()
            # Still watched: past here no code of the student's may run. A tensor subclass would
            # run its own methods in the checks below, and the outputs are copied now (a copy
            # that faults, reading a bogus output, is the call's fault too).
            foreign = _subclassed(exercise, given, made)
            with record.graders_own():
                outs = made if foreign else tuple(_copy(out) for out in made)
                if device == "cuda":
                    torch.cuda.synchronize()
    except Exception as error:  # the student's code: every failure becomes a message
        problem = explain_exception(exercise, error)
        if problem.kind == "race" and (changed := _changed_inputs(before, _tensors(given))):
            problem = Problem(changed, "rule")  # a kernel writing into an input races with its own loads
        return None, problem
    # what it returned first: a NumPy array returned is a slip of its own, whatever .numpy() broke
    if problem := next(filter(None, (_not_a_tensor(exercise, name, out) for name, out in zip(exercise.outputs, made))),
                       None):
        return None, Problem(problem, "rule")
    if problem := foreign or integrity_problem(exercise, record) or library_problem(exercise):
        return None, Problem(problem, "rule")
    if zones is not None and (damage := zones.damage()):
        return None, Problem(damage, "out_of_bounds")
    if problem := (_changed_inputs(before, _tensors(given))
                   or next(filter(None, (_not_a_fresh_tensor(exercise, name, out, given, earlier)
                                         for name, out in zip(exercise.outputs, made))), None)):
        return None, Problem(problem, "rule")
    earlier.extend(made)
    return outs, None


def _subclassed(exercise: Exercise, given: tuple, made: tuple) -> str | None:
    """Which input or output is an instance of a subclass of ``torch.Tensor`` (``type()``, which
    no class can fake, not ``isinstance``), or None: its class's methods would run the
    student's code wherever the grader touches it."""
    for i, t in enumerate(given):
        if type(t) is not torch.Tensor and isinstance(t, torch.Tensor):
            return say("`{function}` changed the class of input {i} to {type}: leave the inputs plain torch.Tensor objects.",
                       function=exercise.function, i=i, type=type(t).__name__)
    for name, t in zip(exercise.outputs, made):
        if type(t) is not torch.Tensor and isinstance(t, torch.Tensor):
            found = dict(function=exercise.function, name=name[1:], type=type(t).__name__)
            return (say("`{function}` returned an object of class {type}: return a plain torch.Tensor.", **found)
                    if name == "y" else
                    say("`{function}`'s backward gave the gradient for {name} as an object of class {type}: "
                        "return plain torch.Tensor objects.", **found))
    return None


def _copy(out):
    """The grader's own contiguous copy of an output (a plain tensor; anything else as it is):
    what a runner hands the judge needs no other."""
    return torch._C.TensorBase.clone(out, memory_format=torch.contiguous_format) if type(out) is torch.Tensor else out


def judge_output(exercise: Exercise, case: Case, inputs, outs: tuple) -> Problem | None:
    """Why ``outs`` (one tensor for each of ``exercise.outputs``) are not the exercise's answer for
    ``inputs``, or None: their shapes, dtypes and values against the float64 reference."""
    expected = _reference(exercise, inputs)
    several = len(exercise.outputs) > 1
    for name, out, want in zip(exercise.outputs, outs, expected):
        if tuple(out.shape) != tuple(want.shape):
            shapes = dict(name=name, got=tuple(out.shape), want=tuple(want.shape))
            return Problem(say("{name} shape is {got}, expected {want} (the shape of PyTorch's result).", **shapes)
                           if several else
                           say("output shape is {got}, expected {want} (the shape of PyTorch's result).", **shapes),
                           "shape")
        if exercise.output_dtype is not None and out.dtype != exercise.output_dtype:
            return Problem(say("output dtype is {got}, expected {want}.", got=out.dtype, want=exercise.output_dtype),
                           "dtype")
        if exercise.output_dtype is None and out.dtype != case.dtype:
            dtypes = dict(name=name, got=out.dtype, want=case.dtype)
            return Problem(say("{name} dtype is {got}, expected {want} (the inputs' dtype).", **dtypes) if several
                           else say("output dtype is {got}, expected {want} (the inputs' dtype).", **dtypes),
                           "dtype")
    differ = compare_outputs(exercise, case.dtype, outs, expected, inputs=_named_inputs(exercise, inputs))
    if differ and exercise.diagnoses and (misread := _misread_views(exercise, case, inputs, outs)):
        differ += "\n" + say("Your output matches PyTorch's result for these inputs read as if {views} were "
                             "stored contiguously: index such a view through its strides (pass x.stride(0) and so "
                             "on to the kernel), or copy it with .contiguous() where the exercise allows a copy.",
                             views=misread)
    return Problem(differ, "values") if differ else None


def _misread_views(exercise: Exercise, case: Case, inputs, outs) -> str:
    """The strided inputs whose misreading as contiguous explains ``outs`` (each alone, else all
    together), as a clause (``x (a view with strides (2,))``), or "" when none does."""
    names = [*exercise.parameters, "dy"] if exercise.gradients else exercise.parameters
    views = [i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and _as_if_contiguous(t) is not t]
    for chosen in [[i] for i in views] + ([views] if len(views) > 1 else []):
        misread = tuple(_as_if_contiguous(t) if i in chosen else t for i, t in enumerate(inputs))
        try:
            explains = compare_outputs(exercise, case.dtype, outs, _reference(exercise, misread)) is None
        except Exception:  # the reference refuses such inputs: no hint
            explains = False
        if explains:
            return ", ".join(say("{name} (a view with strides {strides})", name=names[i] if i < len(names) else i,
                                 strides=tuple(inputs[i].stride())) for i in chosen)
    return ""


def _as_if_contiguous(t: torch.Tensor) -> torch.Tensor:
    """``t``'s storage read from its offset as a contiguous tensor of its shape, where ``t`` is a
    floating-point view whose storage holds that many elements (else ``t`` itself): what a kernel
    that ignores the strides reads."""
    if (t.is_contiguous() or not t.is_floating_point()
            or t.storage_offset() + t.numel() > t.untyped_storage().nbytes() // t.element_size()):
        return t
    return t.as_strided(t.shape, torch.empty(t.shape, device="meta").stride(), t.storage_offset())


def compare_outputs(exercise: Exercise, dtype: torch.dtype, outs, expected, inputs=None) -> str | None:
    """None when each of ``outs`` matches its reference in ``expected`` within its tolerance for
    ``dtype``, else the mismatch table of each that does not (see :func:`compare`), named when
    the exercise has several outputs (``dw: 3 of 1024 elements differ ...``)."""
    several = len(exercise.outputs) > 1
    problems = [(f"{name}: " if several else "") + problem
                for (name, tolerances), out, want in zip(exercise.outputs.items(), outs, expected)
                if (problem := compare(out, want, *tolerances[dtype], inputs=inputs))]
    return "\n".join(problems) or None


def _named_inputs(exercise: Exercise, inputs) -> dict[str, torch.Tensor]:
    """The inputs a mismatch table can show beside the output, by the function's parameter names:
    those that broadcast to the output's shape (an elementwise op's operands, a softmax's rows)."""
    return {name: t for name, t in zip(exercise.parameters, inputs) if isinstance(t, torch.Tensor)}


def _tensors(args) -> list[torch.Tensor]:
    """The tensors among a call's arguments; the others (a flag such as ``causal=True``) are
    passed to the function and the reference as they are."""
    return [a for a in args if isinstance(a, torch.Tensor)]


def _reference(exercise: Exercise, inputs) -> tuple:
    return exercise.call(exercise.reference, tuple(t.double() if isinstance(t, torch.Tensor) and t.is_floating_point()
                                                   else t for t in inputs))


def library_problem(exercise: Exercise) -> str | None:
    """Why PyTorch is no longer as installed (:func:`~autograder.guards.replaced_functions`), or None."""
    if replaced := replaced_functions():
        return say("`{function}` replaced {names}. Grading runs PyTorch as it is installed: leave its functions "
                   "alone, and compute in your Triton kernel.",
                   function=exercise.function, names=", ".join(replaced[:5]))
    return None


def integrity_problem(exercise: Exercise, record) -> str | None:
    """Which of the course's rules on how an output is made a call broke (from its
    :class:`~autograder.guards.CallRecord`), or None."""
    copies = sorted({op for op in record.torch_ops if op.startswith("aten.") and op.split(".")[1] in DATA_MOVEMENT_OPS})
    function = exercise.function
    if copies:  # data movement the exercise does not allow: a copy
        return say("`{function}` copied data with PyTorch ({ops}: .contiguous(), .clone(), .to() or a reshape "
                   "that cannot be a view). This exercise asks your kernel to read the inputs where they are, "
                   "through their strides: a copy reads and writes every element once more.",
                   function=function, ops=", ".join(copies))
    if record.torch_ops:
        ops = sorted(set(record.torch_ops))
        said = say("`{function}` computed with PyTorch ({ops}). This exercise asks for the arithmetic inside "
                   "your Triton kernel; the wrapper may only allocate and launch.",
                   function=function, ops=", ".join(ops))
        if exercise.gradients and all(op.startswith("aten.sum.") for op in ops):  # autograd's own sum_to
            said += " " + say("If your backward returns a gradient shaped differently from its input, autograd "
                              "sums it to that shape with aten.sum itself: return each gradient in its input's shape.")
        return said
    if record.uncompilable:
        kernel, why = record.uncompilable[0]
        return say("`{function}` launched {kernel}, which runs in Triton's interpreter but would not compile for a "
                   "GPU ({why}). A kernel's body may call only @triton.jit functions and triton.language.",
                   function=function, kernel=kernel, why=why)
    if record.threads:
        return say("`{function}` handed work to another thread ({thread}). Grading watches the calling thread "
                   "only: compute in your Triton kernel, launched from it.",
                   function=function, thread=record.threads[0])
    if record.host:
        return say("`{function}` took data out of PyTorch for the host to compute with ({what}). The arithmetic "
                   "belongs in your Triton kernel.", function=function, what=record.host[0])
    if not record.launches:
        return say("`{function}` returned without launching a Triton kernel (kernel[grid](...)).", function=function)
    return None


def _changed_inputs(before, after) -> str | None:
    """Through ``TensorBase``'s own methods, with no subclass's ``__torch_function__``."""
    base = torch._C.TensorBase
    with torch._C.DisableTorchFunctionSubclass():
        for i, (a, b) in enumerate(zip(before, after)):
            if base.size(a) != base.size(b) or not bool(
                    base.all(base.__or__(base.eq(a, b), base.__and__(base.isnan(a), base.isnan(b))))):
                return say("input {i} was changed by the call: write results to a new tensor, not into the inputs.",
                           i=i)
    return None


def _not_a_tensor(exercise: Exercise, name: str, out) -> str | None:
    """Why the output ``name`` (``y``, or a gradient such as ``dw``) is not a tensor, or None."""
    if out is None and name == "y":
        return say("`{function}` returned None: end it by returning the output tensor (e.g. `return out`).",
                   function=exercise.function)
    if out is None:
        return say("`{function}`'s backward gave no gradient for {name}: return your torch.autograd.Function's "
                   "output, and from its backward one gradient per input.", function=exercise.function, name=name[1:])
    if not isinstance(out, torch.Tensor):  # a subclass's instance is named as one (_subclassed)
        return say("`{function}` returned {type}, expected a torch.Tensor.", function=exercise.function,
                   type=type(out).__name__)
    return None


def _not_a_fresh_tensor(exercise: Exercise, name: str, out, given, earlier) -> str | None:
    """Why the output ``name``, a tensor, is not a fresh one on the inputs' device, laid out as
    the exercise asks, or None."""
    the_output = name == "y"
    inputs = _tensors(given)
    if inputs and out.device != inputs[0].device:
        devices = dict(name=name, got=out.device, want=inputs[0].device)
        return (say("the output is on {got}, expected {want} (where the inputs are).", **devices) if the_output
                else say("{name} is on {got}, expected {want} (where the inputs are).", **devices))
    storage = out.untyped_storage().data_ptr()
    if any(storage == t.untyped_storage().data_ptr() for t in inputs):
        return (say("the output shares memory with an input: allocate a new tensor for the result.") if the_output
                else say("{name} shares memory with an input: allocate a new tensor for the result.", name=name))
    if any(storage == t.untyped_storage().data_ptr() for t in earlier):
        return (say("the output is the same buffer an earlier call returned: allocate a new tensor on every call "
                    "(a cached buffer changes results the caller already holds).") if the_output
                else say("{name} is the same buffer an earlier call returned: allocate a new tensor on every call "
                         "(a cached buffer changes results the caller already holds).", name=name))
    if the_output and exercise.contiguous_output and not out.is_contiguous():
        return say("the output has strides {strides}, not a contiguous layout ({wanted}): this exercise asks for a "
                   "new contiguous tensor, as torch.empty(shape, ...) makes (torch.empty_like of a transposed "
                   "input keeps its transposed layout).",
                   strides=tuple(out.stride()), wanted=tuple(torch.empty(out.shape, device="meta").stride()))
    return None


def compare(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float,
            inputs: dict[str, torch.Tensor] | None = None) -> str | None:
    """None when ``out`` matches ``ref`` within tolerance, else a short mismatch table, with the
    values of ``inputs`` (by name) at the same index where they broadcast to ``out``'s shape, so
    that a sign error or a swapped operand shows. Compared where ``out`` lives: on a GPU a timed
    output of 2^28 elements is 2 GiB in float64, which the CPU would copy and scan every batch."""
    got = out.detach().double()
    want = ref.detach().to(got.device, torch.float64)
    close = torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    err = (got - want).abs().nan_to_num(nan=float("inf"), posinf=float("inf"))
    rel = err / want.abs().clamp_min(atol)
    bad = (~close).nonzero()
    lines = [say("{count} of {total} elements differ (atol={atol:g}, rtol={rtol:g}); worst abs error {abs_err:.3g}, "
                 "worst rel error {rel_err:.3g}", count=len(bad), total=out.numel(), atol=atol, rtol=rtol,
                 abs_err=err[~close].max().item(), rel_err=rel[~close].max().item())]
    never = unwritten(out)
    nan_new = int((got.isnan() & ~want.isnan()).sum()) - never
    inf_new = int((got.isinf() & ~want.isinf()).sum())
    if never:
        lines.append(say("your kernel never wrote {count} of the output's elements: they still hold the NaN the "
                         "check fills new tensors with (a grid too small, or a mask that leaves elements out?)",
                         count=never))
    if nan_new or inf_new:
        lines.append(say("your output has {nan} NaN and {inf} Inf where the reference has none",
                         nan=nan_new, inf=inf_new))
    beside = {}
    for name, t in (inputs or {}).items():
        try:
            beside[name] = torch.broadcast_to(t.detach().to(got.device), got.shape)
        except RuntimeError:  # another shape (a matmul's operands): nothing to show at the index
            continue
    lines.append(f"{say('index'):>14}" + "".join(f"  {name:>12}" for name in beside)
                 + f"  {say('yours'):>12}  {say('expected'):>12}")
    for idx in bad[:SHOWN_MISMATCHES].tolist():
        at = tuple(idx)
        lines.append(f"{str(at):>14}" + "".join(f"  {t[at].item():>12.6g}" for t in beside.values())
                     + f"  {got[at].item():>12.6g}  {want[at].item():>12.6g}")
    return "\n".join(lines)


def explain_exception(exercise: Exercise, error: BaseException) -> Problem:
    """One line saying what probably went wrong, above the traceback of the student's code."""
    cause = raised_inside(error.__cause__ or error)
    if isinstance(cause, KernelTimeout):
        where = kernel_line_of(error.__cause__ or error)
        if cause.launch:
            kernel, programs = cause.launch
            where.insert(0, "  " + say("stopped in `{kernel}`, a launch of {programs:,} programs, which Triton's "
                                       "interpreter runs one after another: on the CPU, fewer and larger blocks "
                                       "finish sooner.", kernel=kernel, programs=programs))
        return Problem("\n".join([str(cause), *where]), "time")
    if isinstance(cause, OutOfBoundsAccess):
        return Problem("\n".join([say("your kernel accessed memory out of bounds: {cause}", cause=cause),
                                  *kernel_line(cause.__traceback__)]), "out_of_bounds")
    if isinstance(cause, DataRace):
        return Problem("\n".join([say("your kernel has a race: {cause}", cause=cause), *kernel_line(cause.__traceback__)]),
                       "race")
    if isinstance(cause, NotImplementedError):
        kind, where = "not_written", _raised_in(cause)
        headline = (say("`{function}` is not written yet: `{where}` raised NotImplementedError.",
                        function=exercise.function, where=where) if where not in (None, exercise.function) else
                    say("`{function}` is not written yet (it raised NotImplementedError).", function=exercise.function))
    elif is_cuda_fault(str(cause)):
        kind, headline = "cuda_fault", say(
            "your kernel faulted on the GPU ({fault}), most often from an address outside every tensor: "
            "a missing mask or a wrong offset. Run it with TRITON_INTERPRET=1 and the course's check names "
            "the bad access. The fault leaves this process's CUDA context unusable: restart the kernel "
            "(Kernel > Restart) after fixing it.", fault=_CUDA_FAULT.search(str(cause)).group(0))
    elif type(error).__name__ == "CompilationError":
        kind, headline = "compile", say("Triton could not compile your kernel; the first lines below say where.")
    elif cause is not error and type(error).__name__ == "InterpreterError":  # the interpreter's wrapper
        headline = say("`{function}` raised {error} in the kernel: {cause}", function=exercise.function,
                       error=type(cause).__name__, cause=_said(cause)).splitlines()[0]
        return Problem("\n".join([headline, *_hints(error, cause, in_kernel=True), *kernel_line_of(error)]), "raised")
    else:
        kind, headline = "raised", say("`{function}` raised {error}: {cause}", function=exercise.function,
                                       error=type(cause).__name__, cause=_said(cause)).splitlines()[0]
    return Problem("\n".join([headline, *_hints(error, cause, in_kernel=False), _student_traceback(error)]), kind)


def _said(error: BaseException) -> str:
    """An exception's message, or a word saying it has none."""
    return str(error) or say("(no message)")


def _hints(error: BaseException, cause: BaseException, in_kernel: bool) -> list[str]:
    """What usually causes ``cause`` (what ``error`` wraps, if anything), raised in a wrapper or
    a kernel, where the exception's own words do not say it."""
    text = str(cause)
    if common := where_it_ran(cause):
        return common
    if isinstance(cause, TypeError) and "'function' object is not subscriptable" in text:
        return [say("A kernel launched as `kernel[grid](...)` needs `@triton.jit` on the line above its `def`.")]
    if shapes := _INVALID_GRADIENT.search(text):
        index, got, want = shapes.groups()
        return [say("Your backward returned a gradient of shape [{got}] for input {index}, whose shape is [{want}]: "
                    "return one gradient per input of forward, each in its input's shape.",
                    index=index, got=got, want=want)]
    if "unexpected keyword argument 'dim'" in text:
        return [say("Triton's reductions take `axis=` where PyTorch's take `dim=`: tl.sum(x, axis=0).")]
    if in_kernel and "must be Tensor, not tensor" in text:
        return [say("A kernel called a PyTorch function: inside @triton.jit only triton.language's functions "
                    "(tl.exp, tl.log, tl.sum, ...) and other @triton.jit functions can run.")]
    if not (in_kernel and "None" in text):
        return []
    files = {f.filename for e in (error, cause) for f in traceback.extract_tb(e.__traceback__)
             if not f.filename.startswith(LIBRARY_DIRS)}
    if any("libdevice" in "".join(linecache.getlines(name)) for name in files):
        return [say("Triton's interpreter cannot run libdevice functions (on the CPU they give None): use "
                    "triton.language's own (tl.exp, tl.log, tl.sqrt, tl.math...), or run on a GPU.")]
    return []


ANSWER_CELLS_ALONE = False
"""Whether this process runs a notebook's setup and answer cells alone (a grading runner sets it),
where a missing name is most likely one from a cell grading does not run."""


def where_it_ran(error: BaseException) -> list[str]:
    """A hint for an error that comes from where the code runs rather than from the code: a name
    from a cell that grading does not run, or timing asked of Triton's interpreter."""
    if isinstance(error, NameError) and not isinstance(error, UnboundLocalError) and error.name and ANSWER_CELLS_ALONE:
        return [say("When your work is graded, only the setup cell and your answer cells run, in their order: a "
                    "kernel, helper or import from any other cell, or a file beside the notebook, is not there. "
                    "Define {name} in an answer cell.", name=f"`{error.name}`")]
    if "active drivers" in str(error):
        return [say("On the CPU, Triton's interpreter runs your kernels, and it has no GPU to time them: "
                    "triton.testing.do_bench (and any timing) needs a GPU. Time only when device.has_gpu.")]
    return []


def _raised_in(error: BaseException) -> str | None:
    """The qualified name of the innermost function outside the libraries that ``error`` passed
    through (``LayerNormFunction.forward``), or None."""
    codes = [frame.f_code for frame, _ in traceback.walk_tb(error.__traceback__)
             if not frame.f_code.co_filename.startswith(LIBRARY_DIRS)]
    return getattr(codes[-1], "co_qualname", codes[-1].co_name) if codes else None


def _student_traceback(error: BaseException, limit_lines: int = 12) -> str:
    """The traceback of the student's own code (without Python's, Triton's, PyTorch's or the
    grader's frames: where only those are left, as in autograd's engine calling a backward, the
    exception alone), trimmed to a readable length."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(LIBRARY_DIRS)]
    text = "".join(traceback.format_list(frames[-4:]))
    text += "".join(traceback.format_exception_only(type(error), error))
    lines = text.rstrip().splitlines()
    return "\n".join(lines[:limit_lines] + (["..."] if len(lines) > limit_lines else []))
