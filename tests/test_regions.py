"""Reads outside a tensor's shape are refused: at build time with constant sizes, at call
time with symbolic ones (tdsl.te.regions); reads under a condition count only where the
condition can hold."""
import numpy as np
import pytest

import tdsl
from tdsl.runtime.ndarray import opencl

TARGETS = ["llvm", "c"] + (["opencl"] if opencl(0).exist else [])


def shifted(n):
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: A[i + 1], name="B")
    return A, B


@pytest.mark.parametrize("target", TARGETS)
def test_constant_sizes_fail_to_build(target):
    A, B = shifted(8)
    s = tdsl.create_schedule(B)
    if target == "opencl":
        xo, xi = s[B].split(B.op.axis[0], factor=4)
        s[B].bind(xo, tdsl.thread_axis("blockIdx.x"))
        s[B].bind(xi, tdsl.thread_axis("threadIdx.x"))
    with pytest.raises(tdsl.LoweringError) as e:
        tdsl.build(s, [A, B], target=target)
    msg = str(e.value)
    assert "'B'" in msg and "'A'" in msg and "axis 0" in msg and "1..8" in msg and "extent is 8" in msg


@pytest.mark.parametrize("target", TARGETS)
def test_symbolic_sizes_fail_at_call(target):
    n = tdsl.var("n")
    A, B = shifted(n)
    s = tdsl.create_schedule(B)
    if target == "opencl":
        xo, xi = s[B].split(B.op.axis[0], factor=4)
        s[B].bind(xo, tdsl.thread_axis("blockIdx.x"))
        s[B].bind(xi, tdsl.thread_axis("threadIdx.x"))
    f = tdsl.build(s, [A, B], target=target)
    b = np.full(6, 7, "f")
    with pytest.raises(tdsl.ArgumentError) as e:
        f(np.arange(6, dtype="f"), b)
    msg = str(e.value)
    assert "argument 0 'A'" in msg and "'B'" in msg and "axis 0" in msg and "1..6" in msg
    assert "extent is 6" in msg and "n=6" in msg
    assert (b == 7).all()                      # nothing was written
    f(np.zeros(0, "f"), np.zeros(0, "f"))      # no iteration, no read: fine


def test_in_bounds_symbolic_reads_carry_no_check():
    n = tdsl.var("n")
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n - 1,), lambda i: A[i + 1] - A[i], name="B")
    f = tdsl.build(tdsl.create_schedule(B), [A, B])
    assert "regions" not in f.signature.raw
    a = np.arange(10, dtype="f") ** 2
    b = np.empty(9, "f")
    f(a, b)
    np.testing.assert_allclose(b, np.diff(a))


def test_padding_under_if_then_else_is_legal():
    A = tdsl.placeholder((4, 64), name="A")
    B = tdsl.compute((6, 64), lambda y, x: tdsl.if_then_else(
        tdsl.all(y >= 1, y <= 4), A[y - 1, x], tdsl.const(0, "float32")), name="B")
    f = tdsl.build(tdsl.create_schedule(B), [A, B])
    a = np.random.default_rng(0).standard_normal((4, 64)).astype("f")
    b = np.empty((6, 64), "f")
    f(a, b)
    np.testing.assert_array_equal(b, np.pad(a, ((1, 1), (0, 0))))


def test_conv_padding_with_compound_conditions_is_legal():
    H = tdsl.var("H")
    A = tdsl.placeholder((H,), name="A")
    k = tdsl.reduce_axis((0, 3), name="k")
    B = tdsl.compute((H,), lambda i: tdsl.sum(tdsl.if_then_else(
        tdsl.all(i + k >= 1, i + k < H + 1), A[i + k - 1], tdsl.const(0, "float32")), axis=k), name="B")
    f = tdsl.build(tdsl.create_schedule(B), [A, B])
    assert "regions" not in f.signature.raw
    a = np.arange(7, dtype="f")
    b = np.empty(7, "f")
    f(a, b)
    np.testing.assert_allclose(b, np.convolve(a, np.ones(3, "f"), "same"))


def test_where_condition_narrows_a_reduction():
    A = tdsl.placeholder((8,), name="A")
    k = tdsl.reduce_axis((0, 10), name="k")
    B = tdsl.compute((1,), lambda i: tdsl.sum(A[k], axis=k, where=k < 8), name="B")
    f = tdsl.build(tdsl.create_schedule(B), [A, B])
    b = np.empty(1, "f")
    f(np.arange(8, dtype="f"), b)
    assert b[0] == 28


def test_an_else_branch_is_narrowed_by_the_negated_condition():
    A = tdsl.placeholder((8,), name="A")
    B = tdsl.compute((10,), lambda i: tdsl.if_then_else(i >= 8, tdsl.const(0, "float32"), A[i]), name="B")
    f = tdsl.build(tdsl.create_schedule(B), [A, B])
    b = np.empty(10, "f")
    f(np.arange(8, dtype="f") + 1, b)
    np.testing.assert_array_equal(b, np.r_[np.arange(8) + 1, 0, 0])


def test_a_read_outside_any_condition_still_fails():
    A = tdsl.placeholder((8,), name="A")
    C = tdsl.compute((10,), lambda i: A[i - 1] + tdsl.if_then_else(i >= 1, A[0], A[1]), name="C")
    with pytest.raises(tdsl.LoweringError, match="'C' reads 'A'"):
        tdsl.lower(tdsl.create_schedule(C), [A, C])


def test_reads_of_intermediates_are_checked():
    A = tdsl.placeholder((8,), name="A")
    B = tdsl.compute((8,), lambda i: A[i] * 2, name="B")
    C = tdsl.compute((8,), lambda i: B[i + 1], name="C")
    for inline in (False, True):
        s = tdsl.create_schedule(C)
        if inline:
            s[B].compute_inline()
        with pytest.raises(tdsl.LoweringError, match="'C' reads 'B'"):
            tdsl.lower(s, [A, C])


def test_gather_indices_are_not_decided_here():
    A = tdsl.placeholder((8,), name="A")
    I = tdsl.placeholder((4,), dtype="int32", name="I")
    B = tdsl.compute((4,), lambda i: A[I[i]], name="B")
    f = tdsl.build(tdsl.create_schedule(B), [A, I, B])
    b = np.empty(4, "f")
    f(np.arange(8, dtype="f"), np.array([7, 0, 3, 3], "i4"), b)
    np.testing.assert_array_equal(b, [7, 0, 3, 3])


def test_an_exported_library_keeps_the_check(tmp_path):
    n = tdsl.var("n")
    A, B = shifted(n)
    f = tdsl.build(tdsl.create_schedule(B), [A, B])
    path = str(tmp_path / "shifted.so")
    f.export_library(path)
    g = tdsl.load_module(path)
    with pytest.raises(tdsl.ArgumentError, match="outside its shape"):
        g(np.zeros(4, "f"), np.zeros(4, "f"))
