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
import functools
import inspect
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


@functools.lru_cache(maxsize=None)
def _backend(target):
    from triton.compiler.compiler import make_backend
    return make_backend(target)


@functools.lru_cache(maxsize=None)
def _jit(fn):
    """A compiled-mode ``JITFunction`` of the Python function ``fn`` (its parameters, its source)."""
    from triton.runtime.jit import JITFunction
    return JITFunction(fn)


def _signature(jit, values: dict, target):
    """The signature, constants and attributes a launch with ``values`` (by parameter name) would
    compile with; a parameter not given takes its default."""
    from triton.runtime.jit import mangle_type

    backend = _backend(target)
    divisible = backend.parse_attr("D") if hasattr(backend, "parse_attr") else [["tt.divisibility", 16]]
    signature, constants, attrs = {}, {}, {}
    unknown = set(values) - set(jit.arg_names)
    if unknown:
        raise TypeError(f"no parameter {', '.join(sorted(unknown))}")
    for param in jit.params:
        i, name = param.num, param.name
        if name not in values and param.default is inspect.Parameter.empty:
            raise TypeError(f"no value for {name}")
        value = values.get(name, param.default)
        if param.is_constexpr or value is None or (isinstance(value, int) and not isinstance(value, bool)
                                                   and value == 1):
            constants[name] = value  # what a launch does with None and with the integer 1
            signature[name] = "constexpr"
        elif hasattr(value, "data_ptr"):
            signature[name] = mangle_type(value)
            attrs[(i,)] = divisible
        else:
            signature[name] = mangle_type(value)
            if isinstance(value, int) and not isinstance(value, bool) and value % 16 == 0:
                attrs[(i,)] = divisible
    return signature, constants, attrs


def compile_for(kernel, *args, capability: int = 90, num_warps: int = 4, num_stages: int = 3, **constexprs):
    """Compile ``kernel`` for an NVIDIA GPU of ``capability`` (90: Hopper) as a launch with
    ``args`` (tensors, integers, None) and ``constexprs`` would, without launching it."""
    from triton.compiler import ASTSource

    fn = _python_function(kernel)
    target = GPUTarget("cuda", capability, 32)
    jit = _jit(fn)
    if len(args) > len(jit.arg_names):
        raise TypeError(f"{len(args)} arguments for {len(jit.arg_names)} parameters")
    signature, constants, attrs = _signature(jit, dict(zip(jit.arg_names, args)) | constexprs, target)
    with _compiled_mode(fn), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Triton's notices about its own defaults
        source = ASTSource(fn=jit, signature=signature, constexprs=constants, attrs=attrs)
        return triton.compile(source, target=target, options={"num_warps": num_warps, "num_stages": num_stages})


_front_end_verdicts: dict[tuple, str | None] = {}


def front_end_problem(kernel, args: tuple, kwargs: dict) -> str | None:
    """Why Triton's compiler would refuse ``kernel`` launched with ``args`` and ``kwargs`` (its
    front end, the same for every GPU: Python it cannot compile, a global it may not read), or
    None. The interpreter runs a kernel's body as plain Python, so a kernel can run there and not
    compile; each kernel and set of argument types is compiled once a process."""
    from triton._C.libtriton import ir
    from triton.compiler import ASTSource

    fn = _python_function(kernel)
    jit = _jit(fn)
    values = dict(zip(jit.arg_names, args)) | {k: v for k, v in kwargs.items() if k in jit.arg_names}
    target = GPUTarget("cuda", 90, 32)
    try:
        signature, constants, attrs = _signature(jit, values, target)
    except TypeError:  # the launch itself fails, and says why
        return None
    key = (fn, tuple(signature.items()), tuple((k, repr(v)) for k, v in sorted(constants.items())),
           tuple(sorted(attrs)))
    if key not in _front_end_verdicts:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Triton's notices about its own defaults
            backend = _backend(target)
            options = backend.parse_options({})
            context = ir.context()
            ir.load_dialects(context)
            backend.load_dialects(context)
            try:
                with _compiled_mode(fn):
                    ASTSource(fn=jit, signature=signature, constexprs=constants, attrs=attrs).make_ir(
                        target, options, backend.get_codegen_implementation(options), backend.get_module_map(),
                        context)
                _front_end_verdicts[key] = None
            except Exception as error:  # Triton's CompilationError, and what its code generator raised
                _front_end_verdicts[key] = _reason(error)
    return _front_end_verdicts[key]


def _reason(error: Exception) -> str:
    """The compiler's reason in a line: where in the kernel, and its first sentence."""
    node, said = getattr(error, "node", None), getattr(error, "error_message", None) or str(error)
    where = f"line {node.lineno}: " if hasattr(node, "lineno") else ""
    text = " ".join(said.split())
    if wrapped := re.fullmatch(r"(\w+)\((['\"])(.*)\2\)", text):  # an exception's repr
        text = f"{wrapped[1]}: {wrapped[3]}"
    return where + text.split(". ")[0].removesuffix(".")[:300]


SHARED_BUFFER = re.compile(r"ttg\.local_alloc\s*(?:%\S+\s*)?:.*?!ttg\.memdesc<(?P<shape>[\dx]+)x(?P<dtype>[a-zA-Z]\w*)")


def shared_buffers(ttgir: str) -> list[tuple[tuple[int, ...], str]]:
    """The shared-memory buffers a TritonGPU IR allocates, as (shape, element type): a pipelined
    tile of 128 × 64 float16 in 3 stages reads ``((3, 128, 64), "f16")``."""
    return [(tuple(int(d) for d in m["shape"].split("x")), m["dtype"]) for m in SHARED_BUFFER.finditer(ttgir)]


def count_ops(ir: str, *names: str) -> dict[str, int]:
    """How many times each operation (``ttng.async_tma_copy_global_to_local``) stands in ``ir``."""
    return {name: len(re.findall(rf"\b{re.escape(name)}\b", ir)) for name in names}
