"""LLVM backend: hand-built PrimFuncs compiled and compared with numpy / Python."""
import math
import re
import os

import numpy as np
import pytest

from tdsl import dtype as dt
from tdsl.codegen import llvm as L
from tdsl.errors import BuildError
from tdsl.runtime import threadpool
from tdsl.target import Target, vector_bits_in_asm
from tdsl.ir import expr as E
from tdsl.ir.expr import BufferLoad as Ld, IntImm as I
from tdsl.ir.stmt import (Allocate, Buffer, BufferStore as St, For, ForKind as K, IfThenElse,
                          LetStmt, PrimFunc, seq)

LANES = 16


def buf(name, shape, dtype="float32", scope="global"):
    shape = tuple(I(s) if isinstance(s, int) else s for s in shape)
    return Buffer(name, shape, dtype, scope)


def elementwise(name, ins, outs, fexprs, n, vector=False, lanes=LANES):
    """outs[k][i] = fexprs(i)[k] over i in [0, n); vector: io serial x iv vectorized."""
    i = E.Var("i")
    if vector:
        io, iv = E.Var("io"), E.Var("iv")
        idx = io * lanes + iv
        vals = fexprs(idx)
        body = seq(*[St(o, v, (idx,)) for o, v in zip(outs, vals)])
        loop = For(io, I(0), I(n // lanes), K.SERIAL, For(iv, I(0), I(lanes), K.VECTORIZED, body))
    else:
        vals = fexprs(i)
        body = seq(*[St(o, v, (i,)) for o, v in zip(outs, vals)])
        loop = For(i, I(0), I(n), K.SERIAL, body)
    params = list(ins) + list(outs)
    return PrimFunc(name, params, loop, {"num_user_args": len(params)})


def ulp_err(got, want, dtype):
    got = got.astype(np.float64)
    want64 = want.astype(np.float64)
    spacing = np.abs(np.spacing(want.astype(dtype))).astype(np.float64)
    spacing = np.maximum(spacing, np.finfo(dtype).smallest_normal)
    both_nan = np.isnan(got) & np.isnan(want64)
    same = (got == want64) | both_nan
    err = np.where(same, 0.0, np.abs(got - want64) / spacing)
    return np.nan_to_num(err, nan=np.inf)


# ------------------------------------------------------------------------------------------
# dtypes

ALL_DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
              "uint16", "uint32", "uint64", "bool"]


def _sample(dtype, n, rng):
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if dt.is_float(dtype):
        return (rng.standard_normal(n) * 10).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("vector", [False, True])
def test_every_dtype_round_trip_and_cast_to_float64(vector):
    rng = np.random.default_rng(0)
    n = 64
    for dtype in ALL_DTYPES:
        A = buf("A", (n,), dtype)
        B = buf("B", (n,), dtype)
        D = buf("D", (n,), "float64")
        f = elementwise("rt_" + dtype, [A], [B, D],
                        lambda i: [Ld(A, (i,)), E.cast(Ld(A, (i,)), "float64")], n, vector)
        m = L.build(f)
        a = _sample(dtype, n, rng)
        b = np.zeros(n, dtype)
        d = np.zeros(n, "float64")
        m(a, b, d)
        np.testing.assert_array_equal(b, a, err_msg=dtype)
        np.testing.assert_array_equal(d, a.astype("float64"), err_msg=dtype)


def test_casts_between_dtypes_match_numpy():
    n = 48
    vals = np.array([0, 1, -1, 2.5, -2.5, 100, -100, 127, 3.75, 0.25, 1e3, -7] * 4, "float64")
    pairs = [("float64", "int32"), ("float32", "int8"), ("float64", "uint8"),
             ("int32", "float16"), ("int64", "int8"), ("int8", "int64"), ("uint8", "int32"),
             ("int32", "uint16"), ("float32", "bool"), ("bool", "float32"), ("int16", "bool"),
             ("float16", "float64"), ("float64", "float16"), ("uint32", "float64")]
    for src, dst in pairs:
        A = buf("A", (n,), src)
        B = buf("B", (n,), dst)
        for vector in (False, True):
            f = elementwise("cast", [A], [B], lambda i: [E.cast(Ld(A, (i,)), dst)], n, vector)
            m = L.build(f)
            if src == "bool":
                a = (vals != 0)
            elif src.startswith("uint"):
                a = np.abs(vals).astype("int64").astype(src)
            else:
                a = vals.astype(src)
            if dt.is_float(src) and dst != "bool":
                # a float outside the integer type's range has no defined conversion (C,
                # LLVM and numpy on different CPUs disagree): only defined values are checked
                info = np.iinfo(dst) if not dt.is_float(dst) else None
                if info is not None:
                    a = a[(a > info.min - 1) & (a < info.max + 1)]
            b = np.zeros(n, dst)
            m(np.resize(a, n), b)
            np.testing.assert_array_equal(b, np.resize(a, n).astype(dst), err_msg=f"{src}->{dst}")


def test_scalar_params_of_each_kind():
    n = 32
    A = buf("A", (n,), "float32")
    B = buf("B", (n,), "float32")
    s_f = E.Var("alpha", "float32")
    s_d = E.Var("beta", "float64")
    s_i = E.Var("k", "int64")
    s_u = E.Var("u", "uint8")
    s_b = E.Var("flag", "bool")
    i = E.Var("i")
    val = E.select(s_b, Ld(A, (i,)) * s_f + E.cast(s_d, "float32") + E.cast(s_i, "float32")
                   + E.cast(s_u, "float32"), E.const(-1.0, "float32"))
    f = PrimFunc("scal", [A, B, s_f, s_d, s_i, s_u, s_b],
                 For(i, I(0), I(n), K.SERIAL, St(B, val, (i,))), {"num_user_args": 7})
    m = L.build(f)
    a = np.arange(n, dtype="float32")
    b = np.zeros(n, "float32")
    m(a, b, 2.0, 0.5, -3, 200, True)
    np.testing.assert_allclose(b, a * 2 + 0.5 - 3 + 200)
    m(a, b, 2.0, 0.5, -3, 200, False)
    np.testing.assert_array_equal(b, -1)


def test_float16_arithmetic():
    n = 64
    A, B, C = buf("A", (n,), "float16"), buf("B", (n,), "float16"), buf("C", (n,), "float16")
    for vector in (False, True):
        f = elementwise("h", [A, B], [C],
                        lambda i: [Ld(A, (i,)) * Ld(B, (i,)) + Ld(A, (i,)) / Ld(B, (i,))],
                        n, vector)
        m = L.build(f)
        rng = np.random.default_rng(1)
        a = rng.uniform(1, 4, n).astype("float16")
        b = rng.uniform(1, 4, n).astype("float16")
        c = np.zeros(n, "float16")
        m(a, b, c)
        np.testing.assert_allclose(c.astype("float32"), (a * b + a / b).astype("float32"),
                                   rtol=2e-3)


# ------------------------------------------------------------------------------------------
# intrinsics

UNARY = {
    "exp": (np.exp, (-110, 95)), "log": (np.log, (1e-3, 1e3)), "sqrt": (np.sqrt, (0, 100)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.01, 100)), "tanh": (np.tanh, (-12, 12)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-60, 60)),
    "erf": (np.vectorize(math.erf), (-4, 4)), "abs": (np.abs, (-5, 5)),
    "floor": (np.floor, (-5, 5)), "ceil": (np.ceil, (-5, 5)), "round": (np.round, (-5, 5)),
    "sin": (np.sin, (-10, 10)), "cos": (np.cos, (-10, 10)), "exp2": (np.exp2, (-140, 120)),
    "log2": (np.log2, (1e-3, 1e3)), "trunc": (np.trunc, (-5, 5)),
}
ULPS = {"exp": 2, "exp2": 2, "tanh": 3, "sigmoid": 3, "rsqrt": 2, "erf": 2, "log": 2,
        "log2": 2}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("vector", [False, True])
def test_unary_intrinsics_match_numpy(dtype, vector):
    n = 1024
    names = list(UNARY)
    A = buf("A", (len(names), n), dtype)
    outs = [buf("O_" + k, (n,), dtype) for k in names]
    f = elementwise("intr", [A], outs,
                    lambda i: [E.call(k, Ld(A, (I(r * n) + i,))) for r, k in enumerate(names)],
                    n, vector)
    m = L.build(f)
    rng = np.random.default_rng(2)
    a = np.zeros((len(names), n), dtype)
    for r, k in enumerate(names):
        lo, hi = UNARY[k][1]
        a[r] = rng.uniform(lo, hi, n).astype(dtype)
    # special values: halves for round, edge values for exp
    r_round = names.index("round")
    a[r_round, :8] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 4.5]
    for k in ("exp", "tanh", "sigmoid", "exp2", "abs", "floor", "erf", "sin"):
        a[names.index(k), 8:13] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    for k in ("log", "log2", "sqrt", "rsqrt"):
        a[names.index(k), 8:14] = [np.nan, np.inf, -1.0, 0.0, 1e-40 if dtype == "float32"
                                   else 1e-310, 1.0]
    res = [np.zeros(n, dtype) for _ in names]
    with np.errstate(all="ignore"):
        m(a, *res)
        for r, k in enumerate(names):
            want = UNARY[k][0](a[r].astype(np.float64)).astype(dtype)
            err = ulp_err(res[r], want, dtype)
            assert err.max() <= ULPS.get(k, 1), (
                k, dtype, vector, float(err.max()), a[r][np.argmax(err)], res[r][np.argmax(err)],
                want[np.argmax(err)])


def test_vector_exp_is_inline_polynomial_not_libm():
    n = 64
    A, B = buf("A", (n,), "float32"), buf("B", (n,), "float32")
    f = elementwise("vexp", [A], [B], lambda i: [E.call("exp", Ld(A, (i,)))], n, True)
    m = L.build(f)
    ir_text = m.get_source()
    assert "expf" not in ir_text
    assert "<16 x float>" in ir_text
    a = np.linspace(-20, 20, n).astype("float32")
    b = np.zeros(n, "float32")
    m(a, b)
    np.testing.assert_allclose(b, np.exp(a), rtol=3e-7)


@pytest.mark.parametrize("vector", [False, True])
def test_power_and_float16_intrinsics(vector):
    n = 64
    A, B = buf("A", (n,), "float32"), buf("B", (n,), "float32")
    P = buf("P", (n,), "float32")
    H, HO = buf("H", (n,), "float16"), buf("HO", (n,), "float16")
    f = elementwise("pw", [A, B, H], [P, HO],
                    lambda i: [E.call("power", Ld(A, (i,)), Ld(B, (i,))),
                               E.call("exp", Ld(H, (i,))) + E.call("sqrt", Ld(H, (i,)))],
                    n, vector)
    m = L.build(f)
    rng = np.random.default_rng(3)
    a = rng.uniform(0.1, 4, n).astype("float32")
    b = rng.uniform(-3, 3, n).astype("float32")
    h = rng.uniform(0, 3, n).astype("float16")
    p = np.zeros(n, "float32")
    ho = np.zeros(n, "float16")
    m(a, b, h, p, ho)
    np.testing.assert_allclose(p, np.power(a, b), rtol=2e-6)
    want = (np.exp(h.astype("float32")).astype("float16")
            + np.sqrt(h.astype("float32")).astype("float16"))
    np.testing.assert_allclose(ho.astype("float32"), want.astype("float32"), rtol=2e-3)


@pytest.mark.parametrize("vector,lanes,target", [
    (False, LANES, "llvm"), (True, 16, "llvm"), (True, 8, "llvm"), (True, 4, "llvm"),
    (True, 8, "llvm -mcpu=haswell"), (True, 16, "llvm -mcpu=haswell")])
def test_float_min_max_propagate_nan_and_int_abs(vector, lanes, target):
    """Whole registers take x86's maxps/minps with a NaN fix-up, other widths a generic
    select: both give numpy's values, NaNs and infinities included (numpy itself gives
    either zero for max(-0, +0))."""
    if not Target(target).runs_here:
        pytest.skip(f"this machine cannot run code for {target}")
    n = 64
    A, B = buf("A", (n,), "float32"), buf("B", (n,), "float32")
    MX, MN = buf("MX", (n,), "float32"), buf("MN", (n,), "float32")
    X, XA = buf("X", (n,), "int32"), buf("XA", (n,), "int32")
    f = elementwise("mm", [A, B, X], [MX, MN, XA],
                    lambda i: [E.maximum(Ld(A, (i,)), Ld(B, (i,))),
                               E.minimum(Ld(A, (i,)), Ld(B, (i,))),
                               E.call("abs", Ld(X, (i,)))], n, vector, lanes)
    m = L.build(f, target)
    rng = np.random.default_rng(4)
    a = rng.standard_normal(n).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    a[[1, 5]] = np.nan
    b[[2, 5, 7]] = np.nan
    special = np.array([0.0, -0.0, np.inf, -np.inf, 1.0, np.nan], "float32")
    a[32:] = rng.choice(special, 32)
    b[32:] = rng.choice(special, 32)
    x = rng.integers(-1000, 1000, n).astype("int32")
    mx, mn, xa = np.zeros(n, "float32"), np.zeros(n, "float32"), np.zeros(n, "int32")
    m(a, b, x, mx, mn, xa)
    np.testing.assert_array_equal(mx, np.maximum(a, b))
    np.testing.assert_array_equal(mn, np.minimum(a, b))
    np.testing.assert_array_equal(xa, np.abs(x))


# ------------------------------------------------------------------------------------------
# integer division


@pytest.mark.parametrize("vector", [False, True])
@pytest.mark.parametrize("dtype", ["int32", "int64", "int8"])
def test_floor_div_mod_match_python(vector, dtype):
    n = 256
    A, B = buf("A", (n,), dtype), buf("B", (n,), dtype)
    consts = [1, 2, 8, 3, 7, -4, -3]
    outs = []
    for k in range(len(consts) + 1):
        outs += [buf(f"Q{k}", (n,), dtype), buf(f"R{k}", (n,), dtype)]

    def fx(i):
        a = Ld(A, (i,))
        vals = []
        for c in consts:
            vals += [E.FloorDiv(a, I(c, dtype)), E.FloorMod(a, I(c, dtype))]
        vals += [E.FloorDiv(a, Ld(B, (i,))), E.FloorMod(a, Ld(B, (i,)))]
        return vals
    m = L.build(elementwise("fdm", [A, B], outs, fx, n, vector))
    rng = np.random.default_rng(5)
    hi = 100 if dtype == "int8" else 10**6
    a = rng.integers(-hi, hi, n).astype(dtype)
    b = rng.integers(-9, 10, n).astype(dtype)
    b[b == 0] = 3
    b[:3] = [0, -1, 1]  # x // 0 -> 0 (numpy), no crash; x // -1
    a[:2] = np.iinfo(dtype).min
    res = [np.zeros(n, dtype) for _ in outs]
    m(a, b, *res)
    for k, c in enumerate(consts):
        assert [int(v) for v in res[2 * k]] == [int(x) // c for x in a], c
        assert [int(v) for v in res[2 * k + 1]] == [int(x) % c for x in a], c
    q, r = res[-2], res[-1]
    for j in range(n):
        x, y = int(a[j]), int(b[j])
        if y == 0:
            assert q[j] == 0 and r[j] == 0
        elif y == -1:
            assert r[j] == 0
            assert int(q[j]) == np.array(-x).astype(dtype)  # wraps like numpy
        else:
            assert (int(q[j]), int(r[j])) == (x // y, x % y), (x, y)


def test_unsigned_div_mod_and_wrapping_arithmetic():
    n = 64
    A, Q, R, W = (buf("A", (n,), "uint32"), buf("Q", (n,), "uint32"), buf("R", (n,), "uint32"),
                  buf("W", (n,), "uint32"))
    f = elementwise("u", [A], [Q, R, W],
                    lambda i: [E.FloorDiv(Ld(A, (i,)), I(10, "uint32")),
                               E.FloorMod(Ld(A, (i,)), I(16, "uint32")),
                               Ld(A, (i,)) * I(3, "uint32") + I(7, "uint32")], n)
    m = L.build(f)
    a = np.random.default_rng(6).integers(0, 2**32, n, dtype="uint32")
    q, r, w = (np.zeros(n, "uint32") for _ in range(3))
    m(a, q, r, w)
    np.testing.assert_array_equal(q, a // 10)
    np.testing.assert_array_equal(r, a % 16)
    np.testing.assert_array_equal(w, a * np.uint32(3) + np.uint32(7))


# ------------------------------------------------------------------------------------------
# vectorized memory access paths


def _vec_kernel(n, index_fn, name):
    A, B = buf("A", (4 * n,), "float32"), buf("B", (n,), "float32")
    io, iv = E.Var("io"), E.Var("iv")
    idx = io * LANES + iv
    body = For(io, I(0), I(n // LANES), K.SERIAL,
               For(iv, I(0), I(LANES), K.VECTORIZED,
                   St(B, Ld(A, (index_fn(idx, io, iv),)) * E.const(2.0, "float32"), (idx,))))
    return PrimFunc(name, [A, B], body, {"num_user_args": 2})


@pytest.mark.parametrize("case", ["contiguous", "broadcast", "gather", "reverse"])
def test_vector_load_paths(case):
    n = 64
    fns = {
        "contiguous": (lambda idx, io, iv: idx + 3, lambda j: j + 3),
        "broadcast": (lambda idx, io, iv: io * 5, lambda j: (j // LANES) * 5),
        "gather": (lambda idx, io, iv: idx * 3 + 1, lambda j: j * 3 + 1),
        "reverse": (lambda idx, io, iv: I(4 * n - 1) - idx, lambda j: 4 * n - 1 - j),
    }
    fi, ref = fns[case]
    m = L.build(_vec_kernel(n, fi, "v_" + case))
    a = np.random.default_rng(7).standard_normal(4 * n).astype("float32")
    b = np.zeros(n, "float32")
    m(a, b)
    np.testing.assert_array_equal(b, 2 * a[[ref(j) for j in range(n)]])
    src = m.get_source()
    if case == "contiguous":
        assert "load <16 x float>" in src
    if case in ("gather", "reverse"):
        assert "<16 x float>" in src


def test_vector_scatter_store_and_uniform_store():
    n = 64
    A, B = buf("A", (n,), "float32"), buf("B", (2 * n,), "float32")
    S_ = buf("S", (4,), "float32")
    LAST = buf("LAST", (4,), "float32")
    io, iv = E.Var("io"), E.Var("iv")
    idx = io * LANES + iv
    body = For(io, I(0), I(n // LANES), K.SERIAL,
               For(iv, I(0), I(LANES), K.VECTORIZED, seq(
                   St(B, Ld(A, (idx,)), (idx * 2 + 1,)),
                   St(S_, E.cast(io, "float32"), (io,)),
                   St(LAST, Ld(A, (idx,)), (io,)))))  # serial semantics: the last lane wins
    m = L.build(PrimFunc("sc", [A, B, S_, LAST], body, {"num_user_args": 4}))
    assert not m.notes
    a = np.arange(n, dtype="float32")
    b = np.zeros(2 * n, "float32")
    s = np.full(4, -1, "float32")
    last = np.zeros(4, "float32")
    m(a, b, s, last)
    np.testing.assert_array_equal(b[1::2], a)
    np.testing.assert_array_equal(b[0::2], 0)
    np.testing.assert_array_equal(s, [0, 1, 2, 3])
    np.testing.assert_array_equal(last, a[LANES - 1::LANES])


def test_vector_let_and_uniform_if_and_select():
    n = 64
    A, B = buf("A", (n,), "float32"), buf("B", (n,), "float32")
    io, iv, t = E.Var("io"), E.Var("iv"), E.Var("t", "float32")
    idx = io * LANES + iv
    inner = LetStmt(t, Ld(A, (idx,)) * E.const(3.0, "float32"),
                    IfThenElse(io % 2 == 0,
                               St(B, E.select(t > E.const(0.0, "float32"), t, -t), (idx,)),
                               St(B, t + E.const(1.0, "float32"), (idx,))))
    body = For(io, I(0), I(n // LANES), K.SERIAL, For(iv, I(0), I(LANES), K.VECTORIZED, inner))
    m = L.build(PrimFunc("lv", [A, B], body, {"num_user_args": 2}))
    a = np.random.default_rng(8).standard_normal(n).astype("float32")
    b = np.zeros(n, "float32")
    m(a, b)
    t_ = a * 3
    want = np.where((np.arange(n) // LANES) % 2 == 0, np.abs(t_), t_ + 1)
    np.testing.assert_allclose(b, want, rtol=1e-6)


def test_vector_masked_store_under_lane_varying_if_stays_in_bounds():
    n = 20  # a 32-lane loop over 20 elements: lanes 20..31 must not write
    big = np.full(64, 7.0, "float32")
    A, B = buf("A", (n,), "float32"), buf("B", (n,), "float32")
    iv = E.Var("iv")
    body = For(iv, I(0), I(32), K.VECTORIZED,
               IfThenElse(E.likely(iv < n), St(B, Ld(A, (iv,)) + E.const(1.0, "float32"), (iv,))))
    f = PrimFunc("ms", [A, B], body, {"num_user_args": 2})
    assert "llvm.masked.store" in L.codegen(f)[0]
    m = L.build(f)
    a_big = np.full(64, 5.0, "float32")
    a = a_big[:n]
    a[:] = np.arange(n)
    m(a, big[:n])
    np.testing.assert_array_equal(big[:n], np.arange(n) + 1)
    np.testing.assert_array_equal(big[n:], 7.0)


# ------------------------------------------------------------------------------------------
# select laziness: the untaken side must not be read (a bad index would fault)

FAR = 1 << 40  # an element index far outside any mapping


@pytest.mark.parametrize("vector", [False, True])
def test_select_reads_only_the_chosen_side(vector):
    n = 64
    A, IDX = buf("A", (n,), "float32"), buf("IDX", (n,), "int64")
    B, C = buf("B", (n,), "float32"), buf("C", (n,), "float32")
    D = buf("D", (n,), "float32")

    def fx(i):
        j = Ld(IDX, (i,))
        ok = j < I(n, "int64")
        return [E.select(ok, Ld(A, (j,)), E.const(-1.0, "float32")),
                E.select(E.logical_not(ok), E.const(-2.0, "float32"), Ld(A, (j,))),
                # `ok and A[j] > 0` must not read A[j] when ok is false
                E.select(E.logical_and(ok, Ld(A, (j,)) > E.const(0.0, "float32")),
                         E.const(1.0, "float32"), E.const(0.0, "float32"))]
    m = L.build(elementwise("lazy", [A, IDX], [B, C, D], fx, n, vector))
    a = np.arange(n, dtype="float32") - 10
    idx = np.arange(n, dtype="int64")[::-1].copy()
    idx[::3] = FAR
    b, c, d = (np.zeros(n, "float32") for _ in range(3))
    m(a, idx, b, c, d)
    safe = idx < n
    want = np.where(safe, a[np.where(safe, idx, 0)], -1)
    np.testing.assert_array_equal(b, want)
    np.testing.assert_array_equal(c, np.where(safe, want, -2))
    np.testing.assert_array_equal(d, (safe & (want > 0)).astype("float32"))


def test_select_shifted_neighbour_boundary():
    n = 48
    A, B = buf("A", (n,), "float32"), buf("B", (n,), "float32")
    for vector in (False, True):
        f = elementwise("shift", [A], [B],
                        lambda i: [E.select(i > 0, Ld(A, (i - 1,)), E.const(0.0, "float32"))],
                        n, vector)
        m = L.build(f)
        a = np.arange(1, n + 1, dtype="float32")
        b = np.zeros(n, "float32")
        m(a, b)
        np.testing.assert_array_equal(b, np.concatenate([[0], a[:-1]]))


# ------------------------------------------------------------------------------------------
# vectorize fallbacks stay correct


def test_vectorize_fallbacks_are_correct():
    n = 64
    A, B = buf("A", (n + 1,), "float32"), buf("B", (n + 1,), "float32")
    iv, k, m_ = E.Var("iv"), E.Var("k"), E.Var("m")
    cases = []
    # 1. symbolic extent
    cases.append(("symext", For(iv, I(0), m_, K.VECTORIZED,
                                St(B, Ld(A, (iv,)) + E.const(1.0, "float32"), (iv,))),
                  lambda a, b: (a[:n] + 1, slice(0, n))))
    # 2. a loop inside
    cases.append(("inner", For(iv, I(0), I(16), K.VECTORIZED,
                               For(k, I(0), I(4), K.SERIAL,
                                   St(B, Ld(B, (iv * 4 + k,)) + Ld(A, (iv * 4 + k,)),
                                      (iv * 4 + k,)))),
                  lambda a, b: (b[:n] + a[:n], slice(0, n))))
    # 3. a dependence between lanes: B[i+1] = B[i] + A[i] (a prefix sum)
    cases.append(("dep", For(iv, I(0), I(16), K.VECTORIZED,
                             St(B, Ld(B, (iv,)) + Ld(A, (iv,)), (iv + 1,))),
                  lambda a, b: (b[0] + np.concatenate([[0], np.cumsum(a[:16])]), slice(0, 17))))
    # 4. a reduction into one element
    cases.append(("red", For(iv, I(0), I(16), K.VECTORIZED,
                             St(B, Ld(B, (I(0),)) + Ld(A, (iv,)), (I(0),))),
                  lambda a, b: (np.array([b[0] + a[:16].sum()]), slice(0, 1))))
    rng = np.random.default_rng(9)
    for name, body, ref in cases:
        params = [A, B, m_] if name == "symext" else [A, B]
        f = PrimFunc(name, params, body, {"num_user_args": len(params)})
        mod = L.build(f)
        a = rng.integers(0, 10, n + 1).astype("float32")
        b = rng.integers(0, 10, n + 1).astype("float32")
        want, sl = ref(a, b.copy())
        if name == "symext":
            mod(a, b, n)
        else:
            mod(a, b)
        np.testing.assert_allclose(b[sl], want, rtol=1e-6, err_msg=name)
        if name != "symext":
            assert any("runs serially" in x for x in mod.notes), name


# ------------------------------------------------------------------------------------------
# loops: unrolled, parallel


def test_unrolled_loop_is_unrolled_and_correct():
    n = 8
    A, B = buf("A", (n,), "int32"), buf("B", (n,), "int32")
    i = E.Var("i")
    f = PrimFunc("unr", [A, B], For(i, I(0), I(n), K.UNROLLED,
                                    St(B, Ld(A, (i,)) * i, (i,))), {"num_user_args": 2})
    ir_text, _, _ = L.codegen(f)
    assert "phi" not in ir_text and ir_text.count("store i32") == n
    m = L.build(f)
    a = np.arange(10, 10 + n, dtype="int32")
    b = np.zeros(n, "int32")
    m(a, b)
    np.testing.assert_array_equal(b, a * np.arange(n))


def _par_rows(n_rows=37, cols=64, inner_parallel=False, with_alloc=False):
    A, B = buf("A", (n_rows, cols)), buf("B", (n_rows, cols))
    scale = E.Var("scale", "float32")
    i, j, t = E.Var("i"), E.Var("j"), E.Var("t")
    T = buf("T", (cols,), scope="local")
    row = LetStmt(t, i * cols, For(j, I(0), I(cols),
                                   K.PARALLEL if inner_parallel else K.SERIAL,
                                   St(B, Ld(A, (t + j,)) * scale + E.cast(i, "float32"), (t + j,))))
    if with_alloc:
        row = Allocate(T, seq(
            For(j, I(0), I(cols), K.SERIAL, St(T, Ld(A, (i * cols + j,)) * scale, (j,))),
            For(j, I(0), I(cols), K.SERIAL,
                St(B, Ld(T, (I(cols - 1) - j,)) + E.cast(i, "float32"), (i * cols + j,)))))
    body = For(i, I(0), I(n_rows), K.PARALLEL, row)
    return PrimFunc("par", [A, B, scale], body, {"num_user_args": 3})


@pytest.mark.parametrize("variant", ["plain", "nested", "alloc"])
def test_parallel_loop_correct_for_any_thread_count(variant):
    n_rows, cols = 37, 64
    f = _par_rows(n_rows, cols, inner_parallel=variant == "nested", with_alloc=variant == "alloc")
    m = L.build(f)
    a = np.random.default_rng(10).standard_normal((n_rows, cols)).astype("float32")
    if variant == "alloc":
        want = (a * 3)[:, ::-1] + np.arange(n_rows, dtype="float32")[:, None]
    else:
        want = a * 3 + np.arange(n_rows, dtype="float32")[:, None]
    for nt in (1, 2, 3, 8, 64):
        m.set_num_threads(nt)
        b = np.zeros_like(a)
        m(a, b, 3.0)
        np.testing.assert_allclose(b, want, rtol=1e-6, atol=1e-6, err_msg=f"threads={nt}")
    src = m.get_source()
    from tdsl.runtime import threadpool
    assert (threadpool.SYMBOL if threadpool.load_into_jit() else "pthread_create") in src
    if variant == "nested":
        assert any("inside a parallel loop" in x for x in m.notes)


def test_parallel_symbolic_extent_zero_one_and_outer_buffers():
    n = E.Var("n")
    A, B = buf("A", (n,)), buf("B", (n,))
    T = buf("T", (I(4),), scope="local")
    i = E.Var("i")
    body = Allocate(T, seq(St(T, E.const(5.0, "float32"), (I(2),)),
                           For(i, I(0), n, K.PARALLEL,
                               St(B, Ld(A, (i,)) + Ld(T, (I(2),)), (i,)))))
    m = L.build(PrimFunc("p0", [A, B, n], body, {"num_user_args": 2}))
    for size in (0, 1, 2, 1000):
        a = np.arange(size, dtype="float32")
        b = np.zeros(size, "float32")
        m(a, b)
        np.testing.assert_array_equal(b, a + 5)


# ------------------------------------------------------------------------------------------
# allocation

# heap buffers come from the runtime's scratch (tdsl/runtime/scratch.c) where it is loaded
_HEAP_ALLOC, _HEAP_FREE = (("tdsl_scratch_alloc", "tdsl_scratch_free") if threadpool.load_into_jit()
                           else ("aligned_alloc", "@free"))


@pytest.mark.parametrize("size", [16, 100_000])
def test_allocate_small_on_stack_and_large_on_heap(size):
    A, B = buf("A", (size,)), buf("B", (size,))
    T = buf("T", (size,), scope="global")
    i = E.Var("i")
    body = Allocate(T, seq(
        For(i, I(0), I(size), K.SERIAL, St(T, Ld(A, (i,)) * E.const(2.0, "float32"), (i,))),
        For(i, I(0), I(size), K.SERIAL, St(B, Ld(T, (I(size - 1) - i,)), (i,)))))
    f = PrimFunc("al", [A, B], body, {"num_user_args": 2})
    ir_text, _, _ = L.codegen(f)
    if size * 4 <= L.ALLOCA_MAX_BYTES:
        assert "alloca [16 x float], align 64" in ir_text and _HEAP_ALLOC not in ir_text
    else:
        assert _HEAP_ALLOC in ir_text and _HEAP_FREE in ir_text
    m = L.build(f)
    a = np.random.default_rng(11).standard_normal(size).astype("float32")
    b = np.zeros(size, "float32")
    m(a, b)
    np.testing.assert_array_equal(b, (2 * a)[::-1])


def test_allocate_symbolic_size_on_the_stack_only_between_save_and_restore():
    n = E.Var("n")
    A, B = buf("A", (n,)), buf("B", (n,))
    T = buf("T", (n,))
    L4 = buf("L4", (4,), scope="local")
    i, r, k = E.Var("i"), E.Var("r"), E.Var("k")
    body = For(r, I(0), I(3), K.SERIAL, Allocate(T, Allocate(L4, seq(
        For(k, I(0), I(4), K.SERIAL, St(L4, E.cast(k + r, "float32"), (k,))),
        For(i, I(0), n, K.SERIAL, St(T, Ld(A, (i,)) + Ld(L4, (i % 4,)), (i,))),
        For(i, I(0), n, K.SERIAL, St(B, Ld(B, (i,)) + Ld(T, (i,)), (i,)))))))
    f = PrimFunc("sym", [A, B, n], body, {"num_user_args": 2})
    ir_text, _, _ = L.codegen(f)
    entry = ir_text.split("start:")[0]
    assert entry.count("alloca") >= 1
    # an alloca in a loop is a run-time-sized buffer small enough for the stack, between
    # a stack save and a restore (the loop does not grow the stack); a large one is heap
    inner = ir_text.count("alloca") - entry.count("alloca")
    assert inner == ir_text.count("call ptr @\"llvm.stacksave.p0\"()") == 1
    assert "stackrestore.p0" in ir_text and _HEAP_ALLOC in ir_text
    m = L.build(f)
    a = np.arange(10, dtype="float32")
    b = np.zeros(10, "float32")
    m(a, b)
    want = sum(a + ((np.arange(10) % 4) + r) for r in range(3))
    np.testing.assert_array_equal(b, want)


# ------------------------------------------------------------------------------------------
# build errors, assembly


def test_build_errors_are_typed():
    A = buf("A", (4, 4))
    i = E.Var("i")
    unflat = PrimFunc("bad", [A], For(i, I(0), I(4), K.SERIAL,
                                      St(A, E.const(0.0, "float32"), (i, i))), {})
    with pytest.raises(BuildError, match="flattened"):
        L.build(unflat)
    undefined = PrimFunc("bad2", [A], St(A, E.cast(E.Var("q"), "float32"), (I(0),)), {})
    with pytest.raises(BuildError, match="not defined"):
        L.build(undefined)
    n = E.Var("n")
    missing_size = PrimFunc("bad3", [buf("B", (n,))], St(A, E.const(0.0, "float32"), (I(0),)), {})
    with pytest.raises(BuildError, match="size"):
        L.build(missing_size)
    with pytest.raises(BuildError):
        L.build(PrimFunc("ok", [A], St(A, E.const(0.0, "float32"), (I(0),)), {}), "llvm -bogus")


def test_asm_of_16_lane_float_loop_uses_the_host_vector_width():
    n = 256
    A, B = buf("A", (n,)), buf("B", (n,))
    f = elementwise("z", [A], [B], lambda i: [Ld(A, (i,)) * E.const(3.0, "float32")], n, True)
    m = L.build(f)
    asm = m.get_source("asm")
    assert vector_bits_in_asm(asm) == Target.host().vector_bits
    assert m.get_source("ll") == m.get_source()


def test_target_with_mcpu():
    A, B = buf("A", (32,)), buf("B", (32,))
    f = elementwise("t", [A], [B], lambda i: [Ld(A, (i,)) + E.const(1.0, "float32")], 32, True)
    m = L.build(f, "llvm -mcpu=x86-64")
    assert "zmm" not in m.get_source("asm")
    a = np.arange(32, dtype="float32")
    b = np.zeros(32, "float32")
    m(a, b)
    np.testing.assert_array_equal(b, a + 1)


def test_vector_fused_index_is_contiguous_via_arith_and_coeff0_is_uniform():
    """f = io*16 + iv over a (rows, 64) buffer: (f // 64) * 128 + f % 64 is contiguous in iv
    (tdsl.arith proves it); iv - iv + io is lane-invariant."""
    rows = 4
    A, B = buf("A", (rows, 128)), buf("B", (rows * 64,))
    U = buf("U", (rows * 4,))
    io, iv = E.Var("io"), E.Var("iv")
    f_ = io * 16 + iv
    src = E.FloorDiv(f_, I(64)) * 128 + E.FloorMod(f_, I(64))
    body = For(io, I(0), I(rows * 4), K.SERIAL, For(iv, I(0), I(16), K.VECTORIZED, seq(
        St(B, Ld(A, (src,)), (f_,)),
        St(U, Ld(A, (iv - iv + io,)), (io + iv * 0,)))))
    fn = PrimFunc("fused", [A, B, U], body, {"num_user_args": 3})
    ir_text, _, notes = L.codegen(fn)
    assert not notes
    assert "masked.gather" not in ir_text and "load <16 x float>" in ir_text
    m = L.build(fn)
    a = np.arange(rows * 128, dtype="float32").reshape(rows, 128)
    b = np.zeros(rows * 64, "float32")
    u = np.zeros(rows * 4, "float32")
    m(a, b, u)
    np.testing.assert_array_equal(b, a[:, :64].reshape(-1))
    np.testing.assert_array_equal(u, a.reshape(-1)[:rows * 4])


@pytest.mark.parametrize("lanes,dtype", [(7, "float32"), (8, "float64"), (32, "int16"),
                                         (4, "uint8")])
def test_vector_odd_lane_counts_and_types(lanes, dtype):
    n = lanes * 5
    A, B = buf("A", (n,), dtype), buf("B", (n,), dtype)
    one = E.const(1, dtype)
    f = elementwise("odd", [A], [B], lambda i: [Ld(A, (i,)) * Ld(A, (i,)) + one], n, True, lanes)
    m = L.build(f)
    a = (np.arange(n) % 10).astype(dtype)
    b = np.zeros(n, dtype)
    m(a, b)
    np.testing.assert_array_equal(b, a * a + np.array(1, dtype))


def test_parallel_loops_without_the_worker_pool_create_threads():
    """Where no C compiler builds the pool, parallel loops create threads per launch."""
    import subprocess
    import sys
    code = (
        "import numpy as np, tdsl\n"
        "A = tdsl.placeholder((64, 32), name='A')\n"
        "B = tdsl.compute((64, 32), lambda i, j: A[i, j] * 2.0, name='B')\n"
        "s = tdsl.create_schedule(B); s[B].parallel(B.op.axis[0])\n"
        "f = tdsl.build(s, [A, B]); f.set_num_threads(3)\n"
        "a = np.arange(64 * 32, dtype='float32').reshape(64, 32); b = np.zeros_like(a)\n"
        "f(a, b); assert (b == a * 2).all()\n"
        "src = f.get_source(); assert 'pthread_create' in src and 'tdsl_parallel_for' not in src\n"
        "print('ok')\n")
    env = dict(os.environ, TDSL_NO_THREADPOOL="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_worker_pool_from_several_python_threads():
    """Concurrent launches from Python threads: one uses the pool, the others run inline."""
    import threading
    import tdsl
    A = tdsl.placeholder((256, 64), name="A")
    B = tdsl.compute((256, 64), lambda i, j: A[i, j] + 1.0, name="B")
    s = tdsl.create_schedule(B)
    s[B].parallel(B.op.axis[0])
    f = tdsl.build(s, [A, B])
    a = np.random.default_rng(0).standard_normal((256, 64)).astype("float32")
    errors = []

    def work():
        b = np.zeros_like(a)
        for _ in range(200):
            f(a, b)
            if not np.array_equal(b, a + 1):
                errors.append("mismatch")
                return
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.parametrize("lanes", [16, 8, 4])
def test_vector_exp_builds_for_avx512_without_vl(lanes):
    """Knights Landing has AVX-512F but not AVX-512VL: the exp of 8 or 4 lanes may not use
    the 256/128-bit vscalefps intrinsics (LLVM cannot select them and aborts the process);
    it builds through llvm.ldexp, and the 16-lane one through the 512-bit instruction."""
    import tdsl
    x = tdsl.placeholder((64,), name="x")
    y = tdsl.compute(x.shape, lambda i: tdsl.exp(x[i]), name="y")
    s = tdsl.create_schedule(y)
    _, inner = s[y].split(y.op.axis[0], lanes)
    s[y].vectorize(inner)
    asm = tdsl.build(s, [x, y], target="llvm -mcpu=knl").get_source("asm")
    assert "vscalefps" in asm


# ------------------------------------------------------------------------------------------
# horizontal folds (fold.py)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("dtype,op,n", [
    ("float32", "add", 16), ("float32", "max", 16), ("float32", "min", 8),
    ("float64", "add", 8), ("float64", "max", 4), ("int32", "max", 16), ("int32", "min", 32),
    ("int32", "add", 16), ("float32", "add", 12)])
def test_serial_fold_of_a_short_run(target, dtype, op, n):
    """`acc[r] = acc[r] op x[r, v]` over v in [0, n): a power-of-two run of a float add or
    a max/min is folded as a vector tree, with numpy's values, NaN and infinities
    included; an integer add (the loop's wrapping order kept) and an odd run stay serial
    loops."""
    if not Target(target).runs_here:
        pytest.skip(f"this machine cannot run code for {target}")
    rows = 6
    X, A = buf("X", (rows, n), dtype), buf("A", (rows,), dtype)
    r, v = E.Var("r"), E.Var("v")
    acc = Ld(A, (r,))
    x = Ld(X, (r * n + v,))
    val = {"add": lambda: acc + x, "max": lambda: E.maximum(acc, x),
           "min": lambda: E.minimum(x, acc)}[op]()
    body = For(r, I(0), I(rows), K.SERIAL, For(v, I(0), I(n), K.SERIAL, St(A, val, (r,))))
    m = L.build(PrimFunc("fold", [X, A], body, {"num_user_args": 2}), target)
    rng = np.random.default_rng(n)
    if dtype.startswith("float"):
        x_ = rng.standard_normal((rows, n)).astype(dtype)
        x_[1, 3], x_[2, n - 1], x_[3, :] = np.nan, np.nan, np.inf
        x_[4, 0], x_[5, 1], x_[5, 2] = -np.inf, np.inf, -np.inf
    else:
        x_ = rng.integers(-2**31, 2**31, (rows, n)).astype(dtype)
    a = rng.standard_normal(rows).astype(dtype) if dtype.startswith("float") \
        else rng.integers(-1000, 1000, rows).astype(dtype)
    want = {"add": lambda: a + x_.sum(1, dtype=dtype), "max": lambda: np.maximum(a, x_.max(1)),
            "min": lambda: np.minimum(a, x_.min(1))}[op]()
    with np.errstate(invalid="ignore", over="ignore"):
        m(x_, a)
    if op == "add" and dtype.startswith("float"):
        np.testing.assert_allclose(a, want, rtol=1e-5)
    else:
        np.testing.assert_array_equal(a, want)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_row_reductions_fold_their_partial_results_as_vectors(target):
    """After rfactor, a row sum's and a row max's vector of partial results is folded as a
    tree of vector ops: the serial fold was a chain of one scalar op (and, for max, one NaN
    test) per lane."""
    t = Target(target)
    if not t.runs_here:
        pytest.skip(f"this machine cannot run code for {target}")
    import tdsl
    N = 200
    X = tdsl.placeholder((9, N), name="X")
    k, k2 = tdsl.reduce_axis((0, N), name="k"), tdsl.reduce_axis((0, N), name="k2")
    S_ = tdsl.compute((9,), lambda i: tdsl.sum(X[i, k], axis=k), name="S")
    M_ = tdsl.compute((9,), lambda i: tdsl.max(X[i, k2], axis=k2), name="M")
    f = tdsl.build(tdsl.auto_schedule([S_, M_], target=t), [X, S_, M_], target=t)
    asm = f.get_source("asm")
    scalar = len(re.findall(r"\n\s+v(?:add|max)ss\s|\n\s+vucomiss\s|\n\s+vcmpunordss\s", asm))
    assert scalar < t.vector_lanes("float32"), scalar
    x = np.random.default_rng(0).standard_normal((9, N)).astype("float32")
    x[2, 7], x[3, :] = np.nan, np.inf
    s_, m_ = np.empty(9, "float32"), np.empty(9, "float32")
    f(x, s_, m_)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(s_, x.sum(1), rtol=1e-5)
    np.testing.assert_array_equal(m_, x.max(1))


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_ragged_row_sum_keeps_its_partial_sums_in_registers(target):
    """A row of 197 is 3 whole steps of partial sums and a ragged one. rfactor keeps the
    split's guard a `likely` one, so loop partitioning peels the ragged step off; its
    masked updates of the stack buffer of partial sums become blends of whole vectors,
    which LLVM keeps in registers (no stack access left; masked stores there, reloaded
    whole, stalled store forwarding)."""
    t = Target(target)
    if not t.runs_here:
        pytest.skip(f"this machine cannot run code for {target}")
    import tdsl
    N = 197
    X = tdsl.placeholder((9, N), name="X")
    k = tdsl.reduce_axis((0, N), name="k")
    S_ = tdsl.compute((9,), lambda i: tdsl.sum(X[i, k], axis=k), name="S")
    s = tdsl.auto_schedule([S_], target=t)
    text = str(tdsl.lower(s, [X, S_]))
    assert text.count("if ") == text.count("if likely(") >= 1, text
    f = tdsl.build(s, [X, S_], target=t)
    assert "(%rsp" not in f.get_source("asm")
    x = np.random.default_rng(1).standard_normal((9, N)).astype("float32")
    out = np.empty(9, "float32")
    f(x, out)
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5, atol=1e-5)
