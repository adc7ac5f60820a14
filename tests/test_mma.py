"""The CUDA tensor-core intrinsics `tdsl.intrin_cuda` and the GEMM tensorized with them
(`tdsl.examples.mma_gemm`, `mma_schedule`): accumulators in registers (scope
"mma.accumulator"), A and B fragments by ldmatrix. Without a GPU, the CUDA source compiles
through NVRTC to PTX with `mma.sync.aligned.m16n8k16` and `ldmatrix`, ptxas reports no
spills and no local memory, and the same schedule built for "c" (fill, mma and store
emulated lane by lane in the instruction's layout) matches numpy; on a GPU it runs for
real."""
import re

import numpy as np
import pytest

import tdsl
from tdsl.autosched.gpu_tensorize import mma_schedule
from tdsl.examples import mma_gemm
from tdsl.runtime import cuda as rcuda

DTYPES = ["bfloat16", "float16"]


_inputs = mma_gemm.inputs


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
    ((128, 64, 64), dict(warps=(2, 2), warp_tiles=(4, 4), k_step=32)),
    ((64, 128, 32), dict(warps=(1, 2), warp_tiles=(4, 8), k_step=32)),
    ((48, 56, 32), dict(warps=(3, 1), warp_tiles=(1, 7), k_step=16)),
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
    # warp tiles x k blocks of a k step, unrolled; nvcc may unroll the k-step loop again
    assert n > 0 and n % (2 * 2 * 2) == 0
    (r,) = f.resources(arch="sm_90")
    assert r.spill_bytes == 0, r


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_on_a_gpu(dtype):
    """The one check of the instructions' fragment layouts themselves (mma.sync, ldmatrix
    and its .trans form): the default schedule, the auto-scheduler's 64 x 64 warp tiles
    (also in a 4-stage pipeline of dynamic shared memory, and as auto_schedule makes it),
    an epilogue with A transposed, and B transposed."""
    if not tdsl.cuda(0).exist:
        pytest.skip("no CUDA GPU")
    s, args = mma_gemm.schedule(128, 128, 128, dtype)
    _check(tdsl.build(s, args, target="cuda"), 128, 128, 128, dtype)
    s, args = mma_gemm.schedule(256, 256, 128, dtype, warps=(2, 2), warp_tiles=(4, 8))
    _check(tdsl.build(s, args, target="cuda"), 256, 256, 128, dtype)
    s, args = mma_gemm.schedule(256, 256, 352, dtype, warps=(2, 2), warp_tiles=(4, 8),
                                stages=4)          # 11 k steps: a partial last turn
    f = tdsl.build(s, args, target="cuda")
    assert "extern __shared__" in f.get_source()
    _check(f, 256, 256, 352, dtype)
    A, B, C = mma_gemm.definition(512, 256, 256, dtype)
    _check(tdsl.build(tdsl.auto_schedule(C, "cuda"), [A, B, C], target="cuda"), 512, 256, 256,
           dtype)
    for a_t, b_t, epilogue in ((True, False, True), (False, True, False)):
        s, args = _product(128, 128, 64, dtype, a_t, b_t, epilogue, warp_tiles=(2, 4))
        _run_product(tdsl.build(s, args, target="cuda"), 128, 128, 64, dtype, a_t, b_t,
                     epilogue)


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
    assert "address_of(C.mma.accumulator[0], 3)" in text     # the mma reads and writes it
    assert "address_of(C.mma.accumulator[0], 1)" in text     # the store reads it ...
    assert "address_of(C[" in text and "], 2)" in text        # ... and writes C
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


# ---------------------------------------------------------------------------------------
# accumulators in registers: epilogue, transposed operands, PTX and ptxas, misuse


def _product(M, N, K, dtype, a_t=False, b_t=False, epilogue=False, warps=(2, 2),
             warp_tiles=(2, 2), k_step=32):
    """C = A @ B read as A[k, i] / B[j, k] when transposed; with `epilogue`, D =
    relu(C + bias) as float16 computed by the same kernel; scheduled by mma_schedule."""
    A = tdsl.placeholder((K, M) if a_t else (M, K), dtype=dtype, name="A")
    B = tdsl.placeholder((N, K) if b_t else (K, N), dtype=dtype, name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(
        (A[k, i] if a_t else A[i, k]).astype("float32") *
        (B[j, k] if b_t else B[k, j]).astype("float32"), axis=k), name="C")
    args = [A, B]
    D = None
    if epilogue:
        bias = tdsl.placeholder((N,), name="bias")
        D = tdsl.compute((M, N), lambda i, j: tdsl.max(C[i, j] + bias[j], tdsl.const(
            0, "float32")).astype("float16"), name="D")
        args += [bias, D]
    else:
        args.append(C)
    s = tdsl.create_schedule(D if epilogue else C)
    mma_schedule(s, A, B, C, dtype, warps, warp_tiles, k_step, a_t, b_t, out=D)
    return s, args


def _run_product(f, M, N, K, dtype, a_t, b_t, epilogue, seed=5):
    a, b = _inputs(M, N, K, dtype, seed)
    ref = mma_gemm.reference(a, b)
    if a_t:
        a = np.ascontiguousarray(a.T)
    if b_t:
        b = np.ascontiguousarray(b.T)
    if not epilogue:
        c = np.full((M, N), np.nan, np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
        return
    bias = np.random.default_rng(seed).standard_normal(N).astype(np.float32)
    d = np.full((M, N), np.nan, np.float16)
    f(a, b, bias, d)
    want = np.maximum(ref + bias, 0).astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(d.astype(np.float32), want, rtol=1e-3, atol=1e-3)



@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a_t,b_t,epilogue,config", [
    (False, False, True, {}),
    (True, False, False, dict(warps=(1, 2), warp_tiles=(2, 2), k_step=16)),
    (False, True, False, dict(warps=(2, 1), warp_tiles=(1, 4), k_step=32)),
    (True, True, True, dict(warps=(1, 2), warp_tiles=(2, 3), k_step=16)),
])
def test_emulated_variants_match_numpy(dtype, a_t, b_t, epilogue, config):
    """Transposed operands (copied transposed into shared memory) and an epilogue that
    reads the accumulators from the shared tile the warps store them to."""
    M, N, K = 64, 96, 64
    s, args = _product(M, N, K, dtype, a_t, b_t, epilogue, **config)
    _run_product(tdsl.build(s, args, target="c"), M, N, K, dtype, a_t, b_t, epilogue)


def test_layout_disagreement_fails_the_emulation(monkeypatch):
    """The emulated fill, mma and store share the register layout: a store that swapped
    the rows g and g + 8 of each block would be caught by the numbers."""
    from tdsl.codegen.source import mma_fragments
    swapped = "      bottom[0] = d[0]; bottom[1] = d[1]; top[0] = d[2]; top[1] = d[3];"
    _emulation_fails_with(monkeypatch, mma_fragments, "_STORE_SCALAR", swapped, (32, 16, 16),
                          warps=(1, 1), warp_tiles=(2, 2), k_step=16)


def _emulation_fails_with(monkeypatch, module, name, value, shape, **config):
    """With `module.name` patched to `value`, the emulated bf16 GEMM of `shape` (M, N, K)
    no longer matches numpy."""
    monkeypatch.setattr(module, name, value)
    monkeypatch.setenv("TDSL_CACHE", "0")
    s, args = mma_gemm.schedule(*shape, "bfloat16", **config)
    with pytest.raises(AssertionError):
        _check(tdsl.build(s, args, target="c"), *shape, "bfloat16")


def _ptx_and_resources(s, args):
    f = tdsl.build(s, args, target="cuda")
    return f, f.get_source("ptx"), {arch: f.resources(arch=arch)[0]
                                    for arch in ("sm_80", "sm_90")}


@pytest.mark.parametrize("config,epilogue", [
    (dict(warps=(2, 2), warp_tiles=(2, 2), k_step=32), False),
    (dict(warps=(2, 4), warp_tiles=(4, 4), k_step=32), False),
    (dict(warps=(2, 2), warp_tiles=(4, 8), k_step=32), False),
    (dict(warps=(2, 2), warp_tiles=(2, 4), k_step=32), True),
])
def test_fragments_stay_in_registers(config, epilogue):
    """ptxas for sm_80 and sm_90: no spills, no stack, at most 255 registers; the PTX has
    no local-memory access (the accumulators and fragments are registers), loads A with
    ldmatrix.x4 and B with ldmatrix.x4.trans, and fills the tiles with cp.async."""
    _cuda_or_skip()
    s, args = _product(512, 512, 512, "bfloat16", epilogue=epilogue, **config)
    f, ptx, res = _ptx_and_resources(s, args)
    assert "ld.local" not in ptx and "st.local" not in ptx
    tm, tn = config["warp_tiles"]
    per_k = config["k_step"] // 16
    mmas = ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
    unrolled = mmas // (tm * tn * per_k)        # nvcc may unroll the k-step loop
    assert unrolled >= 1 and mmas == tm * tn * per_k * unrolled
    # A fragments loaded once per block row, B once per two block columns, per k block
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == tm * per_k * unrolled
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == \
        tn // 2 * per_k * unrolled
    # A and B tiles move 16 bytes at a time, global to shared without registers, the next
    # k steps' while this one's mma run (a pipeline of shared buffers); each k step's
    # copies are one group, and each thread waits for all but the newest stages - 2
    # groups before the barrier that hands the oldest to the block
    assert "cp.async.cg.shared.global" in ptx and "cp.async.commit_group" in ptx
    waits = set(re.findall(r"tdsl_cp_async_wait_group<(\d+)>\(\); __syncthreads\(\);",
                           f.get_source()))
    assert len(waits) == 1 and f"cp.async.wait_group {waits.pop()}" in ptx
    assert "#pragma unroll 1" in f.get_source()      # the copies stay a rolled loop
    for arch, r in res.items():
        assert r.spill_bytes == 0 and r.stack_bytes == 0 and r.registers <= 255, (arch, r)
    assert f.get_source().count("__global__") == 1


def test_unaligned_operand_falls_back_to_scalar_loads():
    """Shared tiles whose rows are padded to 4 past a multiple of 8 elements (8-byte
    aligned, not 16) keep ldmatrix off both operands; the source says why."""
    _cuda_or_skip()
    M, N, K = 32, 16, 48
    A, B, C = mma_gemm.definition(M, N, K)
    s = tdsl.create_schedule(C)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CF = s.cache_write(C, "mma.accumulator")
    tx, ty = tdsl.thread_axis("threadIdx.x"), tdsl.thread_axis("threadIdx.y")
    bo, ri = s[C].split(C.op.axis[0], factor=M)
    s[C].bind(bo, tdsl.thread_axis("blockIdx.x"))
    w, ri = s[C].split(ri, nparts=1)
    s[C].bind(w, ty)
    s[C].tensorize(ri, tdsl.intrin_cuda.mma_store((2, 2)))
    s[CF].compute_at(s[C], w)
    ko, ki = s[CF].split(CF.op.reduce_axis[0], factor=16)
    s[CF].reorder(ko, *CF.op.axis, ki)
    s[CF].tensorize(CF.op.axis[0], tdsl.intrin_cuda.mma_m16n8k16("bfloat16", (2, 2)))
    for T in (AS, BS):
        s[T].compute_at(s[C], w)
        s[T].storage_align(T.op.axis[0], 8, 4)      # rows of 4 + 8n elements: 8-byte steps
        _, lane = s[T].split(s[T].fuse(*s[T].op.axis), factor=32)
        s[T].bind(lane, tx)
    f = tdsl.build(s, [A, B, C], target="cuda")
    src = f.get_source()
    assert "A: scalar loads (its row step 52 is not a multiple of 8 elements)" in src
    assert "B: scalar loads (its row step 20 is not a multiple of 8 elements)" in src
    assert "ldmatrix" not in f.get_source("ptx")
    _check(tdsl.build(s, [A, B, C], target="c"), M, N, K, "bfloat16")


def _misuse(store=True, init=True, at_warp=True):
    """One warp's 16 x 8 accumulator; `store`: C tensorized with mma_store, `init`: the
    accumulator's update tensorized (with its fill), `at_warp`: computed at the warp loop
    rather than at the block loop around it."""
    A, B, C = mma_gemm.definition(32, 8, 16)
    s = tdsl.create_schedule(C)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    CF = s.cache_write(C, "mma.accumulator")
    tx, ty = tdsl.thread_axis("threadIdx.x"), tdsl.thread_axis("threadIdx.y")
    bo, ri = s[C].split(C.op.axis[0], nparts=1)
    s[C].bind(bo, tdsl.thread_axis("blockIdx.x"))
    w, ri = s[C].split(ri, factor=16)
    s[C].bind(w, ty)
    if store:
        s[C].tensorize(ri, tdsl.intrin_cuda.mma_store())
    else:
        _, lane = s[C].split(s[C].fuse(ri, C.op.axis[1]), factor=32)
        s[C].bind(lane, tx)
    s[CF].compute_at(s[C], w if at_warp else bo)
    i, j = CF.op.axis
    if not at_warp:
        wi, i = s[CF].split(i, factor=16)
        s[CF].bind(wi, ty)
    if init:
        s[CF].tensorize(i, tdsl.intrin_cuda.mma_m16n8k16())
    else:
        _, lane = s[CF].split(s[CF].fuse(i, j), factor=32)
        s[CF].bind(lane, tx)
    for T in (AS, BS):
        s[T].compute_at(s[C], bo)
        _, lane = s[T].split(s[T].fuse(*s[T].op.axis), factor=32)
        s[T].bind(lane, tx)
    return s, [A, B, C]


def test_misuse_of_the_accumulator_scope():
    s, args = _misuse()
    _check(tdsl.build(s, args, target="c"), 32, 8, 16, "bfloat16")     # the well-formed one
    s, args = _misuse(store=False)
    with pytest.raises(tdsl.LoweringError, match="'C.mma.accumulator'.*reads it directly"):
        tdsl.lower(s, args)
    s, args = _misuse(init=False)
    with pytest.raises(tdsl.LoweringError, match="'C.mma.accumulator'.*stores to it"):
        tdsl.lower(s, args)
    s, args = _misuse(at_warp=False)
    with pytest.raises(tdsl.LoweringError, match="'C.mma.accumulator'.*depends on threadIdx.y"):
        tdsl.lower(s, args)
    A, B, C = mma_gemm.definition(16, 8, 16)
    s = tdsl.create_schedule(C)
    with pytest.raises(tdsl.ScheduleError, match="cache_read.*'mma.accumulator'"):
        s.cache_read(A, "mma.accumulator", [C])
    with pytest.raises(tdsl.ScheduleError, match="tiles"):
        tdsl.intrin_cuda.mma_store((0, 2))


def test_fragment_intrinsics_need_the_accumulator_scope():
    """Several blocks a call on an accumulator in shared memory, or mma_store reading
    one: tensorize names the stage."""
    def one_block(M, store):
        A, B, C = mma_gemm.definition(M, 8, 16)
        s = tdsl.create_schedule(C)
        CS = s.cache_write(C, "shared")
        tx = tdsl.thread_axis("threadIdx.x")
        bo, rest = s[C].split(C.op.axis[0] if store else s[C].fuse(*C.op.axis), nparts=1)
        s[C].bind(bo, tdsl.thread_axis("blockIdx.x"))
        s[CS].compute_at(s[C], bo)
        if store:      # the copy to C read from shared memory, by mma_store
            _, lane = s[CS].split(s[CS].fuse(*CS.op.axis), factor=32)
            s[CS].bind(lane, tx)
            w, inner = s[C].split(rest, nparts=1)
            s[C].bind(w, tdsl.thread_axis("threadIdx.y"))
            s[C].tensorize(inner, tdsl.intrin_cuda.mma_store())
        else:
            _, lane = s[C].split(rest, factor=32)
            s[C].bind(lane, tx)
            s[CS].tensorize(CS.op.axis[0], tdsl.intrin_cuda.mma_m16n8k16("bfloat16", (2, 1)))
        return s, [A, B, C]
    s, args = one_block(32, store=False)
    with pytest.raises(tdsl.ScheduleError, match="stage 'C.shared'.*2 x 1 blocks a call need "
                       "the accumulator in scope 'mma.accumulator'"):
        tdsl.lower(s, args)
    s, args = one_block(16, store=True)
    with pytest.raises(tdsl.ScheduleError, match="stage 'C'.*'C.shared' is in scope 'shared'"):
        tdsl.lower(s, args)


def test_unroll_pragma_is_printed_and_checked():
    """The copies into shared memory stay rolled loops (`pragma(iv, "unroll", 1)`), in the
    CUDA and the C source; a count that is not an int >= 1 is refused."""
    s, args = mma_gemm.schedule(64, 64, 64)
    assert "#pragma GCC unroll 1" in tdsl.build(s, args, target="c").get_source()
    A, B, C = mma_gemm.definition(16, 8, 16)
    s = tdsl.create_schedule(C)
    for bad in (0, 2.0, True):
        with pytest.raises(tdsl.ScheduleError, match="pragma: stage 'C'.*'unroll'"):
            s[C].pragma(C.op.axis[0], "unroll", bad)


def test_emulated_async_copies_land_at_the_barrier(monkeypatch):
    """The "c" emulation queues each thread's asynchronous tile copies (cp.async on CUDA)
    until the barrier that must see them (all at a plain barrier; at a pipeline's, all but
    the newest groups), the latest the hardware may finish them: the double-buffered
    GEMM matches numpy, so every read of a tile comes after the barrier that publishes
    it. With the queue never drained at barriers (copies landing only when a thread
    ends), the same GEMM reads stale tiles and fails."""
    s, args = mma_gemm.schedule(64, 32, 96, "bfloat16", warps=(2, 1), warp_tiles=(2, 4),
                                k_step=32)
    f = tdsl.build(s, args, target="c")
    assert "tdsl_emu_async16(" in f.get_source()
    _check(f, 64, 32, 96, "bfloat16")
    from tdsl.codegen.source import c_gpu
    late = c_gpu._EMU_RUNTIME.replace(
        "  tdsl_emu_async_wait();\n  swapcontext", "  swapcontext").replace(
        "  if (a->ng > pending) tdsl_emu_async_done(a, a->end[a->ng - pending - 1]);\n", "")
    assert late.count("swapcontext(&tdsl_emu_ctx") == 2 and "a->ng > pending" not in late
    _emulation_fails_with(monkeypatch, c_gpu, "_EMU_RUNTIME", late, (64, 32, 96),
                          warps=(2, 1), warp_tiles=(2, 4), k_step=32)


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_pipeline_stages_match_numpy(stages):
    """1 to 4 shared buffers of the A and B tiles, over a k loop (10 steps) that is no
    multiple of the stages: emulated, every copy completes as late as cp.async may (at the
    barrier that leaves stages - 2 groups in flight), so a step reading a tile too early
    reads stale data."""
    M, N, K = 32, 32, 160
    A, B, C = mma_gemm.definition(M, N, K)
    s = tdsl.create_schedule(C)
    mma_schedule(s, A, B, C, "bfloat16", (2, 1), (1, 4), 16, stages=stages)
    _check(tdsl.build(s, [A, B, C], target="c"), M, N, K, "bfloat16")


def test_pipeline_that_waits_too_little_fails_the_emulation(monkeypatch):
    """One more group left in flight at each barrier than the pipeline allows: the step
    then reads a tile whose copies have not landed, and the emulation sees it."""
    from tdsl.passes import double_buffer
    monkeypatch.setattr(double_buffer, "_groups_in_flight", lambda stages: stages - 1)
    monkeypatch.setenv("TDSL_CACHE", "0")
    M, N, K = 32, 32, 160
    A, B, C = mma_gemm.definition(M, N, K)
    s = tdsl.create_schedule(C)
    mma_schedule(s, A, B, C, "bfloat16", (2, 1), (1, 4), 16, stages=3)
    with pytest.raises(AssertionError):
        _check(tdsl.build(s, [A, B, C], target="c"), M, N, K, "bfloat16")


@pytest.mark.parametrize("arch,stages,dynamic", [("sm_80", 4, True), ("sm_90", 4, True),
                                                 ("sm_86", 2, False)])
def test_auto_pipeline_stages_from_the_architecture(arch, stages, dynamic):
    """The auto-scheduler's bf16 GEMM takes as many shared stages (up to 4) as leave room
    for two blocks an SM: 4 x 18.5 KiB on sm_80 and sm_90, which is past the 48 KiB a
    block may declare statically, so the kernel declares it dynamic (the launch opts in);
    2 on sm_86 (100 KiB an SM), static. The PTX waits for all but stages - 2 groups."""
    _cuda_or_skip()
    from tdsl.target import Target
    A, B, C = mma_gemm.definition(1024, 1024, 1024)
    t = Target(f"cuda -arch={arch}")
    s = tdsl.auto_schedule(C, t)
    assert f"{stages} shared stages" in str(s.explain())
    f = tdsl.build(s, [A, B, C], target=t)
    src, ptx = f.get_source(), f.get_source("ptx")
    assert ("extern __shared__" in src) == dynamic
    assert f"tdsl_cp_async_wait_group<{stages - 2}>(); __syncthreads();" in src
    assert f"cp.async.wait_group {stages - 2}" in ptx and "cp.async.commit_group" in ptx
    (k,) = f.kernels
    one = (128 * 40 + 32 * 136) * 2           # padded A and B tiles of one stage
    assert k.shared_bytes == stages * one
    assert k.dynamic_shared_bytes == (stages * one if dynamic else 0)
    (r,) = f.resources(arch=arch)
    assert r.shared_bytes == stages * one and r.spill_bytes == 0
    assert r.occupancy.blocks_per_sm == 2
