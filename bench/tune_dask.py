"""The same tuning run twice: with the default measuring processes and through a Dask
LocalCluster (`executor=client.get_executor()`), then both best configs re-measured here,
alternately, to check that measuring on a cluster finds as good a schedule.

    python bench/tune_dask.py                       # GEMM 512, 50 random trials, 2 workers
    python bench/tune_dask.py --tuner model --trials 100
    python bench/tune_dask.py --kill-after 20       # SIGKILL one worker after 20 trials

The template is bench/tune_gemm.py's register-blocked GEMM. Both runs use the same tuner
and seed; with the random tuner they measure the same candidates, so the comparison is
about measuring, not searching. Needs `pip install 'tdsl[distributed]'`.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)          # workers import the template from tune_gemm by name

import tdsl  # noqa: E402
from tdsl import autotune  # noqa: E402
from tune_gemm import best_time, gemm_template  # noqa: E402


def tune(task, opts, log, executor=None):
    t0 = time.perf_counter()
    res = autotune.tune(task, tuner=opts.tuner, n_trial=opts.trials, log_file=log, seed=opts.seed,
                        executor=executor, number=2, repeat=3, min_repeat_ms=30,
                        trial_timeout_s=60, progress=False)
    return res, time.perf_counter() - t0


def kill_one_worker_after(client, log, n):
    addr, pid = sorted(client.run(os.getpid).items())[0]

    def watch():
        while not (os.path.exists(log) and len(open(log).readlines()) >= n):
            time.sleep(0.05)
        held = client.processing(workers=[addr]).get(addr, ())
        os.kill(pid, signal.SIGKILL)
        print(f"killed worker {addr} (pid {pid}) after {n} trials, holding {len(held)} task(s)")
    threading.Thread(target=watch, daemon=True).start()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--trials", type=int, default=50)
    p.add_argument("--tuner", default="random", choices=["random", "model", "grid"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--kill-after", type=int, default=0, help="kill a worker after N trials")
    opts = p.parse_args()
    from dask.distributed import Client, LocalCluster

    n = opts.n
    task = autotune.create_task(gemm_template, args=(n, n, n), target="llvm",
                                reference=lambda a, b: a.astype(np.float64) @ b.astype(np.float64))
    tmp = tempfile.mkdtemp(prefix="tdsl-tune-dask-")
    logs = {"pool": os.path.join(tmp, "pool.jsonl"), "dask": os.path.join(tmp, "dask.jsonl")}
    print(f"GEMM {n} fp32, {opts.trials} {opts.tuner} trials (seed {opts.seed}), "
          f"{os.cpu_count()} cores; logs in {tmp}")

    results = {}
    results["pool"] = tune(task, opts, logs["pool"])
    with LocalCluster(n_workers=opts.workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        if opts.kill_after:
            kill_one_worker_after(client, logs["dask"], opts.kill_after)
        results["dask"] = tune(task, opts, logs["dask"], client.get_executor())

    # both best configs, re-measured in this process, alternately (load hits both alike)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    fns = {}
    for name, log in logs.items():
        with autotune.apply_best(log):
            s, args = gemm_template(n, n, n)
        fns[name] = tdsl.build(s, args)
    outs = {name: np.zeros((n, n), np.float32) for name in fns}
    t = {name: float("inf") for name in fns}
    for _ in range(5):
        for name, f in fns.items():
            t[name] = min(t[name], best_time(lambda: f(a, b, outs[name])))
    flops = 2.0 * n ** 3
    for name, (res, secs) in results.items():
        ok = np.allclose(outs[name], a @ b, rtol=1e-3, atol=1e-2)
        print(f"{name:5s} {secs:6.0f} s  {len(res.new_records)} trials {res.by_status()}  "
              f"best in tuning {res.gflops:7.1f} GFLOP/s  re-measured {flops / t[name] / 1e9:7.1f} "
              f"GFLOP/s {'ok' if ok else 'WRONG'}  {res.config}")
        if res.stopped != "n_trial":
            print(f"      stopped: {res.stopped}")
    ratio = t["pool"] / t["dask"]
    print(f"dask best / pool best (re-measured): {ratio:.3f}  "
          f"({'within' if ratio >= 0.95 else 'NOT within'} 5%)")
    return 0 if ratio >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
