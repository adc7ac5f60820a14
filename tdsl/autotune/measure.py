"""Measuring one candidate: instantiate the template, build, check, time — in another process.

`run_job(job)` does all of it and returns a plain dict; it is what runs in the measuring
process, so a template or kernel that crashes or hangs there cannot take the tuning
session down. Failures are classified (`STATUSES`):

    instantiate_error  the template raised under this config (e.g. a ScheduleError)
    build_error        lowering or code generation raised
    runtime_error      the kernel raised when called
    wrong_answer       the output differs from the reference (never chosen as best)
    timeout            no result within the trial time limit (the process is killed)
    crash              the measuring process died (a segfault, os._exit, out of memory)
    runner_error       the executor itself failed (e.g. a job could not be pickled)

Runners:

- `LocalRunner` (the default): a `ProcessPoolExecutor` with the "fork" start method.
  Forking means the worker inherits the templates (looked up by name in the registry) and
  the task's inputs and reference outputs (put in `_SHARED` before the fork), so nothing
  has to be pickled but a small job description; templates defined in notebooks or test
  modules just work. A crash breaks the pool (`BrokenProcessPool`) and a hang is ended by
  killing the pool's processes; either way the pool is made anew for the next candidate.
- `ExecutorRunner`: any `concurrent.futures.Executor` the user hands in (a Dask or Ray
  executor, a ProcessPoolExecutor, even a ThreadPoolExecutor for debugging). Jobs then
  carry the template (pickled by reference, or by value with cloudpickle-based executors)
  and the input/reference arrays. A hung job cannot be killed there: it is reported as a
  timeout and abandoned.

Times are taken with `Module.time_evaluator`; `seconds` is the fastest repeat (the least
disturbed by other processes on a shared machine), `costs` all repeats.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import signal
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np

STATUSES = ("ok", "instantiate_error", "build_error", "runtime_error", "wrong_answer",
            "timeout", "crash", "runner_error")

# inputs and reference outputs by task token, inherited by forked measuring processes
_SHARED: Dict[str, dict] = {}


@dataclass
class MeasureOption:
    """How each candidate is measured: `time_evaluator(number, repeat, min_repeat_ms)`;
    a candidate with no result after `timeout_s` (build included) is a time-out."""
    number: int = 1
    repeat: int = 3
    min_repeat_ms: float = 20.0
    timeout_s: float = 60.0


@dataclass
class Job:
    template_name: str
    args: tuple
    target: str
    config: Dict[str, Any]
    arg_specs: list
    option: MeasureOption
    token: str
    rtol: float = 1e-3
    atol: float = 1e-4
    template: Any = None          # shipped only to executors that did not fork from us
    data: Optional[dict] = None   # idem: {"inputs": [...], "refs": [...] or None}
    check: bool = True
    time: bool = True
    return_outputs: bool = False


def _short(e: BaseException, limit=600) -> str:
    msg = f"{type(e).__name__}: {e}"
    return msg if len(msg) <= limit else msg[:limit] + " ..."


def _compare(out, ref, rtol, atol) -> Optional[str]:
    """None when `out` matches `ref`, else a description of the mismatch."""
    if out.shape != ref.shape:
        return f"shape {out.shape} != reference {ref.shape}"
    if out.dtype.kind in "fc":
        o = out.astype(np.float64)
        r = ref.astype(np.float64)
        scale = float(np.max(np.abs(r[np.isfinite(r)]))) if np.isfinite(r).any() else 1.0
        tol = atol * max(scale, 1.0) + rtol * np.abs(r)
        bad = ~(np.abs(o - r) <= tol)
        bad &= ~(np.isnan(o) & np.isnan(r))
        if not bad.any():
            return None
        err = np.abs(o - r)
        err = np.where(np.isnan(err), np.inf, err)
        i = np.unravel_index(int(np.argmax(np.where(bad, err, -1))), out.shape)
        return (f"{int(bad.sum())} of {out.size} elements differ; worst at {tuple(map(int, i))}: "
                f"got {o[i]:.6g}, expected {r[i]:.6g}")
    bad = out != ref
    if not bad.any():
        return None
    i = np.unravel_index(int(np.argmax(bad)), out.shape)
    return f"{int(bad.sum())} of {out.size} elements differ; first at {tuple(map(int, i))}: got {out[i]}, expected {ref[i]}"


def _empty_output(spec):
    dt = np.dtype(spec.dtype)
    if dt.kind == "f":
        return np.full(spec.shape, np.nan, dtype=dt)       # an unwritten element shows
    if dt.kind == "b":
        return np.zeros(spec.shape, dtype=dt)
    return np.full(spec.shape, np.iinfo(dt).max, dtype=dt)


def run_job(job: Job) -> dict:
    """Instantiate, build, check and time one config. Runs in the measuring process."""
    t0 = time.perf_counter()
    res = {"status": "ok", "seconds": float("inf"), "costs": [], "error": "", "build_s": 0.0,
           "total_s": 0.0, "pid": os.getpid()}

    def fail(status, msg):
        res["status"], res["error"] = status, msg
        res["total_s"] = time.perf_counter() - t0
        return res

    data = job.data if job.data is not None else _SHARED.get(job.token)
    if data is None:
        return fail("runner_error", "the measuring process has no inputs for this task (was "
                                    "the pool forked before the task was prepared?)")
    tmpl = job.template
    if tmpl is None:
        from .task import _TEMPLATES
        tmpl = _TEMPLATES.get(job.template_name)
        if tmpl is None:
            return fail("runner_error", f"template {job.template_name!r} is not registered in "
                                        "the measuring process")
    from .space import Config
    import tdsl
    try:
        out = tmpl.fn(Config(values=job.config), *job.args)
        s, tensors = out[0], list(out[1])
    except Exception as e:
        return fail("instantiate_error", _short(e))
    tb0 = time.perf_counter()
    try:
        f = tdsl.build(s, tensors, target=job.target, name="main")
    except Exception as e:
        return fail("build_error", _short(e))
    res["build_s"] = time.perf_counter() - tb0

    inputs = iter(data["inputs"])
    arrays, outputs = [], []
    for spec in job.arg_specs:
        if spec.is_input:
            arrays.append(next(inputs))
        else:
            o = _empty_output(spec)
            arrays.append(o)
            outputs.append(o)
    try:
        f(*arrays)
    except Exception as e:
        return fail("runtime_error", _short(e))
    refs = data.get("refs")
    if job.check and refs is not None:
        for spec_name, o, r in zip([a.name for a in job.arg_specs if not a.is_input], outputs, refs):
            why = _compare(o, r, job.rtol, job.atol)
            if why is not None:
                return fail("wrong_answer", f"output '{spec_name}': {why}")
    if job.return_outputs:
        res["outputs"] = [o.copy() for o in outputs]
    if job.time:
        opt = job.option
        try:
            prof = f.time_evaluator(number=opt.number, repeat=opt.repeat,
                                    min_repeat_ms=opt.min_repeat_ms)(*arrays)
        except Exception as e:
            return fail("runtime_error", _short(e))
        res["costs"] = [float(c) for c in prof.results]
        res["seconds"] = float(min(prof.results))
    res["total_s"] = time.perf_counter() - t0
    return res


def _worker_init():
    """In a measuring process: Ctrl-C is for the tuning session, and a crash is reported by
    its exit status (not by a faulthandler dump inherited from pytest or the user)."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):
        pass
    try:
        import faulthandler
        faulthandler.disable()
    except Exception:
        pass


def describe_exit(code) -> str:
    if code is None:
        return "the measuring process died"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the measuring process was killed by {name}"
    return f"the measuring process exited with code {code}"


# --------------------------------------------------------------------------------------
# runners


_WARM = False


def warm_up():
    """Builds a tiny kernel once in this process, so that processes forked from it start
    with LLVM's target machine and the index-algebra caches ready (about 0.4 s saved per
    new measuring process). Nothing is run."""
    global _WARM
    if _WARM:
        return
    _WARM = True
    try:
        import tdsl
        A = tdsl.placeholder((64, 64), name="A")
        B = tdsl.compute((64, 64), lambda i, j: A[i, j] * 2 + 1, name="B")
        s = tdsl.create_schedule(B)
        jo, ji = s[B].split(B.op.axis[1], factor=16)
        s[B].vectorize(ji)
        s[B].parallel(B.op.axis[0])
        tdsl.build(s, [A, B], name="autotune_warm_up")
    except Exception:
        pass


class LocalRunner:
    """A fork-based process pool of `n_parallel` measuring processes (see the module
    docstring). `recycle_every` jobs the pool is renewed, which bounds the memory of
    compiled kernels kept alive in the workers."""

    ships_data = False

    def __init__(self, n_parallel: int = 1, recycle_every: int = 200):
        methods = mp.get_all_start_methods()
        self.ctx = mp.get_context("fork") if "fork" in methods else mp.get_context()
        if self.ctx.get_start_method() != "fork":
            self.ships_data = True        # spawn: jobs must carry what they need
        self.n_parallel = max(1, int(n_parallel))
        self.recycle_every = recycle_every
        self.pool: Optional[cf.ProcessPoolExecutor] = None
        self._procs: List[Any] = []
        self._jobs = 0

    def _pool(self):
        if self.pool is None:
            if self.ctx.get_start_method() == "fork":
                warm_up()
            self.pool = cf.ProcessPoolExecutor(max_workers=self.n_parallel, mp_context=self.ctx,
                                               initializer=_worker_init)
            self._procs = []
            self._jobs = 0
        return self.pool

    def submit(self, job: Job, in_flight: int = 0) -> cf.Future:
        if self.pool is not None and self._jobs >= self.recycle_every and in_flight == 0:
            self.restart()
        pool = self._pool()
        try:
            fut = pool.submit(run_job, job)
        except cf.process.BrokenProcessPool:
            self.restart()
            fut = self._pool().submit(run_job, job)
        self._jobs += 1
        procs = getattr(self.pool, "_processes", None) or {}
        for p in procs.values():
            if p not in self._procs:
                self._procs.append(p)
        return fut

    def exit_reason(self) -> str:
        """Why the pool broke: the exit status of a dead worker, when one is known."""
        # A crashed worker has exited already; the wait only covers its reaping, which can
        # lag on a loaded machine (0.5 s was seen to be too short).
        deadline = time.monotonic() + 5.0
        for p in self._procs:
            try:
                p.join(timeout=max(0.0, deadline - time.monotonic()))
            except Exception:
                pass
            code = getattr(p, "exitcode", None)
            if code not in (None, 0):
                return describe_exit(code)
        return "the measuring process died"

    def kill(self):
        """Ends every measuring process now (a hung candidate); the pool is made anew."""
        pool, self.pool = self.pool, None
        if pool is None:
            return
        procs = list((getattr(pool, "_processes", None) or {}).values()) or list(self._procs)
        for p in procs:
            try:
                p.kill()
            except Exception:
                pass
        try:
            pool.shutdown(wait=False, cancel_futures=True)
        except Exception:
            pass
        for p in procs:
            try:
                p.join(timeout=2)
            except Exception:
                pass
        self._procs = []

    def restart(self):
        """A fresh pool (after a crash, or when shared data changed)."""
        pool, self.pool = self.pool, None
        if pool is not None:
            try:
                pool.shutdown(wait=True, cancel_futures=True)
            except Exception:
                self.pool = pool
                self.kill()
        self._procs = []

    broken = restart

    def close(self):
        pool, self.pool = self.pool, None
        if pool is not None:
            try:
                pool.shutdown(wait=True, cancel_futures=True)
            except Exception:
                pass


class ExecutorRunner:
    """Measures with a user's `concurrent.futures.Executor` (not shut down here)."""

    ships_data = True

    def __init__(self, executor: cf.Executor, n_parallel: int = 1):
        if not isinstance(executor, cf.Executor) and not callable(getattr(executor, "submit", None)):
            from .space import AutotuneError
            raise AutotuneError(f"tune: executor must be a concurrent.futures.Executor, got {executor!r}")
        self.executor = executor
        self.n_parallel = max(1, int(n_parallel))

    def submit(self, job: Job, in_flight: int = 0) -> cf.Future:
        return self.executor.submit(run_job, job)

    def exit_reason(self) -> str:
        return "a process of the executor died"

    def kill(self):
        pass

    def restart(self):
        pass

    def broken(self):
        pass

    def close(self):
        pass
