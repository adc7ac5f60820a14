"""What ptxas says CUDA kernels cost, and the occupancy that allows, with no GPU: the
occupancy rules against hand-worked cases, the report parser against fixed text, and the
shipped and auto-scheduled kernels against ptxas itself (skipped without NVRTC or ptxas)."""
import pytest

import tdsl
from tdsl.codegen import ptxas
from tdsl.examples import gpu, kernels
from tdsl.gpu_arch import occupancy


def _tool_or_skip():
    from tdsl.runtime import cuda
    if not cuda.have_nvrtc() and not ptxas.find_ptxas():
        pytest.skip("neither NVRTC nor ptxas is installed")


# ------------------------------------------------------------------ the occupancy calculator

def test_occupancy_register_bound():
    # 128 x 32 = 4096 registers a warp; a sub-partition's 16384 hold 4 warps, the SM 16:
    # two blocks of 8 warps, 16 of 64 warps
    o = occupancy("sm_90", 256, 128, 0)
    assert (o.blocks_per_sm, o.warps_per_sm, o.limiter, o.fraction) == (2, 16, "registers", 0.25)


def test_occupancy_small_blocks_hit_the_block_limit():
    # 2 warps a block, 32 registers (1024 a warp: 64 warps fit): 32 blocks = 64 warps = 100%
    o = occupancy("sm_80", 64, 32, 0)
    assert (o.blocks_per_sm, o.warps_per_sm, o.limiter, o.fraction) == (32, 64, "blocks", 1.0)
    # one warp a block: still 32 blocks, half the SM's warps
    assert occupancy("sm_90", 32, 16, 0).fraction == 0.5


def test_occupancy_registers_round_per_warp_and_sub_partition():
    # 200 registers -> 6400 a warp; 65536 / 6400 = 10 warps, but a sub-partition holds
    # 16384 / 6400 = 2, so 8 warps: one block of 8 warps (256 threads)
    assert occupancy("sm_90", 256, 200, 0).blocks_per_sm == 1
    # 33 registers round up to 1280 a warp: 12 warps a sub-partition, 48 an SM
    o = occupancy("sm_90", 128, 33, 0)
    assert (o.blocks_per_sm, o.warps_per_sm) == (12, 48)


def test_occupancy_shared_memory_bound_differs_by_architecture():
    # 48 KiB + 1 KiB reserved a block: 164 KiB holds 3 (sm_80), 228 KiB holds 4 (sm_90)
    smem = 48 * 1024
    a, b = occupancy("sm_80", 128, 32, smem), occupancy("sm_90", 128, 32, smem)
    assert (a.blocks_per_sm, a.limiter) == (3, "shared")
    assert (b.blocks_per_sm, b.limiter) == (4, "shared")


def test_occupancy_full_blocks():
    o = occupancy("sm_90", 1024, 32, 0)     # 32 warps a block: two fit
    assert (o.blocks_per_sm, o.fraction, o.limiter) == (2, 1.0, "warps")
    assert occupancy("sm_90", 1024, 64, 0).blocks_per_sm == 1    # 64 x 1024 = all registers
    with pytest.raises(ValueError):
        occupancy("sm_90", 2048, 32, 0)


# ------------------------------------------------------------------ parsing ptxas -v

REPORT = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'gemm_kernel' for 'sm_90'
ptxas info    : Function properties for gemm_kernel
    24 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads
ptxas info    : Function properties for _Z6helperf
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 8192 bytes smem, 376 bytes cmem[0]
ptxas info    : Compile time = 72.339 ms
ptxas info    : Compiling entry function 'sum_kernel' for 'sm_90'
ptxas info    : Function properties for sum_kernel
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 18 registers, 372 bytes cmem[0]
"""


def test_parse_ptxas_report():
    got = ptxas.parse(REPORT)
    assert got["gemm_kernel"] == {"arch": "sm_90", "registers": 255, "spill_store_bytes": 16,
                                  "spill_load_bytes": 12, "stack_bytes": 24, "shared_bytes": 8192}
    assert got["sum_kernel"] == {"arch": "sm_90", "registers": 18, "spill_store_bytes": 0,
                                 "spill_load_bytes": 0, "stack_bytes": 0, "shared_bytes": 0}


def test_without_nvrtc_or_ptxas_a_build_error_says_what_to_install(monkeypatch):
    from tdsl.runtime import cuda
    monkeypatch.setattr(cuda, "have_nvrtc", lambda: False)
    monkeypatch.setattr(ptxas, "find_ptxas", lambda: None)
    with pytest.raises(tdsl.BuildError, match="nvidia-cuda-nvcc"):
        ptxas.report("__global__ void k() {}", "sm_90")


# ------------------------------------------------------------------ kernels through ptxas

def _check_sane(mod):
    recs = mod.resources()
    assert {r.arch for r in recs} == {"sm_80", "sm_90"}
    assert {r.kernel for r in recs} == {k.name for k in mod.kernels}
    for r in recs:
        assert r.spill_bytes == 0 and r.stack_bytes == 0, str(r)
        assert 8 <= r.registers <= 255, str(r)
        assert r.occupancy.blocks_per_sm >= 1, str(r)
    return recs


def test_hand_sgemm_keeps_its_tile_in_registers_and_two_blocks_resident():
    _tool_or_skip()
    block, tile, k_tile = (16, 16), (8, 4), 16    # matmul_fast_schedule's sizes
    mod = tdsl.build(*gpu.matmul_fast_schedule(512, 512, 512), target="cuda")
    threads = block[0] * block[1]
    for r in _check_sane(mod):
        # the 8x4 accumulators and a column of A and a row of B live in registers ...
        assert r.registers >= tile[0] * tile[1] + tile[0] + tile[1], str(r)
        # ... in the budget of two resident blocks, what the 128x64 block tile is sized for
        budget = 65536 // (2 * threads)
        assert r.occupancy.fraction >= occupancy(r.arch, threads, budget, r.shared_bytes).fraction
        assert r.occupancy.blocks_per_sm >= 2, str(r)
        # two tiles of A and of B: double-buffered
        assert r.shared_bytes == 2 * (block[0] * tile[0] + block[1] * tile[1]) * k_tile * 4


@pytest.mark.parametrize("name", ["elementwise", "matmul", "conv2d", "softmax", "sum"])
def test_shipped_gpu_schedules_do_not_spill(name):
    _tool_or_skip()
    s, args = {"elementwise": lambda: gpu.elementwise_schedule(4096),
               "matmul": lambda: gpu.matmul_schedule(256, 256, 256, vector_copy=True, unroll=True),
               "conv2d": lambda: gpu.conv2d_schedule(1, 16, 34, 34, 16),
               "softmax": lambda: gpu.softmax_schedule(64, 256),
               "sum": lambda: gpu.sum_schedule(64, 256)}[name]()
    _check_sane(tdsl.build(s, args, target="cuda"))


def _auto(name):
    if name == "gemm":
        A = tdsl.placeholder((1024, 1024), name="A")
        B = tdsl.placeholder((1024, 1024), name="B")
        k = tdsl.reduce_axis((0, 1024), name="k")
        C = tdsl.compute((1024, 1024), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
        return C, [A, B, C]
    if name == "conv2d":
        X = tdsl.placeholder((1, 64, 58, 58), name="X")
        W = tdsl.placeholder((64, 64, 3, 3), name="W")
        c, dy, dx = (tdsl.reduce_axis((0, n), name=v) for n, v in ((64, "c"), (3, "dy"), (3, "dx")))
        Y = tdsl.compute((1, 64, 56, 56), lambda n, f, y, x: tdsl.sum(
            X[n, c, y + dy, x + dx] * W[f, c, dy, dx], axis=[c, dy, dx]), name="Y")
        return Y, [X, W, Y]
    if name == "rowsum":
        A = tdsl.placeholder((4096, 4096), name="A")
        k = tdsl.reduce_axis((0, 4096), name="k")
        B = tdsl.compute((4096,), lambda i: tdsl.sum(A[i, k], axis=k), name="B")
        return B, [A, B]
    X, _, _, _, Y = kernels.softmax(2048, 1024)
    return Y, [X, Y]


@pytest.mark.parametrize("name", ["gemm", "conv2d", "rowsum", "softmax"])
def test_auto_scheduled_cuda_kernels_do_not_spill(name):
    _tool_or_skip()
    out, args = _auto(name)
    mod = tdsl.build(tdsl.auto_schedule(out, target="cuda"), args, target="cuda")
    _check_sane(mod)
    assert "registers" in mod._repr_markdown_() and "registers" in mod._repr_html_()


def test_get_source_ptxas_is_the_report():
    _tool_or_skip()
    mod = tdsl.build(*gpu.sum_schedule(64, 256), target="cuda")
    text = mod.get_source("ptxas")
    assert "for 'sm_80'" in text and "for 'sm_90'" in text
    assert "for 'sm_80'" not in mod.get_source("ptxas:sm_90")
    assert [r.arch for r in mod.resources("sm_90")] == ["sm_90"] * len(mod.kernels)


def test_standalone_ptxas_agrees_with_nvrtc():
    from tdsl.runtime import cuda
    if not (cuda.have_nvrtc() and ptxas.find_ptxas()):
        pytest.skip("needs both NVRTC and ptxas")
    mod = tdsl.build(*gpu.matmul_fast_schedule(256, 256, 256), target="cuda")
    a = mod.resources(tool="nvrtc")
    b = mod.resources(tool="ptxas")
    assert [(r.registers, r.spill_bytes, r.shared_bytes) for r in a] == \
        [(r.registers, r.spill_bytes, r.shared_bytes) for r in b]


def test_the_wgmma_probe_compiles_for_sm_90a_without_spills():
    """bench/wgmma_probe.py, run on the next lent Hopper GPU, must build there: every
    variant's PTX has its four k16 warpgroup MMAs a k tile and ptxas keeps it in registers."""
    _tool_or_skip()
    import os
    import sys
    from tdsl.runtime import cuda
    if not cuda.have_nvrtc():
        pytest.skip("the probe compiles through NVRTC")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
    import wgmma_probe
    for v in wgmma_probe.VARIANTS:
        n, r = wgmma_probe.compile_report(v)
        assert n == 4, v
        assert r["spill_store_bytes"] == 0 and r["registers"] <= 255, (v, r)
        assert wgmma_probe.smem_bytes(*v[:3]) <= 227 * 1024, v
