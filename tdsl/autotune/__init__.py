"""Autotuning: search schedule parameters by measuring them.

```python
from tdsl import autotune

@autotune.template("matmul")
def matmul(cfg, M, N, K):
    A, B, C = ...
    s = tdsl.create_schedule(C)
    i, j = C.op.axis
    cfg.define_split("tile_i", i, num_outputs=2)
    io, ii = cfg["tile_i"].apply(s, C, i)
    ...
    return s, [A, B, C]

task = autotune.create_task(matmul, args=(1024, 1024, 1024), target="llvm")
print(task.space)                                   # the knobs and the size of the space
res = autotune.tune(task, tuner="model", n_trial=200, timeout_s=300, log_file="mm.jsonl")
print(res.summary())                                # best, default, every failure and why
with autotune.apply_best("mm.jsonl"):
    s, args = matmul(1024, 1024, 1024)              # the best logged config
```

Modules: `space` (knobs, configs), `task` (templates, tasks, dispatch), `measure` (the
measuring job and runners), `tuner` + `model` (random, grid, model-guided search),
`record` (the JSON-lines log, `apply_best`), `tune` (the loop), `plot` (tuning curve).
"""
from .space import (AutotuneError, Config, ConfigSpace, SplitEntity, ReorderEntity,
                    AnnotateEntity, OtherEntity, split_factors)
from .task import Task, Template, template, create_task, get_template, ApplyConfig, count_flop
from .measure import MeasureOption, LocalRunner, ExecutorRunner, STATUSES, run_job
from .record import Record, apply_best, load as load_records, best as best_record
from .tuner import Tuner, RandomTuner, GridTuner, ModelTuner
from .model import GBTModel, RidgeModel
from .tune import tune, TuneResult
from .plot import plot_tuning_curve, tuning_curve

__all__ = [
    "AutotuneError", "Config", "ConfigSpace", "SplitEntity", "ReorderEntity", "AnnotateEntity",
    "OtherEntity", "split_factors", "Task", "Template", "template", "create_task",
    "get_template", "ApplyConfig", "count_flop", "MeasureOption", "LocalRunner",
    "ExecutorRunner", "STATUSES", "run_job", "Record", "apply_best", "load_records",
    "best_record", "Tuner", "RandomTuner", "GridTuner", "ModelTuner", "GBTModel",
    "RidgeModel", "tune", "TuneResult", "plot_tuning_curve", "tuning_curve",
]
