"""TVM's gallery tutorials, ported name for name (tvm. -> tdsl., te. -> tdsl.) at small sizes:
the call forms TVM users write run unchanged and agree with numpy."""
import numpy as np
import pytest

import tdsl
from tdsl.contrib import cc
from tdsl.runtime import cuda as rcuda
from tdsl.target import Target

te = tdsl


# ------------------------------------------------------------------ opt_gemm.py
def test_opt_gemm_packed_layout_with_float_shape():
    M = K = N = 64
    bn = 32
    k = te.reduce_axis((0, K), "k")
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    packedB = te.compute((N / bn, K, bn), lambda bigN, k, littleN: B[k, bigN * bn + littleN],
                         name="packedB")
    assert packedB.shape[0] == 2
    C = te.compute((M, N), lambda x, y: te.sum(A[x, k] * packedB[y // bn, k, y % bn], axis=k),
                   name="C")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "global")
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    s[CC].compute_at(s[C], yo)
    xc, yc = s[CC].op.axis
    (kaxis,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kaxis, factor=4)
    s[CC].reorder(ko, xc, ki, yc)
    s[CC].unroll(ki)
    s[CC].vectorize(yc)
    s[C].parallel(xo)
    x, y, z = s[packedB].op.axis
    s[packedB].vectorize(z)
    s[packedB].parallel(x)
    func = tdsl.build(s, [A, B, C], target="llvm", name="mmult")
    rng = np.random.default_rng(0)
    a = rng.random((M, K), dtype="float32")
    b = rng.random((K, N), dtype="float32")
    c = np.zeros((M, N), "float32")
    func(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_non_integral_float_shape_is_named():
    with pytest.raises(tdsl.TdslError, match="shape entry 1 is 2.5"):
        te.placeholder((4, 2.5), name="P")


# ------------------------------------------------------------------ schedule_primitives.py
def test_schedule_primitives_inline_stage_in_args():
    m = te.var("m")
    A = te.placeholder((m,), name="A")
    B = te.compute((m,), lambda i: A[i] + 1, name="B")
    C = te.compute((m,), lambda i: B[i] * 2, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    text = str(tdsl.lower(s, [A, B, C]))
    assert "(A[" in text and "+ 1.0f) * 2.0f" in text     # still inlined into C
    f = tdsl.build(s, [A, B, C])
    a = np.arange(7, dtype="float32")
    b, c = np.zeros_like(a), np.zeros_like(a)
    f(a, b, c)
    np.testing.assert_allclose(b, a + 1)                    # and computed into its argument
    np.testing.assert_allclose(c, (a + 1) * 2)


# ------------------------------------------------------------------ the target context
def test_target_context_sets_the_default_target():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    assert Target.current() is None
    with Target("cuda") as outer:
        assert Target.current() is outer
        with Target("c"):
            assert Target.current().kind == "c"
            f = tdsl.build(s, [A, B])
        assert Target.current() is outer
        g = tdsl.build(s, [A, B])
        assert "kernels" in tdsl.lower(s, [A, B]).attrs
        assert "__global__" in g.get_source()
    assert Target.current() is None
    a = np.arange(64, dtype="float32")
    b = np.zeros_like(a)
    f(a, b)
    np.testing.assert_allclose(b, a * 2)
    with pytest.raises(tdsl.BuildError):
        Target.current(allow_none=False)


def test_target_context_is_per_thread():
    import threading
    seen = []
    with Target("c"):
        t = threading.Thread(target=lambda: seen.append(Target.current()))
        t.start()
        t.join()
    assert seen == [None]


# ------------------------------------------------------------------ tensor_expr_get_started.py
def test_get_started_save_link_load(tmp_path):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    outer, inner = s[C].split(C.op.axis[0], factor=16)
    s[C].parallel(outer)
    s[C].vectorize(inner)
    fadd = tdsl.build(s, [A, B, C], target="llvm", name="myadd")
    a = np.random.default_rng(1).random(1000, dtype="float32")
    b = np.random.default_rng(2).random(1000, dtype="float32")
    c = np.zeros_like(a)
    fadd.time_evaluator(number=3, repeat=1)(a, b, c)
    fadd.save(str(tmp_path / "myadd.o"))
    fadd.save(str(tmp_path / "myadd.ll"))
    fadd.save(str(tmp_path / "myadd.s"))
    assert "define" in (tmp_path / "myadd.ll").read_text()
    cc.create_shared(str(tmp_path / "myadd.so"), [str(tmp_path / "myadd.o")])
    fadd1 = tdsl.load_module(str(tmp_path / "myadd.so"))
    c = np.zeros_like(a)
    fadd1(a, b, c)
    np.testing.assert_allclose(c, a + b)
    data = bytearray((tmp_path / "myadd.so").read_bytes())
    data[len(data) // 3] ^= 0xFF
    (tmp_path / "bad.so").write_bytes(bytes(data))
    with pytest.raises(tdsl.LibraryError):
        tdsl.load_module(str(tmp_path / "bad.so"))
    with pytest.raises(tdsl.BuildError):
        fadd.save(str(tmp_path / "myadd.bin"))


# ------------------------------------------------------------------ scan.py
def _cumsum_scan():
    m = te.var("m")
    n = te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update = te.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i])
    s_scan = tdsl.scan(s_init, s_update, s_state, inputs=[X])
    return X, s_init, s_update, s_scan


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_scan_cumsum(target):
    X, s_init, s_update, s_scan = _cumsum_scan()
    s = te.create_schedule(s_scan.op)
    xo, xi = s[s_update].split(s_update.op.axis[1], factor=8)
    s[s_update].vectorize(xi)
    s[s_update].parallel(xo)
    f = tdsl.build(s, [X, s_scan], target=target)
    x = np.random.default_rng(3).random((6, 21), dtype="float32")
    out = np.zeros_like(x)
    f(x, out)
    np.testing.assert_allclose(out, np.cumsum(x, axis=0), rtol=1e-5)


def _bind_columns(s, stage, num_thread):
    block_x = te.thread_axis("blockIdx.x")
    thread_x = te.thread_axis("threadIdx.x")
    xo, xi = s[stage].split(stage.op.axis[1], factor=num_thread)
    s[stage].bind(xo, block_x)
    s[stage].bind(xi, thread_x)
    return xo, xi


def _gpu_targets():
    return ["c"] + (["opencl"] if tdsl.opencl(0).exist else [])


@pytest.mark.parametrize("target", ["c", "opencl", "cuda"])
def test_scan_on_gpu_is_one_kernel_with_the_steps_inside(target):
    m = te.var("m")
    n = te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update = te.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i])
    s_scan = tdsl.scan(s_init, s_update, s_state, inputs=[X])
    s = te.create_schedule(s_scan.op)
    num_thread = 256
    block_x = te.thread_axis("blockIdx.x")
    thread_x = te.thread_axis("threadIdx.x")
    xo, xi = s[s_init].split(s_init.op.axis[1], factor=num_thread)
    s[s_init].bind(xo, block_x)
    s[s_init].bind(xi, thread_x)
    xo, xi = s[s_update].split(s_update.op.axis[1], factor=num_thread)
    s[s_update].bind(xo, block_x)
    s[s_update].bind(xi, thread_x)
    func = tdsl.lower(s, [X, s_scan], target=target)
    (kernel,) = func.attrs["kernels"]
    assert "scan.idx" in str(kernel.body)
    if target == "opencl" and not tdsl.opencl(0).exist:
        pytest.skip("no OpenCL device")
    f = tdsl.build(s, [X, s_scan], target=target)
    if target == "cuda":
        src = f.get_source()
        assert src.count("__global__") == 1
        kernel_src = src[src.index("__global__"):]
        assert "for (int scan_idx = 1; scan_idx < m; ++scan_idx)" in kernel_src
        if rcuda.have_nvrtc():
            assert ".entry" in f.get_source("ptx")
        return
    for rows, cols in [(6, 300), (4, 256), (1, 5), (0, 7), (3, 0)]:
        x = np.random.default_rng(rows + cols).random((rows, cols), dtype="float32")
        out = np.full_like(x, np.nan)
        f(x, out)
        np.testing.assert_allclose(out, np.cumsum(x, axis=0), rtol=1e-5)


@pytest.mark.parametrize("at", ["xo", "xi"])
def test_scan_multi_stage_on_gpu(at):
    # TVM's multi-stage scan: s1 attached in s2 per block (shared, barriers inside the
    # step loop) or per thread (a register)
    m = te.var("m")
    n = te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update_s1 = te.compute((m, n), lambda t, i: s_state[t - 1, i] * 2, name="s1")
    s_update_s2 = te.compute((m, n), lambda t, i: s_update_s1[t, i] + X[t, i], name="s2")
    s_scan = tdsl.scan(s_init, s_update_s2, s_state, inputs=[X])
    s = te.create_schedule(s_scan.op)
    _bind_columns(s, s_init, 32)
    xo, xi = _bind_columns(s, s_update_s2, 32)
    if at == "xo":
        s[s_update_s1].compute_at(s[s_update_s2], xo)
        s[s_update_s1].bind(s_update_s1.op.axis[1], te.thread_axis("threadIdx.x"))
    else:
        s[s_update_s1].compute_at(s[s_update_s2], xi)
    x = np.random.default_rng(5).random((5, 40), dtype="float32")
    ref = np.zeros_like(x)
    ref[0] = x[0]
    for t in range(1, 5):
        ref[t] = ref[t - 1] * 2 + x[t]
    for target in _gpu_targets():
        f = tdsl.build(s, [X, s_scan], target=target)
        out = np.zeros_like(x)
        f(x, out)
        np.testing.assert_allclose(out, ref, rtol=1e-5)
    if rcuda.have_nvrtc():
        src = tdsl.build(s, [X, s_scan], target="cuda").get_source()
        assert ("__shared__" in src) == (at == "xo")


def test_scan_two_states_on_gpu():
    m = te.var("m")
    n = te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state1 = te.placeholder((m, n))
    s_state2 = te.placeholder((m, n))
    s_init1 = te.compute((1, n), lambda _, i: X[0, i])
    s_init2 = te.compute((1, n), lambda _, i: tdsl.const(0.0, "float32"))
    s_update1 = te.compute((m, n), lambda t, i: s_state1[t - 1, i] + X[t, i])
    s_update2 = te.compute((m, n), lambda t, i: s_state2[t - 1, i] + s_update1[t, i])
    r1, r2 = tdsl.scan([s_init1, s_init2], [s_update1, s_update2], [s_state1, s_state2])
    s = te.create_schedule(r1.op)
    for stage in (s_init1, s_init2, s_update1, s_update2):
        _bind_columns(s, stage, 8)
    x = np.random.default_rng(7).random((4, 11), dtype="float32")
    c = np.cumsum(x, axis=0)
    ref2 = np.cumsum(c, axis=0) - c[0]
    for target in _gpu_targets():
        f = tdsl.build(s, [X, r1, r2], target=target)
        o1, o2 = np.zeros_like(x), np.zeros_like(x)
        f(x, o1, o2)
        np.testing.assert_allclose(o1, c, rtol=1e-5)
        np.testing.assert_allclose(o2, ref2, rtol=1e-5, atol=1e-6)


def test_scan_on_gpu_refuses_what_one_kernel_cannot_do():
    X, s_init, s_update, s_scan = _cumsum_scan()
    s = te.create_schedule(s_scan.op)
    _bind_columns(s, s_init, 16)
    _bind_columns(s, s_update, 8)
    with pytest.raises(tdsl.LoweringError, match="bind the init and every update the same way"):
        tdsl.lower(s, [X, s_scan], target="cuda")

    # each step reads the previous row reversed: columns other threads wrote
    m = te.var("m")
    n = te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update = te.compute((m, n), lambda t, i: s_state[t - 1, n - 1 - i] + X[t, i])
    s_scan = tdsl.scan(s_init, s_update, s_state, inputs=[X])
    s = te.create_schedule(s_scan.op)
    _bind_columns(s, s_init, 8)
    _bind_columns(s, s_update, 8)
    for target in ["c", "opencl", "cuda"]:
        with pytest.raises(tdsl.LoweringError, match="only the columns it writes itself"):
            tdsl.lower(s, [X, s_scan], target=target)
    s = te.create_schedule(s_scan.op)   # the same scan unbound runs on the CPU
    f = tdsl.build(s, [X, s_scan], target="c")
    x = np.random.default_rng(8).random((4, 6), dtype="float32")
    out = np.zeros_like(x)
    f(x, out)
    ref = x.copy()
    for t in range(1, 4):
        ref[t] = ref[t - 1][::-1] + x[t]
    np.testing.assert_allclose(out, ref, rtol=1e-5)

    # an RNN cell: every hidden unit reads all of the previous hidden state
    T, H = 4, 16
    U = te.placeholder((H, H), name="U")
    h = te.placeholder((T, H), name="h")
    h0 = te.compute((1, H), lambda _, j: tdsl.const(0.0, "float32"), name="h0")
    k = te.reduce_axis((0, H), name="k")
    uh = te.compute((T, H), lambda t, j: te.sum(U[j, k] * h[t - 1, k], axis=k), name="uh")
    hn = te.compute((T, H), lambda t, j: te.tanh(uh[t, j]) + 1.0, name="hn")
    hs = tdsl.scan(h0, hn, h)
    s = te.create_schedule(hs.op)
    s[uh].compute_at(s[hn], hn.op.axis[1])
    s[h0].bind(h0.op.axis[1], te.thread_axis("threadIdx.x"))
    s[hn].bind(hn.op.axis[1], te.thread_axis("threadIdx.x"))
    with pytest.raises(tdsl.LoweringError, match=r"reads 'scan' at \[k\]"):
        tdsl.lower(s, [U, hs], target="opencl")


def test_scan_with_no_rows_writes_nothing():
    # m == 0: the init's row does not exist either (TVM would write it out of bounds)
    X, s_init, s_update, s_scan = _cumsum_scan()
    s = te.create_schedule(s_scan.op)
    f = tdsl.build(s, [X, s_scan], bounds_check=True)
    out = np.zeros((0, 5), "float32")
    f(np.zeros((0, 5), "float32"), out)
    x = np.random.default_rng(9).random((1, 5), dtype="float32")
    out = np.zeros_like(x)
    f(x, out)
    np.testing.assert_allclose(out, x)
    # a constant init with no input to read: its writes alone are guarded
    m = te.var("m")
    s_state = te.placeholder((m, 3))
    z = te.compute((1, 3), lambda _, i: tdsl.const(1.0, "float32"), name="z")
    u = te.compute((m, 3), lambda t, i: s_state[t - 1, i] * 2.0, name="u")
    r = tdsl.scan(z, u, s_state)
    f = tdsl.build(te.create_schedule(r.op), [r], bounds_check=True)
    f(np.zeros((0, 3), "float32"))
    out = np.zeros((3, 3), "float32")
    f(out)
    np.testing.assert_allclose(out, [[1] * 3, [2] * 3, [4] * 3])


def test_scan_multi_stage_and_multiple_states():
    m = te.var("m")
    n = te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update_s1 = te.compute((m, n), lambda t, i: s_state[t - 1, i] * 2, name="s1")
    s_update_s2 = te.compute((m, n), lambda t, i: s_update_s1[t, i] + X[t, i], name="s2")
    s_scan = tdsl.scan(s_init, s_update_s2, s_state, inputs=[X])
    s = te.create_schedule(s_scan.op)
    xo, xi = s[s_update_s2].split(s_update_s2.op.axis[1], factor=32)
    s[s_update_s1].compute_at(s[s_update_s2], xo)
    f = tdsl.build(s, [X, s_scan])
    x = np.random.default_rng(5).random((5, 40), dtype="float32")
    out = np.zeros_like(x)
    f(x, out)
    ref = np.zeros_like(x)
    ref[0] = x[0]
    for t in range(1, 5):
        ref[t] = ref[t - 1] * 2 + x[t]
    np.testing.assert_allclose(out, ref, rtol=1e-5)

    # s1 left at root reads the state before the steps exist
    s = te.create_schedule(s_scan.op)
    with pytest.raises(tdsl.ScheduleError, match="reads the scan state"):
        tdsl.lower(s, [X, s_scan])

    # two states: the second accumulates the first's column 0
    l = te.var("l")
    s_state1 = te.placeholder((m, n))
    s_state2 = te.placeholder((m, l))
    s_init1 = te.compute((1, n), lambda _, i: X[0, i])
    s_init2 = te.compute((1, l), lambda _, i: tdsl.const(0.0, "float32"))
    s_update1 = te.compute((m, n), lambda t, i: s_state1[t - 1, i] + X[t, i])
    s_update2 = te.compute((m, l), lambda t, i: s_state2[t - 1, i] + s_state1[t - 1, 0])
    r1, r2 = tdsl.scan([s_init1, s_init2], [s_update1, s_update2], [s_state1, s_state2])
    f = tdsl.build(te.create_schedule(r1.op), [X, r1, r2])
    o1, o2 = np.zeros_like(x), np.zeros((5, 3), "float32")
    f(x, o1, o2)
    c = np.cumsum(x, axis=0)
    np.testing.assert_allclose(o1, c, rtol=1e-5)
    ref2 = np.zeros((5, 3), "float32")
    for t in range(1, 5):
        ref2[t] = ref2[t - 1] + c[t - 1, 0]
    np.testing.assert_allclose(o2, ref2, rtol=1e-5)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_scan_rnn_cell(target):
    T, H, D = 6, 16, 8
    Xr = te.placeholder((T, D), name="Xr")
    W = te.placeholder((H, D), name="W")
    U = te.placeholder((H, H), name="U")
    h = te.placeholder((T, H), name="h")
    h0 = te.compute((1, H), lambda _, j: tdsl.const(0.0, "float32"), name="h0")
    k = te.reduce_axis((0, H), name="k")
    d = te.reduce_axis((0, D), name="d")
    uh = te.compute((T, H), lambda t, j: te.sum(U[j, k] * h[t - 1, k], axis=k), name="uh")
    wx = te.compute((T, H), lambda t, j: te.sum(W[j, d] * Xr[t, d], axis=d), name="wx")
    hn = te.compute((T, H), lambda t, j: te.tanh(uh[t, j] + wx[t, j]), name="hn")
    hs = tdsl.scan(h0, hn, h)
    s = te.create_schedule(hs.op)
    s[uh].compute_at(s[hn], hn.op.axis[1])
    jo, ji = s[hn].split(hn.op.axis[1], factor=8)
    s[hn].vectorize(ji)
    f = tdsl.build(s, [Xr, W, U, hs], target=target)
    rng = np.random.default_rng(6)
    xr = rng.random((T, D), dtype="float32")
    w = rng.random((H, D), dtype="float32") * 0.3
    u = rng.random((H, H), dtype="float32") * 0.3
    o = np.zeros((T, H), "float32")
    f(xr, w, u, o)
    ref = np.zeros((T, H), "float32")
    for t in range(1, T):
        ref[t] = np.tanh(u @ ref[t - 1] + w @ xr[t])
    np.testing.assert_allclose(o, ref, atol=1e-5)


def test_scan_mistakes_are_named():
    X, s_init, s_update, s_scan = _cumsum_scan()
    with pytest.raises(tdsl.TdslError, match="the state must be a tdsl.placeholder"):
        tdsl.scan(s_init, s_update, s_update)
    s = te.create_schedule(s_scan.op)
    state = s_scan.op.state_placeholder[0]
    with pytest.raises(tdsl.LoweringError, match="pass the scan's output"):
        tdsl.lower(s, [X, state, s_scan])


# ------------------------------------------------------------------ extern_op.py
# tvm.tir.call_packed -> tdsl.call_packed, tvm.register_func -> tdsl.register_func
def _extern_matmul_bias(n=64, l=16, m=23):
    bias = te.var("bias", dtype="float32")
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((l, m), name="B")
    C = te.extern(
        (n, m),
        [A, B],
        lambda ins, outs: tdsl.call_packed(
            "tvm.contrib.cblas.matmul", ins[0], ins[1], outs[0], False, False
        ),
        name="C",
    )
    return A, B, C, bias


def test_extern_op_cblas_matmul():
    n, l, m = 64, 16, 23
    A, B, C, bias = _extern_matmul_bias(n, l, m)
    D = te.compute(C.shape, lambda i, j: C[i, j] + bias, name="D")
    s = te.create_schedule(D.op)
    assert 'call_packed("tvm.contrib.cblas.matmul", A, B, C, False, False)' in \
        str(tdsl.lower(s, [A, B, D, bias]))
    dev = tdsl.cpu(0)
    f = tdsl.build(s, [A, B, D, bias], "llvm")
    a = tdsl.nd.array(np.random.uniform(size=(n, l)).astype(A.dtype), dev)
    b = tdsl.nd.array(np.random.uniform(size=(l, m)).astype(B.dtype), dev)
    d = tdsl.nd.array(np.zeros((n, m), dtype=D.dtype), dev)
    bb = 10.0
    f(a, b, d, bb)
    np.testing.assert_allclose(d.numpy(), np.dot(a.numpy(), b.numpy()) + 10, rtol=1e-5)

    from tdsl.contrib import cblas     # the contrib wrapper: the same stage
    C = cblas.matmul(A, B)
    D = te.compute(C.shape, lambda i, j: C[i, j] + bias, name="D")
    s = te.create_schedule(D.op)
    f = tdsl.build(s, [A, B, D, bias], "llvm")
    d2 = np.zeros((n, m), dtype="float32")
    f(a.numpy(), b.numpy(), d2, bb)
    np.testing.assert_allclose(d2, d.numpy(), rtol=1e-6)


@pytest.mark.parametrize("transa,transb,dtype", [(True, False, "float32"),
                                                 (False, True, "float64")])
def test_extern_cblas_transposes(transa, transb, dtype):
    from tdsl.contrib import cblas
    A = te.placeholder((7, 5) if transa else (5, 7), name="A", dtype=dtype)
    B = te.placeholder((9, 7) if transb else (7, 9), name="B", dtype=dtype)
    C = cblas.matmul(A, B, transa, transb)
    f = tdsl.build(te.create_schedule(C.op), [A, B, C])
    rng = np.random.default_rng(1)
    a, b = rng.random(A.shape).astype(dtype), rng.random(B.shape).astype(dtype)
    c = np.zeros((5, 9), dtype)
    f(a, b, c)
    np.testing.assert_allclose(c, (a.T if transa else a) @ (b.T if transb else b), rtol=1e-5)


def test_extern_op_python_callback():
    n = 100
    seen = []

    @tdsl.register_func("tvm.contrib.my_tvm_addone", override=True)
    def my_tvm_addone(x, y):
        seen.append((type(x), type(y)))
        y[:] = x + 1

    A = te.placeholder((n,), name="A")
    B = te.extern(
        A.shape,
        [A],
        lambda ins, outs: tdsl.call_packed("tvm.contrib.my_tvm_addone", ins[0], outs[0]),
        name="C",
    )
    s = te.create_schedule(B.op)
    f = tdsl.build(s, [A, B], "llvm")
    dev = tdsl.cpu(0)
    a = tdsl.nd.array(np.random.uniform(size=(n,)).astype(A.dtype), dev)
    b = tdsl.nd.array(np.random.uniform(size=(n,)).astype(B.dtype), dev)
    f(a, b)
    np.testing.assert_allclose(b.numpy(), a.numpy() + 1, rtol=1e-5)
    assert seen == [(np.ndarray, np.ndarray)]
    assert f.externs["tvm.contrib.my_tvm_addone"] is not None    # kept alive by the module

    # registered again: new builds call the new function, the old module the old one
    tdsl.register_func("tvm.contrib.my_tvm_addone", lambda x, y: y.__setitem__(slice(None), x * 2),
                       override=True)
    g = tdsl.build(s, [A, B], "llvm")
    x = np.arange(n, dtype="float32")
    y = np.zeros(n, "float32")
    g(x, y)
    np.testing.assert_array_equal(y, x * 2)
    f(x, y)
    np.testing.assert_array_equal(y, x + 1)


def test_extern_scalars_and_several_outputs():
    got = []
    tdsl.register_func("test.split_scale", lambda x, k, flag, lo, hi: (
        got.append((k, flag)), lo.__setitem__(slice(None), x[:4] * k),
        hi.__setitem__(slice(None), x[4:] * k)), override=True)
    n = te.var("n")
    A = te.placeholder((8,), name="A")
    lo, hi = te.extern([(4,), (4,)], [A], lambda ins, outs: tdsl.call_packed(
        "test.split_scale", ins[0], n * 2 + 1, True, outs[0], outs[1]), name="S")
    E = te.compute((4,), lambda i: lo[i] + hi[i], name="E")
    f = tdsl.build(te.create_schedule(E.op), [A, E, n])
    a = np.arange(8, dtype="float32")
    e = np.zeros(4, "float32")
    f(a, e, 1)
    assert got == [(3, True)]
    np.testing.assert_array_equal(e, (a[:4] + a[4:]) * 3)


def test_extern_composes_with_a_scheduled_stage():
    n, l, m = 64, 16, 48
    A, B, C, bias = _extern_matmul_bias(n, l, m)
    D = te.compute(C.shape, lambda i, j: te.max(C[i, j] + bias, 0.0), name="D")
    s = te.create_schedule(D.op)
    jo, ji = s[D].split(D.op.axis[1], factor=16)
    s[D].vectorize(ji)
    s[D].parallel(D.op.axis[0])
    f = tdsl.build(s, [A, B, D, bias])
    rng = np.random.default_rng(2)
    a = rng.standard_normal((n, l)).astype("float32")
    b = rng.standard_normal((l, m)).astype("float32")
    d = np.zeros((n, m), "float32")
    f(a, b, d, 0.5)
    np.testing.assert_allclose(d, np.maximum(a @ b + 0.5, 0), rtol=1e-4, atol=1e-5)
    assert not [x for x in f.notes if "serially" in x]


def test_extern_c_symbol(tmp_path):
    import shutil
    import subprocess
    cc_ = shutil.which("cc") or shutil.which("gcc")
    if cc_ is None:
        pytest.skip("no C compiler")
    src = tmp_path / "neg.c"
    src.write_text(
        "#include <stdint.h>\n"
        "typedef struct { void *data; const int64_t *shape; int32_t ndim; int32_t dtype; } "
        "tdsl_arg;\n"
        "int32_t negate(const tdsl_arg *args, int32_t nargs) {\n"
        "  if (nargs != 2 || args[1].ndim != 1) return 1;\n"
        "  const float *x = args[0].data; float *y = args[1].data;\n"
        "  for (int64_t i = 0; i < args[0].shape[0]; i++) y[i] = -x[i];\n"
        "  return 0;\n}\n")
    lib = tmp_path / "libneg.so"
    subprocess.run([cc_, "-shared", "-fPIC", "-O2", str(src), "-o", str(lib)], check=True)
    tdsl.register_func("test.negate", "negate", library=str(lib), override=True)
    A = te.placeholder((10,), name="A")
    B = te.extern(A.shape, [A], lambda ins, outs: tdsl.call_packed("test.negate", ins[0], outs[0]),
                  name="B")
    C = te.extern((10, 1), [A], lambda ins, outs: tdsl.call_packed("test.negate", ins[0], outs[0]),
                  name="C")
    f = tdsl.build(te.create_schedule(B.op), [A, B])
    a = np.arange(10, dtype="float32")
    b = np.zeros(10, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, -a)
    g = tdsl.build(te.create_schedule(C.op), [A, C])     # the C function refuses: code 1
    with pytest.raises(tdsl.TdslError, match="'test.negate'.*non-zero"):
        g(a, np.zeros((10, 1), "float32"))
    with pytest.raises(tdsl.TdslError, match="no symbol 'nope'"):
        tdsl.register_func("test.nope", "nope", library=str(lib))


def test_extern_mistakes_are_named():
    A = te.placeholder((4,), name="A")
    B = te.extern(A.shape, [A], lambda ins, outs: tdsl.call_packed("no.such.function", ins[0],
                                                                    outs[0]), name="B")
    with pytest.raises(tdsl.BuildError, match="no function is registered as 'no.such.function'"):
        tdsl.build(te.create_schedule(B.op), [A, B])

    def boom(x, y):
        raise ValueError("boom")
    tdsl.register_func("test.boom", boom, override=True)
    C = te.extern(A.shape, [A], lambda ins, outs: tdsl.call_packed("test.boom", ins[0], outs[0]),
                  name="C")
    f = tdsl.build(te.create_schedule(C.op), [A, C])
    with pytest.raises(tdsl.TdslError, match="'test.boom' raised ValueError: boom"):
        f(np.zeros(4, "float32"), np.zeros(4, "float32"))

    with pytest.raises(tdsl.TdslError, match="already registered"):
        tdsl.register_func("test.boom", boom)
    with pytest.raises(tdsl.TdslError, match="must return tdsl.call_packed"):
        te.extern((4,), [A], lambda ins, outs: ins[0], name="D")
    with pytest.raises(tdsl.TdslError, match="never receives an output"):
        te.extern((4,), [A], lambda ins, outs: tdsl.call_packed("test.boom", ins[0]), name="D")
    Z = te.placeholder((4,), name="Z")
    with pytest.raises(tdsl.TdslError, match="neither an input nor an output"):
        te.extern((4,), [A], lambda ins, outs: tdsl.call_packed("test.boom", Z, outs[0]), name="D")
    with pytest.raises(tdsl.TdslError, match="inputs must be a list of tensors"):
        te.extern((4,), A, lambda ins, outs: tdsl.call_packed("test.boom", outs[0]), name="D")
    with pytest.raises(tdsl.TdslError, match="shape"):
        te.extern((), [A], lambda ins, outs: tdsl.call_packed("test.boom", outs[0]), name="D")
    with pytest.raises(tdsl.TdslError, match="argument 1"):
        tdsl.call_packed("test.boom", A, "text")
    with pytest.raises(tdsl.BuildError, match="'llvm' only"):
        tdsl.build(te.create_schedule(C.op), [A, C], target="c")
    with pytest.raises(tdsl.BuildError, match="registered in this process only"):
        f.export_library("c.so")
    E = te.compute((4,), lambda i: C[i] * 2, name="E")
    s = te.create_schedule(E.op)
    s[C].compute_inline()
    with pytest.raises(tdsl.ScheduleError, match="cannot be inlined or attached"):
        tdsl.build(s, [A, E])


# ------------------------------------------------------------------ intrin_math.py
# tvm.tir.call_pure_extern -> tdsl.call_pure_extern, tvm.ir.register_intrin_lowering ->
# tdsl.register_intrin_lowering(op, target, f, override=...)
def _exp_schedule(gpu=False):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda i: te.exp(A[i]), name="B")
    s = te.create_schedule(B.op)
    if gpu:
        bx, tx = s[B].split(B.op.axis[0], factor=64)
        s[B].bind(bx, te.thread_axis("blockIdx.x"))
        s[B].bind(tx, te.thread_axis("threadIdx.x"))
    return s, A, B


@pytest.fixture
def exp_rules():
    yield
    for target in ("llvm", "c", "cuda"):
        tdsl.remove_intrin_lowering("exp", target)


def test_intrin_math_direct_extern_call_cuda_source():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute(A.shape, lambda i: tdsl.call_pure_extern("float32", "__expf", A[i]), name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    assert 'call_pure_extern("float32", "__expf", A[' in str(tdsl.lower(s, [A, B], target="cuda"))
    f = tdsl.build(s, [A, B], "cuda", name="myexp")
    assert "__expf(A[" in f.get_source()


def test_intrin_math_rule_for_llvm_changes_the_code(exp_rules):
    import math
    s, A, B = _exp_schedule()
    before = tdsl.build(s, [A, B], "llvm")

    def exp_by_exp2(op):
        return te.exp2(op.args[0] * tdsl.const(1 / math.log(2), op.dtype))
    tdsl.register_intrin_lowering("tir.exp", target="llvm", f=exp_by_exp2)
    assert "exp2(A[i] * 1.44269" in str(tdsl.lower(s, [A, B], target="llvm"))
    f = tdsl.build(s, [A, B], "llvm")     # the cached build without the rule is not reused
    assert f.get_source() != before.get_source()
    a = np.random.default_rng(3).uniform(-3, 3, 37).astype("float32")
    b = np.zeros_like(a)
    f(a, b)
    np.testing.assert_allclose(b, np.exp(a), rtol=1e-5)
    with pytest.raises(tdsl.TdslError, match="already has a rule.*override=True"):
        tdsl.register_intrin_lowering("exp", "llvm", exp_by_exp2)

    # a named C function, per lane in a vectorized loop
    tdsl.register_intrin_lowering("exp", "llvm", lambda op: tdsl.call_pure_extern(
        op.dtype, "expf" if op.dtype == "float32" else "exp", op.args[0]), override=True)
    s, A, B = _exp_schedule()
    xo, xi = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(xi)
    f = tdsl.build(s, [A, B], "llvm")
    assert "@expf" in f.get_source()
    f(a, b)
    np.testing.assert_allclose(b, np.exp(a), rtol=1e-6)


def _my_math_rule(op):
    """TVM's my_cuda_math_rule: the libm function of the dtype."""
    if op.dtype == "float32":
        return tdsl.call_pure_extern("float32", "%sf" % op.name, op.args[0])
    if op.dtype == "float64":
        return tdsl.call_pure_extern("float64", op.name, op.args[0])
    return op


def test_intrin_math_rule_for_cuda_and_c(exp_rules):
    s, A, B = _exp_schedule(gpu=True)
    assert "__expf(" in tdsl.build(s, [A, B], "cuda", name="myexp").get_source()
    tdsl.register_intrin_lowering("exp", target="cuda", f=_my_math_rule, override=True)
    src = tdsl.build(s, [A, B], "cuda", name="myexp").get_source()
    assert " expf(A[" in src and "__expf" not in src

    # the "c" target: exp through exp2f, a rule only for "c"
    tdsl.register_intrin_lowering("exp", "c", lambda op: tdsl.call_pure_extern(
        "float32", "exp2f", op.args[0] * tdsl.const(1.4426950408889634, "float32")))
    s, A, B = _exp_schedule()
    f = tdsl.build(s, [A, B], "c")
    assert "exp2f(" in f.get_source()
    a = np.linspace(-4, 4, 29).astype("float32")
    b = np.zeros_like(a)
    f(a, b)
    np.testing.assert_allclose(b, np.exp(a), rtol=1e-5)
    assert "exp2f" not in tdsl.build(s, [A, B], "llvm").get_source("ll-unopt")


def test_intrin_rule_mistakes_are_named(exp_rules):
    s, A, B = _exp_schedule()
    tdsl.register_intrin_lowering("exp", "llvm", lambda op: op.args[0].astype("float64"))
    with pytest.raises(tdsl.LoweringError, match="must return an expression of type float32"):
        tdsl.build(s, [A, B], "llvm")
    with pytest.raises(tdsl.TdslError, match="must be a function"):
        tdsl.register_intrin_lowering("exp", "c", 3)


def test_intrin_math_tutorial_runs_to_the_end():
    """gallery/how_to/work_with_schedules/intrin_math.py, call for call: tvm -> tdsl,
    te -> tdsl, `from tvm.ir import ...` -> `from tdsl.ir import ...`."""
    from tdsl.ir import register_op_attr, register_intrin_lowering
    tvm = tdsl
    try:
        n = te.var("n")
        A = te.placeholder((n,), name="A")
        B = te.compute(A.shape, lambda i: tvm.tir.call_pure_extern("float32", "__expf", A[i]),
                       name="B")
        s = te.create_schedule(B.op)
        num_thread = 64
        bx, tx = s[B].split(B.op.axis[0], factor=num_thread)
        s[B].bind(bx, te.thread_axis("blockIdx.x"))
        s[B].bind(tx, te.thread_axis("threadIdx.x"))
        f = tvm.build(s, [A, B], "cuda", name="myexp")
        assert "__expf(A[" in f.imported_modules[0].get_source()

        n = te.var("n")
        A = te.placeholder((n,), name="A")
        B = te.compute(A.shape, lambda i: te.exp(A[i]), name="B")
        s = te.create_schedule(B.op)
        bx, tx = s[B].split(B.op.axis[0], factor=num_thread)
        s[B].bind(bx, te.thread_axis("blockIdx.x"))
        s[B].bind(tx, te.thread_axis("threadIdx.x"))
        fcuda = tvm.build(s, [A, B], "cuda", name="myexp")
        assert "__expf(" in fcuda.imported_modules[0].get_source()
        fopencl = tvm.build(s, [A, B], "opencl", name="myexp")
        assert "exp(" in fopencl.imported_modules[0].get_source()

        def my_cuda_math_rule(op):
            """Customized CUDA intrinsic lowering rule"""
            assert isinstance(op, tvm.tir.Call)
            name = op.op.name
            assert name.startswith("tir.")
            dispatch_name = name[4:]
            if op.dtype == "float32":
                return tvm.tir.call_pure_extern("float32", "%sf" % dispatch_name, op.args[0])
            elif op.dtype == "float64":
                return tvm.tir.call_pure_extern("float32", dispatch_name, op.args[0])
            else:
                return op

        register_intrin_lowering("tir.exp", target="cuda", f=my_cuda_math_rule, level=99)
        fcuda = tvm.build(s, [A, B], "cuda", name="myexp")
        src = fcuda.imported_modules[0].get_source()
        assert " expf(A[" in src and "__expf" not in src

        def mylog(x):
            """customized log intrinsic function"""
            return tvm.tir.call_intrin(x.dtype, "tir.mylog", x)

        def my_cuda_mylog_rule(op):
            """CUDA lowering rule for log"""
            if op.dtype == "float32":
                return tvm.tir.call_pure_extern("float32", "logf", op.args[0])
            elif op.dtype == "float64":
                return tvm.tir.call_pure_extern("float64", "log", op.args[0])
            else:
                return op

        register_op_attr("tir.mylog", "TCallEffectKind", tvm.tir.CallEffectKind.Pure)
        register_intrin_lowering("tir.mylog", target="cuda", f=my_cuda_mylog_rule, level=99)

        n = te.var("n")
        A = te.placeholder((n,), name="A")
        B = te.compute(A.shape, lambda i: mylog(A[i]), name="B")
        s = te.create_schedule(B.op)
        bx, tx = s[B].split(B.op.axis[0], factor=num_thread)
        s[B].bind(bx, te.thread_axis("blockIdx.x"))
        s[B].bind(tx, te.thread_axis("threadIdx.x"))
        fcuda = tvm.build(s, [A, B], "cuda", name="mylog")
        assert " logf(A[" in fcuda.imported_modules[0].get_source()

        # beyond the tutorial: the op computes, and what is missing is named
        with pytest.raises(tdsl.LoweringError, match="'tir.mylog' has no lowering rule for "
                                                      "target 'c'"):
            tvm.build(s, [A, B], "c", name="mylog")
        register_intrin_lowering("tir.mylog", target="c", f=my_cuda_mylog_rule, level=99)
        f = tvm.build(s, [A, B], "c", name="mylog")
        a = np.linspace(0.5, 9, 131).astype("float32")
        b = np.zeros_like(a)
        f(a, b)
        np.testing.assert_allclose(b, np.log(a), rtol=1e-6)
        register_op_attr("tir.mylog", "default.FLowerIntrinsic",
                         lambda op: te.log(op.args[0]) * 1.0)
        s2 = te.create_schedule(B.op)
        xo, xi = s2[B].split(B.op.axis[0], factor=8)
        s2[B].vectorize(xi)
        f = tvm.build(s2, [A, B], "llvm")
        f(a, b)
        np.testing.assert_allclose(b, np.log(a), rtol=1e-6)
        C = te.compute(A.shape, lambda i: mylog(A[i].astype("float16")), name="C")
        with pytest.raises(tdsl.LoweringError, match="kept the call"):
            tvm.build(te.create_schedule(C.op), [A, C], "c")
    finally:
        for target in ("cuda", "c", "default"):
            tdsl.remove_intrin_lowering("tir.exp", target)
            tdsl.remove_intrin_lowering("tir.mylog", target)


def test_op_attr_levels_and_mistakes():
    from tdsl.ir import get_op_attr, register_op_attr
    try:
        register_op_attr("tir.myop2", "TCallEffectKind", tdsl.tir.CallEffectKind.Pure)
        assert get_op_attr("myop2", "TCallEffectKind") is tdsl.tir.CallEffectKind.Pure
        with pytest.raises(tdsl.TdslError, match="already has 'TCallEffectKind' at level 10"):
            register_op_attr("tir.myop2", "TCallEffectKind", tdsl.tir.CallEffectKind.Opaque)
        register_op_attr("tir.myop2", "TCallEffectKind", tdsl.tir.CallEffectKind.Opaque, level=5)
        assert get_op_attr("myop2", "TCallEffectKind") is tdsl.tir.CallEffectKind.Pure
        register_op_attr("tir.myop2", "TCallEffectKind", tdsl.tir.CallEffectKind.Opaque, level=20)
        assert get_op_attr("myop2", "TCallEffectKind") is tdsl.tir.CallEffectKind.Opaque
        x = te.var("x", "float32")
        assert str(tdsl.tir.call_intrin("float32", "tir.myop2", x)) == "myop2(x)"
        assert str(tdsl.tir.call_intrin("float32", "tir.exp", x)) == "exp(x)"
        with pytest.raises(tdsl.TdslError, match="unknown op 'tir.nosuchop'.*register_op_attr"):
            tdsl.tir.call_intrin("float32", "tir.nosuchop", x)
        with pytest.raises(tdsl.TdslError, match="returns float32, not int32"):
            tdsl.tir.call_intrin("int32", "tir.exp", x)
        with pytest.raises(tdsl.TdslError, match="must be a function"):
            register_op_attr("tir.myop2", "llvm.FLowerIntrinsic", 3)
    finally:
        from tdsl.ir import op
        op.remove_op("myop2")
