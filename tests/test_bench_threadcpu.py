"""bench/threadcpu.py: a process's CPU time read apart by whose threads spent it (the
caller, tdsl's worker pool, onnxruntime's, others), so that a bench running tdsl beside
onnxruntime tells tdsl's work from the other runtime's."""
import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import threadcpu  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux thread ids")


def _spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _worker(name, seconds):
    """A started thread that spins `seconds` of CPU, sets `done`, then waits for `stop`."""
    done, stop = threading.Event(), threading.Event()

    def work():
        _spin(seconds)
        done.set()
        stop.wait()
    t = threading.Thread(target=work, name=name)
    t.start()
    return t, done, stop


def test_a_group_gets_the_threads_started_meanwhile_and_their_cpu():
    owners = threadcpu.ThreadOwners()
    before = owners.read()
    t, done, stop = owners.started("ort", lambda: _worker("fake-ort", 0.03))
    try:
        assert owners.ids["ort"] == {t.native_id}
        _spin(0.02)
        assert done.wait(30)
        d = threadcpu.spent(before, owners.read())
        assert d["caller"] >= 0.015 and d["caller_user"] + d["caller_system"] >= 0.01
        assert d["ort"] >= 0.025 and d["other"] < 0.02
        assert d["process"] >= d["caller"] + d["ort"] - 1e-3
    finally:
        stop.set()
        t.join()


def test_other_threads_are_named_busiest_first():
    owners = threadcpu.ThreadOwners()
    before = owners.read()
    t, done, stop = _worker("busy-one", 0.04)
    try:
        assert done.wait(30)
        d = threadcpu.spent(before, owners.read())
    finally:
        stop.set()
        t.join()
    assert d["other"] >= 0.035 and d["threads"][t.native_id] >= 0.035
    assert threadcpu.busiest(d).startswith(f"busy-one ({t.native_id}) +")
    assert threadcpu.busiest({}) == ""


def test_the_pool_group_is_tdsls_workers():
    import numpy as np
    import tdsl
    from tdsl.runtime import threadpool
    if not threadpool.load_into_jit():
        pytest.skip("no C compiler: no worker pool")
    A = tdsl.placeholder((1 << 16,), name="A")
    B = tdsl.compute(A.shape, lambda i: A[i] * 2.0, name="B")
    s = tdsl.create_schedule(B)
    io, _ = s[B].split(B.op.axis[0], factor=1024)
    s[B].parallel(io)
    f = tdsl.build(s, [A, B])
    f.set_num_threads(2)
    a = np.ones(1 << 16, "float32")
    b = np.zeros_like(a)
    f(a, b)
    np.testing.assert_array_equal(b, 2 * a)
    owners = threadcpu.ThreadOwners()
    owners.read()
    assert owners.ids["pool"] == set(threadpool.worker_ids()) and owners.ids["pool"]
    assert not owners.ids["pool"] & owners.ids["caller"]
