"""The tensor-expression layer through the whole pipeline, against numpy."""
import numpy as np
import pytest

import tdsl


def run(outs, ins, arrays, out_shapes, out_dtypes, sched=None):
    outs = outs if isinstance(outs, list) else [outs]
    s = tdsl.create_schedule(outs)
    if sched:
        sched(s)
    f = tdsl.build(s, ins + outs)
    results = [np.zeros(shape, dtype) for shape, dtype in zip(out_shapes, out_dtypes)]
    f(*arrays, *results)
    return results if len(results) > 1 else results[0]


def test_axis_names_come_from_the_lambda():
    A = tdsl.placeholder((3, 4), name="A")
    B = tdsl.compute((3, 4), lambda row, col: A[row, col] + 1, name="B")
    assert [iv.var.name for iv in B.op.axis] == ["row", "col"]
    assert B.ndim == 2 and B.dtype == "float32" and B.name == "B"
    assert "for row in range(3)" in str(tdsl.lower(tdsl.create_schedule(B), [A, B]))


@pytest.mark.parametrize("red,ref", [(tdsl.sum, np.sum), (tdsl.max, np.max), (tdsl.min, np.min),
                                     (tdsl.prod, np.prod)])
def test_reducers(red, ref):
    A = tdsl.placeholder((5, 7), name="A")
    k = tdsl.reduce_axis((0, 7), name="k")
    B = tdsl.compute((5,), lambda i: red(A[i, k], axis=k), name="B")
    a = np.random.default_rng(0).uniform(0.5, 1.5, (5, 7)).astype("float32")
    np.testing.assert_allclose(run(B, [A], [a], [(5,)], ["float32"]), ref(a, axis=1), rtol=1e-5)


def test_two_reduction_axes_where_and_init():
    A = tdsl.placeholder((4, 6, 5), name="A")
    j = tdsl.reduce_axis((0, 6), name="j")
    k = tdsl.reduce_axis((1, 5), name="k")   # a non-zero lower bound
    B = tdsl.compute((4,), lambda i: tdsl.sum(A[i, j, k], axis=[j, k], where=j > k, init=10.0), name="B")
    a = np.random.default_rng(1).standard_normal((4, 6, 5)).astype("float32")
    jj, kk = np.meshgrid(np.arange(6), np.arange(5), indexing="ij")
    mask = (jj > kk) & (kk >= 1)
    ref = 10.0 + (a * mask).sum(axis=(1, 2))
    np.testing.assert_allclose(run(B, [A], [a], [(4,)], ["float32"]), ref, rtol=1e-5)


def test_comm_reducer_user_defined():
    absmax = tdsl.comm_reducer(lambda x, y: tdsl.max(tdsl.abs(x), tdsl.abs(y)),
                               lambda t: tdsl.const(0, t), name="absmax")
    A = tdsl.placeholder((3, 9), name="A")
    k = tdsl.reduce_axis((0, 9), name="k")
    B = tdsl.compute((3,), lambda i: absmax(A[i, k], axis=k), name="B")
    a = np.random.default_rng(2).standard_normal((3, 9)).astype("float32")
    np.testing.assert_allclose(run(B, [A], [a], [(3,)], ["float32"]), np.abs(a).max(axis=1))


def test_elementwise_max_min_of_two_values():
    A = tdsl.placeholder((8,), name="A")
    B = tdsl.compute((8,), lambda i: tdsl.min(tdsl.max(A[i], 0.0), 0.5), name="B")
    a = np.linspace(-1, 1, 8).astype("float32")
    np.testing.assert_allclose(run(B, [A], [a], [(8,)], ["float32"]), np.clip(a, 0, 0.5))


def test_floor_division_and_modulo_follow_python():
    A = tdsl.placeholder((13,), dtype="int32", name="A")
    B = tdsl.compute((13,), lambda i: A[i] // 3 + (A[i] % 4) * 100 + (i - 6) // 4 * 10000, name="B")
    a = np.arange(-6, 7, dtype="int32")
    ref = a // 3 + (a % 4) * 100 + (np.arange(13) - 6) // 4 * 10000
    np.testing.assert_array_equal(run(B, [A], [a], [(13,)], ["int32"]), ref)


def test_select_if_then_else_all_any_and_logic():
    A = tdsl.placeholder((10,), name="A")
    B = tdsl.compute((10,), lambda i: tdsl.if_then_else(
        tdsl.all(i > 1, i < 8, ~(i == 4)), A[i], tdsl.select(tdsl.any(i == 0, i == 9), -1.0, 0.0)), name="B")
    a = np.arange(10, dtype="float32") + 0.5
    i = np.arange(10)
    ref = np.where((i > 1) & (i < 8) & (i != 4), a, np.where((i == 0) | (i == 9), -1.0, 0.0))
    np.testing.assert_array_equal(run(B, [A], [a], [(10,)], ["float32"]), ref)


def test_padding_reads_stay_in_bounds():
    A = tdsl.placeholder((6,), name="A")
    B = tdsl.compute((8,), lambda i: tdsl.if_then_else(tdsl.all(i >= 1, i < 7), A[i - 1], 0.0), name="B")
    a = np.arange(1, 7, dtype="float32")
    np.testing.assert_array_equal(run(B, [A], [a], [(8,)], ["float32"]), np.pad(a, 1))


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs",
                                  "floor", "ceil", "round"])
def test_math_intrinsics(name):
    import math
    refs = {"rsqrt": lambda x: 1 / np.sqrt(x), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
            "erf": np.vectorize(math.erf), "round": np.round}
    A = tdsl.placeholder((64,), name="A")
    fn = getattr(tdsl, name)
    B = tdsl.compute((64,), lambda i: fn(A[i]), name="B")
    a = np.linspace(0.05, 3.3, 64).astype("float32")
    if name in ("abs", "floor", "ceil", "round", "tanh", "erf"):
        a = a - 1.7
    ref = refs.get(name, getattr(np, name, None))(a.astype("float64"))
    out = run(B, [A], [a], [(64,)], ["float32"])
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=2e-6)


def test_power_operator():
    A = tdsl.placeholder((5,), name="A")
    B = tdsl.compute((5,), lambda i: A[i] ** 2.5 + tdsl.power(A[i], 0.5), name="B")
    a = np.arange(1, 6, dtype="float32")
    np.testing.assert_allclose(run(B, [A], [a], [(5,)], ["float32"]), a ** 2.5 + a ** 0.5, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int16", "int32", "int64",
                                   "uint8", "uint32"])
def test_every_dtype_through_compute(dtype):
    A = tdsl.placeholder((16,), dtype=dtype, name="A")
    B = tdsl.compute((16,), lambda i: A[i] * 2 + 1, name="B")
    C = tdsl.compute((16,), lambda i: (A[i] > 3).astype("int32") + tdsl.cast(A[i], "float32").astype("int32"),
                     name="C")
    a = np.arange(16).astype(dtype)
    b, c = run([B, C], [A], [a], [(16,), (16,)], [dtype, "int32"],
               sched=lambda s: s[B].vectorize(B.op.axis[0]))
    np.testing.assert_array_equal(b, (a * 2 + 1).astype(dtype))
    np.testing.assert_array_equal(c, (a > 3).astype("int32") + a.astype("float32").astype("int32"))


def test_bool_tensors():
    A = tdsl.placeholder((6,), dtype="bool", name="A")
    B = tdsl.compute((6,), lambda i: A[i] & (i % 2 == 0), name="B")
    a = np.array([1, 1, 0, 1, 1, 0], dtype=bool)
    np.testing.assert_array_equal(run(B, [A], [a], [(6,)], ["bool"]), a & (np.arange(6) % 2 == 0))


def test_mixed_dtypes_promote():
    A = tdsl.placeholder((4,), dtype="int32", name="A")
    B = tdsl.placeholder((4,), dtype="float64", name="B")
    C = tdsl.compute((4,), lambda i: A[i] + B[i] * 0.5, name="C")
    assert C.dtype == "float64"
    a = np.arange(4, dtype="int32")
    b = np.ones(4, dtype="float64")
    np.testing.assert_array_equal(run(C, [A, B], [a, b], [(4,)], ["float64"]), a + b * 0.5)


def test_size_var_and_symbolic_shapes_in_expressions():
    n = tdsl.size_var("n")
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n - 1,), lambda i: A[i + 1] - A[i], name="B")
    s = tdsl.create_schedule(B)
    f = tdsl.build(s, [A, B])
    for size in (2, 9, 40):
        a = (np.arange(size, dtype="float32") ** 2)
        b = np.zeros(size - 1, "float32")
        f(a, b)
        np.testing.assert_array_equal(b, np.diff(a))
