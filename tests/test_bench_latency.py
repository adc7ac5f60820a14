"""bench/latency.py: the spread of single calls, and the tail kept apart from the calls in
which the process lost a core."""
import os
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import latency  # noqa: E402


def test_spread_keeps_apart_the_calls_that_waited_for_a_core():
    calls = [1e-3] * 97 + [1.1e-3, 9e-3, 9e-3]
    waited = [0.0] * 98 + [5e-3, 6e-3]        # the slow calls waited 5-6 ms for a core
    sp = latency.Spread(calls, [2e-3], waited=waited)
    assert sp.p99 > 5e-3                        # the tail as measured
    assert sp.n_kept == 98
    assert sp.p99_kept < 1.2e-3 and sp.p50_kept == pytest.approx(1e-3)


def test_spread_without_schedstat_keeps_every_call():
    sp = latency.Spread([1e-3, 2e-3, 3e-3], [1e-3])
    assert sp.n_kept == 3 and sp.p99_kept == pytest.approx(sp.p99)


def test_spread_tells_the_calls_by_their_place_after_the_pause():
    # four runs of 10 calls: each run's first two slow (2x, then 1.5x), the rest 1 ms
    run = [2e-3, 1.5e-3] + [1e-3] * 8
    sp = latency.Spread(run * 4, [3e-3] * 4, run=10)
    assert sp.by_place == pytest.approx([2.0, 1.5, 1.0, 1.0])
    assert sp.p99 / sp.p50 == pytest.approx(2.0)
    assert sp.p99_settled == pytest.approx(1e-3)         # from the 5th call after the pause on


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux schedstat")
def test_percentiles_reads_run_delay_per_call():
    # a thread of this process still spinning from an earlier test (a pool worker, an
    # onnxruntime thread) and queued behind the other test worker's process makes every
    # call of a run read as waited: some attempt of three keeps a call
    kept = []
    for _ in range(3):
        spreads = latency.percentiles([lambda: sum(range(1000)), lambda: np.ones(100).sum()],
                                      calls=10, run=5, pause_s=0.0)
        for sp in spreads:
            assert len(sp.calls) == len(sp.waited) == 10
            assert (sp.waited >= 0).all() and 0 <= sp.n_kept <= 10
        kept.append(min(sp.n_kept for sp in spreads))
        if kept[-1] > 0:
            break
    assert max(kept) > 0


def test_a_wait_booked_after_a_call_counts_for_the_call_it_overlapped():
    # reads (clock before, clock after, per-thread run delay): a worker queued from 1.0 ms
    # until 4.0 ms books its 3 ms wait only when it runs, in the read at 5.1 ms; the calls
    # ran over 0.1-2.0 ms and 2.1-3.0 ms, the last read comes after them
    ms = 1e-3
    reads = [(0.0, 0.1 * ms, [0.0, 0.0]), (2.0 * ms, 2.1 * ms, [0.0, 0.0]),
             (3.0 * ms, 3.1 * ms, [0.0, 0.0]), (5.0 * ms, 5.1 * ms, [0.0, 3.0 * ms])]
    waits = latency.core_waits(reads, [(0, 1), (1, 2)])
    # booked 3 ms between reads spanning at most 3.0-5.1 ms: the wait was in progress at
    # the read at 3.0-3.1 ms and went back at least 0.9 ms, so it covered 2.2-3.0 ms at
    # least: 0.8 ms of the second call; none of the first (a lower bound)
    assert waits[0] == pytest.approx(0.0, abs=1e-12)
    assert waits[1] == pytest.approx(0.8 * ms, rel=1e-6)


def test_a_wait_booked_within_a_call_counts_as_before():
    ms = 1e-3
    reads = [(0.0, 0.0, [0.0]), (1.0 * ms, 1.0 * ms, [0.4 * ms]), (1.0 * ms, 1.0 * ms, [0.4 * ms]),
             (2.0 * ms, 2.0 * ms, [0.4 * ms])]
    assert latency.core_waits(reads, [(0, 1), (2, 3)]) == pytest.approx([0.4 * ms, 0.0])


class _Clock:
    """A stand-in for the `time` module bench/latency.py reads: sleeps and calls advance
    it by exactly what they are given, so that how blocks are sized is known."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    def sleep(self, s):
        self.now += s

    def call(self, seconds, log=None, tag=None):
        def f():
            self.now += seconds
            if log is not None:
                log.append(tag)
        return f


def _watching(seen, calls, clock):
    class Watch:
        def __init__(self, i, n):
            self.i, self.n = i, n

        def __enter__(self):
            seen.append(("in", self.i, self.n, len(calls), clock.now))

        def __exit__(self, *exc):
            seen.append(("out", self.i, self.n, len(calls), clock.now))
    return Watch


def test_blocks_watches_each_timed_block_of_each_side(monkeypatch):
    """Calls that last: `number` calls a block, one block a turn, as always; the watch
    spans exactly a block's calls and is told how many; the first side changes from
    round to round."""
    clock, seen, calls = _Clock(), [], []
    monkeypatch.setattr(latency, "time", clock)
    best = latency.blocks([clock.call(1.0, calls, 0), clock.call(2.0, calls, 1)], number=3, repeat=2,
                          warmup_s=0.0, pause_s=0.0, watch=_watching(seen, calls, clock))
    assert best == [1.0, 2.0]
    assert [(k, i, n) for k, i, n, _, _ in seen] == \
        [("in", 0, 3), ("out", 0, 3), ("in", 1, 3), ("out", 1, 3),
         ("in", 1, 3), ("out", 1, 3), ("in", 0, 3), ("out", 0, 3)]
    assert all(b[3] - a[3] == 3 for a, b in zip(seen[::2], seen[1::2]))


def test_blocks_of_short_calls_last_min_block_s_and_a_turn_takes_several(monkeypatch):
    """0.13 ms calls (a transformer at one token): five of them are 0.65 ms, less than a
    timer tick's or a steal's jitter; a block is as many as last `min_block_s`, and a turn
    as many blocks as fit in `turn_s`. A side of long calls beside it is timed as before."""
    clock, seen, calls = _Clock(), [], []
    monkeypatch.setattr(latency, "time", clock)
    short, long_ = 0.13e-3, 0.02
    best = latency.blocks([clock.call(short, calls, 0), clock.call(long_, calls, 1)], number=5, repeat=3,
                          warmup_s=0.2, pause_s=0.3, watch=_watching(seen, calls, clock),
                          min_block_s=0.005, turn_s=0.05)
    assert best == pytest.approx([short, long_])
    blocks = {0: [], 1: []}
    for a, b in zip(seen[::2], seen[1::2]):
        blocks[a[1]].append((b[3] - a[3], b[4] - a[4]))
    n_short = blocks[0][0][0]
    assert n_short > 5 and all(n == n_short for n, _ in blocks[0])
    assert all(0.005 <= t < 0.005 + short for _, t in blocks[0])
    assert len(blocks[0]) == 3 * int(0.05 / (n_short * short))       # several blocks a turn
    assert blocks[1] == [(5, pytest.approx(5 * long_))] * 3             # one of `number`, per round


def test_a_thread_that_exits_between_two_reads_waited_nothing_not_less():
    """The pool share's and the first call's core waits are differences of two reads of
    the process's threads; one that exits in between (a build thread) reads 0 the second
    time, which was a negative wait of its whole life (a failed test's -0.47 s)."""
    if not os.path.exists("/proc/self/task"):
        pytest.skip("no /proc")
    import threading
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    paths = latency._threads()
    mine = f"/proc/self/task/{t.native_id}/schedstat"
    assert mine in paths
    before = latency.delays(paths)
    before[paths.index(mine)] += 1.0        # as if it had waited a second before
    stop.set()
    t.join()
    after = latency.delays(paths)
    assert after[paths.index(mine)] == 0.0
    assert 0.0 <= latency.waited_between(before, after) < 1.0
    assert latency.waited_between([1.0, 2.0], [1.5, 0.0]) == 0.5


def test_a_thread_runnable_throughout_but_off_a_cpu_waited_for_a_core():
    """A worker runnable at a call's start and end but hardly on a CPU in it waited for a
    core: its run delay is booked only when it runs, maybe after every read."""
    ms = 1e-3
    runnable = np.array([True, True, False])
    # the call ran over 0.1-1.1 ms; each thread's states read 0.1 ms outside it
    at0, at1 = np.zeros(3), np.full(3, 1.2 * ms)
    start = (runnable, np.array([1.0, 1.0, 1.0]), at0)
    # between its reads thread 0 ran 1.15 ms of the 1.2, thread 1 0.05 ms, thread 2 slept
    end = (runnable, np.array([1.0 + 1.15 * ms, 1.0 + 0.05 * ms, 1.0]), at1)
    assert latency.off_cpu(start, end, 0.1 * ms, 1.1 * ms) == pytest.approx(0.95 * ms)
    # off a CPU only as long as its reads took outside the call: no wait within it
    end_ran = (runnable, np.array([1.0 + 1.15 * ms, 1.0 + 1.0 * ms, 1.0]), at1)
    assert latency.off_cpu(start, end_ran, 0.1 * ms, 1.1 * ms) == pytest.approx(0.0, abs=1e-12)
    # not runnable at the end: it slept (a parked worker), it did not wait
    asleep_at_end = (np.array([True, False, False]), end[1], at1)
    assert latency.off_cpu(start, asleep_at_end, 0.1 * ms, 1.1 * ms) == 0.0
    # each thread's own read times: thread 1 read at the call's very edges, off 0.9 ms
    tight = (runnable, end[1] + np.array([0.0, 0.05 * ms, 0.0]), np.array([1.2 * ms, 1.1 * ms, 1.2 * ms]))
    edge = (runnable, start[1], np.array([0.0, 0.1 * ms, 0.0]))
    assert latency.off_cpu(edge, tight, 0.1 * ms, 1.1 * ms) == pytest.approx(0.9 * ms)
    # the call's length at most
    never = (runnable, np.array([1.0, 1.0, 1.0]), np.full(3, 5 * ms))
    assert latency.off_cpu(start, never, 0.0, 4.9 * ms) == pytest.approx(4.9 * ms)


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux /proc")
def test_states_reads_a_spinning_thread_on_a_cpu_and_a_sleeping_one_not_runnable():
    import threading
    stop_spin, stop_sleep, spinning = threading.Event(), threading.Event(), threading.Event()

    def spin():
        spinning.set()
        while not stop_spin.is_set():
            pass
    s = threading.Thread(target=spin)
    z = threading.Thread(target=stop_sleep.wait)
    s.start()
    z.start()
    try:
        spinning.wait(5)
        paths = [f"/proc/self/task/{t.native_id}/schedstat" for t in (s, z)]
        paths.append(f"/proc/self/task/{threading.get_native_id()}/schedstat")
        _, c0, t0 = latency.states(paths)
        end = time.monotonic() + 0.05
        while time.monotonic() < end:       # the GIL: the spinner runs in our waits
            time.sleep(0.001)
        _, c1, t1 = latency.states(paths)
        assert t1[0] > t0[0] and c1[0] > c0[0]   # the spinner's CPU clock advanced
        stop_spin.set()
        s.join()
        time.sleep(0.02)                         # no one holds the GIL: the sleeper waits
        r2, c2, _ = latency.states(paths[1:])
        time.sleep(0.02)
        r3, c3, _ = latency.states(paths[1:])
    finally:
        stop_spin.set()
        stop_sleep.set()
        s.join()
        z.join()
    assert not r2[0] and not r3[0] and c3[0] == c2[0]     # asleep: not runnable, no CPU
    assert not r2[1] and c2[1] == 0.0                     # the calling thread is left out
