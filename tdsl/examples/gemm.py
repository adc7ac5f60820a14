"""Matrix multiply schedules for the CPU, one per step of the classic GEMM-optimization
sequence (blocking, vectorize, loop permutation, array packing, write cache, parallel), plus
a register-blocked schedule. Each function returns (schedule, [A, B, C]).

Sizes come from the target (`tdsl.tiling`): the block of the tutorial steps is two vectors
wide, the register-blocked micro-kernel's tile fits the target's register file.
Used by `python -m tdsl demo`, by bench/ and by the tests, so the steps are always checked.
"""
from __future__ import annotations

import tdsl
from tdsl import tiling
from tdsl.target import as_target


def block_size(target=None):
    """The cache block of the tutorial steps: two vectors of the target."""
    return 2 * as_target(target).vector_lanes("float32")


def definition(M, N, K, dtype="float32"):
    A = tdsl.placeholder((M, K), dtype=dtype, name="A")
    B = tdsl.placeholder((K, N), dtype=dtype, name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda m, n: tdsl.sum(A[m, k] * B[k, n], axis=k), name="C")
    return A, B, C


def default(M, N, K, bn=None, target=None):
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


def blocking(M, N, K, bn=None, target=None):
    bn = bn or block_size(target)
    return _tiled(M, N, K, bn, permute=False, vector=False)


def vectorize(M, N, K, bn=None, target=None):
    bn = bn or block_size(target)
    return _tiled(M, N, K, bn, permute=False, vector=True)


def loop_permutation(M, N, K, bn=None, target=None):
    bn = bn or block_size(target)
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


def array_packing(M, N, K, bn=None, target=None):
    bn = bn or block_size(target)
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


def write_cache(M, N, K, bn=None, target=None, parallel=False):
    bn = bn or block_size(target)
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


def parallel(M, N, K, bn=None, target=None):
    return write_cache(M, N, K, bn, target, parallel=True)


def register_blocked(M, N, K, target=None, mr=None, nr=None):
    """A micro-kernel schedule: an mr x nr tile of C lives in registers (a local cache fully
    unrolled and vectorized) while k runs over a packed panel of B. The tile comes from the
    target's registers and FMA units (`tiling.gemm_tile`) unless given."""
    lanes = as_target(target).vector_lanes("float32")
    tmr, tnr = tiling.gemm_tile(target, M, N)
    mr, nr = mr or tmr, nr or tnr
    A, B, packedB, C = _packed(M, N, K, nr)
    s = tdsl.create_schedule(C)
    CC = s.cache_write(C, "local")
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], mr, nr)
    s[C].vectorize(ni)
    s[CC].compute_at(s[C], no)
    mc, nc = s[CC].op.axis
    (k,) = s[CC].op.reduce_axis
    nco, nci = s[CC].split(nc, factor=min(lanes, nr))
    s[CC].reorder(k, mc, nco, nci)
    s[CC].unroll(mc)
    s[CC].unroll(nco)
    s[CC].vectorize(nci)
    if M % mr == 0 and N % nr == 0:
        s[C].parallel(s[C].fuse(mo, no))
    else:   # rows of tiles in parallel: ragged last tiles are peeled off loops of their own,
        s[C].parallel(mo)   # and the main loops stay guard-free (a fused loop cannot be split)
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


def run_checked(f, M, N, K, seed=0):
    """Runs matmul module `f` on random (M, K) x (K, N) float32 inputs: (a, b, c, ok, err)
    with `err` the max error relative to numpy's largest value (the demos' check)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = np.zeros((M, N), dtype=np.float32)
    f(a, b, c)
    ref = a @ b
    err = float(np.max(np.abs(c - ref)) / np.max(np.abs(ref)))
    return a, b, c, bool(np.allclose(c, ref, rtol=1e-3, atol=1e-3)), err


def numpy_seconds(a, b, c):
    """Seconds numpy's matmul of `a` by `b` into `c` takes (the demos' reference): the median
    of five means of five calls, each mean after one call that warms the caches."""
    import time

    import numpy as np

    def mean(number=5):
        np.matmul(a, b, out=c)
        t0 = time.perf_counter()
        for _ in range(number):
            np.matmul(a, b, out=c)
        return (time.perf_counter() - t0) / number
    return sorted(mean() for _ in range(5))[2]
