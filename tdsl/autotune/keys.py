"""What identifies a measurement: the arguments of the template call (`args_key`) and the
machine that measured it (`target_fingerprint`).

Tasks, log records, the measuring processes and the dispatchers all compare by these two,
so they live below all of them: each of those modules imports this one and none needs
another to name a task or a machine.
"""
from __future__ import annotations

import functools
import json

import numpy as np

from ..target import as_target


def jsonable(x):
    """`x` as JSON values: numpy numbers as Python numbers, tuples as lists, anything
    else by its repr."""
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    return repr(x)


def args_key(args) -> str:
    return json.dumps(jsonable(list(args)), sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=64)
def target_fingerprint(target) -> str:
    """What identifies the machine a record was measured on: the target description's
    fingerprint ("llvm" resolves to this host's CPU) and its core count, since parallel
    kernels' timings (and so the best config) depend on it."""
    t = as_target(" ".join(str(target).split()) or "llvm")
    return f"{t.fingerprint}:{t.num_cores}c"
