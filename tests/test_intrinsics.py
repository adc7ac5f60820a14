"""The math and bit intrinsics of `tvm.tir`/`te` against numpy on every target: "llvm" with
the loop vectorized (it must stay vector IR: no note that it ran serially), "c", "opencl"
(PoCL; skipped without a device) and "cuda" (source compiled to PTX by NVRTC; skipped
without it). Each case is one compute with many outputs, so one kernel covers a dtype."""
import numpy as np
import pytest

import tdsl
from tdsl.runtime import cuda as rcuda
from tdsl.runtime import opencl as rocl

N = 64
TARGETS = ["llvm", "c", "opencl", "cuda"]


def _target_or_skip(target):
    if target == "opencl":
        try:
            import pyopencl  # noqa: F401
        except ImportError:
            pytest.skip("pyopencl is not installed")
        if rocl.unusable_reason() is not None:
            pytest.skip("no working OpenCL device")
    if target == "cuda" and not rcuda.have_nvrtc():
        pytest.skip("NVRTC is not installed")


def _check(target, ins, fns, refs, out_dtypes, tol=0.0, name="k"):
    """Builds `fns` (each a function of the inputs' elements) as the outputs of one compute
    and compares them with `refs` (functions of the numpy inputs)."""
    _target_or_skip(target)
    phs = [tdsl.placeholder((N,), dtype=a.dtype.name, name=f"x{i}") for i, a in enumerate(ins)]
    outs = tdsl.compute((N,), lambda i: tuple(f(*[p[i] for p in phs]) for f in fns), name="R")
    outs = outs if isinstance(outs, list) else [outs]
    s = tdsl.create_schedule(outs[0].op)
    o, v = s[outs[0]].split(outs[0].op.axis[0], factor=8)
    if target == "llvm":
        s[outs[0]].vectorize(v)
    elif target != "c":
        s[outs[0]].bind(o, tdsl.thread_axis("blockIdx.x"))
        s[outs[0]].bind(v, tdsl.thread_axis("threadIdx.x"))
    f = tdsl.build(s, phs + outs, target=target, name=name)
    if target == "cuda":
        assert ".entry" in f.get_source("ptx")
        return f
    if target == "llvm":
        assert not f.notes, f.notes                 # the vectorized loop stayed vector IR
    arrays = [np.zeros(N, dtype=d) for d in out_dtypes]
    f(*ins, *arrays)
    with np.errstate(all="ignore"):
        for k, (got, ref) in enumerate(zip(arrays, refs)):
            exp = np.asarray(ref(*ins)).astype(got.dtype)
            if got.dtype.kind == "f":
                np.testing.assert_allclose(got, exp, rtol=tol, atol=tol, equal_nan=True,
                                           err_msg=f"output {k} on {target}")
            else:
                np.testing.assert_array_equal(got, exp, err_msg=f"output {k} on {target}")
    return f


FLOAT_UNARY = {           # name: (domain, reference)
    "exp10": ("small", lambda x: np.power(10.0, x.astype("f8"))),
    "log10": ("pos", np.log10), "log1p": ("pos", np.log1p), "expm1": ("small", np.expm1),
    "tan": ("small", np.tan), "asin": ("unit", np.arcsin), "acos": ("unit", np.arccos),
    "atan": ("any", np.arctan), "sinh": ("small", np.sinh), "cosh": ("small", np.cosh),
    "asinh": ("any", np.arcsinh), "acosh": ("pos", np.arccosh), "atanh": ("unit", np.arctanh),
    "nearbyint": ("wide", np.rint),
}
FLOAT_BINARY = {"atan2": np.arctan2, "hypot": np.hypot, "copysign": np.copysign,
                "fmod": np.fmod}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("target", TARGETS)
def test_float_intrinsics(target, dtype):
    rng = np.random.default_rng(3)
    doms = {"small": rng.uniform(-0.99, 0.99, N), "pos": rng.uniform(1.01, 5, N),
            "unit": rng.uniform(-0.99, 0.99, N), "any": rng.uniform(-3, 3, N),
            "wide": rng.uniform(-9, 9, N)}
    doms["wide"][:4] = [0.5, 1.5, -2.5, 3.5]          # ties round to even
    x = rng.uniform(-3, 3, N).astype(dtype)
    y = rng.uniform(0.5, 3, N).astype(dtype)
    x[:4] = [np.inf, -np.inf, np.nan, 0.0]            # special values through binary ones
    y[:4] = [np.nan, 1.0, 2.0, 0.0]
    ins = [x, y] + [doms[d].astype(dtype) for d in sorted(doms)]
    slot = {d: 2 + k for k, d in enumerate(sorted(doms))}
    fns, refs = [], []
    for name, (dom, ref) in FLOAT_UNARY.items():
        fn = getattr(tdsl, name)
        fns.append(lambda *a, fn=fn, k=slot[dom]: fn(a[k]))
        refs.append(lambda *a, ref=ref, k=slot[dom]: ref(a[k]))
    for name, ref in FLOAT_BINARY.items():
        fn = getattr(tdsl, name)
        fns.append(lambda *a, fn=fn: fn(a[0], a[1]))
        refs.append(lambda *a, ref=ref: ref(a[0], a[1]))
    tol = 2e-6 if dtype == "float32" else 1e-13
    _check(target, ins, fns, refs, [dtype] * len(fns), tol)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("target", TARGETS)
def test_classification_and_ldexp(target, dtype):
    if dtype == "float16" and target == "opencl":
        pytest.skip("PoCL has no cl_khr_fp16")
    rng = np.random.default_rng(4)
    x = rng.uniform(-3, 3, N).astype(dtype)
    x[:5] = [np.inf, -np.inf, np.nan, 0.0, -0.0]
    e = rng.integers(-10, 10, N).astype("int32")
    fns = [tdsl.isnan, tdsl.isinf, tdsl.isfinite, lambda a, b: tdsl.ldexp(a, b)]
    refs = [np.isnan, np.isinf, np.isfinite, np.ldexp]
    fns = [lambda a, b, fn=fn: fn(a) for fn in fns[:3]] + fns[3:]
    refs = [lambda a, b, r=r: r(a) for r in refs[:3]] + refs[3:]
    _check(target, [x, e], fns, refs, ["bool", "bool", "bool", dtype])


def _clz(a):
    bits = a.dtype.itemsize * 8
    ua = a.view(f"uint{bits}")
    return np.array([bits - int(v).bit_length() for v in ua], "int32")


def _shift(a, s, left):
    """numpy's shifts, with amounts outside [0, bits) shifting everything out."""
    bits = a.dtype.itemsize * 8
    ok = (s.astype("int64") >= 0) & (s.astype("int64") < bits)
    if left:
        out = np.zeros_like(a)
    else:
        out = np.where(a < 0, -1, 0).astype(a.dtype) if a.dtype.kind == "i" else np.zeros_like(a)
    out[ok] = (np.left_shift if left else np.right_shift)(a[ok], s[ok])
    return out


def _truncmod(a, b):
    safe = np.where((b == 0) | ((b == -1) if a.dtype.kind == "i" else False), 1, b)
    return np.where(safe == b, np.fmod(a, safe), 0).astype(a.dtype)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32",
                                   "uint64"])
@pytest.mark.parametrize("target", TARGETS)
def test_integer_intrinsics(target, dtype):
    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    bits = info.bits
    a = rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True)
    a[:3] = [0, info.max, info.min]
    b[:4] = [0, 0, 3, 1]
    if info.min < 0:
        b[4] = -1
    sh = rng.integers(0, bits + 4, N).astype(dtype)        # some amounts out of range
    c3 = np.array(3, dtype)
    fns = [lambda x, y, s: x & y, lambda x, y, s: x | y, lambda x, y, s: x ^ y,
           lambda x, y, s: ~x, lambda x, y, s: x << s, lambda x, y, s: x >> s,
           lambda x, y, s: tdsl.shift_left(x, 3), lambda x, y, s: tdsl.shift_right(x, 3),
           lambda x, y, s: tdsl.popcount(x), lambda x, y, s: tdsl.clz(x),
           lambda x, y, s: tdsl.fmod(x, y), lambda x, y, s: tdsl.bitwise_and(x, 12)]
    refs = [np.bitwise_and, np.bitwise_or, np.bitwise_xor, lambda x, y, s: np.invert(x),
            lambda x, y, s: _shift(x, s, True), lambda x, y, s: _shift(x, s, False),
            lambda x, y, s: np.left_shift(x, c3), lambda x, y, s: np.right_shift(x, c3),
            lambda x, y, s: np.bitwise_count(x.view(f"uint{bits}")),
            lambda x, y, s: _clz(x), lambda x, y, s: _truncmod(x, y),
            lambda x, y, s: np.bitwise_and(x, np.array(12, dtype))]
    refs[:3] = [lambda x, y, s, r=r: r(x, y) for r in refs[:3]]
    out_dtypes = [dtype] * 9 + ["int32", dtype, dtype]
    _check(target, [a, b, sh], fns, refs, out_dtypes)


def test_vectorized_intrinsics_are_vector_ir():
    """The loop stays one vector operation per intrinsic: vector-typed calls in the IR."""
    x = tdsl.placeholder((N,), name="x")
    u = tdsl.placeholder((N,), dtype="uint32", name="u")
    R = tdsl.compute((N,), lambda i: (tdsl.atan2(x[i], 2.0), tdsl.popcount(u[i]),
                                      tdsl.clz(u[i]), tdsl.copysign(x[i], -1.0),
                                      tdsl.isnan(x[i])), name="R")
    s = tdsl.create_schedule(R[0].op)
    o, v = s[R[0]].split(R[0].op.axis[0], factor=8)
    s[R[0]].vectorize(v)
    from tdsl.codegen import llvm
    ir_text, _, notes = llvm.codegen(tdsl.lower(s, [x, u] + R))    # as generated, any CPU
    assert not notes
    for pattern in ("llvm.atan2.v8f32", "llvm.ctpop.v8i32", "llvm.ctlz.v8i32",
                    "fcmp uno <8 x float>"):
        assert pattern in ir_text, pattern


def test_min_max_value_and_equal():
    for dtype in ("int8", "int32", "uint16", "uint64", "float16", "float32", "float64"):
        lo, hi = tdsl.min_value(dtype), tdsl.max_value(dtype)
        info = np.finfo(dtype) if dtype.startswith("float") else np.iinfo(dtype)
        assert lo.dtype == hi.dtype == dtype
        assert lo.value == (-info.max if dtype.startswith("float") else info.min)
        assert hi.value == info.max
    assert tdsl.min_value("bool").value == 0 and tdsl.max_value("bool").value == 1
    A = tdsl.placeholder((6,), dtype="int32", name="A")
    B = tdsl.compute((6,), lambda i: tdsl.select(A[i].equal(3), 1, 0), name="B")
    f = tdsl.build(tdsl.create_schedule(B), [A, B])
    a, b = np.arange(6, dtype="int32"), np.zeros(6, "int32")
    f(a, b)
    np.testing.assert_array_equal(b, (a == 3).astype("int32"))
