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

Measuring on a cluster: pass any `concurrent.futures.Executor` (or a Dask `Client`):

```python
from dask.distributed import Client
client = Client("tcp://scheduler:8786")             # or Client(LocalCluster(...))
res = autotune.tune(task, n_trial=200, log_file="mm.jsonl", executor=client)
# Ray: ray.init(address=...); autotune.tune(task, executor=autotune.RayExecutor())
```

Modules, lowest first: `errors` (AutotuneError), `keys` (what names a call's arguments
and the measuring machine), `entity` + `knob` (a knob's values and candidates), `space`
(the space of a template and the config it sees), `machine_lock` (one timing per machine
at a time), `measure` (what a measuring process does with a job), `task` (templates,
tasks, dispatch of configs to template calls), `record` (the JSON-lines format,
`apply_best`), `check` (results into records), `sandbox` (the measuring process),
`dispatch` + `executors` (where jobs run), `tuner` + `model` (random, grid, model-guided
search), `tunelog` (the log as the run goes, progress), `tune` (the search loop), `plot`
(tuning curve), `autosched` (the search over the auto-scheduler's own parameters,
`tune_auto_schedule`; the rules themselves are `tdsl.autosched`).
"""
from .errors import AutotuneError
from .entity import SplitEntity, ReorderEntity, AnnotateEntity, OtherEntity
from .knob import split_factors
from .space import Config, ConfigSpace
from .task import Task, Template, template, create_task, get_template, ApplyConfig, count_flop
from .measure import MeasureOption, STATUSES, run_job
from .executors import RayExecutor
from .keys import target_fingerprint
from .record import Record, apply_best, load as load_records, best as best_record
from .tuner import Tuner, RandomTuner, GridTuner, ModelTuner
from .model import GBTModel, RidgeModel
from .tune import tune, TuneResult
from .plot import plot_tuning_curve, tuning_curve
from .autosched import tune_auto_schedule

__all__ = [
    "AutotuneError", "Config", "ConfigSpace", "SplitEntity", "ReorderEntity", "AnnotateEntity",
    "OtherEntity", "split_factors", "Task", "Template", "template", "create_task",
    "get_template", "ApplyConfig", "count_flop", "MeasureOption", "RayExecutor",
    "STATUSES", "run_job", "Record", "apply_best", "load_records", "target_fingerprint",
    "best_record", "Tuner", "RandomTuner", "GridTuner", "ModelTuner", "GBTModel",
    "RidgeModel", "tune", "TuneResult", "plot_tuning_curve", "tuning_curve", "tune_auto_schedule",
]
