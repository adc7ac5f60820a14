"""Grouped and depthwise 2-D convolutions on CPUs (llvm): one strategy for every group
count, stride and dilation, with the group's epilogue (bias, activation, residual add)
written from the register tile.

Layout stays NCHW (the neighbouring 1x1 convs read and write it); vectors run along the
output row. A register tile is `cb` output channels x `rb` output rows x `pv` vectors of a
row, accumulated over the group's input channels and the kernel taps:

* grouped convs (group width > 1): the `cb` channels are output channels of one group, so
  each input vector loaded feeds `cb` FMAs (weights broadcast) -- the GEMM-like tile;
* depthwise convs (one input channel per group): nothing is shared between channels, so
  the tile is rows x vectors; rows that read the same input row share its loads once the
  taps are unrolled (the tap loop is fully unrolled, LLVM merges equal loads).

The input is padded and split by column phase per tile of rows, right before the tile
uses it: `ph[n, c, r, p, q] = x[n, c, r - pt, q * sw + p - pl]` (zero outside), so every
tap reads a contiguous run of a row at any stride, the padding costs no guard in the
multiply-add loop, and the copy stays in L1 (recomputed for the `(KH - 1) * dh + 1 - sh`
rows that neighbouring tiles overlap; a small plane whose tiles would redo half their
rows is padded whole, once per parallel task). The channel blocks of one group run
inside its row tile, so they share the padded rows. Row vectors are whole registers (a power-of-two part
of one for rows shorter than the target's lanes): the conv computes rows rounded up to
whole vectors over the zero padding and the epilogue stores the real columns. The tile is
sized by `tiling.register_tile` from the target's registers and FMA chains.
"""
from __future__ import annotations

import numpy as np

import tdsl

from .... import tiling
from .. import tag, topi
from . import conv_int8
from .batch import batch, image_shape, outer_fuse, parallel as threads
from .loops import PAR_MIN_MACS_DEPTHWISE, inline_except
from ..stages import ishape
from .width import known, number, round_up

# depthwise register tiles: at most 8 rows x 2 vectors. Wider tiles (2 rows x 7 vectors of
# a 112-wide row) redo more of the padding copy per output.
DW_MAX_ROWS, DW_MAX_VECS = 8, 2
# a group's padded plane up to this size is padded once per parallel task (see schedule)
PLANE_BYTES = 16 * 1024


def applies(g, n):
    """`nn.conv2d` node `n` with groups > 1 and constant weights (float32, static shapes),
    or such a `qnn.conv2d` (uint8 data, int8 weights of zero point 0, constant zero
    points). The batch and the row width may be symbolic (width.py)."""
    x_e, w_e = n.args[:2]
    quantized = n.op == "qnn.conv2d"
    if n.attrs["groups"] == 1 or x_e.type.dtype != ("uint8" if quantized else "float32") \
            or not all(isinstance(d, int) for d in x_e.type.shape[1:-1] + n.type.shape[1:-1]) \
            or g.const_param(w_e) is None:
        return False
    if not quantized:
        return True
    xzi, wzi = g.const_param(n.args[2]), g.const_param(n.args[3])
    return xzi is not None and wzi is not None and w_e.type.dtype == "int8" and not np.any(g.consts[wzi] != 0)


def grouped_conv2d(g, n, tensors):
    """Definition of the conv node `n` that `applies` takes; a quantized one has int32
    products, the padding reading the data's zero point, whose share z * sum(w) the
    epilogue subtracts, as in conv_int8.py."""
    x_e, w_e = n.args[:2]
    a = n.attrs
    groups = a["groups"]
    quantized = n.op == "qnn.conv2d"
    wi = g.const_param(w_e)
    if quantized:
        zero = g.param_tensor(g.const_param(n.args[2]))[()]
    x = g.operand(x_e, tensors)
    N = batch(g, x_e)
    CO, CIG, KH, KW = w_e.type.shape
    (sh, sw), (dh, dw) = a["strides"], a["dilation"]
    pt, pl = a["padding"][0], a["padding"][1]
    OH, OW = g.node_type(n).shape[2:]
    ow = number(OW)        # a symbolic row: a long one for the tile's choice
    cog = CO // groups
    depthwise = cog == 1       # no input vector is shared between output channels
    lanes = g.target.vector_lanes("float32")
    # row vectors of whole registers (or a power-of-two part of one for short rows):
    # a 14-lane vector is split by LLVM into 8 + 4 + 2 lane loads; the lanes past the row
    # compute on padding and are not stored
    wv = min(lanes, 1 << max(ow - 1, 1).bit_length())
    nv = -(-ow // wv)
    if depthwise:
        # rows x vectors; a few channels when a plane is too small to fill the tile
        rb, pv = tiling.register_tile(g.target, OH, nv * wv, whole_rows=True, whole_vecs=True,
                                      max_rows=DW_MAX_ROWS, max_vecs=min(DW_MAX_VECS, nv))
        cb = 1
        acc_budget = 3 * max(g.target.vector_registers, 4) // 4     # as in tiling.register_tile
        if rb * pv < 2 * g.target.fma_chains and OH == rb and pv == nv:
            cb = _divisor_at_most(CO, max(1, min(2 * g.target.fma_chains, acc_budget) // (rb * pv)))
    else:
        cb, pv = tiling.register_tile(g.target, cog, nv * wv, whole_rows=True, whole_vecs=True,
                                      max_vecs=max(1, nv))
        rb = 1
    hp = (OH - 1) * sh + (KH - 1) * dh + 1          # padded rows the windows touch
    # a symbolic row is computed in whole tiles: its last tile, ragged anyway, then needs no
    # guard in the multiply-adds (only the epilogue's store is peeled)
    owp = round_up(OW, wv if isinstance(OW, int) else pv * wv)
    wq = round_up(owp + ((KW - 1) * dw) // sw, wv)   # columns per phase, whole vectors
    ph = topi.phase_split_pad(x, hp, wq, sw, pt, pl, zero if quantized else None)

    def pack(w):
        return np.ascontiguousarray(w.reshape(CO // cb, cb, CIG, KH, KW).transpose(0, 2, 3, 4, 1))
    if quantized:   # int32 weights, packed once: no widening in the multiply-add loop
        Wp = g.derived_param(wi, 2, (CO // cb, CIG, KH, KW, cb), "int32", lambda w: pack(w).astype(np.int32))
    else:
        Wp = g.packed_param(wi, (CO // cb, CIG, KH, KW, cb), pack)
    rc = tdsl.reduce_axis((0, CIG), "rc")
    ky = tdsl.reduce_axis((0, KH), "ky")
    kx = tdsl.reduce_axis((0, KW), "kx")
    per_block = max(cog // cb, 1)

    def conv(b, co, oy, ox):
        # the input channel through the tile's block index: uniform across the tile
        ci = (co // cb) // per_block * CIG + rc if cog > 1 else co * CIG + rc
        v = ph[b, ci, oy * sh + ky * dh, (kx * dw) % sw, ox + (kx * dw) // sw]
        return tdsl.sum((v.astype("int32") if quantized else v) * Wp[co // cb, rc, ky, kx, co % cb], axis=[rc, ky, kx])
    Cv = tdsl.compute((N, CO, OH, owp), conv, name=topi.uname("conv"))
    out = Cv
    if not known(owp == OW):     # rows computed in whole vectors; the epilogue reads the real ones
        out = tdsl.compute((N, CO, OH, OW), lambda b, co, oy, ox: Cv[b, co, oy, ox], name=topi.uname("crop"))
    if quantized:
        sums = conv_int8.weight_sums(g, wi, CO)
        zi = zero.astype("int32")
        crop = out
        out = tdsl.compute((N, CO, OH, OW), lambda b, co, oy, ox: crop[b, co, oy, ox] - zi * sums[co],
                           name=topi.uname("qconv_out"))
    return tag.mark(out, tag.CONV_GROUPED, conv=Cv, pad=ph, cb=cb, rb=rb, pv=pv, wv=wv, lanes=lanes,
                    blocks=per_block, cig=CIG, sh=sh, redo=max(0, (KH - 1) * dh + 1 - sh))


def _divisor_at_most(n, k):
    for d in range(min(n, k), 0, -1):
        if n % d == 0:
            return d
    return 1


def _ph_channels(info):
    """Input channels one parallel task pads: the group's, or the block's for depthwise."""
    return info["cig"] if info["blocks"] > 1 or info["cig"] > 1 else info["cb"]


def fits(out, g):
    """Groups whose output has the anchor's shape (an epilogue of elementwise stages)."""
    return ishape(out) == ishape(g.anchor.tensor)


def schedule(s, out, g, parallel=True):
    """Schedules a group whose anchor is `grouped_conv2d`'s output."""
    info, target = g.anchor.tensor.op.attrs, g.target
    Cv, ph = info["conv"], info["pad"]
    cb, rb, pv, wv = info["cb"], info["rb"], info["pv"], info["wv"]
    inline_except(s, out, [Cv, ph])
    N, CO, OH, OW = image_shape(out)
    if Cv is out:
        Cv = s.cache_write(out, "local")
    b, co, y, x = s[out].op.axis
    cob, coi = s[out].split(co, factor=cb)
    # the channel blocks of one group inside its rows: they share the padded input rows
    grp, blk = s[out].split(cob, factor=info["blocks"])
    yo, yi = s[out].split(y, factor=rb)
    xo, xi = s[out].split(x, factor=pv * wv)
    xv, xl = s[out].split(xi, factor=wv)
    s[out].reorder(b, grp, yo, blk, xo, coi, yi, xv, xl)
    s[out].vectorize(xl)
    tasks = N * CO // (cb * info["blocks"])
    plane = int(np.prod([topi.dim(d) for d in ph.shape[2:]])) * 4 * _ph_channels(info)
    if plane <= PLANE_BYTES and tasks >= 4 * target.num_cores and 2 * info["redo"] >= rb * info["sh"]:
        # a small plane whose row tiles would pad half their rows again (short tiles,
        # tall kernels: 2 rows of a 5x5 redo 4): pad the group's plane once per task
        outer = outer_fuse(s, out, [b, grp])
    else:
        outer = outer_fuse(s, out, [b, grp, yo])
    macs = N * CO * OH * OW * int(np.prod([topi.dim(r.dom.extent) for r in Cv.op.reduce_axis]))
    if parallel:
        threads(s, out, outer, macs, PAR_MIN_MACS_DEPTHWISE)
    s[ph].compute_at(s[out], outer)
    pq = ph.op.axis[-1]
    s[ph].vectorize(s[ph].split(pq, factor=wv)[1])
    s[Cv].compute_at(s[out], xo)
    _, cl, yl, xl2 = s[Cv].op.axis
    rc, ky, kx = s[Cv].op.reduce_axis
    xlv, xll = s[Cv].split(xl2, factor=wv)
    s[Cv].reorder(rc, ky, kx, cl, yl, xlv, xll)
    for ax in (ky, kx, cl, yl, xlv):
        s[Cv].unroll(ax)
    s[Cv].vectorize(xll)
