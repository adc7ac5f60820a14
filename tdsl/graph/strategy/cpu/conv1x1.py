"""1x1 convolutions as a matrix product along the flattened image: NCHW in, NCHW out.

Out[co, p] = sum_ci W[co, ci] * X[ci, p] with p the flattened output pixel: a register
tile of `cb` output channels x `pv` vectors of pixels accumulates over the input channels,
each step loading `pv` contiguous pixel vectors and broadcasting `cb` weights (packed
(CO/cb, CI, cb)); the epilogue (bias, BN, activation, residual add) stores whole vectors
of the NCHW output, with no transposing unpack.

The input is read in place when it is a stride-1 image of whole vectors. Otherwise one pass
packs it (N, CI, P) with P the output pixels rounded up to whole tiles: a stride picks
every sh-th row and sw-th column (resnet50's downsample), and the padding pixels are zeros,
so the micro-kernel never needs a guard (7x7 = 49 and 14x14 = 196 pixels, squeezenet's
13x13 and 55x55). The pack costs one read of the input per conv, 1/CO of its multiply-adds.
"""
from __future__ import annotations

import numpy as np

import tdsl

from .... import tiling
from .. import tag, topi
from ..stages import stages_of
from .batch import batch, image_shape, image_weights, outer_fuse, parallel as threads
from .loops import PAR_MIN_MACS, inline_except, par_vec, vec_split

MIN_ACC = 8         # fewer accumulators per tile (a prime CO): the blocked conv is better
MIN_PIXELS_PER_LANE = 2     # images smaller than two vectors: mostly padding
# Images that need the pixel pack (unaligned, strided) take this path when the blocked
# NCHW[x]c conv's register tile (rows must divide the output width) is latency-bound, or
# for expanding convs (CO >= PACK_MIN_EXPANSION * CI) whose blocked tile has fewer
# accumulators than the target has FMA chains, or whose packed image is at most
# PACK_MAX_PADDING padding over a reduction of PACK_MIN_REDUCTION_VECS vectors or more.
# The pack pays off when its cost is shared by many output channels; an image padded
# by more than a quarter (7x7 packed to 64 of 49 pixels) or a reducing conv (the pixel panel
# is re-read from L2 for every few output channels) stays faster with the blocked conv, as
# does a reduction of fewer than PACK_MIN_REDUCTION_VECS vectors.
PACK_MIN_EXPANSION = 4
PACK_MAX_PADDING = 0.25
PACK_MIN_REDUCTION_VECS = 4
# ... and whenever the reduction is this many vectors or shorter: the blocked conv's NCHW
# unpack is one transposing store per output element, against CI multiply-adds, so with
# so few input channels (squeezenet's 16->64 expand) the unpack dominates the conv.
SHORT_REDUCTION_VECS = 1


def applies(g, n, blocked_acc=MIN_ACC):
    """Whether this path takes conv node `n`; `blocked_acc`: the accumulators of the
    blocked conv's register tile for it (fewer than MIN_ACC: this path even where the
    blocked conv usually wins)."""
    a = n.attrs
    CO, CI, KH, KW = n.args[1].type.shape
    OH, OW = n.type.shape[2:]
    lanes = g.target.vector_lanes(n.args[0].type.dtype)
    if (KH, KW) != (1, 1) or any(a["padding"]) or tuple(a["dilation"]) != (1, 1) or a["groups"] != 1:
        return False
    if OH * OW < MIN_PIXELS_PER_LANE * lanes:
        return False
    hw = OH * OW
    in_place = _in_place(a, hw, lanes)
    cb, pv = _tile(g.target, CO, hw, in_place)
    if not in_place:
        chains = g.target.fma_chains
        latency_bound = blocked_acc < min(MIN_ACC, chains)
        short = CI <= SHORT_REDUCTION_VECS * lanes
        padding = -(-hw // (pv * lanes)) * pv * lanes / hw - 1
        little_padding = padding <= PACK_MAX_PADDING and CI >= PACK_MIN_REDUCTION_VECS * lanes
        expanding = CO >= PACK_MIN_EXPANSION * CI and (blocked_acc < chains or little_padding)
        if not latency_bound and not short and not expanding:
            return False
    return cb * pv >= MIN_ACC


def _in_place(attrs, pixels, lanes):
    return tuple(attrs["strides"]) == (1, 1) and pixels % lanes == 0


def _tile(target, co, pixels, whole_vecs):
    # whole_vecs: an aligned image is read in place only if the tile divides it
    return tiling.register_tile(target, co, pixels, whole_rows=True, whole_vecs=whole_vecs)


def conv1x1(g, n, x, wi):
    N, W = batch(g, n.args[0]), n.args[0].type.shape[3]
    CO = n.args[1].type.shape[0]
    CI = x.shape[1]         # a size variable in a kernel generic in it
    OH, OW = n.type.shape[2:]
    sh, sw = n.attrs["strides"]
    hw = OH * OW
    dt = n.args[0].type.dtype
    lanes = g.target.vector_lanes(dt)
    cb, pv = _tile(g.target, CO, hw, _in_place(n.attrs, hw, lanes))
    tile = pv * lanes
    hwp = -(-hw // tile) * tile

    def pack(w):
        return np.ascontiguousarray(w.reshape(CO // cb, cb, w.shape[1]).transpose(0, 2, 1))
    Wp = g.packed_param(wi, (CO // cb, CI, cb), pack)
    if (sh, sw) == (1, 1) and hwp == hw:
        xp = None

        def xin(b, ci, p):
            return x[b, ci, p // W, p % W]
    else:
        f0 = tdsl.const(0, dt)
        xp = tdsl.compute((N, CI, hwp), lambda b, ci, p: tdsl.if_then_else(
            p < hw, x[b, ci, (p // OW) * sh, (p % OW) * sw], f0), name=topi.uname("pack_pixels"))

        def xin(b, ci, p):
            return xp[b, ci, p]
    ci = tdsl.reduce_axis((0, CI), "ci")
    Cv = tdsl.compute((N, CO, hwp), lambda b, co, p: tdsl.sum(
        xin(b, ci, p) * image_weights(Wp, 3, b)[co // cb, ci, co % cb], axis=ci),
                      name=topi.uname("conv"))
    O = tdsl.compute((N, CO, OH, OW), lambda b, co, y, xx: Cv[b, co, y * OW + xx], name=topi.uname("unflat"))
    return tag.mark(O, tag.CONV1X1, conv=Cv, pack=xp, cb=cb, pv=pv, lanes=lanes)


def schedule(s, out, g, parallel=True):
    info, target = g.anchor.tensor.op.attrs, g.target
    Cv, xp, cb, pv, lanes = info["conv"], info["pack"], info["cb"], info["pv"], info["lanes"]
    inline_except(s, out, [Cv] + ([xp] if xp is not None else []))
    for t in stages_of(out):
        if t.op.reduce_axis and t is not Cv and t is not out:
            par_vec(s, t, target, True, parallel)
    b, co, y, x = out.op.axis
    p = s[out].fuse(y, x)
    cob, coi = s[out].split(co, factor=cb)
    po, pi = s[out].split(p, factor=lanes * pv)
    pvo, pl = s[out].split(pi, factor=lanes)
    if _pixels_outer(target, Cv):
        s[out].reorder(b, po, cob, coi, pvo, pl)
        par = outer_fuse(s, out, [b, po, cob])
    else:
        s[out].reorder(b, cob, po, coi, pvo, pl)
        par = outer_fuse(s, out, [b, cob, po])
    s[out].vectorize(pl)
    macs = int(np.prod(image_shape(Cv))) * topi.dim(Cv.op.reduce_axis[0].dom.extent)
    if parallel:
        threads(s, out, par, macs, PAR_MIN_MACS)
    s[Cv].compute_at(s[out], par)
    _, cl, pc = s[Cv].op.axis
    (ci,) = s[Cv].op.reduce_axis
    pco, pci = s[Cv].split(pc, factor=lanes)
    s[Cv].reorder(ci, cl, pco, pci)
    s[Cv].unroll(cl)
    s[Cv].unroll(pco)
    s[Cv].vectorize(pci)
    if xp is not None:      # the packed pixels of each input channel, channels in parallel
        rows = s[xp].fuse(*xp.op.axis[:-1])
        if parallel and macs >= PAR_MIN_MACS:
            s[xp].parallel(rows)
        vec_split(s, xp, xp.op.axis[-1], topi.dim(xp.shape[-1]), target)


def _pixels_outer(target, Cv):
    """Whether tiles of pixels take turns outside blocks of output channels: each tile's
    input panel (a run of pixels from every input plane) is then read once and stays in
    L1 for every block, while the packed weights are read once a tile, contiguously. The
    other order reads the weights once but the whole image once a block of channels,
    from L3 (one stream per input plane) when the image outgrows L2; so pixels go outside
    once the image takes more than half of L2."""
    ci = topi.dim(Cv.op.reduce_axis[0].dom.extent)
    return ci * topi.dim(Cv.shape[2]) * np.dtype(Cv.dtype).itemsize > target.cache_bytes(2) // 2
