"""Outputs a caller holds, in a network built without symbolic sizes: a host run lends its
output arrays (runstate.py), which lie in a host_buffer.OutputBuffers as those of a
network with symbolic sizes do (sizes.Slot). A loop holding its last output
(`y = exe.run(x)`) alternates between two buffers and, after its first two calls, faults
no fresh page in; outputs held, kept in a list or kept only as a view are never written
again, from one thread or several. Results are compared with onnxruntime."""
import resource
import threading

import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph import models
from tdsl.graph.host_buffer import MAX_LEFT

from fresh_interpreter import run_fresh

pytest.importorskip("onnxruntime")


def _close(out, ref):
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


def _mlp(batch=8, sizes=(64, 48, 10)):
    m = models.mlp(batch=batch, sizes=sizes)
    return m, G.build(G.optimize(G.from_onnx(m)))


def _x(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_a_loop_holding_its_last_output_alternates_between_two_buffers():
    """The held output keeps its values while the next call runs into the other buffer;
    outputs kept in a list are never written again and the buffers kept stay few; once
    the list is dropped, the loop is back to two buffers."""
    m, exe = _mlp()
    out = exe._pool.default.out
    buffers, prev = set(), None
    for i in range(8):
        x = _x((8, 64), i)
        y = exe.run(x)[0]
        if prev is not None:
            _close(*prev)           # written by no later call
        ref = models.onnxruntime_run(m, {"input": x})[0]
        _close(y, ref)
        assert np.shares_memory(y, out.array)
        buffers.add(out.array.ctypes.data)
        prev = (y, ref)
    assert len(buffers) == 2, buffers
    kept = []
    for i in range(9):
        x = _x((8, 64), 100 + i)
        kept.append((exe.run(x)[0], models.onnxruntime_run(m, {"input": x})[0]))
        for o, ref in kept:
            _close(o, ref)
        # beyond MAX_LEFT a buffer is the caller's alone: the executor forgets it
        assert len(out._left) <= MAX_LEFT
    assert len({o.ctypes.data for o, _ in kept}) == len(kept)
    del kept, y, prev
    buffers = set()
    for i in range(5):
        x = _x((8, 64), 200 + i)
        y = exe.run(x)[0]
        _close(y, models.onnxruntime_run(m, {"input": x})[0])
        buffers.add(out.array.ctypes.data)
    assert len(buffers) == 2, buffers


@pytest.mark.parametrize("symbolic", [False, True])
def test_a_view_of_an_output_is_enough_to_keep_it(symbolic):
    """`row = exe.run(x)[0][0]`: the caller keeps only a view, and that view holds the
    output (host_buffer.GrowingBuffer.lend), with or without symbolic sizes."""
    m, exe = _mlp(batch="batch" if symbolic else 8)
    x1, x2 = _x((8, 64), 1), _x((8, 64), 2)
    ref1 = models.onnxruntime_run(m, {"input": x1})[0]
    row = exe.run(x1)[0][0]
    _close(exe.run(x2)[0], models.onnxruntime_run(m, {"input": x2})[0])
    _close(row, ref1[0])


@pytest.mark.parametrize("batch", [8, "batch"])
def test_a_loop_holding_its_last_output_binds_no_kernel_again(monkeypatch, batch):
    """`y = exe.run(x)` alternates between two output buffers: after the first call on
    each, the state moves back to the bindings it had there (RunState.relocate), binding
    no kernel again, and every output stays right; static and symbolic builds alike."""
    from tdsl.graph import runstate
    m, exe = _mlp(batch=batch)
    binds = []
    real = runstate.HostMemory.bind
    monkeypatch.setattr(runstate.HostMemory, "bind", lambda self, *a: binds.append(1) or real(self, *a))
    y = None
    for i in range(8):
        x = _x((8, 64), 400 + i)
        before = len(binds)
        prev, y = y, exe.run(x)[0]
        if i >= 2:
            assert len(binds) == before, i
        _close(y, models.onnxruntime_run(m, {"input": x})[0])
        if prev is not None:
            _close(prev, models.onnxruntime_run(m, {"input": _x((8, 64), 399 + i)})[0])
            assert not np.shares_memory(prev, y)
        del prev        # what the loop holds during the next call is `y` alone


def test_holding_loops_in_two_threads_stay_right():
    """Each concurrent caller runs on a state of its own, with buffers of its own: two
    threads each holding their last output never see the other's values."""
    m, exe = _mlp()
    xs = [[_x((8, 64), 10 * t + i) for i in range(4)] for t in range(2)]
    refs = [[models.onnxruntime_run(m, {"input": x})[0] for x in row] for row in xs]
    errors, start = [], threading.Barrier(2)

    def loop(t):
        try:
            start.wait()
            prev = None
            for k in range(60):
                i = k % 4
                y = exe.run(xs[t][i])[0]
                _close(y, refs[t][i])
                if prev is not None:
                    _close(prev, refs[t][(k - 1) % 4])
                prev = y
        except Exception as e:      # noqa: BLE001 - re-raised in the main thread
            errors.append(e)
    threads = [threading.Thread(target=loop, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


def _minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def holding_loop_faults():
    """A server's loop over a static network whose output is 64 MiB: the first call pages
    in the buffer the state was made with, the second (the first still held) the other
    one; every later call writes one of those two (a fresh array per call faulted ~32
    huge pages in, or ~16000 small ones)."""
    m, exe = _mlp(batch=2048, sizes=(16, 8192))
    y = None
    for i in range(6):
        x = _x((2048, 16), i)
        faults = _minor_faults()
        y = exe.run(x)[0]
        faults = _minor_faults() - faults
        if i >= 2:
            assert faults < 24, (i, faults)
        _close(y, models.onnxruntime_run(m, {"input": x})[0])


def test_a_static_loop_holding_its_last_output_touches_no_fresh_memory():
    run_fresh("test_graph_held_outputs", "holding_loop_faults")
