"""A host run calls its kernels in one native call (runtime/callseq.py, calls.c): the
results are those of the Python loop it replaced, whatever rebinds the calls between runs
(held outputs, zero-copy inputs, other sizes), and a failing kernel raises the error a
call from Python raises, nothing after it having run."""
import threading

import numpy as np
import pytest

import tdsl
import tdsl.graph as G
from tdsl.graph import models
from tdsl.runtime import callseq
from tdsl.runtime.callseq import CallSequence

pytest.importorskip("onnx")
pytestmark = pytest.mark.skipif(callseq.runner() is None,
                                reason="the worker pool's library is not loaded (no C compiler)")


@pytest.fixture
def python_loop(monkeypatch):
    """Runs `fn()` with every run's kernels called from Python instead."""
    def run(fn):
        with monkeypatch.context() as m:
            m.setattr(CallSequence, "run", CallSequence.run_in_python)
            return fn()
    return run


def _x(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _close(out, ref):
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


def _states(exe):
    """The host run states the executor holds now (static: its pool's; symbolic: every
    slot's)."""
    pool = exe._pool
    if exe.binder is None:
        return [pool.default, *pool._spare]
    slots = exe._slots
    return [st for slot in [slots.default, *slots._spare] for st in slot.states.values()]


NETWORKS = {
    # a ResNet-shaped CNN: convs, pools, residual adds, a classifier
    "cnn": (lambda b, s: models.resnet18(batch=b, size=32, width=8, num_classes=10),
            [(1, 3, 32, 32), (3, 3, 32, 32)]),
    # one encoder layer: attention heads (reshapes, transposes, batched matmuls), layer norms
    "transformer": (lambda b, s: models.transformer_encoder(batch=b, seq=s, d_model=64, heads=4, ff=128),
                    [(1, 5, 64), (2, 17, 64)]),
}


@pytest.mark.parametrize("name", list(NETWORKS))
@pytest.mark.parametrize("symbolic", [False, True])
def test_native_runs_give_the_python_loops_results(name, symbolic, python_loop):
    make, shapes = NETWORKS[name]
    if not symbolic:
        shapes = shapes[:1]
    model = make("batch", "sequence") if symbolic else make(*shapes[0][:2])
    exe = G.build(G.optimize(G.from_onnx(model)))
    for seed, shape in enumerate(shapes):
        x = _x(shape, seed)
        got = exe.run(x)[0].copy()
        assert all(st.calls.native for st in _states(exe)), "every kernel runs from the native table"
        ref = python_loop(lambda: exe.run(x)[0].copy())
        np.testing.assert_array_equal(got, ref)
        _close(got, models.onnxruntime_run(model, {"input": x})[0])


@pytest.mark.parametrize("symbolic", [False, True])
def test_held_outputs_and_zero_copy_inputs_rebind_the_native_table(symbolic, python_loop):
    """A loop that holds its last outputs (the state moves them to another buffer and
    rebinds the calls that write them), with inputs read from the caller's arrays (the
    calls that read them are rebound to each new array) and, symbolic, two sizes in turn:
    every call's result is the Python loop's, and every output held is never written
    again."""
    model = models.resnet18(batch="batch" if symbolic else 2, size=96, width=8, num_classes=10)
    exe = G.build(G.optimize(G.from_onnx(model)))
    shapes = [(2, 3, 96, 96), (3, 3, 96, 96)] if symbolic else [(2, 3, 96, 96)]
    xs = [_x(shapes[i % len(shapes)], i) for i in range(6)]      # >= 128 KB: read in place
    refs = [python_loop(lambda: exe.run(x)[0].copy()) for x in xs]
    held = []
    for rnd in range(3):
        for x, ref in zip(xs, refs):
            out = exe.run(x)[0]
            np.testing.assert_array_equal(out, ref)
            held = (held + [(out, ref)])[-3:]
        for out, ref in held:
            np.testing.assert_array_equal(out, ref)
    state = _states(exe)[0]
    assert any(state.inputs[n] is not state.home[n] for n in state.readers), "an input was read in place"
    assert state.moving is not None, "the outputs moved to another buffer (relocate)"


def _embedding(symbolic):
    """Token ids -> embedding rows -> a linear layer: ids past the vocabulary are a
    BoundsError of the gather kernel, which runs before the matmul that writes the output."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    table = rng.standard_normal((50, 16)).astype(np.float32)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    seq = "sequence" if symbolic else 6
    g = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
         helper.make_node("MatMul", ["e", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("symbolic", [False, True])
def test_an_out_of_range_id_raises_the_same_error_and_nothing_after_it_runs(symbolic, python_loop):
    model = _embedding(symbolic)
    exe = G.build(G.optimize(G.from_onnx(model)))
    good = np.array([[1, 2, 3, 4, 5, 49]], np.int64)
    bad = good.copy()
    bad[0, 2] = 50
    ref = models.onnxruntime_run(model, {"ids": good})[0]
    _close(exe.run(good)[0], ref)
    state = _states(exe)[0]
    assert state.calls.native
    errors = []
    for run in (lambda f: f(), python_loop):
        before = state.outputs[0].copy()
        with pytest.raises(tdsl.BoundsError, match="outside its extent") as ei:
            run(lambda: exe.run(bad))
        errors.append(str(ei.value))
        # the matmul after the gather did not run: the output is as the last run left it
        np.testing.assert_array_equal(state.outputs[0], before)
        _close(exe.run(good)[0], ref)       # and the next run starts at the first kernel
    assert errors[0] == errors[1] and "'ids'" in errors[0], errors


def _add(n=64, c=1.0):
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: A[i] + c, name="B")
    return tdsl.build(tdsl.create_schedule(B.op), [A, B])


def test_a_sequence_with_calls_from_python_and_failures_in_it():
    """Calls without a native entry (a Python function, a kernel staging an unaligned
    array) run from Python in their place; a failing extern call raises the message a
    call from Python raises, with the calls before it run and none after it; the next run
    starts at the beginning."""
    n = 64
    add, order = _add(n), []
    fail = [True]

    def maybe_fail(x, y):
        if fail[0]:
            raise ValueError("refused by the test")
        y[:] = x * 3
    tdsl.register_func("test.native_calls.maybe_fail", maybe_fail, override=True)
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.extern(A.shape, [A], lambda ins, outs: tdsl.call_packed(
        "test.native_calls.maybe_fail", ins[0], outs[0]), name="B")
    ext = tdsl.build(tdsl.create_schedule(B.op), [A, B])
    a = np.arange(n, dtype=np.float32)
    bufs = [np.zeros(n, np.float32) for _ in range(4)]
    raw = np.zeros(4 * n + 1, np.float32)
    unaligned = np.frombuffer(raw.data, np.float32, n, offset=2)     # staged through a copy
    seq = CallSequence([add.prepared(a, bufs[0]),
                        lambda: order.append(bufs[0].copy()),
                        add.prepared(bufs[0], unaligned),
                        ext.prepared(bufs[0], bufs[1]),
                        add.prepared(bufs[1], bufs[2])])
    assert [c.native is not None for c in (seq[0], seq[2], seq[3])] == [True, False, True]
    assert not seq.native
    with pytest.raises(tdsl.TdslError) as ei:
        seq.run()
    with pytest.raises(tdsl.TdslError) as direct:
        seq[3]()
    assert str(ei.value) == str(direct.value) and "refused by the test" in str(ei.value)
    np.testing.assert_array_equal(order[0], a + 1)
    np.testing.assert_array_equal(unaligned, a + 2)
    assert not bufs[2].any()        # after the failure: not run
    fail[0] = False
    seq.run()
    assert len(order) == 2
    np.testing.assert_array_equal(bufs[2], (a + 1) * 3 + 1)


def test_a_rebound_call_changes_the_table():
    """Assigning a call writes its entry: the next run calls the new one, native or not."""
    n = 64
    add1, add5 = _add(n, 1.0), _add(n, 5.0)
    a, b, c = np.arange(n, dtype=np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32)
    seq = CallSequence([add1.prepared(a, b), add1.prepared(b, c)])
    seq.run()
    np.testing.assert_array_equal(c, a + 2)
    seq[1] = add5.prepared(b, c)
    seq.run()
    np.testing.assert_array_equal(c, a + 6)
    seq[0] = lambda: b.fill(-1)     # a Python call in its place, then native again
    seq.run()
    np.testing.assert_array_equal(c, np.full(n, 4, np.float32))
    seq[0] = add5.prepared(a, b)
    assert seq.native
    seq.run()
    np.testing.assert_array_equal(c, a + 10)


def test_threads_run_their_own_states_natively_at_several_sizes():
    """Threads calling one symbolic executor at different sizes, each holding its last
    output: every result is the single-threaded one."""
    model = models.transformer_encoder(batch="batch", seq="sequence", d_model=64, heads=4, ff=128)
    exe = G.build(G.optimize(G.from_onnx(model)))
    shapes = [(1, 3, 64), (2, 9, 64), (1, 16, 64), (3, 4, 64)]
    xs = [_x(s, i) for i, s in enumerate(shapes)]
    refs = [exe.run(x)[0].copy() for x in xs]
    barrier, errors = threading.Barrier(4), []

    def work(i):
        try:
            barrier.wait()
            last = None
            for k in range(40):
                j = (i + k) % len(xs)
                out = exe.run(xs[j])[0]
                np.testing.assert_array_equal(out, refs[j])
                if last is not None:
                    np.testing.assert_array_equal(last[0], refs[last[1]])
                last = (out, j)
        except BaseException as e:      # noqa: BLE001 - re-raised on the main thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    assert all(st.calls.native for st in _states(exe))


def test_without_the_pool_library_each_kernel_is_called_from_python():
    """TDSL_NO_THREADPOOL (or no C compiler): no native walk, each call from Python."""
    import os
    import subprocess
    import sys
    code = (
        "import numpy as np, tdsl.graph as G\n"
        "from tdsl.graph import models\n"
        "from tdsl.runtime import callseq\n"
        "m = models.mlp(batch=2, sizes=(16, 32, 8))\n"
        "exe = G.build(G.optimize(G.from_onnx(m)))\n"
        "x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)\n"
        "assert callseq.runner() is None and not exe._pool.default.calls.native\n"
        "ref = models.onnxruntime_run(m, {'input': x})[0]\n"
        "np.testing.assert_allclose(exe.run(x)[0], ref, rtol=1e-5, atol=1e-5)\n"
        "print('ok')\n")
    env = dict(os.environ, TDSL_NO_THREADPOOL="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
