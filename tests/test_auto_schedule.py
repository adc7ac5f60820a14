"""tdsl.auto_schedule on randomly generated compute definitions (elementwise chains,
broadcasts, reductions over random axes, matmul/batch-matmul/conv-like contractions,
stencils, row groups such as softmax, long reductions with few outputs; symbolic and ragged
sizes), built for "llvm" and "c" (and the GPU rules on "c"/"opencl") and compared with
numpy. Several definitions share one schedule (independent outputs), so hundreds are
checked with a few dozen builds. Nothing here assumes the host's vector width: sizes the
rules derive are checked against the target description."""
import math
import random

import numpy as np
import pytest

import tdsl
from tdsl.target import Target

RAGGED = [1, 3, 5, 7, 13, 16, 17, 24, 32, 33, 48]


class Def:
    """One random definition: its outputs, its placeholders, inputs and numpy's result."""

    def __init__(self, kind, outs, phs, inputs, refs, red=1):
        self.kind, self.outs, self.phs, self.inputs, self.refs = kind, outs, phs, inputs, refs
        self.tol = 1e-4 * max(1.0, math.sqrt(red)) * 10


def _data(shape):
    return np.random.uniform(-1, 1, size=shape).astype(np.float32)


def _dim(rnd, tag, name, choices=RAGGED, sym_p=0.2):
    """(expr for the definition, value): a constant, or a symbolic var bound at call time."""
    n = rnd.choice(choices)
    if rnd.random() < sym_p:
        return tdsl.var(f"{name}{tag}"), n
    return n, n


# ------------------------------------------------------------------------- generators

def g_elementwise(rnd, tag):
    nd = rnd.randint(1, 3)
    dims = [_dim(rnd, tag, f"n{i}_") for i in range(nd)]
    shape = [d for d, _ in dims]
    vals = [v for _, v in dims]
    A = tdsl.placeholder(shape, name=f"A{tag}")
    bd = rnd.randrange(nd)                      # a vector broadcast along one axis
    b = tdsl.placeholder((shape[bd],), name=f"b{tag}")
    a, bv = _data(vals), _data((vals[bd],))
    bshape = [1] * nd
    bshape[bd] = vals[bd]
    cur, ref = A, a.astype(np.float64)
    for step in range(rnd.randint(1, 3)):
        op = "bias" if step == 0 else rnd.choice(["bias", "relu", "exp", "square", "select", "scale"])
        prev = cur
        if op == "bias":
            cur = tdsl.compute(shape, lambda *i, p=prev: p[i] + b[i[bd]], name=f"bias{tag}_{step}")
            ref = ref + bv.reshape(bshape)
        elif op == "relu":
            cur = tdsl.compute(shape, lambda *i, p=prev: tdsl.max(p[i], tdsl.const(0, "float32")),
                               name=f"relu{tag}_{step}")
            ref = np.maximum(ref, 0)
        elif op == "exp":
            cur = tdsl.compute(shape, lambda *i, p=prev: tdsl.exp(p[i] * 0.5), name=f"exp{tag}_{step}")
            ref = np.exp(ref * 0.5)
        elif op == "square":                    # reads its producer twice
            cur = tdsl.compute(shape, lambda *i, p=prev: p[i] * p[i] - p[i], name=f"sq{tag}_{step}")
            ref = ref * ref - ref
        elif op == "select":
            cur = tdsl.compute(shape, lambda *i, p=prev: tdsl.if_then_else(p[i] > 0, p[i], p[i] * 0.25),
                               name=f"sel{tag}_{step}")
            ref = np.where(ref > 0, ref, ref * 0.25)
        else:
            cur = tdsl.compute(shape, lambda *i, p=prev: p[i] * 1.5 + 0.25, name=f"scale{tag}_{step}")
            ref = ref * 1.5 + 0.25
    if nd == 2 and vals[0] == vals[1] and not any(isinstance(d, tdsl.ir.expr.Var) for d in shape) \
            and rnd.random() < 0.5:
        prev = cur                              # a transposed read
        cur = tdsl.compute(shape, lambda i, j: prev[j, i] + prev[i, j], name=f"tr{tag}")
        ref = ref.T + ref
    return Def("elementwise", [cur], [A, b], [a, bv], [ref])


def g_reduction(rnd, tag):
    nd = rnd.randint(1, 4)
    dims = [_dim(rnd, tag, f"r{i}_", sym_p=0.15) for i in range(nd)]
    shape, vals = [d for d, _ in dims], [v for _, v in dims]
    X = tdsl.placeholder(shape, name=f"X{tag}")
    x = _data(vals)
    red = sorted(rnd.sample(range(nd), rnd.randint(1, nd)))
    keep = [i for i in range(nd) if i not in red]
    src, xr = X, x.astype(np.float64)
    if rnd.random() < 0.4:                      # an elementwise producer
        src = tdsl.compute(shape, lambda *i: X[i] * 2.0 + 1.0, name=f"pre{tag}")
        xr = xr * 2.0 + 1.0
    raxes = [tdsl.reduce_axis((0, shape[i]), name=f"k{i}_{tag}") for i in red]
    op = rnd.choice(["sum", "sum", "max"])
    fn = tdsl.sum if op == "sum" else tdsl.max

    def body(*o):
        idx, ko, oo = [], iter(raxes), iter(o)
        for i in range(nd):
            idx.append(next(ko) if i in red else next(oo))
        return fn(src[tuple(idx)], axis=raxes)
    oshape = [shape[i] for i in keep] or [1]
    if keep:
        R = tdsl.compute(oshape, body, name=f"red{tag}")
    else:
        R = tdsl.compute((1,), lambda z: fn(src[tuple(raxes)], axis=raxes), name=f"red{tag}")
    ref = xr.sum(axis=tuple(red)) if op == "sum" else xr.max(axis=tuple(red))
    ref = np.asarray(ref).reshape([vals[i] for i in keep] or [1])
    out = R
    if rnd.random() < 0.4:                      # an epilogue
        out = tdsl.compute(oshape, lambda *i: tdsl.max(R[i] * 0.5, tdsl.const(-1.0, "float32")),
                           name=f"epi{tag}")
        ref = np.maximum(ref * 0.5, -1.0)
    n_red = int(np.prod([vals[i] for i in red]))
    return Def("reduction", [out], [X], [x], [ref], red=n_red)


def g_long_reduction(rnd, tag):
    """Few outputs, many steps: the parallel-rfactor rule."""
    rows = rnd.choice([1, 2, 3])
    n, nv = _dim(rnd, tag, "L", choices=[16384, 20000, 33333], sym_p=0.3)
    X = tdsl.placeholder((rows, n), name=f"X{tag}")
    k = tdsl.reduce_axis((0, n), name=f"k{tag}")
    R = tdsl.compute((rows,), lambda i: tdsl.sum(X[i, k], axis=k), name=f"total{tag}")
    x = _data((rows, nv))
    return Def("long-reduction", [R], [X], [x], [x.astype(np.float64).sum(axis=1)], red=nv)


def g_contraction(rnd, tag):
    kind = rnd.choice(["mm", "mm", "mm_t", "bmm"])
    M, mv = _dim(rnd, tag, "M", choices=RAGGED + [64], sym_p=0.2)
    N = rnd.choice(RAGGED + [64, 96])
    K = rnd.choice(RAGGED + [64])
    k = tdsl.reduce_axis((0, K), name=f"k{tag}")
    if kind == "bmm":
        Bt = rnd.choice([1, 2, 3])
        A = tdsl.placeholder((Bt, M, K), name=f"A{tag}")
        B = tdsl.placeholder((Bt, K, N), name=f"B{tag}")
        a, b = _data((Bt, mv, K)), _data((Bt, K, N))
        C = tdsl.compute((Bt, M, N), lambda z, i, j: tdsl.sum(A[z, i, k] * B[z, k, j], axis=k), name=f"C{tag}")
        ref = a.astype(np.float64) @ b
        oshape = (Bt, M, N)
    else:
        A = tdsl.placeholder((M, K), name=f"A{tag}")
        a = _data((mv, K))
        src = A
        if rnd.random() < 0.3:                  # an elementwise producer on the broadcast operand
            src = tdsl.compute((M, K), lambda i, j: A[i, j] * 0.5, name=f"half{tag}")
            a_eff = a.astype(np.float64) * 0.5
        else:
            a_eff = a.astype(np.float64)
        if kind == "mm":
            B = tdsl.placeholder((K, N), name=f"B{tag}")
            b = _data((K, N))
            C = tdsl.compute((M, N), lambda i, j: tdsl.sum(src[i, k] * B[k, j], axis=k), name=f"C{tag}")
            ref = a_eff @ b
        else:
            B = tdsl.placeholder((N, K), name=f"B{tag}")
            b = _data((N, K))
            C = tdsl.compute((M, N), lambda i, j: tdsl.sum(src[i, k] * B[j, k], axis=k), name=f"C{tag}")
            ref = a_eff @ b.T
        oshape = (M, N)
    phs, inputs = [A, B], [a, b]
    out = C
    if rnd.random() < 0.5:                      # bias + relu epilogue
        bias = tdsl.placeholder((N,), name=f"bias{tag}")
        bv = _data((N,))
        out = tdsl.compute(oshape, lambda *i: tdsl.max(C[i] + bias[i[-1]], tdsl.const(0, "float32")),
                           name=f"epi{tag}")
        ref = np.maximum(ref + bv, 0)
        phs.append(bias)
        inputs.append(bv)
    return Def(f"contraction-{kind}", [out], phs, inputs, [ref], red=K)


def g_conv(rnd, tag):
    depthwise = rnd.random() < 0.35
    C = rnd.choice([1, 3, 4, 8])
    CO = C if depthwise else rnd.choice([2, 4, 8, 16, 17])
    H, W = rnd.choice([5, 8, 9, 14]), rnd.choice([5, 7, 12, 16, 19])
    KH, KW = rnd.choice([(3, 3), (1, 3), (3, 1), (1, 1)])
    ph, pw = KH // 2, KW // 2
    D = tdsl.placeholder((C, H, W), name=f"D{tag}")
    d = _data((C, H, W))
    pad = tdsl.compute((C, H + 2 * ph, W + 2 * pw), lambda c, y, x: tdsl.if_then_else(
        tdsl.all(y >= ph, y < H + ph, x >= pw, x < W + pw), D[c, y - ph, x - pw], tdsl.const(0, "float32")),
        name=f"pad{tag}")
    dp = np.pad(d.astype(np.float64), ((0, 0), (ph, ph), (pw, pw)))
    ky = tdsl.reduce_axis((0, KH), name=f"ky{tag}")
    kx = tdsl.reduce_axis((0, KW), name=f"kx{tag}")
    if depthwise:
        Wt = tdsl.placeholder((C, KH, KW), name=f"W{tag}")
        w = _data((C, KH, KW))
        O = tdsl.compute((C, H, W), lambda c, y, x: tdsl.sum(pad[c, y + ky, x + kx] * Wt[c, ky, kx],
                                                              axis=[ky, kx]), name=f"dw{tag}")
        ref = np.zeros((C, H, W))
        for i in range(KH):
            for j in range(KW):
                ref += dp[:, i:i + H, j:j + W] * w[:, i, j][:, None, None]
        red = KH * KW
    else:
        Wt = tdsl.placeholder((CO, C, KH, KW), name=f"W{tag}")
        w = _data((CO, C, KH, KW))
        ci = tdsl.reduce_axis((0, C), name=f"ci{tag}")
        O = tdsl.compute((CO, H, W), lambda o, y, x: tdsl.sum(
            pad[ci, y + ky, x + kx] * Wt[o, ci, ky, kx], axis=[ci, ky, kx]), name=f"conv{tag}")
        ref = np.zeros((CO, H, W))
        for i in range(KH):
            for j in range(KW):
                ref += np.einsum("oc,chw->ohw", w[:, :, i, j], dp[:, i:i + H, j:j + W])
        red = C * KH * KW
    return Def("conv-dw" if depthwise else "conv", [O], [D, Wt], [d, w], [ref], red=red)


def g_stencil(rnd, tag):
    H, hv = _dim(rnd, tag, "H", choices=[6, 9, 17, 33], sym_p=0.25)
    W = rnd.choice([5, 8, 16, 31, 40])
    A = tdsl.placeholder((H, W), name=f"A{tag}")
    a = _data((hv, W))
    bx = tdsl.compute((H, W - 2), lambda i, j: A[i, j] + A[i, j + 1] + A[i, j + 2], name=f"bx{tag}")
    by = tdsl.compute((H - 2, W - 2), lambda i, j: (bx[i, j] + bx[i + 1, j] + bx[i + 2, j]) / 9.0,
                      name=f"by{tag}")
    a64 = a.astype(np.float64)
    rx = a64[:, :-2] + a64[:, 1:-1] + a64[:, 2:]
    ry = (rx[:-2] + rx[1:-1] + rx[2:]) / 9.0
    return Def("stencil", [by], [A], [a], [ry])


def g_rows(rnd, tag):
    """Row groups: softmax, layernorm-like, x - rowmax."""
    M, mv = _dim(rnd, tag, "M", choices=[1, 4, 13, 32], sym_p=0.25)
    N = rnd.choice([5, 16, 31, 64, 100])
    X = tdsl.placeholder((M, N), name=f"X{tag}")
    x = _data((mv, N))
    x64 = x.astype(np.float64)
    kind = rnd.choice(["softmax", "norm", "center"])
    k1 = tdsl.reduce_axis((0, N), name=f"k1{tag}")
    k2 = tdsl.reduce_axis((0, N), name=f"k2{tag}")
    if kind == "softmax":
        mx = tdsl.compute((M,), lambda i: tdsl.max(X[i, k1], axis=k1), name=f"mx{tag}")
        ex = tdsl.compute((M, N), lambda i, j: tdsl.exp(X[i, j] - mx[i]), name=f"ex{tag}")
        sm = tdsl.compute((M,), lambda i: tdsl.sum(ex[i, k2], axis=k2), name=f"sm{tag}")
        Y = tdsl.compute((M, N), lambda i, j: ex[i, j] / sm[i], name=f"Y{tag}")
        e = np.exp(x64 - x64.max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
    elif kind == "norm":
        s1 = tdsl.compute((M,), lambda i: tdsl.sum(X[i, k1], axis=k1), name=f"s1{tag}")
        s2 = tdsl.compute((M,), lambda i: tdsl.sum((X[i, k2] - s1[i] / N) * (X[i, k2] - s1[i] / N), axis=k2),
                          name=f"s2{tag}")
        Y = tdsl.compute((M, N), lambda i, j: (X[i, j] - s1[i] / N) * tdsl.rsqrt(s2[i] / N + 1e-3),
                         name=f"Y{tag}")
        mu = x64.mean(axis=1, keepdims=True)
        ref = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(axis=1, keepdims=True) + 1e-3)
    else:
        mx = tdsl.compute((M,), lambda i: tdsl.max(X[i, k1], axis=k1), name=f"mx{tag}")
        Y = tdsl.compute((M, N), lambda i, j: X[i, j] - mx[i], name=f"Y{tag}")
        ref = x64 - x64.max(axis=1, keepdims=True)
    return Def(f"rows-{kind}", [Y], [X], [x], [ref], red=N)


GENERATORS = [g_elementwise, g_reduction, g_contraction, g_conv, g_stencil, g_rows, g_long_reduction]
PER_BUILD = 8
SEEDS = 20


def _batch(seed, n=PER_BUILD):
    rnd = random.Random(seed)
    np.random.seed(seed)
    defs = []
    for j in range(n):
        gen = GENERATORS[(seed + j) % len(GENERATORS)] if j < len(GENERATORS) else rnd.choice(GENERATORS)
        defs.append(gen(rnd, f"_{seed}_{j}"))
    return defs


def _check(defs, sched_target, build_target, seed, params=None):
    outs = [o for d in defs for o in d.outs]
    s = tdsl.auto_schedule(outs, target=sched_target, params=params)
    args = [p for d in defs for p in d.phs] + outs
    f = tdsl.build(s, args, target=build_target, name="auto")
    inputs = [x for d in defs for x in d.inputs]
    results = [np.full(r.shape, np.nan, dtype=np.float32) for d in defs for r in d.refs]
    f(*inputs, *results)
    it = iter(results)
    for d in defs:
        for ref in d.refs:
            np.testing.assert_allclose(next(it), ref, rtol=1e-3, atol=d.tol,
                                       err_msg=f"{d.kind} (seed {seed}) on {build_target}\n"
                                               f"{s.explain()}\n{s}")
    return s


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_definitions_llvm(seed):
    # a third with the rules' sizes, a third forcing the operand panel copy, a third with a
    # random register tile too (what a search would try)
    rnd = random.Random(-seed)
    params = [None, {"pack": True},
              {"pack": rnd.random() < 0.5, "tile": (rnd.randint(1, 5), rnd.randint(1, 3)),
               "unroll": rnd.choice([1, 2, 4])}][seed % 3]
    s = _check(_batch(seed), "llvm", "llvm", seed, params)
    assert s.explain().decisions


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_definitions_c(seed):
    _check(_batch(1000 + seed), "c", "c", seed)


def test_random_definitions_other_cpu():
    """The rules read the target: an AVX2 description (16 registers, 8 lanes) on this host."""
    t = Target("llvm -mcpu=haswell")
    if not t.runs_here:
        pytest.skip("this machine cannot run haswell code")
    for seed in range(4):
        _check(_batch(2000 + seed), t, t, seed)


def _opencl_ok():
    try:
        import pyopencl  # noqa: F401
        from tdsl.runtime import opencl as rocl
    except ImportError:
        return False
    return tdsl.opencl(0).exist and rocl.unusable_reason() is None


@pytest.mark.parametrize("seed", range(10))
def test_random_definitions_gpu_rules(seed):
    """The GPU rules (bind blocks and threads), on the C emulation and OpenCL when present."""
    defs = _batch(3000 + seed, n=4)
    _check(defs, "cuda", "c", seed)
    if seed < 3 and _opencl_ok():
        _check(_batch(3000 + seed, n=4), "opencl", "opencl", seed)


# ------------------------------------------------------------------------- decisions

def _gemm(M=64, N=64, K=64):
    A = tdsl.placeholder((M, K), name="A")
    B = tdsl.placeholder((K, N), name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell", "llvm -mcpu=znver4"])
def test_gemm_register_tile_comes_from_the_target(target):
    """The contraction's tile is the one tdsl.tiling derives from the target's lanes and
    registers (no lane count written in the rules): check the tile loops' extents."""
    from tdsl import tiling
    t = Target(target)
    A, B, C = _gemm(96, 128, 64)
    s = tdsl.auto_schedule(C, target=t)
    rules = s.explain().rules("C")
    assert rules[:2] == ["cache_write", "register-tile"], rules
    rows, vecs = tiling.register_tile(t, 96, 128, whole_rows=True)
    lanes = t.vector_lanes("float32")
    text = str(s)
    local = [line for line in text.splitlines() if line.strip().startswith("C.local:")][0]
    assert "(vectorized)" in local and "(unrolled)" in local, text
    d = [x for x in s.explain().decisions if x.rule == "register-tile"][0]
    assert f"by {rows} x {min(vecs * lanes, 128)}" in d.action, d
    if t.runs_here:
        f = tdsl.build(s, [A, B, C], target=t)
        a, b = _data((96, 64)), _data((64, 128))
        c = np.zeros((96, 128), np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_explain_lists_rules_and_reasons():
    X = tdsl.placeholder((64, 256), name="X")
    k1 = tdsl.reduce_axis((0, 256), name="k1")
    k2 = tdsl.reduce_axis((0, 256), name="k2")
    mx = tdsl.compute((64,), lambda i: tdsl.max(X[i, k1], axis=k1), name="mx")
    ex = tdsl.compute((64, 256), lambda i, j: tdsl.exp(X[i, j] - mx[i]), name="ex")
    sm = tdsl.compute((64,), lambda i: tdsl.sum(ex[i, k2], axis=k2), name="sm")
    Y = tdsl.compute((64, 256), lambda i, j: ex[i, j] / sm[i], name="Y")
    s = tdsl.auto_schedule(Y)
    e = s.explain()
    text = str(e)
    assert "materialize" in e.rules("ex")          # exp read twice: computed once
    assert "compute_at" in e.rules("mx") and "compute_at" in e.rules("sm")
    assert "rfactor-vectorize" in e.rules("mx")
    assert all(d.why for d in e.decisions)
    assert "auto_schedule for llvm" in text and "<table>" in e._repr_html_()
    assert "trace:" in str(s)                     # the primitives, in the schedule itself
    f = tdsl.build(s, [X, Y])
    x = _data((64, 256))
    y = np.zeros_like(x)
    f(x, y)
    ex_ = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, ex_ / ex_.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_inline_and_fused_epilogue():
    A, B, C = _gemm(32, 48, 16)
    bias = tdsl.placeholder((48,), name="bias")
    Y = tdsl.compute((32, 48), lambda i, j: tdsl.max(C[i, j] + bias[j], tdsl.const(0, "float32")), name="Y")
    Z = tdsl.compute((32, 48), lambda i, j: Y[i, j] * 2.0, name="Z")
    s = tdsl.auto_schedule(Z)
    e = s.explain()
    assert e.rules("Y") == ["inline"]
    assert "fuse-epilogue" in e.rules("Z")
    assert s[C].attach_type == "scope" and s[C].attach_stage is s[Z]


def test_parallel_rfactor_for_few_long_reductions():
    X = tdsl.placeholder((1 << 16,), name="X")
    k = tdsl.reduce_axis((0, 1 << 16), name="k")
    R = tdsl.compute((1,), lambda z: tdsl.sum(X[k], axis=k), name="R")
    s = tdsl.auto_schedule(R)
    assert "rfactor-parallel" in s.explain().rules("R")
    assert "parallel" in str(s)
    x = _data((1 << 16,))
    r = np.zeros(1, np.float32)
    tdsl.build(s, [X, R])(x, r)
    np.testing.assert_allclose(r[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)


def test_params_override_and_schedule_stays_editable():
    A, B, C = _gemm(64, 64, 64)
    s = tdsl.auto_schedule(C, params={"tile": (2, 1), "pack": False, "parallel": False})
    d = [x for x in s.explain().decisions if x.rule == "register-tile"][0]
    assert "by 2 x" in d.action and "tile" in str(s.explain())
    assert "parallel" not in str(s).split("trace:")[0]
    assert "pack" not in s.explain().rules()
    # an ordinary schedule: the user edits it further, then builds
    leaves = s[C].leaf_iter_vars
    s[C].parallel(leaves[0])
    f = tdsl.build(s, [A, B, C])
    a, b = _data((64, 64)), _data((64, 64))
    c = np.zeros((64, 64), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_bad_input_names_the_culprit():
    A, B, C = _gemm()
    with pytest.raises(tdsl.ScheduleError, match="'A' is a placeholder"):
        tdsl.auto_schedule(A)
    with pytest.raises(tdsl.ScheduleError, match="outputs must be tensors"):
        tdsl.auto_schedule([C, 3])
    with pytest.raises(tdsl.ScheduleError, match="unknown parameter.*tiles"):
        tdsl.auto_schedule(C, params={"tiles": (2, 2)})
    with pytest.raises(tdsl.ScheduleError, match="'tile'"):
        tdsl.auto_schedule(C, params={"tile": (0, 2)})
    with pytest.raises(tdsl.TdslError, match="target"):
        tdsl.auto_schedule(C, target="tpu")


def test_search_over_the_rules_parameters():
    """tdsl.autotune.tune_auto_schedule: the autotuner searches the rules' own knobs (no
    template written); every candidate is checked against the reference, and the best one
    builds and is right."""
    from tdsl.autotune import autosched as search

    def definition(n):
        A, B, C = _gemm(n, n, n)
        return [C], [A, B, C]
    task = search.create_auto_schedule_task(definition, (48,))
    assert {"tile_rows", "tile_vecs", "pack", "unroll", "chunks"} <= set(task.space.names), task.space
    s, tensors, res = search.tune_auto_schedule(definition, (48,), timeout_s=30, n_trial=4)
    assert res.best is not None and not res.failures, res.summary()
    assert isinstance(s, tdsl.Schedule) and s.explain().decisions
    a, b = _data((48, 48)), _data((48, 48))
    c = np.zeros((48, 48), np.float32)
    tdsl.build(s, tensors)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_gpu_contraction_stages_operands_in_shared_memory():
    A, B, C = _gemm(40, 33, 19)
    bias = tdsl.placeholder((33,), name="bias")
    Y = tdsl.compute((40, 33), lambda i, j: C[i, j] + bias[j], name="Y")
    s = tdsl.auto_schedule(Y, target="cuda")
    assert {"block-tile", "shared-memory"} <= set(s.explain().rules("C"))
    text = str(s)
    assert "A.shared" in text and "B.shared" in text and "threadIdx.x" in text, text
    a, b, bv = _data((40, 19)), _data((19, 33)), _data((33,))
    for target in ["c"] + (["opencl"] if _opencl_ok() else []):
        y = np.zeros((40, 33), np.float32)
        tdsl.build(s, [A, B, bias, Y], target=target)(a, b, bv, y)
        np.testing.assert_allclose(y, a @ b + bv, rtol=1e-4, atol=1e-4, err_msg=target)


@pytest.mark.parametrize("M,N,K", [(37, 29, 70), (64, 64, 64)])
def test_transposed_operand_gets_a_dot_product_tile(M, N, K):
    """A @ B.T (attention's Q K^T): no operand is contiguous along the output row, both are
    along the reduction: vectors of partial sums along k (rfactor), then an epilogue."""
    A = tdsl.placeholder((M, K), name="A")
    B = tdsl.placeholder((N, K), name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(A[i, k] * B[j, k], axis=k), name="C")
    Y = tdsl.compute((M, N), lambda i, j: C[i, j] * 0.125, name="Y")
    s = tdsl.auto_schedule(Y)
    assert "dot-tile" in s.explain().rules("C")
    a, b = _data((M, K)), _data((N, K))
    y = np.zeros((M, N), np.float32)
    tdsl.build(s, [A, B, Y])(a, b, y)
    np.testing.assert_allclose(y, (a @ b.T) * 0.125, rtol=1e-4, atol=1e-4)


def test_graph_build_tunes_groups_without_a_hand_strategy():
    """tdsl.graph.build(..., tune_minutes=N): the auto-scheduled groups share the budget;
    the tuned network computes what the untuned one does."""
    pytest.importorskip("onnx")
    import tdsl.graph as G
    from tdsl.graph import models
    mod = G.optimize(G.from_onnx(models.transformer_encoder(seq=16, d_model=32, heads=2, ff=64)))
    p = mod.main.params[0]
    x = np.random.rand(*p.type.shape).astype("float32")
    (y0,) = G.build(mod).run(**{p.name: x})
    exe = G.build(mod, tune_minutes=0.04)
    (y1,) = exe.run(**{p.name: x})
    assert "tuned" in exe.stats
    np.testing.assert_allclose(y1, y0, rtol=1e-4, atol=1e-5)
    with pytest.raises(tdsl.GraphError, match="tune_minutes"):
        G.build(mod, tune_minutes=-1)


def test_gpu_auto_schedule_compiles_to_ptx():
    from tdsl.runtime import cuda as rcuda
    if not rcuda.have_nvrtc():
        pytest.skip("NVRTC is not installed")
    A, B, C = _gemm(64, 48, 32)
    m = tdsl.build(tdsl.auto_schedule(C, target="cuda"), [A, B, C], target="cuda")
    src = m.get_source()
    assert "__shared__" in src and "__syncthreads" in src, src
    assert ".entry" in m.get_source("ptx")
