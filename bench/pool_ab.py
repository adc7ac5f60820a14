"""The worker pool's settings side by side on whole networks, in one process, the sides
taken in turn (bench/latency.py): one task per thread against loops split into tasks of
`--task-us` (threadpool.set_task_ns), taking from a started run only when its owner is late
(set_steal_late_only) or at once; and a worker that ran none of its tasks in several
launches moved off the caller's CPU where a CPU is free (`one`, the default), always
(`always`), or left where the kernel queued it (`stay`: threadpool.set_nudge).

    python bench/pool_ab.py roberta resnet18 mobilenet_v2        # zoo names (bench/zoo.py)
    python bench/pool_ab.py --sides one,fine --calls 400 roberta

Per side: the best block mean, p50 and p99 of single calls, p99/p50 over the calls in which
no thread waited for a core (`kept`), and per call what the pool counted: the caller's wait
at the joins for tasks a worker held (p50/p99/max), tasks, those the workers ran, and those
taken from a run its owner had started (`taken`: each ran away from its data's cache). A
finer split bounds how long a worker that loses its core mid-loop holds the loop, and costs
at the median what its taken tasks cost; the sides say which wins on this machine. Every
side's output is checked against the first's.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

import tdsl.graph as G  # noqa: E402
from tdsl.runtime import threadpool  # noqa: E402
from latency import blocks, percentiles  # noqa: E402

COUNTED = ("wait_ns", "tasks", "worker_tasks", "taken", "nudges")


def sides_of(names, task_us):
    """{side: (task_ns, steal_late_only, nudge)} for the side names asked for."""
    fine = int(task_us * 1000)
    known = {"one": (0, True, "free"), "stay": (0, True, "off"), "always": (0, True, "always"),
             "fine": (fine, True, "free"), "fine_any": (fine, False, "free")}
    bad = [n for n in names if n not in known]
    if bad:
        raise SystemExit(f"pool_ab: unknown sides {bad}; known: {', '.join(known)}")
    return {n: known[n] for n in names}


class Side:
    """A callable running `run()` under one pool setting, counting the pool's work."""

    def __init__(self, run, task_ns, late, nudge):
        self.run, self.task_ns, self.late, self.nudge = run, task_ns, late, nudge
        self.counts = {k: [] for k in COUNTED}

    def __call__(self):
        threadpool.set_task_ns(self.task_ns)
        threadpool.set_steal_late_only(self.late)
        threadpool.set_nudge(self.nudge)
        before = threadpool.stats()
        self.run()
        after = threadpool.stats()
        for k in COUNTED:
            self.counts[k].append(after.get(k, 0) - before.get(k, 0))


def compare(run, sides, calls=200, number=5, repeat=5, check=None):
    """Rows (side, block s, Spread, per-call counts) for `run` under each setting in
    `sides` ({name: (task_ns, late, nudge)}); `check()`, if given, is called after a few runs of
    each side, before any is timed. The pool's settings are restored afterwards."""
    old_ns, old_late = threadpool.task_ns(), threadpool.steal_late_only()
    old_nudge = threadpool.set_nudge("free")
    try:
        fns = [Side(run, *setting) for setting in sides.values()]
        for f in fns:
            for _ in range(3):          # from the second run a long loop is split finer
                f()
            if check is not None:
                check()
        best = blocks(fns, number, repeat)
        for f in fns:
            f.counts = {k: [] for k in COUNTED}
        spreads = percentiles(fns, calls=calls)
        return [(name, b, s, f.counts) for name, b, s, f in zip(sides, best, spreads, fns)]
    finally:
        threadpool.set_task_ns(old_ns)
        threadpool.set_steal_late_only(old_late)
        threadpool.set_nudge(old_nudge)


def row_text(model, name, block, s, counts):
    n = max(len(counts["tasks"]), 1)
    wait = np.asarray(counts["wait_ns"] or [0]) * 1e-3
    per = {k: sum(counts[k]) / n for k in ("tasks", "worker_tasks", "taken", "nudges")}
    return (f"{model:20s} {name:9s} block {block * 1e3:8.3f}  p50 {s.p50 * 1e3:8.3f}  p99 "
            f"{s.p99 * 1e3:8.3f} ({s.p99 / s.p50:4.2f}x)  kept {s.n_kept:4d}: "
            f"{s.p99_kept / s.p50_kept:4.2f}x  join wait {np.percentile(wait, 50):6.1f}/"
            f"{np.percentile(wait, 99):7.1f}/{wait.max():7.1f} us  tasks {per['tasks']:.0f} "
            f"worker {per['worker_tasks']:.1f} taken {per['taken']:.2f} nudges {per['nudges']:.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--sides", default="one,fine,fine_any")
    ap.add_argument("--task-us", type=float, default=50.0)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args(argv)
    from zoo import _model_and_input
    sides = sides_of(a.sides.split(","), a.task_us)
    print(f"sides: {sides} (task_ns, late only, nudge); the latencies are of this machine as it is "
          "now: compare sides, not runs", flush=True)
    for model in a.models:
        onnx_model, x = _model_and_input(model)
        exe = G.build(G.optimize(G.from_onnx(onnx_model)))
        want = exe.run(x)[0].copy()

        outs = []

        def run():
            outs[:] = exe.run(x)[:1]

        def check():
            np.testing.assert_allclose(outs[0], want, rtol=1e-4,
                                       atol=1e-4 * max(1.0, float(np.abs(want).max())))
        for name, block, s, counts in compare(run, sides, a.calls, check=check):
            print(row_text(model, name, block, s, counts), flush=True)


if __name__ == "__main__":
    main()
