"""Correctness against the PyTorch reference, with failures a student can act on."""
from __future__ import annotations

import inspect
import re
import traceback
from pathlib import Path

import torch

from .guards import KernelTimeout, OutOfBoundsAccess, Seal, time_limit, watch
from .report import CaseResult
from .spec import Case, Exercise

_PACKAGE_DIR = str(Path(__file__).parent)
SHOWN_MISMATCHES = 5
POISON_COPIES = 4
_CUDA_FAULT = re.compile(r"illegal memory access|misaligned address|unspecified launch failure"
                         r"|device-side assert|illegal instruction", re.IGNORECASE)
"""CUDA errors after which the process's CUDA context is unusable: every later call fails."""
NOT_RUN_AFTER_FAULT = "not run: an earlier case broke this process's CUDA context (see that case)."


def signature_problem(exercise: Exercise, fn, args) -> str | None:
    """A sentence saying why ``fn`` cannot be called with ``args``, or None."""
    if not callable(fn):
        return f"expected a function `{exercise.signature}`, got {type(fn).__name__}."
    try:
        inspect.signature(fn).bind(*args)
    except TypeError:
        return f"`{getattr(fn, '__name__', fn)}` cannot be called as `{exercise.signature}`."
    except ValueError:
        pass  # no introspectable signature (a builtin): the call itself will tell
    return None


def run_cases(exercise: Exercise, fn, cases: tuple[Case, ...], seed: int, device: str) -> list[CaseResult]:
    """Run ``fn`` on fresh inputs for every case; keep earlier outputs to catch reuse."""
    earlier: list[torch.Tensor] = []
    results, faulted = [], False
    for i, case in enumerate(cases):
        if faulted:  # nothing can run on this GPU any more
            results.append(CaseResult(case.label, False, NOT_RUN_AFTER_FAULT))
            continue
        results.append(_run_case(exercise, fn, case, seed + i, device, earlier))
        faulted = is_cuda_fault(results[-1].message)
    return results


def is_cuda_fault(text: str) -> bool:
    """Whether an error message is a CUDA fault that leaves the context unusable."""
    return _CUDA_FAULT.search(text) is not None


def _run_case(exercise, fn, case, seed, device, earlier) -> CaseResult:
    inputs = exercise.make_inputs(case, torch.Generator().manual_seed(seed), device)
    given = tuple(_clone_keeping_strides(t) if isinstance(t, torch.Tensor) else t for t in inputs)
    if (problem := signature_problem(exercise, fn, given)) is not None:
        return CaseResult(case.label, False, problem)
    _poison_free_memory(inputs)
    seal = Seal()
    try:
        with time_limit(exercise.time_limit_s, f"`{exercise.function}` on {case.label}"), \
                watch(exercise.allowed_ops) as record:
            out = fn(*given)
            if device == "cuda":
                torch.cuda.synchronize()
    except Exception as error:  # the student's code: every failure becomes a message
        seal.restore()
        return CaseResult(case.label, False, explain_exception(exercise, error))
    if broken := seal.broken():
        seal.restore()
        return CaseResult(case.label, False, f"`{exercise.function}` replaced {', '.join(broken[:3])}, which "
                                             "the grader relies on: a verdict is only given on an untouched grader.")
    expected = _reference(exercise, inputs)
    problem = (_integrity_problem(exercise, record)
               or _changed_inputs(inputs, given)
               or _output_problem(exercise, out, inputs[0], case, tuple(expected.shape))
               or _aliasing_problem(out, given, earlier)
               or compare(out, expected, *exercise.tolerances[case.dtype]))
    earlier.append(out)
    return CaseResult(case.label, problem is None, problem or "")


def _poison_free_memory(like) -> None:
    """Free NaN-filled blocks of the inputs' sizes just before the call, where the allocator
    (PyTorch's CUDA cache, or malloc's free lists on the CPU) hands them to the student's
    ``torch.empty_like``: an element the kernel never writes then reads NaN, not a stale right
    answer from an earlier call with the same data."""
    # Several of each: the wrapper's own allocations (a .contiguous() copy, the interpreter's
    # host copies) may take the first; malloc hands freed chunks back last in, first out.
    # One copy let a stale right answer through in 2 of 3 full runs here; four, in none of 3.
    blocks = [torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in _tensors(like)
              for _ in range(POISON_COPIES)]
    for block in blocks:
        block.fill_(float("nan") if block.is_floating_point() else -1)
    del blocks


def _tensors(args) -> list[torch.Tensor]:
    """The tensors among a call's arguments; the others (a flag such as ``causal=True``) are
    passed to the function and the reference as they are."""
    return [a for a in args if isinstance(a, torch.Tensor)]


def _clone_keeping_strides(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t``'s whole storage, viewed like ``t``: a kernel that strays into the gaps
    between strided rows reads the same values it would have read in the original."""
    flat = torch.empty(t.untyped_storage().nbytes() // t.element_size(), dtype=t.dtype, device=t.device)
    flat.untyped_storage().copy_(t.untyped_storage())
    return flat.as_strided(t.size(), t.stride(), t.storage_offset())


def _reference(exercise: Exercise, inputs) -> torch.Tensor:
    return exercise.reference(*(t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                                for t in inputs))


def _integrity_problem(exercise: Exercise, record) -> str | None:
    if record.torch_ops:
        ops = ", ".join(sorted(set(record.torch_ops)))
        return (f"`{exercise.function}` computed with PyTorch ({ops}). This exercise asks for the "
                f"arithmetic inside your Triton kernel; the wrapper may only allocate and launch.")
    if not record.launches:
        return f"`{exercise.function}` returned without launching a Triton kernel (kernel[grid](...))."
    return None


def _changed_inputs(originals, given) -> str | None:
    for i, (a, b) in enumerate(zip(originals, given)):
        if isinstance(a, torch.Tensor) and not torch.equal(a, b) and not (a.isnan() & b.isnan()).any():
            return f"input {i} was changed by the call: write results to a new tensor, not into the inputs."
    return None


def _output_problem(exercise: Exercise, out, first_input, case: Case, expected_shape: tuple) -> str | None:
    if type(out) is not torch.Tensor:  # subclasses could override comparisons
        return f"`{exercise.function}` returned {type(out).__name__}, expected a torch.Tensor."
    if tuple(out.shape) != expected_shape:
        return f"output shape is {tuple(out.shape)}, expected {expected_shape} (the shape of PyTorch's result)."
    if out.dtype != case.dtype:
        return f"output dtype is {out.dtype}, expected {case.dtype} (the inputs' dtype)."
    if out.device != first_input.device:
        return f"output is on {out.device}, expected {first_input.device} (where the inputs are)."
    return None


def _aliasing_problem(out, given, earlier) -> str | None:
    storage = out.untyped_storage().data_ptr()
    if any(storage == t.untyped_storage().data_ptr() for t in _tensors(given)):
        return "the output shares memory with an input: allocate a new tensor for the result."
    if any(storage == t.untyped_storage().data_ptr() for t in earlier):
        return ("the output is the same buffer an earlier call returned: allocate a new tensor "
                "on every call (a cached buffer changes results the caller already holds).")
    return None


def compare(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> str | None:
    """None when ``out`` matches ``ref`` within tolerance, else a short mismatch table."""
    got, want = out.detach().double().cpu(), ref.detach().double().cpu()
    close = torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    err = (got - want).abs().nan_to_num(float("inf"))
    rel = err / want.abs().clamp_min(atol)
    bad = (~close).nonzero()
    lines = [f"{len(bad)} of {out.numel()} elements differ (atol={atol:g}, rtol={rtol:g}); "
             f"worst abs error {err[~close].max().item():.3g}, worst rel error {rel[~close].max().item():.3g}"]
    nan_new = int((got.isnan() & ~want.isnan()).sum())
    inf_new = int((got.isinf() & ~want.isinf()).sum())
    if nan_new or inf_new:
        lines.append(f"your output has {nan_new} NaN and {inf_new} Inf where the reference has none"
                     + (" (NaN also marks elements your kernel never wrote)" if nan_new else ""))
    lines.append(f"{'index':>14}  {'yours':>12}  {'expected':>12}")
    for idx in bad[:SHOWN_MISMATCHES].tolist():
        lines.append(f"{str(tuple(idx)):>14}  {got[tuple(idx)].item():>12.6g}  {want[tuple(idx)].item():>12.6g}")
    return "\n".join(lines)


def explain_exception(exercise: Exercise, error: BaseException) -> str:
    """One line saying what probably went wrong, above the traceback of the student's code."""
    cause = error.__cause__ or error
    if isinstance(cause, NotImplementedError):
        headline = f"`{exercise.function}` is not written yet (it raised NotImplementedError)."
    elif isinstance(cause, KernelTimeout):
        return str(cause)
    elif isinstance(cause, OutOfBoundsAccess):
        return f"your kernel accessed memory out of bounds: {cause}"
    elif is_cuda_fault(str(cause)):
        headline = (f"your kernel faulted on the GPU ({_CUDA_FAULT.search(str(cause)).group(0)}), most often "
                    "from an address outside every tensor: a missing mask or a wrong offset. Run it with "
                    "TRITON_INTERPRET=1 and the course's check names the bad access. The fault leaves this "
                    "process's CUDA context unusable: restart the kernel (Kernel > Restart) after fixing it.")
    elif type(error).__name__ == "CompilationError":
        headline = "Triton could not compile your kernel; the first lines below say where."
    else:
        headline = f"`{exercise.function}` raised {type(cause).__name__}: {cause}".splitlines()[0]
    return headline + "\n" + _student_traceback(error)


def _student_traceback(error: BaseException, limit_lines: int = 12) -> str:
    """The traceback without the grader's own frames, trimmed to a readable length."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(_PACKAGE_DIR)]
    text = "".join(traceback.format_list(frames[-4:]))
    text += "".join(traceback.format_exception_only(type(error), error))
    lines = text.rstrip().splitlines()
    return "\n".join(lines[:limit_lines] + (["..."] if len(lines) > limit_lines else []))
