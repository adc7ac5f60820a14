"""GPU schedules for common kernels, used by the GPU tests and bench/gpu.py.

Each `*_schedule` returns (schedule, args) for target "cuda" or "opencl"; each
`*_reference` is the numpy meaning.
"""
from __future__ import annotations

import numpy as np

import tdsl

from . import kernels


def _tx(tag):
    return tdsl.thread_axis(tag)


# ------------------------------------------------------------------ elementwise, vectorized

def elementwise_schedule(n, threads=64, lanes=4):
    """B = A * 2 + 1: blocks of `threads` threads, each thread `lanes` contiguous elements
    (a vector load and store where the target has them)."""
    A = tdsl.placeholder((n,), name="A")
    B = tdsl.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = tdsl.create_schedule(B)
    (i,) = B.op.axis
    bo, rest = s[B].split(i, factor=threads * lanes)
    tx, vi = s[B].split(rest, factor=lanes)
    s[B].bind(bo, _tx("blockIdx.x"))
    s[B].bind(tx, _tx("threadIdx.x"))
    s[B].vectorize(vi)
    return s, [A, B]


def elementwise_reference(a):
    return a * 2 + 1


# ------------------------------------------------------------------ matmul through shared memory

def matmul_schedule(M, N, K, block=(8, 8), thread_tile=(2, 2), k_tile=8, dtype="float32",
                    vector_copy=False, unroll=False, double_buffer=False):
    """C = A @ B: each block computes a (by*ty) x (bx*tx) tile of C; per k step the block
    copies a tile of A and of B into shared memory (all threads help), each thread keeps
    its A/B values in local registers and accumulates a thread_tile of C in registers.
    `double_buffer`: two shared tiles of each, the next k step's copied while this one's
    are used."""
    A = tdsl.placeholder((M, K), dtype=dtype, name="A")
    B = tdsl.placeholder((K, N), dtype=dtype, name="B")
    k = tdsl.reduce_axis((0, K), name="k")
    C = tdsl.compute((M, N), lambda i, j: tdsl.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tdsl.create_schedule(C)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    AL = s.cache_read(AA, "local", [C])
    BL = s.cache_read(BB, "local", [C])
    CL = s.cache_write(C, "local")
    ty_n, tx_n = block
    ti, tj = thread_tile
    i, j = s[C].op.axis
    by, yi = s[C].split(i, factor=ty_n * ti)
    bx, xi = s[C].split(j, factor=tx_n * tj)
    ty, yi = s[C].split(yi, nparts=ty_n)
    tx, xi = s[C].split(xi, nparts=tx_n)
    s[C].reorder(by, bx, ty, tx, yi, xi)
    s[C].bind(by, _tx("blockIdx.y"))
    s[C].bind(bx, _tx("blockIdx.x"))
    s[C].bind(ty, _tx("threadIdx.y"))
    s[C].bind(tx, _tx("threadIdx.x"))
    s[CL].compute_at(s[C], tx)
    yc, xc = s[CL].op.axis
    (kc,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(kc, factor=k_tile)
    s[CL].reorder(ko, ki, yc, xc)
    s[AA].compute_at(s[CL], ko)
    s[BB].compute_at(s[CL], ko)
    s[AL].compute_at(s[CL], ki)
    s[BL].compute_at(s[CL], ki)
    if unroll:   # keep the per-thread tile in registers
        for iv in (ki, yc, xc):
            s[CL].unroll(iv)
        for T in (AL, BL):
            for iv in s[T].op.axis:
                s[T].unroll(iv)
    for T in (AA, BB):       # cooperative copy: the block's threads share the tile
        a0, a1 = s[T].op.axis
        f = s[T].fuse(a0, a1)
        t_y, f = s[T].split(f, nparts=ty_n)
        t_x, f = s[T].split(f, nparts=tx_n)
        s[T].bind(t_y, _tx("threadIdx.y"))
        s[T].bind(t_x, _tx("threadIdx.x"))
        if vector_copy:
            s[T].vectorize(f)
        if double_buffer:
            s[T].double_buffer()
    return s, [A, B, C]


def matmul_fast_schedule(M, N, K):
    """The SGEMM schedule of bench/gpu.py: 128x64 block tiles, 16x16 threads, 8x4 per
    thread, k steps of 16, 4-wide vector copies into double-buffered shared tiles. These
    sizes beat 8x8 per thread in k steps of 8 without double buffering: the smaller thread
    tile leaves registers for two blocks an SM, and the copies of the next step overlap
    this step's multiply-adds."""
    return matmul_schedule(M, N, K, block=(16, 16), thread_tile=(8, 4), k_tile=16,
                           vector_copy=True, unroll=True, double_buffer=True)


def matmul_for_target(M, N, K, target="cuda"):
    """`matmul_fast_schedule`'s shape fitted to `target` (a GPU `tdsl.target.Target` or
    its name): a square block of at most 256 threads, within the target's block limit
    (8x8 = two warps at least), 8x8 outputs a thread, and the k step halved until both
    shared tiles fit the block's shared memory."""
    t = tdsl.target.as_target(target)
    side = 16
    while side * side > t.max_threads_per_block and side > 8:
        side //= 2
    tile, k_tile = 8, 8
    while 2 * side * tile * k_tile * 4 > t.shared_memory_bytes and k_tile > 1:
        k_tile //= 2
    return matmul_schedule(M, N, K, block=(side, side), thread_tile=(tile, tile),
                           k_tile=k_tile, vector_copy=True, unroll=True)


def matmul_reference(a, b):
    return a @ b


# ------------------------------------------------------------------ conv2d 3x3

def conv2d_schedule(N, C, H, W, F, threads=(4, 16)):
    """Y[n, f, y, x] = sum_{c, dy, dx} X[n, c, y+dy, x+dx] * Wt[f, c, dy, dx] (valid
    padding); a block per (n, f, tile of rows), a thread per output pixel of the tile."""
    X = tdsl.placeholder((N, C, H, W), name="X")
    Wt = tdsl.placeholder((F, C, 3, 3), name="Wt")
    c = tdsl.reduce_axis((0, C), name="c")
    dy = tdsl.reduce_axis((0, 3), name="dy")
    dx = tdsl.reduce_axis((0, 3), name="dx")
    OH, OW = H - 2, W - 2
    Y = tdsl.compute((N, F, OH, OW), lambda n, f, y, x: tdsl.sum(
        X[n, c, y + dy, x + dx] * Wt[f, c, dy, dx], axis=[c, dy, dx]), name="Y")
    s = tdsl.create_schedule(Y)
    n, f, y, x = s[Y].op.axis
    yo, yi = s[Y].split(y, factor=threads[0])
    xo, xi = s[Y].split(x, factor=threads[1])
    s[Y].reorder(n, f, yo, xo, yi, xi)
    nf = s[Y].fuse(n, f)
    s[Y].bind(nf, _tx("blockIdx.y"))
    s[Y].bind(s[Y].fuse(yo, xo), _tx("blockIdx.x"))
    s[Y].bind(yi, _tx("threadIdx.y"))
    s[Y].bind(xi, _tx("threadIdx.x"))
    cc, dyy, dxx = s[Y].op.reduce_axis
    s[Y].unroll(dyy)
    s[Y].unroll(dxx)
    return s, [X, Wt, Y]


def conv2d_reference(x, w):
    N, C, H, W = x.shape
    F = w.shape[0]
    out = np.zeros((N, F, H - 2, W - 2), np.float32)
    for dy in range(3):
        for dx in range(3):
            out += np.einsum("nchw,fc->nfhw", x[:, :, dy:dy + H - 2, dx:dx + W - 2],
                             w[:, :, dy, dx])
    return out


# ------------------------------------------------------------------ softmax over rows

def softmax_schedule(M, N, threads=64):
    """Three kernels: row max (cross-thread reduction), row sum of exp (cross-thread
    reduction, exp inlined), and the normalisation (elementwise)."""
    X, mx, ex, sm, Y = kernels.softmax(M, N)
    s = tdsl.create_schedule(Y)
    s[ex].compute_inline()
    for red in (mx, sm):
        (k,) = s[red].op.reduce_axis
        ko, ki = s[red].split(k, factor=threads)
        s[red].reorder(ki, ko)
        s[red].bind(s[red].op.axis[0], _tx("blockIdx.x"))
        s[red].bind(ki, _tx("threadIdx.x"))
    i, j = s[Y].op.axis
    jo, ji = s[Y].split(j, factor=threads)
    s[Y].bind(i, _tx("blockIdx.x"))
    s[Y].bind(ji, _tx("threadIdx.x"))
    return s, [X, Y]


def softmax_reference(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# ------------------------------------------------------------------ sum with rfactor

def sum_schedule(M, N, threads=32, rfactor=True):
    """B[i] = sum_k A[i, k]: a block per row; with rfactor the factored stage computes
    each thread's partial sum and the final stage reduces across threadIdx.x."""
    A = tdsl.placeholder((M, N), name="A")
    k = tdsl.reduce_axis((0, N), name="k")
    B = tdsl.compute((M,), lambda i: tdsl.sum(A[i, k], axis=k), name="B")
    s = tdsl.create_schedule(B)
    ko, ki = s[B].split(k, factor=threads)
    tx = _tx("threadIdx.x")
    if rfactor:
        BF = s.rfactor(B, ki)
        s[B].bind(s[B].op.axis[0], _tx("blockIdx.x"))
        s[B].bind(s[B].op.reduce_axis[0], tx)
        s[BF].compute_at(s[B], s[B].op.reduce_axis[0])
    else:
        s[B].reorder(ki, ko)
        s[B].bind(s[B].op.axis[0], _tx("blockIdx.x"))
        s[B].bind(ki, tx)
    return s, [A, B]


def sum_reference(a):
    return a.sum(axis=1)
