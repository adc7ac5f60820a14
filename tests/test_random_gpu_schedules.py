"""Randomly generated legal GPU schedules, each built for target "c" (GPU blocks and threads
emulated on the CPU) and compared with numpy; every 5th schedule also runs through OpenCL
(where a device works) and its CUDA source compiles through NVRTC (where it is installed).

Kernels: an elementwise kernel with a broadcast operand, a tiled matmul (random block and
thread tiles, shared/local cache_read with cooperative fetches, double- or multi-buffered shared
(and padded or swizzled)
caches, virtual threads, cache_write "local", vectorized copies, unrolling; ragged shapes),
a row reduction (cross-thread, with and without rfactor, several rows per block or a thread
per row), a two-stage stencil (the first stage inlined, per thread, in shared memory filled
by the block, or a kernel of its own), a row normalisation, an argmax (a reduction over
(index, value) tuples across threads, with rfactor and a store predicate) and a two-output
compute cached with cache_write of both outputs.

Every generated schedule is legal: thread counts stay within 1024 per block, shared memory
within 48 KiB, every loop bound to one thread tag in a kernel has the same extent."""
import random

import numpy as np
import pytest

import tdsl
from tdsl.ir import expr as E
from tdsl.runtime import cuda as rcuda
from tdsl.runtime import opencl as rocl
from tdsl.schedule.bound import pass_down


def _tx(tag):
    return tdsl.thread_axis(tag)


def _leaf_extent(stage, iv):
    op = stage.op
    rng = pass_down(stage, {x: x.dom for x in list(op.axis) + list(op.reduce_axis)})
    ext = rng[iv].extent
    return ext.value if isinstance(ext, E.IntImm) else None


def _coop_fetch(rnd, s, T, ty_n, tx_n, vector_ok=True):
    """Binds the copy loops of a shared cache stage to the block's threads (threadIdx.y
    extent ty_n, threadIdx.x extent tx_n), splitting its fused axes in one of a few ways."""
    st = s[T]
    axes = list(st.op.axis)
    how = rnd.choice(["fuse", "fuse", "axes"])
    if how == "fuse" or len(axes) != 2:
        f = st.fuse(*axes) if len(axes) > 1 else axes[0]
        if ty_n > 1:
            t_y, f = st.split(f, nparts=ty_n)
            st.bind(t_y, _tx("threadIdx.y"))
        if rnd.random() < 0.5:
            t_x, f = st.split(f, nparts=tx_n)
            st.bind(t_x, _tx("threadIdx.x"))
            inner = f
        else:       # thread-fastest: the consecutive elements go to consecutive threads
            f, t_x = st.split(f, factor=tx_n)
            st.bind(t_x, _tx("threadIdx.x"))
            inner = None
    else:
        a0, a1 = axes
        if ty_n > 1:
            t_y, a0 = st.split(a0, nparts=ty_n)
            st.reorder(t_y, a0, a1)
            st.bind(t_y, _tx("threadIdx.y"))
        t_x, a1 = st.split(a1, nparts=tx_n)
        st.reorder(t_x, a0, a1) if ty_n == 1 else st.reorder(t_y, t_x, a0, a1)
        st.bind(t_x, _tx("threadIdx.x"))
        inner = a1
    if inner is not None and vector_ok and rnd.random() < 0.4:
        ext = _leaf_extent(st, inner)
        if ext is not None and ext <= 16:
            st.vectorize(inner)


# ------------------------------------------------------------------ elementwise + broadcast

def _elementwise(rnd):
    M, N = rnd.choice([(1, 1000), (7, 33), (16, 64), (5, 129), (64, 3)])
    dtype = rnd.choice(["float32", "float32", "float64", "int32"])
    m = tdsl.var("m") if rnd.random() < 0.25 else M      # a symbolic row count
    A = tdsl.placeholder((m, N), dtype=dtype, name="A")
    b = tdsl.placeholder((N,), dtype=dtype, name="b")
    C = tdsl.compute((m, N), lambda i, j: A[i, j] * tdsl.const(2, dtype) + b[j], name="C")
    s = tdsl.create_schedule(C)
    i, j = C.op.axis
    mode = rnd.choice(["flat", "flat", "2d"])
    if mode == "flat":
        f = s[C].fuse(i, j)
        lanes = rnd.choice([1, 1, 2, 4, 8])
        threads = rnd.choice([1, 3, 32, 64, 100, 256, 1024 // lanes])
        if lanes > 1:
            f, v = s[C].split(f, factor=lanes)
        if rnd.random() < 0.5:
            bx, tx = s[C].split(f, factor=threads)
        else:
            bx, tx = s[C].split(f, nparts=min(threads, 8))
            bx, tx = tx, bx          # nparts blocks, the rest threads: keep it small
            s[C].reorder(bx, tx) if lanes == 1 else s[C].reorder(bx, tx, v)
            if (_leaf_extent(s[C], tx) or 9999) > 1024:
                return _elementwise(rnd)
        s[C].bind(bx, _tx("blockIdx.x"))
        s[C].bind(tx, _tx("threadIdx.x"))
        if lanes > 1:
            (s[C].vectorize if rnd.random() < 0.7 else s[C].unroll)(v)
    else:
        ty_n, tx_n = rnd.choice([1, 2, 4, 8]), rnd.choice([1, 4, 16, 32])
        by, bx, ty, tx = s[C].tile(i, j, ty_n, tx_n)
        s[C].bind(by, _tx("blockIdx.y"))
        s[C].bind(bx, _tx("blockIdx.x"))
        s[C].bind(ty, _tx("threadIdx.y"))
        s[C].bind(tx, _tx("threadIdx.x"))
        if rnd.random() < 0.4:       # the broadcast row, read once per block
            bs = s.cache_read(b, rnd.choice(["shared", "local"]), [C])
            if s[bs].scope == "shared":
                s[bs].compute_at(s[C], bx)
                _coop_fetch(rnd, s, bs, ty_n, tx_n)
            else:
                s[bs].compute_at(s[C], tx)
    a = (np.random.rand(M, N) * 100).astype(dtype)
    bb = (np.random.rand(N) * 100).astype(dtype)
    return s, [A, b, C], [a, bb], (M, N), lambda a, b: a * 2 + b


# ------------------------------------------------------------------ tiled matmul

def _matmul(rnd):
    M, N, K = rnd.choice([(16, 16, 16), (13, 17, 19), (7, 33, 5), (24, 8, 31), (40, 36, 20)])
    A = tdsl.placeholder((M, K), name="A")
    B = tdsl.placeholder((K, N), name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tdsl.create_schedule(C)
    ty_n, tx_n = rnd.choice([1, 2, 4, 8]), rnd.choice([1, 2, 4, 8, 16])
    ti, tj = rnd.choice([1, 2, 3]), rnd.choice([1, 2, 4])
    vy = rnd.choice([1, 1, 2]) if ti > 1 else 1      # virtual threads along the rows
    k_tile = rnd.choice([1, 2, 3, 4, 8])
    shared = [rnd.random() < 0.6, rnd.random() < 0.6]
    local = [rnd.random() < 0.4, rnd.random() < 0.4]
    use_cw = rnd.random() < 0.6
    CL = s.cache_write(C, "local") if use_cw else None
    W = CL if use_cw else C          # the stage that does the reduction
    caches = []
    for T, sh, lo in zip((A, B), shared, local):
        S_ = s.cache_read(T, "shared", [W]) if sh else None
        L_ = s.cache_read(S_ if sh else T, "local", [W]) if lo else None
        caches.append((S_, L_))
    i, j = s[C].op.axis
    by, yi = s[C].split(i, factor=ty_n * ti)
    bx, xi = s[C].split(j, factor=tx_n * tj)
    if rnd.random() < 0.7:          # each thread a contiguous ti x tj tile
        ty, yi = s[C].split(yi, nparts=ty_n)
        tx, xi = s[C].split(xi, nparts=tx_n)
    else:                           # or strided: neighbouring threads, neighbouring outputs
        yi, ty = s[C].split(yi, factor=ty_n)
        xi, tx = s[C].split(xi, factor=tx_n)
    if vy > 1:                      # each thread's rows as vy interleaved virtual threads
        vt, yi = s[C].split(yi, nparts=vy)
        s[C].reorder(by, bx, vt, ty, tx, yi, xi)
        s[C].bind(vt, tdsl.thread_axis((0, vy), "vthread"))
    else:
        s[C].reorder(by, bx, ty, tx, yi, xi)
    s[C].bind(by, _tx("blockIdx.y"))
    s[C].bind(bx, _tx("blockIdx.x"))
    s[C].bind(ty, _tx("threadIdx.y"))
    s[C].bind(tx, _tx("threadIdx.x"))
    if use_cw:
        s[CL].compute_at(s[C], tx)
        yc, xc = s[CL].op.axis
        (kc,) = s[CL].op.reduce_axis
        ko, ki = s[CL].split(kc, factor=k_tile)
        s[CL].reorder(ko, ki, yc, xc)
        if rnd.random() < 0.3:
            s[C].vectorize(xi) if rnd.random() < 0.5 else s[C].unroll(xi)
    else:
        (kc,) = s[C].op.reduce_axis
        ko, ki = s[C].split(kc, factor=k_tile)
        s[C].reorder(*s[C].leaf_iter_vars[:-4], ko, ki, yi, xi)
        yc, xc = yi, xi
    if rnd.random() < 0.3:
        for iv in (ki, yc, xc):
            s[W].unroll(iv)
    double = rnd.random() < 0.4
    stages = rnd.choice([2, 2, 3, 4]) if double else 0     # a pipeline of shared buffers
    for S_, L_ in caches:
        if S_ is not None:
            s[S_].compute_at(s[W], ko)
            _coop_fetch(rnd, s, S_, ty_n, tx_n)
            if rnd.random() < 0.3:  # rows padded against bank conflicts
                s[S_].storage_align(S_.op.axis[0], rnd.choice([8, 32]), rnd.choice([1, 4]))
            if rnd.random() < 0.3:  # or 16-byte chunks swizzled across 128-byte rows
                s[S_].storage_swizzle(rnd.choice([32, 64, 128]))
            if stages == 2:
                s[S_].double_buffer()
            elif stages:
                s[S_].multi_buffer(stages)
        if L_ is not None:
            s[L_].compute_at(s[W], ki)
            if rnd.random() < 0.3:
                for iv in s[L_].op.axis:
                    s[L_].unroll(iv)
    a = np.random.rand(M, K).astype("float32")
    b = np.random.rand(K, N).astype("float32")
    return s, [A, B, C], [a, b], (M, N), lambda a, b: a @ b


# ------------------------------------------------------------------ row reduction

def _reduction(rnd):
    R, L = rnd.choice([(8, 64), (5, 37), (16, 100), (3, 1000), (33, 7)])
    kind = rnd.choice(["sum", "max"])
    A = tdsl.placeholder((R, L), name="A")
    k = tdsl.reduce_axis((0, L), name="k")
    red = tdsl.sum if kind == "sum" else tdsl.max
    S = tdsl.compute((R,), lambda i: red(A[i, k], axis=k), name="S")
    s = tdsl.create_schedule(S)
    (i,) = S.op.axis
    T = rnd.choice([2, 3, 8, 24, 32, 64, 128])
    mode = rnd.choice(["cross", "cross_rows", "rfactor", "rfactor_root", "serial"])
    if mode in ("cross", "cross_rows"):
        if rnd.random() < 0.7:
            ko, ki = s[S].split(k, factor=T)
        else:
            ki, ko = s[S].split(k, nparts=T)
        if mode == "cross_rows":       # several rows per block: threadIdx.y groups
            rows = rnd.choice([2, 3, 4])
            bo, ri = s[S].split(i, factor=rows)
            s[S].reorder(bo, ri, ki, ko)
            s[S].bind(bo, _tx("blockIdx.x"))
            s[S].bind(ri, _tx("threadIdx.y"))
        else:
            s[S].reorder(i, ki, ko)
            s[S].bind(i, _tx("blockIdx.x"))
        s[S].bind(ki, _tx("threadIdx.x"))
    elif mode == "rfactor":
        if rnd.random() < 0.6:
            ko, ki = s[S].split(k, factor=T)
            SF = s.rfactor(S, ki)
        else:
            ko, ki = s[S].split(k, nparts=T)
            SF = s.rfactor(S, ko)
        si = s[S].op.axis[0]
        (sk,) = s[S].op.reduce_axis
        if rnd.random() < 0.5:
            s[S].bind(si, _tx("blockIdx.x"))
        else:                           # several rows per block
            bo, ri = s[S].split(si, factor=rnd.choice([2, 4]))
            s[S].reorder(bo, ri, sk)
            s[S].bind(bo, _tx("blockIdx.x"))
            s[S].bind(ri, _tx("threadIdx.y"))
        s[S].bind(sk, _tx("threadIdx.x"))
        s[SF].compute_at(s[S], sk)
        (fk,) = s[SF].op.reduce_axis
        if rnd.random() < 0.4:
            fo, fi = s[SF].split(fk, factor=rnd.choice([2, 4]))
            s[SF].unroll(fi)
    elif mode == "rfactor_root":       # the factored stage is a kernel of its own
        ko, ki = s[S].split(k, factor=T)
        SF = s.rfactor(S, rnd.choice([ko, ki]))
        fa, fi = s[SF].op.axis
        s[SF].bind(fi, _tx("blockIdx.x"))
        s[SF].bind(fa, _tx("threadIdx.x"))
        s[SF].reorder(fi, fa)
        if (_leaf_extent(s[SF], fa) or 9999) > 1024:
            return _reduction(rnd)
        bo, to = s[S].split(s[S].op.axis[0], factor=rnd.choice([1, 4, 32]))
        s[S].bind(bo, _tx("blockIdx.x"))
        s[S].bind(to, _tx("threadIdx.x"))
    else:                               # a thread per row, the reduction serial
        bo, to = s[S].split(i, factor=rnd.choice([1, 2, 4, 32]))
        s[S].bind(bo, _tx("blockIdx.x"))
        s[S].bind(to, _tx("threadIdx.x"))
        if rnd.random() < 0.5:
            ko, ki = s[S].split(k, factor=rnd.choice([4, 5]))
            s[S].unroll(ki)
    a = np.random.randn(R, L).astype("float32")
    ref = (lambda a: a.sum(axis=1)) if kind == "sum" else (lambda a: a.max(axis=1))
    return s, [A, S], [a], (R,), ref


# ------------------------------------------------------------------ two-stage stencil

def _stencil(rnd):
    H, W = rnd.choice([(16, 16), (11, 23), (9, 40)])
    A = tdsl.placeholder((H, W), name="A")
    Bt = tdsl.compute((H - 1, W - 1), lambda i, j: (A[i, j] + A[i + 1, j] + A[i, j + 1]) * 0.5,
                      name="Bt")
    C = tdsl.compute((H - 2, W - 2), lambda i, j: Bt[i, j] + Bt[i + 1, j + 1] * 2.0, name="C")
    s = tdsl.create_schedule(C)
    ty_n, tx_n = rnd.choice([1, 2, 4]), rnd.choice([1, 4, 8, 16])
    i, j = C.op.axis
    by, bx, ty, tx = s[C].tile(i, j, ty_n, tx_n)
    s[C].bind(by, _tx("blockIdx.y"))
    s[C].bind(bx, _tx("blockIdx.x"))
    s[C].bind(ty, _tx("threadIdx.y"))
    s[C].bind(tx, _tx("threadIdx.x"))
    where = rnd.choice(["inline", "thread", "shared", "root", "row"])
    if where == "inline":
        s[Bt].compute_inline()
    elif where == "thread":
        s[Bt].compute_at(s[C], tx)
    elif where == "row":               # per thread, the rows its threadIdx.y row needs
        s[Bt].compute_at(s[C], ty)
    elif where == "shared":
        # attached outside the threadIdx loops, the default scope becomes "shared"
        s[Bt].compute_at(s[C], bx)
        _coop_fetch(rnd, s, Bt, ty_n, tx_n, vector_ok=False)
    else:
        bi, bj = Bt.op.axis
        f = s[Bt].fuse(bi, bj)
        bo, to = s[Bt].split(f, factor=rnd.choice([32, 64, 96]))
        s[Bt].bind(bo, _tx("blockIdx.x"))
        s[Bt].bind(to, _tx("threadIdx.x"))
    if rnd.random() < 0.3:
        AS = s.cache_read(A, "shared", [Bt])
        if where in ("shared", "inline"):
            # Bt in shared memory runs at bx, outside the thread loops: its cache there too
            s[AS].compute_at(s[C], bx if where == "shared" else rnd.choice([bx, ty, tx]))
            _coop_fetch(rnd, s, AS, ty_n, tx_n)
        else:
            s[AS].compute_inline()      # no shared attach point: keep the stage inlined
    a = np.random.rand(H, W).astype("float32")

    def ref(a):
        b = (a[:-1, :-1] + a[1:, :-1] + a[:-1, 1:]) * 0.5
        return b[:-1, :-1] + b[1:, 1:] * 2.0
    return s, [A, C], [a], (H - 2, W - 2), ref


# ------------------------------------------------------------------ row normalisation

def _normalize(rnd):
    """Y = A / rowsum(A) (or A - rowmax(A)): the reduction either its own kernel or attached
    at the block of Y (one kernel: the row is reduced across threads, then every thread
    reads the result)."""
    R, L = rnd.choice([(4, 64), (5, 37), (3, 200), (9, 8)])
    kind = rnd.choice(["sum", "max"])
    A = tdsl.placeholder((R, L), name="A")
    k = tdsl.reduce_axis((0, L), name="k")
    red = tdsl.sum if kind == "sum" else tdsl.max
    S = tdsl.compute((R,), lambda i: red(A[i, k], axis=k), name="S")
    if kind == "sum":
        Y = tdsl.compute((R, L), lambda i, j: A[i, j] / S[i], name="Y")
    else:
        Y = tdsl.compute((R, L), lambda i, j: A[i, j] - S[i], name="Y")
    s = tdsl.create_schedule(Y)
    T = rnd.choice([4, 7, 16, 32, 64])
    i, j = Y.op.axis
    jo, ji = s[Y].split(j, factor=T)
    s[Y].bind(i, _tx("blockIdx.x"))
    s[Y].bind(ji, _tx("threadIdx.x"))
    if rnd.random() < 0.5:
        s[Y].unroll(jo)
    (sk,) = S.op.reduce_axis
    attached = rnd.random() < 0.6
    if attached:
        s[S].compute_at(s[Y], i)
    if rnd.random() < 0.5:
        ko, ki = s[S].split(sk, factor=T)
        s[S].reorder(ki, ko)
        if not attached:
            s[S].bind(S.op.axis[0], _tx("blockIdx.x"))
        s[S].bind(ki, _tx("threadIdx.x"))
    else:
        ko, ki = s[S].split(sk, factor=T)
        SF = s.rfactor(S, ki)
        if not attached:
            s[S].bind(s[S].op.axis[0], _tx("blockIdx.x"))
        s[S].bind(s[S].op.reduce_axis[0], _tx("threadIdx.x"))
        s[SF].compute_at(s[S], s[S].op.reduce_axis[0])
    a = (np.random.rand(R, L) + 0.5).astype("float32")
    if kind == "sum":
        ref = lambda a: a / a.sum(axis=1, keepdims=True)      # noqa: E731
    else:
        ref = lambda a: a - a.max(axis=1, keepdims=True)      # noqa: E731
    return s, [A, Y], [a], (R, L), ref


# ------------------------------------------------------------------ argmax over (index, value)

def _argmax_rows(rnd):
    """Per row, the index and value of the maximum: a tuple reduction across the threads of
    a block, directly or through rfactor, sometimes stored by thread 0 only
    (set_store_predicate), sometimes several rows per block."""
    R, L = rnd.choice([(8, 64), (5, 37), (3, 200), (10, 1027)])

    def combine(x, y):
        return tdsl.select(x[1] >= y[1], x[0], y[0]), tdsl.select(x[1] >= y[1], x[1], y[1])

    def identity(t0, t1):
        return tdsl.const(-1, t0), tdsl.min_value(t1)
    argmax = tdsl.comm_reducer(combine, identity, name="argmax")
    idx = tdsl.placeholder((R, L), dtype="int32", name="idx")
    val = tdsl.placeholder((R, L), name="val")
    k = tdsl.reduce_axis((0, L), name="k")
    I, V = tdsl.compute((R,), lambda i: argmax((idx[i, k], val[i, k]), axis=k), name="T")
    s = tdsl.create_schedule(I.op)
    T = rnd.choice([4, 8, 16, 32])
    tx = tdsl.thread_axis((0, T), "threadIdx.x") if rnd.random() < 0.5 else _tx("threadIdx.x")
    if rnd.random() < 0.5:
        _, kf = s[I].split(k, factor=T)
        IF, _ = s.rfactor(I, kf)
        red = s[I].op.reduce_axis[0]
    else:
        red, _ = s[I].split(k, nparts=T)
        IF = None
    i = s[I].op.axis[0]
    if rnd.random() < 0.5:
        bo, ri = s[I].split(i, factor=rnd.choice([2, 4]))
        s[I].bind(bo, _tx("blockIdx.x"))
        s[I].bind(ri, _tx("threadIdx.y"))
    else:
        s[I].bind(i, _tx("blockIdx.x"))
    s[I].bind(red, tx)
    if IF is not None:
        s[IF].compute_at(s[I], red)
    if rnd.random() < 0.5:
        s[I].set_store_predicate(tx.var.equal(0))
    ii = np.repeat(np.arange(L, dtype="int32")[None], R, axis=0)
    v = np.random.rand(R, L).astype("float32")
    return (s, [idx, val, I, V], [ii, v], [((R,), "int32"), ((R,), "float32")],
            lambda ii, v: (v.argmax(axis=1).astype("int32"), v.max(axis=1)))


# ------------------------------------------------------------------ two outputs, cached

def _two_outputs(rnd):
    """(S, P) = (A + B, A * B) from one compute, C = S + P (TVM's test_multiple_cache_write
    with random block sizes): both outputs cached in "local", the stages attached at the
    block or inlined."""
    n = rnd.choice([64, 100, 1024])
    A0 = tdsl.placeholder((n,), name="A0")
    A1 = tdsl.placeholder((n,), name="A1")
    S, P = tdsl.compute((n,), lambda *i: (A0(*i) + A1(*i), A0(*i) * A1(*i)), name="B")
    C = tdsl.compute((n,), lambda *i: S(*i) + P(*i), name="C")
    s = tdsl.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=rnd.choice([4, 8, 32]))
    s[C].bind(bx, _tx("blockIdx.x"))
    s[C].bind(tx, _tx("threadIdx.x"))
    if rnd.random() < 0.6:
        SC, _ = s.cache_write([S, P], "local")
        at = rnd.choice([bx, tx])      # the block's part (shared) or the thread's (local)
        s[S].compute_at(s[C], at)
        s[SC].compute_at(s[C], at)
    else:
        s[S].compute_inline()
    a0, a1 = np.random.rand(n).astype("float32"), np.random.rand(n).astype("float32")
    return s, [A0, A1, C], [a0, a1], (n,), lambda a0, a1: a0 + a1 + a0 * a1


KERNELS = [_elementwise, _matmul, _reduction, _stencil, _normalize, _argmax_rows, _two_outputs]
SEEDS = 30


def _opencl_ok():
    try:
        import pyopencl  # noqa: F401
    except ImportError:
        return False
    return tdsl.opencl(0).exist and rocl.unusable_reason() is None


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_gpu_schedules(seed):
    for j, make in enumerate(KERNELS):
        rnd = random.Random(seed * 31 + j)
        np.random.seed(seed)
        s, args, inputs, outs, ref = make(rnd)
        msg = f"{make.__name__} seed {seed}\n{s}"
        expect = ref(*inputs)
        if not isinstance(outs, list):
            outs, expect = [(outs, expect.dtype)], (expect,)
        targets = ["c"]
        if (seed * len(KERNELS) + j) % 5 == 0:
            if _opencl_ok():
                targets.append("opencl")
            if rcuda.have_nvrtc():
                src = tdsl.build(s, args, target="cuda", name="k")
                assert ".entry" in src.get_source("ptx"), msg
        for target in targets:
            f = tdsl.build(s, args, target=target, name="k")
            arrays = [np.zeros(shape, dtype=dtype) for shape, dtype in outs]
            f(*inputs, *arrays)
            for out, ex in zip(arrays, expect):
                np.testing.assert_allclose(out, ex, rtol=1e-4, atol=1e-4,
                                           err_msg=f"target {target}: {msg}")
