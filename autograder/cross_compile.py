"""Compile a kernel for an NVIDIA GPU on any machine, and read what the compiler made.

Triton's compiler runs on the CPU: only the launch needs a GPU. :func:`compile_for` compiles a
``@triton.jit`` kernel for a compute capability (90: Hopper, an H100 or H200) from the arguments
a launch would get, and returns Triton's compiled kernel without running it: its
``asm["ttgir"]`` (the TritonGPU IR, after pipelining), ``asm["ptx"]`` and ``metadata.shared``
(bytes of shared memory per program). It works in the interpreter too, where ``@triton.jit``
made interpreted functions: for the compilation it puts compiled-mode functions back in their
place, and the interpreted ones afterwards.

Like a launch, it specialises the arguments: integers equal to 1 become constants, pointers and
integers divisible by 16 are marked so (what lets the compiler use 16-byte loads); pointers are
assumed 16-byte aligned, as a fresh PyTorch tensor is.
"""
from __future__ import annotations

import contextlib
import re
import warnings

import triton
from triton.backends.compiler import GPUTarget


def _python_function(kernel):
    """The Python function behind a JIT, interpreted or autotuned kernel."""
    while not hasattr(kernel, "__code__"):
        kernel = kernel.fn
    return kernel


def _interpreter_leftovers(interpreted_type) -> list[tuple[str, object, object]]:
    """(name, NumPy version, original) of the builtins of ``triton.language.core`` that the
    interpreter left patched. It patches a module's builtins while a kernel runs and puts them
    back afterwards, except where a ``@triton.jit`` helper such as ``tl.cdiv`` was called from the
    kernel: the helper's patch of ``triton.language.core`` stays (Triton 3.9). The compiler needs
    the originals: a patched builtin wraps the original (``member``), and the rest are the same
    objects as ``triton.language``'s, which the interpreter did put back."""
    import functools

    import triton.language as tl

    def from_interpreter(value):
        function = value.func if isinstance(value, functools.partial) else value
        return getattr(function, "__module__", None) == "triton.runtime.interpreter"

    leftovers = []
    for name, value in list(vars(tl.core).items()):
        if isinstance(value, interpreted_type) or not from_interpreter(value):
            continue  # interpreted @jit functions are swapped by _compiled_mode itself
        original = (getattr(value, "__kwdefaults__", None) or {}).get("member", getattr(tl, name, None))
        if original is not None and not from_interpreter(original):
            leftovers.append((name, value, original))
    return leftovers


@contextlib.contextmanager
def _compiled_mode(fn):
    """While inside: every interpreted ``@triton.jit`` function that ``fn`` can reach (and Triton's
    own, ``tl.cdiv`` and the like) is a compiled-mode one again, and the interpreter's leftover
    patches of ``triton.language.core`` are undone."""
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    from .device import put_back, swap_kernels, triton_language_namespaces
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # a Triton without the interpreter: nothing was swapped
        yield
        return
    leftovers = _interpreter_leftovers(InterpretedFunction)
    for name, _, original in leftovers:
        setattr(tl.core, name, original)
    changes = swap_kernels([fn.__globals__, *triton_language_namespaces()], InterpretedFunction, JITFunction)
    try:
        yield
    finally:
        put_back(changes)
        for name, patched, _ in leftovers:  # as the interpreter left them
            setattr(tl.core, name, patched)


def _signature(names, args, constexprs, target):
    """The signature, constants and attributes a launch with ``args`` would compile with."""
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import mangle_type

    backend = make_backend(target)
    divisible = backend.parse_attr("D") if hasattr(backend, "parse_attr") else [["tt.divisibility", 16]]
    signature, constants, attrs = {}, dict(constexprs), {}
    if len(args) > len(names):
        raise TypeError(f"{len(args)} arguments for {len(names)} parameters")
    for i, (name, value) in enumerate(zip(names, args)):
        if value is None or (isinstance(value, int) and not isinstance(value, bool) and value == 1):
            constants[name] = value  # what a launch does with None and with the integer 1
        elif hasattr(value, "data_ptr"):
            signature[name] = mangle_type(value)
            attrs[(i,)] = divisible
        else:
            signature[name] = mangle_type(value)
            if isinstance(value, int) and not isinstance(value, bool) and value % 16 == 0:
                attrs[(i,)] = divisible
    for name in constants:
        signature[name] = "constexpr"
    missing = [n for n in names if n not in signature]
    if missing:
        raise TypeError(f"no value for {', '.join(missing)}")
    return {n: signature[n] for n in names}, constants, attrs


def compile_for(kernel, *args, capability: int = 90, num_warps: int = 4, num_stages: int = 3, **constexprs):
    """Compile ``kernel`` for an NVIDIA GPU of ``capability`` (90: Hopper) as a launch with
    ``args`` (tensors, integers, None) and ``constexprs`` would, without launching it."""
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    fn = _python_function(kernel)
    target = GPUTarget("cuda", capability, 32)
    jit = JITFunction(fn)
    signature, constants, attrs = _signature(jit.arg_names, args, constexprs, target)
    with _compiled_mode(fn), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Triton's notices about its own defaults
        source = ASTSource(fn=jit, signature=signature, constexprs=constants, attrs=attrs)
        return triton.compile(source, target=target, options={"num_warps": num_warps, "num_stages": num_stages})


SHARED_BUFFER = re.compile(r"ttg\.local_alloc\s*(?:%\S+\s*)?:.*?!ttg\.memdesc<(?P<shape>[\dx]+)x(?P<dtype>[a-zA-Z]\w*)")


def shared_buffers(ttgir: str) -> list[tuple[tuple[int, ...], str]]:
    """The shared-memory buffers a TritonGPU IR allocates, as (shape, element type): a pipelined
    tile of 128 × 64 float16 in 3 stages reads ``((3, 128, 64), "f16")``."""
    return [(tuple(int(d) for d in m["shape"].split("x")), m["dtype"]) for m in SHARED_BUFFER.finditer(ttgir)]


def count_ops(ir: str, *names: str) -> dict[str, int]:
    """How many times each operation (``ttng.async_tma_copy_global_to_local``) stands in ``ir``."""
    return {name: len(re.findall(rf"\b{re.escape(name)}\b", ir)) for name in names}
