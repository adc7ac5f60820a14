"""Hopper's warpgroup MMA (`intrin_cuda.wgmma_m64n64k16`, sm_90a) through
`tdsl.examples.wgmma_gemm`: emulated lane by lane on "c" (A and B read as the matrix
descriptors describe them, through the 128-byte swizzle of the address bits) against
numpy, the CUDA build's PTX and ptxas's figures, and on an sm_90 GPU the numbers."""
import numpy as np
import pytest

import tdsl
from tdsl.examples import mma_gemm, wgmma_gemm
from tdsl.runtime import cuda as rcuda


operands = mma_gemm.inputs


@pytest.mark.parametrize("M,N,K,warpgroups,n_blocks,stages,dtype", [
    (128, 128, 128, 2, 2, 3, "bfloat16"),
    (64, 64, 256, 1, 1, 2, "bfloat16"),
    (128, 256, 192, 2, 2, 4, "float16"),
    (192, 64, 64, 1, 1, 1, "bfloat16"),
])
def test_emulated_wgmma_gemm_matches_numpy(M, N, K, warpgroups, n_blocks, stages, dtype):
    s, args = wgmma_gemm.schedule(M, N, K, dtype, warpgroups, n_blocks, stages)
    a, b = operands(M, N, K, dtype)
    c = np.full((M, N), np.nan, np.float32)
    tdsl.build(s, args, target="c")(a, b, c)
    ref = mma_gemm.reference(a, b)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4 * np.abs(ref).max())


def test_cuda_build_is_sm_90a_wgmma_in_registers():
    if not rcuda.have_nvrtc():
        pytest.skip("NVRTC is not installed")
    s, args = wgmma_gemm.schedule(4096, 4096, 4096, stages=4)
    m = tdsl.build(s, args, target="cuda")
    src = m.get_source()
    # every barrier fences what the threads wrote to the async proxy wgmma reads through
    assert src.count("tdsl_fence_proxy_async(); __syncthreads();") >= 4
    assert "__syncthreads();" not in src.replace("tdsl_fence_proxy_async(); __syncthreads();", "")
    ptx = m.get_source("ptx")
    assert ".target sm_90a" in ptx
    # a k step: 2 calls of 4 instructions (k 64), in every copy of the pipelined loop
    n = ptx.count("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16")
    assert n >= 8 and n % 8 == 0, n
    (r,) = m.resources("sm_90")
    assert r.spill_bytes == 0 and r.registers <= 255, r
    with pytest.raises(tdsl.BuildError, match="only sm_90"):
        m.resources("sm_80")


def test_operands_must_be_swizzled_shared_tiles():
    A, B, C = mma_gemm.definition(64, 64, 64)
    s = tdsl.create_schedule(C)
    from tdsl.autosched import gpu_tensorize as gt
    # the shipped schedule with A's swizzle taken away: the intrinsic refuses the tile
    gt.wgmma_schedule(s, A, B, C, "bfloat16", warpgroups=1, n_blocks=1, stages=1)
    shared = [st for st in s.stages if st.name == "A.shared"]
    shared[0].storage_swizzle_bytes = 0
    with pytest.raises(tdsl.ScheduleError, match="storage_swizzle"):
        tdsl.lower(s, [A, B, C])
    with pytest.raises(tdsl.ScheduleError, match="k_steps must be 1..4"):
        tdsl.intrin_cuda.wgmma_m64n64k16("bfloat16", 8)
    with pytest.raises(tdsl.ScheduleError, match="multiples of the block tile"):
        wgmma_gemm.schedule(100, 128, 64)


def test_wgmma_gemm_on_a_hopper_gpu():
    dev = tdsl.cuda(0)
    if not dev.exist or tuple(rcuda.get_device(0).compute_capability) != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    M = N = K = 512
    s, args = wgmma_gemm.schedule(M, N, K, stages=3)
    f = tdsl.build(s, args, target="cuda")
    a, b = operands(M, N, K, "bfloat16", seed=1)
    da, db = tdsl.nd.array(a, dev), tdsl.nd.array(b, dev)
    dc = tdsl.nd.array(np.zeros((M, N), np.float32), dev)
    f(da, db, dc)
    ref = mma_gemm.reference(a, b)
    np.testing.assert_allclose(dc.numpy(), ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())
