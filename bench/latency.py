"""Latency of several runtimes measured in one process, taken in turn so that each sees the
same machine load (the CPU may be shared) and none is slowed by another's threads: after a
run, onnxruntime's workers spin for a while and OpenVINO's (TBB) too; each side begins after
a pause, in which they stop, rather than competing with them for a core.

`blocks`: the best block mean over turns of each side (a pause, a warm-up, timed blocks
of `number` calls, or of as many as last 5 ms where calls are short, several to a turn),
the sides' order rotated from round to round. `percentiles`: p50/p99 of single calls, what a user deploying one of them
sees from call to call, and the first call after an idle pause, each kept apart, with
the CPU other processes used meanwhile (a small network's latency doubles when another
process takes one of two cores, whichever runtime runs it).
"""
from __future__ import annotations

import contextlib
import math
import os
import threading
import time

import numpy as np


def blocks(fns, number, repeat, warmup_s=0.2, pause_s=0.3, watch=None, min_block_s=0.005,
           turn_s=0.05):
    """Best block mean: the least mean seconds per call of each callable in `fns` over its
    timed blocks, taken in turns. A turn of one side is: a pause of `pause_s` (another
    runtime's spinning threads would take a core: tdsl's ResNet-18 latency measured up to
    2x right after an onnxruntime run), `warmup_s` of untimed calls, then its timed blocks,
    back to back. There are `repeat` rounds of one turn per side, and round r starts with
    side r (mod the sides): each side goes first as often as the others.

    A block is `number` calls, or more where calls are short: as many as last at least
    `min_block_s`, by the mean call of the first warm-up (timeit's autorange does the same),
    since a block of five 0.13 ms calls is shorter than the jitter of a timer tick or a
    steal that lands on it whole. A turn takes as many blocks as fit in `turn_s` (at least
    one): where calls are short, more samples at the cost of milliseconds, not of more
    pauses. A side whose `number` calls already last `turn_s`/2 or more is timed exactly
    as before: `number` calls, one block a turn. `watch(i, calls)`, if given, is a context
    manager entered around each timed block of `fns[i]` (of `calls` calls), its reads
    outside the block's clock: what the machine did meanwhile (bench/dynamic.PoolShare)."""
    for f in fns:
        f()
    clock = time.perf_counter
    best = [float("inf")] * len(fns)
    sizes = [None] * len(fns)                      # (calls a block, blocks a turn) per side
    for r in range(repeat):
        for k in range(len(fns)):
            i = (r + k) % len(fns)
            f = fns[i]
            time.sleep(pause_s)
            t_start = clock()
            t_end, calls = t_start + warmup_s, 0
            while clock() < t_end:
                f()
                calls += 1
            if sizes[i] is None:
                per_call = (clock() - t_start) / calls if calls else _timed(f)
                n = max(number, math.ceil(min_block_s / max(per_call, 1e-9)))
                sizes[i] = n, max(1, int(turn_s / max(n * per_call, 1e-9)))
            n, per_turn = sizes[i]
            for _ in range(per_turn):
                with watch(i, n) if watch is not None else contextlib.nullcontext():
                    t0 = clock()
                    for _ in range(n):
                        f()
                    t = (clock() - t0) / n
                best[i] = min(best[i], t)
    return best


def _timed(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def _threads():
    """This process's threads (Linux /proc; empty elsewhere), read once per run of calls."""
    try:
        return [f"/proc/self/task/{t}/schedstat" for t in os.listdir("/proc/self/task")]
    except OSError:
        return []


def waited_between(before, after) -> float:
    """Seconds the threads spent runnable but waiting for a core between two reads of
    `delays` (arrays over the same threads). A thread that exited in between reads 0 the
    second time: its wait counts as nothing, not as a negative wait of its whole life."""
    return float(np.maximum(np.asarray(after) - np.asarray(before), 0.0).sum())


def delays(threads):
    """Per thread in `threads` (schedstat paths), the seconds it has spent runnable but
    waiting for a core (0 for one that has exited)."""
    out = np.zeros(len(threads))
    for k, path in enumerate(threads):
        try:
            with open(path) as f:
                out[k] = int(f.read().split()[1]) * 1e-9
        except (OSError, ValueError, IndexError):
            pass                                  # a thread that has exited
    return out


def states(threads):
    """Per thread in `threads` (schedstat paths): whether it is runnable now (state R:
    running or queued for a core), its CPU seconds (its per-thread CPU clock, up to date
    for a thread running now); not runnable and 0 for one that has exited, and for the
    calling thread (runnable while it reads, whether or not it slept in the call); and
    the clock (perf_counter) when each was read."""
    runnable, cpu, at = np.zeros(len(threads), dtype=bool), np.zeros(len(threads)), np.zeros(len(threads))
    me = threading.get_native_id()
    for k, path in enumerate(threads):
        tid = int(path.split("/")[-2])
        if tid == me:
            continue
        try:
            with open(path[:-len("schedstat")] + "stat") as f:
                text = f.read()
            runnable[k] = text[text.rindex(")") + 2] == "R"
            cpu[k] = time.clock_gettime_ns(((~tid) << 3) | 6) * 1e-9   # CPUCLOCK_PERTHREAD | SCHED
            at[k] = time.perf_counter()
        except (OSError, ValueError):
            pass                                  # a thread that has exited
    return runnable, cpu, at


def off_cpu(before, after, start, end):
    """The longest a thread runnable at a call's start and end was off a CPU within the
    call, from `states` read before and after it (it ran from `start` to `end`): a
    thread that spins between tasks (a pool worker, kept awake through a run) is on a CPU
    throughout unless it waited for one. That wait may have begun before the call and the
    run delay books it only when the thread runs, after the run of calls maybe, where no
    read sees it: a worker woken while another process held the other core, whose caller
    ran the call's loops alone. A lower bound: the time off a CPU between the thread's two
    reads less their time outside the call."""
    (r0, c0, t0), (r1, c1, t1) = before, after
    both = r0 & r1
    if not both.any():
        return 0.0
    off = (t1 - t0)[both] - (c1 - c0)[both]
    outside = np.maximum(start - t0[both], 0.0) + np.maximum(t1[both] - end, 0.0)
    return float(np.clip(off - outside, 0.0, end - start).max())


def core_waits(reads, spans):
    """Seconds the process's threads waited for a core within each call, from reads of
    their run delays: `reads[r]` = (clock before, clock after, per-thread seconds), and
    call k ran between the reads `spans[k]` = (r, s).

    A thread's wait is booked when it next runs, so a worker woken at a call's start and
    still queued at its end shows nothing within the call: it is booked in a later
    interval between reads. A thread that booked D seconds between reads r-1 and r waited
    there at most the time from the start of the one to the end of the other; the rest is
    a wait that was in progress at read r-1 and went back at least that far, and a call
    that overlaps it is given the overlap (a lower bound: the wait may have begun
    earlier). What a thread booked between a call's own reads counts for the call, as it
    always has."""
    before = np.array([r[0] for r in reads])
    after = np.array([r[1] for r in reads])
    delays = np.array([r[2] for r in reads])
    booked = np.maximum(np.diff(delays, axis=0), 0.0)         # per interval, per thread
    carried = booked - (after[1:] - before[:-1])[:, None]     # waited before the interval
    waits = [float(booked[r:s].sum()) for r, s in spans]
    for j, per_thread in enumerate(carried, start=1):
        for c in per_thread[per_thread > 0]:
            # in progress when read j-1 looked, at some time within it: at least over
            lo, hi = after[j - 1] - c, before[j - 1]
            for k, (r, s) in enumerate(spans):
                if before[s] <= before[j - 1]:       # the call ended before that read
                    waits[k] += max(0.0, min(hi, before[s]) - max(lo, after[r]))
    return waits


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
    core (Linux schedstat run delay, `core_waits`). A call in which they waited more than a tenth of the
    median call lost a core to something else (another process, a kernel thread, the
    hypervisor), where the wait of a thread runnable throughout is also read from its CPU
    clock (`off_cpu`); `p50_kept` and `p99_kept` are of the other calls, `n_kept` how many there are:
    the tail a machine of one's own would show, printed beside the tail this one showed.

    `by_place`: the median call at each place in its run (the 2nd, 3rd and 4th call after the
    pause, then every later one) over `p50`, where the runs were of `run` calls: a side whose
    first calls after an idle pause are slow (caches other work evicted, a clock that ramps,
    a vCPU the hypervisor must wake) shows it here, and so does the register-only floor
    where it is the machine's. `p99_settled`: the p99 of the calls from the 5th on."""

    def __init__(self, calls, firsts, others=None, waited=None, run=None):
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
        place = np.arange(len(self.calls)) % (run or len(self.calls))
        self.by_place = [float(np.median(self.calls[sel])) / self.p50
                         for sel in (place == 0, place == 1, place == 2, place >= 3) if sel.any()]
        settled = self.calls[place >= 3]
        self.p99_settled = float(np.percentile(settled, 99)) if len(settled) else float("nan")


def percentiles(fns, calls=100, run=25, pause_s=0.3):
    """A `Spread` per callable of `fns`, from at least `calls` timed calls each: runs of
    `run` calls per side in turn, each run after a pause of `pause_s` (so the other sides'
    threads have stopped spinning), and 20 ms after it a last look at the threads' run
    delays (`core_waits`). A run's first call, the first after an idle pause, is
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
            reads, off = [], []
            for _ in range(run):
                # the states read next to the call (off_cpu's bound is the tighter), the
                # run delays around them: the gap between two calls, in which tdsl's pool
                # keeps its workers awake for a millisecond (HOLD_GRACE_NS), grows by
                # two reads of /proc (~0.1 ms each for 8 threads on a loaded machine)
                reads.append((clock(), delays(threads), clock()))
                s0 = states(threads)
                t0 = clock()
                f()
                t1 = clock()
                own.append(t1 - t0)
                s1 = states(threads)
                reads.append((clock(), delays(threads), clock()))
                off.append(off_cpu(s0, s1, t0, t1))
            busy1 = _busy_seconds()
            wall[i] += clock() - w0
            if busy0 is not None and busy1 is not None:
                others[i] += max(busy1 - busy0 - (time.process_time() - own0), 0.0)
            # a thread still queued for a core when the last call ended books that wait
            # when it runs again: give it a moment (the pause before the next run anyway)
            time.sleep(min(0.02, pause_s))
            reads.append((clock(), delays(threads), clock()))
            waits = core_waits([(b, a, d) for b, d, a in reads], [(2 * k, 2 * k + 1) for k in range(run)])
            # the larger of the two: a wait the run delay booked in time is off_cpu's too
            waited[i] += [max(w, q) for w, q in zip(waits, off)]
    known = _busy_seconds() is not None
    return [Spread(s, fi, o / w if known else None, q, run)
            for s, fi, o, w, q in zip(samples, firsts, others, wall, waited)]
