"""Measuring one candidate: instantiate the template, build, check, time. `run_job(job)`
does all of it in a measuring process (`sandbox.Sandbox`) and returns a small dict.

What travels is small: a `Job` is a config (a dict of knob values), the timing options
and the task's `Payload` (template, arguments, shapes, the numpy reference function, a
seed), never arrays. The measuring process makes the inputs from the seed and computes the
reference itself (the task's numpy `reference`, else the default config's output, built
there), once per task, and keeps them for the next jobs of that task. So any executor can
carry jobs to any machine, and no array ever arrives misaligned or late.

Failures are classified (`STATUSES`):

    instantiate_error  the template raised under this config (e.g. a ScheduleError)
    build_error        lowering or code generation raised
    runtime_error      the kernel raised when called
    wrong_answer       the output differs from the reference (never chosen as best)
    timeout            no result within the trial time limit (the process is killed)
    crash              the measuring process died (a segfault, os._exit, out of memory)
    runner_error       the job never got measured (the executor failed, a job could not
                       be sent, a worker was lost); not written to the log, so a resumed
                       run measures that config

Every result names the machine that measured it: `fingerprint` (the target as this
machine resolves it, `keys.target_fingerprint`) and `host`.

Times are taken with `Module.time_evaluator` while holding the machine's timing lock
(`machine_lock`); `seconds` is the fastest repeat (the least disturbed), `costs` all.
"""
from __future__ import annotations

import collections
import os
import pickle
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

from .keys import target_fingerprint
from .machine_lock import LOCK

STATUSES = ("ok", "instantiate_error", "build_error", "runtime_error", "wrong_answer",
            "timeout", "crash", "runner_error")

# task payloads by token, inherited by forked measuring processes (nothing pickled)
PAYLOADS: Dict[str, "Payload"] = {}


@dataclass
class MeasureOption:
    """How each candidate is measured: `time_evaluator(number, repeat, min_repeat_ms)`;
    a candidate with no result after `timeout_s` (build included) is a time-out."""
    number: int = 1
    repeat: int = 3
    min_repeat_ms: float = 20.0
    timeout_s: float = 60.0


@dataclass
class Payload:
    """Everything a measuring process needs to measure any config of one task."""
    name: str
    template: Any
    args: tuple
    target: str
    arg_specs: list
    reference: Any                  # numpy function of the inputs, or None
    rtol: float
    atol: float
    seed: int
    default_config: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Job:
    """One config to measure. `trial` is unique per job, so an executor that names tasks
    after their arguments (Dask) never merges two of them."""
    token: str
    config: Dict[str, Any]
    option: MeasureOption
    trial: int = 0
    payload: Optional[bytes] = None   # pickled Payload; None in forked processes (PAYLOADS)
    time: bool = True


class ReferenceError_(Exception):
    """The reference output cannot be computed: the run cannot check anything."""


def dumps_payload(payload: Payload) -> bytes:
    """The payload as bytes for processes that did not fork from us. cloudpickle (Dask and
    Ray ship it) sends templates and reference functions written in a notebook or a script
    by value; plain pickle only by reference."""
    try:
        import cloudpickle
        return cloudpickle.dumps(payload)
    except ImportError:
        return pickle.dumps(payload)


def make_inputs(arg_specs, seed: int = 0) -> List[np.ndarray]:
    """Deterministic random inputs (placeholders, in argument order)."""
    rng = np.random.default_rng(seed)
    out = []
    for a in arg_specs:
        if not a.is_input:
            continue
        dt = np.dtype(a.dtype)
        if dt.kind == "f":
            x = rng.standard_normal(a.shape).astype(dt)
        elif dt.kind == "b":
            x = rng.integers(0, 2, a.shape).astype(dt)
        else:
            x = rng.integers(0, 8, a.shape).astype(dt)
        out.append(np.ascontiguousarray(x))
    return out


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


def _build(p: Payload, config):
    """The module of the template under `config`; raises _Failed(status, message)."""
    from .space import Config
    import tdsl
    try:
        out = p.template.fn(Config(values=config), *p.args)
        s, tensors = out[0], list(out[1])
    except Exception as e:
        raise _Failed("instantiate_error", _short(e))
    try:
        return tdsl.build(s, tensors, target=p.target, name="main")
    except Exception as e:
        raise _Failed("build_error", _short(e))


def _run(p: Payload, f, inputs):
    """(arrays, outputs) after one run of `f` on `inputs` and fresh outputs."""
    it = iter(inputs)
    arrays, outputs = [], []
    for spec in p.arg_specs:
        if spec.is_input:
            arrays.append(next(it))
        else:
            o = _empty_output(spec)
            arrays.append(o)
            outputs.append(o)
    try:
        f(*arrays)
    except Exception as e:
        raise _Failed("runtime_error", _short(e))
    return arrays, outputs


class _Failed(Exception):
    def __init__(self, status, msg):
        super().__init__(msg)
        self.status = status


class _Context:
    """A task as one measuring process holds it: inputs made from the seed, and the
    reference outputs once computed."""

    def __init__(self, p: Payload):
        self.p = p
        self.inputs = make_inputs(p.arg_specs, p.seed)
        self.refs: Optional[List[np.ndarray]] = None

    def reference(self) -> List[np.ndarray]:
        if self.refs is not None:
            return self.refs
        p = self.p
        out_specs = [a for a in p.arg_specs if not a.is_input]
        if p.reference is not None:
            try:
                res = p.reference(*[x.copy() for x in self.inputs])
            except Exception as e:
                raise ReferenceError_(f"the reference function raised {_short(e)}")
            refs = [np.asarray(x) for x in ([res] if isinstance(res, np.ndarray) else list(res))]
            if len(refs) != len(out_specs) or any(tuple(r.shape) != s.shape
                                                  for r, s in zip(refs, out_specs)):
                raise ReferenceError_(f"the reference returned shapes {[r.shape for r in refs]}, "
                                      f"the outputs are {[s.shape for s in out_specs]}")
            self.refs = [r.astype(s.dtype) for r, s in zip(refs, out_specs)]
        else:
            try:
                f = _build(p, p.default_config)
                _, outputs = _run(p, f, self.inputs)
            except _Failed as e:
                raise ReferenceError_(
                    f"the default config could not give the reference output ({e.status}: "
                    f"{e}); fix the template's default or pass reference= to create_task")
            self.refs = outputs
        return self.refs


_CONTEXTS: "collections.OrderedDict[str, _Context]" = collections.OrderedDict()


def _context(job: Job) -> _Context:
    ctx = _CONTEXTS.get(job.token)
    if ctx is None:
        p = pickle.loads(job.payload) if job.payload is not None else PAYLOADS.get(job.token)
        if p is None:
            raise _Failed("runner_error", "the measuring process has no payload for this task "
                                          "(was it forked before the task was prepared?)")
        ctx = _Context(p)
        _CONTEXTS[job.token] = ctx
        while len(_CONTEXTS) > 2:            # a process serves one tuning run at a time
            _CONTEXTS.popitem(last=False)
    return ctx


def machine() -> Dict[str, str]:
    return {"host": socket.gethostname()}


def run_job(job: Job) -> dict:
    """Instantiate, build, check and time one config. Runs in the measuring process."""
    t0 = time.perf_counter()
    res = {"status": "ok", "seconds": float("inf"), "costs": [], "error": "", "build_s": 0.0,
           "total_s": 0.0, "pid": os.getpid(), **machine()}
    wait = job.option.timeout_s / 4      # see machine_lock: never time out on the lock
    try:
        with LOCK.shared(wait):
            ctx = _context(job)
            p = ctx.p
            res["fingerprint"] = target_fingerprint(p.target)
            tb0 = time.perf_counter()
            f = _build(p, job.config)
            res["build_s"] = time.perf_counter() - tb0
            arrays, outputs = _run(p, f, ctx.inputs)
            if p.reference is None and ctx.refs is None and job.config == p.default_config:
                ctx.refs = [o.copy() for o in outputs]     # this is the reference
            refs = ctx.reference()
            names = [a.name for a in p.arg_specs if not a.is_input]
            for name, o, r in zip(names, outputs, refs):
                why = _compare(o, r, p.rtol, p.atol)
                if why is not None:
                    raise _Failed("wrong_answer", f"output '{name}': {why}")
        if job.time:
            opt = job.option
            with LOCK.exclusive(wait):
                try:
                    prof = f.time_evaluator(number=opt.number, repeat=opt.repeat,
                                            min_repeat_ms=opt.min_repeat_ms)(*arrays)
                except Exception as e:
                    raise _Failed("runtime_error", _short(e))
            res["costs"] = [float(c) for c in prof.results]
            res["seconds"] = float(min(prof.results))
    except _Failed as e:
        res["status"], res["error"] = e.status, str(e)
    except ReferenceError_ as e:
        res["status"], res["error"] = "runner_error", str(e)
        res["reference_error"] = str(e)
    res["total_s"] = time.perf_counter() - t0
    return res


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
