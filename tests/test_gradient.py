"""tdsl.gradient against float64 central differences: every gradient below is built for
llvm and run on numpy arrays, then compared element by element with (F(x + e) - F(x - e))
/ 2e of the forward kernel, F = sum(head * output)."""
import numpy as np
import pytest

import tdsl

F64 = "float64"
RNG = np.random.RandomState(0)


def _ops_of(outs):
    seen, stack = set(), [t.op for t in outs]
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack += [t.op for t in op.input_tensors()]
    return seen


def _run(outs, args, vals, schedule=None):
    """Builds `outs` (passing only the arguments they read) and runs them on `vals`."""
    ops = _ops_of(outs)
    keep = [k for k, a in enumerate(args) if a.op in ops]
    args, vals = [args[k] for k in keep], [vals[k] for k in keep]
    s = schedule(outs) if schedule else tdsl.create_schedule([o.op for o in outs])
    f = tdsl.build(s, args + list(outs))
    shapes = [tuple(int(d) for d in o.shape) for o in outs]
    res = [np.zeros(sh, o.dtype) for sh, o in zip(shapes, outs)]
    f(*vals, *res)
    return res


def numeric_grads(Y, inputs, vals, h, eps=1e-6):
    fwd = tdsl.build(tdsl.create_schedule(Y.op), list(inputs) + [Y])
    y = np.zeros(h.shape, Y.dtype)

    def F(vs):
        fwd(*vs, y)
        return float((y * h).sum())
    out = []
    for k, x in enumerate(vals):
        g = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            vs = list(vals)
            vs[k] = x.copy()
            vs[k][idx] += eps
            fp = F(vs)
            vs[k][idx] -= 2 * eps
            g[idx] = (fp - F(vs)) / (2 * eps)
        out.append(g)
    return out


def check(Y, inputs, vals, tol=1e-6):
    H = tdsl.placeholder(Y.shape, Y.dtype, "H")
    h = RNG.randn(*[int(d) for d in Y.shape])
    grads = tdsl.gradient(Y, list(inputs), H)
    got = _run(grads, list(inputs) + [H], list(vals) + [h])
    want = numeric_grads(Y, inputs, vals, h)
    for t, g, w in zip(inputs, got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, np.abs(w).max()),
                                   err_msg=f"gradient of {t.name}")
    return grads


# ---------------------------------------------------------------------------------------
# elementwise math

UNARY = {   # name: (function, input sampler)
    "exp": (tdsl.exp, None), "exp2": (tdsl.exp2, None), "exp10": (tdsl.exp10, None),
    "expm1": (tdsl.expm1, None), "log": (tdsl.log, "pos"), "log2": (tdsl.log2, "pos"),
    "log10": (tdsl.log10, "pos"), "log1p": (tdsl.log1p, "pos"), "sqrt": (tdsl.sqrt, "pos"),
    "rsqrt": (tdsl.rsqrt, "pos"), "tanh": (tdsl.tanh, None), "sigmoid": (tdsl.sigmoid, None),
    "erf": (tdsl.erf, None), "sin": (tdsl.sin, None), "cos": (tdsl.cos, None),
    "tan": (tdsl.tan, "small"), "asin": (tdsl.asin, "small"), "acos": (tdsl.acos, "small"),
    "atan": (tdsl.atan, None), "sinh": (tdsl.sinh, None), "cosh": (tdsl.cosh, None),
    "asinh": (tdsl.asinh, None), "acosh": (tdsl.acosh, "big"), "atanh": (tdsl.atanh, "small"),
    "abs": (tdsl.abs, None), "floor": (tdsl.floor, None), "round": (tdsl.round, None),
}


def _sample(kind, shape):
    x = RNG.randn(*shape)
    if kind == "pos":
        return np.abs(x) + 0.5
    if kind == "small":
        return np.clip(x, -1.5, 1.5) * 0.5
    if kind == "big":
        return np.abs(x) + 1.5
    return np.where(np.abs(x) < 1e-3, 0.5, x)       # away from the kinks of abs


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_intrinsics(name):
    fn, kind = UNARY[name]
    A = tdsl.placeholder((3, 4), F64, "A")
    Y = tdsl.compute((3, 4), lambda i, j: fn(A[i, j]) * A[i, j], name="Y")
    a = _sample(kind, (3, 4))
    if name in ("floor", "round"):
        a = np.floor(a * 4) / 4 + 0.125      # away from the steps
    check(Y, [A], [a], tol=1e-5)


@pytest.mark.parametrize("name", ["power", "atan2", "hypot", "fmod", "copysign", "max", "min",
                                  "div", "select"])
def test_binary_math(name):
    A = tdsl.placeholder((3, 4), F64, "A")
    B = tdsl.placeholder((3, 4), F64, "B")
    fn = {"power": tdsl.power, "atan2": tdsl.atan2, "hypot": tdsl.hypot, "fmod": tdsl.fmod,
          "copysign": tdsl.copysign, "max": tdsl.max, "min": tdsl.min,
          "div": lambda x, y: x / y,
          "select": lambda x, y: tdsl.if_then_else(x > y, x * y, x - y * y)}[name]
    Y = tdsl.compute((3, 4), lambda i, j: fn(A[i, j], B[i, j]), name="Y")
    a, b = np.abs(RNG.randn(3, 4)) + 0.5, np.abs(RNG.randn(3, 4)) + 0.5
    if name in ("copysign", "atan2", "max", "min", "select"):
        a, b = a * np.sign(RNG.randn(3, 4)), b * np.sign(RNG.randn(3, 4))
    check(Y, [A, B], [a, b], tol=1e-5)


def test_casts_integers_and_shared_subexpressions():
    A = tdsl.placeholder((5,), F64, "A")
    I = tdsl.placeholder((5,), "int32", "I")

    def body(i):
        t = A[i] * A[i]                                   # used twice below
        narrow = tdsl.cast(t, "float32")                  # float casts pass the gradient
        k = tdsl.cast(A[i] * 10.0, "int32")               # integer: no gradient
        return tdsl.cast(narrow, F64) * t + tdsl.cast(k + I[i], F64)
    Y = tdsl.compute((5,), body, name="Y")
    H = tdsl.placeholder((5,), F64, "H")
    g = tdsl.gradient(Y, A, H)             # one tensor in, one out
    a, h = RNG.rand(5) + 0.05, RNG.randn(5)
    (got,) = _run([g], [A, H], [a, h])
    t = (a * a).astype("float32").astype(F64)
    np.testing.assert_allclose(got, h * (2 * a * (a * a) + 2 * a * t), rtol=1e-6)


def test_broadcasting_and_several_consumers():
    A = tdsl.placeholder((3, 4), F64, "A")
    b = tdsl.placeholder((4,), F64, "b")
    Z = tdsl.compute((3, 4), lambda i, j: A[i, j] + b[j], name="Z")
    Y = tdsl.compute((3, 4), lambda i, j: Z[i, j] * Z[i, j] + tdsl.tanh(Z[i, j]) * b[j],
                     name="Y")
    check(Y, [A, b], [RNG.randn(3, 4), RNG.randn(4)])


# ---------------------------------------------------------------------------------------
# contractions, convolutions, pooling, softmax


def test_matmul():
    A = tdsl.placeholder((4, 6), F64, "A")
    B = tdsl.placeholder((6, 5), F64, "B")
    k = tdsl.reduce_axis((0, 6), "k")
    Y = tdsl.compute((4, 5), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="Y")
    dA, dB = check(Y, [A, B], [RNG.randn(4, 6), RNG.randn(6, 5)])
    # the adjoints are matmuls themselves: one reduction each, over the other extent
    assert [iv.dom.extent for iv in dA.op.reduce_axis] == [5]
    assert [iv.dom.extent for iv in dB.op.reduce_axis] == [4]



def test_matmul_adjoints_auto_schedule_as_register_tiles():
    """dA = H B^T runs along the reduction in both operands; with a long reduction the
    auto-scheduler copies B's panels transposed and tiles it like the forward GEMM."""
    n = 256
    A = tdsl.placeholder((n, n), "float32", "A")
    B = tdsl.placeholder((n, n), "float32", "B")
    k = tdsl.reduce_axis((0, n), "k")
    Y = tdsl.compute((n, n), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="Y")
    H = tdsl.placeholder((n, n), "float32", "H")
    dA, dB = tdsl.gradient(Y, [A, B], H)
    a, b, h = (RNG.randn(n, n).astype("float32") for _ in range(3))
    for g, args, vals, want in ((dA, [H, B], [h, b], h @ b.T), (dB, [A, H], [a, h], a.T @ h)):
        s = tdsl.auto_schedule(g, target="llvm")
        assert "register-tile" in s.explain().rules(g.op.name), s.explain()
        out = np.zeros((n, n), "float32")
        tdsl.build(s, args + [g], target="llvm")(*vals, out)
        np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3)

def _conv2d(X, W, stride, pad):
    N, C, H, Wd = X.shape
    K, _, KH, KW = W.shape
    Xp = tdsl.compute((N, C, H + 2 * pad, Wd + 2 * pad), lambda n, c, h, w: tdsl.if_then_else(
        tdsl.all(h >= pad, h < H + pad, w >= pad, w < Wd + pad),
        X[n, c, h - pad, w - pad], tdsl.const(0, X.dtype)), name="Xp")
    OH, OW = (H + 2 * pad - KH) // stride + 1, (Wd + 2 * pad - KW) // stride + 1
    rc = tdsl.reduce_axis((0, C), "rc")
    rh = tdsl.reduce_axis((0, KH), "rh")
    rw = tdsl.reduce_axis((0, KW), "rw")
    return tdsl.compute((N, K, OH, OW), lambda n, k, h, w: tdsl.sum(
        Xp[n, rc, h * stride + rh, w * stride + rw] * W[k, rc, rh, rw], axis=[rc, rh, rw]),
        name="conv")


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 1), (2, 0), (3, 2)])
def test_conv2d_nchw(stride, pad):
    X = tdsl.placeholder((2, 3, 7, 8), F64, "X")
    W = tdsl.placeholder((4, 3, 3, 3), F64, "W")
    Y = _conv2d(X, W, stride, pad)
    check(Y, [X, W], [RNG.randn(2, 3, 7, 8), RNG.randn(4, 3, 3, 3)])


def test_max_pooling_routes_to_one_element():
    X = tdsl.placeholder((1, 2, 7, 7), F64, "X")
    ph, pw = tdsl.reduce_axis((0, 3), "ph"), tdsl.reduce_axis((0, 3), "pw")
    Y = tdsl.compute((1, 2, 3, 3), lambda n, c, h, w: tdsl.max(
        X[n, c, h * 2 + ph, w * 2 + pw], axis=[ph, pw]), name="pool")
    check(Y, [X], [RNG.randn(1, 2, 7, 7)])
    # ties: the whole adjoint goes to the first maximal element of each window
    H = tdsl.placeholder(Y.shape, F64, "H")
    (g,) = _run([tdsl.gradient(Y, X, H)], [X, H], [np.zeros((1, 2, 7, 7)),
                                                    np.ones((1, 2, 3, 3))])
    want = np.zeros((1, 2, 7, 7))
    want[:, :, 0:7:2, 0:7:2][:, :, :3, :3] = 1
    np.testing.assert_array_equal(g, want)


def test_softmax():
    A = tdsl.placeholder((3, 5), F64, "A")
    k, k2 = tdsl.reduce_axis((0, 5), "k"), tdsl.reduce_axis((0, 5), "k2")
    M = tdsl.compute((3,), lambda i: tdsl.max(A[i, k], axis=k), name="M")
    E = tdsl.compute((3, 5), lambda i, j: tdsl.exp(A[i, j] - M[i]), name="E")
    S = tdsl.compute((3,), lambda i: tdsl.sum(E[i, k2], axis=k2), name="S")
    Y = tdsl.compute((3, 5), lambda i, j: E[i, j] / S[i], name="softmax")
    check(Y, [A], [RNG.randn(3, 5)])


# ---------------------------------------------------------------------------------------
# reductions


@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
def test_masked_reductions(kind):
    A = tdsl.placeholder((4, 6), F64, "A")
    k = tdsl.reduce_axis((0, 6), "k")
    red = {"sum": tdsl.sum, "max": tdsl.max, "min": tdsl.min, "prod": tdsl.prod}[kind]
    Y = tdsl.compute((4,), lambda i: red(A[i, k] * 1.5, axis=k, where=k <= i + 1), name="Y")
    a = RNG.randn(4, 6)
    check(Y, [A], [a])


def test_product_with_zero_elements():
    A = tdsl.placeholder((3, 4), F64, "A")
    k = tdsl.reduce_axis((0, 4), "k")
    Y = tdsl.compute((3,), lambda i: tdsl.prod(A[i, k], axis=k), name="Y")
    a = RNG.randn(3, 4)
    a[1, 2] = 0.0                       # one zero: only it gets a gradient
    a[2, 0] = a[2, 3] = 0.0             # two zeros: nothing does
    check(Y, [A], [a])


def test_argmax_value_of_a_tuple_reduction():
    def combine(x, y):
        take = y[1] > x[1]
        return tdsl.select(take, y[0], x[0]), tdsl.select(take, y[1], x[1])
    argmax = tdsl.comm_reducer(combine, lambda t0, t1: (tdsl.const(-1, t0),
                                                         tdsl.min_value(t1)), "argmax")
    A = tdsl.placeholder((3, 5), F64, "A")
    k = tdsl.reduce_axis((0, 5), "k")
    T0, T1 = tdsl.compute((3,), lambda i: argmax((k.var, A[i, k]), axis=k), name="T")
    Y = tdsl.compute((3,), lambda i: T1[i] * T1[i] + tdsl.cast(T0[i], F64), name="Y")
    check(Y, [A], [RNG.randn(3, 5)])


def test_non_differentiable_tuple_reducer_is_named():
    def combine(x, y):
        return x[0] + y[0], x[1] * y[0] + y[1]
    odd = tdsl.comm_reducer(combine, lambda a, b: (tdsl.const(0, a), tdsl.const(0, b)), "odd")
    A = tdsl.placeholder((3, 5), F64, "A")
    k = tdsl.reduce_axis((0, 5), "k")
    T0, T1 = tdsl.compute((3,), lambda i: odd((A[i, k], A[i, k]), axis=k), name="T")
    with pytest.raises(tdsl.TdslError, match="'odd'"):
        tdsl.gradient(T1, [A], tdsl.placeholder((3,), F64, "H"))


# ---------------------------------------------------------------------------------------
# index maps


def test_many_to_one_index_maps():
    V = tdsl.placeholder((6,), F64, "V")
    Y = tdsl.compute((12,), lambda i: V[i // 2] * V[i % 6] + V[(i + 1) // 3], name="Y")
    check(Y, [V], [RNG.randn(6)])


def test_reshape_and_transpose():
    A = tdsl.placeholder((4, 6), F64, "A")
    R = tdsl.compute((3, 8), lambda i, j: A[(i * 8 + j) // 6, (i * 8 + j) % 6], name="R")
    Y = tdsl.compute((8, 3), lambda i, j: R[j, i] * R[j, i], name="Y")
    check(Y, [A], [RNG.randn(4, 6)])


def test_diagonal_and_constant_index():
    A = tdsl.placeholder((4, 4), F64, "A")
    Y = tdsl.compute((4,), lambda i: A[i, i] * A[0, 3 - i], name="Y")
    check(Y, [A], [RNG.randn(4, 4)])


def test_stencils():
    V = tdsl.placeholder((9,), F64, "V")
    blur = tdsl.compute((7,), lambda i: (V[i] + V[i + 1] * 2.0 + V[i + 2]) / 4.0, name="blur")
    check(blur, [V], [RNG.randn(9)])
    # Halide's clamped boundary: the read splits into the affine cases of its max/min
    clamped = tdsl.compute((9,), lambda i: (V[tdsl.max(i - 1, 0)] + V[i]
                                            + V[tdsl.min(i + 1, 8)]) / 3.0, name="clamped")
    (g,) = check(clamped, [V], [RNG.randn(9)])
    # the clamped cases gather one point each, not a loop over the whole axis
    assert all(int(iv.dom.extent) == 1 for op in _ops_of([g])
               for iv in getattr(op, "reduce_axis", []))
    # a 2-D blur in two stages
    X = tdsl.placeholder((6, 7), F64, "X")
    bx = tdsl.compute((6, 5), lambda y, x: X[y, x] + X[y, x + 1] + X[y, x + 2], name="bx")
    by = tdsl.compute((4, 5), lambda y, x: bx[y, x] + bx[y + 1, x] + bx[y + 2, x], name="by")
    check(by, [X], [RNG.randn(6, 7)])


def test_symbolic_sizes_build_once_run_at_two_sizes():
    n, m = tdsl.var("n"), tdsl.var("m")
    A = tdsl.placeholder((n, 4), F64, "A")
    B = tdsl.placeholder((4, m), F64, "B")
    k = tdsl.reduce_axis((0, 4), "k")
    Y = tdsl.compute((n, m), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="Y")
    Z = tdsl.compute((n, m), lambda i, j: tdsl.tanh(Y[i, j]), name="Z")
    H = tdsl.placeholder((n, m), F64, "H")
    dA, dB = tdsl.gradient(Z, [A, B], H)
    f = tdsl.build(tdsl.create_schedule([dA.op, dB.op]), [A, B, H, dA, dB])
    for nn, mm in ((3, 5), (7, 2)):
        a, b, h = RNG.randn(nn, 4), RNG.randn(4, mm), RNG.randn(nn, mm)
        ga, gb = np.zeros((nn, 4)), np.zeros((4, mm))
        f(a, b, h, ga, gb)
        t = h * (1 - np.tanh(a @ b) ** 2)
        np.testing.assert_allclose(ga, t @ b.T, rtol=1e-10)
        np.testing.assert_allclose(gb, a.T @ t, rtol=1e-10)


# ---------------------------------------------------------------------------------------
# heads, several outputs, unused inputs, errors


def test_identity_head_is_the_jacobian():
    A = tdsl.placeholder((3, 4), F64, "A")
    B = tdsl.placeholder((4, 2), F64, "B")
    k = tdsl.reduce_axis((0, 4), "k")
    Y = tdsl.compute((3, 2), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="Y")
    J = tdsl.gradient(Y, A)
    assert tuple(int(d) for d in J.shape) == (3, 2, 3, 4)
    a, b = RNG.randn(3, 4), RNG.randn(4, 2)
    (got,) = _run([J], [A, B], [a, b])
    want = np.einsum("ip,kj->ijpk", np.eye(3), b)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_head_with_a_prefix_and_several_outputs():
    A = tdsl.placeholder((4,), F64, "A")
    Y1 = tdsl.compute((4,), lambda i: A[i] * A[i], name="Y1")
    Y2 = tdsl.compute((3,), lambda i: A[i] * A[i + 1], name="Y2")
    H1 = tdsl.placeholder((2, 4), F64, "H1")
    H2 = tdsl.placeholder((2, 3), F64, "H2")
    (g,) = tdsl.gradient([Y1, Y2], [A], [H1, H2])
    assert tuple(int(d) for d in g.shape) == (2, 4)
    a, h1, h2 = RNG.randn(4), RNG.randn(2, 4), RNG.randn(2, 3)
    (got,) = _run([g], [A, H1, H2], [a, h1, h2])
    want = 2 * a * h1
    want[:, :3] += h2 * a[1:]
    want[:, 1:] += h2 * a[:3]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_unused_input_gets_zero():
    A = tdsl.placeholder((3,), F64, "A")
    B = tdsl.placeholder((5,), F64, "B")
    Y = tdsl.compute((3,), lambda i: tdsl.exp(A[i]), name="Y")
    H = tdsl.placeholder((3,), F64, "H")
    gA, gB = tdsl.gradient(Y, [A, B], H)
    (got,) = _run([gB], [B], [RNG.randn(5)])
    assert got.shape == (5,) and not got.any()


def test_wrong_head_shape_is_named():
    A = tdsl.placeholder((3, 4), F64, "A")
    Y = tdsl.compute((3, 4), lambda i, j: A[i, j] * 2.0, name="Y")
    with pytest.raises(tdsl.TdslError, match=r"head 'badhead' has shape \(4, 3\).*'Y' \(3, 4\)"):
        tdsl.gradient(Y, [A], tdsl.placeholder((4, 3), F64, "badhead"))


def test_non_differentiable_inputs_raise():
    I = tdsl.placeholder((4,), "int32", "I")
    A = tdsl.placeholder((8,), F64, "A")
    Y = tdsl.compute((4,), lambda i: A[I[i]] + tdsl.cast(I[i], F64), name="Y")
    H = tdsl.placeholder((4,), F64, "H")
    with pytest.raises(tdsl.TdslError, match="input 'I' has type int32"):
        tdsl.gradient(Y, [I], H)
    with pytest.raises(tdsl.TdslError, match=r"read A\[I\[i\]\].*not affine"):
        tdsl.gradient(Y, [A], H)
    Q = tdsl.compute((4,), lambda i: A[i * i], name="Q")
    with pytest.raises(tdsl.TdslError, match=r"A\[i \* i\]"):
        tdsl.gradient(Q, [A], H)
    E = tdsl.compute((4,), lambda i: tdsl.call_pure_extern(F64, "cbrt", A[i]), name="E")
    with pytest.raises(tdsl.TdslError, match="'cbrt' has no derivative"):
        tdsl.gradient(E, [A], H)


def _stages(outs):
    return [op for op in _ops_of(outs) if isinstance(op, tdsl.te.ComputeOp)]


def _gflops(f, args, n, reps=10):
    import time
    f(*args)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f(*args)
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best / 1e9


def test_matmul_512_adjoints_are_matmuls_and_auto_schedule():
    N = 512
    A = tdsl.placeholder((N, N), "float32", "A")
    B = tdsl.placeholder((N, N), "float32", "B")
    k = tdsl.reduce_axis((0, N), "k")
    Y = tdsl.compute((N, N), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="Y")
    H = tdsl.placeholder((N, N), "float32", "H")
    dA, dB = tdsl.gradient(Y, [A, B], H)
    # no Jacobian: every gradient stage is (N, N) with one reduction of extent N
    for op in _stages([dA, dB]):
        assert tuple(int(d) for d in op.output(0).shape) == (N, N), op
        assert [int(iv.dom.extent) for iv in op.reduce_axis] == [N], op
    a, b, h = (RNG.rand(N, N).astype("float32") for _ in range(3))
    y = np.zeros((N, N), "float32")
    fwd = tdsl.build(tdsl.auto_schedule(Y), [A, B, Y])
    g0 = _gflops(fwd, [a, b, y], N)
    rates = {}
    for T, args, vals, want in ((dA, [H, B], [h, b], h @ b.T), (dB, [A, H], [a, h], a.T @ h)):
        s = tdsl.auto_schedule(T)
        f = tdsl.build(s, args + [T])
        out = np.zeros((N, N), "float32")
        f(*vals, out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)
        rates[T.name] = _gflops(f, vals + [out], N)
        print(s.explain())
    print(f"forward GEMM {g0:.1f} GFLOP/s; " + "; ".join(
        f"{n} {g:.1f} GFLOP/s ({g / g0:.2f}x)" for n, g in rates.items()))


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_conv_gradients_auto_schedule(target):
    X = tdsl.placeholder((1, 8, 13, 13), "float32", "X")
    W = tdsl.placeholder((16, 8, 3, 3), "float32", "W")
    Y = _conv2d(X, W, 2, 1)
    H = tdsl.placeholder(Y.shape, "float32", "H")
    dX, dW = tdsl.gradient(Y, [X, W], H)
    x, w = RNG.rand(1, 8, 13, 13).astype("f"), RNG.rand(16, 8, 3, 3).astype("f")
    h = RNG.rand(*[int(d) for d in Y.shape]).astype("f")
    ref = _run([dX, dW], [X, W, H], [x, w, h])            # default schedule, checked above
    for T, args, vals, want in ((dX, [W, H], [w, h], ref[0]), (dW, [X, H], [x, h], ref[1])):
        f = tdsl.build(tdsl.auto_schedule(T, target=target), args + [T], target=target)
        out = np.zeros(want.shape, "float32")
        f(*vals, out)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_conv_gradients_auto_schedule_for_cuda_build():
    """The GPU rules schedule the gradient stages; the CUDA source builds without a GPU."""
    X = tdsl.placeholder((1, 8, 13, 13), "float32", "X")
    W = tdsl.placeholder((16, 8, 3, 3), "float32", "W")
    Y = _conv2d(X, W, 2, 1)
    H = tdsl.placeholder(Y.shape, "float32", "H")
    dX, dW = tdsl.gradient(Y, [X, W], H)
    for T, args in ((dX, [W, H]), (dW, [X, H])):
        g = tdsl.build(tdsl.auto_schedule(T, target="cuda"), args + [T], target="cuda")
        assert "__global__" in g.get_source()


# ---------------------------------------------------------------------------------------
# reads at the borders of padded and clamped inputs: every target, every access checked
# (an adjoint must never read a helper stage such as max's argbest outside its shape)


def check_on_targets(Y, inputs, vals, tol=1e-6):
    H = tdsl.placeholder(Y.shape, Y.dtype, "H")
    h = RNG.randn(*[int(d) for d in Y.shape])
    grads = tdsl.gradient(Y, list(inputs), H)
    want = numeric_grads(Y, inputs, vals, h)
    ops = _ops_of(grads)
    used = [(a, v) for a, v in zip(list(inputs) + [H], list(vals) + [h]) if a.op in ops]
    for target in ("llvm", "c"):
        s = tdsl.create_schedule([g.op for g in grads])
        f = tdsl.build(s, [a for a, _ in used] + list(grads), target=target,
                       bounds_check=True)
        got = [np.zeros(w.shape, F64) for w in want]
        f(*[v for _, v in used], *got)
        for t, g, w in zip(inputs, got, want):
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, np.abs(w).max()),
                                       err_msg=f"gradient of {t.name} on {target}")


def _padded_max_pool(X, k, stride, pads):
    """topi's max pool: the window reads X under a condition, -inf in the padding;
    `pads` = (top, left, bottom, right) as ONNX orders them."""
    N, C, H, W = (int(d) for d in X.shape)
    top, left, bottom, right = pads
    OH, OW = (H + top + bottom - k) // stride + 1, (W + left + right - k) // stride + 1
    r0, r1 = tdsl.reduce_axis((0, k), "r0"), tdsl.reduce_axis((0, k), "r1")

    def f(n, c, i, j):
        h, w = i * stride - top + r0, j * stride - left + r1
        inside = tdsl.all(h >= 0, h < H, w >= 0, w < W)
        return tdsl.max(tdsl.if_then_else(inside, X[n, c, h, w],
                                           tdsl.const(float("-inf"), X.dtype)), axis=[r0, r1])
    return tdsl.compute((N, C, OH, OW), f, name="max_pool_0")


@pytest.mark.parametrize("k,stride,pads", [
    (2, 1, (1, 0, 0, 1)), (2, 2, (1, 0, 0, 1)), (3, 2, (0, 2, 1, 0)), (3, 1, (2, 1, 0, 2))])
def test_padded_max_pool_on_every_target(k, stride, pads):
    X = tdsl.placeholder((2, 2, 5, 6), F64, "X")
    Y = _padded_max_pool(X, k, stride, pads)
    check_on_targets(Y, [X], [RNG.randn(2, 2, 5, 6)])


@pytest.mark.parametrize("stride,pads", [(1, (1, 0, 0, 1)), (2, (0, 2, 1, 0))])
def test_conv2d_asymmetric_pads_on_every_target(stride, pads):
    """The padding inline in the conv's read, as topi writes it (no padded stage)."""
    X = tdsl.placeholder((1, 2, 5, 6), F64, "X")
    W = tdsl.placeholder((3, 2, 3, 2), F64, "W")
    top, left, bottom, right = pads
    OH, OW = (5 + top + bottom - 3) // stride + 1, (6 + left + right - 2) // stride + 1
    rc, rh, rw = (tdsl.reduce_axis((0, e), n) for e, n in ((2, "rc"), (3, "rh"), (2, "rw")))

    def f(n, k, i, j):
        h, w = i * stride - top + rh, j * stride - left + rw
        x = tdsl.if_then_else(tdsl.all(h >= 0, h < 5, w >= 0, w < 6), X[n, rc, h, w],
                              tdsl.const(0, F64))
        return tdsl.sum(x * W[k, rc, rh, rw], axis=[rc, rh, rw])
    Y = tdsl.compute((1, 3, OH, OW), f, name="conv")
    check_on_targets(Y, [X, W], [RNG.randn(1, 2, 5, 6), RNG.randn(3, 2, 3, 2)])


def test_clamped_stencils_on_every_target():
    X = tdsl.placeholder((5, 6), F64, "X")

    def f(y, x):
        up, left = tdsl.max(y - 1, 0), tdsl.max(x - 2, 0)
        return X[up, tdsl.min(x + 1, 5)] * 2.0 + X[y, left] - X[tdsl.min(y + 2, 4), x]
    check_on_targets(tdsl.compute((5, 6), f, name="clamped2d"), [X], [RNG.randn(5, 6)])
    # a max over a clamped window: the argbest read sits beside the clamped cases
    r = tdsl.reduce_axis((0, 3), "r")
    Y = tdsl.compute((5, 6), lambda y, x: tdsl.max(X[y, tdsl.min(x + r, 5)], axis=r),
                     name="clamped_max")
    check_on_targets(Y, [X], [RNG.randn(5, 6)])
