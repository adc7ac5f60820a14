"""Whose threads did the work: CPU seconds of this process's threads by owner (the calling
thread, tdsl's worker pool, onnxruntime's intra-op threads, and every other thread), read
from each thread's CPU clock (Linux), and where the calling thread's time went.

A bench that runs tdsl and onnxruntime in one process cannot read a spike in the
process's CPU time (time.process_time) as tdsl's: onnxruntime's workers spin after its
runs, torch's OpenMP pool may still hold threads, and a thread that starts and ends inside
a call counts there too. `ThreadOwners` asks tdsl's pool for its workers' ids
(threadpool.worker_ids) and learns onnxruntime's as the ids that appeared while a session
was made; `ThreadOwners.read()` reads them apart. What no group holds is "other" (process
CPU less the groups' sum, so that threads which exited in between still count somewhere),
with each such thread's own CPU and name kept to name the busiest.

The calling thread's wall time splits into time on a core (user and system: the kernel's
work for it, such as unmapping memory), time runnable but waiting for a core (schedstat's
run delay) and the rest, blocked: waiting on a lock (another Python thread holding the
GIL), on tdsl's pool workers or on I/O.
"""
from __future__ import annotations

import os
import resource
import threading
import time

from tdsl.runtime import threadpool

GROUPS = ("caller", "pool", "ort")


def thread_ids() -> set:
    """Ids of this process's threads now (empty where /proc is not readable)."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def on_core_seconds(tid: int) -> float:
    """Seconds thread `tid` of this process has run on a core (0 once it has exited).
    Its CPU clock (clockid ~tid << 3 | CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD, as glibc's
    pthread_getcpuclockid makes it), not /proc's schedstat: that lags a running
    thread by up to a scheduler tick (4 ms), as long as the gaps measured here."""
    try:
        return time.clock_gettime((~tid << 3) | 6)
    except (OSError, OverflowError):
        return 0.0


def run_delay_seconds(tid: int) -> float:
    """Seconds thread `tid` has spent runnable but waiting for a core (schedstat)."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[1]) * 1e-9
    except (OSError, ValueError, IndexError):
        return 0.0


def thread_names(tids) -> dict:
    """{id: name} of threads `tids`: Python's name where it is a Python thread, else the
    OS's (comm)."""
    py = {t.native_id: t.name for t in threading.enumerate()}
    return {t: py[t] if t in py else _comm(t) for t in tids}


def _comm(tid: int) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "exited"


class ThreadOwners:
    """The threads of the calling thread ("caller"), of tdsl's worker pool ("pool": the
    pool's own list, read at each `read()`, so workers started later count) and of
    onnxruntime ("ort": `started("ort", make_session)` gives it every thread that appeared
    while the session was made, which is when onnxruntime starts its intra-op threads).
    Reads are made on the calling thread."""

    def __init__(self):
        self.caller = threading.get_native_id()
        self.ids = {"caller": {self.caller}, "pool": set(), "ort": set()}

    def started(self, group, fn):
        before = thread_ids()
        try:
            return fn()
        finally:
            self.ids[group] |= thread_ids() - before - self.ids["caller"]

    def read(self) -> dict:
        """{group: on-core seconds of its threads} for GROUPS, "process" (every thread's
        CPU, exited ones included), "other" (process less the groups), the caller's
        "caller_user", "caller_system" (getrusage: split by the kernel's tick samples)
        and "caller_waited" (run delay), and "threads": {id: on-core seconds} of every
        thread in no group."""
        self.ids["pool"] = set(threadpool.worker_ids()) - self.ids["caller"]
        known = set().union(*self.ids.values())
        out = {g: sum(on_core_seconds(t) for t in self.ids[g]) for g in GROUPS}
        out["process"] = time.process_time()
        out["other"] = out["process"] - sum(out[g] for g in GROUPS)
        use = resource.getrusage(resource.RUSAGE_THREAD)
        out["caller_user"], out["caller_system"] = use.ru_utime, use.ru_stime
        out["caller_waited"] = run_delay_seconds(self.caller)
        out["threads"] = {t: on_core_seconds(t) for t in thread_ids() - known}
        out["names"] = thread_names(out["threads"])
        return out


def spent(before: dict, after: dict) -> dict:
    """What happened between two `ThreadOwners.read()`s: per key the difference; for
    "threads", per thread alive at the second (one started in between from 0)."""
    out = {k: after[k] - before[k] for k in after if k not in ("threads", "names")}
    out["threads"] = {t: s - before["threads"].get(t, 0.0) for t, s in after["threads"].items()}
    out["names"] = after["names"]
    return out


def busiest(used: dict, top=2, at_least=1e-3) -> str:
    """"name (id) +ms" of the `top` threads of a `spent(...)` (its "threads" and "names")
    that used at least `at_least` seconds, busiest first; "" where none did."""
    threads, names = used.get("threads", {}), used.get("names", {})
    most = sorted(((s, t) for t, s in threads.items() if s >= at_least), reverse=True)[:top]
    return ", ".join(f"{names.get(t, '?')} ({t}) +{s * 1e3:.1f}" for s, t in most)
