"""Constants and static shapes behave like Python numbers (as TVM's IntImm/FloatImm do)."""
import operator

import numpy as np
import pytest

import tdsl
from tdsl.utils import get_const_tuple


def test_static_shape_dims_are_ints():
    A = tdsl.placeholder((4, 5), name="A")
    assert int(A.shape[0]) == 4 and operator.index(A.shape[1]) == 5
    assert list(range(A.shape[0])) == [0, 1, 2, 3]
    assert np.zeros(A.shape).shape == (4, 5)
    assert [int(d) for d in A.shape] == [4, 5]
    assert A.shape == (4, 5) and A.shape[0] == 4 and A.shape[0] != 5
    assert A.shape[0] < 5 and A.shape[1] >= 5 and not A.shape[0] > 4
    assert {4: "rows"}[A.shape[0]] == "rows" and A.shape[1] in {5, 6}
    assert str(A.shape) == "(4, 5)" and "shape=(4, 5)" in repr(A)
    assert bool(tdsl.const(0)) is False and bool(tdsl.const(3)) is True
    # shapes of computed tensors too
    B = tdsl.compute((A.shape[0] * 2,), lambda i: A[i // 2, 0], name="B")
    assert get_const_tuple(B.shape) == (8,)


def test_float_constants():
    c = tdsl.const(2.5, "float32")
    assert float(c) == 2.5 and int(c) == 2 and c == 2.5 and c > 2 and hash(c) == hash(2.5)
    with pytest.raises(TypeError):
        operator.index(c)      # a float is no index, as in Python


def test_constants_compared_with_constants():
    assert tdsl.const(3) == tdsl.const(3)
    # the same number in another dtype is another constant (passes keep them in dicts)
    assert tdsl.const(3, "int64") != tdsl.const(3, "int32")
    assert tdsl.const(-0.0) != tdsl.const(0.0) and tdsl.const(-0.0) == 0.0
    assert tdsl.const(3, "int64") < tdsl.const(4, "int32")
    assert len({tdsl.const(1, "int32"), tdsl.const(1, "int32"), tdsl.const(1, "int64")}) == 2


def test_numpy_scalars_compare():
    A = tdsl.placeholder((4,), name="A")
    assert A.shape[0] == np.int64(4) and np.int32(4) == A.shape[0]


def test_comparison_with_a_variable_stays_symbolic():
    n = tdsl.var("n")
    e = tdsl.const(3) == n
    assert not isinstance(e, bool)
    with pytest.raises(tdsl.TdslError):
        bool(tdsl.const(3) < n)
    # and works inside a computation
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: tdsl.if_then_else(tdsl.const(2) == i, A[i], 0.0), name="B")
    f = tdsl.build(tdsl.create_schedule(B), [A, B])
    a = np.arange(5, dtype="float32")
    b = np.full(5, 7.0, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, [0, 0, 2, 0, 0])


def test_get_const_tuple():
    assert get_const_tuple((3, np.int64(4), tdsl.const(5))) == (3, 4, 5)
    assert all(type(d) is int for d in get_const_tuple(tdsl.placeholder((2, 3)).shape))
    n = tdsl.var("n")
    with pytest.raises(tdsl.TdslError, match=r"dimension 1 of \(4, n\) is n"):
        get_const_tuple(tdsl.placeholder((4, n)).shape)
