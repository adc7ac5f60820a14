"""TVM's imperative path: `tdsl.tir.ir_builder` bodies of `tdsl.extern` stages, compiled
natively on the CPU targets and for the GPU (CUDA source and PTX, the "c" emulation),
checked against numpy; TVM's index names on negative operands."""
import re

import numpy as np
import pytest

import tdsl
from tdsl.fingerprint import fingerprint
from tdsl.runtime import cuda as rcuda

ib_create = tdsl.tir.ir_builder.create
CPU = ["llvm", "c"]


def _prefix_sum(ins, outs):
    """out[i] = x[0] + ... + x[i]: a serial loop carrying the sum in an allocated local."""
    ib = ib_create()
    x, y = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
    acc = ib.allocate(ins[0].dtype, (1,), name="acc", scope="local")
    acc[0] = 0.0
    with ib.for_range(0, ins[0].shape[0], name="i") as i:
        acc[0] = acc[0] + x[i]
        y[i] = acc[0]
    return ib.get()


@pytest.mark.parametrize("target", CPU)
def test_prefix_sum_with_a_carried_local(target):
    n = tdsl.var("n")
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.extern((n,), [A], _prefix_sum, name="B")
    C = tdsl.compute((n,), lambda i: B[i] * 2.0, name="C")   # a scheduled reader of it
    s = tdsl.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[C].vectorize(xi)
    text = str(tdsl.lower(s, [A, C]))
    assert "acc = allocate((1), float32, \"local\")" in text and "B[i] = acc[0]" in text
    f = tdsl.build(s, [A, C], target=target)
    for size in (1, 37, 1000):
        a = np.random.default_rng(size).random(size, dtype="float32")
        c = np.zeros_like(a)
        f(a, c)
        np.testing.assert_allclose(c, 2 * np.cumsum(a), rtol=1e-5)


def _scatter_add(m, n):
    def body(ins, outs):
        ib = ib_create()
        x, idx, out = (ib.buffer_ptr(t) for t in (ins[0], ins[1], outs[0]))
        with ib.for_range(0, n, name="j") as j:
            out[j] = 0.0
        with ib.for_range(0, m, name="i") as i:
            out[idx[i]] = out[idx[i]] + x[i]
        return ib.get()
    return body


@pytest.mark.parametrize("target", CPU)
def test_scatter_add_and_an_index_out_of_range(target, monkeypatch):
    m, n = 200, 16
    X = tdsl.placeholder((m,), name="X")
    Idx = tdsl.placeholder((m,), name="Idx", dtype="int32")
    O = tdsl.extern((n,), [X, Idx], _scatter_add(m, n), name="O", dtype="float32")
    s = tdsl.create_schedule(O.op)
    rng = np.random.default_rng(0)
    x = rng.random(m, dtype="float32")
    idx = rng.integers(0, n, m).astype("int32")
    ref = np.zeros(n, "float32")
    np.add.at(ref, idx, x)
    for checked in ("0", "1"):
        monkeypatch.setenv("TDSL_BOUNDS_CHECK", checked)
        f = tdsl.build(s, [X, Idx, O], target=target)
        o = np.zeros(n, "float32")
        f(x, idx, o)
        np.testing.assert_allclose(o, ref, rtol=1e-5)
        for bad_value in (n, -1, 1 << 20):
            bad = idx.copy()
            bad[57] = bad_value
            with pytest.raises(tdsl.BoundsError, match=f"buffer 'O' at flat index {bad_value}"):
                f(x, bad, o)


@pytest.mark.parametrize("target", CPU)
def test_bounds_check_guards_the_body_when_asked(target, monkeypatch):
    """An index off by one that no data decides: caught under TDSL_BOUNDS_CHECK=1."""
    def shifted(ins, outs):
        ib = ib_create()
        x, y = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        with ib.for_range(0, ins[0].shape[0], name="i") as i:
            y[i] = x[i + 1]
        return ib.get()
    n = tdsl.var("n")
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.extern((n,), [A], shifted, name="B")
    s = tdsl.create_schedule(B.op)
    monkeypatch.setenv("TDSL_BOUNDS_CHECK", "1")
    f = tdsl.build(s, [A, B], target=target)
    a = np.arange(9, dtype="float32")
    with pytest.raises(tdsl.BoundsError, match="a load of buffer 'A' at flat index 9"):
        f(a, np.zeros_like(a))


@pytest.mark.parametrize("target", CPU)
def test_parallel_and_vectorized_loops_on_a_2d_buffer(target):
    rows, cols = 37, 64

    def body(ins, outs):
        ib = ib_create()
        a, b = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        with ib.for_range(0, rows, name="r", kind="parallel") as r:
            with ib.for_range(0, cols // 8, name="co") as co:
                with ib.for_range(0, 4, name="cu", kind="unroll") as cu:
                    with ib.for_range(0, 2, name="ci", kind="vectorize") as ci:
                        c = co * 8 + cu * 2 + ci
                        b[r, c] = a[r, c] * 3.0 + tdsl.cast(r, "float32")
        return ib.get()
    A = tdsl.placeholder((rows, cols), name="A")
    B = tdsl.extern(A.shape, [A], body, name="B")
    s = tdsl.create_schedule(B.op)
    text = str(tdsl.lower(s, [A, B]))
    assert "for r in parallel(37)" in text and "for cu in unroll(4)" in text
    assert "for ci in vectorized(2)" in text
    f = tdsl.build(s, [A, B], target=target)
    if target == "llvm":
        assert "<2 x float>" in f.get_source()
    a = np.random.default_rng(1).random((rows, cols), dtype="float32")
    b = np.zeros_like(a)
    f(a, b)
    np.testing.assert_allclose(b, a * 3 + np.arange(rows, dtype="float32")[:, None], rtol=1e-6)


@pytest.mark.parametrize("target", CPU)
def test_if_else_scopes_flat_indices_and_a_shaped_view(target):
    n, m = 6, 10

    def body(ins, outs):
        ib = ib_create()
        a = ib.buffer_ptr(ins[0])
        flat_out = ib.buffer_ptr(outs[0], shape=(n * m,))     # TVM's reshaped pointer
        with ib.for_range(0, n * m, name="k") as k:
            with ib.if_scope(a[k] > 0.5):
                flat_out[k] = a[k]                           # one index into 2-D 'A'
            with ib.else_scope():
                with ib.if_scope(tdsl.indexmod(k, 2) == 0):
                    flat_out[k] = -1.0
                with ib.else_scope():
                    flat_out[k] = a[k] * 0.0 + 7
        return ib.get()
    A = tdsl.placeholder((n, m), name="A")
    B = tdsl.extern(A.shape, [A], body, name="B")
    s = tdsl.create_schedule(B.op)
    f = tdsl.build(s, [A, B], target=target)
    a = np.random.default_rng(2).random((n, m), dtype="float32")
    b = np.zeros_like(a)
    f(a, b)
    k = np.arange(n * m).reshape(n, m)
    np.testing.assert_array_equal(b, np.where(a > 0.5, a, np.where(k % 2 == 0, -1, 7)))


def _gpu_block_sum(nblocks, nthreads):
    """out[b] = sum of the block's elements: a strided loop per thread, a shared buffer,
    and thread 0 adds up the partial sums (tdsl puts the barrier in)."""
    def body(ins, outs):
        ib = ib_create()
        x, out = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        n = ins[0].shape[0]
        bx = tdsl.thread_axis("blockIdx.x")
        tx = tdsl.thread_axis("threadIdx.x")
        ib.scope_attr(bx, "thread_extent", nblocks)
        ib.scope_attr(tx, "thread_extent", nthreads)
        part = ib.allocate("float32", (nthreads,), name="part", scope="shared")
        acc = ib.allocate("float32", (1,), name="acc", scope="local")
        acc[0] = 0.0
        per = tdsl.indexdiv(n + nblocks - 1, nblocks)
        with ib.for_range(0, tdsl.indexdiv(per + nthreads - 1, nthreads), name="k") as k:
            i = bx * per + k * nthreads + tx
            with ib.if_scope(tdsl.all(k * nthreads + tx < per, i < n)):
                acc[0] = acc[0] + x[i]
        part[tx] = acc[0]
        with ib.if_scope(tx.var == 0):
            with ib.for_range(1, nthreads, name="t") as t:
                acc[0] = acc[0] + part[t]
            out[bx] = acc[0]
        return ib.get()
    return body


def _gpu_sum_schedule(nblocks=4, nthreads=32):
    n = tdsl.var("n")
    X = tdsl.placeholder((n,), name="X")
    Y = tdsl.extern((nblocks,), [X], _gpu_block_sum(nblocks, nthreads), name="Y")
    return tdsl.create_schedule(Y.op), X, Y


def test_gpu_builder_kernel_on_the_c_emulation():
    s, X, Y = _gpu_sum_schedule()
    f = tdsl.build(s, [X, Y], target="c")
    for size in (5, 128, 1001):
        x = np.random.default_rng(size).random(size, dtype="float32")
        y = np.zeros(4, "float32")
        f(x, y)
        per = -(-size // 4)
        ref = [x[b * per:(b + 1) * per].sum() for b in range(4)]
        np.testing.assert_allclose(y, ref, rtol=1e-5)


def test_gpu_builder_kernel_as_cuda_and_opencl_source():
    s, X, Y = _gpu_sum_schedule()
    g = tdsl.build(s, [X, Y], target="cuda")
    src = g.get_source()
    assert "__global__" in src and re.search(r"__shared__ .*float part\[32\];", src)
    assert "__syncthreads()" in src          # between the shared stores and thread 0's reads
    assert "blockIdx.x" in src and "threadIdx.x" in src
    if rcuda.have_nvrtc():
        assert ".entry" in g.get_source("ptx")
    cl = tdsl.build(s, [X, Y], target="opencl").get_source()
    assert "__kernel" in cl and "barrier(" in cl


def test_gpu_builder_mistakes_are_named():
    A = tdsl.placeholder((8,), name="A")

    def serial(ins, outs):
        ib = ib_create()
        a, b = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        with ib.for_range(0, 8) as i:
            b[i] = a[i]
        return ib.get()
    B = tdsl.extern((8,), [A], serial, name="B")
    with pytest.raises(tdsl.ScheduleError, match="extern stage 'B': statement 0 of its "
                                                 "ir_builder body does not bind the GPU grid"):
        tdsl.build(tdsl.create_schedule(B.op), [A, B], target="cuda")
    s, X, Y = _gpu_sum_schedule()
    with pytest.raises(tdsl.BuildError, match="cannot be built for the 'llvm' target"):
        tdsl.build(s, [X, Y], target="llvm")
    ib = ib_create()
    with pytest.raises(tdsl.TdslError, match="the node must be a thread axis"):
        ib.scope_attr(tdsl.var("t"), "thread_extent", 4)
    with pytest.raises(tdsl.TdslError, match="the Python bool False.*write tx.var == 0"):
        ib.if_scope(tdsl.thread_axis("threadIdx.x") == 0)
    with pytest.raises(tdsl.TdslError, match="'pragma_x' is not supported"):
        ib.scope_attr(tdsl.thread_axis("threadIdx.x"), "pragma_x", 4)
    with pytest.raises(tdsl.TdslError, match=r"declared with the domain \[0, 32\)"):
        ib.scope_attr(tdsl.thread_axis((0, 32), "threadIdx.x"), "thread_extent", 64)


def test_extern_stages_compose_and_the_cache_keys_on_the_body():
    n = 24
    A = tdsl.placeholder((n,), name="A")
    P = tdsl.compute((n,), lambda i: A[i] + 1.0, name="P")      # computed at root first

    def scaled(k):
        def body(ins, outs):
            ib = ib_create()
            p, q = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
            with ib.for_range(0, n) as i:
                q[i] = p[i] * k
            return ib.get()
        return body
    results = []
    for k in (2.0, 3.0):
        Q = tdsl.extern((n,), [P], scaled(k), name="Q")
        s = tdsl.create_schedule(Q.op)
        results.append(fingerprint(s, [A, Q]))
        f = tdsl.build(s, [A, Q])
        a = np.arange(n, dtype="float32")
        q = np.zeros_like(a)
        f(a, q)
        np.testing.assert_allclose(q, (a + 1) * k)
    assert None not in results and results[0] != results[1]
    Q2 = tdsl.extern((n,), [P], scaled(2.0), name="Q")
    assert fingerprint(tdsl.create_schedule(Q2.op), [A, Q2]) != results[1]
    s = tdsl.create_schedule(Q2.op)
    s[P].compute_inline()
    with pytest.raises(tdsl.ScheduleError, match="passes 'P' whole to its ir_builder body"):
        tdsl.build(s, [A, Q2])
    R = tdsl.compute((n,), lambda i: Q2[i] - 1.0, name="R")
    s = tdsl.create_schedule(R.op)
    s[Q2].compute_inline()
    with pytest.raises(tdsl.ScheduleError, match="cannot be inlined or attached"):
        tdsl.build(s, [A, R])


def test_builder_mistakes_are_named():
    A = tdsl.placeholder((8,), name="A")
    other = tdsl.placeholder((8,), name="Other")

    def store_to_input(ins, outs):
        ib = ib_create()
        a, b = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        with ib.for_range(0, 8) as i:
            a[i] = a[i] + 1.0
            b[i] = a[i]
        return ib.get()
    with pytest.raises(tdsl.TdslError, match="stores into its input 'A'; inputs are read-only"):
        tdsl.extern((8,), [A], store_to_input, name="B")

    def never_writes(ins, outs):
        ib = ib_create()
        ib.buffer_ptr(outs[0])
        return ib.get()
    with pytest.raises(tdsl.TdslError, match="never stores into output 'B'"):
        tdsl.extern((8,), [A], never_writes, name="B")

    def reads_unlisted(ins, outs):
        ib = ib_create()
        ib.buffer_ptr(outs[0])[0] = ib.buffer_ptr(other)[0]
        return ib.get()
    with pytest.raises(tdsl.TdslError, match="'Other' is neither an input nor an output"):
        tdsl.extern((8,), [A], reads_unlisted, name="B")

    def loop_var_escapes(ins, outs):
        ib = ib_create()
        a, b = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        with ib.for_range(0, 8) as i:
            b[i] = a[i]
        b[i] = 0.0
        return ib.get()
    with pytest.raises(tdsl.TdslError, match="uses the variable 'i' outside the loop"):
        tdsl.extern((8,), [A], loop_var_escapes, name="B")

    ib = ib_create()
    with pytest.raises(tdsl.TdslError, match="for_range's end is 8.5 of type float32"):
        ib.for_range(0, 8.5)
    with pytest.raises(tdsl.TdslError, match="for_range's end is .* of type float32"):
        ib.for_range(0, tdsl.var("x", "float32"))
    with pytest.raises(tdsl.TdslError, match="kind 'gpu' is not one of"):
        ib.for_range(0, 8, kind="gpu")
    with pytest.raises(tdsl.TdslError, match="'vectorize' needs a constant number"):
        ib.for_range(0, tdsl.var("n"), kind="vectorize")
    with pytest.raises(tdsl.TdslError, match="else_scope: it must directly follow an if_scope"):
        ib.else_scope()
    with pytest.raises(tdsl.TdslError, match="has type int32; compare it"):
        ib.if_scope(tdsl.var("c"))
    with pytest.raises(tdsl.TdslError, match="only inside the fcompute"):
        ib.buffer_ptr(A)
    buf = ib.allocate("float32", (4, 4), name="t")
    with pytest.raises(tdsl.TdslError, match="'t' has 2 dimension"):
        buf[1, 2, 3] = 0.0
    with pytest.raises(tdsl.TdslError, match="type int32 is stored into 't' of type float32"):
        buf[0] = tdsl.var("v")
    with pytest.raises(tdsl.TdslError, match="an index of 't' is .* of type float32"):
        buf[tdsl.var("x", "float32")] = 0.0
    with pytest.raises(tdsl.TdslError, match="scope 'texture' is not one of"):
        ib.allocate("float32", 4, scope="texture")
    with ib.for_range(0, 4):
        with pytest.raises(tdsl.TdslError, match="still open"):
            ib.get()


def test_tvm_index_names_on_negative_operands():
    names = ("floordiv", "floormod", "truncdiv", "truncmod", "indexdiv", "indexmod")
    refs = (np.floor_divide, np.mod, lambda a, b: np.trunc(a / b).astype(a.dtype), np.fmod,
            np.floor_divide, np.mod)
    n = 64
    A = tdsl.placeholder((n,), name="A", dtype="int32")
    B = tdsl.placeholder((n,), name="B", dtype="int32")
    def of_arrays(f):
        return lambda i: f(A[i], B[i])

    def by_const(f):
        return lambda i: f(A[i], -3)
    outs = [tdsl.compute((n,), of_arrays(getattr(tdsl, name)), name=name) for name in names]
    consts = [tdsl.compute((n,), by_const(getattr(tdsl.tir, name)), name=name + "_c")
              for name in names]
    s = tdsl.create_schedule([t.op for t in outs + consts])
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, n).astype("int32")
    b = rng.integers(-7, 8, n).astype("int32")
    b[b == 0] = 5
    a[:4], b[:4] = [-7, 7, -6, 6], [2, -2, 3, -3]
    for target in CPU:
        f = tdsl.build(s, [A, B] + outs + consts, target=target)
        res = [np.zeros(n, "int32") for _ in outs + consts]
        f(a, b, *res)
        for name, ref, got, gotc in zip(names, refs, res[:6], res[6:]):
            np.testing.assert_array_equal(got, ref(a, b), err_msg=f"{name} on {target}")
            np.testing.assert_array_equal(gotc, ref(a, np.full(n, -3, "int32")),
                                          err_msg=f"{name}(a, -3) on {target}")
    x = tdsl.var("x", "float32")
    assert str(tdsl.floordiv(x, 2.0)) == "floor(x / 2.0f)"
    assert int(tdsl.truncdiv(-7, 2)) == -3 and int(tdsl.tir.truncmod(-7, 2)) == -1
    assert int(tdsl.floordiv(-7, 2)) == -4 and int(tdsl.tir.indexmod(-7, 2)) == 1
    with pytest.raises(tdsl.TdslError, match=r"truncdiv\(x, 2.0f\): the operands must be integers"):
        tdsl.truncdiv(x, 2.0)


def test_auto_schedule_keeps_what_an_extern_body_reads_at_root():
    n = 1024
    A = tdsl.placeholder((n,), name="A")
    P = tdsl.compute((n,), lambda i: A[i] * 2.0, name="P")     # elementwise: would be inlined
    B = tdsl.extern((n,), [P], _prefix_sum, name="B")
    E = tdsl.compute((n,), lambda i: B[i] + 1.0, name="E")
    s = tdsl.auto_schedule(E, target="llvm")
    assert "P: vectorize" in str(s.explain())
    f = tdsl.build(s, [A, E])
    a = np.random.default_rng(4).random(n, dtype="float32")
    e = np.zeros_like(a)
    f(a, e)
    np.testing.assert_allclose(e, np.cumsum(2 * a) + 1, rtol=1e-4)


@pytest.mark.parametrize("target", CPU)
def test_emit_let_new_scope_and_likely(target):
    n = 20

    def body(ins, outs):
        ib = ib_create()
        a, b = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        with ib.new_scope():
            tmp = ib.allocate("float32", (n,), name="tmp")
            with ib.for_range(0, n, name="i") as i:
                half = ib.let("half", a[i] * 0.5)
                ib.emit(tdsl.ir.BufferStore(tmp.asobject(), half + 1.0, (i,)))
            with ib.for_range(0, n, name="i") as i:
                with ib.if_scope(ib.likely(i < n - 1)):
                    b[i] = tmp[i] + tmp[i + 1]
                with ib.else_scope():
                    b[i] = tmp[i]
        return ib.get()
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.extern((n,), [A], body, name="B")
    f = tdsl.build(tdsl.create_schedule(B.op), [A, B], target=target)
    a = np.arange(n, dtype="float32")
    b = np.zeros_like(a)
    f(a, b)
    t = a * 0.5 + 1
    np.testing.assert_allclose(b, np.append(t[:-1] + t[1:], t[-1]))


def test_gpu_body_is_bounds_checked_on_the_c_emulation(monkeypatch):
    def body(ins, outs):
        ib = ib_create()
        a, b = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        tx = tdsl.thread_axis("threadIdx.x")
        ib.scope_attr(tdsl.thread_axis("blockIdx.x"), "thread_extent", 1)
        ib.scope_attr(tx, "thread_extent", 16)
        b[tx] = a[tx + 1]                 # one past the end for the last thread
        return ib.get()
    A = tdsl.placeholder((16,), name="A")
    B = tdsl.extern((16,), [A], body, name="B")
    monkeypatch.setenv("TDSL_BOUNDS_CHECK", "1")
    f = tdsl.build(tdsl.create_schedule(B.op), [A, B], target="c")
    with pytest.raises(tdsl.BoundsError, match="buffer 'A' at flat index 16"):
        f(np.zeros(16, "float32"), np.zeros(16, "float32"))
