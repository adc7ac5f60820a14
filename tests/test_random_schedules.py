"""Randomly generated legal schedules of a matmul, a stencil, a reduction, an argmax/argmin
(a reduction over (index, value) tuples) and a two-output elementwise compute, each built
and compared with numpy. Shapes are ragged and sometimes symbolic, so guards, tails and
bound inference are exercised together; the schedules draw on every CPU primitive,
double_buffer, multi_buffer, prefetch, vthread and set_store_predicate included."""
import random

import numpy as np
import pytest

import tdsl
from tdsl.ir import expr as E
from tdsl.schedule.bound import pass_down


def _leaf_extent(stage, iv):
    op = stage.op
    rng = pass_down(stage, {x: x.dom for x in list(op.axis) + list(op.reduce_axis)})
    ext = rng[iv].extent
    return ext.value if isinstance(ext, E.IntImm) else None


def _random_loops(rnd, s, T, allow_parallel=True, max_ops=4):
    """Random split/fuse/reorder/annotate steps on stage s[T]; all legal by construction."""
    st = s[T]
    for _ in range(rnd.randint(0, max_ops)):
        leaves = st.leaf_iter_vars
        op = rnd.choice(["split", "split", "fuse", "reorder"])
        if op == "split":
            iv = rnd.choice(leaves)
            if rnd.random() < 0.8:
                st.split(iv, factor=rnd.choice([1, 2, 3, 4, 5, 8, 16]))
            else:
                st.split(iv, nparts=rnd.choice([1, 2, 3, 4]))
        elif op == "fuse" and len(leaves) >= 2:
            k = rnd.randrange(len(leaves) - 1)
            if leaves[k].kind == leaves[k + 1].kind:
                st.fuse(leaves[k], leaves[k + 1])
        elif op == "reorder":
            order = list(leaves)
            rnd.shuffle(order)
            st.reorder(*order)
    leaves = st.leaf_iter_vars
    inner = leaves[-1]
    ext = _leaf_extent(st, inner)
    if inner.kind != "reduce" and ext is not None and ext <= 64 and rnd.random() < 0.5:
        st.vectorize(inner)
    candidates = [iv for iv in leaves[:-1] if (_leaf_extent(st, iv) or 99) <= 8]
    if candidates and rnd.random() < 0.4:
        st.unroll(rnd.choice(candidates))
    if allow_parallel and leaves[0].kind != "reduce" and rnd.random() < 0.4:
        attrs = st.iter_var_attrs.get(leaves[0])
        if attrs is None or attrs.kind.value == "serial":
            st.parallel(leaves[0])


def _matmul(rnd):
    sym = rnd.random() < 0.3
    M, N, K = rnd.choice([(16, 16, 16), (13, 17, 19), (7, 33, 5), (24, 8, 31)])
    m = tdsl.var("m") if sym else M
    A = tdsl.placeholder((m, K), name="A")
    B = tdsl.placeholder((K, N), name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((m, N), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tdsl.create_schedule(C)
    cached = None
    if rnd.random() < 0.3:
        cached = s.cache_write(C, rnd.choice(["local", "global"]))
    if rnd.random() < 0.3:
        AA = s.cache_read(A, "local", [cached.op if cached is not None else C])
        if rnd.random() < 0.5:
            AA_stage = s[AA]
            AA_stage.compute_inline()
    if cached is not None:
        _random_loops(rnd, s, C, max_ops=3)
        if rnd.random() < 0.7:
            s[cached].compute_at(s[C], rnd.choice(s[C].leaf_iter_vars))
        _random_loops(rnd, s, cached, allow_parallel=False, max_ops=3)
    elif rnd.random() < 0.3:
        # a copy of B's k-rows double-buffered across the k loop
        W = C
        ko, ki = s[W].split(s[W].op.reduce_axis[0], factor=rnd.choice([1, 2, 3, 4]))
        s[W].reorder(*s[W].leaf_iter_vars[:2], ko, ki)
        BB = s.cache_read(B, rnd.choice(["global", "local"]), [W])
        s[BB].compute_at(s[W], ko)
        stages = rnd.choice([2, 2, 3])
        if stages == 2:
            s[BB].double_buffer()
        else:
            s[BB].multi_buffer(stages)
        if rnd.random() < 0.5:
            i0 = s[W].leaf_iter_vars[0]
            vo, vi = s[W].split(i0, nparts=rnd.choice([1, 2, 3]))
            s[W].bind(vo, tdsl.thread_axis("vthread"))
    else:
        _random_loops(rnd, s, C)
        if rnd.random() < 0.2:
            i0 = s[C].leaf_iter_vars[0]
            attrs = s[C].iter_var_attrs.get(i0)
            if i0.kind != "reduce" and (attrs is None or attrs.kind.value == "serial") \
                    and (_leaf_extent(s[C], i0) or 99) <= 40:
                s[C].bind(i0, tdsl.thread_axis("vthread"))
    a = np.random.rand(M, K).astype("float32")
    b = np.random.rand(K, N).astype("float32")
    return s, [A, B, C], [a, b], (M, N), lambda a, b: a @ b


def _stencil(rnd):
    H, W = rnd.choice([(16, 16), (11, 23), (9, 40)])
    A = tdsl.placeholder((H, W), name="A")
    Bt = tdsl.compute((H - 1, W - 1), lambda i, j: (A[i, j] + A[i + 1, j] + A[i, j + 1]) * 0.5, name="Bt")
    C = tdsl.compute((H - 2, W - 2), lambda i, j: Bt[i, j] + Bt[i + 1, j + 1] * 2.0, name="C")
    s = tdsl.create_schedule(C)
    _random_loops(rnd, s, C)
    where = rnd.choice(["inline", "root", "at"])
    if where == "inline":
        s[Bt].compute_inline()
    elif where == "at":
        s[Bt].compute_at(s[C], rnd.choice(s[C].leaf_iter_vars))
    if where != "inline":
        _random_loops(rnd, s, Bt, allow_parallel=(where == "root"), max_ops=2)
        if rnd.random() < 0.3:      # padded rows
            s[Bt].storage_align(Bt.op.axis[0], rnd.choice([4, 16]), rnd.choice([0, 1, 3]))
    if rnd.random() < 0.4:      # what a stage reads from memory, fetched iterations ahead
        reader, what = (C, A) if where == "inline" else \
            rnd.choice([(Bt, A)] + ([(C, Bt)] if where == "root" else []))
        loops = [iv for iv in s[reader].leaf_iter_vars
                 if getattr(s[reader].iter_var_attrs.get(iv), "kind", None) is None
                 or s[reader].iter_var_attrs[iv].kind.value in ("serial", "parallel", "unrolled")]
        if loops:
            s[reader].prefetch(what, rnd.choice(loops), rnd.choice([1, 2, 5]))
    a = np.random.rand(H, W).astype("float32")

    def ref(a):
        b = (a[:-1, :-1] + a[1:, :-1] + a[:-1, 1:]) * 0.5
        return b[:-1, :-1] + b[1:, 1:] * 2.0
    return s, [A, C], [a], (H - 2, W - 2), ref


def _reduction(rnd):
    R, L = rnd.choice([(8, 64), (5, 37), (16, 100)])
    kind = rnd.choice(["sum", "max"])
    A = tdsl.placeholder((R, L), name="A")
    k = tdsl.reduce_axis((0, L), name="k")
    red = tdsl.sum if kind == "sum" else tdsl.max
    S = tdsl.compute((R,), lambda i: red(A[i, k], axis=k), name="S")
    s = tdsl.create_schedule(S)
    if rnd.random() < 0.5:
        ko, ki = s[S].split(k, factor=rnd.choice([4, 8, 16, 6]))
        SF = s.rfactor(S, rnd.choice([ko, ki]))
        _random_loops(rnd, s, SF, max_ops=2)
        if rnd.random() < 0.5:
            s[SF].compute_at(s[S], s[S].op.axis[0])
        _random_loops(rnd, s, S, max_ops=1)
    else:
        _random_loops(rnd, s, S)
    a = np.random.randn(R, L).astype("float32")
    ref = (lambda a: a.sum(axis=1)) if kind == "sum" else (lambda a: a.max(axis=1))
    return s, [A, S], [a], (R,), ref


def _argreduce(rnd):
    """argmax or argmin of each row: one reduction over (index, value) pairs, two outputs;
    rfactor gives a two-output partial stage."""
    R, L = rnd.choice([(8, 64), (5, 37), (16, 100), (3, 7)])
    is_max = rnd.random() < 0.5

    def combine(x, y):
        better = x[1] >= y[1] if is_max else x[1] <= y[1]
        return tdsl.select(better, x[0], y[0]), tdsl.select(better, x[1], y[1])

    def identity(t0, t1):
        return tdsl.const(-1, t0), tdsl.min_value(t1) if is_max else tdsl.max_value(t1)
    arg = tdsl.comm_reducer(combine, identity, name="argmax" if is_max else "argmin")
    A = tdsl.placeholder((R, L), name="A")
    k = tdsl.reduce_axis((0, L), name="k")
    I, V = tdsl.compute((R,), lambda i: arg((k.astype("int32"), A[i, k]), axis=k), name="T")
    s = tdsl.create_schedule(I.op)
    if rnd.random() < 0.5:
        ko, ki = s[I].split(k, factor=rnd.choice([4, 8, 16, 6]))
        IF, _ = s.rfactor(I, rnd.choice([ko, ki]))
        _random_loops(rnd, s, IF, max_ops=2)
        if rnd.random() < 0.5:
            s[IF].compute_at(s[I], s[I].op.axis[0])
        _random_loops(rnd, s, I, max_ops=1)
    else:
        _random_loops(rnd, s, I)
    if rnd.random() < 0.3:      # the last row is left alone
        s[I].set_store_predicate(I.op.axis[0].var < R - 1)
        pred = True
    else:
        pred = False
    a = np.random.randn(R, L).astype("float32")

    def ref(a):
        idx = (a.argmax(axis=1) if is_max else a.argmin(axis=1)).astype("int32")
        val = a.max(axis=1) if is_max else a.min(axis=1)
        if pred:
            idx[-1], val[-1] = -7, np.nan
        return idx, val
    return s, [A, I, V], [a], [((R,), "int32", -7), ((R,), "float32", np.nan)], ref


def _two_outputs(rnd):
    """(S, P) = (A + B, A * B) from one compute, then C = S - 2P: the two-output stage
    inlined, attached, or cached with cache_write of both outputs."""
    M, N = rnd.choice([(16, 16), (7, 33), (13, 5)])
    A = tdsl.placeholder((M, N), name="A")
    B = tdsl.placeholder((M, N), name="B")
    S, P = tdsl.compute((M, N), lambda i, j: (A[i, j] + B[i, j], A(i, j) * B[i][j]), name="SP")
    C = tdsl.compute((M, N), lambda i, j: S[i, j] - P[i, j] * 2.0, name="C")
    s = tdsl.create_schedule(C)
    where = rnd.choice(["inline", "root", "at", "cache"])
    if where == "cache":
        SC, PC = s.cache_write([S, P], rnd.choice(["local", "global"]))
        _random_loops(rnd, s, C, max_ops=2)
        s[S].compute_at(s[C], rnd.choice(s[C].leaf_iter_vars))
        s[SC].compute_at(s[C], rnd.choice(s[C].leaf_iter_vars[:1]))
    else:
        _random_loops(rnd, s, C)
        if where == "inline":
            s[S].compute_inline()
        elif where == "at":
            s[P].compute_at(s[C], rnd.choice(s[C].leaf_iter_vars))
            _random_loops(rnd, s, S, allow_parallel=False, max_ops=2)
        else:
            _random_loops(rnd, s, P, max_ops=2)
    a, b = np.random.rand(M, N).astype("float32"), np.random.rand(M, N).astype("float32")
    return s, [A, B, C], [a, b], (M, N), lambda a, b: (a + b) - (a * b) * 2.0


KERNELS = [_matmul, _stencil, _reduction, _argreduce, _two_outputs]


@pytest.mark.parametrize("seed", range(70))
def test_random_schedules(seed):
    for j, make in enumerate(KERNELS):
        rnd = random.Random(seed * 31 + j)
        np.random.seed(seed)
        s, args, inputs, outs, ref = make(rnd)
        f = tdsl.build(s, args)
        if not isinstance(outs, list):
            outs, ref1 = [(outs, "float32", np.nan)], ref
            ref = lambda *xs: (ref1(*xs),)     # noqa: E731
        arrays = [np.full(shape, fill, dtype=dtype) for shape, dtype, fill in outs]
        f(*inputs, *arrays)
        for out, expect in zip(arrays, ref(*inputs)):
            np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-4,
                                       err_msg=f"{make.__name__} seed {seed}\n{s}")
