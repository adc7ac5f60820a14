"""Low precision: bfloat16 as a dtype, float16 and int8 with wide accumulation written as
casts, on every backend; tensorize and the x86 dot-product intrinsics (VNNI, BF16)."""
import numpy as np
import pytest

import tdsl
from tdsl.examples import lowp_gemm
from tdsl.runtime import cuda as rcuda

HOST = tdsl.target.Target.host()
BF16 = tdsl.dtype.to_numpy("bfloat16")


def _opencl_ok():
    try:
        import pyopencl  # noqa: F401
        from tdsl.runtime import opencl as rocl
    except ImportError:
        return False
    return tdsl.opencl(0).exist and rocl.unusable_reason() is None


def _bf16(x):
    return tdsl.nd.float32_to_bfloat16(x).view(BF16)


def _elementwise(dtype, gpu=False):
    n = 1000
    A = tdsl.placeholder((n,), dtype=dtype, name="A")
    B = tdsl.placeholder((n,), dtype=dtype, name="B")
    C = tdsl.compute((n,), lambda i: A[i] * B[i] + 1.5, name="C")
    D = tdsl.compute((n,), lambda i: A[i].astype("float32") * 2.0, name="D")
    s = tdsl.create_schedule([C.op, D.op])
    for T in (C, D):
        o, i = s[T].split(T.op.axis[0], factor=16 if not gpu else 40)
        if gpu:
            s[T].bind(o, tdsl.thread_axis("blockIdx.x"))
            s[T].bind(i, tdsl.thread_axis("threadIdx.x"))
        else:
            s[T].vectorize(i)
    return s, [A, B, C, D]


def _inputs(dtype, n=1000):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    if dtype == "bfloat16":
        return _bf16(a), _bf16(b)
    return a.astype(dtype), b.astype(dtype)


@pytest.mark.parametrize("target", ["llvm", "c"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_elementwise_matches_numpy(target, dtype):
    s, args = _elementwise(dtype)
    f = tdsl.build(s, args, target=target)
    a, b = _inputs(dtype)
    a[3] = np.nan
    c, d = np.empty(1000, a.dtype), np.empty(1000, np.float32)
    f(a, b, c, d)
    ref = a * b + a.dtype.type(1.5)
    if dtype == "bfloat16":     # each operation rounds to bfloat16, as with ml_dtypes
        np.testing.assert_array_equal(c.view(np.uint16), ref.view(np.uint16))
    else:   # C compilers may keep float16 products in float (excess precision): 1 ulp
        np.testing.assert_allclose(c.astype(np.float32), ref.astype(np.float32), rtol=2e-3, atol=2e-3)
    np.testing.assert_array_equal(d, a.astype(np.float32) * 2)


def test_bfloat16_takes_uint16_views():
    s, args = _elementwise("bfloat16")
    f = tdsl.build(s, args)
    a, b = _inputs("bfloat16")
    c, d = np.empty(1000, np.uint16), np.empty(1000, np.float32)
    f(a.view(np.uint16), b.view(np.uint16), c, d)
    ref = tdsl.nd.float32_to_bfloat16(tdsl.nd.bfloat16_to_float32(a * b) + 1.5)
    np.testing.assert_array_equal(c, ref)
    with pytest.raises(tdsl.ArgumentError, match="expected dtype bfloat16"):
        f(a.view(np.int16), b, c, d)


def test_bfloat16_conversion_helpers_round_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -3.3e38, np.inf, np.nan, 1e-40], np.float32)
    bits = tdsl.nd.float32_to_bfloat16(x)
    np.testing.assert_array_equal(bits, x.astype(BF16).view(np.uint16))
    back = tdsl.nd.bfloat16_to_float32(bits)
    np.testing.assert_array_equal(back[:5], x.astype(BF16).astype(np.float32)[:5])
    assert np.isnan(back[5])
    assert tdsl.dtype.promote("bfloat16", "float16") == "float32"
    assert tdsl.dtype.promote("bfloat16", "int32") == "bfloat16"


def test_elementwise_bfloat16_opencl():
    if not _opencl_ok():
        pytest.skip("no usable OpenCL device")
    s, args = _elementwise("bfloat16", gpu=True)
    f = tdsl.build(s, args, target="opencl")
    dev = tdsl.opencl(0)
    a, b = _inputs("bfloat16")
    c, d = tdsl.nd.empty((1000,), "bfloat16", dev), tdsl.nd.empty((1000,), "float32", dev)
    f(tdsl.nd.array(a, dev), tdsl.nd.array(b, dev), c, d)
    np.testing.assert_array_equal(c.numpy().view(np.uint16), (a * b + BF16.type(1.5)).view(np.uint16))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_cuda_source_compiles(dtype):
    if not rcuda.have_nvrtc():
        pytest.skip("NVRTC is not installed")
    s, args = _elementwise(dtype, gpu=True)
    f = tdsl.build(s, args, target="cuda")
    src = f.get_source("cuda")
    assert ("__nv_bfloat16" if dtype == "bfloat16" else "__half") in src
    assert ".entry" in f.get_source("ptx")


def _gemm(a_dtype, b_dtype, acc, M=48, N=32, K=40):
    A = tdsl.placeholder((M, K), dtype=a_dtype, name="A")
    B = tdsl.placeholder((K, N), dtype=b_dtype, name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(A[i, k].astype(acc) * B[k, j].astype(acc),
                                                   axis=k), name="C")
    s = tdsl.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=16)
    s[C].reorder(C.op.axis[0], jo, C.op.reduce_axis[0], ji)
    s[C].vectorize(ji)
    return s, [A, B, C]


@pytest.mark.parametrize("target", ["llvm", "c"])
@pytest.mark.parametrize("a_dtype,b_dtype,acc", [("uint8", "int8", "int32"),
                                                ("int8", "int8", "int32"),
                                                ("float16", "float16", "float32"),
                                                ("bfloat16", "bfloat16", "float32")])
def test_gemm_with_wide_accumulation(target, a_dtype, b_dtype, acc):
    s, args = _gemm(a_dtype, b_dtype, acc)
    f = tdsl.build(s, args, target=target)
    rng = np.random.default_rng(2)
    if a_dtype.endswith("int8"):
        lo = 0 if a_dtype == "uint8" else -128
        a = rng.integers(lo, lo + 256, (48, 40)).astype(a_dtype)
        b = rng.integers(-128, 128, (40, 32)).astype(b_dtype)
        wide = a.astype(np.int64) @ b.astype(np.int64)
    else:
        a32, b32 = rng.standard_normal((48, 40)), rng.standard_normal((40, 32))
        a, b = (_bf16(a32), _bf16(b32)) if a_dtype == "bfloat16" else \
            (a32.astype(a_dtype), b32.astype(b_dtype))
        wide = a.astype(np.float64) @ b.astype(np.float64)
    c = np.empty((48, 32), acc)
    f(a, b, c)
    if acc == "int32":
        np.testing.assert_array_equal(c, wide)
    else:
        np.testing.assert_allclose(c, wide, rtol=1e-5, atol=1e-4)


def _data(dtype, n):
    rng = np.random.default_rng(3)
    if dtype == "uint8":
        return (rng.integers(0, 256, (n, n)).astype(np.uint8),
                rng.integers(-128, 128, (n, n)).astype(np.int8))
    return (_bf16(rng.standard_normal((n, n)).astype(np.float32)),
            _bf16(rng.standard_normal((n, n)).astype(np.float32)))


@pytest.mark.parametrize("dtype,fact,insn", [("uint8", "has_vnni", "vpdpbusd"),
                                             ("bfloat16", "has_bf16", "vdpbf16ps")])
def test_tensorized_gemm(dtype, fact, insn):
    target = HOST if getattr(HOST, fact) else tdsl.target.Target("llvm -mcpu=znver5")
    n = 64
    s, args = lowp_gemm.tensorized(n, n, n, dtype, target)
    f = tdsl.build(s, args, target=target)
    assert insn in f.get_source("asm")
    if target is not HOST:
        pytest.skip(f"this CPU lacks {fact}: checked the assembly only")
    a, b = _data(dtype, n)
    c = np.empty((n, n), lowp_gemm.KINDS[dtype][0])
    f(a, lowp_gemm.pack(b, dtype), c)
    ref = lowp_gemm.reference(a, b, dtype)
    if dtype == "uint8":
        np.testing.assert_array_equal(c, ref)
    else:
        np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


def test_target_facts():
    z3, z5 = tdsl.target.Target("llvm -mcpu=znver3"), tdsl.target.Target("llvm -mcpu=znver5")
    assert not z3.has_vnni and not z3.has_bf16
    assert z5.has_vnni and z5.has_bf16
    assert not tdsl.target.Target("llvm -mcpu=znver5 -mattr=-avx512vnni").has_vnni


def test_intrinsic_refused_without_the_extension():
    with pytest.raises(tdsl.ScheduleError, match="lacks AVX512-VNNI"):
        tdsl.intrin_x86.dot_u8s8_int32("llvm -mcpu=znver3")
    with pytest.raises(tdsl.ScheduleError, match="lacks AVX512-BF16"):
        lowp_gemm.tensorized(64, 64, 64, "bfloat16", "llvm -mcpu=haswell")
    # an intrinsic made for one target, built for another
    s, args = lowp_gemm.tensorized(64, 64, 64, "uint8", "llvm -mcpu=znver5")
    with pytest.raises(tdsl.BuildError, match="needs AVX512-VNNI.*znver3"):
        tdsl.build(s, args, target="llvm -mcpu=znver3")


def _int8_stage(factor=16, packed=True):
    M, N, K = 16, 32, 16
    A = tdsl.placeholder((M, K), dtype="uint8", name="A")
    k = tdsl.reduce_axis((0, K), name="k")
    if packed:
        B = tdsl.placeholder((N // 16, K // 4, 16, 4), dtype="int8", name="B")
        C = tdsl.compute((M, N), lambda i, j: tdsl.sum(
            A[i, k].astype("int32") * B[j // 16, k // 4, j % 16, k % 4].astype("int32"),
            axis=k), name="C")
    else:
        B = tdsl.placeholder((K, N), dtype="int8", name="B")
        C = tdsl.compute((M, N), lambda i, j: tdsl.sum(
            A[i, k].astype("int32") * B[k, j].astype("int32"), axis=k), name="C")
    s = tdsl.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=factor)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(C.op.axis[0], jo, ko, ji, ki)
    s[C].tensorize(ji, tdsl.intrin_x86.dot_u8s8_int32("llvm -mcpu=znver5"))
    return s, [A, B, C]


@pytest.mark.parametrize("factor,packed,msg", [
    (8, True, "loop 'j.inner' runs 8 times, the intrinsic's axis 'i' 16"),
    (16, False, "the block of 'B' is not laid out in 'B'"),
])
def test_tensorize_mismatch_names_stage_and_axis(factor, packed, msg):
    s, args = _int8_stage(factor, packed)
    with pytest.raises(tdsl.ScheduleError, match="tensorize: stage 'C': axis 'j.inner'") as e:
        tdsl.lower(s, args)
    assert msg in str(e.value)


def test_tensorize_refuses_other_computations():
    A = tdsl.placeholder((16, 16), dtype="uint8", name="A")
    B = tdsl.placeholder((1, 4, 16, 4), dtype="int8", name="B")
    k = tdsl.reduce_axis((0, 16), name="k")
    C = tdsl.compute((16, 16), lambda i, j: tdsl.sum(   # + instead of *
        A[i, k].astype("int32") + B[0, k // 4, j, k % 4].astype("int32"), axis=k), name="C")
    s = tdsl.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(C.op.axis[0], ko, C.op.axis[1], ki)
    s[C].tensorize(C.op.axis[1], tdsl.intrin_x86.dot_u8s8_int32("llvm -mcpu=znver5"))
    with pytest.raises(tdsl.ScheduleError, match="stage 'C': axis 'j'.*does not have the form"):
        tdsl.lower(s, [A, B, C])
    with pytest.raises(tdsl.ScheduleError, match="expected a tensor intrinsic"):
        s[C].tensorize(ko, "vnni")
