"""LLVM backend vector accesses that are neither plain vectors nor gathers: loads with a
small constant stride (one contiguous span and a shuffle), contiguous accesses of a
width that is not a power of two (one masked access of the next power of two) and square
tiles read transposed (rows, then shuffles in registers). Each is run on data that ends at
an unreadable page, so a read past the last element the serial loop touches would fault."""
import ctypes
import mmap

import numpy as np
import pytest

from tdsl.codegen import llvm as L
from tdsl.target import Target
from tdsl.ir import expr as E
from tdsl.ir.expr import BufferLoad as Ld, IntImm as I
from tdsl.ir.stmt import Buffer, BufferStore as St, For, ForKind as K, IfThenElse, PrimFunc

PAGE = mmap.PAGESIZE


def buf(name, n, dtype="float32"):
    return Buffer(name, (I(n),), dtype, "global")


class PageEnd:
    """`n` elements whose last one ends a page followed by an unreadable page."""

    def __init__(self, n, dtype="float32"):
        size = np.dtype(dtype).itemsize
        pages = -(-n * size // PAGE) + 1
        self.mm = mmap.mmap(-1, (pages + 1) * PAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        libc = ctypes.CDLL(None)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        assert libc.mprotect(base + pages * PAGE, PAGE, 0) == 0
        whole = np.frombuffer(self.mm, dtype, count=pages * PAGE // size)
        self.array = whole[whole.size - n:]


def _strided(n_out, stride, lanes, masked):
    """B[j] = A[j * stride] (+ a lane-varying select when masked), j vectorized."""
    n_in = (n_out - 1) * stride + 1
    A, B = buf("A", n_in), buf("B", n_out)
    io, iv = E.Var("io"), E.Var("iv")
    j = io * lanes + iv
    val = Ld(A, (j * stride,))
    if masked:
        val = E.select(j % 3 != 1, val, E.const(-1.0, "float32"))
    body = For(io, I(0), I(n_out // lanes), K.SERIAL, For(iv, I(0), I(lanes), K.VECTORIZED, St(B, val, (j,))))
    return PrimFunc(f"strided{stride}{int(masked)}", [A, B], body, {"num_user_args": 2}), n_in


@pytest.mark.parametrize("stride", [2, 3, 4])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("lanes", [8, 16])
def test_constant_stride_load_reads_one_span_and_stays_in_bounds(stride, masked, lanes):
    n_out = 4 * lanes
    f, n_in = _strided(n_out, stride, lanes, masked)
    src = L.codegen(f)[0]
    assert "masked.gather" not in src and "shufflevector" in src
    m = L.build(f)
    a = PageEnd(n_in).array
    a[:] = np.arange(n_in, dtype=np.float32)
    b = np.zeros(n_out, np.float32)
    m(a, b)
    want = a[::stride].copy()
    if masked:
        want[np.arange(n_out) % 3 == 1] = -1
    np.testing.assert_array_equal(b, want)


@pytest.mark.parametrize("lanes", [3, 7, 14])
@pytest.mark.parametrize("guarded", [False, True])
def test_odd_width_contiguous_access_is_one_masked_access(lanes, guarded):
    """B[i] = A[i] * 2 over n elements in vectors of `lanes`; guarded: a lane-varying
    `if likely(i < n - 2)` masks the last lanes."""
    n = 5 * lanes
    A, B = buf("A", n), buf("B", n)
    io, iv = E.Var("io"), E.Var("iv")
    i = io * lanes + iv
    st = St(B, Ld(A, (i,)) * E.const(2.0, "float32"), (i,))
    if guarded:
        st = IfThenElse(E.likely(i < n - 2), st)
    body = For(io, I(0), I(5), K.SERIAL, For(iv, I(0), I(lanes), K.VECTORIZED, st))
    f = PrimFunc(f"odd{lanes}{int(guarded)}", [A, B], body, {"num_user_args": 2})
    w = 1 << (lanes - 1).bit_length()
    src = L.codegen(f)[0]
    assert f"llvm.masked.load.v{w}f32" in src
    # masked stores only with AVX-512 (AVX's are microcoded on AMD cores)
    assert (f"llvm.masked.store.v{w}f32" in src) == (Target("llvm").vector_bits >= 512)
    m = L.build(f)
    a = PageEnd(n).array
    a[:] = np.arange(n, dtype=np.float32) + 1
    b = PageEnd(n).array
    b[:] = 7
    m(a, b)
    want = a * 2
    if guarded:
        want[n - 2:] = 7
    np.testing.assert_array_equal(b, want)


def _transpose(rows, cols, n, dtype, select):
    """B[c, r] = A[r, c] over an (rows, cols) A, in n x n tiles: c.inner unrolled around
    r.inner vectorized; with select=True the read is behind a lane-varying select."""
    A, B = buf("A", rows * cols, dtype), buf("B", rows * cols, dtype)
    ro, co, ci, ri = E.Var("ro"), E.Var("co"), E.Var("ci"), E.Var("ri")
    r, c = ro * n + ri, co * n + ci
    val = Ld(A, (r * cols + c,))
    if select:
        val = E.select(r % 3 != 1, val, E.const(7, dtype))
    body = For(ri, I(0), I(n), K.VECTORIZED, St(B, val, (c * rows + r,)))
    body = For(co, I(0), I(cols // n), K.SERIAL, For(ci, I(0), I(n), K.UNROLLED, body))
    body = For(ro, I(0), I(rows // n), K.SERIAL, body)
    return PrimFunc(f"transpose_{dtype}_{n}_{int(select)}", [A, B], body, {"num_user_args": 2})


@pytest.mark.parametrize("dtype,n", [("float32", 16), ("float32", 8), ("float32", 4),
                                     ("uint8", 16), ("int16", 8), ("float64", 8)])
@pytest.mark.parametrize("select", [False, True])
def test_transposed_tile_is_read_as_rows_and_shuffled(dtype, n, select):
    """A square tile read contiguously along the unrolled loop and strided along the lanes
    is read as rows and transposed with shuffles, no gather, and reads nothing outside A;
    behind a lane-varying select (which reads only the chosen lanes) it stays a gather."""
    rows, cols = 3 * n, 2 * n
    f = _transpose(rows, cols, n, dtype, select)
    src = L.codegen(f)[0]
    assert ("masked.gather" in src) == select
    m = L.build(f)
    a = PageEnd(rows * cols, dtype).array
    a[:] = np.arange(rows * cols) % 251
    b = np.zeros(rows * cols, dtype)
    m(a, b)
    want = a.reshape(rows, cols).T
    if select:
        want = np.where(np.arange(rows) % 3 != 1, want, 7)
    np.testing.assert_array_equal(b.reshape(cols, rows), want)
