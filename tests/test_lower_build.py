"""lower() and build() end to end: the API.md example, debug printing, default arguments,
mistakes in the argument list and the target."""
import subprocess
import sys

import numpy as np
import pytest

import tdsl
from tdsl.target import vector_bits_in_asm
from tdsl import BuildError, LoweringError


def api_example():
    n = tdsl.var("n")
    A = tdsl.placeholder((n, 128), dtype="float32", name="A")
    W = tdsl.placeholder((64, 128), name="W")
    k = tdsl.reduce_axis((0, 128), name="k")
    Y = tdsl.compute((n, 64), lambda i, j: tdsl.sum(A[i, k] * W[j, k], axis=k), name="Y")
    R = tdsl.compute((n, 64), lambda i, j: tdsl.max(Y[i, j], tdsl.const(0, "float32")), name="R")
    s = tdsl.create_schedule(R)
    s[Y].compute_at(s[R], s[R].op.axis[0])
    io, jo, ii, ji = s[R].tile(R.op.axis[0], R.op.axis[1], 8, 16)
    ko, ki = s[Y].split(s[Y].op.reduce_axis[0], factor=4)
    s[R].vectorize(ji)
    s[Y].unroll(ki)
    s[R].parallel(io)
    return s, A, W, R


@pytest.mark.parametrize("n", [1, 8, 37, 100])
def test_api_md_example(n):
    s, A, W, R = api_example()
    text = str(tdsl.lower(s, [A, W, R]))
    assert "parallel(" in text and "vectorized(16)" in text and "unroll(4)" in text
    f = tdsl.build(s, [A, W, R], target="llvm", name="dense_relu")
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, 128)).astype("float32")
    w = rng.standard_normal((64, 128)).astype("float32")
    r = np.full((n, 64), np.nan, "float32")
    f(a, w, r)
    np.testing.assert_allclose(r, np.maximum(a @ w.T, 0), rtol=1e-4, atol=1e-4)
    host = tdsl.target.Target.host()
    assert "define" in f.get_source()
    assert vector_bits_in_asm(f.get_source("asm")) == host.vector_bits


def test_guards_are_peeled_into_a_main_loop_and_a_tail():
    n = tdsl.var("n")
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = tdsl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(ii)
    text = str(tdsl.lower(s, [A, B]))
    loops = [line.strip() for line in text.splitlines() if line.strip().startswith("for ")]
    # main loop without guard, then a tail loop that keeps the guard
    assert loops[0] == "for i.outer in range(n // 16):"
    assert text.count("if likely(") == 1
    f = tdsl.build(s, [A, B])
    for size in (0, 5, 16, 33):
        a = np.arange(size, dtype="float32")
        b = np.full(size, np.nan, "float32")
        f(a, b)
        np.testing.assert_array_equal(b, a + 1)


def test_multiple_of_fact_removes_the_tail():
    n = tdsl.var("n", multiple_of=16)
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = tdsl.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(ii)
    text = str(tdsl.lower(s, [A, B]))
    assert "likely" not in text and "if " not in text


def test_debug_prints_ir_after_every_pass():
    code = ("import tdsl\n"
            "A = tdsl.placeholder((10,), name='A')\n"
            "B = tdsl.compute((10,), lambda i: A[i] + 1.0, name='B')\n"
            "s = tdsl.create_schedule(B)\n"
            "s[B].split(B.op.axis[0], factor=4)\n"
            "tdsl.lower(s, [A, B])\n")
    env = {"TDSL_DEBUG": "2", "PATH": "/usr/bin:/bin"}
    import os
    env.update({k: v for k, v in os.environ.items() if k not in env})
    env["TDSL_DEBUG"] = "2"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    for name in ("schedule_ops", "simplify", "loop_partition", "storage_flatten"):
        assert f"# after {name}" in out.stderr
    assert "likely(" in out.stderr  # the guard, before partitioning removes it


def test_default_args_are_placeholders_then_outputs():
    A = tdsl.placeholder((4,), name="A")
    B = tdsl.placeholder((4,), name="B")
    C = tdsl.compute((4,), lambda i: A[i] - B[i], name="C")
    s = tdsl.create_schedule(C)
    f = tdsl.build(s)
    c = np.zeros(4, "float32")
    f(np.ones(4, "float32"), np.full(4, 3, "float32"), c)
    np.testing.assert_array_equal(c, -2)


def test_scalar_var_argument():
    alpha = tdsl.var("alpha", dtype="float32")
    A = tdsl.placeholder((6,), name="A")
    B = tdsl.compute((6,), lambda i: A[i] * alpha, name="B")
    s = tdsl.create_schedule(B)
    f = tdsl.build(s, [A, alpha, B])
    b = np.zeros(6, "float32")
    f(np.arange(6, dtype="float32"), 2.5, b)
    np.testing.assert_allclose(b, np.arange(6) * 2.5)


def test_missing_input_in_args():
    A = tdsl.placeholder((4,), name="A")
    B = tdsl.compute((4,), lambda i: A[i] + 1, name="B")
    s = tdsl.create_schedule(B)
    with pytest.raises(LoweringError, match="placeholder 'A' is read but not in the argument list"):
        tdsl.lower(s, [B])


def test_missing_output_in_args():
    A = tdsl.placeholder((4,), name="A")
    B = tdsl.compute((4,), lambda i: A[i] + 1, name="B")
    s = tdsl.create_schedule(B)
    with pytest.raises(LoweringError, match="output 'B' is not in the argument list"):
        tdsl.lower(s, [A])


def test_undefined_scalar_var():
    x = tdsl.var("x", dtype="float32")
    A = tdsl.placeholder((4,), name="A")
    B = tdsl.compute((4,), lambda i: A[i] + x, name="B")
    s = tdsl.create_schedule(B)
    with pytest.raises(LoweringError, match="variable\\(s\\) x are used but neither passed"):
        tdsl.lower(s, [A, B])


def test_compute_at_with_a_reader_outside_the_loop():
    A = tdsl.placeholder((8,), name="A")
    P = tdsl.compute((8,), lambda i: A[i] * 2, name="P")
    X = tdsl.compute((8,), lambda i: P[i] + 1, name="X")
    Y = tdsl.compute((8,), lambda i: P[i] + X[i], name="Y")
    s = tdsl.create_schedule(Y)
    s[P].compute_at(s[X], X.op.axis[0])
    with pytest.raises(LoweringError, match="also read by 'Y', which runs outside that loop"):
        tdsl.lower(s, [A, Y])


def test_unknown_target():
    A = tdsl.placeholder((4,), name="A")
    B = tdsl.compute((4,), lambda i: A[i] + 1, name="B")
    s = tdsl.create_schedule(B)
    with pytest.raises(BuildError, match="target"):
        tdsl.build(s, [A, B], target="fpga")
    with pytest.raises(BuildError):
        tdsl.build(s, [A, B], target="")


def test_export_library_loads_in_a_fresh_process(tmp_path):
    s, A, W, R = api_example()
    f = tdsl.build(s, [A, W, R], name="dense_relu")
    path = str(tmp_path / "dense_relu.so")
    f.export_library(path)
    code = ("import numpy as np, tdsl\n"
            f"m = tdsl.load_module({path!r})\n"
            "a = np.ones((3, 128), 'float32'); w = np.ones((64, 128), 'float32')\n"
            "r = np.zeros((3, 64), 'float32'); m(a, w, r); print(r.sum())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == 3 * 64 * 128


def test_loop_partition_keeps_the_tail_of_an_unguarded_call():
    """A loop whose stores are all behind `likely(v < 2)` but which also makes a call (a
    tensor intrinsic writing through its pointers) keeps its tail iterations for the
    call: the double-buffered tensor-core GEMM with an odd number of k steps lost its
    last step's mma this way."""
    from tdsl.ir import expr as E, stmt as S
    from tdsl.passes.loop_partition import loop_partition
    v = E.Var("v", "int32")
    X = S.Buffer("X", (E.const(4),), "float32")
    call = S.Evaluate(E.Call("intrin", (v,), "int32", extern=True))
    body = S.seq(S.IfThenElse(E.likely(E.LT(v, E.const(2))),
                              S.BufferStore(X, E.const(1.0, "float32"), (v,))), call)
    loop = S.For(v, E.const(0), E.const(4), S.ForKind.SERIAL, body)
    out = loop_partition(S.PrimFunc("f", (X,), loop))
    loops = []
    from tdsl.ir.visitor import walk
    walk(out.body, lambda n: loops.append(n) if isinstance(n, S.For) else None)
    covered = sum(int(f.extent.value) for f in loops if "intrin" in str(f.body))
    assert covered == 4, str(out.body)


@pytest.mark.parametrize("attach", [False, True])
def test_reduction_bounded_by_the_output_position(attach):
    """A reduce axis whose bounds depend on the output position (a conv's taps that stay
    inside its input, cpu/conv_blocked.py): computed at root, and attached inside its
    consumer's loop, where the output axis is a loop of one iteration inside the
    reduction, its loops run only the taps inside; the first output has none."""
    n, K, pad = 9, 3, 3
    A = tdsl.placeholder((n, 16), name="A")

    def f(i, j):
        first = i - pad
        k = tdsl.reduce_axis((tdsl.max(0, -first), tdsl.min(K, n - first)), "k")
        return tdsl.sum(A[first + k, j], axis=k)
    B = tdsl.compute((n + 2 * pad - K + 1, 16), f, name="B")
    C = tdsl.compute(B.shape, lambda i, j: B[i, j] * 2.0, name="C")
    s = tdsl.create_schedule(C)
    if attach:
        s[B].compute_at(s[C], C.op.axis[0])
        i, j = s[B].op.axis
        s[B].reorder(s[B].op.reduce_axis[0], i, j)
        s[B].vectorize(j)
    m = tdsl.build(s, [A, C])
    a = np.random.default_rng(0).standard_normal((n, 16)).astype("float32")
    c = np.full(C.shape, np.nan, "float32")
    m(a, c)
    ap = np.pad(a, ((pad, pad), (0, 0)))
    ref = 2 * sum(ap[k:k + c.shape[0]] for k in range(K))
    np.testing.assert_allclose(c, ref, rtol=1e-6)
    assert np.all(c[0] == 0)
