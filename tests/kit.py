"""The test kit: what several test modules need, written once (import it as ``from kit import ...``,
as the tests import ``conftest``).

- Which cases a version fails: :func:`failed_labels` checks ``fn`` and gives the labels of the
  cases it fails with the result; :func:`labels` gives the labels of the cases a test expects.
- A notebook's exercise stub: :func:`notebook_code` (its code cells), :func:`notebook_stub` (the
  one cell raising ``NotImplementedError(say("write me…"))``), :func:`load_stub` (that cell as a
  module) and :func:`assert_not_written` (a stub is reported "not written yet" on every case).
- Wrong versions made from the right one: :func:`mutant` is a ``solutions/`` module with exact
  edits applied, loaded as a fresh module, so a wrong version is the reference with one edit;
  :func:`edited` applies such edits to any source.
- Lessons 9 and 10's RMSNorm layer: :func:`layer_inputs` and :func:`assert_grads`.
- A copy of the course to change: :func:`course_copy` (the repository's files, as a clone would
  have them) and :func:`in_copy` (a Python command run in it, importing the copy's packages);
  :func:`sync_of_a_changed_copy`, what the sync reports for one notebook changed by hand.
- Softmax rows with a trap past their end: :func:`rows_with_a_trap_past_them`.
- A copy kernel whose store has no mask: :func:`copy_unmasked_store`.
- Code compared without its comments (a Chinese version's): :func:`code_tokens`; Chinese
  text: :data:`CJK`.

Source is always loaded from a file (:func:`load_source`): ``@triton.jit`` reads a kernel's
source through ``inspect``, which needs one.
"""
import importlib.util
import io
import itertools
import re
import shutil
import subprocess
import sys
import tempfile
import tokenize
from pathlib import Path

import nbformat
import torch
import triton
import triton.language as tl

from autograder import check
from autograder.lesson_kernels.rms_norm_backward import DX_TOLERANCES, layer_grads
from autograder.lesson_kernels.rms_norm_backward_dw import DW_TOLERANCES
from conftest import DEVICE, ROOT, venv_env

CJK = re.compile(r"[\u4e00-\u9fff]")
"""A Chinese character."""
STUB_MARK = 'NotImplementedError(say("write me'  # "write me" or "write me: <what to do>"
NOTEBOOK_IMPORTS = ("import torch\nimport triton\nimport triton.language as tl\n\n"  # what a stub cell assumes
                    "from autograder import say\n\n")

_FILES = tempfile.TemporaryDirectory(prefix="test-kit-")  # removed when the test process ends
_NUMBERS = itertools.count()


# --- which cases a version fails --------------------------------------------------------------


def failed_labels(exercise, fn, cases="visible", seed=0):
    """(labels of the cases ``fn`` fails, the check's result): ``exercise``'s ``cases``
    ("visible" or "hidden") on the inputs of ``seed`` (None: a fresh draw), not timed."""
    result = check(exercise, fn, seed=seed, cases=cases, measure_throughput=False, verbose=False)
    return {c.label for c in result.cases if not c.passed}, result


def labels(cases, pick=lambda case: True) -> set[str]:
    """The labels of the ``cases`` that ``pick`` keeps (all of them without ``pick``)."""
    return {c.label for c in cases if pick(c)}


# --- loading source as a module ----------------------------------------------------------------


def load_source(source: str, name: str = "kit_module"):
    """``source`` imported as a fresh module named ``name`` from a file of its own."""
    path = Path(_FILES.name) / f"{name}_{next(_NUMBERS)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- a notebook's exercise stub ----------------------------------------------------------------


def notebook_code(notebook) -> list[str]:
    """The sources of the code cells of ``notebook`` (a path), in order."""
    return [c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]


def notebook_stub(notebook) -> str:
    """The source of the exercise stub: the one code cell that raises ``NotImplementedError(say("write me…"))``."""
    stubs = [source for source in notebook_code(notebook) if STUB_MARK in source]
    assert len(stubs) == 1, f"{Path(notebook).name} should hold exactly one exercise stub, not {len(stubs)}"
    return stubs[0]


def load_stub(notebook):
    """The exercise stub of ``notebook`` as a module, with the imports the notebook gives it."""
    return load_source(NOTEBOOK_IMPORTS + notebook_stub(notebook), f"{Path(notebook).stem}_stub")


def assert_not_written(exercise, fn, seed=0):
    """Assert that checking ``fn`` (a stub) fails every case as "not written yet"; gives the result."""
    failed, result = failed_labels(exercise, fn, seed=seed)
    assert result.cases and failed == labels(result.cases), result.summary()
    assert all("not written yet" in c.message for c in result.cases), result.summary()
    return result


# --- wrong versions: the reference with an edit ---------------------------------------------------


def mutant(module, *edits):
    """A wrong version of a reference: the source of ``module`` with ``edits`` applied, as a fresh module.

    ``module`` is a module of ``solutions/`` by name ("layer_norm" or "solutions.layer_norm") or
    the path of a source file. Each edit is an ``(old, new)`` pair of exact text; ``old`` must stand
    exactly once in the source as the edits before it left it (else an AssertionError names it), so
    a reference that changes under a test fails the test instead of leaving a right "wrong" version.
    The result shares nothing with the imported reference: its kernels, classes and functions are
    its own (``mutant("layer_norm", edit).layer_norm`` is the edited ``layer_norm``).
    """
    path = Path(module) if str(module).endswith(".py") else \
        ROOT / "solutions" / f"{str(module).removeprefix('solutions.')}.py"
    return load_source(edited(path.read_text(), *edits, what=path.name), f"mutant_of_{path.stem}")


def edited(source: str, *edits, what="the source") -> str:
    """``source`` with each exact ``(old, new)`` edit applied in turn; ``old`` must stand there once."""
    for old, new in edits:
        count = source.count(old)
        assert count == 1, f"{what}: the text to edit, {old!r}, stands there {count} times, not exactly once"
        source = source.replace(old, new)
    return source


# --- lessons 9 and 10: the RMSNorm layer's gradients ------------------------------------------------


def layer_inputs(shape, dtype, seed=0):
    """(x, w, dy) of an RMSNorm layer: x and dy of ``shape``, standard normal, on the test device."""
    generator = torch.Generator().manual_seed(seed)
    m, n = shape
    x, dy = torch.randn(m, n, generator=generator), torch.randn(m, n, generator=generator)
    w = torch.randn(n, generator=generator)
    return tuple(t.to(DEVICE.device, dtype) for t in (x, w, dy))


def assert_grads(dx, dw, x, w, dy):
    """dx and dw in the inputs' dtype, within the declared tolerances of float64 autograd."""
    assert dx.dtype == x.dtype and dw.dtype == w.dtype and dx.shape == x.shape and dw.shape == w.shape
    dx_ref, dw_ref = layer_grads(x.double(), w.double(), dy.double())
    torch.testing.assert_close(dx.double(), dx_ref, atol=DX_TOLERANCES[x.dtype][0], rtol=DX_TOLERANCES[x.dtype][1])
    torch.testing.assert_close(dw.double(), dw_ref, atol=DW_TOLERANCES[x.dtype][0], rtol=DW_TOLERANCES[x.dtype][1])


# --- a copy of the course ---------------------------------------------------------------------


def course_copy(copy: Path) -> Path:
    """The repository's files in ``copy`` (tracked, and new ones git does not ignore)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in listed:
        if name and (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    return copy


def in_copy(copy: Path, *args: str) -> subprocess.CompletedProcess:
    """``python *args`` in ``copy``, importing the copy's packages."""
    return subprocess.run([sys.executable, *args], cwd=copy, capture_output=True, text=True,
                          env=venv_env(PYTHONPATH=str(copy)), timeout=300)


def sync_of_a_changed_copy(notebook: Path, change) -> list[str]:
    """What ``triton-course sync --check`` reports for a copy of ``notebook`` after ``change(nb)``
    (the copy lies beside it, so that its paths resolve, and is removed after)."""
    from autograder.instructor import sync

    nb = nbformat.read(notebook, as_version=4)
    change(nb)
    copy = notebook.parent / f"changed-copy-of-{notebook.name}"
    nbformat.write(nb, copy)
    try:
        return sync.sync(copy, write=False)
    finally:
        copy.unlink()


def rows_with_a_trap_past_them(dtype, device) -> torch.Tensor:
    """8 rows of 257 columns, a slice of 300-wide rows whose columns 257-299 hold 1e4: a softmax
    that reads past column 256 takes them into its max."""
    torch.manual_seed(0)
    wide = torch.randn(8, 300, dtype=dtype, device=device)
    wide[:, 257:] = 1e4
    x = wide[:, :257]
    assert x.stride() == (300, 1)
    return x


@triton.jit
def copy_unmasked_store(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Copies ``n`` elements with a masked load and an unmasked store: lanes past ``n`` store."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n))


def code_tokens(source: str) -> list[tuple[int, str]]:
    """``source``'s tokens, less its comments and line breaks."""
    return [(t.type, t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)]
