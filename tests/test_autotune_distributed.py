"""tdsl.autotune on a Dask cluster (the `[distributed]` extra) and on Ray: tuning through
`client.get_executor()` and a plain `Client`, a worker killed mid-run, candidates that
crash, hang or answer wrong on a worker, the scheduler going away and the run resuming
on another cluster from the log. Skipped when the package is not installed.

Clusters are local: 2 worker processes, one thread each (the shape of one machine per
worker on a real cluster). Each worker measures in a process of its own, so a segfault
costs the worker nothing; the tests check that its pid did not change.
"""
import os
import signal
import threading
import time

import numpy as np
import pytest

import tdsl
from tdsl import autotune

FAST = dict(min_repeat_ms=2, repeat=2, progress=False)


@autotune.template("dist_matmul")
def matmul(cfg, M, N, K):
    A = tdsl.placeholder((M, K), name="A")
    B = tdsl.placeholder((K, N), name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tdsl.create_schedule(C)
    i, j = C.op.axis
    cfg.define_split("tile_i", i, num_outputs=2, policy="power2", max_factor=16)
    cfg.define_split("tile_j", j, num_outputs=2, policy="power2", max_factor=16)
    io_, ii = cfg["tile_i"].apply(s, C, i)
    jo, ji = cfg["tile_j"].apply(s, C, j)
    s[C].reorder(io_, jo, ii, ji)
    cfg.define_knob("vec", [False, True])
    if cfg["vec"].val:
        s[C].vectorize(ji)
    cfg.define_knob("pause", [0.0, 0.3], default=0.0)
    time.sleep(cfg["pause"].val)         # long enough trials for a worker to die holding one
    return s, [A, B, C]


@autotune.template("dist_faulty")
def faulty(cfg, n):
    cfg.define_knob("fault", ["none", "segv", "hang", "wrong"])
    f = cfg["fault"].val
    A = tdsl.placeholder((n, n), name="A")
    B = tdsl.compute((n, n), lambda i, j: A[i, j] * 2 + (1 if f == "wrong" else 0), name="B")
    if f == "segv":
        import ctypes
        ctypes.string_at(0)
    elif f == "hang":
        time.sleep(600)
    return tdsl.create_schedule(B), [A, B]


def _check_best(log, M, N, K):
    with autotune.apply_best(log):
        s, args = matmul(M, N, K)
    f = tdsl.build(s, args)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = np.empty((M, N), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------ Dask

@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def _worker_pids(client):
    return set(client.run(os.getpid).values())


def test_dask_executor_and_client_tune_and_resume(dask_client, tmp_path):
    log = str(tmp_path / "dask.jsonl")
    task = autotune.create_task(matmul, (48, 32, 24),
                                reference=lambda a, b: a.astype(np.float64) @ b)
    res = autotune.tune(task, "random", n_trial=6, log_file=log,
                        executor=dask_client.get_executor(), **FAST)
    assert len(res.new_records) == 6 and all(r.ok for r in res.new_records), res.summary()
    assert res.default.ok and res.best.seconds <= res.default.seconds
    # same machine: the workers resolve "llvm" as this process does
    assert res.target == autotune.target_fingerprint("llvm")
    assert {r.fingerprint for r in res.new_records} == {res.target}
    # a plain Client works too, and resumes from the log without measuring a config twice
    res2 = autotune.tune(task, "random", n_trial=4, log_file=log, executor=dask_client, **FAST)
    assert [r.trial for r in res2.new_records] == [7, 8, 9, 10]
    assert all(r.ok for r in res2.new_records), res2.summary()
    assert not {r.config_key for r in res.new_records} & {r.config_key for r in res2.new_records}
    assert res2.best.seconds == min(r.seconds for r in res2.records)
    _check_best(log, 48, 32, 24)


def test_dask_worker_killed_mid_run(dask_client, tmp_path):
    """Loses at most the trials the worker held (Dask runs them again elsewhere)."""
    log = str(tmp_path / "killed.jsonl")
    task = autotune.create_task(matmul, (32, 32, 32))
    space = task.space
    slow = [p for p in (space.point_from_index(i) for i in range(space.size))
            if space.values_of(p)["pause"] > 0][:8]

    class SlowOnes(autotune.Tuner):
        def _propose(self, n):
            return slow

    addr, victim = sorted(dask_client.run(os.getpid).items())[0]
    killed = []

    def kill_when_two_logged():
        # once trials are logged, and while the scheduler has a trial running on the victim
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists(log) and len(open(log).readlines()) >= 3:
                held = dask_client.processing(workers=[addr]).get(addr, ())
                if any("remote_trial" in str(k) for k in held):
                    os.kill(victim, signal.SIGKILL)
                    killed.append(held)
                    return
            time.sleep(0.02)

    t = threading.Thread(target=kill_when_two_logged, daemon=True)
    t.start()
    res = autotune.tune(task, SlowOnes(space), n_trial=9, log_file=log, executor=dask_client,
                        **FAST)
    t.join(5)
    assert killed, "the worker was not killed while it ran a trial"
    assert res.stopped == "n_trial" and len(res.new_records) == 9
    ok = [r for r in res.new_records if r.ok]
    assert len(ok) >= 9 - 1, res.summary()
    assert all(r.status in ("ok", "runner_error") for r in res.new_records), res.summary()
    dask_client.wait_for_workers(2, timeout=60)        # the nanny started a new one
    assert victim not in _worker_pids(dask_client)
    _check_best(log, 32, 32, 32)


def test_dask_crash_hang_wrong_answer_spare_the_workers(dask_client):
    task = autotune.create_task(faulty, (16,))
    before = _worker_pids(dask_client)
    res = autotune.tune(task, "grid", n_trial=4, executor=dask_client, trial_timeout_s=4,
                        **FAST)
    by = {r.config["fault"]: r for r in res.new_records}
    assert by["none"].ok
    assert by["segv"].status == "crash" and "SIGSEGV" in by["segv"].error
    assert by["hang"].status == "timeout"
    assert by["wrong"].status == "wrong_answer" and "elements differ" in by["wrong"].error
    assert _worker_pids(dask_client) == before          # no worker died or was replaced


def test_scheduler_gone_then_resume_on_another_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    log = str(tmp_path / "gone.jsonl")
    task = autotune.create_task(matmul, (16, 16, 16))
    space = task.space
    order = [p for p in (space.point_from_index(i) for i in range(space.size))
             if space.values_of(p)["pause"] > 0][:10]

    class Fixed(autotune.Tuner):
        def _propose(self, n):
            return order

    first = distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                     dashboard_address=":0")
    client = distributed.Client(first)

    def close_when_three_logged():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists(log) and len(open(log).readlines()) >= 3:
                first.close()
                return
            time.sleep(0.02)

    t = threading.Thread(target=close_when_three_logged, daemon=True)
    t.start()
    t0 = time.monotonic()
    res1 = autotune.tune(task, Fixed(space), n_trial=10, log_file=log, executor=client, **FAST)
    t.join(5)
    client.close()
    assert res1.stopped == "executor failed", res1.summary()
    assert time.monotonic() - t0 < 60
    logged = autotune.load_records(log)
    assert len(logged) >= 3 and all(r.ok for r in logged)          # lost jobs are not logged
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as second, \
            distributed.Client(second) as client2:
        res2 = autotune.tune(task, Fixed(space), n_trial=10 - len(logged), log_file=log,
                             executor=client2, **FAST)
    assert all(r.ok for r in res2.new_records), res2.summary()
    done = [r.config_key for r in autotune.load_records(log)]
    assert len(done) == 10 and len(set(done)) == 10          # every config once, none twice
    assert [r.trial for r in res2.new_records] == list(range(len(logged) + 1, 11))


# ------------------------------------------------------------------------------ Ray

def test_ray_executor(tmp_path):
    ray = pytest.importorskip("ray")
    log = str(tmp_path / "ray.jsonl")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(
                 [os.path.dirname(os.path.dirname(os.path.abspath(tdsl.__file__))),
                  os.path.dirname(os.path.abspath(__file__))])}})
    try:
        ex = autotune.RayExecutor()
        assert ex.capacity() == 2
        task = autotune.create_task(matmul, (32, 16, 16))
        res = autotune.tune(task, "random", n_trial=4, log_file=log, executor=ex, **FAST)
        assert len(res.new_records) == 4 and all(r.ok for r in res.new_records), res.summary()
        assert res.target == autotune.target_fingerprint("llvm")
        _check_best(log, 32, 16, 16)
    finally:
        ray.shutdown()


def test_dask_measuring_process_leaves_the_nanny_settings(dask_client):
    """Dask's nanny sets MALLOC_TRIM_THRESHOLD_ on workers; kernels with heap scratch
    buffers then page-fault on every call. Measuring processes run without it."""
    from tdsl.autotune.executors import measuring_env
    worker_env = dask_client.submit(lambda: dict(os.environ), pure=False).result()
    env = dask_client.submit(measuring_env, pure=False).result()
    assert "MALLOC_TRIM_THRESHOLD_" in worker_env
    assert "MALLOC_TRIM_THRESHOLD_" not in env
    assert env["PATH"] == worker_env["PATH"]
    assert measuring_env() == dict(os.environ)           # outside a worker: unchanged
