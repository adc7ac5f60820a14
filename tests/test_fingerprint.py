"""Schedule fingerprints (the key of build()'s cache of whole builds): equal schedules made
independently agree; any difference lowering could see changes the fingerprint; what
cannot be captured faithfully gives None (no caching) rather than a guess."""
import numpy as np

import tdsl
from tdsl.fingerprint import fingerprint


def _matvec(factor=8, dtype="float32", reducer=None, two_sizes=False, tag="", attrs=None):
    n = tdsl.var("n")
    m = tdsl.var("n") if two_sizes else n          # a distinct variable with the same name
    A = tdsl.placeholder((n, m), dtype=dtype, name="A")
    x = tdsl.placeholder((m,), dtype=dtype, name="x")
    k = tdsl.reduce_axis((0, m), name="k")
    red = reducer or tdsl.sum
    y = tdsl.compute((n,), lambda i: red(A[i, k] * x[k], axis=k), name="y", tag=tag, attrs=attrs)
    s = tdsl.create_schedule(y)
    s[y].split(y.op.axis[0], factor=factor)
    return s, [A, x, y]


def _fp(s, args, name="main"):
    return fingerprint(s, args, name)


def test_equal_schedules_agree():
    assert _fp(*_matvec()) == _fp(*_matvec()) is not None


def test_differences_change_the_fingerprint():
    base = _fp(*_matvec())
    others = [_fp(*_matvec(factor=4)), _fp(*_matvec(dtype="float64")),
              _fp(*_matvec(two_sizes=True)), _fp(*_matvec(tag="t")),
              _fp(*_matvec(attrs={"k": 1})), _fp(*_matvec(), name="other")]
    s, (A, x, y) = _matvec()
    others.append(_fp(s, [x, A, y]))                   # argument order
    s, args = _matvec()
    s[args[2]].parallel(s[args[2]].leaf_iter_vars[0])  # one more annotation
    others.append(_fp(s, args))
    assert None not in others and len(set(others + [base])) == len(others) + 1


def test_expressions_differing_only_in_dtype():
    def kernel(dtype):
        A = tdsl.placeholder((4,), dtype="int64", name="A")
        B = tdsl.compute((4,), lambda i: (A[i].astype(dtype) * 100).astype("int64"), name="B")
        return tdsl.create_schedule(B), [A, B]
    assert _fp(*kernel("int32")) != _fp(*kernel("int8"))
    a = np.array([1, 2, 3, 4], "int64")
    for dtype in ("int32", "int8"):                     # int8 wraps around
        out = np.zeros(4, "int64")
        tdsl.build(*kernel(dtype))(a, out)
        np.testing.assert_array_equal(out, (a.astype(dtype) * np.array(100, dtype)).astype("int64"))


def test_reducers_are_captured_by_what_they_compute():
    add = tdsl.comm_reducer(lambda a, b: a + b, lambda t: tdsl.const(0, t), name="r")
    mul = tdsl.comm_reducer(lambda a, b: a * b, lambda t: tdsl.const(1, t), name="r")
    assert _fp(*_matvec(reducer=add)) != _fp(*_matvec(reducer=mul))
    # and the builds that follow are the right ones, one after the other
    a = np.random.default_rng(0).uniform(0.5, 1.5, (8, 8)).astype("float32")
    v = np.random.default_rng(1).uniform(0.5, 1.5, 8).astype("float32")
    for red, ref in ((add, lambda p: p.sum(1)), (mul, lambda p: p.prod(1))):
        s, args = _matvec(reducer=red)
        f = tdsl.build(s, args)
        out = np.zeros(8, "float32")
        f(a, v, out)
        np.testing.assert_allclose(out, ref(a * v), rtol=1e-5)


def test_uncapturable_objects_give_no_fingerprint():
    s, args = _matvec(attrs={"callback": lambda: 0})
    assert _fp(s, args) is None
    f = tdsl.build(s, args)                             # still builds, uncached
    a, v, out = np.ones((8, 8), "float32"), np.ones(8, "float32"), np.zeros(8, "float32")
    f(a, v, out)
    np.testing.assert_array_equal(out, np.full(8, 8.0))
