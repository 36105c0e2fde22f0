"""Problem set 3, fused cross-entropy: the reference passes every case; the usual mistakes
each fail the cases that expose them; the inputs are what the labels say; the int64 targets
travel through the judge."""
import shutil
import socket
import time
import warnings

import pytest
import torch
import triton
import triton.language as tl

from autograder import check
from autograder.assignments.ps3_cross_entropy import EXERCISE, IGNORE_INDEX, CrossEntropyCase, cross_entropy_bytes
from autograder.grading import judge as judging
from autograder.grading import protocol
from conftest import DEVICE, ROOT
import kit
from solutions.cross_entropy import cross_entropy

DEV = DEVICE.device
SEED = 1234
CASES = {which: EXERCISE.cases(which, DEV) for which in ("visible", "hidden")}
TILE = 4096


def failed(fn, which: str) -> dict[str, str]:
    """Label -> message of the cases ``fn`` fails (a repeated label keeps its last failure)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the interpreter's NumPy: exp overflow, inf - inf
        _, result = kit.failed_labels(EXERCISE, fn, which, seed=SEED)
    return {c.label: c.message for c in result.cases if not c.passed}


def labels(which: str, keep) -> set[str]:
    return kit.labels(CASES[which], keep)


def counts_a_row(case: CrossEntropyCase) -> bool:
    return not case.all_ignored


def ignores_a_row(case: CrossEntropyCase) -> bool:
    return case.all_ignored or case.shape[0] > 2


def shows_small_errors(case: CrossEntropyCase) -> bool:
    """Whether a loss off by ~1e-2 must fail: bfloat16's tolerance at a loss of 12 is
    2**-7 · 12 = 0.09 (float16's 0.012), and on the GPU's long rows a padded or stale sum is
    off by a few percent, log(1.03) = 0.03. float32 shows it; so do the CPU's rows of at
    most 20,000, where the same mistakes are off by far more."""
    return case.dtype == torch.float32 or case.shape[1] <= 20_000


@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_the_reference_passes(which):
    assert failed(cross_entropy, which) == {}


# Wrong versions: one kernel, each mistake a switch. All switches True is a right kernel.
@triton.jit
def _variant_kernel(loss_ptr, logits_ptr, target_ptr, row_stride, vocab, TILE: tl.constexpr,
                    SUBTRACT_MAX: tl.constexpr, RESCALE: tl.constexpr, WHOLE_ROW: tl.constexpr,
                    SKIP_IGNORED: tl.constexpr, PAD_NEG_INF: tl.constexpr, GUARD_NEG_INF: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * row_stride
    target = tl.load(target_ptr + row)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    stop = vocab
    if not WHOLE_ROW:  # one tile: the columns past it are never read
        stop = TILE
    for start in range(0, stop, TILE):
        cols = start + tl.arange(0, TILE)
        x = tl.load(base + cols, mask=cols < vocab, other=float("-inf") if PAD_NEG_INF else 0.0).to(tl.float32)
        if SUBTRACT_MAX:
            m_new = tl.maximum(m, tl.max(x, axis=0))
            pivot = m_new
            if GUARD_NEG_INF:  # a tile of -inf alone: -inf - (-inf) is NaN
                pivot = tl.where(m_new == float("-inf"), 0.0, m_new)
            if RESCALE:
                s = s * tl.exp(m - pivot)
            s += tl.sum(tl.exp(x - pivot), axis=0)
            m = m_new
        else:
            s += tl.sum(tl.exp(x), axis=0)
    lse = tl.log(s)
    if SUBTRACT_MAX:
        lse += m
    if SKIP_IGNORED:
        keep = target != -100
        picked = tl.load(base + target, mask=keep, other=0.0).to(tl.float32)
        loss = tl.where(keep, lse - picked, 0.0)
    else:  # loads logits[row, -100]: the row before's, or before the tensor
        loss = lse - tl.load(base + target).to(tl.float32)
    tl.store(loss_ptr + row, loss.to(loss_ptr.dtype.element_ty))


def variant(tile_of=lambda vocab: min(triton.next_power_of_2(vocab), TILE), **mistakes):
    switches = dict(SUBTRACT_MAX=True, RESCALE=True, WHOLE_ROW=True, SKIP_IGNORED=True, PAD_NEG_INF=True,
                    GUARD_NEG_INF=True)
    switches.update(mistakes)

    def cross_entropy(logits, target):
        loss = torch.empty(logits.shape[0], dtype=logits.dtype, device=logits.device)
        tile = tile_of(logits.shape[1])
        _variant_kernel[(logits.shape[0],)](loss, logits, target, logits.stride(0), logits.shape[1],
                                            TILE=tile, **switches)
        return loss
    return cross_entropy


@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_the_variant_kernel_itself_is_right(which):
    assert failed(variant(), which) == {}


@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_no_max_subtraction_fails_exactly_the_large_logits(which):
    # e^(1e4) and e^(2e3) are inf in float32 (its limit is e^88.7): loss = inf - x
    wrong = failed(variant(SUBTRACT_MAX=False), which)
    assert set(wrong) == labels(which, lambda c: c.values == "large")
    assert all("Inf" in message for message in wrong.values())


@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_no_guard_for_a_tile_of_minus_inf_fails_exactly_those_rows(which):
    wrong = failed(variant(GUARD_NEG_INF=False), which)
    assert set(wrong) == labels(which, lambda c: c.values == "neg_inf" and counts_a_row(c))
    assert all("NaN" in message for message in wrong.values())


@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_a_tile_that_is_not_a_power_of_two_fails_the_short_rows(which):
    wrong = failed(variant(tile_of=lambda vocab: min(vocab, TILE)), which)  # compiles on no GPU
    assert set(wrong) == labels(which, lambda c: c.shape[1] < TILE and c.shape[1] & (c.shape[1] - 1))
    assert all("power of 2" in message for message in wrong.values())


@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_ignoring_minus_100_fails_every_case_with_an_ignored_row(which):
    wrong = failed(variant(SKIP_IGNORED=False), which)
    assert set(wrong) == labels(which, ignores_a_row)


@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_one_tile_per_row_fails_every_row_longer_than_the_tile(which):
    # BLOCK = min(next_power_of_2(vocab), 4096) and no loop: logits past 4096 are left out of
    # the sum, so every such row's loss is too small
    wrong = failed(variant(WHOLE_ROW=False), which)
    assert set(wrong) == labels(which, lambda c: c.shape[1] > TILE and counts_a_row(c))


@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_a_stale_max_fails_every_row_of_several_tiles(which):
    # Every second row has its max in its last tile, so its sum must be rescaled there. With
    # logits around 1e4 the stale terms are e^0 = 1 where they should be e^-1000 = 0: log(s)
    # is off by about ln 2 on a loss of ~1e4, which can hide under rtol.
    wrong = failed(variant(RESCALE=False), which)
    several = labels(which, lambda c: c.shape[1] > TILE and counts_a_row(c))
    must = labels(which, lambda c: c.label in several and c.values != "large" and shows_small_errors(c))
    assert must and must <= set(wrong) <= several


@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_padding_with_zero_fails_the_ragged_rows(which):
    # each of the last tile's padding lanes adds exp(0 - max) to the sum; invisible when the
    # max is ~1e4 (exp underflows to 0) and when the row is whole tiles
    wrong = failed(variant(PAD_NEG_INF=False), which)
    tile = lambda n: min(triton.next_power_of_2(n), TILE)  # noqa: E731
    ragged = labels(which, lambda c: c.shape[1] % tile(c.shape[1]) and c.values != "large" and counts_a_row(c))
    must = labels(which, lambda c: c.label in ragged and shows_small_errors(c))
    assert must and must <= set(wrong) <= ragged


@pytest.mark.parametrize("cheat", [
    lambda logits, target: torch.nn.functional.cross_entropy(logits, target, reduction="none"),
    lambda logits, target: variant()(torch.log_softmax(logits, dim=-1), target),
])
def test_pytorch_shortcuts_fail(cheat):
    result = check(EXERCISE, cheat, seed=SEED, measure_throughput=False, verbose=False)
    assert all("computed with PyTorch" in c.message for c in result.cases)


# --- the inputs --------------------------------------------------------------------------------

def inputs(case, seed=0):
    return EXERCISE.make_inputs(case, torch.Generator().manual_seed(seed), DEV)


@pytest.mark.parametrize("case", sorted(set(CASES["visible"] + CASES["hidden"]), key=lambda c: c.label),
                         ids=lambda c: c.label)
def test_inputs_are_what_the_label_says(case):
    logits, target = inputs(case)
    rows, vocab = case.shape
    assert logits.shape == case.shape and logits.dtype == case.dtype and logits.stride(1) == 1
    assert (logits.stride(0) > vocab) == case.strided
    assert target.shape == (rows,) and target.dtype == torch.int64
    ignored = target == IGNORE_INDEX
    assert bool(ignored.all()) == case.all_ignored and bool(ignored.any()) == ignores_a_row(case)
    assert int(ignored.sum()) < (rows + 1) // 2 or case.all_ignored  # a swapped row always counts
    counted = ~ignored
    assert bool(((target[counted] >= 0) & (target[counted] < vocab)).all())
    picked = logits[counted].gather(1, target[counted, None]).float()
    assert bool(picked.isfinite().all())  # never a -inf target
    assert bool((logits[::2, -1] == logits[::2].max(dim=1).values).all())  # the max in the last tile
    assert bool(logits.isinf().any()) == (case.values == "neg_inf")
    top = logits[logits.isfinite()].float().abs().max().item()
    assert (top > 1e3) == (case.values == "large")


def test_the_same_shape_twice_gets_other_data_and_other_ignored_rows():
    case = CrossEntropyCase((40, 100))
    (a, ta), (b, tb) = inputs(case, seed=1), inputs(case, seed=2)
    assert not torch.equal(a, b) and not torch.equal(ta == IGNORE_INDEX, tb == IGNORE_INDEX)
    twice = [c for c in CASES["hidden"] if [d.label for d in CASES["hidden"]].count(c.label) == 2]
    assert twice and twice[0].shape[0] > 2  # the repeated hidden case has ignored rows to move


def test_the_reference_gives_zero_for_ignored_rows():
    logits, target = inputs(CrossEntropyCase((8, 50)))
    ref = EXERCISE.reference(logits.double(), target)
    assert ref.dtype == torch.float64 and bool((ref[target == IGNORE_INDEX] == 0).all())
    assert bool((ref[target != IGNORE_INDEX] > 0).all())


def test_bytes_moved_counts_the_logits_of_rows_that_count():
    logits, target = inputs(CrossEntropyCase((16, 1000), torch.float16))
    loss = torch.empty(16, dtype=torch.float16)
    counted = int((target != IGNORE_INDEX).sum())
    assert counted == 15
    assert cross_entropy_bytes((logits, target), loss) == counted * 1000 * 2 + 16 * 8 + 16 * 2


def test_the_protocol_carries_strided_logits_and_int64_targets():
    logits, target = inputs(CrossEntropyCase((5, 300), strided=True))
    ours, theirs = socket.socketpair()
    protocol.send(theirs, {"op": "call"}, [logits, target])
    _, (got_logits, got_target) = protocol.recv(ours, time.monotonic() + 5, max_tensor_bytes=1 << 20)
    assert torch.equal(got_logits, logits.cpu()) and got_logits.stride() == logits.stride()
    assert got_target.dtype == torch.int64 and torch.equal(got_target, target.cpu())
    assert judging._output_bytes(EXERCISE, (logits, target)) == 5 * 8  # the reference's meta shape


def test_the_judge_grades_the_reference_notebook(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(judging.ISOLATE_VAR, "1")
    shutil.copy(ROOT / "source" / EXERCISE.name / f"{EXERCISE.name}.ipynb", tmp_path)
    for which in ("visible", "hidden"):
        result = judging.grade_notebook(EXERCISE, cases=which, measure_throughput=False)
        assert result.correct and len(result.cases) == len(CASES[which]), result.summary()


@pytest.mark.gpu
def test_the_throughput_case_is_one_gib_of_llama_3_logits():
    case = EXERCISE.throughput.case
    assert case.shape == (4096, 128_256) and case.dtype == torch.bfloat16
    logits, target = EXERCISE.make_inputs(case, torch.Generator("cuda").manual_seed(0), "cuda")
    assert logits.numel() * logits.element_size() / 2**30 == pytest.approx(0.98, abs=0.01)
    assert EXERCISE.reference(logits, target).dtype == torch.bfloat16
    del logits, target
