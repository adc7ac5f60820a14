"""The CUDA tensor-core intrinsic `tdsl.intrin_cuda.mma_m16n8k16` and the GEMM tensorized
with it (`tdsl.examples.mma_gemm`): without a GPU, the CUDA source compiles through NVRTC to
PTX with `mma.sync.aligned.m16n8k16`, ptxas reports no spills, and the same schedule built
for "c" (the instruction emulated lane by lane) matches numpy; on a GPU it runs for real."""
import numpy as np
import pytest

import tdsl
from tdsl.examples import mma_gemm
from tdsl.runtime import cuda as rcuda

DTYPES = ["bfloat16", "float16"]


def _inputs(M, N, K, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    if dtype == "bfloat16":
        return tdsl.nd.float32_to_bfloat16(a), tdsl.nd.float32_to_bfloat16(b)
    return a.astype(np.float16), b.astype(np.float16)


def _check(f, M, N, K, dtype):
    a, b = _inputs(M, N, K, dtype)
    c = np.full((M, N), np.nan, np.float32)
    f(a, b, c)
    # inputs are exact in float32; only the order of the float32 sums differs
    np.testing.assert_allclose(c, mma_gemm.reference(a, b), rtol=1e-5, atol=1e-4)


def _cuda_or_skip():
    if not rcuda.have_nvrtc():
        pytest.skip("NVRTC is not installed (pip install cuda-bindings nvidia-cuda-nvrtc)")
    if rcuda.cuda_include_dir() is None:
        pytest.skip("cuda_bf16.h / cuda_fp16.h not found (set CUDA_HOME)")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,config", [
    ((64, 64, 64), {}),
    ((32, 48, 48), dict(warps=(1, 2), warp_tiles=(2, 3), k_step=16)),
])
def test_emulated_gemm_matches_numpy(dtype, shape, config):
    s, args = mma_gemm.schedule(*shape, dtype, **config)
    f = tdsl.build(s, args, target="c")
    _check(f, *shape, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ptx_has_mma_sync_and_no_spills(dtype):
    _cuda_or_skip()
    s, args = mma_gemm.schedule(256, 256, 256, dtype)
    f = tdsl.build(s, args, target="cuda")
    src = f.get_source()
    assert "9.7.14.5.8" in src          # the layout the helper follows, cited where it is
    ptx = f.get_source("ptx")           # TDSL_CUDA_ARCH, compute_80 by default
    ptype = {"bfloat16": "bf16", "float16": "f16"}[dtype]
    n = ptx.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{ptype}.{ptype}.f32")
    assert n == 2 * 2 * 2               # warp tiles x k blocks of a k step, unrolled
    (r,) = f.resources(arch="sm_90")
    assert r.spill_bytes == 0, r


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_on_a_gpu(dtype):
    """The one check of the instruction's fragment layout itself."""
    if not tdsl.cuda(0).exist:
        pytest.skip("no CUDA GPU")
    s, args = mma_gemm.schedule(128, 128, 128, dtype)
    _check(tdsl.build(s, args, target="cuda"), 128, 128, 128, dtype)


def _one_warp(bind_lanes_around=False, lanes=32):
    """A 16 x 8 x 16 GEMM in one block: A and B staged in shared memory, C tensorized."""
    A, B, C = mma_gemm.definition(16, 8, 16)
    s = tdsl.create_schedule(C)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CS = s.cache_write(C, "shared")
    tx = tdsl.thread_axis("threadIdx.x")
    i, j = C.op.axis
    block, rest = s[C].split(s[C].fuse(i, j), nparts=1)
    _, lane = s[C].split(rest, factor=lanes)
    s[C].bind(block, tdsl.thread_axis("blockIdx.x"))
    s[C].bind(lane, tx)
    at = lane if bind_lanes_around else block
    s[CS].compute_at(s[C], at)
    s[CS].tensorize(CS.op.axis[0], tdsl.intrin_cuda.mma_m16n8k16())
    for T in (AS, BS):
        s[T].compute_at(s[C], at)
        _, l2 = s[T].split(s[T].fuse(*s[T].op.axis), factor=lanes)
        s[T].bind(l2, tx)
    return s, [A, B, C]


def test_one_warp_emulated():
    s, args = _one_warp()
    _check(tdsl.build(s, args, target="c"), 16, 8, 16, "bfloat16")


def test_warp_intrinsic_checks_its_lanes():
    s, args = _one_warp(bind_lanes_around=True)
    with pytest.raises(tdsl.ScheduleError, match="bound to threadIdx.x"):
        tdsl.lower(s, args)
    s, args = _one_warp(lanes=16)
    with pytest.raises(tdsl.ScheduleError, match="extent 32"):
        tdsl.lower(s, args)


def test_intrinsic_pointers_say_what_they_write():
    s, args = mma_gemm.schedule(64, 64, 64)
    text = str(tdsl.lower(s, args))
    assert "address_of(C.shared[" in text and ", 3)" in text      # read and written
    with pytest.raises(tdsl.TdslError, match="mode"):
        tdsl.Region(args[0], None, ()).access_ptr("x")


def test_needs_threads_and_a_known_dtype():
    with pytest.raises(tdsl.ScheduleError, match="dtype"):
        tdsl.intrin_cuda.mma_m16n8k16("float32")
    A, B, C = mma_gemm.definition(16, 8, 16)
    s = tdsl.create_schedule(C)
    s[C].tensorize(C.op.axis[0], tdsl.intrin_cuda.mma_m16n8k16())
    with pytest.raises(tdsl.ScheduleError, match="threadIdx.x"):
        tdsl.lower(s, [A, B, C])
