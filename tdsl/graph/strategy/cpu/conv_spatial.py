"""Direct conv2d vectorized along the output row, for convs with few input channels (the
stem of a CNN: 3 channels, 7x7 s2 or 3x3 s2; squeezenet's first 3x3 expand), and for
those whose blocked-conv register tile would be too small.

The NCHW[x]c conv of conv_blocked.py does few multiply-adds per output element
there (3 * 3 * 3 = 27 in a 3x3 stem), so unpacking its blocked output back to NCHW (a
transposing store per element) costs as much as the conv. Here the output stays NCHW:
a register tile of `cb` output channels x `pv` vectors of one output row accumulates
over the taps, each tap loading `pv` contiguous vectors of the input row and broadcasting
`cb` weights. A column stride is made contiguous by storing the padded input split by
column phase, (N, CI, Hp, sw, Wq) with [.., r, p, q] = padded[.., r, q * sw + p] (one
pass over the small input). Rows whose width is not a whole number of tiles are computed
into a padded conv row; the epilogue stores only the real columns.
"""
from __future__ import annotations

import numpy as np

import tdsl

from .... import tiling
from .. import tag, topi
from ..stages import stages_of
from .batch import batch, image_weights, outer_fuse
from .loops import PAR_MIN_ELEMS, inline_except, par_vec, vec_split
from .width import number, round_up, row_extent

# Input channels up to which this beats the blocked conv: stems (3), and squeezenet's 3x3
# 16->64 at 55x55; from 32 input channels on (32->128 at 27x27) the blocked conv wins.
MAX_CI = 16


MIN_ACC = 8             # a blocked-conv register tile with fewer accumulators is latency-bound


def applies(g, n, blocked_acc=MIN_ACC):
    """Stems; and any conv whose blocked-conv register tile has fewer than MIN_ACC
    accumulators (`blocked_acc`) while this one's has enough."""
    a = n.attrs
    CO, CI, KH, KW = n.args[1].type.shape
    OW = number(n.type.shape[3])       # a symbolic row reads as a long one
    lanes = g.target.vector_lanes(n.args[0].type.dtype)
    if a["groups"] != 1 or KH * KW == 1 or OW < lanes or n.args[0].type.dtype != "float32":
        return False
    if CI <= MAX_CI:
        return True
    cb, pv = tiling.register_tile(g.target, CO, OW, whole_rows=True)
    return blocked_acc < min(MIN_ACC, g.target.fma_chains) and cb * pv >= MIN_ACC


def conv2d_rows(g, n, x, wi):
    a = n.attrs
    N = batch(g, n.args[0])
    CO, CI, KH, KW = n.args[1].type.shape
    (sh, sw), (dh, dw) = a["strides"], a["dilation"]
    pt, pl = a["padding"][0], a["padding"][1]
    OH, OW = g.node_type(n).shape[2:]
    lanes = g.target.vector_lanes("float32")
    cb, pv = tiling.register_tile(g.target, CO, number(OW), whole_rows=True)
    row = pv * lanes
    owp = round_up(OW, row)                    # conv row padded to whole tiles

    def pack(w):
        return np.ascontiguousarray(w.reshape(CO // cb, cb, CI, KH, KW).transpose(0, 2, 3, 4, 1))
    Wp = g.packed_param(wi, (CO // cb, CI, KH, KW, cb), pack)
    hp = (OH - 1) * sh + (KH - 1) * dh + 1
    wq = owp + ((KW - 1) * dw) // sw
    ph = topi.phase_split_pad(x, hp, wq, sw, pt, pl)
    ci = tdsl.reduce_axis((0, CI), "ci")
    ky = tdsl.reduce_axis((0, KH), "ky")
    kx = tdsl.reduce_axis((0, KW), "kx")
    Cv = tdsl.compute((N, CO, OH, owp), lambda b, co, oy, ox: tdsl.sum(
        ph[b, ci, oy * sh + ky * dh, (kx * dw) % sw, ox + (kx * dw) // sw]
        * image_weights(Wp, 5, b)[co // cb, ci, ky, kx, co % cb],
        axis=[ci, ky, kx]), name=topi.uname("conv"))
    O = tdsl.compute((N, CO, OH, OW), lambda b, co, oy, ox: Cv[b, co, oy, ox], name=topi.uname("crop"))
    return tag.mark(O, tag.CONV_ROWS, conv=Cv, pad=ph, cb=cb, pv=pv, lanes=lanes)


def schedule(s, out, g, parallel=True):
    info, target = g.anchor.tensor.op.attrs, g.target
    Cv, ph, cb, pv, lanes = info["conv"], info["pad"], info["cb"], info["pv"], info["lanes"]
    inline_except(s, out, [Cv, ph])
    for t in stages_of(out):
        if t.op.reduce_axis and t is not Cv and t is not out:
            par_vec(s, t, target, True, parallel)
    b, co, oy, ox = out.op.axis
    cob, coi = s[out].split(co, factor=cb)
    oxo, oxi = s[out].split(ox, factor=pv * lanes)
    s[out].reorder(b, cob, oy, oxo, coi, oxi)
    oxv, oxl = s[out].split(oxi, factor=lanes)
    s[out].vectorize(oxl)
    rows = outer_fuse(s, out, [b, cob, oy])
    if parallel:
        s[out].parallel(rows)
    s[Cv].compute_at(s[out], oxo)
    _, cl, _, xl = s[Cv].op.axis
    rci, rky, rkx = s[Cv].op.reduce_axis
    xlo, xli = s[Cv].split(xl, factor=lanes)
    s[Cv].reorder(rci, rky, rkx, cl, xlo, xli)
    s[Cv].unroll(rkx)
    s[Cv].unroll(cl)
    s[Cv].unroll(xlo)
    s[Cv].vectorize(xli)
    pa = s[ph].fuse(*ph.op.axis[:-1])
    if parallel and int(np.prod([topi.dim(d) for d in ph.shape])) >= PAR_MIN_ELEMS:
        s[ph].parallel(pa)
    vec_split(s, ph, ph.op.axis[-1], row_extent(ph), target)
