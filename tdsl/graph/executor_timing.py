"""How long an executor's kernels take: whole runs (`benchmark`), per kernel (`profile`,
`profile_text`) and per call (`trace`), on the default run state. A mixin of Executor
(executor.py): measuring a network is apart from building and running it."""
from __future__ import annotations

import time

import numpy as np

from ..errors import GraphError
from ..runtime import threadpool
from .describe import describe_group


class Timing:
    """Executor's measuring methods; they read the executor's `current_pool()`, `steps`
    and `stats`."""

    def benchmark(self, number=10, repeat=3, warmup=1):
        """Latency of one inference (inputs as last set on the default state, by set_input
        or a run that took it): dict of mean/min/median seconds."""
        pool = self.current_pool()
        state = pool.take(default=True)
        run = state.launches or state.calls.run
        wait = state.launches.sync if state.launches else (lambda: None)
        try:
            for _ in range(warmup):
                run()
            wait()
            res = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                for _ in range(number):
                    run()
                wait()
                res.append((time.perf_counter() - t0) / number)
        finally:
            pool.give(state)
        res.sort()
        return {"mean": sum(res) / len(res), "min": res[0], "median": res[len(res) // 2], "repeats": res}

    def profile(self, number=10):
        """Per-kernel time on the default state: list of (kernel name, seconds per call,
        share), slowest first. On a GPU the times are device times (events); where the run
        is a captured CUDA graph, `stats["cuda_graph"]` then says what the graph saved over
        launching kernel by kernel (device seconds per run, both ways)."""
        pool = self.current_pool()
        state = pool.take(default=True)
        try:
            if state.launches is not None:
                times = self._profile_device(state, number)
            else:
                state.calls.run()
                times = [0.0] * len(state.calls)
                with threadpool.held():     # as in a run: no kernel waits for a parked worker
                    for _ in range(number):
                        for i, call in enumerate(state.calls):
                            t0 = time.perf_counter()
                            call()
                            times[i] += time.perf_counter() - t0
        finally:
            pool.give(state)
        total = sum(times) or 1.0
        steps = getattr(pool, "steps", self.steps)
        rows = [(f"{k.name}#{i}", t / number, t / total) for i, ((k, _, _), t) in enumerate(zip(steps, times))]
        return sorted(rows, key=lambda r: -r[1])

    def trace(self, number=25, between=None):
        """Per-call kernel times on the host, for the slow calls a per-kernel mean hides:
        `number` runs back to back on the default state (as `profile`), each kernel timed
        in each call: a run as `run` makes it, timed from the runtime's trace ring
        (tdsl.runtime.runtrace), or, where a run is not one native walk, each call from
        Python. Returns (kernel names as `profile` gives them, seconds per call per
        kernel as a [number, kernels] array, each call's seconds from its first kernel's start
        to its last one's end). `between(i)`, if
        given, is called after call `i`, outside its time (to read one's own counters)."""
        pool = self.current_pool()
        state = pool.take(default=True)
        try:
            if state.launches is not None:
                raise GraphError("trace times host runs; on a GPU, profile() gives device times")
            calls = state.calls
            stamps = np.zeros((number, len(calls) + 1), dtype=np.int64)
            clock = time.perf_counter_ns
            for i in range(number):
                row = stamps[i]
                timed = calls.timed_run() if hasattr(calls, "timed_run") else None
                if timed is not None:           # the native walk, timed by the runtime
                    row[:] = timed
                    if between is not None:
                        between(i)
                    continue
                threadpool.hold()       # as a run (CallSequence.run)
                try:
                    row[0] = clock()
                    for j, call in enumerate(calls, 1):
                        call()
                        row[j] = clock()
                finally:
                    threadpool.release()
                if between is not None:
                    between(i)
        finally:
            pool.give(state)
        steps = getattr(pool, "steps", self.steps)
        names = [f"{k.name}#{i}" for i, (k, _, _) in enumerate(steps)]
        return names, np.diff(stamps, axis=1) * 1e-9, (stamps[:, -1] - stamps[:, 0]) * 1e-9

    def _profile_device(self, state, number):
        seq = state.launches
        seq()
        seq.sync()
        times = [call.time(number) * number for call in state.calls]
        if seq.captured:
            each, graph = seq.time(number, each=True), seq.time(number)
            self.stats["cuda_graph"] = {"launches_s": each, "graph_s": graph, "saved_s": each - graph}
        return times

    def profile_text(self, number=10, top=20):
        """The slowest kernels, each with what it computes (`describe_group`)."""
        rows = self.profile(number)
        steps = getattr(self.current_pool(), "steps", self.steps)
        what = {f"{k.name}#{i}": describe_group(n.op) for i, (k, _, n) in enumerate(steps)}
        lines = [f"{'kernel':40s} {'ms':>8s} {'share':>6s}  what"]
        for name, t, sh in rows[:top]:
            lines.append(f"{name:40s} {t * 1e3:8.3f} {sh * 100:5.1f}%  {what.get(name, '')}")
        lines.append(f"{'total':48s} {sum(r[1] for r in rows) * 1e3:9.3f}")
        g = self.stats.get("cuda_graph")
        if g:
            lines.append(f"CUDA graph: {g['graph_s'] * 1e3:.3f} ms a run, kernel by kernel "
                         f"{g['launches_s'] * 1e3:.3f} ms: saved {g['saved_s'] * 1e3:.3f} ms")
        return "\n".join(lines)
