"""What users pass as `tune(executor=...)`, turned into a `concurrent.futures.Executor`,
and how many jobs it can run at once.

- a `concurrent.futures.Executor`: `ProcessPoolExecutor`, `ThreadPoolExecutor`, Dask's
  `client.get_executor()`, `RayExecutor()` below;
- a Dask `distributed.Client`: its executor with `pure=False` (Dask would otherwise treat
  two submissions with equal arguments as one task).

Capacity (jobs kept in flight when `n_parallel` is not given): the worker threads of a
Dask cluster (asked again as it grows or loses workers), Ray's CPUs, a pool's workers.
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import sys

from .errors import AutotuneError


class RayExecutor(cf.Executor):
    """Runs each job as a Ray task (`ray.remote(fn).remote(...)`), `num_cpus` each; Ray
    runs a task again when the worker running it dies (`max_retries`). Call `ray.init()`
    (or `ray.init(address=...)` for a cluster) first; tdsl must be importable on the
    workers (installed, or through `runtime_env`)."""

    def __init__(self, num_cpus: float = 1, max_retries: int = 3, **options):
        import ray
        self._ray = ray
        self.num_cpus = num_cpus
        self._options = dict(num_cpus=num_cpus, max_retries=max_retries, **options)
        self._remote = {}

    def submit(self, fn, *args, **kwargs):
        rf = self._remote.get(fn)
        if rf is None:
            rf = self._remote[fn] = self._ray.remote(**self._options)(fn)
        return rf.remote(*args, **kwargs).future()

    def capacity(self) -> int:
        cpus = self._ray.cluster_resources().get("CPU", 1)
        return max(1, int(cpus // self.num_cpus))

    def shutdown(self, wait=True, *, cancel_futures=False):
        pass                     # the Ray runtime belongs to the user


def _is_dask_client(obj) -> bool:
    return type(obj).__module__.startswith("distributed") and \
        callable(getattr(obj, "get_executor", None))


def as_executor(obj) -> cf.Executor:
    if isinstance(obj, cf.Executor):
        return obj
    if _is_dask_client(obj):
        return obj.get_executor(pure=False)
    raise AutotuneError(f"tune: executor must be a concurrent.futures.Executor (a process or "
                        f"thread pool, a Dask Client or client.get_executor(), "
                        f"autotune.RayExecutor()), got {obj!r}")


def capacity(executor: cf.Executor) -> int:
    """How many jobs `executor` runs at once (at least 1)."""
    try:
        own = getattr(executor, "capacity", None)
        if callable(own):
            return max(1, int(own()))
        client = getattr(executor, "_client", None)      # Dask's ClientExecutor
        if client is not None and callable(getattr(client, "nthreads", None)):
            return max(1, sum(client.nthreads().values()))
        n = getattr(executor, "_max_workers", None)      # the standard library's pools
        if isinstance(n, int):
            return max(1, n)
    except Exception:
        pass
    return 1


def is_closed(executor: cf.Executor) -> bool:
    """Known to run nothing more (a Dask client whose scheduler went away), without asking
    it to run a job."""
    client = getattr(executor, "_client", None)
    return getattr(client, "status", None) in ("closed", "closing")


def measuring_env() -> dict:
    """The environment for a measuring process started on a worker: the worker's, less
    the settings its executor imposed on worker processes, which the kernel will not see
    in the user's application. Dask's nanny sets MALLOC_TRIM_THRESHOLD_ (and thread
    counts); with it glibc hands every freed heap buffer back to the OS, and a kernel with
    a scratch buffer takes page faults on every call that it would not take in a plain
    process, so it would measure slower than it runs."""
    env = dict(os.environ)
    if "distributed" in sys.modules:
        try:
            import dask
            from distributed import get_worker
            get_worker()                     # raises outside a Dask worker
            imposed = dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {}
        except Exception:
            imposed = {}
        for k, v in imposed.items():
            if env.get(k) == str(v):
                del env[k]
    return env
