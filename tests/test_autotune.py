"""tdsl.autotune: knobs and spaces, templates and dispatch, tuners, the measuring process
(crash, hang, wrong answer), the log (resume, apply_best), budgets and the plot.

"No slower than the untuned default": `tune(include_default=True)` (the default) measures
the default config as the first trial, with the same measuring function as every
candidate, and the best record is the fastest "ok" record, so `best.seconds <=
default.seconds` holds by construction; the tests assert it (and that the default was
measured), and check the chosen schedule's output against numpy.
"""
import concurrent.futures as cf
import ctypes
import io
import json
import multiprocessing as mp
import sys
import time

import numpy as np
import pytest

import tdsl
from tdsl import autotune
from tdsl.autotune import model as amodel
from tdsl.autotune.errors import AutotuneError
from tdsl.autotune.knob import split_factors
from tdsl.examples import kernels

FAST = dict(min_repeat_ms=2, repeat=2, progress=False)


# ------------------------------------------------------------------------------ templates

@autotune.template("test_matmul")
def matmul(cfg, M, N, K):
    A = tdsl.placeholder((M, K), name="A")
    B = tdsl.placeholder((K, N), name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tdsl.create_schedule(C)
    i, j = C.op.axis
    cfg.define_split("tile_i", i, num_outputs=2, policy="all", max_factor=8)
    cfg.define_split("tile_j", j, num_outputs=2, policy="power2", max_factor=32)
    io_, ii = cfg["tile_i"].apply(s, C, i)
    jo, ji = cfg["tile_j"].apply(s, C, j)
    (kk,) = s[C].op.reduce_axis
    cfg.define_reorder("order", [ii, kk], policy="all")
    a, b = cfg["order"].apply(s, C, [ii, kk])
    s[C].reorder(io_, jo, a, b, ji)
    cfg.define_annotate("ann_j", [ji], policy="try_vec")
    cfg["ann_j"].apply(s, C, [ji])
    cfg.define_knob("parallel", [False, True])
    if cfg["parallel"].val:
        s[C].parallel(io_)
    return s, [A, B, C]


def _conv_reference(d, wp):
    cob, c, _, _, bn = wp.shape
    w = wp.transpose(0, 4, 1, 2, 3).reshape(cob * bn, c, 3, 3)
    o = kernels.conv2d_reference(d, w)
    H, W = d.shape[1:]
    return o.reshape(cob, bn, H, W).transpose(0, 2, 3, 1)


@autotune.template("test_conv2d")
def conv2d(cfg, C, H, W, CO):
    D, Wp, pad, O = kernels.conv2d_nchwc(C, H, W, CO, bn=16)
    s = tdsl.create_schedule(O)
    OL = s.cache_write(O, "local")
    cb, y, x, c = O.op.axis
    cfg.define_split("tile_x", x, num_outputs=2, policy="all", default=[-1, 4])
    xo, xi = cfg["tile_x"].apply(s, O, x)
    s[O].vectorize(c)
    s[OL].compute_at(s[O], xo)
    _, _, xl, cl = s[OL].op.axis
    ci, ky, kx = s[OL].op.reduce_axis
    cfg.define_reorder("red_order", [ci, ky, kx], policy="candidate", candidate=[[0, 1, 2], [1, 2, 0]])
    r = cfg["red_order"].apply(s, OL, [ci, ky, kx])
    s[OL].reorder(*r, xl, cl)
    cfg.define_annotate("ann_xl", [xl], policy="try_unroll")
    cfg["ann_xl"].apply(s, OL, [xl])
    s[OL].vectorize(cl)
    cfg.define_knob("inline_pad", [False, True])
    if cfg["inline_pad"].val:
        s[pad].compute_inline()
    return s, [D, Wp, O]


@autotune.template("test_faulty")
def faulty(cfg, n):
    """A knob per way a candidate can fail (the default, 'none', is correct)."""
    cfg.define_knob("fault", ["none", "segv", "hang", "wrong", "schedule", "build", "fast"])
    f = cfg["fault"].val
    A = tdsl.placeholder((n, n), name="A")
    B = tdsl.compute((n, n), lambda i, j: A[i, j] * 2 + (1 if f == "wrong" else 0), name="B")
    s = tdsl.create_schedule(B)
    i, j = B.op.axis
    if f == "segv":                       # runs only in the measuring process
        ctypes.string_at(0)
    elif f == "hang":
        time.sleep(600)
    elif f == "schedule":
        s[B].split(i, factor=0)           # ScheduleError
    elif f == "build":
        s[B].bind(i, tdsl.thread_axis("blockIdx.x"))   # not buildable for llvm
    elif f == "fast":
        s[B].vectorize(j)
    return s, [A, B]


# ------------------------------------------------------------------------------ knobs

def test_split_candidates_include_non_divisors():
    f = split_factors(24, "all")
    assert 5 in f and 7 in f and 16 in f and 24 in f and 12 in f
    assert split_factors(24, "factors") == [1, 2, 3, 4, 6, 8, 12, 24]
    assert split_factors(24, "power2") == [1, 2, 4, 8, 16]
    assert max(split_factors(1000, "all", max_factor=10)) == 10


def test_define_split_space_and_entities():
    task = autotune.create_task(matmul, (24, 32, 16))
    sp = task.space
    assert sp.names == ["tile_i", "tile_j", "order", "ann_j", "parallel"]
    assert len(sp) == sp.size == 8 * 6 * 2 * 2 * 2
    text = repr(sp)
    assert "tile_i" in text and "split" in text and "384" in text
    tile_i = sp.knobs["tile_i"]
    assert [-1, 5] in tile_i.values and [-1, 8] in tile_i.values      # 5 does not divide 24
    assert tile_i.values[tile_i.default] == [-1, 1]
    for idx in (0, 17, len(sp) - 1):
        assert sp.index_of_point(sp.point_from_index(idx)) == idx
    cfg = sp.get(17)
    assert sp.point_of(cfg.to_dict()) == sp.point_from_index(17)
    # three- and four-way splits: every factor fits what is left of the axis
    A = tdsl.placeholder((100,), name="A")
    B = tdsl.compute((100,), lambda i: A[i] + 1, name="B")
    c = autotune.Config(space=autotune.ConfigSpace())
    c.define_split("s3", B.op.axis[0], num_outputs=3)
    c.define_split("s4", 100, num_outputs=4, policy="power2")
    for v in c.space.knobs["s3"].values:
        left = 100
        for f in reversed(v[1:]):
            assert f <= left
            left = -(-left // f)
    s = tdsl.create_schedule(B)
    axes = autotune.SplitEntity([-1, 3, 7]).apply(s, B, B.op.axis[0])
    assert len(axes) == 3 and s[B].leaf_iter_vars == axes


def test_define_split_derived_and_attached_axes():
    A = tdsl.placeholder((64, 48), name="A")
    B = tdsl.compute((64, 48), lambda i, j: A[i, j] * 2, name="B")
    C = tdsl.compute((64, 48), lambda i, j: B[i, j] + 1, name="C")
    s = tdsl.create_schedule(C)
    io_, ii = s[C].split(C.op.axis[0], factor=16)
    cfg = autotune.Config(space=autotune.ConfigSpace())
    with pytest.raises(AutotuneError, match="stage=s"):
        cfg.define_split("x", ii)
    cfg.define_split("inner", ii, stage=s[C], policy="factors")
    assert cfg.space.knobs["inner"].extent == 16
    s[B].compute_at(s[C], io_)           # B's rows inside one io iteration: 16
    cfg.define_split("b_rows", s[B].op.axis[0], stage=s[B], policy="factors")
    assert cfg.space.knobs["b_rows"].extent == 16
    cfg.define_split("b_cols", s[B].op.axis[1], policy="factors")
    assert cfg.space.knobs["b_cols"].extent == 48


def test_knob_errors():
    cfg = autotune.Config(space=autotune.ConfigSpace())
    cfg.define_knob("u", [1, 2, 4], default=2)
    assert cfg["u"].val == 2
    with pytest.raises(AutotuneError, match="defined twice"):
        cfg.define_knob("u", [1])
    with pytest.raises(AutotuneError, match="read before it is defined"):
        cfg["nope"]
    with pytest.raises(AutotuneError, match="num_outputs"):
        cfg.define_split("s", 16, num_outputs=5)
    with pytest.raises(AutotuneError, match="not a"):
        cfg.define_reorder("r", [0, 1], candidate=[[0, 0]])
    with pytest.raises(AutotuneError, match="decorate"):
        autotune.create_task(lambda cfg: None, ())


def test_template_call_default_and_apply_config():
    s, args = matmul(16, 16, 16)                 # no cfg: the default config
    assert "split(i, factor=1)" in "\n".join(s.trace)
    with autotune.ApplyConfig({"tile_i": [-1, 4], "parallel": True}):
        s, args = matmul(16, 16, 16)
    assert "split(i, factor=4)" in "\n".join(s.trace) and "parallel(i.outer)" in "\n".join(s.trace)


def test_count_flop():
    task = autotune.create_task(matmul, (8, 16, 32))
    assert task.flop == 2 * 8 * 16 * 32
    task = autotune.create_task(conv2d, (4, 6, 6, 16))
    assert task.flop == 2 * 16 * 4 * 9 * 6 * 6


def test_cost_models_learn():
    rng = np.random.default_rng(0)
    X = rng.random((200, 4))
    y = np.where(X[:, 0] > 0.5, 2.0, 0.0) + X[:, 1] + 0.05 * rng.standard_normal(200)
    for m in (amodel.GBTModel(seed=0), amodel.RidgeModel()):
        m.fit(X[:150], y[:150])
        err = np.mean((m.predict(X[150:]) - y[150:]) ** 2)
        assert err < 0.5 * np.var(y[150:]), (type(m).__name__, err)


def test_model_tuner_beats_random_on_a_synthetic_objective():
    """No measurement: a known objective over 36,300 configs, 64 trials per run."""
    cfg = autotune.Config(space=autotune.ConfigSpace())
    cfg.define_split("ti", 512, num_outputs=3, policy="power2")
    cfg.define_split("tj", 512, num_outputs=3, policy="power2")
    cfg.define_reorder("ord", [0, 1, 2])
    cfg.define_knob("par", [False, True])
    sp = cfg.space

    def score(v):
        return (-abs(np.log2(v["ti"][2]) - 3) - abs(np.log2(v["tj"][2]) - 4)
                - 0.3 * abs(np.log2(v["ti"][1] * v["tj"][1]) - 4) + 0.3 * v["par"]
                + 0.2 * (v["ord"] == [0, 1, 2]))

    def run(tuner):
        best = -np.inf
        for _ in range(8):
            for p in tuner.next_batch(8):
                v = score(sp.values_of(p))
                tuner.update(p, autotune.Record("t", [], "llvm", {}, "ok", seconds=float(np.exp(-v))))
                best = max(best, v)
        return best
    rnd = np.mean([run(autotune.RandomTuner(sp, seed=s)) for s in (0, 1)])
    mdl = np.mean([run(autotune.ModelTuner(sp, seed=s)) for s in (0, 1)])
    assert mdl > rnd + 0.3, (mdl, rnd)


# ------------------------------------------------------------------------------ tuning

@pytest.mark.parametrize("tuner", ["random", "grid", "model"])
def test_tune_gemm_each_tuner(tuner, tmp_path):
    log = str(tmp_path / "mm.jsonl")
    task = autotune.create_task(matmul, (48, 64, 32))
    tuner_obj = autotune.ModelTuner(task.space, warmup=3) if tuner == "model" else tuner
    res = autotune.tune(task, tuner=tuner_obj, n_trial=10, log_file=log, **FAST)
    assert len(res.new_records) == 10 and res.stopped == "n_trial"
    assert all(r.ok for r in res.new_records), res.summary()
    assert res.default is not None and res.default.ok and res.default.trial == 1
    assert res.best.seconds <= res.default.seconds          # by construction, see docstring
    assert res.gflops == pytest.approx(task.flop / res.seconds / 1e9)
    # the chosen schedule, built again from the log, is correct
    with autotune.apply_best(log):
        s, args = matmul(48, 64, 32)
    f = tdsl.build(s, args)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((48, 32), dtype=np.float32), rng.standard_normal((32, 64), dtype=np.float32)
    c = np.empty((48, 64), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    recs = [json.loads(line) for line in open(log)]
    assert len(recs) == 10 and {"config", "status", "seconds", "gflops", "trial"} <= set(recs[0])
    # every record names the target as the measuring machine resolved it, and the machine
    assert {r["fingerprint"] for r in recs} == {autotune.target_fingerprint("llvm")} == {res.target}
    assert all(r["host"] for r in recs)


@pytest.mark.parametrize("tuner", ["random", "grid", "model"])
def test_tune_conv2d_each_tuner(tuner):
    task = autotune.create_task(conv2d, (4, 8, 8, 16), reference=_conv_reference)
    tuner_obj = autotune.ModelTuner(task.space, warmup=3, seed=1) if tuner == "model" else tuner
    res = autotune.tune(task, tuner=tuner_obj, n_trial=6, **FAST)
    assert len(res.new_records) == 6 and all(r.ok for r in res.new_records), res.summary()
    assert res.default.ok and res.best.seconds <= res.default.seconds
    f = task.build(res.config)                     # correct against numpy
    rng = np.random.default_rng(2)
    d = rng.standard_normal((4, 8, 8), dtype=np.float32)
    wp = rng.standard_normal((1, 4, 3, 3, 16), dtype=np.float32)
    o = np.empty((1, 8, 8, 16), np.float32)
    f(d, wp, o)
    np.testing.assert_allclose(o, _conv_reference(d, wp), rtol=1e-4, atol=1e-4)


def test_crash_hang_wrong_answer_reported_and_skipped():
    task = autotune.create_task(faulty, (32,))
    t0 = time.perf_counter()
    res = autotune.tune(task, tuner="grid", n_trial=20, trial_timeout_s=4, **FAST)
    assert time.perf_counter() - t0 < 30
    by = {r.config["fault"]: r for r in res.new_records}
    assert set(by) == {"none", "segv", "hang", "wrong", "schedule", "build", "fast"}
    assert by["segv"].status == "crash" and "SIGSEGV" in by["segv"].error
    assert by["hang"].status == "timeout"
    assert by["wrong"].status == "wrong_answer" and "elements differ" in by["wrong"].error
    assert by["schedule"].status == "instantiate_error" and "ScheduleError" in by["schedule"].error
    assert by["build"].status == "build_error"
    assert by["none"].ok and by["fast"].ok           # the run went on after each failure
    assert res.best.config["fault"] in ("none", "fast")
    assert res.stopped == "space exhausted"
    assert len(res.failures) == 5 and "crash" in res.summary()


def test_forked_measuring_process_never_scans_the_callers_heap(monkeypatch):
    """A forked child's collections would touch every object of the caller (a page fault
    each, seconds for a test process that loaded networks, past a trial's time limit): the
    caller's heap is frozen in the child, and the caller's own collector is left as it was."""
    import gc
    from tdsl.autotune import measure, sandbox
    heap = [[i] for i in range(200_000)]
    monkeypatch.setattr(measure, "run_job", lambda job: {"frozen": gc.get_freeze_count()})
    box = sandbox.Sandbox("fork")
    try:
        assert box.run("job", 30)["frozen"] >= len(heap)
    finally:
        box.close()
    assert gc.get_freeze_count() == 0


def test_crash_with_parallel_workers_blames_the_right_candidate():
    task = autotune.create_task(faulty, (32,))
    space = task.space
    order = ["segv", "none", "fast", "wrong"]

    class Fixed(autotune.Tuner):
        def _propose(self, n):
            return [(space.knobs["fault"].values.index(v),) for v in order]

    res = autotune.tune(task, tuner=Fixed(space), n_trial=5, n_parallel=2, **FAST)
    by = {r.config["fault"]: r.status for r in res.new_records}
    assert by == {"none": "ok", "segv": "crash", "fast": "ok", "wrong": "wrong_answer"}


def test_resume_skips_measured_configs(tmp_path):
    log = str(tmp_path / "resume.jsonl")
    task = autotune.create_task(matmul, (16, 16, 16))
    r1 = autotune.tune(task, "random", n_trial=4, log_file=log, **FAST)
    r2 = autotune.tune(task, "random", n_trial=4, log_file=log, **FAST)
    keys1 = {r.config_key for r in r1.new_records}
    keys2 = {r.config_key for r in r2.new_records}
    assert len(keys1) == 4 and len(keys2) == 4 and not keys1 & keys2
    assert len(r2.records) == 8 and [r.trial for r in r2.new_records] == [5, 6, 7, 8]
    assert r2.best.seconds == min(r.seconds for r in r2.records)
    assert len(autotune.load_records(log)) == 8


def test_resume_ignores_records_of_another_target(tmp_path):
    """A log written on another CPU: its configs are measured again here, and its (faster)
    times are neither the best nor applied."""
    log = str(tmp_path / "other.jsonl")
    task = autotune.create_task(matmul, (16, 16, 16))
    default = task.space.default_config().to_dict()
    theirs = autotune.Record("test_matmul", [16, 16, 16], "llvm", default, "ok", seconds=1e-9,
                             fingerprint="llvm:x86_64-unknown-linux-gnu:not-this-cpu:000000000000")
    with open(log, "w") as f:
        f.write(theirs.to_json() + "\n")
    res = autotune.tune(task, "random", n_trial=2, log_file=log, **FAST)
    assert len(res.records) == 2 and res.new_records[0].config == default
    assert res.default is res.new_records[0] and res.best.seconds > 1e-9
    assert res.new_records[0].trial == 1
    with autotune.apply_best(log):
        s, _ = matmul(16, 16, 16)
    assert "\n".join(s.trace) == "\n".join(
        task.instantiate(res.best.config)[0].trace)


def test_apply_best_picks_fastest_ok_record_of_this_target(tmp_path):
    log = str(tmp_path / "hand.jsonl")
    here = autotune.target_fingerprint("llvm")
    base = dict(task="test_matmul", args=[16, 16, 16], target="llvm", fingerprint=here)
    other_cpu = "llvm:x86_64-unknown-linux-gnu:not-this-cpu:000000000000"
    recs = [autotune.Record(config={"tile_i": [-1, 2]}, status="ok", seconds=2e-3, **base),
            autotune.Record(config={"tile_i": [-1, 4]}, status="ok", seconds=1e-3, **base),
            autotune.Record(config={"tile_i": [-1, 8]}, status="wrong_answer", seconds=1e-4, **base),
            autotune.Record(config={"tile_i": [-1, 3]}, status="ok", seconds=1e-5,
                            **{**base, "args": [32, 32, 32]}),
            # faster, but measured on another CPU, or on an unknown one (a version-1 log)
            autotune.Record(config={"tile_i": [-1, 6]}, status="ok", seconds=1e-6,
                            **{**base, "fingerprint": other_cpu}),
            autotune.Record(config={"tile_i": [-1, 7]}, status="ok", seconds=1e-7,
                            **{**base, "fingerprint": ""})]
    with open(log, "w") as f:
        f.write("".join(r.to_json() + "\n" for r in recs) + "{truncated line\n")
    with pytest.warns(UserWarning, match="1 record.*no target description"):
        ctx = autotune.apply_best(log)
    with ctx:
        s, _ = matmul(16, 16, 16)
        assert "split(i, factor=4)" in "\n".join(s.trace)
        with pytest.warns(UserWarning, match="no tuned config"):
            s, _ = matmul(8, 8, 8)                    # not tuned: default
        assert "split(i, factor=1)" in "\n".join(s.trace)
    s, _ = matmul(16, 16, 16)
    assert "split(i, factor=1)" in "\n".join(s.trace)
    # building for another target: none of these records hold
    with pytest.warns(UserWarning):
        ctx = autotune.apply_best(log, target="cuda")
    assert ctx.query("test_matmul", '[16,16,16]') is None
    # the log of another machine, read there, applies its own records
    assert autotune.Record.from_json(recs[4].to_json()).fingerprint == other_cpu


def test_user_executor_and_progress_bar():
    task = autotune.create_task(matmul, (16, 16, 16))
    out = io.StringIO()
    with cf.ThreadPoolExecutor(1) as ex:
        res = autotune.tune(task, "random", n_trial=3, executor=ex, min_repeat_ms=2, repeat=2,
                            progress=out)
    assert len(res.new_records) == 3 and all(r.ok for r in res.new_records)
    assert "GFLOP/s" in out.getvalue()
    # a process pool of the user's: jobs carry the template (pickled by reference) and data
    with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("fork")) as ex:
        res = autotune.tune(task, "grid", n_trial=2, executor=ex, **FAST)
    assert [r.status for r in res.new_records] == ["ok", "ok"], res.summary()


def test_knob_values_round_trip_through_the_log(tmp_path):
    seen = []

    @autotune.template("test_tuple_knob")
    def tmpl(cfg, n):
        cfg.define_knob("shape", [(1, 2), (2, 1)])
        seen.append(cfg["shape"].val)
        A = tdsl.placeholder((n,), name="A")
        B = tdsl.compute((n,), lambda i: A[i] + 1, name="B")
        return tdsl.create_schedule(B), [A, B]

    log = str(tmp_path / "t.jsonl")
    autotune.tune(autotune.create_task(tmpl, (8,)), "grid", n_trial=2, log_file=log, **FAST)
    with autotune.apply_best(log):
        tmpl(8)
    assert seen[-1] in [(1, 2), (2, 1)] and isinstance(seen[-1], tuple)
    with pytest.raises(AutotuneError, match="cannot be written"):
        autotune.Config(space=autotune.ConfigSpace()).define_knob("f", [object()])


def test_time_budget():
    task = autotune.create_task(faulty, (16,))
    space = task.space

    class HangFirst(autotune.Tuner):
        def _propose(self, n):
            return [(space.knobs["fault"].values.index("hang"),)]

    t0 = time.perf_counter()
    res = autotune.tune(task, tuner=HangFirst(space), n_trial=10, timeout_s=3,
                        trial_timeout_s=30, **FAST)
    assert time.perf_counter() - t0 < 10
    assert res.stopped == "timeout_s"
    assert [r.config["fault"] for r in res.new_records] == ["none"]   # the hang was cut, not logged


def test_errors_of_tune():
    task = autotune.create_task(matmul, (8, 8, 8))
    with pytest.raises(AutotuneError, match="unknown tuner"):
        autotune.tune(task, tuner="annealing", progress=False)
    bad = autotune.create_task(matmul, (8, 8, 8), reference=lambda a, b: np.zeros((3, 3)))
    with pytest.raises(AutotuneError, match="shapes"):
        autotune.tune(bad, n_trial=1, progress=False)
    with pytest.raises(AutotuneError, match="executor must be a concurrent.futures.Executor"):
        autotune.tune(task, n_trial=1, executor=object(), progress=False)
    import threading
    lock = threading.Lock()                       # nothing pickles a lock
    unsendable = autotune.create_task(matmul, (8, 8, 8), reference=lambda a, b: (lock, a @ b)[1])
    with cf.ThreadPoolExecutor(1) as ex, \
            pytest.raises(AutotuneError, match="reference function cannot be sent"):
        autotune.tune(unsendable, n_trial=1, executor=ex, progress=False)


def test_tuning_curve_and_plot(tmp_path, monkeypatch):
    base = dict(task="t", args=[1], target="llvm")
    recs = [autotune.Record(config={}, status="ok", seconds=s, gflops=g, trial=i + 1, **base)
            for i, (s, g) in enumerate([(2.0, 1.0), (1.0, 2.0), (3.0, 0.5)])]
    recs.append(autotune.Record(config={}, status="crash", trial=4, **base))
    trials, vals, best, use_gflops = autotune.tuning_curve(recs)
    assert use_gflops and best == [1.0, 2.0, 2.0, 2.0] and vals[3] is None
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match="needs matplotlib"):
        autotune.plot_tuning_curve(recs)
    monkeypatch.undo()
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    ax = autotune.plot_tuning_curve(recs, label="demo")
    assert ax.get_ylabel() == "GFLOP/s"


def test_machine_lock_orders_builds_and_timings(tmp_path):
    """Builds share the lock, a timing holds it alone; a waiter gives up after max_wait."""
    import threading
    from tdsl.autotune.machine_lock import MachineLock
    path = str(tmp_path / "m.lock")
    timer, builder, other = MachineLock(path), MachineLock(path), MachineLock(path)
    with builder.shared(), other.shared(max_wait=0.5):      # builds overlap at once
        pass
    events = []

    def build():
        with builder.shared():
            events.append(("build starts", time.monotonic()))

    with timer.exclusive():
        t = threading.Thread(target=build)
        t.start()
        time.sleep(0.3)
        events.append(("timing ends", time.monotonic()))
    t.join(5)
    assert [e for e, _ in events] == ["timing ends", "build starts"]
    with timer.exclusive():
        t0 = time.monotonic()
        with other.shared(max_wait=0.2):       # a hung holder: go on without the lock
            waited = time.monotonic() - t0
    assert 0.15 < waited < 2.0


def _as_another_cpu(fn, *args):
    """Runs a job, then reports it as measured by a machine with another CPU, ten times
    faster than anything here."""
    res = fn(*args)
    if isinstance(res, dict) and res.get("status") == "ok":
        res = dict(res, fingerprint="llvm:x86_64-unknown-linux-gnu:other-cpu:000000000000",
                   host="elsewhere", seconds=res["seconds"] / 10)
    return res


class _HalfTheWorkersElsewhere(cf.ThreadPoolExecutor):
    """Every other trial job goes to a worker on another CPU."""

    def __init__(self):
        super().__init__(1)
        self.jobs = 0

    def submit(self, fn, *args, **kw):
        from tdsl.autotune.dispatch import remote_trial
        if fn is remote_trial:
            self.jobs += 1
            if self.jobs % 2 == 0:
                return super().submit(_as_another_cpu, fn, *args)
        return super().submit(fn, *args, **kw)


def test_records_from_a_worker_with_another_cpu_stay_apart(tmp_path):
    log = str(tmp_path / "mixed.jsonl")
    task = autotune.create_task(matmul, (16, 16, 16))
    out = io.StringIO()
    with _HalfTheWorkersElsewhere() as ex:
        res = autotune.tune(task, "random", n_trial=6, log_file=log, executor=ex,
                            min_repeat_ms=2, repeat=2, progress=out)
    here = autotune.target_fingerprint("llvm")
    theirs = [r for r in res.new_records if r.fingerprint != here]
    ours = [r for r in res.new_records if r.fingerprint == here]
    assert len(theirs) == 3 and len(ours) == 3 and all(r.ok for r in res.new_records)
    assert all(r.host == "elsewhere" for r in theirs)
    assert res.best in ours and res.best.seconds == min(r.seconds for r in ours)
    assert "elsewhere measures for llvm:x86_64-unknown-linux-gnu:other-cpu" in out.getvalue()
    # all six are logged, each under its own target; here only ours apply or resume
    logged = autotune.load_records(log)
    assert len(logged) == 6 and sum(r.fingerprint == here for r in logged) == 3
    with autotune.apply_best(log):
        s, _ = matmul(16, 16, 16)
    assert s.trace == task.instantiate(res.best.config)[0].trace
    res2 = autotune.tune(task, "random", n_trial=3, log_file=log, min_repeat_ms=2, repeat=2,
                         progress=False)
    assert len(res2.records) == 3 + 3 and res2.records[:3] == [r for r in logged if r.fingerprint == here]
