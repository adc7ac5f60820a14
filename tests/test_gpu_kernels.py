"""GPU schedules without a GPU: for each kernel the CUDA source compiles through NVRTC (and
`nvcc -ptx` when nvcc is on the PATH), the kernels run on the CPU and match numpy through
the emulated GPU of target "c" and through OpenCL (PoCL) where an OpenCL device works, and
through CUDA where a GPU is present."""
import shutil

import numpy as np
import pytest

import tdsl
from tdsl.examples import gpu as G
from tdsl.runtime import cuda as rcuda
from tdsl.runtime import opencl as rocl

rng = np.random.default_rng(7)


def _opencl_or_skip():
    try:
        import pyopencl  # noqa: F401
    except ImportError:
        pytest.skip("pyopencl is not installed (pip install tdsl[opencl])")
    reason = rocl.unusable_reason()
    if reason is not None:
        pytest.skip("no working OpenCL device: " + reason.splitlines()[0] + " " +
                    " ".join(line for line in reason.splitlines() if "error" in line))


def _nvrtc_or_skip():
    if not rcuda.have_nvrtc():
        pytest.skip("NVRTC is not installed (pip install cuda-bindings nvidia-cuda-nvrtc)")


CASES = {
    "elementwise": (lambda: G.elementwise_schedule(1000),
                    lambda: [rng.random(1000, dtype=np.float32)],
                    G.elementwise_reference, [(1000,)]),
    "matmul": (lambda: G.matmul_schedule(100, 70, 37),
               lambda: [rng.random((100, 37), dtype=np.float32),
                        rng.random((37, 70), dtype=np.float32)],
               G.matmul_reference, [(100, 70)]),
    "conv2d": (lambda: G.conv2d_schedule(2, 3, 12, 21, 4),
               lambda: [rng.random((2, 3, 12, 21), dtype=np.float32),
                        rng.random((4, 3, 3, 3), dtype=np.float32)],
               G.conv2d_reference, [(2, 4, 10, 19)]),
    "softmax": (lambda: G.softmax_schedule(5, 100),
                lambda: [rng.standard_normal((5, 100), dtype=np.float32)],
                G.softmax_reference, [(5, 100)]),
    "sum_rfactor": (lambda: G.sum_schedule(6, 100),
                    lambda: [rng.random((6, 100), dtype=np.float32)],
                    G.sum_reference, [(6,)]),
    "sum_threads": (lambda: G.sum_schedule(6, 100, threads=24, rfactor=False),
                    lambda: [rng.random((6, 100), dtype=np.float32)],
                    G.sum_reference, [(6,)]),
}


def _run(name, target):
    make, inputs, ref, out_shapes = CASES[name]
    s, args = make()
    f = tdsl.build(s, args, target=target, name=name)
    xs = inputs()
    ys = [np.zeros(shape, np.float32) for shape in out_shapes]
    f(*xs, *ys)
    np.testing.assert_allclose(ys[0], ref(*xs), rtol=1e-4, atol=1e-5)
    return f


@pytest.mark.parametrize("name", list(CASES))
def test_cuda_source_compiles_with_nvrtc_and_nvcc(name):
    _nvrtc_or_skip()
    make = CASES[name][0]
    s, args = make()
    f = tdsl.build(s, args, target="cuda", name=name)
    src = f.get_source()
    assert 'extern "C" __global__' in src and "__launch_bounds__" in src
    ptx = f.get_source("ptx")
    assert ".entry" in ptx
    if shutil.which("nvcc"):
        assert ".entry" in rcuda.nvcc_ptx(src)


@pytest.mark.parametrize("name", list(CASES))
def test_emulated_gpu_matches_numpy(name):
    _run(name, "c")


@pytest.mark.parametrize("name", list(CASES))
def test_opencl_matches_numpy(name):
    _opencl_or_skip()
    f = _run(name, "opencl")
    assert "__kernel" in f.get_source()


@pytest.mark.parametrize("name", list(CASES))
def test_cuda_matches_numpy_on_a_gpu(name):
    if not tdsl.cuda(0).exist:
        pytest.skip("no CUDA GPU")
    _run(name, "cuda")


def test_cuda_source_features():
    s, args = G.elementwise_schedule(1024)
    src = tdsl.build(s, args, target="cuda").get_source()
    assert "float4" in src and "make_float4" in src        # vectorized inner loop
    s, args = G.matmul_schedule(64, 64, 64)
    src = tdsl.build(s, args, target="cuda", name="mm").get_source()
    assert "__shared__" in src and "__syncthreads();" in src
    assert "blockIdx.y" in src and "threadIdx.x" in src and "__launch_bounds__(64)" in src
    s, args = G.softmax_schedule(4, 64)
    f = tdsl.build(s, args, target="cuda", name="sm")
    assert [k.name for k in f.kernels] == ["sm_kernel0", "sm_kernel1", "sm_kernel2"]
    assert "__expf" in f.get_source()                      # fast math


def test_opencl_source_features():
    s, args = G.matmul_schedule(64, 64, 64)
    src = tdsl.build(s, args, target="opencl", name="mm").get_source()
    for word in ("__kernel", "__global", "__local", "get_group_id(1)", "get_local_id(0)",
                 "barrier(CLK_LOCAL_MEM_FENCE);"):
        assert word in src
    s, args = G.elementwise_schedule(1024)
    src = tdsl.build(s, args, target="opencl").get_source()
    assert "vload4" in src and "vstore4" in src


def test_symbolic_size_launch():
    n = tdsl.var("n")
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = tdsl.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, tdsl.thread_axis("blockIdx.x"))
    s[B].bind(tx, tdsl.thread_axis("threadIdx.x"))
    f = tdsl.build(s, [A, B], target="c")
    for size in (1, 45, 64):
        a = rng.random(size, dtype=np.float32)
        b = np.zeros(size, np.float32)
        f(a, b)
        np.testing.assert_allclose(b, a + 1)
    if rcuda.have_nvrtc():
        assert ".entry" in tdsl.build(s, [A, B], target="cuda").get_source("ptx")


def test_shared_cache_covers_the_block_and_local_stays_per_thread():
    s, args = G.matmul_schedule(64, 64, 64, block=(8, 8), thread_tile=(2, 2), k_tile=4)
    text = str(tdsl.lower(s, args, "mm", target="cuda"))
    assert 'A.shared = allocate((64), float32, "shared")' in text      # 16 rows x 4 k
    assert 'A.shared.local = allocate((2), float32, "local")' in text
    assert 'C.local = allocate((4), float32, "local")' in text
    assert text.count('barrier("shared")') >= 2


def test_fp16_cuda_compiles():
    _nvrtc_or_skip()
    if rcuda.cuda_include_dir() is None:
        pytest.skip("cuda_fp16.h not found: the nvidia-cuda-nvrtc wheel ships no headers and no "
                    "CUDA toolkit include folder exists (set CUDA_HOME)")
    A = tdsl.placeholder((256,), dtype="float16", name="A")
    B = tdsl.compute((256,), lambda i: tdsl.exp(A[i]) * A[i] + tdsl.max(A[i], tdsl.const(0, "float16")),
                     name="B")
    s = tdsl.create_schedule(B)
    bx, tx = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bx, tdsl.thread_axis("blockIdx.x"))
    s[B].bind(tx, tdsl.thread_axis("threadIdx.x"))
    f = tdsl.build(s, [A, B], target="cuda")
    assert "#include <cuda_fp16.h>" in f.get_source() and "__half" in f.get_source()
    assert ".entry" in f.get_source("ptx")


def test_time_evaluator_emulated():
    s, args = G.elementwise_schedule(256)
    f = tdsl.build(s, args, target="c")
    a = rng.random(256, dtype=np.float32)
    b = np.zeros(256, np.float32)
    r = f.time_evaluator(number=2, repeat=2)(a, b)
    assert r.mean > 0 and len(r.results) == 2
    np.testing.assert_allclose(b, a * 2 + 1)


def test_time_evaluator_opencl_profiling_events():
    _opencl_or_skip()
    s, args = G.elementwise_schedule(4096)
    f = tdsl.build(s, args, target="opencl")
    a = rng.random(4096, dtype=np.float32)
    b = np.zeros(4096, np.float32)
    r = f.time_evaluator(number=3, repeat=2)(a, b)
    assert r.mean > 0
    np.testing.assert_allclose(b, a * 2 + 1)


def test_opencl_device_arrays():
    _opencl_or_skip()
    dev = tdsl.opencl(0)
    s, args = G.elementwise_schedule(512)
    f = tdsl.build(s, args, target="opencl")
    a = rng.random(512, dtype=np.float32)
    A = tdsl.nd.array(a, dev)
    B = tdsl.nd.empty((512,), "float32", dev)
    f(A, B)
    np.testing.assert_allclose(B.numpy(), a * 2 + 1)


def test_thread_split_factor_larger_than_extent_keeps_the_block_size():
    """A factor split bound to threadIdx keeps its factor when the axis is shorter (14 < 16):
    the stage filled cooperatively by 16 threads (nparts=16) and its consumer agree on
    blockDim.x; the extra threads are masked by the split's guard. Before the fix, bound
    inference shrank the consumer's thread loop to 14 and the build failed with 'threadIdx.x
    is bound to loops of different extents'."""
    A = tdsl.placeholder((14,), name="A")
    B = tdsl.compute((14,), lambda i: A[i] + 1.0, name="B")
    C = tdsl.compute((14,), lambda i: B[i] * 2.0, name="C")
    s = tdsl.create_schedule(C)
    bx, tx = s[C].split(C.op.axis[0], factor=16)
    s[C].bind(bx, tdsl.thread_axis("blockIdx.x"))
    s[C].bind(tx, tdsl.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], bx)                      # shared: one block's copy of B
    to, _ = s[B].split(B.op.axis[0], nparts=16)
    s[B].bind(to, tdsl.thread_axis("threadIdx.x"))
    f = tdsl.build(s, [A, C], target="c")
    assert f.kernels[0].block == (16, 1, 1)
    a = rng.random(14, dtype=np.float32)
    c = np.zeros(14, np.float32)
    f(a, c)
    np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)


def test_thread_loops_of_different_extents_share_the_largest_block():
    """Row normalisation in one kernel on rows of 8: Y's threads come from a split by 16
    (kept at 16 on a thread-bound loop), the rfactored sum's thread axis was fixed at the
    row length 8 by rfactor. The kernel launches 16 threads and masks the extra ones in
    the reduction's barrier-free loops (before the fix: 'threadIdx.x is bound to loops of
    different extents')."""
    A = tdsl.placeholder((3, 8), name="A")
    k = tdsl.reduce_axis((0, 8), name="k")
    S = tdsl.compute((3,), lambda i: tdsl.sum(A[i, k], axis=k), name="S")
    Y = tdsl.compute((3, 8), lambda i, j: A[i, j] / S[i], name="Y")
    s = tdsl.create_schedule(Y)
    i, j = Y.op.axis
    _, ji = s[Y].split(j, factor=16)
    s[Y].bind(i, tdsl.thread_axis("blockIdx.x"))
    s[Y].bind(ji, tdsl.thread_axis("threadIdx.x"))
    s[S].compute_at(s[Y], i)
    _, ki = s[S].split(S.op.reduce_axis[0], factor=16)
    SF = s.rfactor(S, ki)
    s[S].bind(s[S].op.reduce_axis[0], tdsl.thread_axis("threadIdx.x"))
    s[SF].compute_at(s[S], s[S].op.reduce_axis[0])
    f = tdsl.build(s, [A, Y], target="c")
    assert f.kernels[0].block == (16, 1, 1)
    a = rng.random((3, 8), dtype=np.float32) + 0.5
    y = np.zeros_like(a)
    f(a, y)
    np.testing.assert_allclose(y, a / a.sum(axis=1, keepdims=True), rtol=1e-5)


def _loop_barriers(func, loop_name):
    """Barriers inside the serial loops named `loop_name` of a lowered GPU function."""
    from tdsl.ir import stmt as S
    from tdsl.ir.visitor import walk
    counts = []

    def f(n):
        if isinstance(n, S.For) and n.var.name == loop_name:
            found = []
            walk(n.body, lambda m: found.append(1) if isinstance(m, S.Barrier) else None)
            counts.append(len(found))
    walk(func.body, f)
    return counts


def _shared_matmul(double, vthreads=1, stages=2):
    M, N, K = 32, 16, 24
    A = tdsl.placeholder((M, K), name="A")
    B = tdsl.placeholder((K, N), name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tdsl.create_schedule(C)
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    bi, ii = s[C].split(i, factor=8)
    vt, ti = s[C].split(ii, nparts=vthreads)
    s[C].reorder(bi, vt, j, ti)
    s[C].bind(bi, tdsl.thread_axis("blockIdx.x"))
    s[C].bind(vt, tdsl.thread_axis((0, vthreads), "vthread"))
    s[C].bind(j, tdsl.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], j)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=4)
    BS = s.cache_read(B, "shared", [CL])
    s[BS].compute_at(s[CL], ko)
    s[BS].bind(s[BS].op.axis[1], tdsl.thread_axis("threadIdx.x"))
    if double:
        if stages == 2:
            s[BS].double_buffer()
        else:
            s[BS].multi_buffer(stages)
    a = rng.random((M, K), dtype=np.float32)
    b = rng.random((K, N), dtype=np.float32)
    return s, [A, B, C], [a, b], a @ b


@pytest.mark.parametrize("target", ["c", "opencl"])
def test_double_buffer_one_barrier_per_step(target):
    """Without double buffering the k loop syncs twice per step (after the fill, before the
    next one); with it, once: each step fills the other buffer while using this one."""
    if target == "opencl":
        _opencl_or_skip()
    for double, per_step in ((False, 2), (True, 1)):
        s, args, inputs, ref = _shared_matmul(double)
        func = tdsl.lower(s, args, target="cuda")
        loop = "k.outer.db" if double else "k.outer"
        counts = _loop_barriers(func, loop)
        steps = 2 if double else 1          # the double-buffered loop does two steps a turn
        assert counts and all(c == per_step * steps for c in counts), counts
        f = tdsl.build(s, args, target=target)
        out = np.zeros(ref.shape, np.float32)
        f(*inputs, out)
        np.testing.assert_allclose(out, ref, rtol=1e-5)


@pytest.mark.parametrize("target", ["c", "opencl"])
@pytest.mark.parametrize("stages", [3, 4])
def test_multi_buffer_one_barrier_per_step(target, stages):
    """With n buffers the k loop (6 steps here) still syncs once per step, each step filling
    the buffer the previous step read, n - 2 copy groups left in flight; the prologue
    fills n - 1 buffers before the loop with no barrier between them."""
    if target == "opencl":
        _opencl_or_skip()
    s, args, inputs, ref = _shared_matmul(True, stages=stages)
    from tdsl.ir import stmt as S
    from tdsl.ir.visitor import walk
    func = tdsl.lower(s, args, target="cuda")
    barriers = []
    walk(func.body, lambda n: barriers.append(n) if isinstance(n, S.Barrier) else None)
    steps = [b for b in barriers if b.async_wait is not None]
    assert len(steps) == 6 and {b.async_wait for b in steps} == {stages - 2}
    # the one plain barrier: the end of the loop over C.local's rows, which refills
    assert len(barriers) - len(steps) == 1
    assert f"s[B.shared].multi_buffer({stages})" in s.trace
    f = tdsl.build(s, args, target=target)
    out = np.zeros(ref.shape, np.float32)
    f(*inputs, out)
    np.testing.assert_allclose(out, ref, rtol=1e-5)


@pytest.mark.parametrize("target", ["c", "opencl"])
def test_vthread_fills_shared_memory_once(target):
    """Two virtual threads per thread share the block's shared fill (one fill nest per step)
    and each keeps its own accumulators: the thread's local buffer holds a copy per virtual
    thread, their work interleaved in unrolled loops."""
    if target == "opencl":
        _opencl_or_skip()
    from tdsl.ir import stmt as S
    from tdsl.ir.visitor import walk
    s1, args1, _, _ = _shared_matmul(False, 1)
    s2, args2, inputs, ref = _shared_matmul(False, 2)
    sizes = {}
    for name, (s, args) in {"one": (s1, args1), "two": (s2, args2)}.items():
        func = tdsl.lower(s, args, target="cuda")
        stores = []
        allocs = {}
        walk(func.body, lambda n: stores.append(n) if isinstance(n, S.BufferStore)
             and n.buffer.name == "B.shared" else None)
        walk(func.body, lambda n: allocs.setdefault(n.buffer.name, n.buffer.shape[0].value)
             if isinstance(n, S.Allocate) else None)
        assert len(stores) == 1, name            # one fill, not one per virtual thread
        sizes[name] = allocs["C.local"]
        if name == "two":
            assert "in unroll(2)" in str(func)
    assert sizes["two"] == sizes["one"]      # 2 virtual threads x half the rows each
    f = tdsl.build(s2, args2, target=target)
    out = np.zeros(ref.shape, np.float32)
    f(*inputs, out)
    np.testing.assert_allclose(out, ref, rtol=1e-5)
