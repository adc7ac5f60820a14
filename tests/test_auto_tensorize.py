"""The auto-scheduler picks the target's dot-product instruction for uint8 x int8 -> int32
and bfloat16 x bfloat16 -> float32 contractions (vpdpbusd, vdpbf16ps), packing B with
`Schedule.transform_layout`; without the extension, or at sizes the instruction cannot
take, it says why and schedules the ordinary register tile."""
import numpy as np
import pytest

import tdsl

HOST = tdsl.target.Target.host()
BF16 = tdsl.dtype.to_numpy("bfloat16")
KINDS = {"uint8": ("int8", "int32", "has_vnni", "vpdpbusd", "dot_u8s8_int32"),
         "bfloat16": ("bfloat16", "float32", "has_bf16", "vdpbf16ps", "dot_bf16_float32")}


def _gemm(M, N, K, dtype, transposed=False, b_dtype=None):
    b_dt, acc = KINDS[dtype][0], KINDS[dtype][1]
    A = tdsl.placeholder((M, K), dtype=dtype, name="A")
    B = tdsl.placeholder((N, K) if transposed else (K, N), dtype=b_dtype or b_dt, name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    if transposed:
        C = tdsl.compute((M, N), lambda i, j: tdsl.sum(
            A[i, k].astype(acc) * B[j, k].astype(acc), axis=k), name="C")
    else:
        C = tdsl.compute((M, N), lambda i, j: tdsl.sum(
            A[i, k].astype(acc) * B[k, j].astype(acc), axis=k), name="C")
    return A, B, C


def _data(dtype, shape_a, shape_b, b_dtype=None, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "uint8":
        lo = -128 if b_dtype in (None, "int8") else 0
        return (rng.integers(0, 256, shape_a).astype(np.uint8),
                rng.integers(lo, 128, shape_b).astype(b_dtype or "int8"))
    f = tdsl.nd.float32_to_bfloat16
    return (f(rng.standard_normal(shape_a).astype(np.float32)).view(BF16),
            f(rng.standard_normal(shape_b).astype(np.float32)).view(BF16))


def _check(f, dtype, M, N, K, transposed, b_dtype=None):
    a, b = _data(dtype, (M, K), (N, K) if transposed else (K, N), b_dtype)
    c = np.empty((M, N), KINDS[dtype][1])
    f(a, b, c)
    bb = b.T if transposed else b
    if dtype == "uint8":
        np.testing.assert_array_equal(c, a.astype(np.int32) @ bb.astype(np.int32))
    else:
        ref = a.astype(np.float32) @ bb.astype(np.float32)
        np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5 * K)


def _target(fact):
    return HOST if getattr(HOST, fact) else tdsl.target.Target("llvm -mcpu=znver5")


@pytest.mark.parametrize("dtype", ["uint8", "bfloat16"])
@pytest.mark.parametrize("M,N,K", [(64, 64, 64), (50, 48, 36), (13, 96, 200), (128, 256, 128),
                                   (97, 64, 32)])
@pytest.mark.parametrize("transposed", [False, True])
def test_auto_tensorized(dtype, M, N, K, transposed):
    _, _, fact, insn, intrin = KINDS[dtype]
    target = _target(fact)
    A, B, C = _gemm(M, N, K, dtype, transposed)
    s = tdsl.auto_schedule(C, target)
    why = [str(d) for d in s.explain().decisions if d.rule == "tensorize"]
    assert len(why) == 1 and insn in why[0] and intrin in why[0], why
    assert "pack" in s.explain().rules("C")
    f = tdsl.build(s, [A, B, C], target=target)
    assert insn in f.get_source("asm")
    if target is not HOST:
        pytest.skip(f"this CPU lacks {fact}: checked the assembly only")
    _check(f, dtype, M, N, K, transposed)


@pytest.mark.parametrize("M,tile", [(50, (6, 2)), (13, (6, 1)), (97, None)])
def test_ragged_row_tiles(M, tile):
    """A tile of rows that does not divide M: the last tile's calls are guarded as a whole
    (the guard tests the row loops outside the tensorized block)."""
    target = _target("has_vnni")
    N, K = 64, 32
    A, B, C = _gemm(M, N, K, "uint8")
    s = tdsl.auto_schedule(C, target, params={"tile": tile} if tile else None)
    (why,) = [d.action for d in s.explain().decisions if d.rule == "tensorize"]
    rows = int(why.split("tile ")[1].split(" x ")[0])
    assert M % rows, why
    f = tdsl.build(s, [A, B, C], target=target)
    assert "vpdpbusd" in f.get_source("asm")
    if target is HOST:
        _check(f, "uint8", M, N, K, False)


@pytest.mark.parametrize("dtype", ["uint8", "bfloat16"])
def test_auto_tensorized_a_transposed(dtype):
    """A read as A[k, i] (A.T @ B): copied into rows first, then the same micro-kernel."""
    b_dt, acc, fact, insn, _ = KINDS[dtype]
    target = _target(fact)
    M, N, K = 48, 64, 96
    A = tdsl.placeholder((K, M), dtype=dtype, name="A")
    B = tdsl.placeholder((K, N), dtype=b_dt, name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(
        A[k, i].astype(acc) * B[k, j].astype(acc), axis=k), name="C")
    s = tdsl.auto_schedule(C, target)
    assert [d.action.split(")")[0] for d in s.explain().decisions if d.rule == "pack"] == \
        ["transform_layout(A", "transform_layout(B"]
    f = tdsl.build(s, [A, B, C], target=target)
    assert insn in f.get_source("asm")
    if target is not HOST:
        pytest.skip(f"this CPU lacks {fact}: checked the assembly only")
    a, b = _data(dtype, (K, M), (K, N))
    c = np.empty((M, N), acc)
    f(a, b, c)
    ref = a.T.astype(np.float32 if dtype == "bfloat16" else np.int32) @ \
        b.astype(np.float32 if dtype == "bfloat16" else np.int32)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5 * K)


@pytest.mark.parametrize("dtype", ["uint8", "bfloat16"])
@pytest.mark.parametrize("shared_b", [False, True])
def test_auto_tensorized_batched(dtype, shared_b):
    """A batch of products (attention's Q K^T in int8): the batch loop outside the tiles;
    B per batch, read as B[b, j, k], or one B for the whole batch."""
    b_dt, acc, fact, insn, _ = KINDS[dtype]
    target = _target(fact)
    S, M, N, K = 3, 24, 32, 64
    A = tdsl.placeholder((S, M, K), dtype=dtype, name="A")
    B = tdsl.placeholder((K, N) if shared_b else (S, N, K), dtype=b_dt, name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((S, M, N), lambda b, i, j: tdsl.sum(
        A[b, i, k].astype(acc) * (B[k, j] if shared_b else B[b, j, k]).astype(acc), axis=k),
        name="C")
    s = tdsl.auto_schedule(C, target)
    why = [str(d) for d in s.explain().decisions if d.rule == "tensorize"]
    assert len(why) == 1 and insn in why[0], why
    f = tdsl.build(s, [A, B, C], target=target)
    assert insn in f.get_source("asm")
    if target is not HOST:
        pytest.skip(f"this CPU lacks {fact}: checked the assembly only")
    a, _ = _data(dtype, (S, M, K), (1,))
    _, b = _data(dtype, (1,), (K, N) if shared_b else (S, N, K))
    c = np.empty((S, M, N), acc)
    f(a, b, c)
    wide = np.float32 if dtype == "bfloat16" else np.int32
    ref = a.astype(wide) @ (b.astype(wide) if shared_b else b.astype(wide).transpose(0, 2, 1))
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5 * K)


@pytest.mark.parametrize("dtype", ["uint8", "bfloat16"])
def test_auto_tensorized_operands_swapped(dtype):
    """B[k, j] * A[i, k]: the same instruction, matched with the kernel operand first."""
    b_dt, acc, fact, insn, _ = KINDS[dtype]
    target = _target(fact)
    M, N, K = 32, 48, 64
    A = tdsl.placeholder((M, K), dtype=dtype, name="A")
    B = tdsl.placeholder((K, N), dtype=b_dt, name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(
        B[k, j].astype(acc) * A[i, k].astype(acc), axis=k), name="C")
    s = tdsl.auto_schedule(C, target)
    why = [str(d) for d in s.explain().decisions if d.rule == "tensorize"]
    assert len(why) == 1 and insn in why[0], why
    f = tdsl.build(s, [A, B, C], target=target)
    assert insn in f.get_source("asm")
    if target is HOST:
        _check(f, dtype, M, N, K, False)


@pytest.mark.parametrize("dtype", ["uint8", "bfloat16"])
def test_no_extension_register_tile(dtype):
    """haswell (AVX2) code runs on this host: same answer, no dot-product instruction."""
    _, _, fact, insn, _ = KINDS[dtype]
    target = "llvm -mcpu=haswell"
    A, B, C = _gemm(64, 64, 64, dtype)
    s = tdsl.auto_schedule(C, target)
    why = [str(d) for d in s.explain().decisions if d.rule == "tensorize"]
    assert len(why) == 1 and "none" in why[0] and "haswell" in why[0], why
    assert "register-tile" in s.explain().rules("C")
    f = tdsl.build(s, [A, B, C], target=target)
    assert insn not in f.get_source("asm")
    _check(f, dtype, 64, 64, 64, False)


@pytest.mark.parametrize("M,N,K,what", [(32, 40, 64, "N=40"), (32, 64, 30, "K=30")])
def test_sizes_the_instruction_cannot_take(M, N, K, what):
    target = _target("has_vnni")
    A, B, C = _gemm(M, N, K, "uint8")
    s = tdsl.auto_schedule(C, target)
    why = [str(d) for d in s.explain().decisions if d.rule == "tensorize"]
    assert len(why) == 1 and what in why[0] and "multiple of" in why[0], why
    f = tdsl.build(s, [A, B, C], target=target)
    assert "vpdpbusd" not in f.get_source("asm")
    if target is HOST:
        _check(f, "uint8", M, N, K, False)


def test_signed_data_has_no_instruction():
    """vpdpbusd multiplies unsigned by signed bytes: int8 x int8 is explained and tiled."""
    target = _target("has_vnni")
    M = N = K = 32
    A = tdsl.placeholder((M, K), dtype="int8", name="A")
    B = tdsl.placeholder((K, N), dtype="int8", name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(
        A[i, k].astype("int32") * B[k, j].astype("int32"), axis=k), name="C")
    s = tdsl.auto_schedule(C, target)
    why = [str(d) for d in s.explain().decisions if d.rule == "tensorize"]
    assert len(why) == 1 and "int8 x int8 -> int32 has no dot-product" in why[0], why
    f = tdsl.build(s, [A, B, C], target=target)
    if target is HOST:
        rng = np.random.default_rng(1)
        a = rng.integers(-128, 128, (M, K)).astype(np.int8)
        b = rng.integers(-128, 128, (K, N)).astype(np.int8)
        c = np.empty((M, N), np.int32)
        f(a, b, c)
        np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))


def test_float32_contraction_says_nothing():
    A = tdsl.placeholder((32, 32), name="A")
    B = tdsl.placeholder((32, 32), name="B")
    k = tdsl.reduce_axis((0, 32), name="k")
    C = tdsl.compute((32, 32), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tdsl.auto_schedule(C, "llvm -mcpu=znver5")
    assert "tensorize" not in s.explain().rules()


def test_epilogue_requantize():
    """An elementwise consumer (int32 -> float32 scale) computes inside the tensorized tile."""
    target = _target("has_vnni")
    M, N, K = 48, 64, 96
    A, B, C = _gemm(M, N, K, "uint8")
    D = tdsl.compute((M, N), lambda i, j: C[i, j].astype("float32") * 0.5, name="D")
    s = tdsl.auto_schedule(D, target)
    assert "fuse-epilogue" in s.explain().rules("D")
    assert "tensorize" in s.explain().rules("C")
    f = tdsl.build(s, [A, B, D], target=target)
    assert "vpdpbusd" in f.get_source("asm")
    if target is HOST:
        a, b = _data("uint8", (M, K), (K, N))
        d = np.empty((M, N), np.float32)
        f(a, b, d)
        np.testing.assert_array_equal(d, (a.astype(np.int32) @ b.astype(np.int32)) * 0.5)


# ---------------------------------------------------------------- transform_layout
def test_transform_layout_blocks():
    M, N, K = 8, 32, 16
    A, B, C = _gemm(M, N, K, "uint8")
    s = tdsl.create_schedule(C)
    P = s.transform_layout(B, [C], [(1, None), (0, None), (1, 16), (0, 4)])
    assert [int(x.value) for x in P.shape] == [2, 4, 16, 4]
    assert "transform_layout(B" in str(s)
    f = tdsl.build(s, [A, B, C], target="llvm")
    _check(f, "uint8", M, N, K, False)


@pytest.mark.parametrize("layout,msg", [
    ([(1, None), (0, None), (1, 12), (0, 4)], "not a multiple"),
    ([(1, None), (1, 16)], "leaves out dimension 0"),
    ([(0, None), (0, None), (1, None)], "more than one piece"),
    ([(2, None), (0, None), (1, None)], "no dimension 2"),
])
def test_transform_layout_refuses(layout, msg):
    A, B, C = _gemm(8, 32, 16, "uint8")
    s = tdsl.create_schedule(C)
    with pytest.raises(tdsl.ScheduleError, match=f"'B'.*{msg}"):
        s.transform_layout(B, [C], layout)


def test_transform_layout_needs_a_reader():
    A, B, C = _gemm(8, 32, 16, "uint8")
    D = tdsl.compute((8, 32), lambda i, j: C[i, j] + 1, name="D")
    s = tdsl.create_schedule(D)
    with pytest.raises(tdsl.ScheduleError, match="'D' does not read tensor 'B'"):
        s.transform_layout(B, [D], [(0, None), (1, None)])


# ---------------------------------------------------------------- CUDA tensor cores
def _half(M, N, K, dtype, transposed=False, a_transposed=False):
    A = tdsl.placeholder((K, M) if a_transposed else (M, K), dtype=dtype, name="A")
    B = tdsl.placeholder((N, K) if transposed else (K, N), dtype=dtype, name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    def a(i, k):
        return A[k, i] if a_transposed else A[i, k]
    if transposed:
        C = tdsl.compute((M, N), lambda i, j: tdsl.sum(
            a(i, k).astype("float32") * B[j, k].astype("float32"), axis=k), name="C")
    else:
        C = tdsl.compute((M, N), lambda i, j: tdsl.sum(
            a(i, k).astype("float32") * B[k, j].astype("float32"), axis=k), name="C")
    return A, B, C


def _half_data(shape, dtype, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == "bfloat16":
        x = tdsl.nd.float32_to_bfloat16(x)
        return x, tdsl.nd.bfloat16_to_float32(x)
    return x.astype(np.float16), x.astype(np.float16).astype(np.float32)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("M,N,K,transposed,a_t", [
    (64, 64, 64, False, False), (64, 32, 96, True, False), (48, 40, 32, False, False),
    (16, 8, 16, True, False), (32, 32, 48, False, True), (32, 16, 32, True, True)])
def test_auto_mma_emulated(dtype, M, N, K, transposed, a_t):
    """The CUDA schedule, built for "c": mma.sync emulated lane by lane matches numpy."""
    A, B, C = _half(M, N, K, dtype, transposed, a_t)
    s = tdsl.auto_schedule(C, "cuda -arch=sm_80")
    why = [str(d) for d in s.explain().decisions if d.rule == "tensorize"]
    assert len(why) == 1 and "mma.sync m16n8k16" in why[0], why
    f = tdsl.build(s, [A, B, C], target="c")
    rng = np.random.default_rng(2)
    a, af = _half_data((K, M) if a_t else (M, K), dtype, rng)
    b, bf = _half_data((N, K) if transposed else (K, N), dtype, rng)
    c = np.full((M, N), np.nan, np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, (af.T if a_t else af) @ (bf.T if transposed else bf),
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("target,M,N,K,what", [
    ("cuda -arch=sm_75", 64, 64, 64, "sm_75"),
    ("cuda -arch=sm_80", 100, 64, 64, "M=100"),
    ("cuda -arch=sm_80", 64, 64, 40, "K=40"),
    ("opencl", 64, 64, 64, "CUDA sm_80"),
])
def test_auto_mma_falls_back(target, M, N, K, what):
    A, B, C = _half(M, N, K, "float16")
    s = tdsl.auto_schedule(C, target)
    why = [str(d) for d in s.explain().decisions if d.rule == "tensorize"]
    assert len(why) == 1 and "none" in why[0] and what in why[0], why
    f = tdsl.build(s, [A, B, C], target="c")
    rng = np.random.default_rng(3)
    a, af = _half_data((M, K), "float16", rng)
    b, bf = _half_data((K, N), "float16", rng)
    c = np.empty((M, N), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, af @ bf, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype,a_t", [("bfloat16", False), ("float16", True)])
def test_auto_mma_ptx(dtype, a_t):
    from tdsl.runtime import cuda as rcuda
    if not rcuda.have_nvrtc() or rcuda.cuda_include_dir() is None:
        pytest.skip("NVRTC or the CUDA headers are not installed")
    A, B, C = _half(256, 256, 256, dtype, transposed=True, a_transposed=a_t)
    s = tdsl.auto_schedule(C, "cuda -arch=sm_80")
    f = tdsl.build(s, [A, B, C], target="cuda -arch=sm_80")
    ptype = {"bfloat16": "bf16", "float16": "f16"}[dtype]
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{ptype}.{ptype}.f32" in f.get_source("ptx")


def test_guard_inside_the_block_is_refused():
    """A split of the tensorized axis that does not divide it would need a partial call."""
    M, N, K = 8, 24, 16
    A = tdsl.placeholder((M, K), dtype="uint8", name="A")
    B = tdsl.placeholder((2, K // 4, 16, 4), dtype="int8", name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(
        A[i, k].astype("int32") * B[j // 16, k // 4, j % 16, k % 4].astype("int32"), axis=k),
        name="C")
    s = tdsl.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=16)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(C.op.axis[0], jo, ko, ji, ki)
    s[C].tensorize(ji, tdsl.intrin_x86.dot_u8s8_int32("llvm -mcpu=znver5"))
    with pytest.raises(tdsl.ScheduleError, match="'C'.*the block has guards"):
        tdsl.lower(s, [A, B, C])


def test_auto_mma_epilogue_one_kernel():
    """bias + relu + cast to float16 after the product: computed by the tensor-core kernel
    from the accumulators in shared memory (emulated on "c"; one kernel in the CUDA source)."""
    M, N, K = 64, 32, 48
    A, B, C = _half(M, N, K, "float16")
    bias = tdsl.placeholder((N,), name="bias")
    D = tdsl.compute((M, N), lambda i, j: tdsl.max(C[i, j] + bias[j], tdsl.const(0, "float32"))
                     .astype("float16"), name="D")
    s = tdsl.auto_schedule(D, "cuda -arch=sm_80")
    assert "tensorize" in s.explain().rules("C") and "fuse-epilogue" in s.explain().rules("D")
    f = tdsl.build(s, [A, B, bias, D], target="c")
    rng = np.random.default_rng(4)
    a, af = _half_data((M, K), "float16", rng)
    b, bf = _half_data((K, N), "float16", rng)
    bb = rng.standard_normal(N).astype(np.float32)
    d = np.empty((M, N), np.float16)
    f(a, b, bb, d)
    ref = np.maximum(af @ bf + bb, 0).astype(np.float16)
    np.testing.assert_allclose(d.astype(np.float32), ref.astype(np.float32), rtol=1e-3, atol=1e-3)
    from tdsl.runtime import cuda as rcuda
    if not rcuda.have_nvrtc() or rcuda.cuda_include_dir() is None:
        pytest.skip("NVRTC or the CUDA headers are not installed: checked on the emulation only")
    src = tdsl.build(s, [A, B, bias, D], target="cuda -arch=sm_80").get_source()
    assert src.count("__global__") == 1 and "mma" in src
