"""The blocked NCHW[x]c convolution in any number of spatial dimensions (conv1d reaches it
as a conv2d of one row, conv3d directly), and the transposed convolution as a blocked conv
of its input spread onto the stride grid.

The conv reads an input stage `spread[b, ci, *u]` (the zero-padded input; for a transposed
conv the input scattered every `stride` positions), packed weights (CO/x, CI, *K, x) and
accumulates x output channels in one vector, a register tile of row pixels x channel
blocks. A transposed conv with stride s spends s^d times the multiply-adds of the gather
form on zeros, but in this vectorized tile rather than a per-tap test on every element."""
from __future__ import annotations

import numpy as np

import tdsl

from .... import tiling
from .. import topi
from ..stages import _ishape, _stages
from .loops import _inline_except, _par_vec, _vec_split


def spread(x, sizes, offsets, strides):
    """sp[b, c, *u] = x[b, c, *(u - offset) / stride] where that is a whole in-range
    position, else 0; `x` itself when that is the identity."""
    xs = topi.shape_of(x)
    nd = len(sizes)
    if tuple(sizes) == tuple(xs[2:]) and not any(offsets) and all(s == 1 for s in strides):
        return x
    f0 = tdsl.const(0, x.dtype)

    def f(b, ch, *u):
        conds, src = [], []
        for d in range(nd):
            t = u[d] - offsets[d]
            if strides[d] > 1:
                conds.append(t % strides[d] == 0)
                t = t // strides[d]
            if offsets[d] > 0 or strides[d] > 1:
                conds.append(t >= 0)
            if sizes[d] > offsets[d] + (xs[2 + d] - 1) * strides[d] + 1 or strides[d] > 1:
                conds.append(t < xs[2 + d])
            src.append(t)
        v = x[(b, ch) + tuple(src)]
        return tdsl.if_then_else(tdsl.all(*conds), v, f0) if conds else v
    return tdsl.compute((xs[0], xs[1]) + tuple(sizes), f, name=topi.uname("pad"))


def conv_blocked(g, n, x, wi, spread_args, orient=None):
    """The blocked conv of node `n` (nn.convNd, groups 1) over `spread(x, *spread_args)`,
    its weights the constant param `wi` laid out (CO, CI, *K) by `orient` (for a transposed
    conv: swap the channel axes and flip the taps)."""
    a = n.attrs
    src = spread(x, *spread_args)
    xt = n.args[0].type
    N = xt.shape[0]
    CI = x.shape[1]            # a size variable in a kernel generic in it
    CO = n.type.shape[1]
    out_sp = tuple(n.type.shape[2:])
    nd = len(out_sp)
    w_shape = n.args[1].type.shape
    K = tuple(w_shape[2:])
    bn = g.target.vector_lanes(xt.dtype)
    cb_n = -(-CO // bn)      # output channels padded to whole vectors with zero weights

    def pack(w):
        w = orient(w) if orient else w
        wp = np.zeros((cb_n * bn,) + w.shape[1:], w.dtype)
        wp[:CO] = w
        return np.ascontiguousarray(wp.reshape((cb_n, bn) + w.shape[1:]).transpose(
            (0,) + tuple(range(2, nd + 3)) + (1,)))
    Wp = g.packed_param(wi, (cb_n, CI) + K + (bn,), pack)
    strides = a["strides"] if "transpose" not in n.op else (1,) * nd
    dl = a["dilation"]
    ci = tdsl.reduce_axis((0, CI), "ci")
    rk = [tdsl.reduce_axis((0, K[d]), f"k{d}") for d in range(nd)]

    def conv(b, cb, *o):
        sp, cc = o[:nd], o[nd]
        return tdsl.sum(src[(b, ci) + tuple(sp[d] * strides[d] + rk[d] * dl[d] for d in range(nd))]
                        * Wp[(cb, ci) + tuple(rk) + (cc,)], axis=[ci] + rk)
    Cv = tdsl.compute((N, cb_n) + out_sp + (bn,), conv, name=topi.uname("conv"))
    O = tdsl.compute((N, CO) + out_sp, lambda b, co, *o: Cv[(b, co // bn) + o + (co % bn,)],
                     name=topi.uname("unpack"))
    g.anchor = (O, {"kind": "conv2d_packed", "conv": Cv, "pad": src if src is not x else None,
                    "ow": out_sp[-1], "bn": bn})
    return O


def conv_padded(g, n, x, wi):
    """nn.conv1d/2d/3d: the blocked conv of the zero-padded input."""
    a = n.attrs
    nd = len(n.type.shape) - 2
    p = a["padding"]
    sizes = [n.args[0].type.shape[2 + d] + p[d] + p[d + nd] for d in range(nd)]
    return conv_blocked(g, n, x, wi, (sizes, p[:nd], (1,) * nd))


def conv_transpose(g, n, x, wi):
    """nn.convNd_transpose (groups 1): out[o] = sum_k up[o + k * dl] * w_flipped[k], `up`
    the input spread every stride positions from offset (K - 1) * dl - pad."""
    a = n.attrs
    nd = len(n.type.shape) - 2
    K = n.args[1].type.shape[2:]
    dl, p = a["dilation"], a["padding"]
    out_sp = n.type.shape[2:]
    sizes = [out_sp[d] + (K[d] - 1) * dl[d] for d in range(nd)]
    offsets = [(K[d] - 1) * dl[d] - p[d] for d in range(nd)]

    def orient(w):      # (CI, CO, *K) -> (CO, CI, *K), taps reversed
        return np.flip(w, axis=tuple(range(2, w.ndim))).swapaxes(0, 1)
    return conv_blocked(g, n, x, wi, (sizes, offsets, a["strides"]), orient)


def schedule(s, out, info, parallel, target):
    Cv, pad, OW, bn = info["conv"], info["pad"], info["ow"], info["bn"]
    keep = [Cv] + ([pad] if pad is not None else [])
    _inline_except(s, out, keep)
    for t in _stages(out):
        if t.op.reduce_axis and t is not Cv and t is not out:
            _par_vec(s, t, target, True, parallel)
    b, co, *lead, x = out.op.axis
    CB = _ishape(Cv)[1]
    xb, cbb = tiling.register_tile(target, OW, CB * bn, whole_rows=True, whole_vecs=True)
    cob, coi = s[out].split(co, factor=bn * cbb)
    xo, xi = s[out].split(x, factor=xb)
    s[out].reorder(b, cob, *lead, xo, coi, xi)
    par = s[out].fuse(b, cob, *lead)
    if parallel:
        s[out].parallel(par)
    s[Cv].compute_at(s[out], xo)
    _, cl, *sl, ll = s[Cv].op.axis
    s[Cv].reorder(*s[Cv].op.reduce_axis, *sl, cl, ll)
    for ax in sl:
        s[Cv].unroll(ax)
    s[Cv].unroll(cl)
    s[Cv].vectorize(ll)
    if pad is not None:     # rows of the padded input in parallel, each one vectorized
        pa = s[pad].fuse(*pad.op.axis[:-1])
        if parallel:
            s[pad].parallel(pa)
        _vec_split(s, pad, pad.op.axis[-1], _ishape(pad)[-1], target)
