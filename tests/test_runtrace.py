"""The runtime's trace ring (runtime/trace.c, tdsl.runtime.runtrace): a native run records
its start and each kernel's end in order, each parallel loop handed to the pool records
tasks the caller and the workers ran and times that add up, `Executor.trace` reads its
per-kernel times from the ring (they cover the call), and recording can be turned off."""
import numpy as np
import pytest

import tdsl.graph as G
from tdsl.graph import models
from tdsl.runtime import callseq, runtrace

pytest.importorskip("onnx")
pytestmark = pytest.mark.skipif(callseq.runner() is None,
                                reason="the worker pool's library is not loaded (no C compiler)")


@pytest.fixture(scope="module")
def cnn():
    exe = G.build(G.optimize(G.from_onnx(models.resnet18(size=32, width=8, num_classes=10))))
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    return exe, x


def _my_run(recs):
    """The records of the last walk in `recs`: its RUN record and its KERNEL records."""
    runs = np.flatnonzero(recs[:, 1] == runtrace.RUN)
    assert len(runs), recs[:, 1]
    table = recs[runs[-1], 3]
    mine = recs[(recs[:, 3] == table) & np.isin(recs[:, 1], (runtrace.RUN, runtrace.KERNEL))]
    start = np.flatnonzero(mine[:, 1] == runtrace.RUN)[-1]
    return mine[start:]


def test_a_run_records_each_kernel_in_order_and_its_loops(cnn):
    exe, x = cnn
    ref = exe.run(x)[0].copy()
    since = runtrace.count()
    out = exe.run(x)[0]
    recs, count = runtrace.read(since)
    np.testing.assert_array_equal(out, ref)          # recording changes no result
    assert count == since + len(recs)
    walk = _my_run(recs)
    kernels = walk[1:]
    assert (kernels[:, 1] == runtrace.KERNEL).all()
    np.testing.assert_array_equal(kernels[:, 2], np.arange(len(kernels)))     # in order
    assert len(kernels) >= 10
    assert (np.diff(walk[:, 0]) >= 0).all()
    loops = recs[recs[:, 1] == runtrace.LOOP]
    assert len(loops) >= 5                        # resnet18's convs are parallel loops
    t, tasks, mine, start, own, done = (loops[:, k] for k in (0, 2, 3, 4, 5, 6))
    assert ((mine >= 0) & (mine <= tasks)).all()
    assert ((own >= 0) & (own <= done)).all()
    # a worker that claimed a task did so before the loop was done; one that did not
    # left every task to the caller
    assert ((start == -1) | ((start >= 0) & (start <= done))).all()
    assert (mine[start == -1] == tasks[start == -1]).all()
    assert ((t >= walk[0, 0]) & (t + done <= walk[-1, 0])).all()      # within the run


def test_trace_reads_kernel_times_from_the_ring(cnn):
    exe, x = cnn
    exe.set_input(exe.input_names[0], x)
    seen = []
    names, kt, walls = exe.trace(5, between=seen.append)
    assert seen == list(range(5))
    assert kt.shape == (5, len(names)) and (kt >= 0).all()
    np.testing.assert_allclose(kt.sum(axis=1), walls, rtol=1e-9)
    assert (walls > 0).all() and (walls < 1.0).all()


def test_recording_can_be_turned_off(cnn):
    exe, x = cnn
    ref = exe.run(x)[0].copy()
    was = runtrace.set_enabled(False)
    try:
        assert was and not runtrace.enabled()
        since = runtrace.count()
        np.testing.assert_array_equal(exe.run(x)[0], ref)
        assert runtrace.count() == since
        names, kt, walls = exe.trace(2)     # times the calls from Python instead
        assert kt.shape == (2, len(names)) and (walls > 0).all()
        assert runtrace.count() == since
    finally:
        runtrace.set_enabled(was)
    assert runtrace.enabled()


def test_the_ring_keeps_the_newest_records():
    since = runtrace.count()
    recs, count = runtrace.read(0)
    assert count >= since and len(recs) <= runtrace.SIZE
    # from `count` on: only what was written since (another thread of the process, a
    # test's executor still running, may have added a few records meanwhile)
    newer, total = runtrace.read(count)
    assert newer.shape == (total - count, runtrace.WORDS) and total >= count
