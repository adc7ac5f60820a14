"""Latency of several runtimes measured in one process, taken in turn so that each sees the
same machine load (the CPU may be shared) and none is slowed by another's threads: after a
run, onnxruntime's workers spin for a while and OpenVINO's (TBB) too; each side begins after
a pause, in which they stop, rather than competing with them for a core.

`blocks`: the best block mean (a pause, a warm-up, `number` calls), as bench/graph.py has
always measured. `percentiles`: p50/p99 of single calls, what a user deploying one of them
sees from call to call, and the first call after an idle pause, each kept apart, with
the CPU other processes used meanwhile (a small network's latency doubles when another
process takes one of two cores, whichever runtime runs it).
"""
from __future__ import annotations

import os
import time

import numpy as np


def blocks(fns, number, repeat, warmup_s=0.2, pause_s=0.3):
    """Best-of-`repeat` mean seconds per call of each callable in `fns`, timed in blocks
    taken in turn. A block is: a pause of `pause_s` (another runtime's spinning threads
    would take a core: tdsl's ResNet-18 latency measured up to 2x right after an
    onnxruntime run), `warmup_s` of untimed calls, then `number` timed calls."""
    for f in fns:
        f()
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, f in enumerate(fns):
            time.sleep(pause_s)
            t_end = time.perf_counter() + warmup_s
            while time.perf_counter() < t_end:
                f()
            t0 = time.perf_counter()
            for _ in range(number):
                f()
            best[i] = min(best[i], (time.perf_counter() - t0) / number)
    return best


def _threads():
    """This process's threads (Linux /proc; empty elsewhere), read once per run of calls."""
    try:
        return [f"/proc/self/task/{t}/schedstat" for t in os.listdir("/proc/self/task")]
    except OSError:
        return []


def _waited_seconds(threads):
    """Seconds the threads in `threads` have spent runnable but waiting for a core."""
    total = 0
    for path in threads:
        try:
            with open(path) as f:
                total += int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            pass                                  # a thread that has exited
    return total * 1e-9


def _busy_seconds():
    """CPU seconds the whole machine has been busy (Linux /proc/stat; None elsewhere)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(v) - v[3] - v[4] - v[7]) / os.sysconf("SC_CLK_TCK")    # less idle, iowait, steal


class Spread:
    """Single-call latencies of one side: `p50`, `p99` of the calls in runs, `idle` the
    median first call after a pause (seconds), and `others`: how many cores other
    processes kept busy meanwhile, on average (None where it cannot be read).

    `waited`: per call, the seconds this process's threads spent runnable but without a
    core (Linux schedstat run delay). A call in which they waited more than a tenth of the
    median call lost a core to something else (another process, a kernel thread, the
    hypervisor); `p50_kept` and `p99_kept` are of the other calls, `n_kept` how many there are:
    the tail a machine of one's own would show, printed beside the tail this one showed."""

    def __init__(self, calls, firsts, others=None, waited=None):
        self.calls = np.asarray(calls)
        self.firsts = np.asarray(firsts)
        self.p50 = float(np.percentile(self.calls, 50))
        self.p99 = float(np.percentile(self.calls, 99))
        self.idle = float(np.median(self.firsts))
        self.others = others
        self.waited = np.zeros_like(self.calls) if waited is None else np.asarray(waited)
        kept = self.calls[self.waited <= 0.1 * self.p50]
        self.n_kept = len(kept)
        self.p50_kept, self.p99_kept = (float(np.percentile(kept, q)) if len(kept) else float("nan")
                                        for q in (50, 99))


def percentiles(fns, calls=100, run=25, pause_s=0.3):
    """A `Spread` per callable of `fns`, from at least `calls` timed calls each: runs of
    `run` calls per side in turn, each run after a pause of `pause_s` (so the other sides'
    threads have stopped spinning). A run's first call, the first after an idle pause, is
    kept apart (`Spread.idle`); the `run` calls after it are the percentiles' samples."""
    for f in fns:
        f()
    samples = [[] for _ in fns]
    firsts = [[] for _ in fns]
    waited = [[] for _ in fns]
    # per side: wall seconds of its runs, and CPU seconds other processes used meanwhile
    wall, others = [0.0] * len(fns), [0.0] * len(fns)
    clock = time.perf_counter
    while len(samples[0]) < calls:
        for i, f in enumerate(fns):
            time.sleep(pause_s)
            busy0, own0, w0 = _busy_seconds(), time.process_time(), clock()
            t0 = clock()
            f()
            firsts[i].append(clock() - t0)
            own, threads = samples[i], _threads()
            for _ in range(run):
                q0 = _waited_seconds(threads)
                t0 = clock()
                f()
                own.append(clock() - t0)
                waited[i].append(_waited_seconds(threads) - q0)
            busy1 = _busy_seconds()
            wall[i] += clock() - w0
            if busy0 is not None and busy1 is not None:
                others[i] += max(busy1 - busy0 - (time.process_time() - own0), 0.0)
    known = _busy_seconds() is not None
    return [Spread(s, fi, o / w if known else None, q)
            for s, fi, o, w, q in zip(samples, firsts, others, wall, waited)]
