"""CPU schedules for common kernels: a fused bias+relu, a row softmax and a 3x3 conv2d.
Each `*_schedule(..., target=None)` returns (schedule, args), sized from the target's
vector width and registers; each `*_reference` is the numpy meaning. Also definitions with
no hand schedule, for the auto-scheduler's benchmark and tests: k x k convolutions of any
stride and padding in NCHW[x]c, 3x3 depthwise convolutions and row sums."""
from __future__ import annotations

import numpy as np

import tdsl
from tdsl import tiling
from tdsl.target import as_target


# ------------------------------------------------------------------ relu(x + b)

def bias_relu(M, N):
    X = tdsl.placeholder((M, N), name="X")
    b = tdsl.placeholder((N,), name="b")
    Y = tdsl.compute((M, N), lambda i, j: tdsl.max(X[i, j] + b[j], tdsl.const(0, "float32")), name="Y")
    return X, b, Y


def bias_relu_schedule(M, N, target=None, unroll=4):
    lanes = as_target(target).vector_lanes("float32")
    X, b, Y = bias_relu(M, N)
    s = tdsl.create_schedule(Y)
    i, j = Y.op.axis
    jo, ji = s[Y].split(j, factor=lanes)
    jo, ju = s[Y].split(jo, factor=unroll)
    s[Y].unroll(ju)
    s[Y].vectorize(ji)
    s[Y].parallel(i)
    return s, [X, b, Y]


def bias_relu_reference(x, b):
    return np.maximum(x + b, 0)


# ------------------------------------------------------------------ softmax over rows

def softmax(M, N):
    X = tdsl.placeholder((M, N), name="X")
    k1 = tdsl.reduce_axis((0, N), name="k1")
    k2 = tdsl.reduce_axis((0, N), name="k2")
    mx = tdsl.compute((M,), lambda i: tdsl.max(X[i, k1], axis=k1), name="rowmax")
    ex = tdsl.compute((M, N), lambda i, j: tdsl.exp(X[i, j] - mx[i]), name="exp")
    sm = tdsl.compute((M,), lambda i: tdsl.sum(ex[i, k2], axis=k2), name="rowsum")
    Y = tdsl.compute((M, N), lambda i, j: ex[i, j] / sm[i], name="Y")
    return X, mx, ex, sm, Y


def softmax_schedule(M, N, target=None):
    """One row per task: max and sum are vectorised through rfactor, into `chains`
    vectors of partial results (independent chains hide the add's latency), which are
    then folded as vectors; the exponentials are stored in Y (`store_with`) where the row
    is whole vectors."""
    t = as_target(target)
    lanes = t.vector_lanes("float32")
    # a ragged split of the reductions would stretch the exponentials past the row, which
    # store_with refuses: where the row is whole vectors, as many chains as divide it
    chains = next(c for c in (4, 3, 2, 1) if N % (lanes * c) == 0) if N % lanes == 0 \
        else max(1, min(4, N // lanes))
    X, mx, ex, sm, Y = softmax(M, N)
    s = tdsl.create_schedule(Y)
    i, j = Y.op.axis
    s[Y].parallel(i)
    jo, ji = s[Y].split(j, factor=lanes)
    s[Y].vectorize(ji)
    for red in (mx, sm):
        (k,) = s[red].op.reduce_axis
        ko, ki = s[red].split(k, factor=lanes * chains)
        rfs = [s.rfactor(red, ki)]
        if chains > 1:
            (kv,) = s[red].op.reduce_axis
            rfs.append(s.rfactor(red, s[red].split(kv, factor=lanes)[1]))
        for rf in rfs:
            s[rf].compute_at(s[Y], i)
            vo, vi = s[rf].split(s[rf].op.axis[0], factor=lanes)
            s[rf].reorder(*s[rf].op.reduce_axis, vo, vi)
            s[rf].unroll(vo)
            s[rf].vectorize(vi)
        s[red].compute_at(s[Y], i)
    s[ex].compute_at(s[Y], i)
    eo, ei = s[ex].split(ex.op.axis[1], factor=lanes)
    s[ex].vectorize(ei)
    if N % lanes == 0:
        # the exponentials written into Y's row and divided there: Y's lines are fetched
        # while they are computed (a ragged row would compute them past its end)
        s[ex].store_with(Y)
    return s, [X, Y]


def softmax_reference(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# ------------------------------------------------------------------ conv2d 3x3, NCHW[x]c

def conv2d_nchwc(C, H, W, CO, bn):
    """3x3, stride 1, pad 1. Input (C, H, W); weights pre-packed as (CO/bn, C, 3, 3, bn)
    (layout transformation done once, as graph compilers do at compile time); output
    (CO/bn, H, W, bn)."""
    D = tdsl.placeholder((C, H, W), name="data")
    Wp = tdsl.placeholder((CO // bn, C, 3, 3, bn), name="weight")
    pad = tdsl.compute((C, H + 2, W + 2), lambda c, y, x: tdsl.if_then_else(
        tdsl.all(y >= 1, y < H + 1, x >= 1, x < W + 1), D[c, y - 1, x - 1], tdsl.const(0, "float32")),
        name="pad")
    ci = tdsl.reduce_axis((0, C), name="ci")
    ky = tdsl.reduce_axis((0, 3), name="ky")
    kx = tdsl.reduce_axis((0, 3), name="kx")
    O = tdsl.compute((CO // bn, H, W, bn), lambda cb, y, x, c: tdsl.sum(
        pad[ci, y + ky, x + kx] * Wp[cb, ci, ky, kx, c], axis=[ci, ky, kx]), name="conv")
    return D, Wp, pad, O


def conv_block(target=None):
    """The channel block of the NCHW[x]c layout: one vector of the target."""
    return as_target(target).vector_lanes("float32")


def conv2d_schedule(C, H, W, CO, target=None):
    """A register tile of `cbb` channel blocks x `xb` output columns accumulates while the
    input channels and taps run; sizes from the target (`tiling.register_tile`)."""
    bn = conv_block(target)
    xb, cbb = tiling.register_tile(target, W, CO, whole_rows=True, whole_vecs=True)
    D, Wp, pad, O = conv2d_nchwc(C, H, W, CO, bn)
    s = tdsl.create_schedule(O)
    OL = s.cache_write(O, "local")
    cb, y, x, c = O.op.axis
    cbo, cbi = s[O].split(cb, factor=cbb)
    xo, xi = s[O].split(x, factor=xb)
    s[O].reorder(cbo, y, xo, cbi, xi, c)
    s[O].vectorize(c)
    par = s[O].fuse(cbo, y)
    s[O].parallel(par)
    s[OL].compute_at(s[O], xo)
    cl, _, xl, vl = s[OL].op.axis
    ci, ky, kx = s[OL].op.reduce_axis
    s[OL].reorder(ci, ky, kx, cl, xl, vl)
    s[OL].unroll(cl)
    s[OL].unroll(xl)
    s[OL].vectorize(vl)
    s[pad].parallel(pad.op.axis[0])
    return s, [D, Wp, O]


def pack_weight(w, bn):
    co, c, kh, kw = w.shape
    return np.ascontiguousarray(w.reshape(co // bn, bn, c, kh, kw).transpose(0, 2, 3, 4, 1))


def conv2d_reference(d, w):
    """Direct 3x3 conv, pad 1, via im2col and numpy's matmul; output (CO, H, W)."""
    C, H, W = d.shape
    p = np.pad(d, ((0, 0), (1, 1), (1, 1)))
    cols = np.empty((C, 3, 3, H, W), dtype=d.dtype)
    for ky in range(3):
        for kx in range(3):
            cols[:, ky, kx] = p[:, ky:ky + H, kx:kx + W]
    return (w.reshape(w.shape[0], -1) @ cols.reshape(C * 9, H * W)).reshape(-1, H, W)


def unpack_output(o):
    cb, H, W, bn = o.shape
    return o.transpose(0, 3, 1, 2).reshape(cb * bn, H, W)


# ------------------------------------------------------------------ for the auto-scheduler

def conv_nchwc(C, H, W, CO, k, stride, pad, bn):
    """A k x k convolution: input (C, H, W) (H, W may be tdsl vars); weights pre-packed as
    (CO/bn, C, k, k, bn); output (CO/bn, OH, OW, bn), the graph layer's blocked layout.
    Returns (data, weight, output)."""
    OH, OW = (H + 2 * pad - k) // stride + 1, (W + 2 * pad - k) // stride + 1
    D = tdsl.placeholder((C, H, W), name="data")
    Wp = tdsl.placeholder((CO // bn, C, k, k, bn), name="weight")
    src = D
    if pad:
        src = tdsl.compute((C, H + 2 * pad, W + 2 * pad), lambda c, y, x: tdsl.if_then_else(
            tdsl.all(y >= pad, y < H + pad, x >= pad, x < W + pad), D[c, y - pad, x - pad],
            tdsl.const(0, "float32")), name="pad")
    ci = tdsl.reduce_axis((0, C), name="ci")
    ky = tdsl.reduce_axis((0, k), name="ky")
    kx = tdsl.reduce_axis((0, k), name="kx")
    O = tdsl.compute((CO // bn, OH, OW, bn), lambda cb, y, x, c: tdsl.sum(
        src[ci, y * stride + ky, x * stride + kx] * Wp[cb, ci, ky, kx, c], axis=[ci, ky, kx]),
        name="conv")
    return D, Wp, O


def conv_reference(d, w, stride, pad):
    """Direct convolution of (C, H, W) by (CO, C, k, k), one matmul per tap; output (CO,
    OH, OW)."""
    C, H, W = d.shape
    CO, _, k, _ = w.shape
    OH, OW = (H + 2 * pad - k) // stride + 1, (W + 2 * pad - k) // stride + 1
    p = np.pad(d, ((0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((CO, OH * OW), np.float32)
    for ky in range(k):
        for kx in range(k):
            tap = p[:, ky:ky + stride * (OH - 1) + 1:stride, kx:kx + stride * (OW - 1) + 1:stride]
            out += w[:, :, ky, kx] @ tap.reshape(C, -1)
    return out.reshape(CO, OH, OW)


def depthwise3x3(C, H, W, stride=1):
    """A 3x3 depthwise convolution, pad 1, NCHW (one channel each): input (C, H, W),
    weights (C, 3, 3). Returns (data, weight, output)."""
    OH, OW = (H - 1) // stride + 1, (W - 1) // stride + 1
    D = tdsl.placeholder((C, H, W), name="data")
    Wt = tdsl.placeholder((C, 3, 3), name="weight")
    pad = tdsl.compute((C, H + 2, W + 2), lambda c, y, x: tdsl.if_then_else(
        tdsl.all(y >= 1, y < H + 1, x >= 1, x < W + 1), D[c, y - 1, x - 1], tdsl.const(0, "float32")),
        name="pad")
    ky = tdsl.reduce_axis((0, 3), name="ky")
    kx = tdsl.reduce_axis((0, 3), name="kx")
    O = tdsl.compute((C, OH, OW), lambda c, y, x: tdsl.sum(
        pad[c, y * stride + ky, x * stride + kx] * Wt[c, ky, kx], axis=[ky, kx]), name="dwconv")
    return D, Wt, O


def depthwise3x3_reference(d, w, stride=1):
    C, H, W = d.shape
    OH, OW = (H - 1) // stride + 1, (W - 1) // stride + 1
    p = np.pad(d, ((0, 0), (1, 1), (1, 1)))
    out = np.zeros((C, OH, OW), np.float32)
    for ky in range(3):
        for kx in range(3):
            out += p[:, ky:ky + stride * (OH - 1) + 1:stride, kx:kx + stride * (OW - 1) + 1:stride] * \
                w[:, ky, kx][:, None, None]
    return out


def row_sum(M, N):
    """(X, its sums over rows)."""
    X = tdsl.placeholder((M, N), name="X")
    k = tdsl.reduce_axis((0, N), name="k")
    return X, tdsl.compute((M,), lambda i: tdsl.sum(X[i, k], axis=k), name="rowsum")
