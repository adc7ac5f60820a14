"""The parallel-loop worker pool (tdsl/runtime/threadpool.c) across idle pauses: idle
workers go to sleep (an idle process burns no CPU), a launch wakes them and gets every
task done, and a network's runs on several threads, with pauses long enough for the
workers to fall asleep between them, give the single-threaded answers. A hold (what a
network's run takes) keeps them awake between loops until its last release. Its counters
(`threadpool.stats`) count what it did. Latency is measured by bench/zoo.py, not here."""
import os
import resource
import threading
import time

import numpy as np
import pytest

import tdsl
from tdsl.runtime import threadpool

pytestmark = pytest.mark.skipif(not threadpool.load_into_jit(),
                                reason="no C compiler: parallel loops start threads per launch")


def _until(cond, what, timeout=20.0):
    """Waits for `cond()` (the workers are threads the OS schedules when it can)."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"{what}: {threadpool.stats()}"
        time.sleep(0.005)


@pytest.fixture(scope="module")
def sin_cos():
    A = tdsl.placeholder((1 << 16,), name="A")
    B = tdsl.compute(A.shape, lambda i: tdsl.sin(tdsl.cos(A[i])), name="B")
    s = tdsl.create_schedule(B)
    io, _ = s[B].split(B.op.axis[0], factor=1024)
    s[B].parallel(io)
    f = tdsl.build(s, [A, B])
    f.set_num_threads(4)
    a = np.random.default_rng(0).standard_normal(1 << 16).astype("float32")
    return f, a, np.sin(np.cos(a))


def _check(f, a, ref):
    b = np.zeros_like(a)
    f(a, b)
    np.testing.assert_allclose(b, ref, rtol=1e-5, atol=1e-6)


def test_idle_workers_sleep_and_a_launch_wakes_them(sin_cos):
    f, a, ref = sin_cos
    _check(f, a, ref)
    n = threadpool.stats()["workers"]
    assert n >= 3       # 4 threads: the caller and 3 workers
    for _ in range(3):
        _until(lambda: threadpool.stats()["sleeping"] == n, "idle workers sleep")
        before = threadpool.stats()
        _check(f, a, ref)           # woken by the launch; every chunk written
        after = threadpool.stats()
        assert after["launches"] == before["launches"] + 1
        # each sleeping worker was woken: it slept again after the launch
        _until(lambda: threadpool.stats()["worker_sleeps"] >= before["worker_sleeps"] + n,
               "a launch wakes every sleeping worker")
    _until(lambda: threadpool.stats()["sleeping"] == n, "idle again, they sleep again")


@pytest.fixture(scope="module")
def cnn():
    pytest.importorskip("onnx")
    import tdsl.graph as G
    from tdsl.graph import models
    return G.build(G.optimize(G.from_onnx(models.resnet18(size=32, width=8, num_classes=10))))


def test_runs_with_pauses_on_several_threads_give_the_single_threaded_answer(cnn):
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(3)]
    refs = [cnn.run(x)[0].copy() for x in xs]
    assert not any(np.allclose(refs[0], r) for r in refs[1:])
    before = threadpool.stats()
    cnn.run(xs[0])
    per_run = threadpool.stats()["launches"] - before["launches"]
    assert per_run > 1                      # the network's loops run on the pool
    # pauses of none, less than a worker's spin, and far more (the workers fall asleep
    # between runs and a launch of another thread's run wakes them)
    pauses = [0.0, 2e-5, 0.03]
    errors = []

    def work(i):
        try:
            for k in range(12):
                time.sleep(pauses[(i + k) % 3])
                np.testing.assert_allclose(cnn(xs[i])[0], refs[i], rtol=1e-5, atol=1e-5)
        except BaseException as e:      # noqa: BLE001 - re-raised on the main thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    # a loop that finds the pool busy with another run's runs on its caller, uncounted
    assert threadpool.stats()["launches"] > before["launches"] + per_run


def test_a_hold_keeps_workers_awake_between_loops_then_they_sleep(sin_cos):
    f, a, ref = sin_cos
    _check(f, a, ref)
    n = threadpool.stats()["workers"]
    _until(lambda: threadpool.stats()["sleeping"] == n, "idle workers sleep")
    lost = threadpool.stats()["lost_sleeps"]
    with threadpool.held():
        # the hold wakes them before any launch: each is spinning now, or (on a busy
        # machine) spun, lost its core and slept again, waiting for the next launch
        def woken():
            s = threadpool.stats()
            return n - s["sleeping"] + s["lost_sleeps"] - lost >= n
        _until(woken, "a hold wakes sleeping workers")
        before = threadpool.stats()
        assert before["held"] == 1
        for _ in range(4):
            _check(f, a, ref)
            time.sleep(0.005)       # 100x a worker's spin: unheld, every worker sleeps here
        after = threadpool.stats()
        assert after["launches"] == before["launches"] + 4
        # a worker sleeps in a hold only where its spin lost its core (a busy machine)
        slept = after["worker_sleeps"] - before["worker_sleeps"]
        assert slept == after["lost_sleeps"] - before["lost_sleeps"], (before, after)
    assert threadpool.stats()["held"] == 0
    _until(lambda: threadpool.stats()["sleeping"] == n, "released, they sleep after the grace")
    # unheld, a pause as long lets them sleep again after a loop
    before = threadpool.stats()
    _check(f, a, ref)
    _until(lambda: threadpool.stats()["worker_sleeps"] >= before["worker_sleeps"] + n,
           "unheld, workers sleep after a loop")


def test_holds_from_several_threads_count_until_the_last_release(sin_cos):
    f, a, ref = sin_cos
    _check(f, a, ref)
    n = threadpool.stats()["workers"]
    first, second = threading.Event(), threading.Event()

    def other():
        with threadpool.held():
            first.set()
            second.wait(20)
    t = threading.Thread(target=other)
    threadpool.hold()
    try:
        t.start()
        assert first.wait(20)
        assert threadpool.stats()["held"] == 2
    finally:
        threadpool.release()
    # one hold left in force: still none sleeps (but where its core is taken), loops complete
    before = threadpool.stats()
    time.sleep(0.01)
    _check(f, a, ref)
    after = threadpool.stats()
    slept = after["worker_sleeps"] - before["worker_sleeps"]
    assert slept == after["lost_sleeps"] - before["lost_sleeps"], (before, after)
    second.set()
    t.join()
    assert threadpool.stats()["held"] == 0
    _until(lambda: threadpool.stats()["sleeping"] == n, "every hold released, they sleep")


def test_a_network_run_holds_the_pool(cnn):
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    cnn.run(x)
    before = threadpool.stats()
    cnn.run(x)
    cnn.benchmark(number=2, repeat=1, warmup=0)
    after = threadpool.stats()
    assert after["holds"] == before["holds"] + 3 and after["held"] == 0


@pytest.fixture
def task_ns():
    """Restores the pool's task length after a test that sets it."""
    old = threadpool.task_ns()
    yield
    threadpool.set_task_ns(old)


def test_the_counters_split_a_launch_between_caller_and_workers(sin_cos, task_ns):
    f, a, ref = sin_cos
    threadpool.set_task_ns(0)           # one task per thread, however long the loop
    with threadpool.held():             # the workers are awake: they take tasks
        _check(f, a, ref)
        before = threadpool.stats()
        for _ in range(20):
            _check(f, a, ref)
        after = threadpool.stats()
    assert after["launches"] == before["launches"] + 20
    # 4 tasks per launch (4 threads), counted by the time each launch returns: the
    # workers ran some, the caller the rest; and the caller waited for the workers'
    # tasks for a time, never a negative one
    ran = after["worker_tasks"] - before["worker_tasks"]
    assert after["tasks"] - before["tasks"] == 20 * 4
    assert 0 <= ran <= 20 * 4, (ran, after)
    assert after["wait_ns"] >= before["wait_ns"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux thread ids")
def test_worker_ids_are_the_threads_that_run_the_workers_tasks(sin_cos, task_ns):
    f, a, ref = sin_cos
    _check(f, a, ref)
    ids = threadpool.worker_ids()
    assert len(ids) == threadpool.stats()["workers"] >= 3
    assert threading.get_native_id() not in ids
    assert set(ids) <= {int(t) for t in os.listdir("/proc/self/task")}

    def on_core(tid):       # the thread's CPU clock (pthread_getcpuclockid's id)
        return time.clock_gettime((~tid << 3) | 6)
    threadpool.set_task_ns(0)
    before, tasks = [on_core(t) for t in ids], threadpool.stats()["worker_tasks"]
    with threadpool.held():
        for _ in range(200):
            _check(f, a, ref)
    assert threadpool.stats()["worker_tasks"] > tasks
    # the workers ran tasks (and spun between them, held): those threads used the CPU
    assert sum(on_core(t) - b for t, b in zip(ids, before)) > 0


needs_affinity = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="Linux CPU affinity, two CPUs")


@pytest.fixture
def on_one_cpu(sin_cos, task_ns):
    """The caller and every worker on the caller's CPU, as the kernel leaves a worker it
    woke beside its waker while the other vCPU was halted; afterwards as they were."""
    f, a, ref = sin_cos
    _check(f, a, ref)
    ids, full = threadpool.worker_ids(), os.sched_getaffinity(0)
    cpu = sorted(full)[0]
    threadpool.set_task_ns(0)           # one task per thread: a worker's run is untouched or its own
    os.sched_setaffinity(0, {cpu})
    for t in ids:
        os.sched_setaffinity(t, {cpu})
    try:
        yield ids, cpu, full
    finally:
        threadpool.set_nudge("free")
        os.sched_setaffinity(0, full)
        for t in ids:
            os.sched_setaffinity(t, full)


@needs_affinity
def test_a_worker_queued_on_the_callers_cpu_is_moved_off_it(sin_cos, on_one_cpu):
    f, a, ref = sin_cos
    ids, cpu, full = on_one_cpu
    threadpool.set_nudge("always")      # "free" would also read the machine's load
    before = threadpool.stats()
    with threadpool.held():
        # the caller takes each worker's untouched task; after a few launches in a row
        # without one, each worker is moved to the other CPUs, and once it runs there it
        # lifts that restriction (back to the CPUs it had)
        for _ in range(20):
            _check(f, a, ref)
        # the loop's workers: 4 threads (other tests' loops may have started more, which
        # own no tasks here and stay where they are)
        ours = ids[:3]
        assert threadpool.stats()["nudges"] - before["nudges"] >= len(ours)
        for t in ours:
            assert cpu not in os.sched_getaffinity(t) or os.sched_getaffinity(t) == full

        def restored():
            _check(f, a, ref)
            return all(os.sched_getaffinity(t) == full for t in ours)
        _until(restored, "workers back on every CPU")
        ran = threadpool.stats()["worker_tasks"]
        for _ in range(50):
            _check(f, a, ref)
        assert threadpool.stats()["worker_tasks"] > ran


@needs_affinity
def test_with_the_nudge_off_a_worker_stays_where_it_was_queued(sin_cos, on_one_cpu):
    f, a, ref = sin_cos
    ids, cpu, full = on_one_cpu
    assert threadpool.set_nudge("off") == "free"          # the default
    before = threadpool.stats()["nudges"]
    with threadpool.held():
        for _ in range(20):
            _check(f, a, ref)
    assert threadpool.stats()["nudges"] == before
    assert all(os.sched_getaffinity(t) == {cpu} for t in ids)
    with pytest.raises(tdsl.TdslError, match="set_nudge"):
        threadpool.set_nudge("sometimes")


def test_a_long_loop_is_split_finer_and_a_short_one_is_not(sin_cos, task_ns):
    f, a, ref = sin_cos                 # 64 iterations of 1024 sin(cos(x)): ~0.1-1 ms
    _check(f, a, ref)                   # the loop's cost per iteration is known now
    for ns, fewest, most in ((10 ** 9, 4, 4), (1, 64, 64)):
        threadpool.set_task_ns(ns)
        before = threadpool.stats()
        _check(f, a, ref)
        tasks = threadpool.stats()["tasks"] - before["tasks"]
        assert fewest <= tasks <= most, (ns, tasks)


def test_loops_split_finer_give_the_same_answers_from_several_threads(sin_cos, cnn, task_ns):
    f, a, ref = sin_cos
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(3)]
    threadpool.set_task_ns(0)
    refs = [cnn.run(x)[0].copy() for x in xs]
    # tasks of one iteration each, from each loop's second run on: every chunk boundary
    # and steal that can happen does
    threadpool.set_task_ns(1)
    before = threadpool.stats()
    errors = []

    def work(i):
        try:
            for k in range(10):
                np.testing.assert_allclose(cnn(xs[i])[0], refs[i], rtol=1e-5, atol=1e-5)
                _check(f, a, ref)
                if k % 3 == i % 3:
                    time.sleep(0.001)
        except BaseException as e:      # noqa: BLE001 - re-raised on the main thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    after = threadpool.stats()
    # the loops that found the pool free ran as more tasks than threads
    assert after["tasks"] - before["tasks"] > 4 * (after["launches"] - before["launches"])


def _minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def test_kernel_scratch_is_kept_and_serves_later_calls_without_fresh_pages():
    # an intermediate of symbolic size too large for the stack: heap scratch per call
    n = tdsl.var("n")
    A = tdsl.placeholder((n,), name="A")
    T = tdsl.compute((n,), lambda i: A[i] * 2.0, name="T")
    B = tdsl.compute((n,), lambda i: T[n - 1 - i], name="B")
    f = tdsl.build(tdsl.create_schedule(B), [A, B])
    assert "tdsl_scratch_alloc" in f.get_source()

    def call(size):
        a = np.arange(size, dtype="float32")
        b = np.ones(size, "float32")        # touched: its pages are not the kernel's
        before, faults = threadpool.scratch_stats(), _minor_faults()
        f(a, b)
        faults = _minor_faults() - faults
        np.testing.assert_array_equal(b, (2 * a)[::-1])
        after = threadpool.scratch_stats()
        return after["mapped"] - before["mapped"], after["reused"] - before["reused"], faults

    mapped, reused, _ = call(1 << 20)      # a block kept by an earlier test may serve it
    assert mapped + reused == 1
    # the same size and smaller ones take the kept block: nothing mapped, no page faulted
    # in (libc's aligned_alloc mapped and faulted in all 1024 pages every call)
    for size in (1 << 20, 3 << 18, 1 << 19):
        mapped, reused, faults = call(size)
        assert (mapped, reused) == (0, 1) and faults < 16, (size, faults)


def _pool_launcher(fn_of_range):
    """tdsl_parallel_for with a Python task body `fn_of_range(begin, end)`: a function of
    (n, threads, site) running [0, n)."""
    import ctypes
    import llvmlite.binding as llvm

    class Task(ctypes.Structure):
        _fields_ = [("closure", ctypes.c_void_p), ("begin", ctypes.c_int64), ("end", ctypes.c_int64)]
    task_fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(Task))
    body = task_fn(lambda t: fn_of_range(t.contents.begin, t.contents.end) and None)
    launch = ctypes.CFUNCTYPE(None, task_fn, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                              ctypes.c_int64, ctypes.POINTER(ctypes.c_int64))(
        llvm.address_of_symbol("tdsl_parallel_for"))
    return lambda n, threads, site: launch(body, None, 0, n, threads, ctypes.byref(site))


def test_a_late_owner_has_the_rest_of_its_run_taken(task_ns):
    """Tasks of one iteration, a run of 4 per thread (every worker the pool has, so that
    none takes part without a run of its own). The first worker to start its run stalls
    in its first task (a sleep standing for a lost core): what was left of its run then
    goes to the other threads rather than wait for it, with the late-only rule and without
    it (which takes at once); each iteration runs once. The caller's own tasks sleep a
    little, so that the workers start their runs before it is done with its own."""
    import ctypes
    threadpool.set_task_ns(1)
    old = threadpool.set_steal_late_only(True)
    try:
        for late in (True, False):
            threadpool.set_steal_late_only(late)
            threads = max(threadpool.stats()["workers"], 1) + 1
            n = 4 * threads
            ran, me, stall = [], threading.get_ident(), []

            def body(b, e):
                ran.append((b, e, threading.get_ident()))
                if e - b != 1:
                    return                      # a run before the loop was split
                if threading.get_ident() == me:
                    time.sleep(0.005)
                elif b % 4 == 0 and not stall:
                    stall.append(b)
                    time.sleep(0.05)
            launch, site = _pool_launcher(body), ctypes.c_int64(0)
            for _ in range(5):          # until the loop's cost is known and it is split
                ran.clear()
                stall.clear()
                launch(n, threads, site)
                if len(ran) == n:
                    break
            assert sorted((b, e) for b, e, _ in ran) == [(i, i + 1) for i in range(n)], ran
            if stall:                   # a worker started its run and stalled in it
                at = next(k for k, (b, _, _) in enumerate(ran) if b == stall[0])
                stalled = ran[at][2]
                assert not [b for b, _, t in ran[at + 1:] if t == stalled], (late, ran)
    finally:
        threadpool.set_steal_late_only(old)


@pytest.mark.parametrize("threads", [1, 2])
def test_split_loops_with_late_only_steals_give_the_single_task_answers(sin_cos, cnn, task_ns,
                                                                       threads):
    f, a, ref = sin_cos
    x = np.random.default_rng(9).standard_normal((1, 3, 32, 32)).astype(np.float32)
    threadpool.set_task_ns(0)
    want = cnn.run(x)[0].copy()
    f.set_num_threads(threads)
    try:
        for late in (True, False):
            old = threadpool.set_steal_late_only(late)
            threadpool.set_task_ns(1)       # a task per iteration
            try:
                for _ in range(5):
                    _check(f, a, ref)
                    np.testing.assert_allclose(cnn.run(x)[0], want, rtol=1e-5, atol=1e-5)
            finally:
                threadpool.set_steal_late_only(old)
    finally:
        f.set_num_threads(4)
