"""bench/floor.py: the machine's latency floor, a register-only loop on one thread and on
two joined threads, calibrated to a duration."""
import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
floor = pytest.importorskip("floor")

from tdsl.runtime import ccompiler  # noqa: E402

pytestmark = pytest.mark.skipif(ccompiler.find() is None, reason="needs a C compiler")


@pytest.fixture(autouse=True)
def _workers_gone():
    """Lets a test's spinning worker time out and exit, so that it takes no core from the
    tests after it (bench/latency.py counts a thread of the process queued for a core)."""
    yield
    time.sleep(2 * floor.IDLE_MS / 1000)


def _returns(fn, within_s=20.0):
    done = threading.Event()
    t = threading.Thread(target=lambda: (fn(), done.set()), daemon=True)
    t.start()
    return done.wait(within_s)


@pytest.mark.parametrize("kind", sorted(floor.KINDS))
def test_two_threads_restart_their_worker_after_it_timed_out(kind):
    one, two = floor.callables(2e-4, kind)
    assert _returns(one)
    for _ in range(3):
        assert _returns(two)
    # the worker spins IDLE_MS without a call, then exits; the next call starts another
    time.sleep(3 * floor.IDLE_MS / 1000)
    for _ in range(3):
        assert _returns(two)


def test_the_iterations_scale_with_the_duration():
    lib = floor._load()
    short, long = floor._iterations(lib.floor_one, 5e-4), floor._iterations(lib.floor_one, 2e-3)
    # from the thread's CPU clock, so another process taking the core leaves it be
    assert 2.5 < long / short < 6.0, (short, long)


def test_run_median_is_the_least_median_of_its_runs():
    calls = []

    def fn():
        calls.append(0)
    assert floor.run_median(fn, run=5, pause_s=0.0, runs=2) >= 0.0
    assert len(calls) == 2 * (1 + 5)
