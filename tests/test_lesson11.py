"""Lesson 11: the persistent matmul, the one fed by tensor descriptors and the FP8 one against
PyTorch on ragged shapes; every tile computed once (wrong walks made from the kernels' own source
must fail); the wrappers' refusals; the FP8 accuracy the lesson quotes; reading Hopper's IR
without a GPU (autograder.cross_compile); the notebook's quiz."""
import re

import pytest
import torch
import triton

from autograder import quiz
from autograder.cross_compile import compile_for, count_ops, shared_buffers
from autograder.guards import watch  # its torch.empty returns NaNs: a never-written tile reads wrong
from autograder.kernels import tma_matmul as hopper
from autograder.lesson_kernels.matmul import MATMUL_TOLERANCES

from conftest import DEVICE, ROOT
from kit import mutant, notebook_code

DEV = DEVICE.device
SOURCE = ROOT / "autograder" / "kernels" / "tma_matmul.py"
NOTEBOOK = ROOT / "notebooks" / "11_hopper.ipynb"
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE.has_gpu else [])  # no bf16 in the interpreter
# 33×65×17: ragged on every edge for 32-wide tiles; 300×40×100: 10 tile rows, a short second band
# of GROUP_M = 8, 20 tiles for 4 programs; 130×3×257: 9 K steps, the last of one column.
SHAPES = [(1, 1, 1), (33, 65, 17), (300, 40, 100), (130, 3, 257)]
# Descriptors need rows a multiple of 16 bytes apart: K and N multiples of 8 in float16.
TMA_SHAPES = [(1, 8, 8), (33, 64, 24), (100, 72, 136), (129, 40, 64)]


def inputs(m, n, k, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=generator), torch.randn(k, n, generator=generator)
    return a.to(DEV, dtype), b.to(DEV, dtype)


def assert_matmul(out, a, b):
    atol, rtol = MATMUL_TOLERANCES[a.dtype]
    assert out.shape == (a.shape[0], b.shape[1]) and out.dtype == a.dtype
    torch.testing.assert_close(out.double(), a.double() @ b.double(), atol=atol, rtol=rtol)


def fp8_inputs(m, n, k, formats=(torch.float8_e4m3fn, torch.float8_e4m3fn), seed=0):
    """(a8, b8 column-major, scale_a, scale_b) from standard normal values."""
    generator = torch.Generator().manual_seed(seed)
    a8, sa = hopper.quantize_fp8(torch.randn(m, k, generator=generator).to(DEV), formats[0])
    w8, sw = hopper.quantize_fp8(torch.randn(n, k, generator=generator).to(DEV), formats[1])
    return a8, w8.t(), sa, sw


def dequantised_product(a8, b8, sa, sb):
    return (a8.float() * sa) @ (b8.float() * sb)


# --- the persistent matmul ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_persistent_matmul_matches_float64_on_ragged_shapes(shape, dtype):
    a, b = inputs(*shape, dtype)
    assert_matmul(hopper.persistent_matmul(a, b), a, b)


def test_persistent_matmul_reads_strided_and_transposed_operands():
    wide = torch.randn(40, 100, device=DEV)
    wide[:, 70:] = float("nan")  # read past column 70 of a row and the output turns NaN
    a, b = wide[:, :70], torch.randn(50, 70, device=DEV).t()  # row stride 100; column-major b
    torch.testing.assert_close(hopper.persistent_matmul(a, b), a @ b, atol=1e-4, rtol=1e-5)


def test_the_number_of_programs_changes_nothing_in_the_result():
    a, b = inputs(300, 40, 100, torch.float32)
    outputs = [hopper.persistent_matmul(a, b, programs=p) for p in (1, 3, 4, 100)]  # 100: more than the 20 tiles
    assert all(torch.equal(outputs[0], out) for out in outputs[1:])


@pytest.mark.skipif(DEVICE.has_gpu, reason="a GPU launch has one program per SM")
def test_the_interpreter_launches_a_few_programs_and_waves_are_counted():
    assert hopper.programs_for(DEV) == hopper.INTERPRETER_PROGRAMS == 4
    assert hopper.waves(1024, 132) == "1024 tiles = 7.76 waves: 7 full, then 100 tiles with 32 of 132 SMs idle"
    assert hopper.waves(264, 132) == "264 tiles = 2 full waves of 132"


# --- every tile once ---------------------------------------------------------------------------

@pytest.mark.parametrize("descriptors", [False, True], ids=["pointers", "descriptors"])
@pytest.mark.parametrize("programs", [1, 3, 4, 7])
def test_every_tile_is_computed_once_by_program_t_mod_p(programs, descriptors):
    from autograder.kernels.matmul import launch_order

    m, n = 10 * 32 - 5, 7 * 32  # 10 × 7 tiles: a short second band of GROUP_M = 8
    owners, visits = hopper.persistent_schedule(m, n, programs=programs, descriptors=descriptors)
    assert torch.equal(visits, torch.ones_like(visits))
    assert torch.equal(owners.long(), launch_order(m, n, 32, 32, 8) % programs)


WALKS = {
    "skips the last tile": ("tl.range(tl.program_id(axis=0), tiles, NUM_PROGRAMS, flatten=True)",
                            "tl.range(tl.program_id(axis=0), tiles - 1, NUM_PROGRAMS, flatten=True)"),
    "strides one too far": ("tiles, NUM_PROGRAMS, flatten=True)", "tiles, NUM_PROGRAMS + 1, flatten=True)"),
    "strides one too short": ("tiles, NUM_PROGRAMS, flatten=True)", "tiles, NUM_PROGRAMS - 1, flatten=True)"),
    "every program from tile 0": ("tl.range(tl.program_id(axis=0), tiles, NUM_PROGRAMS, flatten=True)",
                                  "tl.range(0, tiles, NUM_PROGRAMS, flatten=True)"),
}


@pytest.mark.parametrize("walk", WALKS)
def test_a_wrong_walk_over_the_tiles_is_caught(walk):
    wrong = mutant(SOURCE, WALKS[walk])
    _, visits = wrong.persistent_schedule(10 * 32 - 5, 7 * 32, programs=4)
    assert not torch.equal(visits, torch.ones_like(visits)), walk
    if walk in ("skips the last tile", "strides one too far"):  # tiles never written: wrong values too
        a, b = inputs(300, 40, 100, torch.float32)
        with pytest.raises(AssertionError), watch():  # not the right values a freed output left there
            assert_matmul(wrong.persistent_matmul(a, b), a, b)


DESCRIPTOR_MISTAKES = {  # the edit, and whether to count visits too: where the store's counter runs
    # past the last tile, recording would write past the end of the visits; the values show those
    "stores each tile where the next one goes": (("store_tile = tl.program_id(axis=0) - NUM_PROGRAMS",
                                                  "store_tile = tl.program_id(axis=0)"), False),
    "strides one too short": (("tiles, NUM_PROGRAMS, flatten=not WARP_SPECIALIZE",
                               "tiles, NUM_PROGRAMS - 1, flatten=not WARP_SPECIALIZE"), False),
    "stops a K step early": (("for k in range(0, K, BLOCK_K):", "for k in range(0, K - BLOCK_K, BLOCK_K):"), True),
}


@pytest.mark.parametrize("mistake", DESCRIPTOR_MISTAKES)
def test_a_wrong_descriptor_kernel_is_caught(mistake):
    edit, count_visits = DESCRIPTOR_MISTAKES[mistake]
    wrong = mutant(SOURCE, edit)
    a, b = inputs(100, 72, 136, torch.float16)
    once = True
    if count_visits:
        _, visits = wrong.persistent_schedule(10 * 32 - 5, 7 * 32, programs=4, descriptors=True)
        once = torch.equal(visits, torch.ones_like(visits))
    with watch():  # a tile never stored reads as NaN
        out = wrong.tma_matmul(a, b)
    right_values = torch.allclose(out.double(), a.double() @ b.double(),
                                  atol=MATMUL_TOLERANCES[torch.float16][0], rtol=MATMUL_TOLERANCES[torch.float16][1])
    assert not (right_values and once), mistake


# --- tensor descriptors ------------------------------------------------------------------------

@pytest.mark.parametrize("b_layout", ["row-major", "column-major"])
@pytest.mark.parametrize("shape", TMA_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_tma_matmul_matches_float64_on_ragged_shapes(shape, b_layout):
    m, n, k = shape
    a, b = inputs(m, n, k, torch.float16)
    if b_layout == "column-major":
        b = b.t().contiguous().t()  # stored as N rows of K: the descriptor reads bᵀ
    assert_matmul(hopper.tma_matmul(a, b), a, b)


@pytest.mark.parametrize("fixes", ["no", "config"])
def test_tma_matmul_takes_a_configuration_instead_of_the_autotuners(fixes):
    a, b = inputs(33, 64, 24, torch.float16)
    config = triton.Config({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16}, num_warps=4, num_stages=2)
    assert_matmul(hopper.tma_matmul(a, b, config=config if fixes == "config" else None), a, b)


def refusal(fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as error:
        fn(*args, **kwargs)
    return str(error.value)


def test_the_wrappers_refuse_what_they_cannot_multiply_and_say_why():
    f32, f16 = torch.randn(8, 16, device=DEV), torch.randn(16, 8, device=DEV).half()
    assert "(M, K) and a (K, N)" in refusal(hopper.persistent_matmul, f32, f32)
    assert "need one dtype" in refusal(hopper.persistent_matmul, f32, f16)
    assert "float64" in refusal(hopper.persistent_matmul, f32.double(), f32.t().double())
    assert "takes torch.float16, torch.bfloat16" in refusal(hopper.tma_matmul, f32, f32.t())


def test_a_descriptor_is_refused_rows_not_a_multiple_of_16_bytes_apart_a_misaligned_base_or_a_strided_row():
    a, b = inputs(33, 40, 70, torch.float16)
    message = refusal(hopper.tma_matmul, a, b)
    assert "a's rows are 70 elements (140 bytes) apart" in message and "8 float16 elements" in message
    assert "persistent_matmul" in message  # what to use instead
    a, b = inputs(33, 40, 65, torch.float16)
    assert "a starts at an address 2 bytes past a multiple of 16" in refusal(hopper.tma_matmul, a[:, 1:], b[1:])
    a, b = inputs(64, 40, 32, torch.float16)
    assert "a's last dimension is not contiguous" in refusal(hopper.tma_matmul, a.t().contiguous().t()[:, :32], b)
    a, b = inputs(33, 36, 64, torch.float16)  # c would be 33 × 36: rows 72 bytes apart
    assert "c's rows are 36 elements (72 bytes) apart" in refusal(hopper.tma_matmul, a, b)


@pytest.mark.skipif(DEVICE.has_gpu, reason="on a GPU nothing checks a run-time stride: launching it would be unsafe")
def test_past_the_wrapper_the_interpreter_refuses_a_misaligned_descriptor_itself():
    a, b, c = torch.randn(33, 70).half(), torch.randn(70, 40).half(), torch.empty(33, 40).half()
    with pytest.raises(Exception, match="stride must be 16-byte aligned"):
        hopper.tma_matmul_kernel.fn[(1,)](a, b, c, None, None, None, None, 33, 40, 70, 70, 40, 40, BLOCK_M=32,
                                          BLOCK_N=32, BLOCK_K=32, GROUP_M=8, NUM_PROGRAMS=1, B_KMAJOR=False,
                                          SCALED=False, FAST_ACCUM=True, WARP_SPECIALIZE=False, RECORD=False)


# --- FP8 ---------------------------------------------------------------------------------------

def test_quantize_fp8_maps_the_largest_magnitude_to_the_formats_largest_value():
    x = torch.randn(50, 70, generator=torch.Generator().manual_seed(0)).to(DEV)
    # rounding: half a step of the fraction's 3 (2) bits, or of the smallest subnormal (2^-9, 2^-16)
    for fmt, largest, rtol, tiny in ((torch.float8_e4m3fn, 448.0, 2**-4, 2**-10),
                                     (torch.float8_e5m2, 57344.0, 2**-3, 2**-17)):
        x8, scale = hopper.quantize_fp8(x, fmt)
        assert x8.dtype == fmt and scale.dtype == torch.float32 and scale.numel() == 1
        assert x8.float().abs().max().item() == largest
        torch.testing.assert_close(x8.float() * scale, x, atol=tiny * scale.item(), rtol=rtol)
    zeros8, scale = hopper.quantize_fp8(torch.zeros(4, 4, device=DEV))
    assert scale > 0 and not zeros8.float().isnan().any()
    assert "float8_e4m3fn or float8_e5m2" in refusal(hopper.quantize_fp8, x, torch.float16)


@pytest.mark.parametrize("formats", [(torch.float8_e4m3fn,) * 2, (torch.float8_e5m2,) * 2,
                                     (torch.float8_e4m3fn, torch.float8_e5m2)], ids=["e4m3", "e5m2", "e4m3 x e5m2"])
@pytest.mark.parametrize("shape", [(1, 8, 16), (40, 48, 64), (70, 56, 96)], ids=lambda s: "x".join(map(str, s)))
def test_fp8_matmul_is_the_dequantised_product_rounded_once(shape, formats):
    a8, b8, sa, sb = fp8_inputs(*shape, formats)
    out = hopper.fp8_matmul(a8, b8, sa, sb, out_dtype=torch.float16)
    assert out.dtype == torch.float16 and out.shape == shape[:2]
    # the same exact products summed in float32 in another order, then one float16 rounding
    torch.testing.assert_close(out.float(), dequantised_product(a8, b8, sa, sb), atol=1e-2, rtol=2e-3)


def test_fp8_matmul_agrees_with_torch_scaled_mm():
    a8, b8, sa, sb = fp8_inputs(64, 48, 96)
    ours = hopper.fp8_matmul(a8, b8, sa, sb, out_dtype=torch.float16)
    theirs = torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.float16)
    torch.testing.assert_close(ours.float(), theirs.float(), atol=1e-2, rtol=2e-3)


def test_the_benchmarks_fp8_declaration_judges_a_float16_output_against_the_float64_product():
    from autograder.correctness import judge_output
    from autograder.lesson_kernels.tma_matmul_fp8 import EXERCISE as FP8

    case = FP8.visible_cases[DEV][1]
    inputs = FP8.make_inputs(case, torch.Generator(device=DEV).manual_seed(0), DEV)
    a8, b8, sa, sb = inputs
    assert a8.dtype == b8.dtype == case.dtype and b8.stride(0) == 1 and sa.dtype == sb.dtype == torch.float32
    out = hopper.fp8_matmul(*inputs)
    assert judge_output(FP8, case, inputs, (out,)) is None
    assert judge_output(FP8, case, inputs, (out.float(),)) == ("output dtype is torch.float32, expected torch.float16.",
                                                              "dtype")
    assert judge_output(FP8, case, inputs, (hopper.fp8_matmul(a8, b8, sa, sb * 1.05),)).kind == "values"
    # timed natively, the reference is torch._scaled_mm itself
    torch.testing.assert_close(FP8.reference(*inputs).float(), out.float(), atol=1e-2, rtol=2e-3)


def test_a_wrong_scale_is_caught():
    wrong = mutant(SOURCE, ("acc = acc * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr))",
                            "acc = acc * tl.load(scale_a_ptr)"))
    a8, b8, sa, sb = fp8_inputs(40, 48, 64)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(wrong.fp8_matmul(a8, b8, sa, sb).float(), dequantised_product(a8, b8, sa, sb),
                                   atol=1e-2, rtol=2e-3)


def test_fp8_matmul_refuses_a_row_major_b_a_bad_scale_and_a_float32_output():
    a8, b8, sa, sb = fp8_inputs(32, 48, 64)
    assert "b must be column-major" in refusal(hopper.fp8_matmul, a8, b8.contiguous(), sa, sb)
    assert "scale_a must be one float32" in refusal(hopper.fp8_matmul, a8, b8, sa.double(), sb)
    assert "scale_b must be one float32" in refusal(hopper.fp8_matmul, a8, b8, sa, torch.ones(2, device=DEV))
    assert "float16 or bfloat16, not torch.float32" in refusal(hopper.fp8_matmul, a8, b8, sa, sb,
                                                               out_dtype=torch.float32)
    assert "takes torch.float8_e4m3fn" in refusal(hopper.fp8_matmul, a8.half(), b8.half(), sa, sb)


def relative_rms(got, exact):
    return ((got.double() - exact).square().mean().sqrt() / exact.square().mean().sqrt()).item()


def test_the_fp8_error_the_lesson_quotes():
    """Section 4's table: 256 × 1024 @ 1024 × 256 standard normal, seed 0, inputs rounded, exact
    products summed in float32: e4m3 about 4%, e5m2 about 7%, some 130 and 250 times float16's 0.03%."""
    torch.manual_seed(0)
    a, b = torch.randn(256, 1024), torch.randn(1024, 256)
    exact = a.double() @ b.double()

    def through(x, fmt, dim=None):
        if fmt not in hopper.FP8_MAX:
            return x.to(fmt).float()
        if dim is None:
            x8, scale = hopper.quantize_fp8(x, fmt)
            return x8.float() * scale
        scale = x.abs().amax(dim=dim, keepdim=True) / hopper.FP8_MAX[fmt]
        return (x / scale).to(fmt).float() * scale

    error = {fmt: relative_rms(through(a, fmt) @ through(b, fmt), exact)
             for fmt in (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)}
    assert 2.5e-4 < error[torch.float16] < 3.5e-4 and 2e-3 < error[torch.bfloat16] < 2.7e-3
    assert 0.035 < error[torch.float8_e4m3fn] < 0.04 and 0.07 < error[torch.float8_e5m2] < 0.078
    assert 120 < error[torch.float8_e4m3fn] / error[torch.float16] < 135
    assert 240 < error[torch.float8_e5m2] / error[torch.float16] < 260
    spiked = a.clone()
    spiked[0, 0] = 1e5  # the typical values fall below e4m3's smallest normal number
    exact = spiked.double() @ b.double()
    per_tensor = relative_rms((through(spiked, torch.float8_e4m3fn) @ through(b, torch.float8_e4m3fn))[1:], exact[1:])
    per_row = relative_rms((through(spiked, torch.float8_e4m3fn, 1) @ through(b, torch.float8_e4m3fn))[1:], exact[1:])
    assert per_tensor > 0.1 and per_row < 0.04


# --- Hopper's code, compiled without a GPU -------------------------------------------------------

def hopper_compile(stages=3, **flags):
    m = n = k = 4096
    a, b, c = (torch.empty(s, dtype=torch.float16) for s in ((m, k), (k, n), (m, n)))
    options = dict(B_KMAJOR=False, SCALED=False, FAST_ACCUM=True, WARP_SPECIALIZE=False, RECORD=False) | flags
    return compile_for(hopper.tma_matmul_kernel, a, b, c, None, None, None, None, m, n, k, k, n, n, num_warps=8,
                       num_stages=stages, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, NUM_PROGRAMS=132, **options)


def test_the_descriptor_kernel_compiled_for_hopper_has_a_buffer_per_stage_and_copies_tiles_with_tma():
    import triton.language as tl

    before = dict(vars(tl.core))
    if not DEVICE.has_gpu:  # a kernel that calls a @jit helper (tl.cdiv) leaves interpreter patches behind
        a, b = inputs(40, 32, 32, torch.float16)
        hopper.tma_matmul(a, b)
        before = dict(vars(tl.core))
    compiled = hopper_compile(stages=3)
    ir = compiled.asm["ttgir"]
    assert {((3, 128, 64), "f16"), ((3, 64, 256), "f16"), ((128, 256), "f16")} <= set(shared_buffers(ir))
    assert count_ops(ir, "ttng.async_tma_copy_global_to_local", "ttng.warp_group_dot") == {
        "ttng.async_tma_copy_global_to_local": 6, "ttng.warp_group_dot": 1}  # 2 per stage; wgmma
    assert ir.count("nbytes = 128") >= 3  # three 128-byte descriptors
    assert 3 * 49_152 + 65_536 <= compiled.metadata.shared <= 232_448  # fits an H200 program
    assert re.search(r"cp\.async\.bulk\.tensor", compiled.asm["ptx"])
    assert dict(vars(tl.core)) == before  # the interpreter's state is as it was
    if not DEVICE.has_gpu:
        hopper.tma_matmul(a, b)  # and interpreted kernels still run


def test_shared_buffers_and_count_ops_read_ir_lines():
    ir = ("%a = ttg.local_alloc : () -> !ttg.memdesc<3x128x64xf16, #shared, #smem, mutable> loc(#loc1)\n"
          "%b = ttg.local_alloc %x : (tensor<64x256xf8E4M3FN, #blocked>) -> !ttg.memdesc<64x256xf8E4M3FN, #shared>\n"
          "%c = ttg.local_alloc : () -> !ttg.memdesc<3x1xi64, #shared1, #smem, mutable>\n"
          "ttng.async_tma_copy_global_to_local %d ttng.async_tma_copy_global_to_local_x")
    assert shared_buffers(ir) == [((3, 128, 64), "f16"), ((64, 256), "f8E4M3FN"), ((3, 1), "i64")]
    assert count_ops(ir, "ttng.async_tma_copy_global_to_local") == {"ttng.async_tma_copy_global_to_local": 1}


# --- the notebook --------------------------------------------------------------------------------

def test_the_notebook_asks_every_lesson_eleven_question_and_each_has_chinese():
    code = "\n".join(notebook_code(NOTEBOOK))
    questions = quiz.load_quizzes()["questions"]
    ours = [q for q in questions if q.startswith("q11")]
    assert len(ours) >= 3 and all(f'ask("{q}")' in code for q in ours)
    assert all(questions[q]["zh"]["question"] for q in ours)


@pytest.mark.skipif(not DEVICE.interpreted, reason="the script times on a GPU; in the interpreter it checks values")
def test_every_way_of_adding_fp8_sums_that_the_gpu_notes_time_computes_the_product():
    """scripts/time_fp8_accumulation.py (results/gpu/NOTES.md, 2026-12-07 (m)), run as on the CPU:
    each of its five variants within float16's rounding of the exact product."""
    import subprocess
    import sys
    from conftest import venv_env
    done = subprocess.run([sys.executable, "scripts/time_fp8_accumulation.py"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=venv_env(TRITON_INTERPRET="1", PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    errors = [float(line.rsplit(" ", 1)[1]) for line in done.stdout.splitlines() if "max error" in line]
    assert len(errors) == 5 and max(errors) < 0.05, done.stdout


@pytest.mark.skipif(not DEVICE.interpreted, reason="the script times on a GPU; in the interpreter it checks values")
def test_the_matmul_with_its_output_stored_in_halves_that_the_gpu_notes_time_computes_the_product():
    """scripts/time_epilogue_subtile.py (results/gpu/NOTES.md, 2026-12-07 (m)), run as on the CPU:
    the tile stored whole and in two halves, each within float32's rounding of a @ b."""
    import subprocess
    import sys
    from conftest import venv_env
    done = subprocess.run([sys.executable, "scripts/time_epilogue_subtile.py"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=venv_env(TRITON_INTERPRET="1", PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    errors = [float(line.rsplit(" ", 1)[1]) for line in done.stdout.splitlines() if "max error" in line]
    assert len(errors) == 2 and max(errors) < 1e-4, done.stdout
