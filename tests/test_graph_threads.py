"""One Executor (and built kernels) used from several Python threads at once, as a threaded
server does (issue 21, item 5): every concurrent run must give the single-threaded answer."""
import threading

import numpy as np
import pytest

import tdsl
import tdsl.graph as G

pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def cnn():
    """A small ResNet (convs, pools, residual adds, fc): many arena-backed intermediates."""
    from tdsl.graph import models
    return G.build(G.optimize(G.from_onnx(models.resnet18(size=32, width=8, num_classes=10))))


def _mlp():
    from tdsl.graph import models
    return G.build(G.optimize(G.from_onnx(models.mlp(batch=2, sizes=(16, 32, 8)))))


def _in_threads(n, work):
    """Runs work(i) on n threads started together; returns their results, re-raising the
    first error."""
    barrier = threading.Barrier(n)
    results, errors = [None] * n, []

    def body(i):
        try:
            barrier.wait()
            results[i] = work(i)
        except BaseException as e:      # noqa: BLE001 - re-raised on the main thread
            errors.append(e)
    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("n_threads", [2, 4])
def test_concurrent_runs_match_single_threaded(cnn, n_threads):
    rng = np.random.default_rng(n_threads)
    xs = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(n_threads)]
    refs = [cnn.run(input=x)[0] for x in xs]
    assert not any(np.allclose(refs[0], r) for r in refs[1:])   # distinct inputs, distinct answers

    done = [0] * n_threads

    def work(i):
        # until every thread has made 30 runs: a thread that got the cores first keeps
        # running beside the late ones instead of finishing alone
        outs = []
        while min(done) < 30 and len(outs) < 3000:
            outs.append(cnn(xs[i])[0])
            done[i] += 1
        return outs
    for i, outs in enumerate(_in_threads(n_threads, work)):
        for out in outs:
            np.testing.assert_allclose(out, refs[i], rtol=1e-6, atol=1e-6)
    assert cnn._pool.made <= n_threads


def test_single_threaded_runs_make_no_second_state():
    exe = _mlp()
    x = np.ones((2, 16), np.float32)
    for _ in range(5):
        exe(x)
    exe.set_input("input", x)
    exe.benchmark(number=2, repeat=1)
    exe.profile_text(number=1)
    assert exe._pool.made == 1


def test_failed_run_returns_its_state():
    exe = _mlp()
    with pytest.raises(tdsl.ArgumentError, match="input 'input': expected shape"):
        exe(np.zeros((3, 16), np.float32))
    with pytest.raises(tdsl.ArgumentError, match="unknown input 'x'"):
        exe.run(x=np.zeros((2, 16), np.float32))
    with pytest.raises(tdsl.ArgumentError, match="missing input: input"):
        exe.run()
    x = np.ones((2, 16), np.float32)
    np.testing.assert_array_equal(exe(x)[0], exe(x)[0])
    assert exe._pool.made == 1       # a state lost by a failed run would make a second


def test_pool_grows_only_while_the_default_state_is_busy():
    exe = _mlp()
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    ref = exe(x)[0]
    held = exe._pool.take(default=True)      # as a concurrent run would hold it
    try:
        np.testing.assert_array_equal(exe(x)[0], ref)
        np.testing.assert_array_equal(exe(x)[0], ref)
        assert exe._pool.made == 2
    finally:
        exe._pool.give(held)
    exe(2 * x)
    np.testing.assert_array_equal(exe.inputs["input"], 2 * x)   # a lone run takes the default
    assert exe._pool.made == 2


def test_stateful_api_uses_the_default_state(cnn):
    """set_input + benchmark/profile act on the first state while other threads run."""
    x = np.random.default_rng(7).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ref = cnn(x)[0]
    cnn.set_input("input", x)

    def work(i):
        if i == 0:
            return cnn.profile(number=3)
        return [cnn(x)[0] for _ in range(5)]
    prof, outs = _in_threads(2, work)
    assert len(prof) == len(cnn.steps)
    for out in outs:
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


def _parallel_kernel(scale):
    n = 1 << 16
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: A[i] * scale + 1.0, name="B")
    s = tdsl.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=1024)
    s[B].parallel(xo)
    f = tdsl.build(s, [A, B])
    f.set_num_threads(4)     # more chunks than cores: both threads contend for the pool
    return f


def test_two_threads_run_different_parallel_kernels():
    kernels = [_parallel_kernel(2.0), _parallel_kernel(3.0)]
    rng = np.random.default_rng(0)
    a = [rng.standard_normal(1 << 16).astype(np.float32) for _ in range(2)]
    refs = [np.empty_like(x) for x in a]
    for k, x, r in zip(kernels, a, refs):
        k(x, r)
    np.testing.assert_allclose(refs[1], a[1] * 3 + 1, rtol=1e-5, atol=1e-6)

    def work(i):
        b = np.empty_like(a[i])
        bad = 0
        for _ in range(200):
            b.fill(np.nan)
            kernels[i](a[i], b)
            bad += not np.array_equal(b, refs[i])
        return bad
    assert _in_threads(2, work) == [0, 0]


def test_outputs_are_lent_not_copied_and_never_overwritten_while_held():
    """A run hands its output arrays to the caller. One the caller dropped is written again
    in place by the next run (no copy, no fresh pages); one still held, or a view of it, is
    left alone: the next run writes a new array. benchmark and profile, which run on the
    default state, do not touch a held output either."""
    exe = _mlp()
    x1, x2 = np.ones((2, 16), np.float32), np.full((2, 16), -0.5, np.float32)
    ref1, ref2 = exe(x1)[0].copy(), exe(x2)[0].copy()
    assert not np.allclose(ref1, ref2)
    addr = exe(x1)[0].ctypes.data            # dropped at once
    assert exe(x1)[0].ctypes.data == addr    # the same array, written again
    held = exe(x1)[0]
    second = exe(x2)[0]
    assert second.ctypes.data != held.ctypes.data
    np.testing.assert_array_equal(held, ref1)
    np.testing.assert_array_equal(second, ref2)
    row = exe(x2)[0][0]                      # only a view of the output survives
    exe(x1)
    np.testing.assert_array_equal(row, ref2[0])
    kept = exe(x2)[0]
    exe.set_input("input", x1)
    exe.benchmark(number=2, repeat=1)
    exe.profile_text(number=1)
    np.testing.assert_array_equal(kept, ref2)
    assert exe._pool.made == 1


def test_an_output_computed_through_a_view_is_lent_too():
    """The output reshapes a matmul's result, which the matmul writes straight into the
    output array (a view of it): held, the next run remakes that view on a new array."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 24)).astype(np.float32)
    shape = numpy_helper.from_array(np.array([1, 4, 24], np.int64), "shape")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]),
         helper.make_node("Reshape", ["y", "shape"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 24])],
        [numpy_helper.from_array(w, "w"), shape])
    exe = G.build(G.optimize(G.from_onnx(helper.make_model(g))), target="llvm")
    assert exe._pool.default.lendable       # the view is no reason to copy
    xs = [rng.standard_normal((4, 16)).astype(np.float32) for _ in range(3)]
    outs = [exe(x)[0] for x in xs]
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out, (x @ w).reshape(1, 4, 24), rtol=1e-5, atol=1e-5)
    assert len({o.ctypes.data for o in outs}) == 3


def _conv_and_view(channels=16, size=64):
    """y = relu(1x1 conv of x), z = x reshaped: an input of channels*size^2 floats (256 KB
    at the defaults: read from the caller's array), one output a view of it."""
    from onnx import TensorProto, helper, numpy_helper
    w = np.random.default_rng(3).standard_normal((8, channels, 1, 1)).astype(np.float32)
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"]),
         helper.make_node("Reshape", ["x", "shape"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, size, size]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, channels * size * size])],
        [numpy_helper.from_array(w, "w"), shape])
    exe = G.build(G.optimize(G.from_onnx(helper.make_model(g))), target="llvm")

    def ref(x):
        return np.maximum(np.einsum("oc,bchw->bohw", w[:, :, 0, 0], x.astype(np.float32)), 0)
    return exe, ref


def test_large_inputs_are_read_from_the_callers_array():
    """A large input is not copied: the kernels read the caller's array (its contents at
    each run). Any other array (another layout or dtype) is copied into the executor's
    own buffer, never into an array a caller passed before; so does set_input. An output
    that is a view of the input is the caller's own copy."""
    exe, ref = _conv_and_view()
    rng = np.random.default_rng(0)
    x1, x2 = (rng.standard_normal((1, 16, 64, 64)).astype(np.float32) for _ in range(2))
    assert x1.nbytes >= tdsl.graph.runstate.ZERO_COPY_MIN_BYTES
    y, z = exe(x1)
    np.testing.assert_allclose(y, ref(x1), rtol=1e-5, atol=1e-5)
    assert exe.inputs["x"] is x1
    np.testing.assert_array_equal(z, x1.reshape(1, -1))
    assert not np.may_share_memory(z, x1)
    x1 *= 2                                     # the same array, new contents
    np.testing.assert_allclose(exe(x1)[0], ref(x1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(exe(x2)[0], ref(x2), rtol=1e-5, atol=1e-5)
    assert exe.inputs["x"] is x2
    saved = x2.copy()
    for other in (np.asfortranarray(x1), x1.astype(np.float64),
                  np.frombuffer(x1.tobytes(), np.float32).reshape(x1.shape)):
        y, z = exe(other)
        np.testing.assert_allclose(y, ref(other), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(z, other.reshape(1, -1).astype(np.float32))
    assert exe.inputs["x"] is not x2
    np.testing.assert_array_equal(x2, saved)    # copies went to the executor's buffer
    exe(x2)
    exe.set_input("x", 3 * x1)
    exe.benchmark(number=1, repeat=1)
    np.testing.assert_array_equal(x2, saved)
    np.testing.assert_array_equal(exe.inputs["x"], 3 * x1)
    np.testing.assert_allclose(exe(x2)[0], ref(x2), rtol=1e-5, atol=1e-5)


def test_concurrent_runs_on_callers_arrays_match_single_threaded():
    exe, ref = _conv_and_view()
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((1, 16, 64, 64)).astype(np.float32) for _ in range(4)]
    refs = [ref(x) for x in xs]

    def work(i):
        bad = 0
        for k in range(60):      # each thread alternates two arrays: states re-bind often
            j = (i + k % 2) % len(xs)
            bad += not np.allclose(exe(xs[j])[0], refs[j], rtol=1e-5, atol=1e-5)
        return bad
    assert _in_threads(4, work) == [0, 0, 0, 0]
