"""`tune()`: the search loop — propose, dispatch, check, log, learn.

The loop is the only place that knows the order of things; each step is its own piece:

- proposing and learning: a `Tuner` (`tuner.py`), wrapped here by `_Search` (the budget,
  early stopping, configs already measured, the best so far);
- measuring: a dispatcher (`dispatch.py`): the session's own measuring processes, or any
  `concurrent.futures.Executor` (Dask, Ray, a process or thread pool);
- checking what comes back: `check.py` (the outputs themselves are compared with the
  reference in the measuring process, `measure.py`);
- logging: `tunelog.py` (the JSON-lines log, the progress bar).

Budget: `n_trial` new measurements and/or `timeout_s` seconds of wall clock for the whole
call (candidates still running at the deadline are stopped and not logged, so a resumed
run measures them). Each candidate also has `trial_timeout_s`. With `log_file`, every
finished trial is appended at once, and a later call with the same log skips the configs
already measured for the same target (their results seed the tuner and the best so far),
whichever cluster ran them.

Correctness: the outputs of every candidate are compared with a reference: the task's
numpy `reference`, or else the default config's output, both computed by the measuring
process from inputs it makes from a seed. A wrong answer is logged as such, never chosen.

"No slower than the default": with `include_default=True` (the default) the default
config is measured as the first trial of a task, alone, with the same measuring function
as every candidate, so the best record is never slower than it by construction.

Target: the run learns from its workers which target they measure (`fingerprint`); a
record from a worker that resolves the target differently (another CPU) is logged under
its own fingerprint and takes no part in this run's search or best.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import itertools
import math
import time
import uuid
from typing import Any, Deque, Dict, List, Optional

from . import check
from .dispatch import make_dispatcher
from .errors import AutotuneError
from .measure import PAYLOADS, Job, MeasureOption, Payload, dumps_payload
from .record import Record
from .task import Task
from .tuner import Tuner, make_tuner
from .tunelog import TuneLog, fmt_s


class TuneResult:
    """What `tune` returns: the best record (`config`, `seconds`, `gflops`) and the run."""

    def __init__(self, task, best, default, records, new_records, elapsed_s, stopped, target=""):
        self.task = task
        self.best: Optional[Record] = best
        self.default: Optional[Record] = default
        self.records: List[Record] = records          # every record of the task, log included
        self.new_records: List[Record] = new_records  # measured in this call
        self.elapsed_s = elapsed_s
        self.stopped = stopped
        self.target = target                          # the fingerprint the run measured for

    @property
    def config(self) -> Optional[Dict[str, Any]]:
        return dict(self.best.config) if self.best else None

    @property
    def seconds(self) -> float:
        return self.best.seconds if self.best else float("inf")

    @property
    def gflops(self) -> float:
        return self.best.gflops if self.best else 0.0

    @property
    def failures(self) -> List[Record]:
        return [r for r in self.new_records if not r.ok]

    def by_status(self) -> Dict[str, int]:
        return dict(collections.Counter(r.status for r in self.new_records))

    def summary(self) -> str:
        lines = [f"tuned {self.task.name} {list(self.task.args)}: {len(self.new_records)} trials "
                 f"in {self.elapsed_s:.1f} s (stopped: {self.stopped}); "
                 + ", ".join(f"{k} {v}" for k, v in sorted(self.by_status().items()))]
        if self.best:
            lines.append(f"  best    {fmt_s(self.best.seconds):>12s} {self.best.gflops:9.1f} GFLOP/s "
                         f"{self.best.config}")
        if self.default and self.default.ok:
            lines.append(f"  default {fmt_s(self.default.seconds):>12s} {self.default.gflops:9.1f} GFLOP/s")
        for r in self.failures:
            lines.append(f"  trial {r.trial}: {r.status}: {r.error}  {r.config}")
        return "\n".join(lines)

    def __repr__(self):
        if not self.best:
            return f"TuneResult({self.task.name}: no valid config, {self.by_status()})"
        return (f"TuneResult({self.task.name}: best {fmt_s(self.best.seconds)}, "
                f"{self.best.gflops:.1f} GFLOP/s, config={self.best.config})")


def _config_key(values) -> str:
    return Record("", [], "", values, "").config_key


class _Search:
    """The tuner plus the run's bookkeeping: what to measure next, when to stop, the best."""

    def __init__(self, task: Task, tuner: Tuner, n_trial: int, early_stopping, batch: int,
                 history: List[Record]):
        self.space = task.space
        self.tuner = tuner
        self.n_trial = n_trial
        self.early_stopping = early_stopping
        self.batch = batch
        self.done = set()
        self.queue: Deque = collections.deque()
        self.submitted = 0
        self.since_best = 0
        self.best: Optional[Record] = None
        for r in history:
            self.learn(self.space.point_of(r.config), r, count=False)

    def push_first(self, point):
        """Measure `point` first (the default config)."""
        self.tuner.mark_visited(point)
        self.queue.appendleft(point)

    def next(self):
        """(point, values) to measure next, or None when the budget or the space is used up."""
        while True:
            if self.submitted >= self.n_trial:
                return None
            if self.early_stopping is not None and self.since_best >= self.early_stopping:
                return None
            if not self.queue:
                self.queue.extend(self.tuner.next_batch(self.batch))
                if not self.queue:
                    return None
            point = self.queue.popleft()
            values = self.space.values_of(point)
            if _config_key(values) in self.done:
                continue
            self.submitted += 1
            self.done.add(_config_key(values))
            return point, values

    def learn(self, point, r: Record, count=True):
        self.done.add(r.config_key)
        if r.status != "runner_error":     # a lost job says nothing about its config
            self.tuner.update(point, r)
        if r.ok and (self.best is None or r.seconds < self.best.seconds):
            self.best = r
            self.since_best = 0
        elif count:
            self.since_best += 1

    def stop_reason(self) -> str:
        if self.submitted >= self.n_trial:
            return "n_trial"
        if self.early_stopping is not None and self.since_best >= self.early_stopping:
            return "early_stopping"
        return "space exhausted"


class _Run:
    """One call of `tune`: the loop that feeds the dispatcher from the search and turns
    what comes back into records (checked, logged, learnt from)."""

    def __init__(self, task, search: _Search, dispatcher, log: TuneLog, make_job,
                 fingerprint: str, trial_no: int, deadline: float, default_alone: bool):
        self.task, self.search, self.dispatcher, self.log = task, search, dispatcher, log
        self.make_job = make_job
        self.fingerprint = fingerprint
        self.trial_no = trial_no
        self.deadline = deadline
        self.default_alone = default_alone
        self.new_records: List[Record] = []
        self.pending: Dict[int, tuple] = {}
        self.lost_in_a_row = 0
        self.executor_failed = False

    def loop(self) -> str:
        """Measures until the budget, the space or the executor runs out; returns why."""
        while True:
            if time.perf_counter() >= self.deadline:
                self.dispatcher.cancel()           # not logged: a resumed run measures them
                return "timeout_s"
            self.fill()
            if self.executor_failed:
                return "executor failed"
            if self.dispatcher.in_flight == 0:
                return self.search.stop_reason()
            for job, res in self.dispatcher.wait(max(0.0, self.deadline - time.perf_counter())):
                self.collect(job, res)
                if self.executor_failed:
                    return "executor failed"

    def fill(self):
        # the default config runs alone: when it is the reference, nothing else can be
        # checked before it ran
        room = 1 if self.default_alone else self.dispatcher.capacity()
        while self.dispatcher.in_flight < room and not self.executor_failed:
            item = self.search.next()
            if item is None:
                return
            job = self.make_job(item[1])
            try:
                self.dispatcher.submit(job)
            except Exception as e:
                self.finish(*item, {"status": "runner_error", "lost": True,
                                    "error": f"the executor refused the job: {type(e).__name__}: {e}"})
                continue
            self.pending[job.trial] = item

    def collect(self, job, res):
        point, values = self.pending.pop(job.trial)
        if self.default_alone and values == self.task.space.default_config().to_dict():
            if self.task.reference is None and res.get("status") != "ok" \
                    and "reference_error" not in res:
                raise AutotuneError(
                    f"tune {self.task.name!r}: the default config could not give the reference "
                    f"output ({res.get('status')}: {res.get('error')}); fix the template's "
                    "default or pass reference= to create_task")
        self.finish(point, values, res)

    def finish(self, point, values, res):
        if "reference_error" in res:
            raise AutotuneError(f"tune {self.task.name!r}: {res['reference_error']}")
        self.trial_no += 1
        self.default_alone = False        # the default's result (or the first job's) is in
        space = self.task.space
        r = check.to_record(self.task, values,
                            space.index_of_point(point) if point is not None else None,
                            res, trial=self.trial_no, tuner=self.search.tuner.name)
        self.new_records.append(r)
        if check.is_foreign(r, self.fingerprint):
            self.log.note(f"{r.host or 'a worker'} measures for {r.fingerprint}, this run for "
                          f"{self.fingerprint}: its records are logged for their target, not "
                          "used here", once=r.fingerprint)
            self.search.done.add(r.config_key)
        else:
            self.search.learn(point, r)
        self.log.add(r, self.search.best)
        # runner errors in a row (a job nobody can unpickle ...), or a job the executor
        # lost while it no longer answers (the scheduler went away): stop; the log keeps
        # every finished trial for a run on another cluster
        self.lost_in_a_row = self.lost_in_a_row + 1 if r.status == "runner_error" else 0
        if self.lost_in_a_row >= 3 or (res.get("lost") and not self.dispatcher.healthy()):
            self.executor_failed = True


def tune(task: Task, tuner="random", n_trial: int = 100, timeout_s: Optional[float] = None,
         log_file=None, executor: Optional[cf.Executor] = None, *, trial_timeout_s: float = 60.0,
         number: int = 1, repeat: int = 3, min_repeat_ms: float = 20.0,
         n_parallel: Optional[int] = None, batch_size: Optional[int] = None,
         early_stopping: Optional[int] = None, include_default: bool = True, resume: bool = True,
         progress=True, seed: int = 0) -> TuneResult:
    """Searches `task.space` and returns a `TuneResult` (best config, seconds, GFLOP/s).

    tuner: "random", "grid", "model" or a `Tuner`. n_trial: new measurements (failures
    count). timeout_s: wall-clock budget of the call. log_file: JSON-lines log, appended and
    resumed. executor: where to measure: a `concurrent.futures.Executor` (a Dask
    `client.get_executor()` or a Dask `Client`, `autotune.RayExecutor()`, a process or
    thread pool); each of its workers measures in a process of its own, one trial at a
    time, and timings on one machine never overlap (`machine_lock`). Default: measuring
    processes forked from this one. n_parallel: jobs in flight (default: 1 without an
    executor, else the executor's worker count). trial_timeout_s: a candidate with no
    result after that long is killed and logged as a time-out. number/repeat/min_repeat_ms:
    passed to `time_evaluator`. early_stopping: stop after that many trials without a new
    best. progress: a tqdm bar with the best GFLOP/s so far (False: silent; a file: where
    to draw it); failures are printed above the bar as they happen. seed: of the inputs
    and of the tuner.
    """
    if not isinstance(task, Task):
        raise AutotuneError(f"tune: expected a task from create_task, got {task!r}")
    if n_trial is None:
        n_trial = 1 << 62
    if n_trial < 0:
        raise AutotuneError(f"tune: n_trial must be >= 0, got {n_trial}")
    start = time.perf_counter()
    deadline = start + timeout_s if timeout_s is not None else math.inf
    space = task.space
    tn = make_tuner(tuner, space, seed)
    default_values = space.default_config().to_dict()
    payload = Payload(task.name, task.template, task.args, task.target, task.arg_specs,
                      task.reference, task.rtol, task.atol, seed, default_values)
    token = uuid.uuid4().hex
    dispatcher = make_dispatcher(executor, n_parallel, trial_timeout_s)
    blob = None
    if dispatcher.forks:
        PAYLOADS[token] = payload         # forked measuring processes inherit it
    else:
        try:
            blob = dumps_payload(payload)
        except Exception as e:
            raise AutotuneError(
                f"tune {task.name!r}: the template or the reference function cannot be sent to "
                f"the executor's workers ({type(e).__name__}: {e}); define them at module level "
                "or install cloudpickle") from None
    option = MeasureOption(number, repeat, min_repeat_ms, trial_timeout_s)
    jobs = itertools.count(1)

    def make_job(values):
        return Job(token, values, option, trial=next(jobs), payload=blob)

    log = TuneLog(log_file, task, progress, n_trial if n_trial < (1 << 62) else None)
    run: Optional[_Run] = None
    history: List[Record] = []
    fingerprint, stopped, clean = "", None, False
    try:
        fingerprint, _host = dispatcher.fingerprint(task.target)
        history = log.history(fingerprint) if resume else []
        search = _Search(task, tn, n_trial, early_stopping,
                         batch_size or max(8, dispatcher.capacity()), history)
        default_alone = include_default and n_trial > 0 and \
            _config_key(default_values) not in search.done
        if default_alone:
            search.push_first(space.default_point())
        run = _Run(task, search, dispatcher, log, make_job, fingerprint,
                   max((r.trial for r in history), default=0), deadline, default_alone)
        stopped = run.loop()
        clean = True
    except KeyboardInterrupt:     # keep what was measured (it is in the log too)
        stopped = "interrupted"
        log.note("interrupted; returning the best so far")
    finally:
        if not clean:
            dispatcher.cancel()
        dispatcher.close()
        PAYLOADS.pop(token, None)
        log.close()

    new_records = run.new_records if run is not None else []
    records = history + new_records
    default_key = _config_key(default_values)
    default = next((r for r in records if r.config_key == default_key
                    and not check.is_foreign(r, fingerprint)), None)
    return TuneResult(task, run.search.best if run is not None else None, default, records,
                      new_records, time.perf_counter() - start, stopped, fingerprint)
