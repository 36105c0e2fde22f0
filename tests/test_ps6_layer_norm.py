"""Problem set 6, layer norm forward and backward: the reference passes its cases, the inputs are
what their labels say, every output is judged by name (in this process and by the judge), and
the classic mistakes fail exactly the cases that expose them."""
import nbformat
import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from autograder import check
from autograder.assignments.ps6_layer_norm import EPS, EXERCISE, layer_norm_inputs
from autograder.grading import judge as judging
from autograder.spec import Case
from solutions.layer_norm import GROUPS, HIDDEN_CASES, LayerNormFunction, layer_norm
from conftest import DEVICE, ROOT
import kit
from kit import mutant

DEV = DEVICE.device
SEED = 0  # fixed inputs: which cases a wrong kernel fails must not depend on the draw
VISIBLE = EXERCISE.cases("visible", DEV)


def failed_labels(fn, which="visible"):
    return kit.failed_labels(EXERCISE, fn, which, seed=SEED)


def labels(pick):
    return kit.labels(VISIBLE, pick)


def messages(result) -> str:
    return "\n".join(c.message for c in result.cases)


# --- the reference ---------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_reference_passes_every_case(which):
    failed, result = failed_labels(layer_norm, which)
    assert not failed, result.summary()


def test_hidden_cases_repeat_a_case_and_cover_every_kind():
    for device in ("cpu", "cuda"):
        hidden = HIDDEN_CASES[device]
        assert len(hidden) > len(set(hidden))  # the same case twice: fresh data each time
        assert {c.values for c in hidden} == {"normal", "large"} and any(c.strided for c in hidden)
        assert any(c.shape[0] == 1 for c in hidden) and any(c.shape[0] > GROUPS for c in hidden)


def test_a_call_is_judged_on_the_output_and_every_gradient():
    assert list(EXERCISE.outputs) == ["y", "dx", "dw", "db"]
    x, w, b, dy = layer_norm_inputs(Case((5, 37)), torch.Generator().manual_seed(0), "cpu")
    y, dx, dw, db = EXERCISE.call(EXERCISE.reference, (x.double(), w.double(), b.double(), dy.double()))
    x, w, dy = x.double(), w.double(), dy.double()  # F.layer_norm's autograd gives the notebook's formulas
    mean = lambda t: t.mean(dim=1, keepdim=True)  # noqa: E731
    rstd = torch.rsqrt(mean((x - mean(x)) ** 2) + EPS)
    x_hat, g = (x - mean(x)) * rstd, w * dy
    torch.testing.assert_close(y, x_hat * w + b.double())
    torch.testing.assert_close(dx, rstd * (g - mean(g) - x_hat * mean(x_hat * g)))
    torch.testing.assert_close(dw, (dy * x_hat).sum(dim=0))
    torch.testing.assert_close(db, dy.sum(dim=0))


# --- the inputs are what the labels say ------------------------------------------------------


def test_every_third_row_is_zero_so_its_mean_is_exact_under_any_division():
    x, w, b, dy = layer_norm_inputs(Case((9, 1000), values="large"), torch.Generator().manual_seed(0), DEV)
    assert (x[2::3] == 0).all() and (x[0] != x[0, 0]).any()
    y, dx, _, _ = EXERCISE.call(layer_norm, (x, w, b, dy))
    torch.testing.assert_close(y[2::3], b.expand(3, -1))  # x̂ = 0
    assert dx[2::3].abs().max() > 100  # rstd = 1/sqrt(eps) = 316


def test_strided_x_and_dy_have_different_row_strides():
    x, w, b, dy = layer_norm_inputs(Case((6, 50), strided=True), torch.Generator().manual_seed(0), DEV)
    assert x.shape == dy.shape == (6, 50) and w.shape == b.shape == (50,)
    assert x.stride() == (50 + 25 + 3, 1) and dy.stride() == (2 * 50 + 5, 1)


# --- wrong versions: the reference with one edit ---------------------------------------------

NO_MEAN_TERM = ("along_x_hat - tl.sum(w_dy, axis=0) / n_cols)", "along_x_hat)")
# db not summed across programs: the last program's rows alone.
DB_PER_PROGRAM = ("return dx, sums[:n], sums[n:]", "return dx, sums[:n], partial[-1, n:].to(w.dtype)")
# dw by a load, add and store of every program into row 0 of a zeroed buffer.
RACY_DW = [("tl.store(sums, dw_sum, mask=inside)",
            "tl.store(partial_ptr + cols, tl.load(partial_ptr + cols, mask=inside) + dw_sum, mask=inside)"),
           ("partial = torch.empty((programs, 2 * n)", "partial = torch.zeros((programs, 2 * n)")]


def test_a_missing_mean_term_fails_every_case_and_names_dx_alone():
    # dx is off by rstd · mean(w·dy) in every row: 316 · w·dy in a one-column row, where dx is 0.
    failed, result = failed_labels(mutant("layer_norm", NO_MEAN_TERM).layer_norm)
    assert failed == labels(lambda c: True)
    text = messages(result)
    assert "dx: " in text and not any(f"{name}: " in text for name in ("y", "dw", "db"))


def test_db_not_summed_across_programs_fails_every_case_of_more_than_one_row():
    # The last program's rows alone; with one row there is one program, and its sum is db.
    failed, result = failed_labels(mutant("layer_norm", DB_PER_PROGRAM).layer_norm)
    assert failed == labels(lambda c: c.shape[0] > 1)
    assert all(c.message.startswith("db: ") and "\ndw: " not in c.message for c in result.cases if not c.passed)


def test_a_load_add_store_of_dw_across_programs_is_reported_as_a_race():
    # In the interpreter the programs run one at a time, so the sums come out right; the check
    # reports program 1's load of the row program 0 stored.
    failed, result = failed_labels(mutant("layer_norm", *RACY_DW).layer_norm)
    assert failed == labels(lambda c: c.shape[0] > 1)
    assert all("your kernel has a race: program (1, 0, 0) loaded element" in c.message
               for c in result.cases if not c.passed), result.summary()


def test_an_output_outside_autograd_gets_no_gradient():
    _, result = failed_labels(lambda x, w, b: layer_norm(x.detach(), w.detach(), b.detach()))
    assert all("`layer_norm`'s backward gave no gradient for x" in c.message for c in result.cases)


class _DbByPyTorch(LayerNormFunction):
    @staticmethod
    def backward(ctx, dy):
        dx, dw, _ = LayerNormFunction.backward(ctx, dy)
        return dx, dw, dy.sum(dim=0)


class GradientsOfAnotherShape(LayerNormFunction):
    @staticmethod
    def backward(ctx, dy):
        dx, dw, db = LayerNormFunction.backward(ctx, dy)
        return dx, dw.view(1, -1), db  # autograd sums it back to (n,) with aten.sum


def test_a_gradient_of_another_shape_is_named_as_the_likely_cause():
    result = check(EXERCISE, GradientsOfAnotherShape.apply, measure_throughput=False, verbose=False)
    assert not result.correct and all("return each gradient in its input's shape" in c.message
                                      for c in result.cases if not c.passed), result.summary()


@pytest.mark.parametrize("cheat", [lambda x, w, b: F.layer_norm(x, (x.shape[1],), w, b, EPS),
                                   lambda x, w, b: _DbByPyTorch.apply(x, w, b)], ids=["F.layer_norm", "db_by_sum"])
def test_pytorch_shortcuts_fail_in_either_pass(cheat):
    _, result = failed_labels(cheat)
    assert all("computed with PyTorch" in c.message for c in result.cases), result.summary()


# --- the judge grades every output, as the self-check does -----------------------------------


@pytest.mark.parametrize("edit", [None, NO_MEAN_TERM],
                         ids=["reference", "no_mean_term"])
def test_the_judge_and_check_agree_on_every_output(tmp_path, monkeypatch, edit):
    source = ROOT / "source" / EXERCISE.name / f"{EXERCISE.name}.ipynb"
    nb = nbformat.read(source, as_version=4)
    cell, = [c for c in nb.cells if c.metadata.get("course", {}).get("role") == "solution"]
    answer = cell.source if edit is None else cell.source.replace(*edit)
    assert edit is None or answer != cell.source
    cell.source = answer
    nbformat.write(nb, tmp_path / source.name)
    answer_file = tmp_path / "answer.py"  # Triton reads a kernel's source from its file
    answer_file.write_text(answer)
    namespace = {"torch": torch, "triton": triton, "tl": tl}
    exec(compile(answer, str(answer_file), "exec"), namespace)
    mine = check(EXERCISE, namespace["layer_norm"], measure_throughput=False, verbose=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(judging.ISOLATE_VAR, "1")
    judged = judging.grade_notebook(EXERCISE, cases="visible", measure_throughput=False)
    assert [(c.label, c.passed) for c in mine.cases] == [(c.label, c.passed) for c in judged.cases]
    assert all(c.message.startswith("dx: ") for c in judged.cases if not c.passed), judged.summary()
