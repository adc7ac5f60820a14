"""Matrix multiply schedules for the CPU, one per step of the classic GEMM-optimization
sequence (blocking, vectorize, loop permutation, array packing, write cache, parallel), plus
a register-blocked schedule. Each function returns (schedule, [A, B, C]).

Used by `python -m tdsl demo`, by bench/ and by the tests, so the steps are always checked.
"""
from __future__ import annotations

import tdsl


def definition(M, N, K, dtype="float32"):
    A = tdsl.placeholder((M, K), dtype=dtype, name="A")
    B = tdsl.placeholder((K, N), dtype=dtype, name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda m, n: tdsl.sum(A[m, k] * B[k, n], axis=k), name="C")
    return A, B, C


def default(M, N, K, bn=32):
    A, B, C = definition(M, N, K)
    return tdsl.create_schedule(C), [A, B, C]


def _tiled(M, N, K, bn, permute, vector):
    A, B, C = definition(M, N, K)
    s = tdsl.create_schedule(C)
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=4)
    if permute:   # ki outside mi: B's rows are read sequentially in the inner loops
        s[C].reorder(mo, no, ko, mi, ki, ni)
    else:
        s[C].reorder(mo, no, ko, ki, mi, ni)
    if vector:
        s[C].vectorize(ni)
    return s, [A, B, C]


def blocking(M, N, K, bn=32):
    return _tiled(M, N, K, bn, permute=False, vector=False)


def vectorize(M, N, K, bn=32):
    return _tiled(M, N, K, bn, permute=False, vector=True)


def loop_permutation(M, N, K, bn=32):
    return _tiled(M, N, K, bn, permute=True, vector=True)


def _packed(M, N, K, bn):
    A = tdsl.placeholder((M, K), name="A")
    B = tdsl.placeholder((K, N), name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    packedB = tdsl.compute(((N + bn - 1) // bn, K, bn),
                           lambda bigN, kk, littleN: tdsl.if_then_else(
                               bigN * bn + littleN < N, B[kk, bigN * bn + littleN], tdsl.const(0, "float32")),
                           name="packedB")
    C = tdsl.compute((M, N), lambda m, n: tdsl.sum(A[m, k] * packedB[n // bn, k, n % bn], axis=k), name="C")
    return A, B, packedB, C


def array_packing(M, N, K, bn=32):
    A, B, packedB, C = _packed(M, N, K, bn)
    s = tdsl.create_schedule(C)
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=4)
    s[C].reorder(mo, no, ko, mi, ki, ni)
    s[C].vectorize(ni)
    bigN, _, littleN = s[packedB].op.axis
    s[packedB].vectorize(littleN)
    s[packedB].parallel(bigN)
    return s, [A, B, C]


def write_cache(M, N, K, bn=32, parallel=False):
    A, B, packedB, C = _packed(M, N, K, bn)
    s = tdsl.create_schedule(C)
    CC = s.cache_write(C, "global")
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    s[CC].compute_at(s[C], no)
    mc, nc = s[CC].op.axis
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=4)
    s[CC].reorder(ko, mc, ki, nc)
    s[CC].vectorize(nc)
    s[CC].unroll(ki)
    if parallel:
        s[C].parallel(mo)
    bigN, _, littleN = s[packedB].op.axis
    s[packedB].vectorize(littleN)
    s[packedB].parallel(bigN)
    return s, [A, B, C]


def parallel(M, N, K, bn=32):
    return write_cache(M, N, K, bn, parallel=True)


def register_blocked(M, N, K, mr=8, nr=32, kc=256):
    """A micro-kernel schedule: an mr x nr tile of C lives in registers (a local cache fully
    unrolled and vectorized) while k runs over a packed panel of B."""
    A, B, packedB, C = _packed(M, N, K, nr)
    s = tdsl.create_schedule(C)
    CC = s.cache_write(C, "local")
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], mr, nr)
    s[C].vectorize(ni)
    s[CC].compute_at(s[C], no)
    mc, nc = s[CC].op.axis
    (k,) = s[CC].op.reduce_axis
    nco, nci = s[CC].split(nc, factor=16)
    s[CC].reorder(k, mc, nco, nci)
    s[CC].unroll(mc)
    s[CC].unroll(nco)
    s[CC].vectorize(nci)
    fused = s[C].fuse(mo, no)
    s[C].parallel(fused)
    bigN, _, littleN = s[packedB].op.axis
    s[packedB].vectorize(littleN)
    s[packedB].parallel(bigN)
    return s, [A, B, C]


STEPS = [
    ("default", default),
    ("blocking", blocking),
    ("vectorize", vectorize),
    ("loop permutation", loop_permutation),
    ("array packing", array_packing),
    ("write cache", write_cache),
    ("parallel", parallel),
    ("register blocked", register_blocked),
]
