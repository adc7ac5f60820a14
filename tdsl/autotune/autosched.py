"""A search on top of the rules: `tdsl.autotune` tunes the auto-scheduler's own parameters
(register tile rows and vectors, operand packing, unroll, parallel tasks) for a definition,
with its measurement pool, log and tuners; no template is written by the user.

    def definition(n):                      # returns (outputs, tensors in argument order)
        A, B, C = ...
        return [C], [A, B, C]
    s, tensors, res = tdsl.autotune.tune_auto_schedule(definition, (1024,), target="llvm",
                                                       timeout_s=60)

The tuning task is the registered template "tdsl.auto_schedule" over (definition name,
target, *args); the definition function is looked up by its qualified name, so records in
a log are found again by the next run that registers the same function."""
from __future__ import annotations

import numpy as np

from ..autosched import auto_schedule
from ..autosched.analysis import stage_infos
from ..autosched.gpu_contraction import BLOCK, THREAD_TILE
from ..autosched.params import AutoParams
from ..build import build
from ..errors import ScheduleError
from ..schedule.schedule import Schedule
from ..target import as_target
from .task import create_task, get_template, template
from .tune import tune

_DEFS = {}


def register_definition(fn, name=None) -> str:
    """Makes `fn(*args) -> (outputs, tensors)` tunable under `name` (default: its
    qualified name); returns the name."""
    if not callable(fn):
        raise ScheduleError(f"tune_auto_schedule: the definition must be a function returning "
                            f"(outputs, tensors), got {fn!r}")
    name = name or f"{fn.__module__}.{fn.__qualname__}"
    _DEFS[name] = fn
    return name


def _definition(name, args):
    fn = _DEFS.get(name)
    if fn is None:
        raise ScheduleError(f"tune_auto_schedule: no definition registered as {name!r} "
                            "(tdsl.autotune.autosched.register_definition)")
    res = fn(*args)
    if not (isinstance(res, tuple) and len(res) == 2):
        raise ScheduleError(f"tune_auto_schedule: definition {name!r} must return (outputs, tensors)")
    outs, tensors = res
    return (outs if isinstance(outs, (list, tuple)) else [outs]), list(tensors)


def _infos(outs):
    return stage_infos(Schedule(list(outs))).values()


def _has_contraction(outs):
    return any(i.is_reuse_reduction() for i in _infos(outs))


# GPU knobs: None is the rules' own choice; pairs are two knobs (JSON-plain values in logs)
_GPU_KNOBS = {
    "block_y": [None, 8, 16, 32], "block_x": [None, 8, 16, 32],
    "tile_i": [None, 2, 4, 8], "tile_j": [None, 2, 4, 8],
    "k_tile": [None, 4, 8, 16], "double_buffer": [None, True, False],
}


def _gpu_space(cfg, outs):
    if _has_contraction(outs):
        for name, values in _GPU_KNOBS.items():
            cfg.define_knob(name, values, default=None)
    if any(i.is_reduction and not i.is_reuse_reduction() for i in _infos(outs)):
        # 1: one thread per output (no cross-thread reduction)
        cfg.define_knob("reduce_threads", [None, 1, 32, 64, 128, 256, 512, 1024], default=None)
    cfg.define_knob("threads", [128, 64, 256, 512], default=128)


def _pair(config, a, b):
    x, y = config.get(a), config.get(b)
    return None if x is None and y is None else (x, y)


def _gpu_params(config) -> AutoParams:
    p = AutoParams(threads=config.get("threads", 128), k_tile=config.get("k_tile"),
                   double_buffer=config.get("double_buffer"),
                   reduce_threads=config.get("reduce_threads"))
    block, tile = _pair(config, "block_y", "block_x"), _pair(config, "tile_i", "tile_j")
    # one side of a pair given: the other is the rules' default
    if block or tile:
        p.block = tuple(d if x is None else x for x, d in zip(block or (None, None), BLOCK))
        p.thread_tile = tuple(d if x is None else x for x, d in zip(tile or (None, None), THREAD_TILE))
    return p


def _template():
    def auto_template(cfg, defname, target, *args):
        outs, tensors = _definition(defname, args)
        t = as_target(target)
        if t.is_gpu:
            _gpu_space(cfg, outs)
            p = _gpu_params({k: cfg[k].val for k in [*_GPU_KNOBS, "reduce_threads", "threads"]
                             if k in cfg})
            return auto_schedule(outs, target=t, params=p), tensors
        if _has_contraction(outs):
            # None: the rules' own choice (the default config is the untuned auto schedule)
            cfg.define_knob("tile_rows", [None, 1, 2, 3, 4, 6, 7, 8, 12, 14, 16], default=None)
            cfg.define_knob("tile_vecs", [None, 1, 2, 3, 4], default=None)
            cfg.define_knob("pack", [None, True, False], default=None)
        cfg.define_knob("unroll", [4, 1, 2, 8], default=4)
        cfg.define_knob("chunks", [None, t.num_cores, 2 * t.num_cores, 8 * t.num_cores, 16 * t.num_cores],
                        default=None)
        p = AutoParams(unroll=cfg["unroll"].val, chunks=cfg["chunks"].val)
        if _has_contraction(outs):
            rows, vecs = cfg["tile_rows"].val, cfg["tile_vecs"].val
            p.tile = (rows, vecs) if (rows or vecs) else None
            p.pack = cfg["pack"].val
        return auto_schedule(outs, target=t, params=p), tensors

    try:
        return get_template("tdsl.auto_schedule")
    except Exception:
        return template("tdsl.auto_schedule")(auto_template)


def create_auto_schedule_task(definition, args=(), target="llvm", **kw):
    """The tuning task of `definition(*args)`'s auto schedule on `target`."""
    name = register_definition(definition)
    return create_task(_template(), args=(name, str(as_target(target)), *args),
                       target=str(as_target(target)), **kw)


def params_of(config: dict, target="llvm") -> AutoParams:
    """The AutoParams a tuned config stands for."""
    if as_target(target).is_gpu:
        return _gpu_params(config)
    p = AutoParams(unroll=config.get("unroll", 4), chunks=config.get("chunks"))
    rows, vecs = config.get("tile_rows"), config.get("tile_vecs")
    if rows or vecs:
        p.tile = (rows, vecs)
    p.pack = config.get("pack")
    return p


def _confirm(task, configs, rounds=3):
    """Re-times the candidate configs here, interleaved (`rounds` passes over all of them,
    each keeping its best): on a shared machine one trial's timing can be lucky, and the
    untuned config is always among the candidates, so the pick is never a measured loss."""
    inputs = task.make_inputs()
    outs = [np.zeros(a.shape, a.dtype) for a in task.arg_specs if not a.is_input]
    mods = []
    for c in configs:
        sched, tensors = task.instantiate(task.config(c))
        mods.append(build(sched, tensors, target=task.target, name="auto_candidate"))
    best = [float("inf")] * len(mods)
    for _ in range(rounds):
        for n, m in enumerate(mods):
            t = m.time_evaluator(number=1, repeat=3, min_repeat_ms=10)(*inputs, *outs).min
            best[n] = min(best[n], t)
    return configs[int(np.argmin(best))]


def tune_auto_schedule(definition, args=(), target="llvm", timeout_s=60.0, n_trial=None,
                       tuner="random", log_file=None, confirm=3, **kw):
    """Tunes the auto-scheduler's parameters for `definition(*args)` within `timeout_s`;
    returns (schedule, tensors, TuneResult) with the best schedule found. The `confirm` best
    measured configs and the untuned one are timed again side by side before the pick."""
    task = create_auto_schedule_task(definition, args, target)
    res = tune(task, tuner=tuner, n_trial=n_trial, timeout_s=timeout_s, log_file=log_file,
               progress=kw.pop("progress", False), **kw)
    outs, tensors = _definition(task.args[0], args)
    config = res.config
    if config and confirm:
        ok = sorted((r for r in res.records if r.ok), key=lambda r: r.seconds)
        cands = []
        for r in ok:
            if r.config not in cands:
                cands.append(dict(r.config))
            if len(cands) >= confirm:
                break
        default = task.space.default_config().to_dict()
        if default not in cands:
            cands.append(default)
        if len(cands) > 1:
            config = _confirm(task, cands)
    p = params_of(config, target) if config else None
    return auto_schedule(outs, target=target, params=p), tensors, res
