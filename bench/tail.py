"""Why tdsl's slowest calls were slow: the slowest 2% of single calls of a network, tdsl's
and onnxruntime's in the same process, each attributed.

    python bench/tail.py resnet18 distilbert     # zoo names (bench/zoo.py)
    python bench/tail.py --runs 40 squeezenet1_1 # more calls: 40 runs of 25 per side

The call pattern is bench/latency.py's `percentiles`: runs of 25 calls per side in turn,
each run after a 0.3 s pause, its first call (the first after the pause) kept apart. tdsl's
calls are `Executor.trace` (each kernel timed in each call); between two calls, outside
their time, the tool reads per thread group (the caller, tdsl's pool workers,
onnxruntime's threads) the run delay (runnable, waiting for a core: Linux schedstat), the
involuntary context switches, and the pool's counters (tdsl.runtime.threadpool.stats:
worker parks, parks after a lost core, the tasks the workers ran, the caller's wait for a
task a worker held).

The slowest 2% (at least 3) of all calls, then of the calls with no core wait (the tail
a machine of one's own would show), are each given every cause that applies:
- `core`: a thread of the process waited for a core for more than a tenth of the median
  call (the rule bench/latency.py uses to set calls apart, with its `core_waits`: a wait
  still in progress at the call's end, booked when the thread next ran, counts too, and so
  does a pool worker's time off a CPU while runnable: `off_cpu`) or was
  preempted;
- `park`: a pool worker went to sleep during the call;
- `alone`: the workers ran none of the call's tasks: the caller ran every loop by itself
  (a worker woken for the call but queued for a core throughout it, or asleep);
- `worker`: the caller waited for a task a worker held for more than a third of the
  call's excess over the median (the worker was slow or not running); `join`: the same
  read from the trace ring's loop records (tdsl.runtime.runtrace), which also give per
  call when the worker started each loop after its launch and in how many it ran nothing;
- `gc`: Python's garbage collector ran during the call (gc.callbacks);
- `fault`: the process took over 16 more minor page faults than in its median call
  (getrusage: every thread's, so onnxruntime's too);
- `pause`: one of the first two calls after the pause;
- `kernel`: one kernel took more than half of the excess, or `spread`: the excess is
  spread over the kernels (memory, clock, a neighbour on the host: nothing in the process
  shows it); `unseen`: none of these (onnxruntime's kernels are not timed).
The counts of the first cause of each slow call close each list.
"""
from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

import tdsl.graph as G  # noqa: E402
from tdsl.runtime import runtrace, threadpool  # noqa: E402
from graph import _ort_session  # noqa: E402
from latency import core_waits, delays  # noqa: E402
from zoo import _model_and_input  # noqa: E402

COUNTERS = ("worker_sleeps", "lost_sleeps", "worker_tasks", "tasks", "wait_ns", "launches")
_collections = [0]         # Python's garbage collections so far (gc.callbacks)


def _count_collection(phase, _info):
    if phase == "start":
        _collections[0] += 1


def _process_counts():
    """The process's minor page faults (every thread's) and garbage collections so far."""
    return {"minflt": resource.getrusage(resource.RUSAGE_SELF).ru_minflt, "gc": _collections[0]}


def _tids():
    return set(os.listdir("/proc/self/task"))


def _read(tids, path, pick):
    total = 0
    for t in tids:
        try:
            with open(f"/proc/self/task/{t}/{path}") as f:
                total += pick(f.read())
        except (OSError, ValueError, IndexError):
            pass                  # a thread that has exited
    return total


def _cpu_ns(tid):
    """A thread's CPU time (its per-thread CPU clock, up to date for a thread running now,
    where schedstat's counts only from the last tick or switch); 0 for one that exited."""
    try:
        return time.clock_gettime_ns(((~int(tid)) << 3) | 6)    # CPUCLOCK_PERTHREAD | SCHED
    except OSError:
        return 0


def _runnable(text):
    return int(text[text.rindex(")") + 2] == "R")


def _nivcsw(text):
    for line in text.splitlines():
        if line.startswith("nonvoluntary_ctxt_switches"):
            return int(line.split()[1])
    return 0


class Counters:
    """Per-call deltas of the process's threads' scheduling and of the pool's counters,
    and per call the seconds its threads waited for a core (`waits`, bench/latency.py's
    core_waits: with the waits still in progress at a call's end, booked later)."""

    def __init__(self, groups):
        self.groups = groups
        self.paths = [f"/proc/self/task/{t}/schedstat" for ts in groups.values() for t in ts]
        self.group_of = np.array([k for k, ts in enumerate(groups.values()) for _ in ts], dtype=int)
        self.reads, self.spans = [], []
        self.last = self.read()
        self.calls = []
        self.loops = []             # per call, its parallel loops' ring records
        self.wakes = []             # and its workers' wake-ups
        self.since = runtrace.count()

    def read(self):
        t0 = time.perf_counter()
        waits = delays(self.paths)        # one read serves the groups and core_waits
        self.reads.append((t0, time.perf_counter(), waits))
        s = threadpool.stats()
        per_group = np.bincount(self.group_of, weights=waits, minlength=len(self.groups))
        return ({g: int(round(d * 1e9)) for g, d in zip(self.groups, per_group)},
                {g: _read(t, "status", _nivcsw) for g, t in self.groups.items()},
                {**{c: s.get(c, 0) for c in COUNTERS}, **_process_counts(),
                 # the pool workers' time on a CPU: a worker that ran no task of a call
                 # while on a CPU throughout it spun without seeing the launches
                 "worker_cpu": sum(_cpu_ns(t) for t in self.groups.get("tdsl", ())),
                 # and how many are runnable now (state R: running, or queued for a core)
                 "runnable": _read(self.groups.get("tdsl", ()), "stat", _runnable)})

    def mark(self, _i=None):
        recs, self.since = runtrace.read(self.since)
        self.loops.append(recs[recs[:, 1] == runtrace.LOOP])
        self.wakes.append(recs[recs[:, 1] == runtrace.WAKE])
        start = len(self.reads) - 1
        now = self.read()
        self.calls.append(tuple({k: b[k] - a[k] for k in b} for a, b in zip(self.last, now)))
        # at the call's start and end, not deltas
        self.calls[-1][2].update(runnable=now[2]["runnable"], runnable_before=self.last[2]["runnable"])
        self.spans.append((start, len(self.reads) - 1))
        self.last = now

    def reset(self):
        self.last = self.read()
        self.since = runtrace.count()

    def waits(self):
        """Per call so far, seconds its threads waited for a core; looks once more after
        a moment, for a thread queued when the last call ended."""
        time.sleep(0.02)
        self.read()
        return core_waits(self.reads, self.spans)


def measure(exe, sess, feed, groups, runs, run=25, pause_s=0.3):
    """(kernel names, {side: (walls, per-kernel seconds or None, per-call counters and
    core wait, positions)}); `groups`: {group: thread ids}."""
    out = {"tdsl": ([], [], [], []), "ort": ([], None, [], [])}
    names = None
    for _ in range(runs):
        for side in ("tdsl", "ort"):
            time.sleep(pause_s)
            walls, kernels, counts, pos = out[side]
            c = Counters(groups)
            if side == "tdsl":
                names, kt, w = exe.trace(run + 1, between=c.mark)
                walls += list(w[1:])
                kernels += list(kt[1:])
            else:
                for _ in range(run + 1):
                    c.reset()
                    t0 = time.perf_counter()
                    sess.run(None, feed)
                    walls.append(time.perf_counter() - t0)
                    c.mark()
                del walls[-run - 1]
            none = [None] * len(c.calls)
            counts += [call + (wait, loops, wakes) for call, wait, loops, wakes
                       in zip(c.calls, c.waits(), c.loops or none, c.wakes or none)][1:]
            pos += list(range(1, run + 1))
    return names, out


def attribute(side, names, walls, kernels, counts, pos):
    w = np.asarray(walls)
    p50, p99 = np.median(w), np.percentile(w, 99)
    delay = np.array([c[3] for c in counts])
    # a worker runnable at a call's start and end was off a CPU only while it waited for
    # one: a wait the run delay books once it runs, maybe after the run of calls
    # (bench/latency.py's off_cpu; here from the call's length, with one worker: the pool's
    # CPU time is summed); onnxruntime's threads are not read
    cpu = np.array([c[2]["worker_cpu"] for c in counts]) * 1e-9 / np.maximum(w, 1e-9)
    both = np.array([c[2]["runnable"] > 0 and c[2]["runnable_before"] > 0 for c in counts])
    off = np.where(both & (side == "tdsl"), np.clip(1.0 - cpu, 0.0, 1.0) * w, 0.0)
    queued = off > 0.9 * w                    # off a CPU throughout
    delay = np.maximum(delay, off)
    quiet = np.flatnonzero(delay <= 0.1 * p50)
    kept = w[quiet]
    print(f"{side}: {len(w)} calls, p50 {p50 * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ({p99 / p50:.2f}x); "
          f"no core wait: {len(kept)} calls, p99/p50 "
          f"{np.percentile(kept, 99) / np.median(kept) if len(kept) else float('nan'):.2f}")
    faults = np.array([c[2]["minflt"] for c in counts])
    gcs = np.array([c[2]["gc"] for c in counts])
    at = np.asarray(pos)
    by_pos = "/".join(f"{np.median(w[sel]) / p50:.2f}" for sel in (at == 1, at == 2, at == 3, at >= 4)
                      if sel.any())
    print(f"   page faults a call p50/p99/max {np.median(faults):.0f}/{np.percentile(faults, 99):.0f}/"
          f"{faults.max()}; calls with a garbage collection {int(np.sum(gcs > 0))}; median call by "
          f"its place after the pause (1st/2nd/3rd/later) over the median {by_pos}")
    if kernels:
        # a slow start with the worker there is the caches (the other sides' runs evicted
        # the weights) or the clock; without it, the worker's wake-up
        helped = np.array([c[2]["worker_tasks"] > 0 for c in counts])
        print("   by that place, calls in which a worker ran tasks "
              + "/".join(f"{helped[sel].mean():.0%}" for sel in (at == 1, at == 2, at == 3, at >= 4) if sel.any())
              + "; median of those calls over their overall median "
              + "/".join(f"{np.median(w[sel & helped]) / np.median(w[helped]):.2f}"
                         for sel in (at == 1, at == 2, at == 3, at >= 4) if (sel & helped).any()))
    kt = np.asarray(kernels) if kernels else None
    ctx = dict(side=side, names=names, w=w, p50=p50, delay=delay, counts=counts, pos=pos, kt=kt,
               kmed=np.median(kt, axis=0) if kt is not None else None,
               wait_med=np.median([c[2]["wait_ns"] for c in counts]) * 1e-9,
               faults_med=np.median([c[2]["minflt"] for c in counts]),
               loops_med=_median_loops(counts))
    # the slowest of all calls, then of those with no core wait: the tail a machine of
    # one's own would show (bench/latency.py's Spread.p99_kept)
    for title, among in (("all calls", np.arange(len(w))), ("the calls with no core wait", quiet)):
        if len(among):
            print(f"   slowest 2% of {title}:")
            _slowest(ctx, among)
    if kt is not None:
        ran = np.array([c[2]["worker_tasks"] for c in counts])
        tasks = np.array([c[2]["tasks"] for c in counts])
        loops = np.array([c[2]["launches"] for c in counts])
        parks = np.array([c[2]["worker_sleeps"] for c in counts])
        alone = (ran == 0) & (tasks > loops)
        quiet_alone = np.intersect1d(np.flatnonzero(alone), quiet)
        print(f"   calls in which the workers ran no task: {int(alone.sum())}; in {int(queued[alone].sum())} "
              f"a worker was queued for a core throughout (runnable at both ends, under a tenth on a CPU; "
              f"its time off a CPU counts as a core wait), {len(quiet_alone)} had no core wait" + (
                  f" ({np.median(w[quiet_alone]) / np.median(w):.2f}x the median call; the workers' "
                  f"time on a CPU over the call p10/p50/p90 "
                  + "/".join(f"{v:.2f}" for v in np.percentile(cpu[quiet_alone], [10, 50, 90])) + ")"
                  if len(quiet_alone) else ""))
        print(f"   per call (median): {np.median(loops):.0f} parallel loops of {np.median(tasks):.0f} "
              f"tasks, the workers ran {np.median(ran):.0f}; calls with a worker park {np.mean(parks > 0):.0%}, "
              f"in which the workers ran no task {np.mean(alone):.0%} (of those with no core wait "
              f"{np.mean(alone[quiet]) if len(quiet) else float('nan'):.0%})")
        recs = [c[4] for c in counts if c[4] is not None and len(c[4])]
        if recs:
            _loop_table(np.concatenate(recs))
        wakes = [c[5] for c in counts if c[5] is not None and len(c[5])]
        if wakes:
            wakes = np.concatenate(wakes)
            lat = np.percentile(wakes[:, 3] * 1e-3, [50, 90, 99])
            print(f"   worker wake-ups during calls: {len(wakes)} ({len(wakes) / len(counts):.1f} a call), "
                  f"from the wake-up sent to running p50/p90/p99 {lat[0]:.0f}/{lat[1]:.0f}/{lat[2]:.0f} us")



def _loop_table(loops):
    """Over every loop of the calls: how often and how late the worker joined, by the
    loop's length (its caller's own tasks' time)."""
    start, own, done = loops[:, 4], loops[:, 5] * 1e-3, loops[:, 6] * 1e-3
    print("   every loop, by the caller's own time: loops, the worker joined (%), its start after "
          "the launch p50/p90/p99 us, the caller's join wait p50/p99 us")
    for lo, hi in ((0, 5), (5, 20), (20, 100), (100, np.inf)):
        sel = (own >= lo) & (own < hi)
        if not sel.any():
            continue
        j = start[sel] >= 0
        st = np.percentile(start[sel][j] * 1e-3, [50, 90, 99]) if j.any() else [np.nan] * 3
        jw = np.percentile(done[sel] - own[sel], [50, 99])
        print(f"      {lo:>4}-{hi:<4} us: {sel.sum():6d}, joined {j.mean():4.0%}, start "
              f"{st[0]:6.1f}/{st[1]:6.1f}/{st[2]:7.1f}, join wait {jw[0]:6.1f}/{jw[1]:7.1f}")


def loop_summary(loops):
    """What a call's parallel loops did, from their trace-ring records (runtrace.LOOP): how
    many, in how many the worker ran nothing (`alone`) or was asleep at the launch, the
    worker's start after the launch (median and worst over the loops it joined), and the
    microseconds the caller waited at the joins for tasks a worker held (`join_us`)."""
    tasks, mine, start, own, done, asleep = (loops[:, k] for k in range(2, 8))
    joined = start >= 0
    return dict(loops=len(loops), alone=int(np.sum(mine == tasks)), asleep=int(np.sum(asleep > 0)),
                start_med_us=float(np.median(start[joined])) * 1e-3 if joined.any() else float("nan"),
                start_max_us=float(start[joined].max()) * 1e-3 if joined.any() else float("nan"),
                join_us=float(np.sum(done - own)) * 1e-3, loops_us=float(np.sum(done)) * 1e-3)


def _median_loops(counts):
    rows = [loop_summary(c[4]) for c in counts if c[4] is not None and len(c[4])]
    return {k: float(np.nanmedian([r[k] for r in rows])) for k in rows[0]} if rows else None


def _loop_line(lp, med):
    def f(k, fmt="{:.0f}"):
        return fmt.format(lp[k]) + (f" ({fmt.format(med[k])})" if med else "")
    return (f"loops {f('loops')}: worker ran none in {f('alone')}, asleep at launch {f('asleep')}; "
            f"worker started after {f('start_med_us', '{:.1f}')} us median, {f('start_max_us', '{:.1f}')} worst; "
            f"caller waited at joins {f('join_us', '{:.1f}')} us of {f('loops_us', '{:.0f}')} in loops "
            "(median call in brackets)")


def _slowest(c, among):
    """Prints the slowest 2% (at least 3) of the calls `among`, each with its causes, and
    the counts of their first causes."""
    w, p50, kt, names = c["w"], c["p50"], c["kt"], c["names"]
    tdsl = c["side"] == "tdsl"
    firsts = {}
    for j in among[np.argsort(-w[among])][:max(3, len(among) // 50)]:
        rd, iv, pc, _, loops, _ = c["counts"][j]
        excess = w[j] - p50
        why = []
        if c["delay"][j] > 0.1 * p50 or iv["caller"] or iv["tdsl"]:
            why.append("core")
        if tdsl and pc["worker_sleeps"]:
            why.append("park")
        if tdsl and pc["tasks"] > pc["launches"] and not pc["worker_tasks"]:
            why.append("alone")
        if tdsl and pc["wait_ns"] * 1e-9 - c["wait_med"] > excess / 3:
            why.append("worker")
        if pc["gc"]:
            why.append("gc")
        if pc["minflt"] > c["faults_med"] + 16:
            why.append("fault")
        if c["pos"][j] <= 2:
            why.append("pause")
        line = (f"   {w[j] * 1e3:8.3f} ms ({w[j] / p50:.2f}x) call {c['pos'][j]:2d}; waited for a core "
                f"(caller/tdsl/ort) {rd['caller'] * 1e-3:.0f}/{rd['tdsl'] * 1e-3:.0f}/{rd['ort'] * 1e-3:.0f} us, "
                f"preempted {iv['caller']}/{iv['tdsl']}/{iv['ort']}, page faults {pc['minflt']}"
                f"{', gc' if pc['gc'] else ''}")
        if kt is not None:
            ex = kt[j] - c["kmed"]
            top = np.argsort(-ex)[:3]
            why.append("kernel" if excess > 0 and ex.max() > excess / 2 else "spread")
            line += (f"; parks {pc['worker_sleeps']} (lost core {pc['lost_sleeps']}), worker on a CPU "
                     f"{pc['worker_cpu'] * 1e-3:.0f} us, worker tasks "
                     f"{pc['worker_tasks']}/{pc['tasks']}, caller waited {pc['wait_ns'] * 1e-3:.0f} us; "
                     "slowest kernels " + ", ".join(f"{names[t]} +{ex[t] * 1e6:.0f} us" for t in top))
            if loops is not None and len(loops):
                lp = loop_summary(loops)
                if lp["join_us"] - c["loops_med"]["join_us"] > excess * 1e6 / 3:
                    why.append("join")
                line += "\n" + " " * 12 + _loop_line(lp, c["loops_med"])
        first = why[0] if why else "unseen"
        firsts[first] = firsts.get(first, 0) + 1
        print(line + f"  [{' '.join(why)}]")
    print("   by first cause: " + ", ".join(f"{k} {v}" for k, v in sorted(firsts.items())))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--runs", type=int, default=12, help="runs of 25 calls per side")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    gc.callbacks.append(_count_collection)
    base, workers = _tids(), None
    for name in a.models:
        model, x = _model_and_input(name)
        exe = G.build(G.optimize(G.from_onnx(model)))
        exe.set_input(exe.input_names[0], x)      # trace runs on the default state's inputs
        exe.run(x)
        if workers is None:                       # the pool's, made by the first run
            workers = _tids() - base
        before = _tids()
        sess = _ort_session(model, a.threads)
        feed = {model.graph.input[0].name: x}
        sess.run(None, feed)
        groups = {"caller": {str(threading.get_native_id())}, "tdsl": workers,
                  "ort": _tids() - before}
        names, out = measure(exe, sess, feed, groups, a.runs)
        del sess
        print(f"== {name}")
        for side, (walls, kernels, counts, pos) in out.items():
            attribute(side, names, walls, kernels, counts, pos)


if __name__ == "__main__":
    main()
