"""TVM's integration tests for tensor expressions (tag v0.16.0, the last with
`te.create_schedule`: tests/python/integration/test_reduce.py, test_ewise.py, test_gemm.py,
test_dot.py), translated name for name (`tvm.te` / `tvm.tir` -> `tdsl`), each checked
against numpy. GPU schedules run on target "c" (the GPU emulated on the CPU) and "opencl"
(PoCL; skipped without a working device); for "cuda" the source is compiled to PTX by NVRTC
(skipped without it) and run where a GPU exists. Sizes are smaller than TVM's where the
emulation would be slow; the schedules are TVM's."""
import numpy as np
import pytest

import tdsl
import tdsl as te          # the TVM spelling: te.compute, te.thread_axis, ...
import tdsl as tir         # tvm.tir.Select, tvm.tir.const, tvm.tir.popcount
from tdsl.runtime import cuda as rcuda
from tdsl.runtime import opencl as rocl

rng = np.random.default_rng(14)
GPU_TARGETS = ["c", "opencl", "cuda"]


def device_or_skip(target):
    """Returns True when modules for `target` can run here; False when only the source can
    be checked (CUDA without a GPU, with NVRTC); skips otherwise."""
    if target == "opencl":
        try:
            import pyopencl  # noqa: F401
        except ImportError:
            pytest.skip("pyopencl is not installed")
        reason = rocl.unusable_reason()
        if reason is not None:
            pytest.skip("no working OpenCL device: " + reason.splitlines()[0])
    if target == "cuda":
        if tdsl.cuda(0).exist:
            return True
        if not rcuda.have_nvrtc():
            pytest.skip("no CUDA GPU and no NVRTC")
        return False
    return True


def build_and_run(s_or_func, args, target, inputs, outputs, **kw):
    """Builds, runs when the target can (for CUDA without a GPU: checks the PTX) and
    returns the outputs, or None when nothing ran."""
    runs = device_or_skip(target)
    f = tdsl.build(s_or_func, args, target=target, **kw) if args is not None \
        else tdsl.build(s_or_func, target=target, **kw)
    if not runs:
        assert ".entry" in f.get_source("ptx")
        return None
    f(*inputs, *outputs)
    return outputs


# ------------------------------------------------------------------------- test_reduce.py

@pytest.mark.parametrize("reducer,np_reducer", [(te.sum, np.sum), (te.min, np.amin),
                                                (te.max, np.amax)])
@pytest.mark.parametrize("target", GPU_TARGETS)
def test_reduce_prims(reducer, np_reducer, target):
    n, m = te.size_var("n"), te.size_var("m")
    A = te.placeholder((n, m), name="A")
    R = te.compute((n,), lambda i: tir.select((i > 1), 1, 0), name="R")
    k = te.reduce_axis((0, m))
    B = te.compute((n,), lambda i: reducer(A[i, k], axis=k, where=(R[i] == 1)), name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=1)
    s[B].bind(xo, te.thread_axis("blockIdx.x"))
    s[B].bind(xi, te.thread_axis("threadIdx.x"))
    s[R].compute_inline()
    x = rng.uniform(size=(102, 29)).astype("float32")
    out = build_and_run(s, [A, B], target, [x], [np.zeros(102, "float32")], name="myreduce")
    if out is not None:
        npy, res = out[0], np_reducer(x, axis=1)
        npy[:2] = 0
        res[:2] = 0
        np.testing.assert_allclose(npy, res, rtol=1e-4)


def test_init_imm():
    n = 1027
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, n))
    B = te.compute((), lambda: te.sum(A[k], axis=k, init=10.0), name="B")
    s = te.create_schedule(B.op)
    fsum = tdsl.build(tdsl.lower(s, args=[A, B]), target="llvm", name="mysum")
    a, b = rng.uniform(size=(n,)).astype("float32"), np.zeros((), "float32")
    fsum(a, b)
    np.testing.assert_allclose(b, 10.0 + a.sum(), rtol=1e-4)


@pytest.mark.parametrize("factor", [False, True])
def test_init_and_rfactor_init(factor):
    n = 67
    A = te.placeholder((n, n), name="A")
    C = te.placeholder((n, n), name="C")
    I = te.placeholder((n, n), name="I")
    k = te.reduce_axis((0, n))
    B = te.compute((n, n), lambda i, j: te.sum(A[i, k] * C[k, j], axis=k, init=I[i, j]),
                   name="B")
    s = te.create_schedule(B.op)
    if factor:
        kf, _ = s[B].split(k, nparts=4)
        BF = s.rfactor(B, kf, 1)
        s[BF].parallel(BF.op.axis[0])
    f = tdsl.build(tdsl.lower(s, args=[A, C, I, B]), target="llvm", name="mmult")
    a, c, i = (rng.uniform(size=(n, n)).astype("float32") for _ in range(3))
    b = np.zeros((n, n), "float32")
    f(a, c, i, b)
    np.testing.assert_allclose(b, i + a @ c, rtol=1e-4)


@pytest.mark.parametrize("shape,factor_axis", [((), 0), ((1,), 1)])
def test_rfactor(shape, factor_axis):
    n = 1027
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, n))
    B = te.compute(shape, lambda *_: te.sum(A[k], axis=k), name="B")
    s = te.create_schedule(B.op)
    kf, _ = s[B].split(k, nparts=4)
    BF = s.rfactor(B, kf, factor_axis)
    s[BF].parallel(BF.op.axis[0])
    fsum = tdsl.build(tdsl.lower(s, args=[A, B]), target="llvm", name="mysum")
    a, b = rng.uniform(size=(n,)).astype("float32"), np.zeros(shape, "float32")
    fsum(a, b)
    np.testing.assert_allclose(b, a.sum(), rtol=1e-4)


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_rfactor_threads(target):
    nn, mm = 1027, 10
    A = te.placeholder((mm, nn), name="A")
    k = te.reduce_axis((0, nn))
    nthread = 16
    B = te.compute((mm,), lambda i: te.sum(A[i, k], axis=k, where=(i > 1)), name="B")
    s = te.create_schedule(B.op)
    _, kf = s[B].split(k, factor=nthread)
    BF = s.rfactor(B, kf)
    bx, ty = s[B].split(s[B].op.axis[0], factor=nthread)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(ty, te.thread_axis("threadIdx.y"))
    tx = s[B].op.reduce_axis[0]
    thread_x = te.thread_axis("threadIdx.x")
    s[B].bind(tx, thread_x)
    s[BF].compute_at(s[B], tx)
    s[B].set_store_predicate(thread_x.var.equal(0))
    fapi = te.lower(s, args=[A, B])
    a = rng.uniform(size=(mm, nn)).astype("float32")
    out = build_and_run(fapi, None, target, [a], [np.zeros(mm, "float32")], name="mysum")
    if out is not None:
        res = a.sum(axis=1)
        res[:2] = 0
        np.testing.assert_allclose(out[0], res, rtol=1e-4)


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_rfactor_elemwise_threads(target):
    n, m = 1025, 10
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n))
    nthread = 16
    B = te.compute((m,), lambda i: te.sum(A[i, k], axis=k), name="B")
    BB = te.compute((m,), lambda i: B[i] + 1, name="BB")
    C = te.compute((m,), lambda i: BB[i] + 1, name="C")
    s = te.create_schedule(C.op)
    s[BB].compute_inline()
    bx, ty = s[C].split(s[C].op.axis[0], factor=nthread)
    _, kf = s[B].split(k, factor=nthread)
    BF = s.rfactor(B, kf)
    s[B].compute_at(s[C], ty)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    tx = s[B].op.reduce_axis[0]
    thread_x = te.thread_axis("threadIdx.x")
    s[B].bind(tx, thread_x)
    s[BF].compute_at(s[B], tx)
    # thread_x is shared across the reductions: only one thread writes back
    s[B].set_store_predicate(thread_x.var.equal(0))
    s[C].set_store_predicate(thread_x.var.equal(0))
    fapi = te.lower(s, args=[A, C])
    a = rng.uniform(size=(m, n)).astype("float32")
    out = build_and_run(fapi, None, target, [a], [np.zeros(m, "float32")], name="mysum")
    if out is not None:
        np.testing.assert_allclose(out[0], a.sum(axis=1) + 2, rtol=1e-4)


def _argmax():
    def fcombine(x, y):
        lhs = tir.select((x[1] >= y[1]), x[0], y[0])
        rhs = tir.select((x[1] >= y[1]), x[1], y[1])
        return lhs, rhs

    def fidentity(t0, t1):
        return tir.const(-1, t0), te.min_value(t1)

    return te.comm_reducer(fcombine, fidentity, name="argmax")


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_argmax(target):
    argmax = _argmax()
    m, n = te.size_var("m"), te.size_var("n")
    idx = te.placeholder((m, n), name="idx", dtype="int32")
    val = te.placeholder((m, n), name="val", dtype="float32")
    k = te.reduce_axis((0, n), "k")
    T0, T1 = te.compute((m,), lambda i: argmax((idx[i, k], val[i, k]), axis=k), name="T")
    s = te.create_schedule(T0.op)
    fapi = tdsl.lower(s, args=[idx, val, T0, T1])
    fargmax = tdsl.build(fapi, target=target, name="argmax")
    height, width = 12, 16
    np_idx = np.repeat(np.arange(width, dtype="int32").reshape(1, width), height, axis=0)
    np_val = rng.uniform(size=(height, width)).astype("float32")
    res0, res1 = np.zeros(height, "int32"), np.zeros(height, "float32")
    fargmax(np_idx, np_val, res0, res1)
    np.testing.assert_array_equal(res0, np.argmax(np_val, axis=1))
    np.testing.assert_array_equal(res1, np.max(np_val, axis=1))


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_rfactor_argmax(target):
    argmax = _argmax()
    width, height = 1027, 10
    A0 = te.placeholder((height, width), name="A0", dtype="int32")
    A1 = te.placeholder((height, width), name="A1", dtype="float32")
    k = te.reduce_axis((0, width))
    B0, B1 = te.compute((height,), lambda i: argmax((A0[i, k], A1[i, k]), axis=k), name="B")
    s = te.create_schedule(B0.op)
    nthread = 16
    _, kf = s[B0].split(k, factor=nthread)
    BF0, _ = s.rfactor(B0, kf)
    bx, ty = s[B0].split(s[B0].op.axis[0], factor=nthread)
    s[B0].bind(bx, te.thread_axis("blockIdx.x"))
    s[B0].bind(ty, te.thread_axis("threadIdx.y"))
    tx = s[B0].op.reduce_axis[0]
    thread_x = te.thread_axis("threadIdx.x")
    s[B0].bind(tx, thread_x)
    s[BF0.op].compute_at(s[B0], tx)
    s[B0].set_store_predicate(thread_x.var.equal(0))
    fapi = te.lower(s, args=[A0, A1, B0, B1])
    np_idx = np.repeat(np.arange(width, dtype="int32").reshape(1, width), height, axis=0)
    np_val = rng.uniform(size=(height, width)).astype("float32")
    out = build_and_run(fapi, None, target, [np_idx, np_val],
                        [np.zeros(height, "int32"), np.zeros(height, "float32")], name="argmax")
    if out is not None:
        np.testing.assert_array_equal(out[0], np.argmax(np_val, axis=1))
        np.testing.assert_array_equal(out[1], np.max(np_val, axis=1))


@pytest.mark.parametrize("m,n", [(32, 256), (10, 20)])
@pytest.mark.parametrize("target", GPU_TARGETS)
def test_warp_reduction1(target, m, n):
    nthx, nthy = 32, 4
    block_x = te.thread_axis("blockIdx.x")
    thread_x = te.thread_axis((0, nthx), "threadIdx.x")
    thread_y = te.thread_axis((0, nthy), "threadIdx.y")
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n))
    B = te.compute((m,), lambda i: te.max(A[i][k], axis=k), name="B")
    s = te.create_schedule(B.op)
    k = s[B].op.reduce_axis[0]
    ko, _ = s[B].split(k, nparts=nthx)
    s[B].bind(ko, thread_x)
    xo, xi = s[B].split(s[B].op.axis[0], factor=nthy)
    s[B].bind(xi, thread_y)
    s[B].bind(xo, block_x)
    tdsl.lower(s, [A, B])
    a = rng.uniform(size=(m, n)).astype("float32")
    out = build_and_run(s, [A, B], target, [a], [np.zeros(m, "float32")],
                        name="warp_reduction")
    if out is not None:
        np.testing.assert_allclose(out[0], a.max(axis=1), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_warp_reduction2(target):
    def fcombine(x, y):
        return x[0] + y[0], x[1] * y[1]

    def fidentity(t0, t1):
        return tir.const(0, t0), tir.const(1, t1)

    add_mul_reducer = te.comm_reducer(fcombine, fidentity, name="add_mul_reducer")
    m, n = 16, 256
    A0 = te.placeholder((m, n), name="A0", dtype="float32")
    A1 = te.placeholder((m, n), name="Al", dtype="float32")
    k = te.reduce_axis((0, n), "k")
    T0, T1 = te.compute((m,), lambda i: add_mul_reducer((A0[i, k], A1[i, k]), axis=k),
                        name="T")
    nthdx, nthdy = 32, 2
    block_x = te.thread_axis("blockIdx.x")
    thread_x = te.thread_axis((0, nthdx), "threadIdx.x")
    thread_y = te.thread_axis((0, nthdy), "threadIdx.y")
    s = te.create_schedule(T0.op)
    ko, _ = s[T0].split(k, nparts=nthdx)
    xo, xi = s[T0].split(s[T0].op.axis[0], factor=nthdy)
    s[T0].bind(ko, thread_x)
    s[T0].bind(xi, thread_y)
    s[T0].bind(xo, block_x)
    a0 = rng.uniform(size=(m, n)).astype("float32")
    a1 = rng.uniform(0.99, 1.01, size=(m, n)).astype("float32")   # a product that stays finite
    out = build_and_run(s, [A0, A1, T0, T1], target, [a0, a1],
                        [np.zeros(m, "float32"), np.zeros(m, "float32")], name="reduction")
    if out is not None:
        np.testing.assert_allclose(out[0], a0.sum(axis=1), rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(out[1], np.prod(a1, axis=1), rtol=1e-3, atol=1e-3)


# -------------------------------------------------------------------------- test_ewise.py

@pytest.mark.parametrize("target", GPU_TARGETS)
def test_exp(target):
    n = 1024
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda *i: te.exp(A(*i)), name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=8)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    a = rng.uniform(size=n).astype("float32")
    out = build_and_run(s, [A, B], target, [a], [np.zeros(n, "float32")], name="myexp")
    if out is not None:
        np.testing.assert_allclose(out[0], np.exp(a), rtol=1e-5)


@pytest.mark.parametrize("target", ["llvm"] + GPU_TARGETS)
def test_fmod(target):
    n = te.size_var("n")
    A = te.placeholder((n,), name="A", dtype="float32")
    B = te.placeholder((n,), name="B", dtype="float32")
    C = te.compute(A.shape, lambda *i: te.fmod(A(*i), B(*i)), name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=8)
    if target != "llvm":
        s[C].bind(bx, te.thread_axis("blockIdx.x"))
        s[C].bind(tx, te.thread_axis("threadIdx.x"))
    else:
        s[C].vectorize(tx)
    a_np = (rng.uniform(size=1024) * 256).astype("float32")
    b_np = (rng.uniform(size=1024) * 256).astype("float32")
    b_np += (b_np < 2.0) * 2
    a_np[np.abs(np.fmod(a_np, b_np)) < 1] += 1
    out = build_and_run(s, [A, B, C], target, [a_np, b_np], [np.zeros(1024, "float32")],
                        name="myfmod")
    if out is not None:
        np.testing.assert_allclose(out[0], np.mod(a_np, b_np), rtol=1e-5)


@pytest.mark.parametrize("target", GPU_TARGETS)
def test_multiple_cache_write(target):
    n = 1024
    A0 = te.placeholder((n,), name="A0", dtype="float32")
    A1 = te.placeholder((n,), name="A1", dtype="float32")
    B0, B1 = te.compute((n,), lambda *i: (A0(*i) + A1(*i), A0(*i) * A1(*i)), name="B")
    C = te.compute((n,), lambda *i: B0(*i) + B1(*i), name="C")
    s = te.create_schedule(C.op)
    B0_cache, _ = s.cache_write([B0, B1], "local")
    bx, tx = s[C].split(C.op.axis[0], factor=8)
    s[B0].compute_at(s[C], bx)
    s[B0_cache].compute_at(s[C], bx)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    a0, a1 = rng.uniform(size=n).astype("float32"), rng.uniform(size=n).astype("float32")
    out = build_and_run(s, [A0, A1, C], target, [a0, a1], [np.zeros(n, "float32")],
                        name="multiple_cache_write")
    if out is not None:
        np.testing.assert_allclose(out[0], a0 + a1 + a0 * a1, rtol=1e-5)


def test_log_pow_llvm():
    n = te.size_var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda *i: te.power(te.log(A(*i)), 2.0), name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=32)
    flog = tdsl.build(s, [A, B], "llvm", name="mylog")
    a = rng.uniform(size=1028).astype("float32")
    b = np.zeros(1028, "float32")
    res = flog.time_evaluator(number=1, repeat=10)(a, b)
    assert len(res.results) == 10
    np.testing.assert_allclose(b, np.power(np.log(a), 2.0), rtol=1e-5)


@pytest.mark.parametrize("dtype", ["uint32", "uint64"])
@pytest.mark.parametrize("target", ["llvm"] + GPU_TARGETS)
def test_popcount(target, dtype):
    n = 1024
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.compute(A.shape, lambda *i: tir.popcount(A(*i)), name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=8)
    if target != "llvm":
        s[B].bind(bx, te.thread_axis("blockIdx.x"))
        s[B].bind(tx, te.thread_axis("threadIdx.x"))
    a = rng.integers(low=0, high=1000, size=n, dtype=dtype)
    out = build_and_run(s, [A, B], target, [a], [np.zeros(n, dtype)])
    if out is not None:
        np.testing.assert_array_equal(out[0], [bin(x).count("1") for x in a])


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "uint64"])
@pytest.mark.parametrize("target", GPU_TARGETS)
def test_add(target, dtype):
    n = te.size_var("n")
    A = te.placeholder((n,), name="A", dtype=dtype)
    B = te.placeholder((n,), name="B", dtype=dtype)
    C = te.compute(A.shape, lambda *i: A(*i) + B(*i), name="C")
    s = te.create_schedule(C.op)
    num_thread = 16
    bx, x = s[C].split(C.op.axis[0], factor=num_thread * 4)
    tx, x = s[C].split(x, nparts=num_thread)
    _, x = s[C].split(x, factor=4)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].vectorize(x)
    a = (rng.uniform(size=1024) * 256).astype(dtype)
    b = (rng.uniform(size=1024) * 256).astype(dtype)
    out = build_and_run(s, [A, B, C], target, [a, b], [np.zeros(1024, dtype)], name="myadd")
    if out is not None:
        np.testing.assert_allclose(out[0], a + b, rtol=1e-6)


# --------------------------------------------------------------------------- test_gemm.py

@pytest.mark.parametrize("target", GPU_TARGETS)
def test_gemm(target):
    nn = 128                                  # TVM: 1024
    n = m = l = nn
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((m, l), name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda ii, jj: te.sum(A[ii, k] * B[jj, k], axis=k), name="CC")
    s = te.create_schedule(C.op)
    scale, num_thread = 8, 8
    block_factor = scale * num_thread
    block_x, thread_x = te.thread_axis("blockIdx.x"), te.thread_axis("threadIdx.x")
    block_y, thread_y = te.thread_axis("blockIdx.y"), te.thread_axis("threadIdx.y")
    CC = s.cache_write(C, "local")
    AA = s.cache_read(A, "shared", [CC])
    BB = s.cache_read(B, "shared", [CC])
    by, yi = s[C].split(C.op.axis[0], factor=block_factor)
    bx, xi = s[C].split(C.op.axis[1], factor=block_factor)
    s[C].reorder(by, bx, yi, xi)
    s[C].bind(by, block_y)
    s[C].bind(bx, block_x)
    ty, yi = s[C].split(yi, nparts=num_thread)
    tx, xi = s[C].split(xi, nparts=num_thread)
    s[C].reorder(ty, tx, yi, xi)
    s[C].bind(ty, thread_y)
    s[C].bind(tx, thread_x)
    yo, xo = CC.op.axis
    s[CC].reorder(k, yo, xo)
    s[CC].compute_at(s[C], tx)
    s[AA].compute_at(s[CC], k)
    s[BB].compute_at(s[CC], k)
    s[AA].double_buffer()
    s[BB].double_buffer()
    ty, xi = s[AA].split(s[AA].op.axis[0], nparts=num_thread)
    tx, xi = s[AA].split(xi, nparts=num_thread)
    s[AA].bind(ty, thread_y)
    s[AA].bind(tx, thread_x)
    ty, xi = s[BB].split(s[BB].op.axis[0], nparts=num_thread)
    tx, xi = s[BB].split(xi, nparts=num_thread)
    s[BB].bind(ty, thread_y)
    s[BB].bind(tx, thread_x)
    s = s.normalize()
    a = rng.uniform(size=(n, l)).astype("float32")
    b = rng.uniform(size=(m, l)).astype("float32")
    out = build_and_run(s, [A, B, C], target, [a, b], [np.zeros((n, m), "float32")])
    if out is not None:
        np.testing.assert_allclose(out[0], a @ b.T, rtol=1e-5)


# ---------------------------------------------------------------------------- test_dot.py

def test_dot():
    nn = 12
    A = te.placeholder((nn,), name="A")
    B = te.placeholder((nn,), name="B")
    k = te.reduce_axis((0, nn), "k")
    C = te.compute((1,), lambda _: te.sum(A[k] * B[k], axis=k), name="C")
    s = te.create_schedule(C.op)
    f = tdsl.build(tdsl.lower(s, [A, B, C], name="mydot"), target="llvm")
    a, b = rng.uniform(size=(nn,)).astype("float32"), rng.uniform(size=(nn,)).astype("float32")
    c = np.zeros((1,), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, np.dot(a, b), rtol=1e-4)
