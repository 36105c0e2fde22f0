"""Lesson 11's matmuls for Hopper: persistent, fed by tensor descriptors, and in FP8.

- ``persistent_matmul``: lesson 7's kernel with a loop around it. The grid has one program per
  SM (132 on an H200; :data:`INTERPRETER_PROGRAMS` in the interpreter), and program ``p``
  computes output tiles ``p``, ``p + P``, ``p + 2P``, … in lesson 7's grouped order.
- ``tma_matmul``: the same walk, with every tile of ``a``, ``b`` and ``c`` moved by a tensor
  descriptor (``tl.make_tensor_descriptor``). On Hopper a descriptor load is one TMA copy: the
  copy engine computes the addresses, zero-fills what lies past the tensor's edges and writes
  the tile into shared memory, so no thread computes an address or a mask. A descriptor needs a
  16-byte-aligned base, rows a multiple of 16 bytes apart and a contiguous last dimension; the
  wrapper checks all three (:func:`descriptor_problems`), because on a GPU nothing else does for
  strides known only at run time (Triton checks the ones it knows when compiling, and adds
  run-time asserts only in its ``iisan`` instrumentation mode). The interpreter does check:
  it raises ``AssertionError('stride must be 16-byte aligned')``.
- ``fp8_matmul``: ``tma_matmul``'s kernel on ``float8_e4m3fn`` / ``float8_e5m2`` inputs with one
  float32 scale per tensor, as ``torch._scaled_mm`` computes it, and :func:`quantize_fp8`, which
  makes such inputs.

Every wrapper validates its inputs and says what is wrong in a sentence. ``persistent_schedule``
runs either kernel with ``RECORD`` on, to show (and test) which program computed each tile.
"""
import os

import torch
import triton
import triton.language as tl

from autograder.language import say

# --- notebook cell: programs ---
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
INTERPRETER_PROGRAMS = 4  # few, so that each program of a small interpreted launch computes several tiles


def programs_for(device) -> int:
    """How many programs a persistent launch starts: one per SM on a GPU (132 on an H200), a
    few in the interpreter, which runs one program after another anyway."""
    if INTERPRETED:
        return INTERPRETER_PROGRAMS
    return torch.cuda.get_device_properties(device).multi_processor_count


def waves(tiles: int, programs: int) -> str:
    """How ``tiles`` tiles fall on ``programs`` SMs, one tile per SM at a time."""
    full, last = divmod(tiles, programs)
    if last == 0:
        return say("{tiles} tiles = {full} full waves of {programs}", tiles=tiles, full=full, programs=programs)
    return say("{tiles} tiles = {waves:.2f} waves: {full} full, then {last} tiles with {idle} of {programs} SMs idle",
               tiles=tiles, waves=tiles / programs, full=full, last=last, idle=programs - last, programs=programs)


# --- notebook cell: persistent ---
# Lesson 7's tiles (Hopper-sized; one set in the interpreter), its float32 pruning, its order and its
# kernel for one tile.
from autograder.kernels.matmul import CONFIGS, fewer_tiles_for_ieee, matmul_tile, tile_order


@triton.autotune(configs=CONFIGS, key=["M", "N", "K", "INPUT_PRECISION"],
                 prune_configs_by={"early_config_prune": fewer_tiles_for_ieee})
@triton.jit
def persistent_matmul_kernel(a_ptr, b_ptr, c_ptr, owners_ptr, visits_ptr, M, N, K,
                             stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
                             INPUT_PRECISION: tl.constexpr, RECORD: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    # Program p computes tiles p, p + P, p + 2P, ... (P = NUM_PROGRAMS, the grid's size). At any
    # moment the P programs work on P consecutive tiles of lesson 7's grouped order, as one wave
    # of a one-tile-per-program launch did, so they share their tiles of a and b in L2 alike.
    # flatten=True lets the compiler pipeline the two loops as one (the tile's K loop is inlined
    # here): the next tile's first loads are issued while this tile's last steps and its store run.
    for tile in tl.range(tl.program_id(axis=0), tiles, NUM_PROGRAMS, flatten=True):
        row, col = tile_order(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        matmul_tile(a_ptr, b_ptr, c_ptr, row, col, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                    stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, INPUT_PRECISION)  # lesson 7's tile
        if RECORD:  # for the lesson's figure and the tests: who computed this tile, how often
            here = row * tl.cdiv(N, BLOCK_N) + col  # the tile's place in row-major order
            tl.store(owners_ptr + here, tl.program_id(axis=0))
            tl.atomic_add(visits_ptr + here, 1)


def check_matmul_operands(name: str, a: torch.Tensor, b: torch.Tensor, dtypes) -> None:
    """Raise ValueError, in a sentence, unless a (M×K) and b (K×N) can be multiplied here."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(say("{name} takes a (M, K) and a (K, N) tensor, got shapes {a} and {b}",
                             name=name, a=tuple(a.shape), b=tuple(b.shape)))
    if a.dtype != b.dtype and not (a.dtype.itemsize == b.dtype.itemsize == 1):
        raise ValueError(say("{name}: a and b need one dtype, got {a} and {b}", name=name, a=a.dtype, b=b.dtype))
    if a.dtype not in dtypes or b.dtype not in dtypes:
        raise ValueError(say("{name} takes {dtypes}, got {a} and {b}",
                             name=name, dtypes=", ".join(map(str, dtypes)), a=a.dtype, b=b.dtype))
    if a.device != b.device:
        raise ValueError(say("{name}: a is on {a} and b on {b}; put them on one device",
                             name=name, a=a.device, b=b.device))


def persistent_matmul(a: torch.Tensor, b: torch.Tensor, group_m: int = 8, programs: int | None = None) -> torch.Tensor:
    """a @ b for a (M×K) and b (K×N) of one dtype (float16, bfloat16 or float32, any strides), by
    ``programs`` programs (default: one per SM) that each loop over output tiles."""
    check_matmul_operands("persistent_matmul", a, b, (torch.float16, torch.bfloat16, torch.float32))
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    programs = programs or programs_for(a.device)

    def grid(meta):  # never more programs than tiles
        return (min(programs, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)

    precision = "ieee" if a.dtype == torch.float32 else "tf32"  # as lesson 7: float32 stays IEEE
    persistent_matmul_kernel[grid](a, b, c, None, None, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                   b.stride(1), c.stride(0), c.stride(1), GROUP_M=group_m, NUM_PROGRAMS=programs,
                                   INPUT_PRECISION=precision, RECORD=False)
    return c


# --- notebook cell: descriptors ---
if INTERPRETED:
    TMA_CONFIGS = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32})]
else:
    # Shared memory per program: the stages, (BLOCK_M + BLOCK_N)·BLOCK_K elements each, and the
    # tile the store copies out from, BLOCK_M·BLOCK_N. 16-bit, 128×256×64 and 3 stages: 144 KB +
    # 64 KB of the 227 KB; FP8 takes BLOCK_K = 128 for the same 128-byte rows per stage.
    # The 4-warp 128×256 ones are for warp specialisation, which adds its own warps.
    TMA_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, num_warps=warps, num_stages=stages)
                   for bk in (64, 128)  # 16-bit, FP8: 128 bytes of K per row of a tile either way
                   for bm, bn, warps, stages in ((128, 256, 8, 3), (128, 128, 8, 4), (128, 128, 4, 4),
                                                 (64, 128, 4, 4), (128, 256, 4, 3))]


def fitting_configs(configs, named_args, **kwargs):
    """BLOCK_K = 64 for 16-bit inputs, 128 for FP8. With warp specialisation, 4 warps: Triton 3.9
    partitions a Hopper loop of 4 warps (and adds 8 for the partitions), and leaves one of 8 as it is."""
    args = {**named_args, **kwargs}
    block_k = 128 if args["a_ptr"].element_size() == 1 else 64
    big = lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] > 128 * 128  # noqa: E731
    if args["WARP_SPECIALIZE"]:
        keep = [c for c in configs if c.num_warps == 4]
    else:  # a 128×256 float32 accumulator in 4 warps is 256 registers a thread: more than there are
        keep = [c for c in configs if not (c.num_warps == 4 and big(c))]
    return [c for c in keep if c.kwargs["BLOCK_K"] == block_k] or configs


@triton.autotune(configs=TMA_CONFIGS, key=["M", "N", "K", "B_KMAJOR", "SCALED", "FAST_ACCUM", "WARP_SPECIALIZE"],
                 prune_configs_by={"early_config_prune": fitting_configs})
@triton.jit
def tma_matmul_kernel(a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, owners_ptr, visits_ptr, M, N, K,
                      stride_am, stride_b, stride_cm,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr, B_KMAJOR: tl.constexpr,
                      SCALED: tl.constexpr, FAST_ACCUM: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
                      RECORD: tl.constexpr):
    # A descriptor: base, shape, strides and the block one load moves. It is made once per
    # program (128 bytes on Hopper: CUDA's CUtensorMap), and the copy engine does the rest.
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    if B_KMAJOR:  # b is stored as bᵀ, N rows of K: FP8 tensor cores read both operands along K
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_b, 1],
                                           block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_b, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                       block_shape=[BLOCK_M, BLOCK_N])
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    # The store's tile comes from a second counter, one step behind: a value shared by a tile's
    # first loads and its store would tie the flattened pipeline together (Triton's own
    # persistent-matmul tutorial does the same).
    store_tile = tl.program_id(axis=0) - NUM_PROGRAMS
    # Hopper's warp specialisation does not combine with flatten (Triton's tutorial again).
    for tile in tl.range(tl.program_id(axis=0), tiles, NUM_PROGRAMS, flatten=not WARP_SPECIALIZE,
                         warp_specialize=WARP_SPECIALIZE):
        row, col = tile_order(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            # No pointers, no masks: coordinates of the block's corner. What lies past an edge
            # (the last K step, the last tile row or column) arrives as 0.
            a = a_desc.load([row * BLOCK_M, k])
            if B_KMAJOR:
                b = b_desc.load([col * BLOCK_N, k]).T
            else:
                b = b_desc.load([k, col * BLOCK_N])
            if FAST_ACCUM:
                acc = tl.dot(a, b, acc)
            else:  # FP8: the tensor cores sum BLOCK_K products, then one float32 add per output
                acc += tl.dot(a, b)
        store_tile += NUM_PROGRAMS
        row, col = tile_order(store_tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        if SCALED:  # (a·sa)(b·sb) = (a b)·(sa·sb): one multiply per output, before the one rounding
            acc = acc * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr))
        # The store is clipped to the tensor by the copy engine too.
        c_desc.store([row * BLOCK_M, col * BLOCK_N], acc.to(c_desc.dtype))
        if RECORD:
            here = row * tl.cdiv(N, BLOCK_N) + col
            tl.store(owners_ptr + here, tl.program_id(axis=0))
            tl.atomic_add(visits_ptr + here, 1)


def descriptor_problems(name: str, t: torch.Tensor) -> list[str]:
    """What stops ``t`` (2-D) from being read or written through a tensor descriptor, in words."""
    size = t.element_size()
    problems = []
    if t.stride(1) != 1:
        problems.append(say("{name}'s last dimension is not contiguous (strides {strides}): a descriptor copies "
                            "runs of adjacent elements", name=name, strides=tuple(t.stride())))
    if t.data_ptr() % 16:
        problems.append(say("{name} starts at an address {offset} bytes past a multiple of 16: a descriptor's "
                            "base must be 16-byte aligned", name=name, offset=t.data_ptr() % 16))
    if (t.stride(0) * size) % 16:
        problems.append(say("{name}'s rows are {stride} elements ({nbytes} bytes) apart: a descriptor needs a "
                            "multiple of 16 bytes ({elements} {dtype} elements)", name=name, stride=t.stride(0),
                            nbytes=t.stride(0) * size, elements=16 // size, dtype=str(t.dtype).removeprefix("torch.")))
    return problems


def _launch_tma(name, a, b, c, scales, fast_accum, group_m, programs, warp_specialize, config):
    """Check a, b and c for descriptors and launch ``tma_matmul_kernel`` on a persistent grid."""
    b_kmajor = b.stride(0) == 1 and b.stride(1) != 1  # b = wᵀ for a row-major (N, K) w
    b_stored = b.t() if b_kmajor else b
    problems = [p for label, t in (("a", a), ("b" if not b_kmajor else "bᵀ", b_stored), ("c", c))
                for p in descriptor_problems(label, t)]
    if problems:  # on a GPU nothing else would say so: the copy engine would get a bad descriptor
        raise ValueError(say("{name}: {problems}. (A new tensor is aligned; pad an inner dimension to a multiple of "
                             "16 bytes, or use persistent_matmul, which reads through pointers.)",
                             name=name, problems="; ".join(problems)))
    M, K = a.shape
    N = b.shape[1]
    programs = programs or programs_for(a.device)
    if not INTERPRETED:  # the kernel writes its descriptors to a global scratch buffer
        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, device=a.device, dtype=torch.int8))

    def grid(meta):
        return (min(programs, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)

    args = (a, b_stored, c, *scales, None, None, M, N, K, a.stride(0), b_stored.stride(0), c.stride(0))
    flags = dict(GROUP_M=group_m, NUM_PROGRAMS=programs, B_KMAJOR=b_kmajor, SCALED=scales[0] is not None,
                 FAST_ACCUM=fast_accum, WARP_SPECIALIZE=warp_specialize, RECORD=False)
    if config is None:
        tma_matmul_kernel[grid](*args, **flags)
    else:  # the caller's configuration instead of the autotuner's choice
        tma_matmul_kernel.fn[grid](*args, **flags, **config.kwargs, num_warps=config.num_warps,
                                   num_stages=config.num_stages)
    return c


def tma_matmul(a: torch.Tensor, b: torch.Tensor, group_m: int = 8, programs: int | None = None,
               warp_specialize: bool = False, config: triton.Config | None = None) -> torch.Tensor:
    """a @ b for float16 or bfloat16 a (M×K) and b (K×N, row-major or column-major), persistent,
    every tile moved by a tensor descriptor. Rows must be a multiple of 16 bytes apart.
    ``config``: block sizes, warps and stages to use instead of the autotuner's choice."""
    check_matmul_operands("tma_matmul", a, b, (torch.float16, torch.bfloat16))
    c = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    return _launch_tma("tma_matmul", a, b, c, (None, None), True, group_m, programs, warp_specialize, config)


# --- notebook cell: fp8 ---
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}
"""The largest finite value of each FP8 format."""


def quantize_fp8(x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn) -> tuple[torch.Tensor, torch.Tensor]:
    """(x8, scale) with x ≈ x8.float() · scale: one float32 scale for the whole tensor, which maps
    its largest magnitude to the format's largest value."""
    if dtype not in FP8_MAX:
        raise ValueError(say("quantize_fp8 makes float8_e4m3fn or float8_e5m2, not {dtype}", dtype=dtype))
    scale = (x.abs().max().float() / FP8_MAX[dtype]).clamp_min(torch.finfo(torch.float32).tiny)
    x8 = (x.float() / scale).clamp(-FP8_MAX[dtype], FP8_MAX[dtype]).to(dtype)
    return x8, scale


def fp8_matmul(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
               out_dtype: torch.dtype = torch.float16, fast_accum: bool = False, group_m: int = 8,
               programs: int | None = None) -> torch.Tensor:
    """(a · scale_a) @ (b · scale_b), rounded once to ``out_dtype``, as
    ``torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype, use_fast_accum=fast_accum)``.

    ``a`` (M×K) row-major and ``b`` (K×N) column-major (``w.t()`` for a row-major (N, K) ``w``),
    each float8_e4m3fn or float8_e5m2; ``scale_a`` and ``scale_b`` one float32 each; K a multiple
    of 16 and N of 8 (16-byte rows). ``fast_accum=False`` adds the tensor cores' partial sums into
    float32 every BLOCK_K products; True leaves the whole sum to them.
    """
    check_matmul_operands("fp8_matmul", a, b, tuple(FP8_MAX))
    if b.stride(0) != 1:
        raise ValueError(say("fp8_matmul: b must be column-major (strides (1, K), as b = w.t() for a contiguous "
                             "(N, K) w), got strides {strides}: FP8 tensor cores read both operands along K, and "
                             "torch._scaled_mm asks the same", strides=tuple(b.stride())))
    for label, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(s, torch.Tensor) or s.numel() != 1 or s.dtype != torch.float32 or s.device != a.device:
            got = f"{s.dtype} {tuple(s.shape)}" if isinstance(s, torch.Tensor) else type(s).__name__
            raise ValueError(say("fp8_matmul: {name} must be one float32 on {device} (a per-tensor scale), got {got}",
                                 name=label, device=a.device, got=got))
    if out_dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(say("fp8_matmul writes float16 or bfloat16, not {dtype}", dtype=out_dtype))
    c = torch.empty((a.shape[0], b.shape[1]), dtype=out_dtype, device=a.device)
    return _launch_tma("fp8_matmul", a, b, c, (scale_a, scale_b), fast_accum, group_m, programs, False, None)


# --- notebook cell: schedule ---
def persistent_schedule(M: int, N: int, block: int = 32, programs: int = INTERPRETER_PROGRAMS,
                        group_m: int = 8, descriptors: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a persistent kernel with ``RECORD`` on, on zeros: (owners, visits), each (tile rows × tile
    columns): which program computed each tile of an M×N output, and how many times."""
    device = "cpu" if INTERPRETED else "cuda"
    tile_rows, tile_cols = triton.cdiv(M, block), triton.cdiv(N, block)
    owners = torch.full((tile_rows * tile_cols,), -1, dtype=torch.int32, device=device)
    visits = torch.zeros_like(owners)
    a = torch.zeros(M, 16, dtype=torch.float16, device=device)  # K = 16: one step, nothing to compute
    b = torch.zeros(16, N, dtype=torch.float16, device=device)
    c = torch.empty(M, N, dtype=torch.float16, device=device)
    grid = (min(programs, tile_rows * tile_cols),)
    blocks = dict(BLOCK_M=block, BLOCK_N=block, BLOCK_K=16, GROUP_M=group_m, NUM_PROGRAMS=programs, RECORD=True)
    if descriptors:  # the autotuner's kernel, called with one configuration of our choosing
        if not INTERPRETED:
            triton.set_allocator(lambda size, alignment, stream: torch.empty(size, device=device, dtype=torch.int8))
        tma_matmul_kernel.fn[grid](a, b, c, None, None, owners, visits, M, N, 16, 16, N, N, B_KMAJOR=False,
                                   SCALED=False, FAST_ACCUM=True, WARP_SPECIALIZE=False, **blocks)
    else:
        persistent_matmul_kernel.fn[grid](a, b, c, owners, visits, M, N, 16, 16, 1, N, 1, N, 1,
                                          INPUT_PRECISION="tf32", **blocks)
    return owners.view(tile_rows, tile_cols).cpu(), visits.view(tile_rows, tile_cols).cpu()
