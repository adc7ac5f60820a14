"""BLAS for the shipped extern functions (`tvm.contrib.cblas.matmul`): the OpenBLAS that
numpy bundles (its CBLAS symbols carry a prefix and a suffix, `scipy_cblas_sgemm64_` with
64-bit integers), else a system libopenblas / libcblas / libblas.

The adapter is a Python function over numpy arrays: its call costs ~10 us next to the
GEMM, and it needs no compiler."""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os

from ..errors import TdslError

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
# (symbol pattern, integer type): ILP64 builds take 64-bit sizes
_VARIANTS = (("scipy_cblas_{}64_", ctypes.c_int64), ("cblas_{}64_", ctypes.c_int64),
             ("scipy_cblas_{}", ctypes.c_int), ("cblas_{}", ctypes.c_int))
_found = {}


def _candidates():
    import numpy as np
    root = os.path.dirname(np.__file__)
    yield from sorted(glob.glob(os.path.join(os.path.dirname(root), "numpy.libs", "*blas*.so*")))
    yield from sorted(glob.glob(os.path.join(root, ".libs", "*blas*.so*")))
    for name in ("openblas", "cblas", "blas"):
        path = ctypes.util.find_library(name)
        if path:
            yield path


def gemm(kind):
    """(function, integer type) of CBLAS `kind` ("sgemm", "dgemm"); TdslError if no BLAS
    with it is found."""
    if kind not in _found:
        tried = []
        for path in _candidates():
            tried.append(path)
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for pattern, int_t in _VARIANTS:
                fn = getattr(lib, pattern.format(kind), None)
                if fn is not None:
                    fn.restype = None
                    _found[kind] = (fn, int_t, lib)
                    break
            if kind in _found:
                break
        else:
            raise TdslError(f"no BLAS with cblas_{kind} was found (looked in numpy's bundled "
                            f"OpenBLAS and the system libraries: {', '.join(tried) or 'none'}); "
                            "install libopenblas to use tvm.contrib.cblas")
    return _found[kind][:2]


def matmul():
    """The function of `tvm.contrib.cblas.matmul(A, B, C, transa, transb)`: C = op(A) op(B)
    for float32 or float64 matrices."""
    def run(a, b, c, transa=False, transb=False):
        if a.dtype != b.dtype or a.dtype != c.dtype or a.dtype.name not in ("float32", "float64"):
            raise TdslError(f"cblas.matmul: needs float32 or float64 matrices of one dtype, got "
                            f"{a.dtype}, {b.dtype}, {c.dtype}")
        if a.ndim != 2 or b.ndim != 2 or c.ndim != 2:
            raise TdslError("cblas.matmul: needs 2-d matrices")
        m, k = (a.shape[1], a.shape[0]) if transa else a.shape
        k2, n = (b.shape[1], b.shape[0]) if transb else b.shape
        if k != k2 or c.shape != (m, n):
            raise TdslError(f"cblas.matmul: shapes {a.shape}{'^T' if transa else ''} x "
                            f"{b.shape}{'^T' if transb else ''} -> {c.shape} do not match")
        fn, int_t = gemm("sgemm" if a.dtype.name == "float32" else "dgemm")
        real = ctypes.c_float if a.dtype.name == "float32" else ctypes.c_double
        p = ctypes.c_void_p
        fn(ctypes.c_int(_ROW_MAJOR), ctypes.c_int(_TRANS if transa else _NO_TRANS),
           ctypes.c_int(_TRANS if transb else _NO_TRANS), int_t(m), int_t(n), int_t(k),
           real(1.0), p(a.ctypes.data), int_t(a.shape[1]), p(b.ctypes.data), int_t(b.shape[1]),
           real(0.0), p(c.ctypes.data), int_t(n))
    return run
