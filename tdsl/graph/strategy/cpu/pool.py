"""2-D max and average pools as two separable passes without reductions: a column
max/sum over the window's rows into one padded output row (contiguous loads), then the
max/sum over the window's columns. Max pool reads -inf outside the image, so padding and
ceil mode stay exact. Average pool is taken only when every window lies inside the image
(no padding; densenet's 2x2 s2 transitions): no bounds checks and a constant divisor,
where the generic definition checks bounds per tap and divides by a per-pixel count.

A column stride reads the column pass's row with that stride (a gather per output vector
and tap); for windows wider than two columns a row pass at every column first costs less
than kw gathers (ROW_PASS_MIN_KW); a two-column window reads its taps directly, since
two gathers cost less than an extra pass over the row.
"""
from __future__ import annotations

import numpy as np

import tdsl

from .. import tag, topi
from ..stages import ishape, stages_of
from .batch import batch, batch_only, image_shape, outer_fuse, parallel as threads
from .loops import PAR_MIN_ELEMS, inline_except, par_vec, vec_split


ROW_PASS_MIN_KW = 3


def applies(g, n):
    """nn.max_pool2d and nn.avg_pool2d of float32; an average pool only where every window
    lies inside the image. The batch may be symbolic."""
    a = n.attrs
    (kh, kw), (sh, sw), (dh, dw) = a["pool_size"], a["strides"], a["dilation"]
    H, W = n.args[0].type.shape[2:]
    OH, OW = n.type.shape[2:]
    if n.args[0].type.dtype != "float32" or not batch_only(g, n):
        return False
    return n.op == "nn.max_pool2d" or not (any(a["padding"]) or (OH - 1) * sh + (kh - 1) * dh + 1 > H
                                           or (OW - 1) * sw + (kw - 1) * dw + 1 > W)


def pool2d_sep(g, n, tensors):
    x, kind = g.operand(n.args[0], tensors), n.op[3:6]
    a = n.attrs
    (kh, kw), (sh, sw), (dh, dw) = a["pool_size"], a["strides"], a["dilation"]
    pt, pl = a["padding"][0], a["padding"][1]
    N, (_, C, H, W) = batch(g, n.args[0]), n.args[0].type.shape
    OH, OW = n.type.shape[2:]
    wn = (OW - 1) * sw + (kw - 1) * dw + 1        # padded columns the windows touch
    if kind == "max":
        low = tdsl.const(float("-inf"), "float32")

        def combine(u, v):
            return tdsl.max(u, v)

        def tap(b, ch, iy, xp):
            conds = [iy >= 0, iy < H, xp >= pl, xp < W + pl]
            return tdsl.if_then_else(tdsl.all(*conds), x[b, ch, iy, xp - pl], low)

        def finish(v):
            return v
    else:
        inv = topi.c(1.0 / (kh * kw), "float32")

        def combine(u, v):
            return u + v

        def tap(b, ch, iy, xp):
            return x[b, ch, iy, xp]

        def finish(v):
            return v * inv

    def col(b, ch, oy, xp):
        v = None
        for r in range(kh):
            t = tap(b, ch, oy * sh + (r * dh - pt), xp)
            v = t if v is None else combine(v, t)
        return v
    vm = tdsl.compute((N, C, OH, wn), col, name=topi.uname("pool_col"))

    def row(b, ch, oy, xq):
        v = None
        for r in range(kw):
            t = vm[b, ch, oy, xq + r * dw]
            v = t if v is None else combine(v, t)
        return v
    name = topi.uname(f"{kind}_pool")
    if sw == 1 or kw < ROW_PASS_MIN_KW:
        O = tdsl.compute((N, C, OH, OW), lambda b, ch, oy, ox: finish(row(b, ch, oy, ox * sw)), name=name)
        return tag.mark(O, tag.POOL_SEP, col=vm, row=None)
    # strided: the row pass at every column (contiguous), then every sw-th column of it
    hm = tdsl.compute((N, C, OH, (OW - 1) * sw + 1), row, name=topi.uname("pool_row"))
    O = tdsl.compute((N, C, OH, OW), lambda b, ch, oy, ox: finish(hm[b, ch, oy, ox * sw]), name=name)
    return tag.mark(O, tag.POOL_SEP, col=vm, row=hm)


def fits(out, g):
    return len(out.shape) == 4


def schedule(s, out, g, parallel=True):
    """One output row per iteration of the parallel loop; its padded column-max row is
    computed right before it, both vectorized along the row."""
    info, target = g.anchor.tensor.op.attrs, g.target
    vm, hm = info["col"], info["row"]
    inline_except(s, out, [vm] + ([hm] if hm is not None else []))
    for t in stages_of(out):
        if t.op.reduce_axis and t is not out:
            par_vec(s, t, target, True, parallel)
    b, ch, oy, ox = out.op.axis
    shape = image_shape(out)
    rows = outer_fuse(s, out, [b, ch, oy])
    vec_split(s, out, ox, shape[-1], target)
    if parallel:
        threads(s, out, rows, int(np.prod(shape)), PAR_MIN_ELEMS)
    for t in (vm, hm):
        if t is None:
            continue
        s[t].compute_at(s[out], rows)
        vec_split(s, t, t.op.axis[-1], ishape(t)[-1], target)
