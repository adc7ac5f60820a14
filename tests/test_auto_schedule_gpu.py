"""The auto-scheduler's GPU rules: block/register tiles and shared-memory stages for
contractions, cross-thread row reductions, sizes from the target's GPU facts. Numbers are
checked on the C emulation and on OpenCL (PoCL) where present, at small sizes (the
emulation runs every thread in turn); structure is checked on the schedules of the issue's
shapes without building them."""
import numpy as np
import pytest

import tdsl
from tdsl.target import Target
from tdsl.autosched import gpu_contraction

from test_auto_schedule import _data, _gemm, _opencl_ok


TARGETS = ["c"] + (["opencl"] if _opencl_ok() else [])


def _rowsum(M, N):
    A = tdsl.placeholder((M, N), name="A")
    k = tdsl.reduce_axis((0, N), name="k")
    return A, tdsl.compute((M,), lambda i: tdsl.sum(A[i, k], axis=k), name="B")


def _thread_extents(stage, tag):
    """Extents (from the relations) of the leaf loops of `stage` bound to `tag`."""
    return [iv for iv, a in stage.iter_var_attrs.items()
            if a.thread is not None and a.thread.thread_tag == tag]


def _extent(s, st, iv):
    from tdsl.schedule.bound import infer_bounds
    return infer_bounds(s)[st].ranges[iv].extent.value


def _tile(s, st):
    """(threads y, threads x, outputs per thread y, x) of a contraction's output stage."""
    from tdsl.schedule.bound import infer_bounds
    rng = infer_bounds(s)[st].ranges
    ty, tx = (next(iv for iv in st.leaf_iter_vars if st.iter_var_attrs.get(iv) is not None
                   and st.iter_var_attrs[iv].thread is not None
                   and st.iter_var_attrs[iv].thread.thread_tag == t) for t in ("threadIdx.y", "threadIdx.x"))
    inner = st.leaf_iter_vars[st.leaf_iter_vars.index(tx) + 1:]
    return rng[ty].extent.value, rng[tx].extent.value, [rng[iv].extent.value for iv in inner]


@pytest.mark.parametrize("M,N,K", [(100, 70, 50), (64, 64, 64), (7, 130, 9)])
def test_gemm_matches_numpy(M, N, K):
    A, B, C = _gemm(M, N, K)
    s = tdsl.auto_schedule(C, target="cuda")
    a, b = _data((M, K)), _data((K, N))
    for target in TARGETS:
        c = np.full((M, N), np.nan, np.float32)
        tdsl.build(s, [A, B, C], target=target)(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4, err_msg=target)


def test_gemm_symbolic_sizes():
    n, m = tdsl.var("n"), tdsl.var("m")
    A, B, C = _gemm(n, m, 24)
    s = tdsl.auto_schedule(C, target="opencl")
    a, b = _data((37, 24)), _data((24, 21))
    for target in TARGETS:
        c = np.full((37, 21), np.nan, np.float32)
        tdsl.build(s, [A, B, C], target=target)(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4, err_msg=target)


@pytest.mark.parametrize("double_buffer", [True, False])
def test_gemm_params_and_double_buffer(double_buffer):
    A, B, C = _gemm(45, 36, 40)
    p = {"block": (8, 4), "thread_tile": (2, 4), "k_tile": 4, "double_buffer": double_buffer}
    s = tdsl.auto_schedule(C, target="cuda", params=p)
    ty, tx, per = _tile(s, s[C])
    assert (ty, tx, per) == (8, 4, [2, 4])
    assert ("double-buffered" in str(s.explain())) == double_buffer
    a, b = _data((45, 40)), _data((40, 36))
    for target in TARGETS:
        c = np.zeros((45, 36), np.float32)
        tdsl.build(s, [A, B, C], target=target)(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4, err_msg=target)
    with pytest.raises(tdsl.ScheduleError, match="threads"):
        tdsl.auto_schedule(C, target="cuda", params={"block": (64, 32)})


def test_conv_and_batch_matmul_match_numpy():
    from tdsl.examples import gpu
    _, (X, Wt, Y) = gpu.conv2d_schedule(2, 5, 9, 10, 6)
    s = tdsl.auto_schedule(Y, target="cuda")
    assert {"block-tile", "registers", "shared-memory"} <= set(s.explain().rules("Y"))
    x, w = _data((2, 5, 9, 10)), _data((6, 5, 3, 3))
    Bt, M, N, K = 3, 20, 12, 9
    P = tdsl.placeholder((Bt, M, K), name="P")
    Q = tdsl.placeholder((Bt, K, N), name="Q")
    k = tdsl.reduce_axis((0, K), name="k")
    R = tdsl.compute((Bt, M, N), lambda b, i, j: tdsl.sum(P[b, i, k] * Q[b, k, j], axis=k), name="R")
    s2 = tdsl.auto_schedule(R, target="cuda")
    p, q = _data((Bt, M, K)), _data((Bt, K, N))
    for target in TARGETS:
        y = np.zeros((2, 6, 7, 8), np.float32)
        tdsl.build(s, [X, Wt, Y], target=target)(x, w, y)
        np.testing.assert_allclose(y, gpu.conv2d_reference(x, w), rtol=1e-4, atol=1e-4, err_msg=target)
        r = np.zeros((Bt, M, N), np.float32)
        tdsl.build(s2, [P, Q, R], target=target)(p, q, r)
        np.testing.assert_allclose(r, p @ q, rtol=1e-4, atol=1e-4, err_msg=target)


@pytest.mark.parametrize("n", [1024, 4096])
def test_gemm_structure_fills_the_sms(n):
    """Shared-memory stages, >= 4x4 outputs per thread in registers, and a block for every
    SM of an H100 (4096: the rule's full register tile; 1024: smaller tiles, more blocks)."""
    t = Target("cuda -arch=sm_90")
    assert t.sm_count == 132
    A, B, C = _gemm(n, n, n)
    s = tdsl.auto_schedule(C, target=t)
    text = str(s)
    assert "A.shared" in text and "B.shared" in text and "C.local" in text
    ty, tx, per = _tile(s, s[C])
    assert per[0] >= 4 and per[1] >= 4 and ty * tx == 256
    blocks = (n // (ty * per[0])) * (n // (tx * per[1]))
    assert blocks >= t.sm_count, (blocks, s.explain())
    assert (n == 4096) == (per == list(gpu_contraction.THREAD_TILE))


def test_batch1_dense_splits_k_to_fill_the_sms():
    """1x512x1000 gives 32 blocks even at one output per thread: the reduction is split
    into 8 parts on blockIdx.z (rfactor) and a second kernel adds them."""
    t = Target("cuda -arch=sm_90")
    A, B, C = _gemm(1, 1000, 512)
    s = tdsl.auto_schedule(C, target=t)
    assert "split-k" in s.explain().rules("C")
    first, total = tdsl.build(s, [A, B, C], target="cuda").kernels
    assert first.launch["blockIdx.x"] * first.launch["blockIdx.y"] * first.launch["blockIdx.z"] \
        >= t.sm_count
    assert total.launch["blockIdx.z"] == 1
    A, B, C = _gemm(1, 1000, 509)   # a prime reduction has no equal parts: not split
    assert "split-k" not in tdsl.auto_schedule(C, target=t).explain().rules("C")


@pytest.mark.parametrize("M,N,K", [(1, 77, 300), (2, 130, 1000), (1, 999, 500)])
def test_split_k_matches_numpy(M, N, K):
    A, B, C = _gemm(M, N, K)
    s = tdsl.auto_schedule(C, target="cuda -arch=sm_90")
    assert "split-k" in s.explain().rules("C")
    a, b = _data((M, K)), _data((K, N))
    for target in TARGETS:
        c = np.full((M, N), np.nan, np.float32)
        tdsl.build(s, [A, B, C], target=target)(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4, err_msg=target)


def test_gemm_sized_from_the_target():
    A, B, C = _gemm(1024, 1024, 1024)
    s80 = tdsl.auto_schedule(C, target="cuda -arch=sm_80")
    assert "108 SMs" in str(s80.explain())
    assert "132" in Target("cuda -arch=sm_90").describe()


@pytest.mark.parametrize("M,N", [(7, 333), (5, 31), (3, 1000)])
def test_row_sum_across_threads(M, N):
    A, B = _rowsum(M, N)
    s = tdsl.auto_schedule(B, target="cuda")
    assert s.explain().rules("B") == (["cross-thread"] if N >= 32 else ["cache_write", "bind"])
    if N >= 32:       # the reduce loop's inner axis is threadIdx.x-bound
        (tx,) = _thread_extents(s[B], "threadIdx.x")
        assert tx.kind == "reduce" and tx.var.name == "k.inner"
    a = _data((M, N))
    for target in TARGETS:
        b = np.full((M,), np.nan, np.float32)
        tdsl.build(s, [A, B], target=target)(a, b)
        np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-4, atol=1e-4, err_msg=target)


def test_large_row_reductions_structure():
    t = Target("cuda -arch=sm_90")
    A, B = _rowsum(8192, 8192)
    s = tdsl.auto_schedule(B, target=t)
    (tx,) = _thread_extents(s[B], "threadIdx.x")
    assert _extent(s, s[B], tx) == 512 and tx.var.name == "k.inner"
    from tdsl.examples import kernels
    X, mx, ex, sm, Y = kernels.softmax(16384, 1024)
    s = tdsl.auto_schedule(Y, target=t)
    for st in (mx, sm):
        assert s.explain().rules(st.op.name) == ["cross-thread"]
        (tx,) = _thread_extents(s[st], "threadIdx.x")
        assert _extent(s, s[st], tx) == 256


def test_softmax_layernorm_symbolic_rows():
    from tdsl.examples import kernels
    X, mx, ex, sm, Y = kernels.softmax(6, 45)
    s = tdsl.auto_schedule(Y, target="cuda")
    x = _data((6, 45))
    e = np.exp(x - x.max(axis=1, keepdims=True))
    m = tdsl.var("m")
    Z = tdsl.placeholder((m, 40), name="Z")
    k = tdsl.reduce_axis((0, 40), name="k")
    mean = tdsl.compute((m,), lambda i: tdsl.sum(Z[i, k] * (1.0 / 40), axis=k), name="mean")
    Zc = tdsl.compute((m, 40), lambda i, j: Z[i, j] - mean[i], name="Zc")
    s2 = tdsl.auto_schedule(Zc, target="cuda")
    assert "cross-thread" in s2.explain().rules("mean")
    z = _data((9, 40))
    for target in TARGETS:
        y = np.zeros((6, 45), np.float32)
        tdsl.build(s, [X, Y], target=target)(x, y)
        np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-5)
        zc = np.zeros((9, 40), np.float32)
        tdsl.build(s2, [Z, Zc], target=target)(z, zc)
        np.testing.assert_allclose(zc, z - z.mean(axis=1, keepdims=True), rtol=1e-4, atol=1e-5)


def _layernorm(M, N):
    X = tdsl.placeholder((M, N), name="X")
    k1, k2 = tdsl.reduce_axis((0, N), name="k1"), tdsl.reduce_axis((0, N), name="k2")
    mean = tdsl.compute((M,), lambda i: tdsl.sum(X[i, k1] * (1.0 / N), axis=k1), name="mean")
    d = tdsl.compute((M, N), lambda i, j: X[i, j] - mean[i], name="d")
    var = tdsl.compute((M,), lambda i: tdsl.sum(d[i, k2] * d[i, k2] * (1.0 / N), axis=k2), name="var")
    Y = tdsl.compute((M, N), lambda i, j: d[i, j] / tdsl.sqrt(var[i] + 1e-5), name="Y")
    return X, Y


@pytest.mark.parametrize("M,N", [(6, 1000), (9, 45), (3, 4100)])
def test_row_groups_one_kernel(M, N):
    """Softmax and layer norm: the row's reductions are computed by the block that writes
    the row, so each is one kernel (one block per row), and matches numpy."""
    from tdsl.examples import kernels
    X, mx, ex, sm, Y = kernels.softmax(M, N)
    X2, Y2 = _layernorm(M, N)
    x = _data((M, N))
    e = np.exp(x - x.max(axis=1, keepdims=True))
    refs = (e / e.sum(axis=1, keepdims=True),
            (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5))
    for (Xt, Yt, members), ref in zip(((X, Y, ("rowmax", "rowsum")), (X2, Y2, ("mean", "var"))), refs):
        s = tdsl.auto_schedule(Yt, target="cuda")
        assert s.explain().rules("Y") == ["row-group"]
        for m in members:
            assert s.explain().rules(m) == ["cross-thread"]
        assert tdsl.build(s, [Xt, Yt], target="cuda").get_source().count("__global__") == 1
        for target in TARGETS:
            y = np.full((M, N), np.nan, np.float32)
            tdsl.build(s, [Xt, Yt], target=target)(x, y)
            np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5, err_msg=target)


def test_row_group_needs_one_owner():
    """A row max read by two outputs is no one's member: it is reduced on its own, and
    both outputs read its buffer."""
    X = tdsl.placeholder((5, 300), name="X")
    k = tdsl.reduce_axis((0, 300), name="k")
    mx = tdsl.compute((5,), lambda i: tdsl.max(X[i, k], axis=k), name="mx")
    Y1 = tdsl.compute((5, 300), lambda i, j: X[i, j] - mx[i], name="Y1")
    Y2 = tdsl.compute((5, 300), lambda i, j: X[i, j] * mx[i], name="Y2")
    s = tdsl.auto_schedule([Y1, Y2], target="cuda")
    assert "row-group" not in s.explain().rules("Y1") + s.explain().rules("Y2")
    x = _data((5, 300))
    for target in TARGETS:
        y1, y2 = np.zeros((5, 300), np.float32), np.zeros((5, 300), np.float32)
        tdsl.build(s, [X, Y1, Y2], target=target)(x, y1, y2)
        m = x.max(axis=1, keepdims=True)
        np.testing.assert_allclose(y1, x - m, rtol=1e-5, err_msg=target)
        np.testing.assert_allclose(y2, x * m, rtol=1e-5, err_msg=target)


def test_target_gpu_facts():
    assert Target("cuda -arch=sm_80").sm_count == 108
    assert Target("cuda -arch=sm_90").gpu.shared_memory_per_sm == 228 * 1024
    assert Target("cuda").warp_size == 32 and Target("opencl").sm_count >= 1
    with pytest.raises(tdsl.BuildError, match="-arch"):
        Target("cuda -arch=volta")
    with pytest.raises(tdsl.BuildError, match="not a GPU"):
        Target("c").gpu


def test_issue_shapes_compile_to_ptx():
    from tdsl.runtime import cuda as rcuda
    if not rcuda.have_nvrtc():
        pytest.skip("NVRTC is not installed")
    A, B, C = _gemm(1024, 1024, 1024)
    m = tdsl.build(tdsl.auto_schedule(C, target="cuda -arch=sm_90"), [A, B, C], target="cuda")
    src = m.get_source()
    assert "tdsl_cp_async16(" in src and "__syncthreads" in src   # 16-byte tile copies
    assert ".entry" in m.get_source("ptx")
    A, B = _rowsum(8192, 8192)
    m = tdsl.build(tdsl.auto_schedule(B, target="cuda -arch=sm_90"), [A, B], target="cuda")
    assert ".entry" in m.get_source("ptx")


def _gemm_def(n):
    A, B, C = _gemm(n, n, n)
    return [C], [A, B, C]


def test_search_space_has_the_gpu_knobs():
    from tdsl.autotune.autosched import create_auto_schedule_task, params_of
    task = create_auto_schedule_task(_gemm_def, (40,), target="opencl")
    assert {"block_y", "block_x", "tile_i", "tile_j", "k_tile", "double_buffer",
            "threads"} <= set(task.space.names)
    p = params_of({"block_y": 8, "tile_j": 2, "k_tile": 4}, "opencl")
    assert p.block == (8, 16) and p.thread_tile == (8, 2) and p.k_tile == 4
    sched, tensors = task.instantiate(task.config({"block_y": 8, "block_x": 8, "tile_i": 2,
                                                   "tile_j": 4, "double_buffer": True}))
    a, b = _data((40, 40)), _data((40, 40))
    c = np.zeros((40, 40), np.float32)
    tdsl.build(sched, tensors, target="c")(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,vector", [((1000,), 4), ((37, 64), 4), ((1002,), 1),
                                          ((64 * 1024,), 4)])
def test_elementwise_writes_four_floats_a_thread(shape, vector):
    """A float32 elementwise stage whose last axis is a multiple of 4 gives each thread 4
    consecutive outputs: one float4 load of each operand and one float4 store, under the
    condition (which threads have a vector) where the grid overhangs the data; otherwise
    one output a thread. Checked on OpenCL (PoCL) and a CUDA GPU where there is one."""
    A = tdsl.placeholder(shape, name="A")
    B = tdsl.placeholder(shape, name="B")
    C = tdsl.compute(shape, lambda *i: A[i] * 2.0 + B[i], name="C")
    s = tdsl.auto_schedule(C, "cuda")
    assert ("4 consecutive outputs per thread" in str(s.explain())) == (vector == 4)
    src = tdsl.build(s, [A, B, C], target="cuda").get_source()
    assert (src.count("*(const float4*)") == 2) == (vector == 4)
    n = int(np.prod(shape))
    if vector == 4 and n % (4 * 128):
        assert f"< {n // 4})) {{" in src     # the overhanging threads skip their vector
    a, b = (np.random.default_rng(k).standard_normal(shape).astype(np.float32) for k in (1, 2))
    for target, ok in (("opencl", _opencl_ok()), ("cuda", tdsl.cuda(0).exist)):
        if ok:
            f = tdsl.build(tdsl.auto_schedule(C, target), [A, B, C], target=target)
            c = np.full(shape, np.nan, np.float32)
            f(a, b, c)
            np.testing.assert_allclose(c, a * 2 + b, rtol=1e-6)
