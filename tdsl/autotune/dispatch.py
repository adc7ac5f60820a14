"""Dispatch: getting jobs measured and their results back, whatever runs them.

A dispatcher has one small interface, which is all the search loop (`tune`) sees:

    forks             whether measuring processes are forked from this one (they then
                      inherit the task; else jobs carry it, pickled)
    capacity()        how many jobs may be in flight
    fingerprint(t)    the target string `t` as the measuring machines resolve it
    submit(job)       start measuring
    wait(timeout)     [(job, result dict), ...] of the jobs that finished (maybe none)
    in_flight         jobs submitted and not yet returned by wait
    healthy()         whether it still runs jobs (asked after it lost one)
    cancel()          stop everything in flight (their results are dropped)
    close()

- `LocalDispatcher` (no executor given): `n_parallel` measuring processes forked from the
  tuning session (`sandbox.Sandbox("fork")`), one job each at a time, so a crash or a hang
  is pinned on its own candidate and ends no other trial.
- `ExecutorDispatcher`: any `concurrent.futures.Executor` (see `executors`). What it runs is
  `remote_trial(job)`: on the worker, the job is measured in that worker's own measuring
  process (`Sandbox("exec")`), with the trial time limit enforced there, so a segfault or
  a hang costs a worker neither its life nor its thread. The dispatcher only guards
  against the executor itself: a job that raises there (a lost worker, a scheduler gone)
  or that never comes back is a `runner_error`, not logged, measured again on resume.
"""
from __future__ import annotations

import atexit
import concurrent.futures as cf
import threading
import time
from multiprocessing.connection import wait as wait_ready
from typing import Dict, List, Optional, Tuple

from .errors import AutotuneError
from .executors import as_executor, capacity as executor_capacity, is_closed, measuring_env
from .keys import target_fingerprint
from .measure import Job, machine
from .sandbox import Sandbox


def probe(target: str, nonce: int = 0) -> Tuple[str, str]:
    """Runs on a worker: the fingerprint of `target` there, and the worker's host name.
    (`nonce`: a new task each time, for executors that reuse results of equal calls.)"""
    return target_fingerprint(target), machine()["host"]


# ------------------------------------------------------------------------ in-process


class LocalDispatcher:
    def __init__(self, n_parallel: int, timeout_s: float):
        self.slots = [Sandbox("fork") for _ in range(max(1, int(n_parallel)))]
        self.timeout_s = timeout_s
        self.forks = self.slots[0].start == "fork"     # not where os.fork does not exist

    def capacity(self) -> int:
        return len(self.slots)

    @property
    def in_flight(self) -> int:
        return sum(s.busy for s in self.slots)

    def fingerprint(self, target):
        return probe(target)

    def healthy(self) -> bool:
        return True

    def submit(self, job: Job):
        next(s for s in self.slots if not s.busy).submit(job)

    def wait(self, timeout: float) -> List[Tuple[Job, dict]]:
        busy = [s for s in self.slots if s.busy]
        if not busy:
            return []
        now = time.monotonic()
        first_late = min(s.started_at for s in busy) + self.timeout_s
        ready = wait_ready([s.conn for s in busy], timeout=max(0.0, min(timeout, first_late - now)))
        out = []
        for s in busy:
            if s.conn in ready:
                job = s.job
                out.append((job, s.collect()))
        now = time.monotonic()
        for s in busy:
            if s.busy and now - s.started_at >= self.timeout_s:
                job = s.job
                out.append((job, s.timed_out(now - s.started_at)))
        return out

    def cancel(self):
        for s in self.slots:
            if s.busy:
                s.kill()

    def close(self):
        for s in self.slots:
            s.close()


# ------------------------------------------------------------------------ executors

_SANDBOX: Optional[Sandbox] = None
_SANDBOX_LOCK = threading.Lock()


def _close_sandbox():
    if _SANDBOX is not None:
        _SANDBOX.close()


def remote_trial(job: Job, timeout_s: float) -> dict:
    """Runs on an executor's worker: measures `job` in this worker process's measuring
    process (started on first use), one job at a time per worker process."""
    global _SANDBOX
    with _SANDBOX_LOCK:            # waiting for another thread's trial is not this trial's time
        if _SANDBOX is None:
            _SANDBOX = Sandbox("exec", env=measuring_env())
            atexit.register(_close_sandbox)
        try:
            return _SANDBOX.run(job, timeout_s)
        except Exception as e:
            _SANDBOX.kill()
            return {"status": "runner_error",
                    "error": f"the measuring process failed: {type(e).__name__}: {e}"}


class ExecutorDispatcher:
    # beyond the worker's own time limit, how long a job may take to come back: queueing,
    # a retry after a lost worker, a new measuring process starting
    GRACE_S = 120.0
    forks = False
    HEALTH_S = 30.0     # a trivial job takes longer than this: the executor is gone

    def __init__(self, executor, n_parallel: Optional[int], timeout_s: float):
        self.executor = as_executor(executor)
        self.n_parallel = n_parallel
        self.timeout_s = timeout_s
        self.futures: Dict[cf.Future, Tuple[Job, float]] = {}
        self._cap = (1, -1e9)
        self._probes = 0
        self.dead = False

    def capacity(self) -> int:
        if self.n_parallel:
            return max(1, int(self.n_parallel))
        if time.monotonic() - self._cap[1] > 2.0:      # clusters grow and lose workers
            self._cap = (executor_capacity(self.executor), time.monotonic())
        return self._cap[0]

    @property
    def in_flight(self) -> int:
        return len(self.futures)

    def _probe(self, target, timeout):
        self._probes += 1
        return self.executor.submit(probe, target, self._probes).result(timeout=timeout)

    def fingerprint(self, target):
        try:
            return self._probe(target, self.GRACE_S)
        except Exception as e:
            raise AutotuneError(f"tune: the executor could not run a job ({type(e).__name__}: "
                                f"{e}); tdsl must be importable on its workers") from None

    def healthy(self) -> bool:
        try:
            if is_closed(self.executor):
                raise cf.CancelledError
            self._probe("c", self.HEALTH_S)
            return True
        except Exception:
            self.dead = True
            return False

    def submit(self, job: Job):
        fut = self.executor.submit(remote_trial, job, self.timeout_s)
        self.futures[fut] = (job, time.monotonic())

    def wait(self, timeout: float) -> List[Tuple[Job, dict]]:
        if not self.futures:
            return []
        limit = self.timeout_s + self.GRACE_S
        now = time.monotonic()
        first_late = min(t for _, t in self.futures.values()) + limit
        done, _ = cf.wait(list(self.futures), timeout=max(0.0, min(timeout, first_late - now)),
                          return_when=cf.FIRST_COMPLETED)
        out = []
        for fut in done:
            job, _ = self.futures.pop(fut)
            try:
                res = fut.result()
            except (Exception, cf.CancelledError) as e:
                res = {"status": "runner_error", "lost": True,
                       "error": f"the executor lost the job ({type(e).__name__}: {e})"}
            out.append((job, res))
        now = time.monotonic()
        for fut, (job, t0) in list(self.futures.items()):
            if now - t0 >= limit:
                del self.futures[fut]
                fut.cancel()
                out.append((job, {"status": "runner_error", "lost": True,
                                  "error": f"no result from the executor after {now - t0:.0f} s"}))
        return out

    def cancel(self):
        if not self.dead:           # a dead executor's futures only complain when cancelled
            for fut in self.futures:
                fut.cancel()
        self.futures.clear()

    def close(self):
        self.cancel()          # the executor belongs to the caller: not shut down


def make_dispatcher(executor, n_parallel: Optional[int], timeout_s: float):
    if executor is None:
        return LocalDispatcher(n_parallel or 1, timeout_s)
    return ExecutorDispatcher(executor, n_parallel, timeout_s)
