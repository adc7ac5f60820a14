"""The persistent compile cache: a second process skips compilation, concurrent builds
agree, damaged entries are rebuilt, the size bound evicts least recently used entries,
TDSL_CACHE=0 writes nothing, `tdsl cache info|clear`."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import tdsl
from tdsl.codegen.llvm import jit
from tdsl.runtime import diskcache, libfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code, cache_dir, **env):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT, TDSL_CACHE_DIR=str(cache_dir), **env))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


KERNELS = r"""
import json, numpy as np, tdsl
from tdsl.codegen.llvm import jit
from tdsl.runtime import diskcache
n = tdsl.var("n")
A = tdsl.placeholder((n, 64), name="A")
k = tdsl.reduce_axis((0, 64), name="k")
B = tdsl.compute((n,), lambda i: tdsl.sum(A[i, k] * A[i, k], axis=k), name="B")
s = tdsl.create_schedule(B)
io, ii = s[B].split(B.op.axis[0], factor=4)
s[B].parallel(io)
f = tdsl.build(s, [A, B], name="rowsq")
C = tdsl.compute((n, 64), lambda i, j: A[i, j] + 1.0, name="C")
g = tdsl.build(tdsl.create_schedule(C), [A, C], target="c", name="plus1")
a = np.arange(10 * 64, dtype="float32").reshape(10, 64) / 100
b = np.zeros(10, "float32"); c = np.zeros_like(a)
f(a, b); g(a, c)
print(json.dumps({"cpu": {k: v for k, v in jit.stats.items() if k != "compile_s"},
                  "compile_s": jit.stats["compile_s"], "disk": diskcache.stats,
                  "b": b.tolist(), "c_ok": bool(np.array_equal(c, a + 1)),
                  "ir": f.get_source("unopt")[:200], "asm": "rowsq" in f.get_source("asm")}))
"""


def test_a_second_process_skips_compilation(tmp_path):
    first = _run(KERNELS, tmp_path)
    second = _run(KERNELS, tmp_path)
    assert first["cpu"]["misses"] == 1 and first["compile_s"] > 0
    assert second["cpu"]["misses"] == 0 and second["compile_s"] == 0
    assert second["cpu"]["build_hits"] == 1           # not even lowered again
    assert second["disk"]["writes"] == 0 and second["disk"]["hits"] >= 3
    assert first["b"] == second["b"] and first["ir"] == second["ir"] and second["asm"]
    a = np.arange(10 * 64, dtype="float32").reshape(10, 64) / 100
    np.testing.assert_allclose(second["b"], (a * a).sum(1), rtol=1e-5)
    assert first["c_ok"] and second["c_ok"]


def test_cache_off_writes_nothing(tmp_path):
    out = _run(KERNELS, tmp_path / "off", TDSL_CACHE="0")
    assert out["disk"]["writes"] == 0 and out["cpu"]["misses"] == 1 and out["c_ok"]
    assert not os.path.exists(tmp_path / "off" / "v1") or not os.listdir(tmp_path / "off" / "v1")


RESNET = r"""
import json, sys, time, numpy as np
t0 = time.perf_counter()
import tdsl.graph as G
from tdsl.graph import models
from tdsl.codegen.llvm import jit
m = models.resnet18(size=32, width=8, num_classes=10)
exe = G.build(G.optimize(G.from_onnx(m)))
build_s = time.perf_counter() - t0
x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
(y,) = exe.run(x)
np.save(sys.argv[1], y)
print(json.dumps({"build_s": build_s, "misses": jit.stats["misses"],
                  "build_hits": jit.stats["build_hits"], "compiled": exe.stats["compiled"]}))
"""


def test_resnet18_concurrent_cold_builds_agree_and_a_warm_one_compiles_nothing(tmp_path):
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=ROOT, TDSL_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", RESNET, str(tmp_path / f"y{i}.npy")],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(2)]
    outs = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stderr
        outs.append(json.loads(stdout.strip().splitlines()[-1]))
    y0, y1 = np.load(tmp_path / "y0.npy"), np.load(tmp_path / "y1.npy")
    assert np.array_equal(y0, y1)
    warm = subprocess.run([sys.executable, "-c", RESNET, str(tmp_path / "y2.npy")], cwd=ROOT,
                          env=env, capture_output=True, text=True)
    assert warm.returncode == 0, warm.stderr
    w = json.loads(warm.stdout.strip().splitlines()[-1])
    assert w["misses"] == 0 and w["build_hits"] == w["compiled"] > 10
    assert np.array_equal(np.load(tmp_path / "y2.npy"), y0)
    ort = pytest.importorskip("onnxruntime")  # noqa: F841
    from tdsl.graph import models
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    (ref,) = models.onnxruntime_run(models.resnet18(size=32, width=8, num_classes=10), {"input": x})
    np.testing.assert_allclose(y0, ref, rtol=1e-3, atol=1e-4 * float(np.abs(ref).max()))
    print(f"\nresnet18 (32x32, width 8) cold builds {[round(o['build_s'], 2) for o in outs]} s, "
          f"warm {w['build_s']:.2f} s")


def _small_kernel(tag):
    A = tdsl.placeholder((16,), name="A")
    B = tdsl.compute((16,), lambda i: A[i] * float(tag), name="B")
    return tdsl.create_schedule(B), [A, B]


def test_damaged_entries_are_detected_and_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path))
    s, args = _small_kernel(7)
    tdsl.build(s, args)
    entries = {e.split("-")[0]: os.path.join(diskcache.directory(), e)
               for e in os.listdir(diskcache.directory())}
    with open(entries["llvm"], "r+b") as f:            # an object file cut short
        f.truncate(os.path.getsize(entries["llvm"]) // 2)
    data = bytearray(open(entries["build"], "rb").read())
    data[3] ^= 0x01                                   # a flipped byte in the build record
    open(entries["build"], "wb").write(bytes(data))
    jit.clear_cache()
    corrupt, misses = diskcache.stats["corrupt"], jit.stats["misses"]
    s, args = _small_kernel(7)
    f = tdsl.build(s, args)
    assert diskcache.stats["corrupt"] == corrupt + 2     # both detected (and deleted)
    assert jit.stats["misses"] == misses + 1             # so the kernel was compiled again
    a = np.arange(16, dtype="float32")
    b = np.zeros_like(a)
    f(a, b)
    np.testing.assert_array_equal(b, a * 7)
    for p in entries.values():                        # both rewritten whole
        assert libfile.read_sealed(p)


def test_lru_eviction_and_stale_temporary_files(tmp_path, monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path))
    now = time.time()
    for i in range(6):
        diskcache.put("test", f"k{i}", [bytes(1000)])
        os.utime(os.path.join(diskcache.directory(), f"test-k{i}"), (now - 600 + i, now - 600 + i))
    assert diskcache.get("test", "k0") is not None     # used now: the most recent
    stale = os.path.join(diskcache.directory(), ".tmp-dead-writer")
    open(stale, "wb").close()
    os.utime(stale, (now - 7200, now - 7200))
    size = os.path.getsize(os.path.join(diskcache.directory(), "test-k0"))
    gone = diskcache.evict(limit=3 * size)
    assert gone == 3 and not os.path.exists(stale)
    left = sorted(os.listdir(diskcache.directory()))
    assert left == ["test-k0", "test-k4", "test-k5"]
    monkeypatch.setenv("TDSL_CACHE_MAX_MB", str(2.5 * size / 2**20))
    diskcache.put("test", "k6", [bytes(1000)])         # a write past the bound evicts
    assert len(os.listdir(diskcache.directory())) <= 2


def test_concurrent_writers_of_one_key(tmp_path):
    code = r"""
import json, sys
from tdsl.runtime import diskcache
payload = [bytes(range(256)) * 400, b"second part"]
bad = 0
for i in range(40):
    diskcache.put("race", "samekey", payload)
    got = diskcache.get("race", "samekey")
    bad += got is not None and got != payload
print(json.dumps({"bad": bad, "corrupt": diskcache.stats["corrupt"]}))
"""
    env = dict(os.environ, PYTHONPATH=ROOT, TDSL_CACHE_DIR=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert json.loads(out) == {"bad": 0, "corrupt": 0}
    assert [e for e in os.listdir(os.path.join(tmp_path, "v1"))] == ["race-samekey"]


def test_cli_info_and_clear(tmp_path):
    _run(KERNELS, tmp_path)
    env = dict(os.environ, PYTHONPATH=ROOT, TDSL_CACHE_DIR=str(tmp_path))
    info = subprocess.run([sys.executable, "-m", "tdsl", "cache", "info"], env=env,
                          capture_output=True, text=True)
    assert info.returncode == 0 and str(tmp_path) in info.stdout
    assert "llvm" in info.stdout and "build" in info.stdout
    n = len(os.listdir(os.path.join(tmp_path, "v1")))
    clear = subprocess.run([sys.executable, "-m", "tdsl", "cache", "clear"], env=env,
                           capture_output=True, text=True)
    assert clear.returncode == 0 and f"removed {n} entries" in clear.stdout
    assert os.listdir(os.path.join(tmp_path, "v1")) == []


def test_keys_follow_the_tdsl_source(monkeypatch):
    """An edited tdsl (an editable install) never reads code cached by the old one."""
    k = diskcache.key("x")
    diskcache.tdsl_identity.cache_clear()
    monkeypatch.setattr(tdsl.version, "__version__", tdsl.__version__ + ".dev-test")
    try:
        assert diskcache.key("x") != k
    finally:
        diskcache.tdsl_identity.cache_clear()


def test_build_cache_keys_on_extern_registrations_and_intrinsic_rules(tmp_path, monkeypatch):
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path))

    def kernel():
        A = tdsl.placeholder((8,), name="A")
        B = tdsl.extern(A.shape, [A], lambda ins, outs: tdsl.call_packed(
            "test.cache_fn", ins[0], outs[0]), name="B")
        C = tdsl.compute(A.shape, lambda i: tdsl.exp(B[i]), name="C")
        return tdsl.create_schedule(C.op), [A, C]

    def run(f):
        c = np.zeros(8, "float32")
        f(np.arange(8, dtype="float32"), c)
        return c
    tdsl.register_func("test.cache_fn", lambda x, y: y.__setitem__(slice(None), x), override=True)
    run(tdsl.build(*kernel()))
    hits = jit.stats["build_hits"]
    np.testing.assert_allclose(run(tdsl.build(*kernel())), np.exp(np.arange(8)), rtol=1e-6)
    assert jit.stats["build_hits"] == hits + 1          # an equal schedule: a hit
    # a new registration of the name: no hit, and the new function runs
    tdsl.register_func("test.cache_fn", lambda x, y: y.__setitem__(slice(None), -x), override=True)
    np.testing.assert_allclose(run(tdsl.build(*kernel())), np.exp(-np.arange(8)), rtol=1e-6)
    assert jit.stats["build_hits"] == hits + 1
    # a rule registered later: no hit on the build made without it
    tdsl.register_intrin_lowering("exp", "llvm", lambda op: tdsl.call_pure_extern(
        "float32", "expf", op.args[0]))
    try:
        f = tdsl.build(*kernel())
        assert "@expf" in f.get_source() and jit.stats["build_hits"] == hits + 1
    finally:
        tdsl.remove_intrin_lowering("exp", "llvm")


def test_a_graph_kernel_is_fingerprinted_once_and_its_key_keys_the_cache(tmp_path, monkeypatch):
    """The graph layer fingerprints each kernel's schedule once (to find size classes
    that schedule alike) and hands it to `tdsl.build`, whose compile cache keys on it: no
    schedule is walked twice, and a rebuild in the process is all whole-build hits."""
    import tdsl.fingerprint as fpmod
    from tdsl.graph import models
    from tdsl.graph.executor import clear_kernel_cache
    from tdsl.graph.strategy import dispatch
    from tdsl.schedule.schedule import Schedule
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path))
    walked = []

    def counted(*roots):
        walked.extend(id(r) for r in roots if isinstance(r, Schedule))
        return fingerprint(*roots)
    fingerprint = fpmod.fingerprint
    monkeypatch.setattr(fpmod, "fingerprint", counted)
    monkeypatch.setattr(dispatch, "fingerprint", counted)

    def build():
        clear_kernel_cache()
        jit.clear_cache()
        return tdsl.graph.build(tdsl.graph.optimize(tdsl.graph.from_onnx(
            models.mlp(batch="batch", sizes=(64, 32, 8)))))
    exe = build()
    # a symbolic batch: kernels and their size classes' variants
    assert len(walked) > exe.stats["compiled"] and len(set(walked)) == len(walked)
    x = np.random.default_rng(0).standard_normal((3, 64)).astype("float32")
    want = exe.run(x)[0]
    hits, misses, schedules = jit.stats["build_hits"], jit.stats["misses"], len(walked)
    again = build()
    assert jit.stats["misses"] == misses
    assert jit.stats["build_hits"] - hits == len(walked) - schedules
    np.testing.assert_array_equal(again.run(x)[0], want)


def test_a_handed_schedule_key_is_the_key_build_takes(tmp_path, monkeypatch):
    from tdsl.fingerprint import fingerprint
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path))

    def kernel():
        A = tdsl.placeholder((16,), name="A")
        B = tdsl.compute(A.shape, lambda i: A[i] * 2.0, name="B")
        return tdsl.create_schedule(B), [A, B]
    tdsl.build(*kernel(), name="twice")
    hits = jit.stats["build_hits"]
    s, args = kernel()
    f = tdsl.build(s, args, name="twice", schedule_key=fingerprint(s, args))
    assert jit.stats["build_hits"] == hits + 1
    b = np.zeros(16, "float32")
    f(np.arange(16, dtype="float32"), b)
    np.testing.assert_array_equal(b, 2 * np.arange(16, dtype="float32"))
