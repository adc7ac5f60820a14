"""CPU runtime: argument checks, timing, compile cache, export_library / load_module."""
import os
import subprocess
import sys

import numpy as np
import pytest

from tdsl.codegen import llvm as L
from tdsl.errors import ArgumentError, TdslError
from tdsl.ir import expr as E
from tdsl.ir.expr import BufferLoad as Ld, IntImm as I
from tdsl.ir.stmt import Buffer, BufferStore as St, For, ForKind as K, PrimFunc, seq
from tdsl.codegen.llvm import jit
from tdsl.runtime.aot import load_module
from tdsl.target import Target, vector_bits_in_asm


def _matvec_func(name="mv"):
    """C[i, j] = A[i, j] * x[j] + alpha, with A (n, 64), x (64,), C (n, 64); n symbolic."""
    n = E.Var("n")
    A = Buffer("A", (n, I(64)), "float32")
    X = Buffer("x", (I(64),), "float32")
    C = Buffer("C", (n, I(64)), "float32")
    alpha = E.Var("alpha", "float32")
    i, j = E.Var("i"), E.Var("j")
    body = For(i, I(0), n, K.PARALLEL, For(j, I(0), I(64), K.VECTORIZED,
               St(C, Ld(A, (i * 64 + j,)) * Ld(X, (j,)) + alpha, (i * 64 + j,))))
    return PrimFunc(name, [A, X, C, alpha, n], body, {"num_user_args": 4})


@pytest.fixture(scope="module")
def mv():
    return L.build(_matvec_func())


def _args(n=8):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((n, 64)).astype("float32"),
            rng.standard_normal(64).astype("float32"),
            np.zeros((n, 64), "float32"))


def test_call_and_symbolic_size(mv):
    for n in (1, 8, 33):
        a, x, c = _args(n)
        mv(a, x, c, 0.5)
        np.testing.assert_allclose(c, a * x + 0.5, rtol=1e-6, atol=1e-6)


def _expect_error(mv, args, *fragments):
    c = args[2]
    before = c.copy()
    with pytest.raises(ArgumentError) as ei:
        mv(*args)
    msg = str(ei.value)
    for f in fragments:
        assert f in msg, msg
    if isinstance(c, np.ndarray):
        np.testing.assert_array_equal(c, before)  # nothing written
    return msg


def test_argument_errors_name_the_argument(mv):
    a, x, c = _args()
    c[:] = 7
    with pytest.raises(ArgumentError, match=r"takes 4 arguments \(A, x, C, alpha\), got 3"):
        mv(a, x, c)
    assert issubclass(ArgumentError, ValueError)
    _expect_error(mv, (a.astype("float64"), x, c, 1.0), "argument 0 'A'", "dtype float32",
                  "float64")
    _expect_error(mv, (a, x.reshape(1, 64), c, 1.0), "argument 1 'x'", "1-d", "2-d")
    _expect_error(mv, (a, x[:63].copy(), c, 1.0), "argument 1 'x'", "expected shape (64,)",
                  "got (63,)")
    # symbolic disagreement: n=8 from A, C has 9 rows
    msg = _expect_error(mv, (a, x, np.zeros((9, 64), "float32"), 1.0), "argument 2 'C'",
                        "expected shape (8, 64), got (9, 64)")
    assert "n=8 from argument 0 'A'" in msg
    _expect_error(mv, (a, x, np.zeros((8, 63), "float32"), 1.0),
                  "argument 2 'C': expected shape (8, 64), got (8, 63)")
    # non-contiguous
    big = np.zeros((8, 128), "float32")
    _expect_error(mv, (a, x, big[:, ::2], 1.0), "argument 2 'C'", "C-contiguous")
    _expect_error(mv, (np.asfortranarray(np.zeros((8, 64), "float32")), x, c, 1.0),
                  "argument 0 'A'", "C-contiguous")
    # read-only output
    ro = np.zeros((8, 64), "float32")
    ro.setflags(write=False)
    _expect_error(mv, (a, x, ro, 1.0), "argument 2 'C'", "read-only")
    # scalar type
    _expect_error(mv, (a, x, c, "1.0"), "argument 3 'alpha'")
    _expect_error(mv, (a, x, c, np.zeros(3)), "argument 3 'alpha'")
    # not an array
    _expect_error(mv, ([[1.0] * 64] * 8, x, c, 1.0), "argument 0 'A'", "numpy array")
    # output aliasing an input
    _expect_error(mv, (c, x, c, 1.0), "argument 2 'C'", "overlaps argument 0 'A'")
    # byte order
    _expect_error(mv, (a.astype(">f4"), x, c, 1.0), "argument 0 'A'")
    assert (c == 7).all()


def test_integer_scalar_checks_and_size_var_dtype_range():
    n = E.Var("n")
    A = Buffer("A", (n,), "int32")
    k = E.Var("k", "int8")
    i = E.Var("i")
    f = PrimFunc("addk", [A, k, n], For(i, I(0), n, K.SERIAL,
                                        St(A, Ld(A, (i,)) + E.cast(k, "int32"), (i,))),
                 {"num_user_args": 2})
    m = L.build(f)
    a = np.arange(5, dtype="int32")
    m(a, np.int8(-3))
    np.testing.assert_array_equal(a, np.arange(5) - 3)
    with pytest.raises(ArgumentError, match="argument 1 'k': value 300 does not fit int8"):
        m(a, 300)
    with pytest.raises(ArgumentError, match="argument 1 'k'.*got float"):
        m(a, 1.5)
    with pytest.raises(ArgumentError, match="argument 1 'k'.*got bool"):
        m(a, True)


def test_user_passed_size_var_must_agree():
    n = E.Var("n")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n + 1,), "float32")
    i = E.Var("i")
    f = PrimFunc("shift", [A, B, n], For(i, I(0), n, K.SERIAL,
                                         St(B, Ld(A, (i,)), (i + 1,))), {"num_user_args": 3})
    m = L.build(f)
    a = np.arange(4, dtype="float32")
    b = np.zeros(5, "float32")
    m(a, b, 4)
    np.testing.assert_array_equal(b, [0, 0, 1, 2, 3])
    with pytest.raises(ArgumentError, match=r"argument 0 'A': expected shape \(3,\), got \(4,\)"):
        m(a, b, 3)
    with pytest.raises(ArgumentError, match=r"argument 1 'B': expected shape \(5,\), got \(6,\)"):
        m(a, np.zeros(6, "float32"), 4)


def test_size_bound_only_through_an_expression():
    n = E.Var("n")
    B = Buffer("B", (n * 2 + 1,), "float32")
    i = E.Var("i")
    f = PrimFunc("odd", [B, n], For(i, I(0), n, K.SERIAL,
                                    St(B, E.const(1.0, "float32"), (i * 2 + 1,))),
                 {"num_user_args": 1})
    m = L.build(f)
    b = np.zeros(7, "float32")
    m(b)
    np.testing.assert_array_equal(b, [0, 1, 0, 1, 0, 1, 0])
    with pytest.raises(ArgumentError, match="'B'"):
        m(np.zeros(6, "float32"))


def test_ndarray_like_objects_with_numpy_and_copyfrom(mv):
    class Dev:
        def __init__(self, arr):
            self.arr = arr.copy()

        def numpy(self):
            return self.arr.copy()

        def copyfrom(self, src):
            self.arr[...] = src

    a, x, c = _args()
    dc = Dev(c)
    mv(Dev(a), x, dc, 1.0)
    np.testing.assert_allclose(dc.arr, a * x + 1.0, rtol=1e-6, atol=1e-6)


def test_time_evaluator(mv):
    a, x, c = _args(64)
    r = mv.time_evaluator(number=5, repeat=3)(a, x, c, 1.0)
    assert len(r.results) == 3 and r.mean > 0 and r.mean == pytest.approx(
        sum(r.results) / 3)
    np.testing.assert_allclose(c, a * x + 1.0, rtol=1e-6, atol=1e-6)


def test_get_source_formats(mv):
    ll = mv.get_source()
    assert "define" in ll and "tdsl_mv" in ll and mv.get_source("ll") == ll
    asm = mv.get_source("asm")
    assert "tdsl_mv:" in asm
    with pytest.raises(TdslError):
        mv.get_source("cuda")


def test_compile_cache_reuses_the_compiled_kernel():
    """An identical kernel built again is a cache hit: no second compilation (compile times
    themselves are reported by bench/, not asserted here)."""
    f = _matvec_func("cached")
    jit.clear_cache()
    first = L.build(f)
    hits, misses, spent = jit.stats["hits"], jit.stats["misses"], jit.stats["compile_s"]
    m = L.build(_matvec_func("cached"))  # a fresh but identical PrimFunc
    assert jit.stats["hits"] == hits + 1
    assert jit.stats["misses"] == misses and jit.stats["compile_s"] == spent
    assert m.backend.art is first.backend.art
    a, x, c = _args()
    m(a, x, c, 2.0)
    np.testing.assert_allclose(c, a * x + 2.0, rtol=1e-6, atol=1e-6)


def test_gemm_register_tile_compiles_to_fmas_of_the_host_width():
    """A 1024 GEMM kernel: register tile in a local buffer, parallel rows."""
    M = N = Kd = 1024
    MR, NR = 8, 32
    A = Buffer("A", (I(M), I(Kd)), "float32")
    B = Buffer("B", (I(Kd), I(N)), "float32")
    C = Buffer("C", (I(M), I(N)), "float32")
    Cl = Buffer("Cl", (I(MR * NR),), "float32", "local")
    io, jo, ii, ji, jv, k = (E.Var(s) for s in ("io", "jo", "ii", "ji", "jv", "k"))
    cidx = ii * NR + ji * 16 + jv

    def tile(body):
        return For(ii, I(0), I(MR), K.UNROLLED,
                   For(ji, I(0), I(NR // 16), K.UNROLLED, For(jv, I(0), I(16), K.VECTORIZED, body)))
    from tdsl.ir.stmt import Allocate
    body = For(io, I(0), I(M // MR), K.PARALLEL, For(jo, I(0), I(N // NR), K.SERIAL, Allocate(
        Cl, seq(tile(St(Cl, E.const(0.0, "float32"), (cidx,))),
                For(k, I(0), I(Kd), K.SERIAL, tile(St(
                    Cl, Ld(Cl, (cidx,)) + Ld(A, ((io * MR + ii) * Kd + k,))
                    * Ld(B, (k * N + jo * NR + ji * 16 + jv,)), (cidx,)))),
                tile(St(C, Ld(Cl, (cidx,)), ((io * MR + ii) * N + jo * NR + ji * 16 + jv,)))))))
    f = PrimFunc("gemm1024", [A, B, C], body, {"num_user_args": 3})
    jit.clear_cache()
    L.build(PrimFunc("warm", [C], St(C, E.const(0.0, "float32"), (I(0),)), {}))  # target init
    m = L.build(f)
    asm = m.get_source("asm")
    assert "vfmadd231ps" in asm or not Target.host().fma
    assert vector_bits_in_asm(asm) == Target.host().vector_bits
    rng = np.random.default_rng(1)
    a = rng.standard_normal((M, Kd)).astype("float32")
    b = rng.standard_normal((Kd, N)).astype("float32")
    c = np.zeros((M, N), "float32")
    m(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)


def test_num_threads_from_environment():
    code = (
        "import os; os.environ['TDSL_NUM_THREADS'] = '3'\n"
        "import sys; sys.path.insert(0, 'tests')\n"
        "from test_runtime import _matvec_func\n"
        "from tdsl.codegen import llvm as L\n"
        "m = L.build(_matvec_func())\n"
        "print(m.get_num_threads())\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=root))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "3"


def _heavy_parallel():
    n = E.Var("n")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    io, ii = E.Var("io"), E.Var("ii")
    idx = io * 1024 + ii
    body = For(io, I(0), E.FloorDiv(n, I(1024)), K.PARALLEL, For(ii, I(0), I(1024), K.SERIAL,
               St(B, E.call("sin", E.call("cos", Ld(A, (idx,)))), (idx,))))
    return L.build(PrimFunc("heavy", [A, B, n], body, {"num_user_args": 2}))


def test_parallel_loop_runs_on_native_threads():
    """In a fresh process, a parallel loop with 4 threads brings up 3 native worker threads
    (the persistent pool, or threads created per launch while it runs)."""
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("no /proc")
    import subprocess
    import sys
    code = (
        "import os, threading, numpy as np, tdsl\n"
        "A = tdsl.placeholder((1 << 22,), name='A')\n"
        "B = tdsl.compute(A.shape, lambda i: tdsl.sin(tdsl.cos(A[i])), name='B')\n"
        "s = tdsl.create_schedule(B); io, ii = s[B].split(B.op.axis[0], factor=1024)\n"
        "s[B].parallel(io); f = tdsl.build(s, [A, B]); f.set_num_threads(4)\n"
        "a = np.random.default_rng(2).standard_normal(1 << 22).astype('float32'); b = np.zeros_like(a)\n"
        "before = set(os.listdir('/proc/self/task'))\n"
        "seen = set()\n"
        "th = threading.Thread(target=lambda: [f(a, b) for _ in range(8)]); th.start()\n"
        "while th.is_alive():\n"
        "    seen |= {t for t in os.listdir('/proc/self/task') if t not in before}\n"
        "th.join()\n"
        "assert np.allclose(b, np.sin(np.cos(a)), rtol=1e-5, atol=1e-6)\n"
        "print(len(seen))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) >= 1 + 3   # the Python thread and 3 workers


def test_export_library_and_load_module(tmp_path, mv):
    path = str(tmp_path / "mv.so")
    assert mv.export_library(path) == path
    assert os.path.getsize(path) > 0
    m2 = load_module(path)
    a, x, c = _args(5)
    m2(a, x, c, 1.5)
    np.testing.assert_allclose(c, a * x + 1.5, rtol=1e-6, atol=1e-6)
    # the same checks as the JIT module
    with pytest.raises(ArgumentError, match=r"argument 2 'C': expected shape \(5, 64\)"):
        m2(a, x, np.zeros((4, 64), "float32"), 1.0)
    with pytest.raises(ArgumentError, match="takes 4 arguments"):
        m2(a, x)
    m2.set_num_threads(2)
    assert m2.get_num_threads() == 2
    assert m2.signature.raw["params"][0]["shape_text"] == ["n", "64"]
    # re-export from the loaded module, and load in a process without llvmlite
    path2 = str(tmp_path / "mv_copy.so")
    m2.export_library(path2)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (
        "import sys; sys.modules['llvmlite'] = None\n"
        "import numpy as np\n"
        "from tdsl.runtime.aot import load_module\n"
        f"m = load_module({path2!r})\n"
        "a = np.ones((3, 64), 'float32'); x = np.full(64, 2, 'float32'); c = np.zeros_like(a)\n"
        "m(a, x, c, 1.0); print(float(c.sum()))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=root))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == str(3 * 64 * 3.0)


def test_export_object_file(tmp_path, mv):
    path = str(tmp_path / "mv.o")
    mv.export_library(path)
    with open(path, "rb") as f:
        assert f.read(4) == b"\x7fELF"


def test_load_module_errors(tmp_path):
    with pytest.raises(TdslError, match="no such library"):
        load_module(str(tmp_path / "missing.so"))
    bad = tmp_path / "bad.so"
    bad.write_bytes(b"not a library")
    with pytest.raises(TdslError):
        load_module(str(bad))


def test_prepared_call_checks_once_and_runs(mv):
    a, x, c = _args()
    run = mv.prepared(a, x, c, 2.0)
    c[:] = 0
    run()
    np.testing.assert_allclose(c, a * x + 2.0, rtol=1e-6, atol=1e-6)
    with pytest.raises(ArgumentError):
        mv.prepared(a, x, c[:3], 2.0)


def test_exact_arguments_take_the_short_check_and_the_rest_the_full_one():
    """A kernel whose arguments are all buffers of constant shape checks arrays of exactly
    its dtypes and shapes in a few attribute reads; anything else (and an output that
    aliases an input) still gets the full checks and their errors, and nothing runs."""
    import tdsl
    A = tdsl.placeholder((4, 8), name="A")
    B = tdsl.placeholder((4, 8), name="B")
    C = tdsl.compute((4, 8), lambda i, j: A[i, j] + B[i, j], name="C")
    f = tdsl.build(tdsl.create_schedule(C), [A, B, C])
    assert f.signature.exact is not None
    a, b = np.arange(32, dtype="float32").reshape(4, 8), np.ones((4, 8), "float32")
    c = np.zeros((4, 8), "float32")
    cargs, keep, before, after = f.signature.prepare((a, b, c))
    assert cargs == [x.ctypes.data for x in (a, b, c)] and not before and not after
    ro = a.copy()
    ro.setflags(write=False)            # a read-only input is fine (its address differs)
    f(ro, b, c)
    np.testing.assert_array_equal(c, a + 1)
    c[:] = 7
    _expect_error(f, (a, b, a), "argument 2 'C'", "overlaps argument 0 'A'")
    buf = np.zeros(40, "float32")       # two views of one buffer, each exactly right alone
    _expect_error(f, (a, buf[:32].reshape(4, 8), buf[4:36].reshape(4, 8)), "argument 2 'C'",
                  "overlaps argument 1 'B'")
    adj = np.arange(64, dtype="float32")  # end to end in one buffer: no overlap
    f(adj[:32].reshape(4, 8), b, adj[32:].reshape(4, 8))
    np.testing.assert_array_equal(adj[32:], np.arange(32, dtype="float32") + 1)
    _expect_error(f, (a.astype("float64"), b, c), "argument 0 'A'", "dtype float32")
    _expect_error(f, (a, b, np.zeros((4, 9), "float32")), "argument 2 'C'", "(4, 8)")
    _expect_error(f, (a, b, np.zeros((8, 8), "float32")[::2]), "argument 2 'C'",
                  "C-contiguous")
    rc = c.copy()
    rc.setflags(write=False)
    _expect_error(f, (a, b, rc), "argument 2 'C'", "read-only")
    _expect_error(f, (a.astype(">f4"), b, c), "argument 0 'A'")
    _expect_error(f, (a.tolist(), b, c), "argument 0 'A'", "numpy array")
    assert (c == 7).all()
    raw = np.zeros(4 * 8 * 4 + 1, np.uint8)[1:].view("float32").reshape(4, 8)
    assert not raw.flags.aligned        # staged through an aligned copy: the full path
    f(a, b, raw)
    np.testing.assert_array_equal(raw, a + 1)


def test_symbolic_arguments_seen_before_take_the_short_check_with_the_same_safety():
    """A kernel of symbolic shapes (and a float scalar) runs the full checks once per set
    of shapes and scalars; a later call with the same ones is checked as an exact call
    (type, dtype, layout, writeability, overlap on the new addresses), and anything that
    differs takes the full checks again: new sizes bind new sizes, and every error of the
    full checks still comes, with nothing written."""
    f = L.build(_matvec_func("mv_known"))
    sig = f.signature
    assert sig.exact is None and sig.known == {}
    a, x, c = _args(8)
    f(a, x, c, 0.5)
    assert len(sig.known) == 1
    a2, x2, c2 = (v.copy() + 1 for v in (a, x, c))     # other arrays of the same shapes
    cargs, keep, before, after = sig.prepare((a2, x2, c2, 0.5))
    assert cargs == [a2.ctypes.data, x2.ctypes.data, c2.ctypes.data, 0.5, 8]
    assert not before and not after
    f(a2, x2, c2, 0.5)
    np.testing.assert_allclose(c2, a2 * x2 + 0.5, rtol=1e-6, atol=1e-6)
    assert len(sig.known) == 1
    f(a2, x2, c2, 1.5)                  # another scalar: checked, remembered apart
    np.testing.assert_allclose(c2, a2 * x2 + 1.5, rtol=1e-6, atol=1e-6)
    assert len(sig.known) == 2
    for n in (1, 33):                   # new sizes: bound from the new shapes
        an, xn, cn = _args(n)
        f(an, xn, cn, 0.5)
        np.testing.assert_allclose(cn, an * xn + 0.5, rtol=1e-6, atol=1e-6)
        assert sig.prepare((an, xn, cn, 0.5))[0][4] == n
    c[:] = 7
    _expect_error(f, (a, x, a, 0.5), "argument 2 'C'", "overlaps argument 0 'A'")
    buf = np.zeros(8 * 64 + 16, "float32")      # each view alone is exactly right
    _expect_error(f, (buf[:8 * 64].reshape(8, 64), x, buf[16:].reshape(8, 64), 0.5),
                  "argument 2 'C'", "overlaps argument 0 'A'")
    rc = c.copy()
    rc.setflags(write=False)
    _expect_error(f, (a, x, rc, 0.5), "argument 2 'C'", "read-only")
    _expect_error(f, (a.astype("float64"), x, c, 0.5), "argument 0 'A'", "dtype float32")
    _expect_error(f, (a, x, np.zeros((16, 64), "float32")[::2], 0.5), "argument 2 'C'",
                  "C-contiguous")
    _expect_error(f, (a, x, c, "0.5"), "argument 3 'alpha'")
    _expect_error(f, (a, x, c[:4], 0.5), "argument 2 'C'", "(8, 64)")
    assert (c == 7).all()
    f(a, x, c, np.float32(0.5))         # a numpy scalar: the full path, not remembered
    np.testing.assert_allclose(c, a * x + 0.5, rtol=1e-6, atol=1e-6)
    assert all(k[3][0] is float for k in sig.known)
    raw = np.zeros(8 * 64 * 4 + 1, np.uint8)[1:].view("float32").reshape(8, 64)
    assert not raw.flags.aligned        # staged through an aligned copy: the full path
    f(a, x, raw, 0.5)
    np.testing.assert_allclose(raw, a * x + 0.5, rtol=1e-6, atol=1e-6)
