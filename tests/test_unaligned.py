"""Unaligned arrays (valid numpy: `np.frombuffer` at an odd offset, a slice of a network
buffer) are accepted by built modules, staged through aligned buffers; results match
numpy and written arguments receive the output."""
import numpy as np
import pytest

import tdsl


def _unaligned(shape, dtype, fill=None, rng=None):
    """A C-contiguous array whose address is 1 byte past an aligned one."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    buf = bytearray(n * dt.itemsize + 1)
    a = np.frombuffer(buf, dtype=dt, count=n, offset=1).reshape(shape)
    assert not a.flags.aligned and a.flags.c_contiguous and a.flags.writeable
    if rng is not None:
        a[...] = rng.standard_normal(shape).astype(dt)
    elif fill is not None:
        a[...] = fill
    return a


def _matmul_module(n, target="llvm"):
    A = tdsl.placeholder((n, n), name="A")
    B = tdsl.placeholder((n, n), name="B")
    k = tdsl.reduce_axis((0, n), name="k")
    C = tdsl.compute((n, n), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tdsl.create_schedule(C)
    if target == "llvm":
        jo, ji = s[C].split(C.op.axis[1], factor=8)
        s[C].vectorize(ji)                       # vector loads and stores on the buffers
        s[C].parallel(C.op.axis[0])
    else:
        s[C].bind(C.op.axis[0], tdsl.thread_axis("blockIdx.x"))
        s[C].bind(C.op.axis[1], tdsl.thread_axis("threadIdx.x"))
    return tdsl.build(s, [A, B, C], target=target)


def test_unaligned_inputs_and_output_match_numpy():
    rng = np.random.default_rng(0)
    f = _matmul_module(24)
    a = _unaligned((24, 24), "float32", rng=rng)
    b = _unaligned((24, 24), "float32", rng=rng)
    c = _unaligned((24, 24), "float32", fill=np.nan)
    f(a, b, c)                                     # the caller's unaligned array is written
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    # mixed with aligned arguments, and float64 / int32 element sizes
    c2 = np.zeros((24, 24), np.float32)
    f(np.ascontiguousarray(a), b, c2)
    np.testing.assert_allclose(c2, a @ b, rtol=1e-5, atol=1e-5)

    X = tdsl.placeholder((37,), dtype="int32", name="X")
    Y = tdsl.compute((37,), lambda i: X[i] * 3 + 1, name="Y")
    g = tdsl.build(tdsl.create_schedule(Y), [X, Y])
    x = _unaligned((37,), "int32", fill=np.arange(37, dtype=np.int32))
    y = _unaligned((37,), "int32", fill=0)
    g(x, y)
    np.testing.assert_array_equal(y, np.arange(37) * 3 + 1)


def test_prepared_and_time_evaluator_restage_unaligned_arrays():
    rng = np.random.default_rng(1)
    f = _matmul_module(16)
    a = _unaligned((16, 16), "float32", rng=rng)
    b = _unaligned((16, 16), "float32", rng=rng)
    c = _unaligned((16, 16), "float32", fill=0)
    run = f.prepared(a, b, c)
    run()
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    a[...] = rng.standard_normal((16, 16)).astype(np.float32)   # new contents, same buffer
    run()
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    c[...] = 0
    prof = f.time_evaluator(number=2, repeat=2)(a, b, c)
    assert prof.mean > 0
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_unaligned_arrays_still_get_the_other_checks():
    f = _matmul_module(8)
    a = _unaligned((8, 8), "float32", fill=1)
    b = _unaligned((8, 8), "float32", fill=1)
    with pytest.raises(tdsl.ArgumentError, match="argument 2 'C'.*read-only"):
        c = np.frombuffer(bytes(8 * 8 * 4 + 1), np.float32, count=64, offset=1).reshape(8, 8)
        f(a, b, c)
    with pytest.raises(tdsl.ArgumentError, match="argument 1 'B'.*shape"):
        f(a, _unaligned((8, 7), "float32"), np.zeros((8, 8), np.float32))
    # a written argument overlapping an input is refused on the caller's memory, even
    # though both would be staged through separate copies
    buf = bytearray(8 * 8 * 4 + 1)
    same = np.frombuffer(buf, np.float32, count=64, offset=1).reshape(8, 8)
    with pytest.raises(tdsl.ArgumentError, match="overlaps"):
        f(same, b, same)


def test_unaligned_arrays_on_the_c_target():
    """GPU-style modules copy host arrays to the device; unaligned ones are fine there."""
    rng = np.random.default_rng(2)
    f = _matmul_module(8, target="c")
    a = _unaligned((8, 8), "float32", rng=rng)
    b = _unaligned((8, 8), "float32", rng=rng)
    c = _unaligned((8, 8), "float32", fill=np.nan)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
