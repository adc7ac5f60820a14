"""`tune()`: the measure loop — propose, measure in another process, log, learn.

Budget: `n_trial` new measurements and/or `timeout_s` seconds of wall clock for the whole
call (the reference, the default config and every candidate; candidates still running at
the deadline are stopped and not logged, so a resumed run measures them). Each candidate
also has `trial_timeout_s`. With `log_file`, every finished trial is appended at once, and
a later call with the same log skips the configs already in it (their results seed the
tuner and the best so far).

Correctness: the outputs of every candidate are compared with a reference — the task's
numpy `reference`, or else the default config's output (computed first, in the measuring
process). A wrong answer is logged as such and never chosen.

"No slower than the default": with `include_default=True` (the default) the default
config is measured as the first trial of a task, with the same measuring function as every
candidate, so the best record is never slower than it by construction.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import math
import sys
import time
import uuid
from typing import Any, Deque, Dict, List, Optional

import numpy as np

from . import record as rec_mod
from .measure import _SHARED, ExecutorRunner, Job, LocalRunner, MeasureOption
from .record import Record
from .space import AutotuneError
from .task import Task, _jsonable
from .tuner import make_tuner


def _fmt_s(sec: float) -> str:
    if not math.isfinite(sec):
        return "-"
    if sec >= 1:
        return f"{sec:.3f} s"
    if sec >= 1e-3:
        return f"{sec * 1e3:.3f} ms"
    return f"{sec * 1e6:.2f} us"


class TuneResult:
    """What `tune` returns: the best record (`config`, `seconds`, `gflops`) and the run."""

    def __init__(self, task, best, default, records, new_records, elapsed_s, stopped):
        self.task = task
        self.best: Optional[Record] = best
        self.default: Optional[Record] = default
        self.records: List[Record] = records          # every record of the task, log included
        self.new_records: List[Record] = new_records  # measured in this call
        self.elapsed_s = elapsed_s
        self.stopped = stopped

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
            lines.append(f"  best    {_fmt_s(self.best.seconds):>12s} {self.best.gflops:9.1f} GFLOP/s "
                         f"{self.best.config}")
        if self.default and self.default.ok:
            lines.append(f"  default {_fmt_s(self.default.seconds):>12s} {self.default.gflops:9.1f} GFLOP/s")
        for r in self.failures:
            lines.append(f"  trial {r.trial}: {r.status}: {r.error}  {r.config}")
        return "\n".join(lines)

    def __repr__(self):
        if not self.best:
            return f"TuneResult({self.task.name}: no valid config, {self.by_status()})"
        return (f"TuneResult({self.task.name}: best {_fmt_s(self.best.seconds)}, "
                f"{self.best.gflops:.1f} GFLOP/s, config={self.best.config})")


class _NoBar:
    def __init__(self, file=None):
        self.file = file or sys.stderr

    def update(self, n=1):
        pass

    def set_postfix_str(self, s):
        pass

    def write(self, s):
        print(s, file=self.file)

    def close(self):
        pass


def _progress_bar(progress, total, desc):
    if not progress:
        return _NoBar()
    file = progress if hasattr(progress, "write") else None
    try:
        from tqdm.auto import tqdm
    except ImportError:           # tqdm is a dependency; stay usable without it
        return _NoBar(file)

    class Bar(tqdm):
        monitor_interval = 0      # no monitor thread: the measuring pool forks

    return Bar(total=total, desc=desc, unit="trial", file=file, dynamic_ncols=True, leave=True)


def _as_list(x):
    if isinstance(x, np.ndarray):
        return [x]
    return list(x)


def tune(task: Task, tuner="random", n_trial: int = 100, timeout_s: Optional[float] = None,
         log_file=None, executor: Optional[cf.Executor] = None, *, trial_timeout_s: float = 60.0,
         number: int = 1, repeat: int = 3, min_repeat_ms: float = 20.0, n_parallel: int = 1,
         batch_size: Optional[int] = None, early_stopping: Optional[int] = None,
         include_default: bool = True, resume: bool = True, progress=True, seed: int = 0) -> TuneResult:
    """Searches `task.space` and returns a `TuneResult` (best config, seconds, GFLOP/s).

    tuner: "random", "grid", "model" or a `Tuner`. n_trial: new measurements (failures
    count). timeout_s: wall-clock budget of the call. log_file: JSON-lines log, appended and
    resumed. executor: any concurrent.futures.Executor to measure with (default: a
    fork-based process pool of `n_parallel` processes; more than one process makes timings
    disturb each other, so keep 1 on one machine). trial_timeout_s: a candidate with no
    result after that long is killed and logged as a time-out. number/repeat/min_repeat_ms:
    passed to `time_evaluator`. early_stopping: stop after that many trials without a new
    best. progress: a tqdm bar with the best GFLOP/s so far (False: silent; a file: where
    to draw it); failures are printed above the bar as they happen.
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
    batch = batch_size or max(8, n_parallel)
    option = MeasureOption(number, repeat, min_repeat_ms, trial_timeout_s)

    history = rec_mod.load(log_file, task) if (log_file is not None and resume) else []
    done_keys = set()
    for r in history:
        done_keys.add(r.config_key)
        point = space.point_of(r.config)
        tn.update(point, r)
    records: List[Record] = list(history)
    new_records: List[Record] = []
    trial_no = max((r.trial for r in history), default=0)
    best: Optional[Record] = rec_mod.best(history)

    inputs = task.make_inputs(seed)
    out_specs = [a for a in task.arg_specs if not a.is_input]
    refs = None
    if task.reference is not None:
        refs = [np.asarray(x) for x in _as_list(task.reference(*inputs))]
        if len(refs) != len(out_specs) or any(tuple(r.shape) != s.shape for r, s in zip(refs, out_specs)):
            raise AutotuneError(f"tune: reference returned shapes {[r.shape for r in refs]}, the "
                                f"outputs are {[s.shape for s in out_specs]}")
        refs = [r.astype(s.dtype) for r, s in zip(refs, out_specs)]
    token = uuid.uuid4().hex
    data = {"inputs": inputs, "refs": refs}
    runner = LocalRunner(n_parallel) if executor is None else ExecutorRunner(executor, n_parallel)
    if not runner.ships_data:
        _SHARED[token] = data
    bar = _progress_bar(progress, n_trial if n_trial < (1 << 62) else None, f"tune {task.name}")
    args_json = _jsonable(list(task.args))
    stopped = None

    def make_job(values, **kw):
        return Job(task.name, task.args, task.target, values, task.arg_specs, option, token,
                   task.rtol, task.atol,
                   template=task.template if runner.ships_data else None,
                   data=data if runner.ships_data else None, **kw)

    def best_text():
        if best is None:
            return "best: -"
        if best.gflops:
            return f"best {best.gflops:.1f} GFLOP/s"
        return f"best {_fmt_s(best.seconds)}"

    def finish(point, values, res):
        nonlocal trial_no, best
        trial_no += 1
        status = res.get("status", "runner_error")
        secs = float(res.get("seconds", math.inf)) if status == "ok" else math.inf
        r = Record(task=task.name, args=args_json, target=task.target, config=dict(values),
                   status=status, seconds=secs, costs=list(res.get("costs", [])),
                   gflops=(task.flop / secs / 1e9) if (status == "ok" and task.flop and secs > 0) else 0.0,
                   error=res.get("error", ""),
                   index=space.index_of_point(point) if point is not None else None,
                   build_s=float(res.get("build_s", 0.0)), total_s=float(res.get("total_s", 0.0)),
                   trial=trial_no, tuner=tn.name, timestamp=time.time())
        records.append(r)
        new_records.append(r)
        done_keys.add(r.config_key)
        tn.update(point, r)
        if log_file is not None:
            rec_mod.append(log_file, [r])
        if r.ok and (best is None or r.seconds < best.seconds):
            best = r
        if not r.ok:
            bar.write(f"[autotune] trial {r.trial} {r.status}: {r.error}  config={r.config}")
        bar.update(1)
        bar.set_postfix_str(best_text())
        return r

    def wait_one(fut, limit):
        """Result dict of one future, classifying crash/time-out/runner errors."""
        try:
            return fut.result(timeout=max(0.0, limit))
        except cf.TimeoutError:
            runner.kill()
            return {"status": "timeout", "error": f"no result after {limit:.1f} s"}
        except cf.process.BrokenProcessPool:
            why = runner.exit_reason()
            runner.broken()
            return {"status": "crash", "error": why}
        except Exception as e:
            return {"status": "runner_error", "error": f"{type(e).__name__}: {e}"}

    clean = False
    try:
        default_values = space.default_config().to_dict()
        default_point = space.default_point()
        default_pending = include_default and \
            Record("", [], "", default_values, "").config_key not in done_keys and n_trial > 0
        if refs is None:
            # the default config's output is the reference (in the measuring process)
            limit = min(trial_timeout_s, max(0.0, deadline - time.perf_counter()))
            fut = runner.submit(make_job(default_values, check=False, time=default_pending,
                                         return_outputs=True))
            res = wait_one(fut, limit)
            if res.get("status") != "ok":
                raise AutotuneError(
                    f"tune {task.name!r}: the default config could not give the reference "
                    f"output ({res.get('status')}: {res.get('error')}); fix the template's "
                    "default or pass reference= to create_task")
            refs = res.pop("outputs")
            data["refs"] = refs
            if not runner.ships_data:
                _SHARED[token] = data
                runner.restart()          # fork again so the workers see the reference
            if default_pending:
                finish(default_point, default_values, res)
                tn.mark_visited(default_point)
                default_pending = False

        queue: Deque = collections.deque()
        if default_pending:
            tn.mark_visited(default_point)
            queue.append(default_point)
        solo: Deque = collections.deque()       # (point, values, tries) to run alone
        inflight: Dict[cf.Future, tuple] = {}
        submitted = len(new_records)      # the default, when it was measured with the reference
        submit_failures = 0
        since_best = 0
        last_best = best

        def next_candidate():
            nonlocal submitted
            while True:
                if submitted >= n_trial:
                    return None
                if early_stopping is not None and since_best >= early_stopping:
                    return None
                if not queue:
                    queue.extend(tn.next_batch(batch))
                    if not queue:
                        return None
                point = queue.popleft()
                values = space.values_of(point)
                if Record("", [], "", values, "").config_key in done_keys:
                    continue
                submitted += 1
                return (point, values, 0)

        while True:
            now = time.perf_counter()
            if now >= deadline:
                stopped = "timeout_s"
                break
            # submit while there is room (a job to run alone waits for an empty pool)
            while len(inflight) < runner.n_parallel:
                if solo:
                    if inflight:
                        break
                    item = solo.popleft()
                else:
                    item = next_candidate()
                    if item is None:
                        break
                try:
                    fut = runner.submit(make_job(item[1]), in_flight=len(inflight))
                except Exception as e:
                    finish(item[0], item[1], {"status": "runner_error", "error": f"{type(e).__name__}: {e}"})
                    submit_failures += 1
                    if submit_failures >= 3:
                        stopped = "executor failed"
                        break
                    continue
                submit_failures = 0
                inflight[fut] = (item, time.perf_counter())
                if item[2] > 0:         # a retried job runs alone
                    break
            if stopped:
                break
            if not inflight:
                if submitted >= n_trial:
                    stopped = "n_trial"
                elif early_stopping is not None and since_best >= early_stopping:
                    stopped = "early_stopping"
                else:
                    stopped = "space exhausted"
                break
            now = time.perf_counter()
            wake = min(min(t + trial_timeout_s for _, t in inflight.values()), deadline)
            done, _ = cf.wait(list(inflight), timeout=max(0.0, wake - now),
                              return_when=cf.FIRST_COMPLETED)
            broken = []
            for fut in done:
                item, _t = inflight.pop(fut)
                try:
                    res = fut.result()
                except cf.process.BrokenProcessPool:
                    broken.append(item)
                    continue
                except Exception as e:
                    res = {"status": "runner_error", "error": f"{type(e).__name__}: {e}"}
                finish(item[0], item[1], res)
            if broken:
                # every job in a broken pool fails; the others learn it at once
                cf.wait(list(inflight), timeout=2.0)
                for fut in list(inflight):
                    if fut.done():
                        item, _t = inflight.pop(fut)
                        try:
                            finish(item[0], item[1], fut.result())
                        except cf.process.BrokenProcessPool:
                            broken.append(item)
                        except Exception as e:
                            finish(item[0], item[1], {"status": "runner_error",
                                                      "error": f"{type(e).__name__}: {e}"})
                why = runner.exit_reason()
                runner.broken()
                if len(broken) == 1 and not inflight:
                    item = broken[0]
                    finish(item[0], item[1], {"status": "crash", "error": why})
                else:            # which one crashed? run each alone
                    for item in broken:
                        if item[2] >= 1:
                            finish(item[0], item[1], {"status": "crash", "error": why})
                        else:
                            solo.append((item[0], item[1], item[2] + 1))
            # time-outs
            now = time.perf_counter()
            late = [f for f, (_, t) in inflight.items() if now - t >= trial_timeout_s]
            if late:
                for fut in late:
                    item, t = inflight.pop(fut)
                    fut.cancel()
                    finish(item[0], item[1], {"status": "timeout",
                                              "error": f"no result after {now - t:.1f} s "
                                                       f"(trial_timeout_s={trial_timeout_s:g})"})
                if isinstance(runner, LocalRunner):
                    runner.kill()
                    for fut, (item, _t) in list(inflight.items()):   # innocent: measure again
                        inflight.pop(fut)
                        solo.appendleft(item)
            if best is not last_best:
                since_best = 0
                last_best = best
            else:
                since_best += len(done) + len(late)
        if stopped == "timeout_s" and inflight:
            runner.kill()
            for fut in inflight:
                fut.cancel()
        clean = True
    except KeyboardInterrupt:     # keep what was measured (it is in the log too)
        stopped = "interrupted"
        bar.write("[autotune] interrupted; returning the best so far")
    finally:
        if clean:
            runner.close()
        else:
            runner.kill()
        _SHARED.pop(token, None)
        bar.close()

    default_key = Record("", [], "", space.default_config().to_dict(), "").config_key
    default = next((r for r in records if r.config_key == default_key), None)
    return TuneResult(task, best, default, records, new_records, time.perf_counter() - start,
                      stopped)
