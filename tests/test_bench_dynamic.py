"""bench/dynamic.py: a first call's cost beyond a warm one taken apart into work (CPU
time), page faults and time waiting for a core, so that a sweep row tells tdsl's work at
a new size from the machine's."""
import mmap
import os
import sys
import threading
import time
import types

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import dynamic  # noqa: E402
from latency import _threads  # noqa: E402


def _cost(wall, cpu, faults=0, waited=0.0, stolen=0.0, caller=None, pool=0.0, ort=0.0, other=0.0,
          user=None, system=0.0, caller_waited=0.0, threads=None, collections=()):
    """A _Cost of a call: `cpu` the process's, `caller` the calling thread's on a core
    (default: what the pool, onnxruntime's and other threads leave of `cpu`)."""
    caller = cpu - pool - ort - other if caller is None else caller
    by_thread = {"caller": caller, "pool": pool, "ort": ort, "other": other, "process": cpu,
                 "caller_user": caller - system if user is None else user, "caller_system": system,
                 "caller_waited": caller_waited, "threads": threads or {},
                 "names": {t: "MainThread" for t in threads or {}}}
    return types.SimpleNamespace(wall=wall, cpu=cpu, faults=faults, waited=waited, stolen=stolen,
                                 by_thread=by_thread, collections=list(collections))


def test_cost_counts_the_faults_and_cpu_of_fresh_memory():
    n = 32 << 20

    def touch():
        # a mapping of its own: numpy's allocator may hand out heap memory that an earlier
        # test in the process had touched already (a suite run once counted 0 faults)
        with mmap.mmap(-1, n) as m:
            a = np.frombuffer(m, np.uint8)
            a[:] = 1
            total = int(a.sum())
            del a
        return total
    cost = dynamic._Cost(touch, _threads())
    # 32 MiB first touched: a fault per page mapped, 4 KiB or huge (2 MiB: 16)
    assert cost.faults >= 4
    assert cost.cpu > 0 and cost.wall > 0 and cost.waited >= 0 and cost.stolen >= 0
    again = dynamic._Cost(lambda: None, _threads())
    assert again.faults < cost.faults


def test_first_note_splits_work_from_waiting():
    warm = [_cost(0.060, 0.110, waited=0.001, pool=0.05), _cost(0.062, 0.112, waited=0.002, pool=0.05),
            _cost(0.061, 0.111, pool=0.05)]
    # 40 ms more wall, 2 ms more CPU (the caller's), 38 ms more waiting: the machine's
    first = _cost(0.101, 0.113, faults=7, waited=0.039, stolen=0.02, pool=0.05, caller_waited=0.038)
    note = dynamic._first_note([first] * 3, warm)
    assert "+40.0 ms" in note and "on a core +2.0 ms" in note and "page faults 7" in note
    assert "waiting for a core +38.0" in note and "blocked +0.0" in note
    assert "tdsl's pool +0.0" in note and "onnxruntime's threads +0.0" in note
    assert "waited for a core +38.0 ms" in note and "stolen by the host 20 ms" in note


def test_first_note_names_the_threads_that_worked():
    warm = [_cost(0.060, 0.110, pool=0.05)] * 3
    # the caller blocked 30 ms (another thread held the GIL) while that thread worked
    first = _cost(0.090, 0.140, pool=0.05, other=0.030, threads={threading.get_native_id(): 0.030},
                  collections=[(2, 0.004)])
    note = dynamic._first_note([first] * 3, warm)
    assert "blocked +30.0" in note and "on a core +0.0 ms" in note
    assert "other threads +30.0" in note and f"MainThread ({threading.get_native_id()}) +30.0" in note
    assert "first) gen2 4.0 ms" in note and "process +30.0" in note


def test_first_note_is_empty_below_the_threshold():
    warm = [_cost(0.060, 0.110)] * 3
    assert dynamic._first_note([_cost(0.060 + dynamic.FIRST_NOTE_MS * 1e-3 / 2, 0.2)] * 3, warm) == ""


def test_first_calls_are_told_from_warm_ones_pair_by_pair():
    """A stretch when another process held a core doubles both calls of a pair, or one
    call of one pair: neither moves the median of the pairs' differences, where the
    medians of the first and of the warm calls taken apart move by a whole call."""
    warm = [_cost(w, 0.1) for w in (0.060, 0.120, 0.061, 0.121, 0.062)]
    firsts = [_cost(f, 0.1) for f in (0.062, 0.121, 0.400, 0.123, 0.063)]
    assert dynamic._median_extra(firsts, warm) == pytest.approx(0.002)
    assert dynamic._first_note(firsts, warm) == ""
    # the first calls 25 ms dearer in every pair, whatever the load
    firsts = [_cost(w.wall + 0.025, 0.1) for w in warm]
    assert dynamic._median_extra(firsts, warm) == pytest.approx(0.025)
    assert "first calls +25.0 ms" in dynamic._first_note(firsts, warm)


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="Linux /proc/stat")
def test_stolen_seconds_reads_the_steal_column():
    with open("/proc/stat") as f:
        fields = f.readline().split()
    assert fields[0] == "cpu"
    before = dynamic._stolen_seconds()
    assert before == pytest.approx(int(fields[8]) / os.sysconf("SC_CLK_TCK"), abs=1.0)
    assert dynamic._stolen_seconds() >= before


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux schedstat")
def test_cost_reads_waits_of_the_threads_given():
    cost = dynamic._Cost(lambda: sum(range(100000)), _threads())
    assert cost.waited >= 0 and cost.cpu > 0


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux thread CPU clocks")
def test_cost_tells_the_callers_work_from_another_threads_and_from_blocking():
    def spin(seconds):
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass
    cost = dynamic._Cost(lambda: spin(0.05))
    # the caller's own work: on a core (getrusage's user and system: the same time, split
    # by tick samples), not blocked
    assert cost.by_thread["caller"] >= 0.045
    assert cost.by_thread["caller_user"] + cost.by_thread["caller_system"] >= 0.03
    assert cost.wall - cost.by_thread["caller"] - cost.by_thread["caller_waited"] < 0.02 + cost.wall / 2
    t = threading.Thread(target=spin, args=(0.05,), name="busy-helper")
    cost = dynamic._Cost(lambda: (t.start(), t.join()))
    # the caller blocked in join while the other thread worked: counted as another's
    assert cost.by_thread["other"] >= 0.04 and cost.by_thread["caller"] < 0.02
    assert cost.wall - cost.by_thread["caller"] - cost.by_thread["caller_waited"] >= 0.03
    assert cost.by_thread["process"] >= cost.by_thread["other"]


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux thread CPU clocks")
def test_cost_counts_the_collections_in_the_call():
    import gc
    cost = dynamic._Cost(lambda: gc.collect(1))
    assert [g for g, _ in cost.collections] == [1] and cost.collections[0][1] >= 0


def test_static_note_is_empty_within_the_band():
    pool = dynamic.PoolShare(3)
    assert dynamic._static_note(1.04, pool, 1) == ""
    assert dynamic._static_note(0.96, pool, 1) == ""


def test_static_note_tells_each_sides_share_of_the_pools_work():
    pool = dynamic.PoolShare(3)
    pool.tasks, pool.worker_tasks = [1000, 1000, 0], [20, 490, 0]
    pool.waited, pool.calls = [0.030, 0.0, 0.0], [15, 15, 15]
    note = dynamic._static_note(1.84, pool, 1)
    assert "dynamic/static 1.84" in note
    assert "dynamic's blocks: workers ran 2% of its tasks" in note
    assert "static's: workers ran 49% of its tasks" in note
    assert "waited for a core 2.000 ms a call" in note        # 30 ms over 15 calls
    assert "an even split: 50%" in note


def test_pool_share_counts_the_tasks_of_a_parallel_kernel():
    import tdsl.graph as G
    from latency import blocks
    from tdsl.graph import models
    from tdsl.runtime import threadpool
    if not threadpool.stats():
        pytest.skip("the parallel pool did not load here")
    exe = G.build(G.optimize(G.from_onnx(models.mobilenetv2_blocks(2, 56))))
    x = np.random.default_rng(0).standard_normal((2, 3, 56, 56)).astype(np.float32)
    pool = dynamic.PoolShare(2, _threads())
    # blocks of `number` calls, one a turn, whatever the calls last
    blocks([lambda: exe.run(x), lambda: None], number=3, repeat=2, warmup_s=0.0, pause_s=0.0,
           watch=pool, min_block_s=0.0, turn_s=0.0)
    assert pool.calls == [6, 6]
    assert pool.tasks[0] > 0 and pool.tasks[1] == 0 and pool.share(1) is None
    assert 0.0 <= pool.share(0) <= 1.0 and pool.waited[0] >= 0.0


def test_a_timed_call_runs_with_the_heap_before_it_frozen():
    import gc
    seen = []
    keep = [object() for _ in range(10)]
    dynamic._Cost(lambda: seen.append(gc.get_freeze_count()))
    assert seen[0] >= len(keep) and gc.get_freeze_count() == 0
