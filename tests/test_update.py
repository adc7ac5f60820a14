"""Halide's update definitions (`tdsl.update`, issue 43 items 1-3): histograms with
data-dependent bins and `where`, prefix sums, a recursive (IIR) filter down the columns
and along the rows, scatters; scheduled by hand (parallel, vectorize, atomic, rfactor,
compute_at) and by auto_schedule; on llvm, c, OpenCL and CUDA (PTX through NVRTC);
every illegal schedule a named ScheduleError; a write outside the buffer a BoundsError."""
import numpy as np
import pytest

import tdsl
from tdsl.runtime import cuda as rcuda

CPU = ["llvm", "c"]


def _opencl_ok():
    try:
        import pyopencl  # noqa: F401
        from tdsl.runtime import opencl as rocl
    except ImportError:
        return False
    return tdsl.opencl(0).exist and rocl.unusable_reason() is None


def _run(f, target, *arrays):
    """Calls `f` on copies of `arrays` on the target's device; returns them as numpy."""
    if target == "opencl":
        dev = tdsl.opencl(0)
        nds = [tdsl.nd.array(a, dev) for a in arrays]
        f(*nds)
        return [x.numpy() for x in nds]
    arrays = [a.copy() for a in arrays]
    f(*arrays)
    return arrays


def histogram(n=5000, bins=64, dtype="int32", where=True):
    I = tdsl.placeholder((n,), name="I", dtype="int32")
    V = tdsl.placeholder((n,), name="V", dtype=dtype)
    h = tdsl.compute((bins,), lambda b: tdsl.const(0, dtype), name="hist")
    r = tdsl.reduce_axis((0, n), "r")
    h = tdsl.update(h, lambda: I[r], lambda old: old + V[r], axis=r,
                    where=(V[r] > tdsl.const(1, dtype)) if where else None)
    return I, V, h


def hist_data(n=5000, bins=64, dtype="int32", seed=0, where=True):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, bins, n).astype("int32")
    v = rng.integers(0, 4, n).astype(dtype)
    ref = np.zeros(bins, dtype)
    m = v > 1 if where else np.ones(n, bool)
    np.add.at(ref, idx[m], v[m])
    return idx, v, ref


def iir(H=40, W=56, a=0.25):
    """A first-order recursive filter down the columns, then along the rows."""
    X = tdsl.placeholder((H, W), name="X")
    f = tdsl.compute((H, W), lambda y, x: X[y, x], name="blur")
    ry = tdsl.reduce_axis((1, H), "ry")
    f = tdsl.update(f, lambda x: (ry, x), lambda old, x: f[ry - 1, x] * (1 - a) + old * a,
                    axis=ry)
    rx = tdsl.reduce_axis((1, W), "rx")
    f = tdsl.update(f, lambda y: (y, rx), lambda old, y: f[y, rx - 1] * (1 - a) + old * a,
                    axis=rx)
    return X, f


def iir_ref(x, a=0.25):
    g = x.astype("float64").copy()
    for y in range(1, g.shape[0]):
        g[y] = g[y - 1] * (1 - a) + g[y] * a
    for c in range(1, g.shape[1]):
        g[:, c] = g[:, c - 1] * (1 - a) + g[:, c] * a
    return g


# ------------------------------------------------------------------ definitions and CPU


@pytest.mark.parametrize("target", CPU)
def test_histogram_with_data_dependent_bins_and_where(target):
    I, V, h = histogram()
    s = tdsl.create_schedule(h)
    text = str(tdsl.lower(s, [I, V, h]))
    assert "hist[I[r]] = hist[I[r]] + V[r]" in text and "if V[r] > 1" in text
    f = tdsl.build(s, [I, V, h], target=target)
    idx, v, ref = hist_data()
    (_, _, out) = _run(f, target, idx, v, np.full(64, 99, "int32"))
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("target", CPU)
def test_prefix_sum_is_exact_in_order(target):
    n = tdsl.size_var("n")
    A = tdsl.placeholder((n,), name="A", dtype="int64")
    c = tdsl.compute((n,), lambda i: A[i], name="cum")
    r = tdsl.reduce_axis((1, n), "r")
    c = tdsl.update(c, lambda: r, lambda old: old + c[r - 1], axis=r)
    s = tdsl.create_schedule(c)
    f = tdsl.build(s, [A, c], target=target)
    for size in (1, 2, 1000):
        a = np.random.default_rng(size).integers(-50, 50, size).astype("int64")
        (_, out) = _run(f, target, a, np.zeros_like(a))
        np.testing.assert_array_equal(out, np.cumsum(a))


@pytest.mark.parametrize("target", CPU)
def test_iir_filter_default_and_hand_schedules(target):
    X, f = iir()
    x = np.random.default_rng(1).random((40, 56), dtype="float32")
    s = tdsl.create_schedule(f)
    (_, out) = _run(tdsl.build(s, [X, f], target=target), target, x, np.zeros_like(x))
    np.testing.assert_allclose(out, iir_ref(x), rtol=1e-5, atol=1e-6)
    # Halide's IIR blur schedule: the column pass vectorized across columns, the row pass
    # parallel over rows
    s = tdsl.create_schedule(f)
    s[f].parallel(s[f].op.axis[0])
    u0, u1 = s[f].update(0), s[f].update(1)
    (x_,), (ry,) = u0.op.axis, u0.op.reduce_axis
    xo, xi = u0.split(x_, factor=8)
    u0.reorder(xo, ry, xi)
    u0.vectorize(xi)
    u0.parallel(xo)
    yo, yi = u1.split(u1.op.axis[0], factor=4)
    u1.parallel(yo)
    text = str(tdsl.lower(s, [X, f]))
    assert "for x.outer in parallel(7)" in text and "for x.inner in vectorized(8)" in text
    m = tdsl.build(s, [X, f], target=target)
    if target == "llvm":    # the row before is a vector away: vector code, no serial note
        assert not [n for n in m.notes if "x.inner" in n], m.notes
    (_, out) = _run(m, target, x, np.zeros_like(x))
    np.testing.assert_allclose(out, iir_ref(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", CPU)
def test_scatter_matches_add_at_and_the_result_is_read_by_a_stage(target):
    m, n = 300, 40
    X = tdsl.placeholder((m, 3), name="X")
    I = tdsl.placeholder((m,), name="I", dtype="int32")
    out = tdsl.compute((n, 3), lambda i, j: tdsl.const(0.0), name="acc")
    r = tdsl.reduce_axis((0, m), "r")
    # a pure variable j and a data-dependent row
    out = tdsl.update(out, lambda j: (I[r], j), lambda old, j: old + X[r, j], axis=r)
    Y = tdsl.compute((n, 3), lambda i, j: out[i, j] * 2.0, name="Y")
    s = tdsl.create_schedule(Y)
    s[out].update(0).vectorize(s[out].update(0).op.axis[0])     # the pure variable
    f = tdsl.build(s, [X, I, Y], target=target)
    x = np.random.default_rng(2).random((m, 3), dtype="float32")
    idx = np.random.default_rng(3).integers(0, n, m).astype("int32")
    ref = np.zeros((n, 3), "float32")
    np.add.at(ref, idx, x)
    (_, _, y) = _run(f, target, x, idx, np.zeros((n, 3), "float32"))
    np.testing.assert_allclose(y, 2 * ref, rtol=1e-5)


@pytest.mark.parametrize("target", CPU)
def test_several_reduction_variables_run_first_innermost(target):
    # f[r.x + 4 * r.y] = f[previous] * 2 + 1, the domain in Halide's order (x innermost)
    f = tdsl.compute((16,), lambda i: tdsl.const(0, "int32"), name="seq")
    rx, ry = tdsl.reduce_axis((0, 4), "rx"), tdsl.reduce_axis((0, 4), "ry")
    f = tdsl.update(f, lambda: rx + ry * 4,
                    lambda old: tdsl.if_then_else(rx + ry * 4 > 0, f[tdsl.max(rx + ry * 4 - 1, 0)],
                                                  0) * 2 + 1, axis=[rx, ry])
    s = tdsl.create_schedule(f)
    assert [iv.var.name for iv in s[f].update(0).leaf_iter_vars] == ["ry", "rx"]
    (out,) = _run(tdsl.build(s, [f], target=target), target, np.zeros(16, "int32"))
    np.testing.assert_array_equal(out, 2 ** np.arange(1, 17) - 1)


@pytest.mark.parametrize("target", CPU)
def test_parallel_histogram_atomic_and_rfactor(target):
    I, V, h = histogram(n=20000, dtype="float32")
    idx, v, ref = hist_data(n=20000, dtype="float32")
    s = tdsl.create_schedule(h)
    u = s[h].update(0).atomic()
    ro, ri = u.split(u.op.reduce_axis[0], factor=1000)
    u.parallel(ro)
    assert "= atomic_add hist[" in str(tdsl.lower(s, [I, V, h]))
    (_, _, out) = _run(tdsl.build(s, [I, V, h], target=target), target, idx, v,
                       np.zeros(64, "float32"))
    np.testing.assert_allclose(out, ref, rtol=1e-5)
    # Halide's parallel histogram: private partial histograms, then a merge
    s = tdsl.create_schedule(h)
    u = s[h].update(0)
    ro, ri = u.split(u.op.reduce_axis[0], nparts=6)
    rf = s.rfactor(h, ro)
    s[rf].parallel(s[rf].op.axis[0])
    s[rf].update(0).parallel(s[rf].update(0).op.axis[-1])
    text = str(tdsl.lower(s, [I, V, h]))
    assert "hist.rf = allocate((384)" in text and "atomic" not in text
    (_, _, out) = _run(tdsl.build(s, [I, V, h], target=target), target, idx, v,
                       np.zeros(64, "float32"))
    np.testing.assert_allclose(out, ref, rtol=1e-5)


@pytest.mark.parametrize("op", ["max", "min", "mul"])
def test_atomic_min_max_and_product(op):
    n, bins = 4000, 16
    I = tdsl.placeholder((n,), name="I", dtype="int32")
    V = tdsl.placeholder((n,), name="V")
    init = {"max": -1.0, "min": 2.0, "mul": 1.0}[op]
    h = tdsl.compute((bins,), lambda b: tdsl.const(init), name="h")
    r = tdsl.reduce_axis((0, n), "r")
    comb = {"max": lambda o: tdsl.max(o, V[r]), "min": lambda o: tdsl.min(o, V[r]),
            "mul": lambda o: o * V[r]}[op]
    h = tdsl.update(h, lambda: I[r], comb, axis=r)
    rng = np.random.default_rng(4)
    idx = rng.integers(0, bins, n).astype("int32")
    v = (1 + (rng.random(n) - 0.5) * 1e-3 if op == "mul" else rng.random(n)).astype("float32")
    ref = np.full(bins, init, "float32")
    getattr(np, {"max": "maximum", "min": "minimum", "mul": "multiply"}[op]).at(ref, idx, v)
    s = tdsl.create_schedule(h)
    u = s[h].update(0).atomic()
    u.parallel(u.split(r, nparts=4)[0])
    for target in CPU:
        (_, _, out) = _run(tdsl.build(s, [I, V, h], target=target), target, idx, v,
                           np.zeros(bins, "float32"))
        np.testing.assert_allclose(out, ref, rtol=1e-5)


def test_compute_at_keeps_the_pure_dimension_of_the_region():
    """A chain attached in a consumer's row loop computes only the rows every update
    leaves pure (here all of them: a row filter), per row."""
    H, W = 12, 30
    X = tdsl.placeholder((H, W), name="X")
    f = tdsl.compute((H, W), lambda y, x: X[y, x], name="f")
    rx = tdsl.reduce_axis((1, W), "rx")
    f = tdsl.update(f, lambda y: (y, rx), lambda old, y: f[y, rx - 1] + old, axis=rx)
    out = tdsl.compute((H, W), lambda y, x: f[y, x] * 3.0, name="out")
    s = tdsl.create_schedule(out)
    s[f].compute_at(s[out], out.op.axis[0])
    text = str(tdsl.lower(s, [X, out]))
    assert 'f = allocate((30), float32' in text          # one row per iteration
    x = np.random.default_rng(5).random((H, W), dtype="float32")
    for target in CPU:
        (_, o) = _run(tdsl.build(s, [X, out], target=target), target, x, np.zeros_like(x))
        np.testing.assert_allclose(o, 3 * np.cumsum(x, axis=1), rtol=1e-5)


@pytest.mark.parametrize("target", CPU)
def test_a_write_outside_the_buffer_is_a_bounds_error(target):
    I, V, h = histogram(where=False)
    f = tdsl.build(tdsl.create_schedule(h), [I, V, h], target=target)
    idx, v, _ = hist_data(where=False)
    idx[17] = 64
    with pytest.raises(tdsl.BoundsError, match="'hist'"):
        _run(f, target, idx, v, np.zeros(64, "int32"))
    idx[17] = -1
    with pytest.raises(tdsl.BoundsError, match="'hist'"):
        _run(f, target, idx, v, np.zeros(64, "int32"))


def test_an_affine_write_outside_the_shape_is_refused_at_build():
    f = tdsl.compute((10,), lambda i: tdsl.const(0.0), name="f")
    r = tdsl.reduce_axis((0, 10), "r")
    f = tdsl.update(f, lambda: r + 1, lambda old: old + 1.0, axis=r)
    with pytest.raises(tdsl.LoweringError, match="'f'"):
        tdsl.build(tdsl.create_schedule(f), [f])
    g = tdsl.compute((10,), lambda i: tdsl.const(0.0), name="g")
    r = tdsl.reduce_axis((0, 10), "r")
    g = tdsl.update(g, lambda: r, lambda old: g[r - 1], axis=r)     # reads g[-1]
    with pytest.raises(tdsl.LoweringError, match="'g'"):
        tdsl.build(tdsl.create_schedule(g), [g])


# ------------------------------------------------------------------ auto_schedule


@pytest.mark.parametrize("target", CPU + (["opencl"] if _opencl_ok() else []))
def test_auto_schedule_histogram_and_iir(target):
    I, V, h = histogram(n=30000)
    out = tdsl.compute((64,), lambda b: h[b] + 1, name="out")
    s = tdsl.auto_schedule(out, target)
    assert "update" in s.explain().rules("hist.update(0)")
    idx, v, ref = hist_data(n=30000)
    (_, _, o) = _run(tdsl.build(s, [I, V, out], target=target), target, idx, v,
                     np.zeros(64, "int32"))
    np.testing.assert_array_equal(o, ref + 1)
    X, f = iir()
    s = tdsl.auto_schedule(f, target)
    x = np.random.default_rng(6).random((40, 56), dtype="float32")
    (_, o) = _run(tdsl.build(s, [X, f], target=target), target, x, np.zeros_like(x))
    np.testing.assert_allclose(o, iir_ref(x), rtol=1e-5, atol=1e-6)


def test_auto_schedule_on_the_cpu_parallelizes_what_is_legal():
    X, f = iir()
    s = tdsl.auto_schedule(f, "llvm")
    text = str(tdsl.lower(s, [X, f]))
    assert "in vectorized(" in text and "in parallel(" in text
    I, V, h = histogram(n=30000)
    s = tdsl.auto_schedule(h, "llvm -num-cores=4")
    assert "hist.rf" in str(tdsl.lower(s, [I, V, h]))       # one histogram per core


# ------------------------------------------------------------------ GPU


def _gpu_hist_schedule():
    I, V, h = histogram(n=3000, dtype="float32")
    s = tdsl.create_schedule(h)
    bx, tx = s[h].split(s[h].op.axis[0], factor=32)
    s[h].bind(bx, tdsl.thread_axis("blockIdx.x"))
    s[h].bind(tx, tdsl.thread_axis("threadIdx.x"))
    u = s[h].update(0).atomic()
    bx, tx = u.split(u.op.reduce_axis[0], factor=128)
    u.bind(bx, tdsl.thread_axis("blockIdx.x"))
    u.bind(tx, tdsl.thread_axis("threadIdx.x"))
    return s, [I, V, h]


@pytest.mark.parametrize("target", ["c"] + (["opencl"] if _opencl_ok() else []))
def test_gpu_atomic_histogram_runs(target):
    s, args = _gpu_hist_schedule()
    idx, v, ref = hist_data(n=3000, dtype="float32")
    (_, _, o) = _run(tdsl.build(s, args, target=target), target, idx, v,
                     np.zeros(64, "float32"))
    np.testing.assert_allclose(o, ref, rtol=1e-5)


def test_gpu_updates_compile_to_ptx():
    s, args = _gpu_hist_schedule()
    m = tdsl.build(s, args, target="cuda")
    assert "atomicAdd(&hist[I[" in m.get_source()
    X, f = iir()
    g = tdsl.build(tdsl.auto_schedule(f, "cuda"), [X, f], target="cuda")
    assert g.get_source().count("__global__") == 3        # the pure stage, two updates
    if rcuda.have_nvrtc():
        assert ".entry" in m.get_source("ptx") and "atom.global.add.f32" in m.get_source("ptx")
        assert ".entry" in g.get_source("ptx")
    cl = tdsl.build(s, args, target="opencl").get_source()
    assert "atomic_cmpxchg" in cl           # a float add: compare-and-swap on its bits


# ------------------------------------------------------------------ mistakes


def test_illegal_update_schedules_are_named():
    X, f = iir()
    s = tdsl.create_schedule(f)
    u0 = s[f].update(0)
    (ry,) = u0.op.reduce_axis
    with pytest.raises(tdsl.ScheduleError, match=r"parallel: stage 'blur.update\(0\)'.*'ry'"):
        u0.parallel(ry)
    with pytest.raises(tdsl.ScheduleError, match=r"vectorize: stage 'blur.update\(0\)'.*'ry'"):
        u0.vectorize(ry)
    with pytest.raises(tdsl.ScheduleError, match=r"bind: stage 'blur.update\(0\)'.*'ry'"):
        u0.bind(ry, tdsl.thread_axis("threadIdx.x"))
    with pytest.raises(tdsl.ScheduleError, match=r"atomic: stage 'blur.update\(0\)'.*"
                                                 "not an associative"):
        u0.atomic()
    with pytest.raises(tdsl.ScheduleError, match=r"rfactor: stage 'blur.update\(0\)'"):
        s.rfactor(f, ry)
    with pytest.raises(tdsl.ScheduleError, match="not an associative.*stay serial"):
        u0.parallel(u0.split(ry, factor=4)[0])
    # the order of a dependent reduction: split pieces or two variables, swapped
    g = tdsl.compute((16,), lambda i: tdsl.const(0, "int32"), name="g")
    rx, ry2 = tdsl.reduce_axis((1, 4), "rx"), tdsl.reduce_axis((0, 4), "ry")
    g = tdsl.update(g, lambda: rx + ry2 * 4, lambda old: g[rx + ry2 * 4 - 1] + 1, axis=[rx, ry2])
    s = tdsl.create_schedule(g)
    u = s[g].update(0)
    with pytest.raises(tdsl.ScheduleError, match=r"reorder: stage 'g.update\(0\)'.*'r"):
        u.reorder(rx, ry2)
    ro, ri = u.split(rx, factor=2)
    with pytest.raises(tdsl.ScheduleError, match=r"reorder: stage 'g.update\(0\)'"):
        u.reorder(ri, ro)
    assert u.leaf_iter_vars[-2:] == [ro, ri]            # a refused reorder changes nothing
    # placement belongs to the pure stage; a stage with updates cannot be inlined
    with pytest.raises(tdsl.ScheduleError, match=r"compute_root: stage .g.update\(0\).*s\[g\]"):
        u.compute_root()
    out = tdsl.compute((16,), lambda i: g[i] + 1, name="out")
    s = tdsl.create_schedule(out)
    with pytest.raises(tdsl.ScheduleError, match="compute_inline: stage 'g'.*update"):
        s[g].compute_inline()
    with pytest.raises(tdsl.ScheduleError, match="update: stage 'out'.*no update"):
        s[out].update(0)
    with pytest.raises(tdsl.ScheduleError, match=r"update\(1\)"):
        s[g].update(1)


def test_legal_schedules_on_reduction_variables_are_allowed():
    # race-free along r (each r its own element, reads only its own): parallel and vector
    A = tdsl.placeholder((64,), name="A")
    f = tdsl.compute((64,), lambda i: A[i], name="f")
    r = tdsl.reduce_axis((0, 64), "r")
    f = tdsl.update(f, lambda: r, lambda old: old * 2.0 + A[r], axis=r)
    s = tdsl.create_schedule(f)
    u = s[f].update(0)
    ro, ri = u.split(r, factor=8)
    u.vectorize(ri)
    u.parallel(ro)
    a = np.random.default_rng(7).random(64, dtype="float32")
    (_, out) = _run(tdsl.build(s, [A, f]), "llvm", a, np.zeros_like(a))
    np.testing.assert_allclose(out, 3 * a, rtol=1e-6)
    # an atomic update may reorder its reduction variables
    I, V, h = histogram()
    s = tdsl.create_schedule(h)
    u = s[h].update(0).atomic()
    ro, ri = u.split(u.op.reduce_axis[0], factor=10)
    u.reorder(ri, ro)
    idx, v, ref = hist_data()
    (_, _, o) = _run(tdsl.build(s, [I, V, h]), "llvm", idx, v, np.zeros(64, "int32"))
    np.testing.assert_array_equal(o, ref)


def test_definition_mistakes_are_named():
    A = tdsl.placeholder((8, 8), name="A")
    f = tdsl.compute((8, 8), lambda y, x: A[y, x], name="f")
    r = tdsl.reduce_axis((0, 8), "r")
    with pytest.raises(tdsl.TdslError, match="pure variable 'x' must be the whole index"):
        tdsl.update(f, lambda x: (r, x + 1), lambda old, x: old, axis=r)
    with pytest.raises(tdsl.TdslError, match="dimension 1 is pure variable 'x'"):
        tdsl.update(f, lambda x: (r, x), lambda old, x: f[r, 0], axis=r)
    with pytest.raises(tdsl.TdslError, match="3 entries but 'f' has 2 dimensions"):
        tdsl.update(f, lambda: (r, r, r), lambda old: old, axis=r)
    with pytest.raises(tdsl.TdslError, match="index reads 'f' itself"):
        tdsl.update(f, lambda: (tdsl.cast(f[0, r], "int32"), r), lambda old: old, axis=r)
    with pytest.raises(tdsl.TdslError, match="axis must be tdsl.reduce_axis"):
        tdsl.update(f, lambda: (0, 0), lambda old: old, axis=f.op.axis[0])
    with pytest.raises(tdsl.TdslError, match="tdsl.compute"):
        tdsl.update(A, lambda: (0, 0), lambda old: old)
    g = tdsl.update(f, lambda: (r, 0), lambda old: old + 1.0, axis=r)
    with pytest.raises(tdsl.TdslError, match="already has update 0"):
        tdsl.update(f, lambda: (r, 1), lambda old: old + 1.0, axis=r)
    # the tensor before the update is no value any buffer holds
    out = tdsl.compute((8, 8), lambda y, x: f[y, x] + g[y, x], name="out")
    with pytest.raises(tdsl.LoweringError, match="'out' reads 'f' before its update 0"):
        tdsl.lower(tdsl.create_schedule(out), [A, out])
    with pytest.raises(tdsl.LoweringError, match="'f' before its update 0"):
        tdsl.lower(tdsl.create_schedule(g), [A, f, g])


def test_pure_variable_may_index_the_data_an_index_reads():
    """ScatterElements along axis 0: out[I[r, x], x] = U[r, x]; x stays a pure variable
    (each column independent), r runs in order (a later row wins)."""
    R, C, n = 5, 6, 4
    X = tdsl.placeholder((R, C), name="X")
    I = tdsl.placeholder((n, C), name="I", dtype="int32")
    U = tdsl.placeholder((n, C), name="U")
    out = tdsl.compute((R, C), lambda i, x: X[i, x], name="out")
    r = tdsl.reduce_axis((0, n), "r")
    out = tdsl.update(out, lambda x: (I[r, x], x), lambda old, x: U[r, x], axis=r)
    s = tdsl.auto_schedule(out, "llvm")
    f = tdsl.build(s, [X, I, U, out])
    rng = np.random.default_rng(0)
    x, u = rng.standard_normal((R, C)).astype("float32"), rng.standard_normal((n, C)).astype("float32")
    idx = rng.integers(0, R, (n, C)).astype("int32")
    got = np.zeros_like(x)
    f(x, idx, u, got)
    want = x.copy()
    for k in range(n):
        want[idx[k], np.arange(C)] = u[k]
    np.testing.assert_array_equal(got, want)
    with pytest.raises(tdsl.TdslError, match="pure variable 'x' also appears"):
        tdsl.update(out, lambda x: (x % R, x), lambda old, x: old, axis=None)
