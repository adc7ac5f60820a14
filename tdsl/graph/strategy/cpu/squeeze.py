"""Squeeze-excite parts of CNNs (efficientnet, regnet, mobilenet_v3):

    x -> GlobalAveragePool -> 1x1 conv -> act -> 1x1 conv -> gate -> Mul(x, gate)

* a conv whose input and output are 1x1 images is a matrix-vector product: it is defined
  as one (weights packed (CO/lanes, CI, lanes), vectorized along the output channels)
  instead of the NCHW[x]c conv, whose row tiles assume an image;
* the gate's group ends in a broadcast multiply with the big tensor: the small producers
  (the mat-vec, bias, sigmoid) are computed once, at root, and only the multiply runs over
  the image (one memory pass); inlining them would redo a conv and an exp per pixel.
* global average pool: per channel the rows are added into one vector row of column sums
  (independent vector adds), then that row is summed; channels in parallel.
"""
from __future__ import annotations

import numpy as np

import tdsl

from .... import tiling
from .. import tag, topi
from ..stages import stages_of
from .batch import batch, batch_only, image_shape, image_weights, outer_fuse, parallel as threads
from .loops import PAR_MIN_ELEMS, par_vec

BROADCAST_RATIO = 8     # a stage this many times smaller than the output is computed at root


def _size(t):
    return int(np.prod([topi.dim(s) for s in t.shape]))


def conv_matvec(g, n, x, wi):
    """conv2d of a (N, CI, 1, 1) input by constant (CO, CI, 1, 1) weights."""
    N, CI = batch(g, n.args[0]), n.args[0].type.shape[1]
    CO = n.args[1].type.shape[0]
    lanes = g.target.vector_lanes(n.args[0].type.dtype)
    nb = -(-CO // lanes)

    def pack(w):
        wp = np.zeros((nb * lanes, CI), w.dtype)
        wp[:CO] = w.reshape(CO, CI)
        return np.ascontiguousarray(wp.reshape(nb, lanes, CI).transpose(0, 2, 1))
    Wp = g.packed_param(wi, (nb, CI, lanes), pack)
    k = tdsl.reduce_axis((0, CI), "ci")
    D = tdsl.compute((N, nb * lanes), lambda b, j: tdsl.sum(
        x[b, k, 0, 0] * image_weights(Wp, 3, b)[j // lanes, k, j % lanes], axis=k),
                     name=topi.uname("matvec"))
    O = tdsl.compute((N, CO, 1, 1), lambda b, co, y, xx: D[b, co], name=topi.uname("unflat"))
    return tag.mark(O, tag.MATVEC, dense=D, lanes=lanes)


def is_matvec_conv(n):
    xt, wt = n.args[0].type, n.args[1].type
    return (len(xt.shape) == 4 and tuple(xt.shape[2:]) == (1, 1) and tuple(wt.shape[2:]) == (1, 1)
            and tuple(n.type.shape[2:]) == (1, 1))


def schedule_matvec_group(s, out, g, parallel=True):
    """The mat-vec at root (all output vectors accumulate over the input channels), the
    small epilogue stages inlined into the last small one, a broadcast consumer over the
    image vectorized and parallel."""
    info, target, stages = g.anchor.tensor.op.attrs, g.target, stages_of(out)
    D, lanes = info["dense"], info["lanes"]
    big = _size(out)
    small = {t.op for t in stages if t is not out and _size(t) * BROADCAST_RATIO <= big}
    read_by_big = set()
    for t in stages:
        if t.op not in small:
            for i in t.op.input_tensors():
                read_by_big.add(i.op)
    for t in stages:
        if t is out or t is D:
            continue
        if t.op.tag == tag.ROOT or (t.op in small and t.op in read_by_big):
            s[t].compute_root()
        elif not t.op.reduce_axis:
            s[t].compute_inline()
        else:
            par_vec(s, t, target, True, parallel)
    b, j = s[D].op.axis
    (k,) = s[D].op.reduce_axis
    jo, ji = s[D].split(j, factor=lanes)
    nb = topi.dim(D.shape[1]) // lanes
    blk = 4 if nb > 8 else nb
    if blk < nb:
        joo, joi = s[D].split(jo, factor=blk)
        s[D].reorder(b, joo, k, joi, ji)
    else:
        joi = jo
        s[D].reorder(b, k, joi, ji)
    s[D].unroll(joi)
    s[D].vectorize(ji)
    par_vec(s, out, target, True, parallel)


def global_avg_pool_fast(g, n, tensors):
    """Global average pool of an NCHW image as column sums (a vectorized add of each row
    into one row of partial sums) then one short row sum: the adds of the long reduction
    are independent vector adds instead of one scalar dependency chain."""
    x = g.param_tensor(g.pidx[n.args[0]])
    N, (_, _, H, W) = batch(g, n.args[0]), n.args[0].type.shape
    C = x.shape[1]          # a size variable in a kernel generic in it
    ry = tdsl.reduce_axis((0, H), "ry")
    rx = tdsl.reduce_axis((0, W), "rx")
    cols = tdsl.compute((N, C, W), lambda b, ch, xx: tdsl.sum(x[b, ch, ry, xx], axis=ry), name=topi.uname("gap_cols"))
    dt = n.type.dtype
    tot = tdsl.compute((N, C), lambda b, ch: tdsl.sum(cols[b, ch, rx], axis=rx), name=topi.uname("gap_sum"))
    O = tdsl.compute((N, C, 1, 1), lambda b, ch, y, xx: tot[b, ch] / topi.c(H * W, dt), name=topi.uname("gap"))
    return tag.mark(O, tag.GLOBAL_POOL, cols=cols, sum=tot)


def schedule_global_pool(s, out, g, parallel=True):
    """Channels in parallel; per channel its column sums (rows accumulated into vectors
    along the row), then the row sum, then the epilogue."""
    info, target = g.anchor.tensor.op.attrs, g.target
    cols, tot = info["cols"], info["sum"]
    for t in stages_of(out):
        if t is not out and t is not cols and t is not tot and not t.op.reduce_axis:
            s[t].compute_inline()
    # the channel and the unit axes after it: with the batch fused in too, bounds
    # inference could not narrow the attached stages to one channel when the channel
    # count is a size variable (generic.py), and would compute them all per channel
    axes = list(s[out].op.axis)
    ch = s[out].fuse(*axes[1:])
    if parallel:
        work = int(np.prod(image_shape(cols))) * topi.dim(cols.op.reduce_axis[0].dom.extent)
        threads(s, out, ch, work, PAR_MIN_ELEMS)
    s[tot].compute_at(s[out], ch)
    s[cols].compute_at(s[out], ch)
    _, _, xx = s[cols].op.axis
    (ry,) = s[cols].op.reduce_axis
    W = topi.dim(cols.shape[2])
    lanes = target.vector_lanes(cols.dtype)
    if W >= max(2, lanes // 2):
        xo, xi = s[cols].split(xx, factor=tiling.row_vector(target, W, cols.dtype))
        s[cols].reorder(ry, xo, xi)
        s[cols].vectorize(xi)


ACC = 8     # independent partial sums of a blocked global pool (FMA latency x units, about)


def global_avg_pool_blocked(g, n, tensors):
    """The mean over the image of a channel-blocked (N, C/bn, H, W, bn) tensor (the
    squeeze of squeeze-excite after a blocked conv, passes/layout.py): per channel block,
    `ACC` independent vector sums along the pixels (one chain would wait on each add's
    latency), then their sum."""
    x = g.param_tensor(g.pidx[n.args[0]])
    N, (_, CB, H, W, bn) = batch(g, n.args[0]), g.node_type(n.args[0]).shape
    P = H * W
    if isinstance(W, int):
        acc = next(a for a in (ACC, 4, 2, 1) if P % a == 0)
        r = tdsl.reduce_axis((0, P // acc), "r")
        part = tdsl.compute((N, CB, acc, bn), lambda b, cb, j, c: tdsl.sum(
            x[b, cb, (r * acc + j) // W, (r * acc + j) % W, c], axis=r), name=topi.uname("gap_part"))
    else:
        # a row of symbolic width (a 1-D signal's, H = 1): the sums' last round is guarded
        acc, zero = ACC, tdsl.const(0, n.type.dtype)
        r = tdsl.reduce_axis((0, tdsl.floordiv(W + (ACC - 1), ACC)), "r")
        part = tdsl.compute((N, CB, acc, bn), lambda b, cb, j, c: tdsl.sum(
            tdsl.if_then_else(r * acc + j < W, x[b, cb, 0, tdsl.min(r * acc + j, W - 1), c], zero), axis=r),
            name=topi.uname("gap_part"))
    j = tdsl.reduce_axis((0, acc), "j")
    dt = n.type.dtype
    tot = tdsl.compute((N, CB, 1, 1, bn), lambda b, cb, y, xx, c: tdsl.sum(part[b, cb, j, c], axis=j),
                       name=topi.uname("gap_sum"))
    cnt = topi.count([H, W], dt)
    O = tdsl.compute((N, CB, 1, 1, bn), lambda *i: tot[i] / cnt, name=topi.uname("gap"))
    return tag.mark(O, tag.GLOBAL_POOL_BLOCKED, part=part, sum=tot)


def applies_blocked_pool(g, n):
    """A `mean` over axes 2, 3 (keepdims) of a float32 blocked image with static sizes, a
    group parameter (its batch may be symbolic, and the width of a one-row image)."""
    t = n.args[0].type
    _, CB, H, W, bn = t.shape if t.ndim == 5 else (0,) * 5
    return (n.op == "mean" and n.args[0] in g.pidx and t.ndim == 5 and t.dtype == "float32" and sorted(n.attrs["axis"] or []) == [2, 3]
            and n.attrs["keepdims"] and all(isinstance(d, int) for d in (CB, H, bn)) and (isinstance(W, int) or H == 1))


def applies_global_pool(g, n):
    """nn.global_avg_pool of a float32 NCHW image, a group parameter (its batch may be
    symbolic)."""
    return n.type.dtype == "float32" and len(n.type.shape) == 4 and n.args[0] in g.pidx and batch_only(g, n)


def schedule_global_pool_blocked(s, out, g, parallel=True):
    info = g.anchor.tensor.op.attrs
    part, tot = info["part"], info["sum"]
    for t in stages_of(out):
        if t is not out and t is not part and t is not tot and not t.op.reduce_axis:
            s[t].compute_inline()
    b, cb, y, xx, c = s[out].op.axis
    outer = outer_fuse(s, out, [b, cb, y, xx])
    if parallel:
        threads(s, out, outer, int(np.prod(image_shape(part))) * topi.dim(part.op.reduce_axis[0].dom.extent), 1 << 16)
    s[out].vectorize(c)
    s[tot].compute_at(s[out], outer)
    s[tot].vectorize(s[tot].op.axis[-1])
    s[part].compute_at(s[out], outer)
    _, _, jj, cc = s[part].op.axis
    (r,) = s[part].op.reduce_axis
    s[part].reorder(r, jj, cc)
    s[part].unroll(jj)
    s[part].vectorize(cc)
